#!/usr/bin/env python3
"""Bounded loopback load test of `ftchat serve` (or any OpenAI-compatible server).

For each concurrency level (default 1, 2, 4, 8, 16) it sends the same set
of streamed, greedy chat requests with a fixed max_tokens from that many
client threads, and reports:
  - aggregate tokens/s: completion tokens of all requests / wall time of the level
  - p50 / p99 time to first token (request sent -> first content delta)
  - per-request decode tokens/s (after the first token), median
and the ratio aggregate(highest level) / aggregate(1). From the server's
/metrics (ftchat serve) it also reports per level how the batcher's steps
went: steps, tokens sampled per sampling step (does a step carry every
active request?), the share drawn by the step's one sampling call, and the
mean step time by phase (forward / wait / sample / other; "wait", the
device finishing the forward, only when the server runs with
FTCHAT_BATCH_PROFILE=1, which --profile sets for a server it starts).

With --ftchat BIN it starts `BIN serve --port 0 ...` itself, once per
--kv-dtypes entry (e.g. bf16,fp8_e4m3), and reads from /metrics how many
tokens the KV pool holds, so how many concurrent --conv-tokens (32K)
conversations each pool fits. Without it, --url names a running server.

Standard library only (runs where only python3 and a static ftchat are).

  python3 scripts/loadtest.py --ftchat ./ftchat --model M.gguf --device cpu --max-tokens 16
  python3 scripts/loadtest.py --url http://127.0.0.1:8080 --model-id smollm2
"""

import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

PROMPTS = [
    "Write a long story about a dragon who learns to code.",
    "Explain how a CPU executes an instruction, step by step.",
    "Describe a walk through a forest in autumn.",
    "List the planets of the solar system and one fact about each.",
    "Write a letter to a friend about a trip to the mountains.",
    "Explain what a hash table is and how it handles collisions.",
    "Tell the history of the bicycle in a few paragraphs.",
    "Describe how bread is made, from flour to loaf.",
]


def percentile(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    k = (len(v) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


class Target:
    def __init__(self, url, key, model):
        u = urllib.parse.urlparse(url)
        self.host, self.port = u.hostname, u.port or 80
        self.prefix = u.path.rstrip("/")
        if self.prefix.endswith("/v1"):
            self.prefix = self.prefix[:-3]
        self.key, self.model = key, model

    def conn(self, timeout=600):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def headers(self):
        h = {"Content-Type": "application/json"}
        if self.key:
            h["Authorization"] = "Bearer " + self.key
        return h

    def get(self, path):
        c = self.conn(30)
        try:
            c.request("GET", self.prefix + path, headers=self.headers())
            r = c.getresponse()
            return r.status, r.read().decode("utf-8", "replace")
        finally:
            c.close()

    def metrics(self):
        status, body = self.get("/metrics")
        out = {}
        if status != 200:
            return out
        for line in body.splitlines():
            m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$", line)
            if m and not line.startswith("#"):
                try:
                    out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
                except ValueError:
                    pass
        return out

    def chat(self, prompt, max_tokens):
        """One streamed greedy request: (ttft_s, total_s, completion_tokens, error)."""
        body = json.dumps({
            "model": self.model, "stream": True, "stream_options": {"include_usage": True},
            "temperature": 0, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": prompt}],
        })
        c = self.conn()
        t0 = time.perf_counter()
        ttft, tokens, chunks = None, None, 0
        try:
            c.request("POST", self.prefix + "/v1/chat/completions", body=body, headers=self.headers())
            r = c.getresponse()
            if r.status != 200:
                return None, time.perf_counter() - t0, 0, "HTTP %d: %s" % (r.status, r.read()[:200].decode("utf-8", "replace"))
            for raw in r:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    break
                ev = json.loads(data)
                if ev.get("usage"):
                    tokens = ev["usage"].get("completion_tokens")
                for ch in ev.get("choices") or []:
                    d = ch.get("delta") or {}
                    if d.get("content") or d.get("reasoning_content") or d.get("tool_calls"):
                        chunks += 1
                        if ttft is None:
                            ttft = time.perf_counter() - t0
            total = time.perf_counter() - t0
            if tokens is None:
                tokens = chunks  # a server without include_usage: one token per delta, roughly
            return ttft, total, tokens, None
        except (OSError, http.client.HTTPException, ValueError) as e:
            return None, time.perf_counter() - t0, 0, repr(e)
        finally:
            c.close()


def cpu_seconds(pid):
    """utime + stime of a local process (Linux), or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, TypeError):
        return None


PHASES = ("forward", "wait", "sample", "other")


def step_stats(m0, m1):
    """Batcher step counters between two /metrics snapshots (ftchat serve), or None."""
    def d(k):
        return m1.get(k, 0.0) - m0.get(k, 0.0)
    if "ftchat_batch_steps_total" not in m1:
        return None
    steps, dsteps = d("ftchat_batch_steps_total"), d("ftchat_batch_decode_steps_total")
    tokens, together = d("ftchat_decode_tokens_total"), d("ftchat_batch_sampled_together_total")
    out = {"steps": int(steps), "decode_steps": int(dsteps),
           "tokens_per_decode_step": tokens / dsteps if dsteps else float("nan"),
           "sampled_together": together / tokens if tokens else float("nan")}
    for ph in PHASES:
        v = d('ftchat_batch_step_seconds_total{phase="%s"}' % ph)
        out["step_ms_" + ph] = v / steps * 1e3 if steps else float("nan")
    # GPU: recorded-step chunks per step by how they were issued; captures
    # that keep up with the steps mean the steps are not replayed.
    for kind in ("replay", "capture", "direct"):
        k = 'ftchat_gpu_graph_flushes_total{kind="%s"}' % kind
        if k in m1:
            out["graph_" + kind + "_per_step"] = d(k) / steps if steps else float("nan")
    return out


def run_level(t, conc, n, max_tokens, pid=None):
    jobs = [PROMPTS[i % len(PROMPTS)] for i in range(n)]
    lock = threading.Lock()
    results = []

    def worker():
        while True:
            with lock:
                if not jobs:
                    return
                p = jobs.pop(0)
            res = t.chat(p, max_tokens)
            with lock:
                results.append(res)

    threads = [threading.Thread(target=worker) for _ in range(conc)]
    m0 = t.metrics()
    c0 = cpu_seconds(pid)
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    c1 = cpu_seconds(pid)
    steps = step_stats(m0, t.metrics())
    cpu = c1 - c0 if c0 is not None and c1 is not None else None
    errors = [r[3] for r in results if r[3]]
    ok = [r for r in results if not r[3]]
    tokens = sum(r[2] for r in ok)
    ttfts = [r[0] for r in ok if r[0] is not None]
    decode = [(r[2] - 1) / (r[1] - r[0]) for r in ok if r[0] is not None and r[2] > 1 and r[1] > r[0]]
    return {
        "concurrency": conc, "requests": n, "ok": len(ok), "errors": errors[:3], "n_errors": len(errors),
        "wall_s": wall, "tokens": tokens, "agg_tok_s": tokens / wall if wall > 0 else 0.0,
        "ttft_p50_ms": percentile(ttfts, 50) * 1e3, "ttft_p99_ms": percentile(ttfts, 99) * 1e3,
        "req_decode_tok_s_p50": statistics.median(decode) if decode else float("nan"),
        "server_cpu_s": cpu, "tok_per_cpu_s": tokens / cpu if cpu else float("nan"),
        "batch_steps": steps,
    }


def start_server(args, dtype):
    cmd = [args.ftchat, "serve", "--port", "0", "--model", args.model, "--parallel", str(max(args.levels)),
           "--queue", str(max(16, 2 * max(args.levels))), "--prefix-cache", "0"]
    if args.device:
        cmd += ["--device", args.device]
    if dtype:
        cmd += ["--kv-cache-dtype", dtype]
    cmd += args.serve_args
    print("# starting:", " ".join(cmd), flush=True)
    env = dict(os.environ, NO_PROXY="*", no_proxy="*")
    if args.profile:
        env["FTCHAT_BATCH_PROFILE"] = "1"
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, text=True)
    deadline = time.time() + args.start_timeout
    line_re = re.compile(r"on (http://\S+)")
    startup = ""
    while time.time() < deadline:
        line = p.stderr.readline()
        if not line:
            if p.poll() is not None:
                raise SystemExit("ftchat serve exited (rc %s) before listening" % p.returncode)
            continue
        sys.stderr.write("# serve: " + line)
        m = line_re.search(line)
        if m:
            startup = line.strip()
            # Keep draining stderr so the server never blocks on a full pipe.
            # With --profile the batcher's profile lines are echoed.
            def drain():
                for l in p.stderr:
                    if args.profile and "batch profile" in l:
                        sys.stderr.write("# serve: " + l)
            threading.Thread(target=drain, daemon=True).start()
            return p, m.group(1), startup
    p.kill()
    raise SystemExit("ftchat serve did not start within %ds" % args.start_timeout)


def bench(t, args, label, pid=None):
    m = t.metrics()
    cap = m.get("ftchat_kv_tokens_capacity")
    dtype = next((re.search(r'dtype="([^"]+)"', k).group(1) for k in m if k.startswith("ftchat_kv_info{") and 'dtype="' in k), label or "?")
    print("\n## KV %s" % dtype, flush=True)
    if cap:
        print("pool: %d tokens (%s B/token, %.2f GiB) -> %d concurrent %d-token conversations" % (
            cap, int(m.get("ftchat_kv_bytes_per_token", 0)), m.get("ftchat_kv_pool_bytes", 0) / 2**30,
            int(cap // args.conv_tokens), args.conv_tokens))
    # Warm-up (first-use costs: CUDA graphs, page faults), not measured.
    t.chat(PROMPTS[0], min(8, args.max_tokens))
    rows = []
    print("| concurrency | requests | tokens | wall s | aggregate tok/s | TTFT p50 ms | TTFT p99 ms | per-request decode tok/s (p50) | server tok/cpu-s | errors |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for c in args.levels:
        r = run_level(t, c, max(args.requests_min, args.requests_per_conc * c), args.max_tokens, pid)
        rows.append(r)
        print("| %d | %d | %d | %.1f | %.1f | %.0f | %.0f | %.1f | %.1f | %d |" % (
            c, r["requests"], r["tokens"], r["wall_s"], r["agg_tok_s"], r["ttft_p50_ms"], r["ttft_p99_ms"],
            r["req_decode_tok_s_p50"], r["tok_per_cpu_s"], r["n_errors"]), flush=True)
        for e in r["errors"]:
            print("#   error:", e)
    if any(r["batch_steps"] for r in rows):
        print("\nbatcher steps (from /metrics; step ms are means over all steps, prefill included):")
        print("| concurrency | steps | sampling steps | tokens per sampling step | drawn by one call per step | step ms: forward | wait | sample | other | graph chunks per step: replayed / captured / direct |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            b = r["batch_steps"]
            if b:
                g = "/".join("%.2f" % b["graph_%s_per_step" % k] for k in ("replay", "capture", "direct") if "graph_%s_per_step" % k in b) or "-"
                print("| %d | %d | %d | %.2f | %.0f%% | %.3f | %.3f | %.3f | %.3f | %s |" % (
                    r["concurrency"], b["steps"], b["decode_steps"], b["tokens_per_decode_step"], 100 * b["sampled_together"],
                    b["step_ms_forward"], b["step_ms_wait"], b["step_ms_sample"], b["step_ms_other"], g))
    base = next((r for r in rows if r["concurrency"] == 1), None)
    top = rows[-1]
    ratio = top["agg_tok_s"] / base["agg_tok_s"] if base and base["agg_tok_s"] > 0 else float("nan")
    print("aggregate(%d) / aggregate(1) = %.2fx%s" % (top["concurrency"], ratio, " (issue 14 asks >= 8x on the GPU)"))
    # The wall-clock aggregate includes each wave's prefill and time to
    # first token; the decode phase alone is concurrency x the median
    # per-request decode rate.
    dec = float("nan")
    if base and base["req_decode_tok_s_p50"] > 0:
        dec = top["concurrency"] * top["req_decode_tok_s_p50"] / base["req_decode_tok_s_p50"]
        print("decode phase: %d x %.1f tok/s = %.1f tok/s, %.2fx concurrency 1's %.1f" % (
            top["concurrency"], top["req_decode_tok_s_p50"], top["concurrency"] * top["req_decode_tok_s_p50"], dec,
            base["req_decode_tok_s_p50"]))
    return {"dtype": dtype, "kv_tokens_capacity": cap, "conversations": int(cap // args.conv_tokens) if cap else None,
            "levels": rows, "ratio": ratio, "decode_ratio": dec,
            "metrics": {k: v for k, v in m.items() if k.startswith("ftchat_kv")}}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="a running server (http://host:port or .../v1)")
    ap.add_argument("--ftchat", help="start this ftchat binary's `serve` instead (--model needed)")
    ap.add_argument("--model", help="model for --ftchat serve")
    ap.add_argument("--model-id", default="", help="the model name sent in requests (default: the server's first /v1/models id)")
    ap.add_argument("--api-key", default=os.environ.get("FTCHAT_API_KEY", ""))
    ap.add_argument("--device", default="", help="--device for serve (cpu, cuda)")
    ap.add_argument("--kv-dtypes", default="", help="comma list of --kv-cache-dtype values, one server run each (with --ftchat)")
    ap.add_argument("--levels", default="1,2,4,8,16", help="concurrency levels")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--requests-per-conc", type=int, default=2, help="requests per level = this x concurrency")
    ap.add_argument("--requests-min", type=int, default=4)
    ap.add_argument("--conv-tokens", type=int, default=32768, help="conversation length for the pool-capacity line")
    ap.add_argument("--start-timeout", type=int, default=300)
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--profile", action="store_true",
                    help="start the server with FTCHAT_BATCH_PROFILE=1 (each step waits for the device after the forward, "
                         "so the step table's 'wait' column is device time; its stderr lines are echoed with '# serve:')")
    ap.add_argument("serve_args", nargs="*", help="after --: more flags for ftchat serve (e.g. -- --gpu-memory 40GiB)")
    args = ap.parse_args()
    args.levels = [int(x) for x in args.levels.split(",") if x]
    if not args.url and not args.ftchat:
        ap.error("give --url or --ftchat")
    if args.ftchat and not args.model:
        ap.error("--ftchat needs --model")

    with open("/proc/cpuinfo") as f:
        cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
    print("# loadtest %s, CPU %s x%d, levels %s, max_tokens %d, greedy, streamed" % (
        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), cpu, os.cpu_count(), args.levels, args.max_tokens))
    results = []
    dtypes = args.kv_dtypes.split(",") if args.kv_dtypes else [""]
    for dt in dtypes:
        proc = None
        try:
            if args.ftchat:
                proc, url, startup = start_server(args, dt)
            else:
                url = args.url
            t = Target(url, args.api_key, args.model_id)
            if not t.model:
                status, body = t.get("/v1/models")
                t.model = json.loads(body)["data"][0]["id"] if status == 200 else "default"
            results.append(bench(t, args, dt, proc.pid if proc else None))
        finally:
            if proc:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
    if len(results) > 1:
        print("\n## KV pools")
        print("| dtype | pool tokens | concurrent %d-token conversations | aggregate tok/s at %d | ratio to 1 |" % (args.conv_tokens, args.levels[-1]))
        print("|---|---|---|---|---|")
        for r in results:
            print("| %s | %s | %s | %.1f | %.2fx |" % (r["dtype"], int(r["kv_tokens_capacity"] or 0), r["conversations"],
                                                     r["levels"][-1]["agg_tok_s"], r["ratio"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    failed = sum(l["n_errors"] for r in results for l in r["levels"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
