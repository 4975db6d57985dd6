#!/usr/bin/env python3
"""llama.cpp vs the transformers references of scripts/qwen35_fixtures.py.

Usage: python3 scripts/llamacpp_fixture_compare.py FIXTURE GGUF [LCPLOGITS]
  FIXTURE e.g. tiny_qwen35moe (engine/model/testdata/FIXTURE.json), GGUF the file to run,
  LCPLOGITS the binary built from scripts/llamacpp_fixture_logits.cpp (default /tmp/lcplogits).
Prints perplexity, argmax agreement (near-ties, top-2 gap < 1e-2, count as agreeing) and the
max relative error of the stored logit rows, for prefill and token-by-token decode.
"""
import json, subprocess, sys, gzip, os
import numpy as np
HERE = os.path.dirname(os.path.abspath(__file__))
TD = os.path.join(HERE, "..", "engine", "model", "testdata")
BIN = sys.argv[3] if len(sys.argv) > 3 else "/tmp/lcplogits"
name, gg = sys.argv[1], sys.argv[2]
d = json.load(open(os.path.join(TD, name + ".json")))
ids, V, pos = d["tokens"], d["vocab"], d["logit_rows"]["positions"]
rows = np.frombuffer(gzip.open(os.path.join(TD, name + "_logits.bin.gz")).read(), "<f4").reshape(2, len(pos), V)
for mode in ("prefill", "decode"):
    out = subprocess.run([BIN, gg, mode] + [str(i) for i in ids], capture_output=True)
    if out.returncode:
        print(mode, "rc", out.returncode, out.stderr.decode()[-1500:]); continue
    lg = np.frombuffer(out.stdout, "<f4").reshape(len(ids), -1)[:, :V].astype(np.float64)
    lp = lg - lg.max(1, keepdims=True); lp = lp - np.log(np.exp(lp).sum(1, keepdims=True))
    lpn = lp[np.arange(len(ids) - 1), ids[1:]]
    ref = d[mode]
    ppl = float(np.exp(-lpn.mean()))
    am = lg.argmax(1); gap = np.array(ref["top2_gap"])
    agree = float(((am == np.array(ref["argmax"])) | (gap < 1e-2)).mean())
    r = rows[0 if mode == "prefill" else 1]
    err = float(np.abs(lg[pos] - r).max() / np.abs(r).max())
    print("%-26s %-8s llama.cpp ppl %.5f  HF %.5f  argmax agree %.4f  rows max rel err %.2e" % (gg.split("/")[-1], mode, ppl, ref["ppl"], agree, err))
