#!/usr/bin/env bash
# End-to-end GPU run (issue 4's engine-level checks), from a bundle built by
#   BUNDLE="engine ftchat" make gpu-bundle
# and carried as .gpu to a machine with an NVIDIA GPU (no Go needed there):
#   1. whole-model logits and greedy continuations, GPU vs CPU (random-weight
#      models of real shapes; the real SmolLM2 when FTCHAT_TEST_MODEL points at it)
#   2. a Llama-3.2-1B shape under --gpu-memory 8GiB: >= 131,072 fp8 tokens,
#      a 128K-token context prefilled and decoded
#   3. prefill/decode tokens/s at 4K, 32K and 128K, bf16 vs fp8 KV, for the
#      SmolLM2 and Llama-3.1-8B (Q4_K) shapes
# Logs and JSON go to $OUT (default .gpu/out).
set -uo pipefail
cd "$(dirname "$0")/.."
B=.gpu
OUT=${OUT:-$B/out}
M=${MODELS:-/tmp/ftchat-models}
mkdir -p "$OUT" "$M"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu_info.txt"
date -u +%FT%TZ | tee -a "$OUT/gpu_info.txt"

(cd engine && FTCHAT_GPU_LONG=1 ../$B/engine.test -test.run 'GPU' -test.v -test.timeout 400s) 2>&1 | tee "$OUT/engine_gpu.log" |
  grep -E '^(---|    ---|ok|FAIL|PASS)|identical|jumped|step|tokens in|128K' || true

$B/ftchat dev gen-model --preset smollm2-135m --type Q4_1 -o "$M/smollm2.gguf" 2>/dev/null
$B/ftchat dev gen-model --preset llama-3.1-8b --type Q4_K -o "$M/llama8b.gguf" 2>/dev/null
for m in smollm2 llama8b; do
  # 130,496 + 512 + 64 = 131,072 tokens; the 8B shape takes ~8 minutes.
  $B/ftchat bench speed --model "$M/$m.gguf" --device cuda --gpu-memory 120GiB --ctx-size 140000 \
    --depths 4096,32768,130496 --dtypes bf16,fp8_e4m3 --prefill 512 --decode 64 --json \
    > "$OUT/speed_$m.json" 2> "$OUT/speed_$m.err"
  echo "== $m"; cat "$OUT/speed_$m.json" | grep -E '"(Depth|PrefillPerS|DecodePerS|KVDType)"' | paste - - - - 
done
