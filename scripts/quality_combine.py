#!/usr/bin/env python3
"""Combines a stopped `ftchat bench quality` run with its resumption.

A run stopped after K windows leaves its running results in the progress
lines of its stderr log ("window K/N: T tokens scored, ...; SPEC: ppl_ref ..
ppl .. kld .. top1 ..;"). `ftchat bench quality --skip-windows K --json-file
F` scores the remaining windows. Both parts score disjoint tokens, so the
totals combine exactly, weighted by tokens scored: perplexity through the
mean negative log-likelihood (log ppl), mean KLD and top-1 agreement
directly. (Median / p99 / max KLD do not combine and are not printed.)

Usage: scripts/quality_combine.py STOPPED.log RESUMED.json
"""
import json
import math
import re
import sys


def last_progress(path):
    line = None
    with open(path) as f:
        for l in f:
            if l.startswith("window "):
                line = l
    if line is None:
        sys.exit(f"{path}: no progress line")
    m = re.match(r"window (\d+)/(\d+): (\d+) tokens scored", line)
    done, total, n = int(m.group(1)), int(m.group(2)), int(m.group(3))
    specs = {}
    for name, pr, p, k, a in re.findall(
        r" ([^;:]+(?: \(static scales\))?): ppl_ref ([\d.]+) ppl ([\d.]+) kld ([\d.]+) top1 ([\d.]+);", line
    ):
        specs[name.strip()] = dict(ppl_ref=float(pr), ppl=float(p), kld=float(k), top1=float(a))
    return done, total, n, specs


def main():
    done, total, n1, part = last_progress(sys.argv[1])
    with open(sys.argv[2]) as f:
        rest = json.load(f)
    if isinstance(rest, dict):
        rest = [rest]
    print(f"stopped run: {done}/{total} windows, {n1} tokens; resumed: {rest[0]['tokens_scored']} tokens (skip_windows {rest[0].get('skip_windows', 0)})")
    if rest[0].get("skip_windows", 0) != done:
        sys.exit(f"the resumed run skipped {rest[0].get('skip_windows', 0)} windows, the stopped one finished {done}")
    print("| kv cache | tokens | ppl bf16 | ppl | Δppl | KLD mean | top-1 agreement |")
    print("|---|---|---|---|---|---|---|")
    for r in rest:
        name = r["dtype"] + (" (static scales)" if r["scale_mode"] == "static" else "")
        p = part[name]
        n2 = r["tokens_scored"]
        n = n1 + n2
        ppl_ref = math.exp((n1 * math.log(p["ppl_ref"]) + n2 * math.log(r["ppl_ref"])) / n)
        ppl = math.exp((n1 * math.log(p["ppl"]) + n2 * math.log(r["ppl"])) / n)
        kld = (n1 * p["kld"] + n2 * r["kld_mean"]) / n
        agree = (round(n1 * p["top1"]) + round(n2 * r["top1_agreement"])) / n
        print(f"| {name} | {n} | {ppl_ref:.4f} | {ppl:.4f} | {100 * (ppl - ppl_ref) / ppl_ref:+.2f}% | {kld:.5f} | {100 * agree:.2f}% |")


if __name__ == "__main__":
    main()
