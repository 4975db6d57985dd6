#!/usr/bin/env bash
# Device calls of the fifth session (2026-12-02), each at most 10 minutes,
# back to back on one warm machine (files under /tmp survive between them).
#
# Here (needs Go):   scripts/gpu_session.sh bundle   (.gpu/*.xz, .gpu-peer/llama.cpp.tar.xz)
# There, call 1:     scripts/gpu_session5.sh skinny     (carry .gpu and .gpu-peer)
#   llama.cpp build (detached), the Llama-3.1-8B Q4_K file, then the
#   Qwen3.6-35B-A3B and Qwen3-30B-A3B Q4_K files (background); the skinny
#   GEMM's GPU-vs-CPU tests and the matmul/whole-model tests that now run
#   through it; the decode-step matmuls by rows; the serve load test on the
#   8B shape with the skinny GEMM and without it (issue 14).
# There, call 2:     scripts/gpu_session5.sh moe q36     (then: moe m30)
#   one MoE Q4_K shape full GPU: ftchat bf16/fp8 and llama-bench f16/q8_0
#   at depths 0 / 4K / 32K / 128K (issues 11 and 13).
# There, last:       scripts/gpu_session5.sh pack
#   the built llama-bench, xz-compressed and split into <= 15 MiB parts in
#   $OUT, so a later session can carry it instead of building (~8 min).
# There, any call:   scripts/gpu_session5.sh tests 'REGEX' ['ENGINE_REGEX']
#   GPU tests by name (for helpers' kernels), engine GPU tests by name.
# Logs are packed into one tgz per call in $OUT (the tool returns <= 8 files).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-.gpu/out}
WORK=${WORK:-/tmp/peer}
export WORK
L8=/tmp/l8b.gguf
Q36=/tmp/q36-q4k.gguf
M30=/tmp/qwen3-30b-a3b.gguf
B=/tmp/bin
LB=$WORK/llama.cpp/build/bin/llama-bench
CTX=${CTX:-131072}
LONGD=$((CTX - 512 - 64)) # the 128K prompt: depth + measured chunk + decode fill the context
mkdir -p "$OUT"
. scripts/gpu_lib.sh # stamp, unpack, gtests
wait_llama() { TRIES=${1:-100} scripts/peer_llamacpp.sh wait; }
speed() { timeout "${T:-120}" $B/ftchat bench speed "$@" 2>&1 | grep -v '…'; }

case ${1:-} in
skinny)
  L=/tmp/out/skinny; mkdir -p $L
  unpack
  { nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(free -g | awk '/Mem:/{print $2}') GiB"
    date -u +%FT%TZ; } 2>&1 | tee "$L/machine.txt"
  JOBS=${JOBS:-8} DETACH=1 scripts/peer_llamacpp.sh build
  $B/ftchat dev gen-model --preset smollm2-135m --type Q4_1 -o /tmp/s.gguf >/dev/null 2>&1
  ( [ -s $L8 ] || $B/ftchat dev gen-model --preset llama-3.1-8b --type Q4_K -o $L8; echo done8
    [ -s $Q36 ] || $B/ftchat dev gen-model --preset qwen3.6-35b-a3b --type Q4_K -o $Q36; echo done36
    [ -s $M30 ] || $B/ftchat dev gen-model --preset qwen3-30b-a3b --type Q4_K -o $M30; echo done30 ) >/tmp/gen.log 2>&1 &
  stamp "gpu tests"
  T_TEST=240 gtests gpu gpu.test "${GPU_TESTS:-TestGemmtSplits|TestMatMulSkinny|TestMatMulSplitK|TestMatMulAllTypes|TestMatMulGemvPaths|TestMatMulGemvr|TestFP8MatMul|TestFP8B32MatMul|TestFP4MatMulShapes|TestNVFP4ModelGPUvsCPU|TestHFMixedModelGPUvsCPU|TestHybridModelGPUvsCPU|TestKernelModules}" "$L/gpu_test.log"
  stamp "engine GPU tests"
  T_TEST=150 gtests engine engine.test "${ENGINE_TESTS:-TestGPUMatchesCPUWholeModel|TestGPUBatcherSamplesTogether|TestGPUDecodeGraphsMatchDirect|TestGPUMatchesCPUMixedKV}" "$L/engine_test.log"
  stamp "decode-step matmuls by rows (skinny = default at 9..32)"
  (cd gpu && timeout 90 $B/gpu.test -test.run '^$' -test.bench 'MatMulDecodeRows' -test.benchtime 20x) >"$L/rows_bench.txt" 2>&1
  grep -E '^Benchmark' "$L/rows_bench.txt" | awk '{print $1, $3, $4, $5, $6}'
  for _ in $(seq 1 60); do grep -q '^done8' /tmp/gen.log && break; sleep 2; done
  stamp "serve load test, Llama-3.1-8B shape, skinny GEMM (default)"
  timeout 200 python3 scripts/loadtest.py --ftchat $B/ftchat --model $L8 --device cuda --max-tokens 64 \
    --kv-dtypes bf16,fp8_e4m3 --profile --json "$L/loadtest.json" >"$L/loadtest.txt" 2>&1
  grep -vE 'profile' "$L/loadtest.txt" | tail -n 24
  # Run on 2026-12-03 as skinny default vs FTCHAT_GEMM_SKINNY=0; since then the
  # default is the split-K tile GEMM and FTCHAT_GEMM_SKINNY=1 picks the skinny one.
  stamp "serve load test, bf16, FTCHAT_GEMM_SPLITK=0 (the unsplit tile GEMM)"
  FTCHAT_GEMM_SPLITK=0 timeout 100 python3 scripts/loadtest.py --ftchat $B/ftchat --model $L8 --device cuda --max-tokens 64 \
    --kv-dtypes bf16 --levels 1,16 --profile --json "$L/loadtest_tile.json" >"$L/loadtest_tile.txt" 2>&1
  grep -vE 'profile' "$L/loadtest_tile.txt" | tail -n 10
  scripts/peer_llamacpp.sh status | tail -2
  tail -3 /tmp/gen.log
  tar -czf "$OUT/skinny-logs.tgz" -C /tmp/out skinny
  ;;
moe)
  # $2: q36 (Qwen3.6-35B-A3B shape) or m30 (Qwen3-30B-A3B shape), Q4_K, all on the GPU.
  case ${2:-} in q36) M=$Q36; tag=done36 ;; m30) M=$M30; tag=done30 ;; *) echo "moe q36|m30" >&2; exit 2 ;; esac
  L=/tmp/out/moe-$2; mkdir -p $L
  [ -x $B/ftchat ] || unpack
  for _ in $(seq 1 100); do grep -q "^$tag" /tmp/gen.log 2>/dev/null && break; sleep 3; done
  [ -s $M ] || { echo "$M missing"; tail -5 /tmp/gen.log; exit 1; }
  ls -la $M | tee "$L/model.txt"
  stamp "ftchat bench speed, $2 Q4_K, full GPU, depths 0,4096,32768,$LONGD" | tee "$L/speed.txt"
  T=${T_FT:-280} speed --model $M --device cuda --ctx-size $CTX --depths "0,4096,32768,$LONGD" \
    --dtypes fp8_e4m3,bf16 --prefill 512 --decode 64 | tee -a "$L/speed.txt"
  if wait_llama 40; then
    for kv in f16 q8_0; do
      stamp "llama-bench, $2 Q4_K, $kv KV" | tee -a "$L/llama.md"
      timeout "${T_LLAMA:-150}" $LB -m $M -ngl 99 -fa 1 -p 512 -n 64 -r 1 -d "0,4096,32768,$LONGD" -ctk $kv -ctv $kv -o md \
        >>"$L/llama.md" 2>>"$L/llama.err" || { echo "rc=$?"; tail -5 "$L/llama.err"; } | tee -a "$L/llama.md"
    done
    cat "$L/llama.md"
  else
    echo "llama.cpp build not ready"; scripts/peer_llamacpp.sh status | tail -5
  fi
  tar -czf "$OUT/moe-$2-logs.tgz" -C /tmp/out "moe-$2"
  ;;
pack)
  [ -x "$LB" ] || { echo "no llama-bench at $LB"; exit 1; }
  ldd "$LB" | tee "$OUT/llama-bench.ldd"
  (cd "$(dirname "$LB")" && git -C "$WORK/llama.cpp" rev-parse HEAD 2>/dev/null; ls -la llama-bench) >"$OUT/llama-bench.txt" 2>&1
  xz -T0 -6 -c "$LB" | split -b 15M -d - "$OUT/llama-bench.xz.part"
  ls -la "$OUT"
  ;;
tests)
  L=/tmp/out/tests; mkdir -p $L
  unpack
  [ -s /tmp/s.gguf ] || $B/ftchat dev gen-model --preset smollm2-135m --type Q4_1 -o /tmp/s.gguf >/dev/null 2>&1
  stamp "gpu tests: ${2:-}"
  [ -n "${2:-}" ] && gtests gpu gpu.test "$2" "$L/gpu_test.log"
  stamp "engine tests: ${3:-}"
  [ -n "${3:-}" ] && gtests engine engine.test "$3" "$L/engine_test.log"
  tar -czf "$OUT/tests-logs.tgz" -C /tmp/out tests
  ;;
*)
  echo "usage: $0 skinny|moe q36|moe m30|pack|tests REGEX [ENGINE_REGEX]" >&2
  exit 2
  ;;
esac
