#!/usr/bin/env bash
# Device calls of the fourth session (2026-12-02), each at most 10 minutes,
# back to back on one warm machine (files under /tmp survive between them).
#
# Here (needs Go):   scripts/gpu_session.sh bundle   (.gpu/*.xz, .gpu-peer/llama.cpp.tar.xz)
# There, call 1:     scripts/gpu_session4.sh tests      (carry .gpu and .gpu-peer)
#   llama.cpp build (detached), the Qwen3.6-35B-A3B-shaped NVFP4 GGUF and the
#   Llama-3.1-8B-shaped Q4_K one (background), the GPU-vs-CPU tests of this
#   session's kernels and paths (mixed K/V pools, block-scaled FP8 weights,
#   multi-row device sampling, --expert-run cpu-decode), the engine's GPU
#   tests, the FP8 weight benchmark and time to first token.
# There, call 2:     scripts/gpu_session4.sh serve
#   the serve load test on the 8B shape, the decode-step matmuls by rows and
#   the GEMV/GEMM crossover A/B (issue 14); the 35B NVFP4 MIXED HF
#   directory's load time and peak RSS (issue 16).
# There, call 3:     scripts/gpu_session4.sh offload
#   issue 12 under --gpu-memory 8GiB: the prefill step size (--ubatch-size)
#   against the 32K fill, then CPU experts (--expert-run cpu-decode) and
#   streamed experts (--expert-run stream) at 4K / 32K / 128K in fp8 and at
#   4K / 32K in bf16.
# There, call 4:     scripts/gpu_session4.sh long
#   llama-bench --n-cpu-moe beside ftchat at 32K and 128K, same split and
#   prefill step.
# There, call 5:     scripts/gpu_session4.sh moe30
#   the Qwen3-30B-A3B shape (Q4_K) full GPU, ftchat and llama-bench at
#   depths 0 / 4K / 32K / 128K.
# Logs are packed into one tgz per call in $OUT (the tool returns ≤ 8 files).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-.gpu/out}
WORK=${WORK:-/tmp/peer}
export WORK
NV=/tmp/q36-nvfp4.gguf  # Qwen3.6-35B-A3B shape, NVFP4
L8=/tmp/l8b.gguf        # Llama-3.1-8B shape, Q4_K
M30=/tmp/qwen3-30b-a3b.gguf
B=/tmp/bin
LB=$WORK/llama.cpp/build/bin/llama-bench
CTX=${CTX:-131072}
LONGD=$((CTX - 512 - 64)) # the 128K prompt: depth + measured chunk + decode fill the context
mkdir -p "$OUT"
stamp() { echo "[$(date -u +%T)] $*"; }
GPU_TESTS=${GPU_TESTS:-'TestAttention|TestBackendKV|TestFA|TestKV|TestAllocKV|TestFP8|TestHFFP8|TestFP8B32DecodeAllCodes|TestFP8B32MatMul|TestMoEFP8B32|TestHFBlockFP8ModelGPUvsCPU|TestHFMixedModelGPUvsCPU|TestTypesCoverCPU|TestKernelModules|TestMoEKernelModules|TestDeviceSampling|TestSample|TestTopKPasses|TestHostExpertModel|TestHostMoEMatchesCPU'}
ENGINE_TESTS=${ENGINE_TESTS:-'GPU|Placement'}

wait_llama() { TRIES=${1:-100} scripts/peer_llamacpp.sh wait; }
# unpack: this call's binaries into $B, replacing those of an earlier
# call on the same warm machine (a rebuilt bundle must not run stale ones).
unpack() {
  mkdir -p $B
  for f in .gpu/*.xz; do n=$(basename "${f%.xz}"); xz -dc "$f" >"$B/$n" && chmod +x "$B/$n"; done
}
# speed MODEL_ARGS... : ftchat bench speed with the log's noise (progress) removed
speed() { timeout "${T:-120}" $B/ftchat bench speed "$@" 2>&1 | grep -v '…'; }

case ${1:-} in
retest)
  # The tests that failed in the first call, after their fixes, and the
  # engine tests that need the default model (a SmolLM2-shaped file here).
  L=/tmp/out/retest; mkdir -p $L
  unpack
  [ -x "$LB" ] || JOBS=${JOBS:-8} DETACH=1 scripts/peer_llamacpp.sh build # for a later long call
  ( [ -s $NV ] || $B/ftchat dev gen-model --preset qwen3.6-35b-a3b --type NVFP4 -o $NV; echo done ) >/tmp/gen.log 2>&1 &
  [ -s /tmp/s.gguf ] || $B/ftchat dev gen-model --preset smollm2-135m --type Q4_1 -o /tmp/s.gguf >/dev/null 2>&1
  (cd gpu && FTCHAT_REQUIRE_GPU=1 timeout 90 $B/gpu.test -test.v -test.run 'TestFASmemMatchesKernel|TestHostExpertModel$|TestSetPlacementTakesEveryRun' \
    -test.timeout 300s) >"$L/gpu_test.log" 2>&1
  echo "gpu tests rc=$?"; grep -E '^--- (PASS|FAIL|SKIP)' "$L/gpu_test.log" | awk '{print $2, $3}' | tr '\n' ' '; echo
  (cd engine && FTCHAT_TEST_MODEL=/tmp/s.gguf FTCHAT_REQUIRE_GPU=1 timeout 90 $B/engine.test -test.v \
    -test.run 'TestGPUBatcherSamplesTogether|TestGPUSessionDeviceSampling' -test.timeout 300s) >"$L/engine_test.log" 2>&1
  echo "engine tests rc=$?"; grep -E '^--- (PASS|FAIL|SKIP)' "$L/engine_test.log" | awk '{print $2, $3}' | tr '\n' ' '; echo
  tar -czf "$OUT/retest-logs.tgz" -C /tmp/out retest
  ;;
modes)
  # --expert-run cpu-decode (refused at load in the offload call: fixed).
  L=/tmp/out/modes; mkdir -p $L
  for _ in $(seq 1 100); do grep -q '^done$' /tmp/gen.log 2>/dev/null && break; sleep 3; done
  [ -s $NV ] || $B/ftchat dev gen-model --preset qwen3.6-35b-a3b --type NVFP4 -o $NV >>/tmp/gen.log 2>&1
  G="--model $NV --device cuda --gpu-memory 8GiB"; NC=${NCMOE:-32}
  stamp "fp8, --expert-run cpu-decode, depths 4096,32768,$LONGD" | tee -a "$L/modes.txt"
  T=170 speed $G --ctx-size $CTX --n-cpu-moe $NC --expert-run cpu-decode --depths "4096,32768,$LONGD" \
    --dtypes fp8_e4m3 --prefill 512 --decode 32 >>"$L/modes.txt"
  stamp "bf16, --expert-run cpu-decode, depths 4096,32768" | tee -a "$L/modes.txt"
  T=80 speed $G --ctx-size 40960 --n-cpu-moe $NC --expert-run cpu-decode --depths 4096,32768 \
    --dtypes bf16 --prefill 512 --decode 32 >>"$L/modes.txt"
  cat "$L/modes.txt"
  tar -czf "$OUT/modes-logs.tgz" -C /tmp/out modes
  ;;
tests)
  L=/tmp/out/tests; mkdir -p $L
  unpack
  { nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,pcie.link.gen.max,pcie.link.width.max --format=csv
    echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(free -g | awk '/Mem:/{print $2}') GiB"
    date -u +%FT%TZ; } 2>&1 | tee "$L/machine.txt"
  JOBS=${JOBS:-8} DETACH=1 scripts/peer_llamacpp.sh build
  ( [ -s $L8 ] || $B/ftchat dev gen-model --preset llama-3.1-8b --type Q4_K -o $L8; echo done8
    [ -s $NV ] || $B/ftchat dev gen-model --preset qwen3.6-35b-a3b --type NVFP4 -o $NV; echo done ) >/tmp/gen.log 2>&1 &
  stamp "gpu tests: $GPU_TESTS"
  (cd gpu && FTCHAT_REQUIRE_GPU=1 timeout "${T_GPU:-200}" $B/gpu.test -test.v -test.run "$GPU_TESTS" \
    -test.skip 'TestPTX' -test.timeout 300s) >"$L/gpu_test.log" 2>&1
  echo "gpu tests rc=$?"; grep -E '^(--- FAIL|FAIL|ok|PASS|panic)' "$L/gpu_test.log" | head -30
  grep -E '^--- (PASS|FAIL|SKIP)' "$L/gpu_test.log" | awk '{print $2, $3}' | tr '\n' ' '; echo
  stamp "engine GPU tests: $ENGINE_TESTS"
  (cd engine && FTCHAT_REQUIRE_GPU=1 timeout "${T_ENGINE:-130}" $B/engine.test -test.v -test.run "$ENGINE_TESTS" -test.timeout 300s) \
    >"$L/engine_test.log" 2>&1
  echo "engine tests rc=$?"; grep -E '^(--- FAIL|FAIL|panic)' "$L/engine_test.log" | head -20
  grep -E '^--- (PASS|FAIL|SKIP)' "$L/engine_test.log" | awk '{print $2, $3}' | tr '\n' ' '; echo
  stamp "FP8 weight GEMV/GEMM (per-tensor, block-scaled, Q8_0)"
  (cd gpu && timeout 60 $B/gpu.test -test.run '^$' -test.bench 'MatMulFP8' -test.benchtime 20x) >"$L/fp8_bench.log" 2>&1
  grep -E '^Benchmark' "$L/fp8_bench.log" | awk '{print $1, $3, $4, $5, $6, $7, $8}'
  stamp "time to first token, ftchat -p on the SmolLM2 shape, GPU (the first run JIT-compiles the PTX) and CPU"
  $B/ftchat dev gen-model --preset smollm2-135m --type Q4_1 -o /tmp/s.gguf >/dev/null 2>&1
  for dev in cuda cuda cuda cpu cpu; do
    echo "== --device $dev" >>"$L/ttft.txt"
    ( FTCHAT_TIMING=1 /usr/bin/time -f 'wall %e s, max RSS %M KB' timeout 60 $B/ftchat -p "Write a haiku about the sea." --model /tmp/s.gguf \
        --device $dev --max-tokens 8 --temperature 0 ) >>"$L/ttft.txt" 2>&1
  done
  grep -E '==|first token|cuda context|weights|wall' "$L/ttft.txt"
  scripts/peer_llamacpp.sh status | tail -2
  tail -2 /tmp/gen.log
  tar -czf "$OUT/tests-logs.tgz" -C /tmp/out tests
  ;;
serve)
  # Issue 14: the serve load test on the 8B shape, the batched step's parts
  # (multi-row sampling, the GEMV/GEMM crossover at 9..16 rows), and issue
  # 16's HF directory load.
  L=/tmp/out/serve; mkdir -p $L
  unpack
  for _ in $(seq 1 60); do grep -q '^done8' /tmp/gen.log && break; sleep 2; done
  stamp "serve load test, Llama-3.1-8B shape"
  timeout "${LOAD_T:-170}" python3 scripts/loadtest.py --ftchat $B/ftchat --model $L8 --device cuda --max-tokens 64 \
    --kv-dtypes bf16,fp8_e4m3 --json "$L/loadtest.json" 2>&1 | tee "$L/loadtest.txt"
  stamp "decode-step matmuls by rows, multi-row sampling"
  (cd gpu && timeout 60 $B/gpu.test -test.run '^$' -test.bench 'MatMulDecodeRows|SampleRows' -test.benchtime 1x) >"$L/rows_bench.txt" 2>&1
  grep -E '^Benchmark' "$L/rows_bench.txt" | awk '{print $1, $3, $4, $5, $6, $7}'
  for gm in 0 17; do
    stamp "load test, bf16, FTCHAT_GEMM_MIN_TOKENS=$gm, with the step profile" | tee -a "$L/loadtest_profile.txt"
    FTCHAT_GEMM_MIN_TOKENS=$gm timeout 110 python3 scripts/loadtest.py --ftchat $B/ftchat --model $L8 --device cuda --max-tokens 64 \
      --kv-dtypes bf16 --levels 1,8,16 --profile --json "$L/loadtest_gm$gm.json" >>"$L/loadtest_profile.txt" 2>&1
    grep -vE 'profile' "$L/loadtest_profile.txt" | tail -n 14
  done
  # Issue 16: the 35B NVFP4 MIXED HF directory's load now gives back each
  # shard's pages once repacked (the third session: 47.4 s, peak RSS 39.6 GB).
  HF=/tmp/q36-nvfp4-mixed
  [ -d $HF ] || $B/ftchat dev gen-hf --preset qwen3.6-35b-a3b --quant nvfp4-mixed -o $HF >"$L/gen_hf.txt" 2>&1
  stamp "the HF directory under --gpu-memory 8GiB: load time and peak RSS"
  ( cd /tmp && /usr/bin/time -v timeout 120 $B/ftchat bench speed --model $HF --device cuda --gpu-memory 8GiB --ctx-size 8192 \
      --depths 0 --dtypes fp8_e4m3 --prefill 512 --decode 32 ) >"$L/hf_load.txt" 2>&1
  grep -vE '…' "$L/hf_load.txt" | grep -E 'plan|loaded in|fp8|Elapsed|Maximum resident|Exit|rror' | head -20
  rm -rf $HF
  tar -czf "$OUT/serve-logs.tgz" -C /tmp/out serve
  ;;
offload)
  L=/tmp/out/offload; mkdir -p $L
  unpack
  for _ in $(seq 1 100); do grep -q '^done$' /tmp/gen.log 2>/dev/null && break; sleep 3; done
  [ -s $NV ] || $B/ftchat dev gen-model --preset qwen3.6-35b-a3b --type NVFP4 -o $NV >>/tmp/gen.log 2>&1
  G="--model $NV --device cuda --gpu-memory 8GiB"
  NC=${NCMOE:-32} # fp8's automatic plan for 131,072 tokens (the third session's capacity run)
  # Larger prefill steps copy each streamed layer once per more tokens but
  # take GPU workspace from the pool: the plans say what each costs.
  stamp "plans for $CTX fp8 tokens at --ubatch-size 512 / 2048"
  for ub in 512 2048; do
    echo "== --ubatch-size $ub" >>"$L/capacity.txt"
    timeout 60 $B/ftchat bench capacity $G --ctx-size $CTX --kv-cache-dtype fp8_e4m3 --ubatch-size $ub >>"$L/capacity.txt" 2>&1
  done
  cat "$L/capacity.txt" | head -40
  stamp "32K fill by prefill step size (auto plan, fp8)" | tee "$L/ubatch.txt"
  for ub in 512 2048; do
    echo "== --ubatch-size $ub" >>"$L/ubatch.txt"
    T=90 speed $G --ctx-size 40960 --ubatch-size $ub --depths 32768 --dtypes fp8_e4m3 --prefill 512 --decode 16 >>"$L/ubatch.txt"
  done
  cat "$L/ubatch.txt"
  # Issue 12's CPU experts and streamed experts at the fp8 plan's split.
  for run in cpu-decode stream; do
    dec=32; [ $run = stream ] && dec=8
    stamp "fp8, --expert-run $run, depths 4096,32768,$LONGD" | tee -a "$L/modes.txt"
    T=170 speed $G --ctx-size $CTX --n-cpu-moe $NC --expert-run $run --depths "4096,32768,$LONGD" \
      --dtypes fp8_e4m3 --prefill 512 --decode $dec >>"$L/modes.txt"
    [ $run = stream ] && continue # streamed decode does not depend on the KV dtype
    stamp "bf16, --expert-run $run, depths 4096,32768" | tee -a "$L/modes.txt"
    T=80 speed $G --ctx-size 40960 --n-cpu-moe $NC --expert-run $run --depths 4096,32768 \
      --dtypes bf16 --prefill 512 --decode $dec >>"$L/modes.txt"
    tail -n 8 "$L/modes.txt"
  done
  tar -czf "$OUT/offload-logs.tgz" -C /tmp/out offload
  ;;
long)
  # llama.cpp --n-cpu-moe beside ftchat at 32K and 128K on the NVFP4 file,
  # the same split and prefill step (-ub 2048 / --ubatch-size 2048) for
  # both: at llama.cpp's default -ub 512 a 128K fill alone takes ~8 minutes.
  # No --gpu-memory (llama.cpp has no budget; both use the same split).
  L=/tmp/out/long; mkdir -p $L
  unpack
  NC=${NCMOE:-32}; UB=${UB:-2048}
  stamp "ftchat fp8, --n-cpu-moe $NC --ubatch-size $UB, depths 32768,$LONGD" | tee "$L/speed.txt"
  T=200 speed --model $NV --device cuda --ctx-size $CTX --n-cpu-moe $NC --ubatch-size $UB --depths "32768,$LONGD" \
    --dtypes fp8_e4m3 --prefill 512 --decode 32 >>"$L/speed.txt"
  cat "$L/speed.txt"
  if wait_llama 5; then
    stamp "llama-bench --n-cpu-moe $NC -ub $UB, q8_0 KV, depths 32768,$LONGD" | tee "$L/llama.md"
    timeout "${T_LLAMA:-280}" $LB -m $NV -ngl 99 -fa 1 -p 512 -n 32 -r 1 -b $UB -ub $UB -d "32768,$LONGD" -ctk q8_0 -ctv q8_0 \
      --n-cpu-moe $NC -o md >>"$L/llama.md" 2>"$L/llama.err" || { echo "rc=$?"; tail -5 "$L/llama.err"; } | tee -a "$L/llama.md"
    cat "$L/llama.md"
  else
    echo "llama.cpp build not ready"; tail -5 "$WORK/detached.log"
  fi
  tar -czf "$OUT/long-logs.tgz" -C /tmp/out long
  ;;
moe30)
  L=/tmp/out/moe30; mkdir -p $L
  unpack
  ( [ -s $M30 ] || $B/ftchat dev gen-model --preset qwen3-30b-a3b --type Q4_K -o $M30 ) >"$L/gen.log" 2>&1 &
  wait
  stamp "ftchat, qwen3-30b-a3b Q4_K, full GPU" | tee "$L/speed.txt"
  T=150 speed --model $M30 --device cuda --ctx-size $CTX --depths "0,4096,32768,$LONGD" \
    --dtypes fp8_e4m3,bf16 --prefill 512 --decode 64 | tee -a "$L/speed.txt"
  if wait_llama 5; then
    stamp "llama-bench, qwen3-30b-a3b Q4_K, f16 KV" | tee "$L/llama.md"
    timeout "${T_LLAMA:-200}" $LB -m $M30 -ngl 99 -fa 1 -p 512 -n 64 -r 1 -d "0,4096,32768,$LONGD" -ctk f16 -ctv f16 -o md \
      >>"$L/llama.md" 2>"$L/llama.err" || { echo "rc=$?"; tail -5 "$L/llama.err"; } | tee -a "$L/llama.md"
    cat "$L/llama.md"
  fi
  tar -czf "$OUT/moe30-logs.tgz" -C /tmp/out moe30
  ;;
*)
  echo "usage: $0 tests|serve|offload|long|moe30|retest|modes" >&2
  exit 2
  ;;
esac
