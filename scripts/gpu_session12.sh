#!/usr/bin/env bash
# Device calls of the tenth session (2026-12-03). Here: scripts/gpu_session.sh
# bundle. There (carry .gpu and .gpu-peer; chain the calls without a pause,
# the machine goes back ~30 s after one and /tmp with it):
#   scripts/gpu_session12.sh first
#     starts the llama.cpp build (detached); the GPU tests of cuBLAS (bf16
#     GemmEx through the wide call, TF32 Sgemm), gemvq (Q4_K and Q6_K) and
#     the kernel modules; the 512-token GEMM three ways
#     (BenchmarkMatMulPrefill: own, cuBLAS bf16, cuBLAS TF32); `bench speed`
#     on the Llama-3.1-8B shape with FTCHAT_CUBLAS=0, 1 and tf32; the one-row
#     Q6_K rows bench with and without gemvq's Q6_K body; the engine's GPU
#     tests with both on.
#   scripts/gpu_session12.sh peer
#     llama-bench -fa 1 -p 512 -n 128 -d 0,4096,32768 (f16 and q8_0 KV, -r
#     ${REPS:-2}) and `ftchat bench speed` (bf16 and fp8 KV) on the same 8B
#     file, ftchat with the environment in $FT_ENV (default FTCHAT_CUBLAS=1).
#   scripts/gpu_session12.sh moe
#     the Qwen3-30B-A3B shape: llama-bench (f16 KV, -r 1, 0/4K/32K) and
#     `ftchat bench speed` (fp8 and bf16 KV) with $FT_ENV.
#   scripts/gpu_session12.sh q36
#     (a fresh machine) starts the llama.cpp build; the gpu tests of the
#     matmul, hybrid and MoE paths on the new defaults (cuBLAS, gemvq's
#     Q6_K body); the Qwen3.6-35B-A3B shape: `ftchat bench speed` (fp8 and
#     bf16 KV, 0/4K/32K/128K) and llama-bench (f16 KV to 128K, q8_0 to
#     32K, -r 1, -n 64).
#   scripts/gpu_session12.sh dequant
#     after the bf16 dequantization's stores went through shared memory
#     and MatMulShared's x is rounded once: TestMatMulCUBLAS, the 512-token
#     GEMM on cuBLAS bf16 and `bench speed` on the 8B shape at 0/4K.
#   scripts/gpu_session12.sh fa
#     (prepared, not run) what FA prefill's hi/lo split of q and p costs:
#     here first `VARIANTS="base faplo0 faqlo0" scripts/attn_variants.sh`
#     (PTX under .gpu/ptx, carried with .gpu); there the FA attention bench
#     at 0/4K/32K/128K and TestAttentionFAMatchesHostStore (its error
#     against the host, 1e-3 asked) for each variant, then `bench speed`
#     fp8 at 32K on the 8B shape for each (fp8 prefill at 32K was 0.98x
#     llama.cpp f16, the one prefill depth behind).
#   scripts/gpu_session12.sh all
#     every GPU test of the gpu and engine packages (scripts/gpu_session10.sh all).
# Logs: one tgz per call in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-.gpu/out}
B=/tmp/bin
L8=/tmp/l8b.gguf
M30=/tmp/m30.gguf
FT_ENV=${FT_ENV:-FTCHAT_CUBLAS=1}
mkdir -p "$OUT"
. scripts/gpu_lib.sh # stamp, unpack, gen, gtests, rows, speed, llamabench
LB_TIMEOUT=${LB_TIMEOUT:-200}
T0=$(date +%s)
fits() { [ $(($(date +%s) - T0 + $1)) -le ${BUDGET:-560} ]; }
case ${1:-} in
first)
  L=/tmp/out/first; mkdir -p $L; [ -x $B/ftchat ] || unpack
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $L/machine.txt
  WORK=/tmp/peer JOBS=8 DETACH=1 scripts/peer_llamacpp.sh build
  gen llama-3.1-8b $L8
  gen smollm2-135m /tmp/s.gguf
  stamp "gpu tests: cuBLAS, the wide call, gemvq, kernel modules"
  T_TEST=120 gtests gpu gpu.test '^(TestMatMulCUBLAS|TestCallWide|TestMatMulGemvq|TestKernelModules|TestMatMulGemmq)$' $L/gpu_test.log
  stamp "512-token GEMM: own, cuBLAS bf16, cuBLAS TF32"
  (cd gpu && timeout 120 $B/gpu.test -test.run '^$' -test.bench 'MatMulPrefill' -test.benchtime 20x) >$L/prefill_gemm.txt 2>&1
  echo "rc=$?"; grep -E '^Benchmark' $L/prefill_gemm.txt | sed -E 's/ +[0-9]+ ns\/op//'
  for m in 0 1 tf32; do
    fits 60 && speed cublas$m 60 FTCHAT_CUBLAS=$m -- --model $L8 --ctx-size 8192 --depths 0,4096 \
      --dtypes fp8_e4m3 --prefill 512 --decode 32
  done
  if fits 40; then
    stamp "rows bench, one Q6_K row: gemvq's Q6_K body on and off"
    for q in 1 0; do ROWS_N=1 rows q6k$q "" FTCHAT_ROWS_TYPE=Q6_K FTCHAT_GEMVQ_Q6K=$q FTCHAT_ROWS_MODES=default,group; done
  fi
  if fits 150; then
    stamp "engine GPU tests, cuBLAS and gemvq Q6_K on"
    T_TEST=$((560 - $(date +%s) + T0 - 10)) gtests engine engine.test 'GPU' $L/engine_test.log "FTCHAT_CUBLAS=1 FTCHAT_GEMVQ_Q6K=1"
  fi
  WORK=/tmp/peer scripts/peer_llamacpp.sh status 2>/dev/null | grep -E "detached|build" | tail -3
  tar -czf "$OUT/first-logs.tgz" -C /tmp/out first
  ;;
peer)
  L=/tmp/out/peer; mkdir -p $L; [ -x $B/ftchat ] || unpack
  gen llama-3.1-8b $L8
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $L/machine.txt
  llamabench $L8 l8b 0,4096,32768 f16 q8_0
  speed peer 220 $FT_ENV -- --model $L8 --ctx-size 33792 --depths 0,4096,32768 \
    --dtypes bf16,fp8_e4m3 --prefill 512 --decode 128
  tar -czf "$OUT/peer-logs.tgz" -C /tmp/out peer
  ;;
moe)
  L=/tmp/out/moe; mkdir -p $L; [ -x $B/ftchat ] || unpack
  stamp "gen qwen3-30b-a3b"
  gen qwen3-30b-a3b $M30; ls -l $M30
  REPS=1 llamabench $M30 m30 0,4096,32768 f16
  speed m30 200 $FT_ENV -- --model $M30 --ctx-size 33792 --depths 0,4096,32768 \
    --dtypes fp8_e4m3,bf16 --prefill 512 --decode 128
  tar -czf "$OUT/moe-logs.tgz" -C /tmp/out moe
  ;;
q36)
  L=/tmp/out/q36; mkdir -p $L; [ -x $B/ftchat ] || unpack
  Q36=/tmp/q36.gguf
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $L/machine.txt
  WORK=/tmp/peer JOBS=12 DETACH=1 scripts/peer_llamacpp.sh build
  stamp "gen qwen3.6-35b-a3b"
  gen qwen3.6-35b-a3b $Q36; ls -l $Q36
  gen smollm2-135m /tmp/s.gguf
  stamp "gpu tests: matmul, hybrid, MoE paths"
  T_TEST=150 gtests gpu gpu.test '^(TestMatMul|TestHybrid|TestMoE|TestGemvq|TestKernelModules)' $L/gpu_test.log
  speed q36 200 FTCHAT_PROFILE=0 -- --model $Q36 --ctx-size 131072 --depths 0,4096,32768,130496 \
    --dtypes fp8_e4m3,bf16 --prefill 512 --decode 64
  lb=/tmp/peer/llama.cpp/build/bin/llama-bench
  stamp "waiting for llama-bench"
  WORK=/tmp/peer TRIES=${TRIES:-100} scripts/peer_llamacpp.sh wait || { echo "no llama-bench"; tail -20 /tmp/peer/detached.log; }
  for kv in f16 q8_0; do
    [ -x $lb ] || break
    d=0,4096,32768; [ $kv = f16 ] && d=$d,130496
    fits 30 || break
    stamp "llama-bench q36 $kv"
    timeout $((560 - $(date +%s) + T0)) $lb -m $Q36 -ngl 99 -fa 1 -p 512 -n 64 -r 1 -d $d -ctk $kv -ctv $kv -o md >$L/lb_$kv.md 2>$L/lb_$kv.err
    echo "rc=$?"; cat $L/lb_$kv.md
  done
  tar -czf "$OUT/q36-logs.tgz" -C /tmp/out q36
  ;;
dequant)
  L=/tmp/out/dequant; mkdir -p $L; [ -x $B/ftchat ] || unpack
  gen llama-3.1-8b $L8
  T_TEST=60 gtests gpu gpu.test '^(TestMatMulCUBLAS|TestKernelModules)$' $L/gpu_test.log
  (cd gpu && timeout 60 $B/gpu.test -test.run '^$' -test.bench 'MatMulPrefill/cublas-bf16/(Q4_K|Q6_K|BF16)' -test.benchtime 20x) >$L/prefill_gemm.txt 2>&1
  echo "rc=$?"; grep -E '^Benchmark' $L/prefill_gemm.txt | sed -E 's/ +[0-9]+ ns\/op//'
  speed l8b 60 FTCHAT_PROFILE=0 -- --model $L8 --ctx-size 8192 --depths 0,4096 --dtypes bf16,fp8_e4m3 --prefill 512 --decode 32
  tar -czf "$OUT/dequant-logs.tgz" -C /tmp/out dequant
  ;;
fa)
  L=/tmp/out/fa; mkdir -p $L; [ -x $B/ftchat ] || unpack
  gen llama-3.1-8b $L8
  for v in ${FA_VARIANTS:-base faplo0 faqlo0}; do
    d=$PWD/.gpu/ptx/$v; [ -d $d ] || { echo "no $d"; continue; }
    stamp "FA variant $v"
    (cd gpu && FTCHAT_PTX_DIR=$d FTCHAT_REQUIRE_GPU=1 timeout 60 $B/gpu.test -test.v -test.run '^TestAttentionFAMatchesHostStore$') >$L/test_$v.txt 2>&1
    echo "test rc=$?"; grep -E "^(--- |\s+.*(error|tol))" $L/test_$v.txt | head -12
    fits 120 || break
    (cd gpu && FTCHAT_PTX_DIR=$d FTCHAT_BENCH_ONLY=fa FTCHAT_FA_DEPTHS=0,4096,32768,130560 FTCHAT_BENCH_MD=$L/fa_$v.md timeout 100 $B/gpu.test \
      -test.run '^$' -test.bench 'Attention' -test.benchtime 5x) >$L/fa_$v.txt 2>&1
    echo "bench rc=$?"; tail -12 $L/fa_$v.md 2>/dev/null
    fits 60 && speed fa_$v 60 FTCHAT_PTX_DIR=$d -- --model $L8 --ctx-size 33792 --depths 32768 --dtypes fp8_e4m3,bf16 --prefill 512 --decode 16
  done
  tar -czf "$OUT/fa-logs.tgz" -C /tmp/out fa
  ;;
all)
  exec scripts/gpu_session10.sh all
  ;;
*)
  echo "usage: $0 first|peer|moe|all" >&2
  exit 2
  ;;
esac
