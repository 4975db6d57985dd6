#!/usr/bin/env bash
# Device calls of the ninth session (2026-12-03). Here: scripts/gpu_session.sh
# bundle. There (carry .gpu and .gpu-peer; chain the calls, the machine goes
# back ~30 s after one and /tmp with it):
#   scripts/gpu_session11.sh sweep
#     starts the llama.cpp build (detached), then TestMatMulGemmq, the rows
#     bench (grouped, as the model issues them) at 1/2/8/16/32 rows for the
#     committed PTX and each FTCHAT_PTX_DIR variant under .gpu/ptxvar (the
#     run of 2026-12-03 timed a deeper register ring for gemmq's Q4_K loads,
#     built with -DGQ_PF/-DGQ_XPF_NT from a tree that had it: no change, so
#     it was not kept), gemmq's grid at 3 and 4 CTAs per SM, `bench speed`
#     decode on the Llama-3.1-8B shape and one profiled decode
#     (FTCHAT_PROFILE=1).
#   scripts/gpu_session11.sh ncu
#     Nsight Compute on one row's gate/up and down gemmq kernels; the rows
#     bench again.
#   scripts/gpu_session11.sh gemvq
#     the single-row Q4_K GEMV on int16 activations (gpu/gemvq.go): its tests,
#     the matmul and hybrid tests, the rows bench and `bench speed` decode
#     with and without it (FTCHAT_GEMVQ=0), the engine's GPU tests; starts
#     the llama.cpp build for the peer call.
#   scripts/gpu_session11.sh gemvqrows
#     gemvq with 1, 2 and 4 rows a warp: TestMatMulGemvq and the rows bench.
#   scripts/gpu_session11.sh speedrows
#     `bench speed` with 4 and 1 rows a gemvq warp, and the 8B table at 4.
#   scripts/gpu_session11.sh q6k
#     (prepared, not run) gemvq for Q6_K (opt-in): its test, the Q6_K rows
#     bench with and without it, the engine's GPU tests with it on.
#   scripts/gpu_session11.sh peer
#     llama-bench -fa 1 -p 512 -n 128 -d 0,4096,32768 (f16 and q8_0 KV, -r
#     ${REPS:-2}) and `ftchat bench speed` (bf16 and fp8 KV) on the same 8B
#     file. (On 2026-12-03 the build was not done when this call waited; the
#     llama-bench lines ran in the next call with -r 1.)
# Every GPU test of the gpu and engine packages: scripts/gpu_session10.sh all
# (prepared, not run yet).
# PTX=NAME (peer) runs ftchat with FTCHAT_PTX_DIR=.gpu/ptxvar/NAME. Logs: one tgz
# per call in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-.gpu/out}
B=/tmp/bin
L8=/tmp/l8b.gguf
VARIANTS=$(ls .gpu/ptxvar 2>/dev/null)
mkdir -p "$OUT"
. scripts/gpu_lib.sh # stamp, unpack, gen, gtests, ptxdir, rows
T0=$(date +%s)
fits() { [ $(($(date +%s) - T0 + $1)) -le ${BUDGET:-560} ]; }
case ${1:-} in
sweep)
  L=/tmp/out/sweep; mkdir -p $L; [ -x $B/ftchat ] || unpack
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $L/machine.txt
  WORK=/tmp/peer JOBS=10 DETACH=1 scripts/peer_llamacpp.sh build
  gen llama-3.1-8b $L8
  gen smollm2-135m /tmp/s.gguf
  stamp "TestMatMulGemmq"
  T_TEST=80 gtests gpu gpu.test '^TestMatMulGemmq$' $L/gemmq_test.log
  stamp "rows bench by variant (grouped)"
  rows committed ""
  for v in $VARIANTS; do fits 50 && rows $v $v; done
  for c in 3 4; do fits 50 && rows ctas$c "" FTCHAT_GEMMQ_CTAS=$c; done
  for v in committed; do
    fits 60 || break
    stamp "bench speed decode, $v"
    timeout 60 $B/ftchat bench speed --model $L8 --device cuda --ctx-size 8192 --depths 0,4096 \
      --dtypes fp8_e4m3 --prefill 512 --decode 64 >$L/speed_$v.txt 2>&1
    echo "rc=$?"; grep -E '^(fp8|bf16)' $L/speed_$v.txt
  done
  if fits 60; then
    stamp "profiled decode at 4K (committed)"
    FTCHAT_PROFILE=1 FTCHAT_PROFILE_OUT=$L/profile.md timeout 60 $B/ftchat bench speed --model $L8 --device cuda \
      --ctx-size 8192 --depths 4096 --dtypes fp8_e4m3 --prefill 512 --decode 32 >$L/speed_prof.txt 2>&1
    echo "rc=$?"; head -60 $L/profile.md
  fi
  scripts/peer_llamacpp.sh status 2>/dev/null | tail -3
  tar -czf "$OUT/sweep-logs.tgz" -C /tmp/out sweep
  ;;
gemvq)
  # The single-row Q4_K GEMV on int16 activations (gpu/gemvq.go): its tests
  # and the matmul tests that route one Q4_K row to it, the rows bench and
  # `bench speed` decode with and without it (FTCHAT_GEMVQ=0), the engine's
  # GPU tests; starts the llama.cpp build for the peer call.
  L=/tmp/out/gemvq; mkdir -p $L; [ -x $B/ftchat ] || unpack
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $L/machine.txt
  WORK=/tmp/peer JOBS=8 DETACH=1 scripts/peer_llamacpp.sh build
  gen llama-3.1-8b $L8
  gen smollm2-135m /tmp/s.gguf
  stamp "gpu tests: gemvq, gemmq, the matmul paths"
  T_TEST=200 gtests gpu gpu.test 'TestMatMulGemvq|TestGemvqEmulation|TestMatMulGemmq|TestMatMulAllTypes|TestMatMulGemvPaths|TestMatMulGemvr|TestKernelModules|TestHybridModelGPUvsCPU' $L/gpu_test.log
  stamp "rows bench, one row: gemvq (default) and gemmq"
  for q in 1 0; do ROWS_N=1 rows gemvq$q "" FTCHAT_GEMVQ=$q FTCHAT_ROWS_MODES=default,group; done
  for q in 1 0; do
    stamp "bench speed decode, FTCHAT_GEMVQ=$q"
    FTCHAT_GEMVQ=$q timeout 60 $B/ftchat bench speed --model $L8 --device cuda --ctx-size 8192 --depths 0,4096 \
      --dtypes fp8_e4m3 --prefill 512 --decode 64 >$L/speed_gemvq$q.txt 2>&1
    echo "rc=$?"; grep -E '^(fp8|bf16)' $L/speed_gemvq$q.txt
  done
  stamp "engine GPU tests"
  T_TEST=170 gtests engine engine.test 'GPU' $L/engine_test.log
  WORK=/tmp/peer scripts/peer_llamacpp.sh status 2>/dev/null | grep -E "detached|build" | tail -3
  tar -czf "$OUT/gemvq-logs.tgz" -C /tmp/out gemvq
  ;;
gemvqrows)
  # gemvq with 1, 2 and 4 rows a warp (FTCHAT_GEMVQ_ROWS): the test (the
  # same bits for each) and the one-row rows bench.
  L=/tmp/out/gemvqrows; mkdir -p $L; [ -x $B/ftchat ] || unpack
  T_TEST=60 gtests gpu gpu.test '^TestMatMulGemvq$|^TestKernelModules$' $L/gpu_test.log
  for r in 1 2 4; do ROWS_N=1 rows r$r "" FTCHAT_GEMVQ_ROWS=$r FTCHAT_ROWS_MODES=default,group; done
  tar -czf "$OUT/gemvqrows-logs.tgz" -C /tmp/out gemvqrows
  ;;
q6k)
  # (prepared, not run) gemvq for Q6_K, opt-in until this passes:
  # TestMatMulGemvq (both types), the Q6_K rows bench with and without it,
  # the engine's GPU tests with it on.
  L=/tmp/out/q6k; mkdir -p $L; [ -x $B/ftchat ] || unpack
  gen smollm2-135m /tmp/s.gguf
  T_TEST=60 gtests gpu gpu.test '^TestMatMulGemvq$|^TestKernelModules$' $L/gpu_test.log
  for q in 1 0; do ROWS_N=1 rows q6k$q "" FTCHAT_ROWS_TYPE=Q6_K FTCHAT_GEMVQ_Q6K=$q FTCHAT_ROWS_MODES=default,group; done
  T_TEST=170 gtests engine engine.test 'GPU' $L/engine_test.log FTCHAT_GEMVQ_Q6K=1
  tar -czf "$OUT/q6k-logs.tgz" -C /tmp/out q6k
  ;;
speedrows)
  # `bench speed` decode with 4 and 1 rows a gemvq warp, then the 8B table
  # at 0/4K/32K with 4 (the two calls after gemvqrows, on the same machine).
  [ -x $B/ftchat ] || unpack
  gen llama-3.1-8b $L8
  for r in 4 1; do
    FTCHAT_GEMVQ_ROWS=$r timeout 40 $B/ftchat bench speed --model $L8 --device cuda --ctx-size 8192 --depths 0,4096 \
      --dtypes fp8_e4m3 --prefill 512 --decode 64 2>&1 | grep -E "^fp8" | sed "s/^/rows=$r /"
  done
  FTCHAT_GEMVQ_ROWS=4 timeout 110 $B/ftchat bench speed --model $L8 --device cuda --ctx-size 33792 --depths 0,4096,32768 \
    --dtypes fp8_e4m3,bf16 --prefill 512 --decode 128 2>&1 | grep -E "^(fp8|bf16)"
  ;;
ncu)
  # Nsight Compute on one row's grouped gate/up (gemmqg8) and down
  # (gemmq8), then the rows bench again (committed PTX)
  # (the sweep ran beside the llama.cpp build).
  L=/tmp/out/ncu; mkdir -p $L; [ -x $B/ftchat ] || unpack
  NCU=$(find_ncu)
  if [ -n "$NCU" ]; then
    stamp "ncu: n=1 gate/up and down"
    (cd gpu && FTCHAT_ROWS_SHAPES=gate,up,down FTCHAT_ROWS_MODES=group timeout 120 "$NCU" --clock-control none \
      --target-processes all --kernel-name 'regex:^gemmqg?8_' --launch-skip 6 --launch-count 2 \
      --section SpeedOfLight --section WarpStateStats --section Occupancy --section SchedulerStats \
      --section MemoryWorkloadAnalysis --section LaunchStats \
      $B/gpu.test -test.run '^$' -test.bench 'MatMulDecodeRows/n=1$/group$' -test.benchtime 1x) >$L/ncu_1.txt 2>&1
    echo "rc=$?"; grep -iE "^\s+gemmq|Duration|DRAM Throughput|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Compute \(SM\) Throughput|Achieved Occupancy|Issued Warp|No Eligible|Registers Per|Warp Cycles Per Issued|Stall|Block Limit|Theoretical Occ" $L/ncu_1.txt | head -60
  fi
  rows committed2 ""
  tar -czf "$OUT/ncu-logs.tgz" -C /tmp/out ncu
  ;;
peer)
  L=/tmp/out/peer; mkdir -p $L; [ -x $B/ftchat ] || unpack
  gen llama-3.1-8b $L8
  d=$(ptxdir "${PTX:-}")
  stamp "waiting for llama-bench"
  WORK=/tmp/peer TRIES=${TRIES:-60} scripts/peer_llamacpp.sh wait || { echo "no llama-bench"; tail -20 /tmp/peer/detached.log; }
  LB=/tmp/peer/llama.cpp/build/bin/llama-bench
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $L/machine.txt
  if [ -x $LB ]; then
    for kv in f16 q8_0; do
      stamp "llama-bench $kv"
      timeout 150 $LB -m $L8 -ngl 99 -fa 1 -p 512 -n 128 -r ${REPS:-2} -d 0,4096,32768 -ctk $kv -ctv $kv -o md >$L/lb_$kv.md 2>$L/lb_$kv.err
      echo "rc=$?"; cat $L/lb_$kv.md
    done
  fi
  stamp "ftchat bench speed (PTX ${PTX:-committed})"
  FTCHAT_PTX_DIR=$d timeout 200 $B/ftchat bench speed --model $L8 --device cuda --ctx-size 33792 --depths 0,4096,32768 \
    --dtypes bf16,fp8_e4m3 --prefill 512 --decode 128 >$L/speed.txt 2>&1
  echo "rc=$?"; cat $L/speed.txt | tail -20
  tar -czf "$OUT/peer-logs.tgz" -C /tmp/out peer
  ;;
*)
  echo "usage: $0 sweep|gemvq|gemvqrows|speedrows|q6k|ncu|peer" >&2
  exit 2
  ;;
esac
