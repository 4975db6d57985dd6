#!/usr/bin/env python3
"""llama.cpp (via llama-cpp-python) CPU prefill/decode speed on the same GGUF and
the same workload as engine/model's BenchmarkPrefill/BenchmarkDecode:
prefill = one 128-token batch (token ids 100+37*i); decode = 32-token prompt,
then greedy single-token steps. Prints tokens per wall-second and per
CPU-second (process time, all threads), best of --repeat runs.

usage: scripts/model_llamacpp_bench.py [--model PATH] [--threads N ...] [--decode 200]
"""
import argparse, os, time
import numpy as np
from llama_cpp import Llama

p = argparse.ArgumentParser()
p.add_argument("--model", default=os.environ.get("FTCHAT_TEST_MODEL", os.path.expanduser(
    "~/.cache/ftchat/models/SmolLM2-135M-Instruct.Q4_1.gguf")))
p.add_argument("--threads", type=int, nargs="+", default=[1, os.cpu_count()])
p.add_argument("--decode", type=int, default=200)
p.add_argument("--repeat", type=int, default=3)
a = p.parse_args()

prompt = [100 + 37 * i for i in range(128)]
for th in a.threads:
    llm = Llama(model_path=a.model, n_ctx=512, n_batch=512, n_threads=th, n_threads_batch=th, verbose=False)
    best_pf = best_dec = cpu_pf = cpu_dec = 0.0
    for _ in range(a.repeat):
        llm.reset()
        t0, c0 = time.perf_counter(), time.process_time()
        llm.eval(prompt)
        best_pf = max(best_pf, len(prompt) / (time.perf_counter() - t0))
        cpu_pf = max(cpu_pf, len(prompt) / (time.process_time() - c0))

        llm.reset()
        llm.eval(prompt[:32])
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(a.decode):
            llm.eval([tok])
            tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        best_dec = max(best_dec, a.decode / (time.perf_counter() - t0))
        cpu_dec = max(cpu_dec, a.decode / (time.process_time() - c0))
    print(f"threads={th} prefill {best_pf:.1f} tok/s ({cpu_pf:.1f} tok/cpu-s) "
          f"decode {best_dec:.1f} tok/s ({cpu_dec:.1f} tok/cpu-s)")
    del llm
