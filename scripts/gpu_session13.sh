#!/usr/bin/env bash
# Device calls of the eleventh and twelfth sessions (2026-12-03/04). Here:
#   scripts/gpu_session.sh bundle
#   (eleventh, `first` only:)
#   VARIANTS="base90 faplo0 fp8hlo fp8h fp8hq" scripts/attn_variants.sh
#   VARIANTS="base loader2 fastdq both" TYPES="q4_k q6_k" scripts/moe_variants.sh
#   gzip -9 .gpu/ptx/*/*.ptx .gpu-moe/ptx/*/*.ptx
# There (carry .gpu, .gpu-peer and for `first` .gpu-moe; chain the calls
# without a pause, the machine goes back ~30 s after one and /tmp with it):
#   scripts/gpu_session13.sh first
#     starts the llama.cpp build (detached); writes the 8B, SmolLM2 and (in
#     the background) Qwen3-30B-A3B files; for each FA prefill variant of
#     .gpu/ptx (the precision of q and p: hi/lo halves or one, bf16 or fp16
#     MMAs over FP8 pages) TestAttentionFAMatchesHostStore with its worst
#     error per case and the FA bench (FTCHAT_FA_LEAN: attn_fa alone,
#     512 new tokens at 0/4K/32K, three shapes); for each grouped-GEMM
#     variant of .gpu-moe/ptx TestMoEPaths -short and BenchmarkMoE at 256
#     and 512 rows. It picks the fastest FA variant at 32K over fp8 pages
#     among those whose test passed, and the fastest MoE variant at 512
#     rows among those that passed, into /tmp/chosen (a FTCHAT_PTX_DIR).
#   scripts/gpu_session13.sh check
#     (twelfth session: the chosen variants are the embedded defaults) the
#     llama.cpp build (detached), the three files, every gpu-package test,
#     every engine GPU test, the FA bench (full: both kernels, ceilings)
#     and BenchmarkMoE at 256/512 rows, a profiled 30B decode step.
#   scripts/gpu_session13.sh peer8b
#     llama-bench (f16, q8_0 KV) and `ftchat bench speed` (bf16, fp8) on the
#     8B file at 0/4K/32K and on SmolLM2 at 0/4K, ftchat with $PTXD (a
#     FTCHAT_PTX_DIR; empty: the embedded PTX); with PTXD set, the engine's
#     GPU tests with it.
#   scripts/gpu_session13.sh peer30b
#     the Qwen3-30B-A3B file: llama-bench (f16, q8_0 KV) and `ftchat bench
#     speed` (fp8, bf16) at 0/4K/32K with $PTXD.
#   scripts/gpu_session13.sh router
#     (twelfth session, after the split-k router) the llama.cpp build
#     (detached), the 30B and SmolLM2 files; TestMoERouterLogits and the
#     MoE, hybrid and offload tests of the gpu package, every engine GPU
#     test, BenchmarkMoE, `ftchat bench speed` on the 30B file (fp8, bf16
#     at 0/4K/32K), a profiled 4K prefill; then llama-bench (f16) on the
#     same file once the build is done.
#   BUDGET=420 scripts/gpu_session13.sh final
#     the tests `router` ran out of time for under the llama.cpp build's
#     load (TestMoERouterLogits, TestMoEPaths, the engine's expert
#     placement and hybrid resume tests), then `ftchat bench speed` on the
#     30B file without a build beside it, as time allows.
#   BUDGET=300 scripts/gpu_session13.sh waves
#     FA auto-splitting for one wave of CTAs (the new default) against two
#     (FTCHAT_FA_WAVES=2) in `ftchat bench speed` on the 8B and 30B files
#     at 4K/32K, back to back.
#   scripts/gpu_session13.sh next
#     (prepared for the next session; carry .gpu and .gpu-moe after
#     `VARIANTS="base loader1 fastdq prefetch" TYPES="q4_k q6_k"
#     scripts/moe_variants.sh`) each grouped-GEMM variant: TestMoEPaths
#     -short and BenchmarkMoE; then Nsight Compute on attn_fa over fp8 pages
#     at 32K (Llama-3.1-8B shape, lean) and on the 30B shape's grouped
#     gate/up GEMM, to see what bounds them; and an Nsight Systems trace of
#     8B decode steps (fp8 at 4K) through scripts/kernel_gaps.py: how much
#     of a step is idle between kernels (launch-bound or kernel-bound).
# Logs: one tgz per call in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-.gpu/out}
B=/tmp/bin
L8=/tmp/l8b.gguf
M30=/tmp/m30.gguf
CH=/tmp/chosen
PTXD=${PTXD:-}
mkdir -p "$OUT"
. scripts/gpu_lib.sh # stamp, unpack, gen, gtests, speed, llamabench
T0=$(date +%s)
fits() { [ $(($(date +%s) - T0 + $1)) -le ${BUDGET:-570} ]; }
# moevariant DIR: TestMoEPaths -short and BenchmarkMoE (256/512 rows) with
# the grouped-GEMM PTX of DIR into $L/moe{test,bench}_<name>.txt; prints
# both and returns the test's exit code.
moevariant() {
  local d=$1 v rc
  v=$(basename "$d")
  stamp "MoE variant $v"
  (cd gpu && FTCHAT_PTX_DIR=$PWD/../$d FTCHAT_REQUIRE_GPU=1 timeout 60 $B/gpu.test -test.short -test.v -test.run 'TestMoEPaths' -test.timeout 120s) >$L/moetest_$v.txt 2>&1
  rc=$?
  echo "test rc=$rc: $(grep -c 'relative error' $L/moetest_$v.txt) compared, $(grep -c -- '--- FAIL' $L/moetest_$v.txt) FAIL"
  (cd gpu && FTCHAT_PTX_DIR=$PWD/../$d timeout 60 $B/gpu.test -test.run '^$' -test.bench 'BenchmarkMoE$/down=(Q4_K|Q6_K)/n=(256|512)/mode=2$' -test.benchtime 20x) >$L/moebench_$v.txt 2>&1
  grep -E '^BenchmarkMoE' $L/moebench_$v.txt | sed -E 's/ +/ /g' | awk '{print "   ", $1, $3, $4, $5, $6}'
  return $rc
}
# fa32k MD: attn_fa's TFLOP/s on fp8 pages at 32K on the Llama-3.1-8B shape
# in the FA bench table MD (its last column).
fa32k() { awk -F'|' '$2 ~ /Llama-3.1-8B/ && $3 ~ /e4m3/ && $6 ~ /33280/ {gsub(/ /, "", $13); print $13}' "$1" | head -1; }
case ${1:-} in
first)
  L=/tmp/out/first; mkdir -p $L; [ -x $B/ftchat ] || unpack
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $L/machine.txt
  WORK=/tmp/peer JOBS=8 DETACH=1 scripts/peer_llamacpp.sh build
  gen llama-3.1-8b $L8
  gen smollm2-135m /tmp/s.gguf
  [ -s $M30 ] || setsid nohup sh -c "$B/ftchat dev gen-model --preset qwen3-30b-a3b --type Q4_K -o $M30.tmp && mv $M30.tmp $M30" \
    >/tmp/gen30.log 2>&1 </dev/null &
  best="" bestv=0
  for d in .gpu/ptx/*/; do
    v=$(basename "$d")
    stamp "FA variant $v"
    (cd gpu && FTCHAT_PTX_DIR=$PWD/../$d FTCHAT_REQUIRE_GPU=1 timeout 60 $B/gpu.test -test.v -test.run '^TestAttentionFAMatchesHostStore$') >$L/fatest_$v.txt 2>&1
    rc=$?
    echo "test rc=$rc; worst errors:"; grep -oE 'max rel. error [0-9.e+-]+' $L/fatest_$v.txt | awk '{print $4}' | sort -g | tail -3 | tr '\n' ' '; echo
    grep -E '^\s+--- FAIL' $L/fatest_$v.txt | head -5
    (cd gpu && FTCHAT_PTX_DIR=$PWD/../$d FTCHAT_BENCH_ONLY=fa FTCHAT_FA_LEAN=1 FTCHAT_BENCH_MD=$L/fa_$v.md timeout 90 $B/gpu.test \
      -test.run '^$' -test.bench '^BenchmarkAttention$' -test.benchtime 5x) >$L/fabench_$v.txt 2>&1
    echo "bench rc=$?"; grep -E '^\|' $L/fa_$v.md | awk -F'|' '{print $2,$3,$6,$9,$13}' | tail -n +3
    t=$(fa32k $L/fa_$v.md)
    if [ $rc = 0 ] && [ -n "$t" ] && awk -v a="$t" -v b="$bestv" 'BEGIN{exit !(a > b)}'; then best=$v bestv=$t; fi
  done
  stamp "FA chosen: $best ($bestv TFLOP/s, fp8 at 32K)"
  mkdir -p $CH; rm -f $CH/*
  [ -n "$best" ] && cp .gpu/ptx/$best/* $CH/
  echo "$best" >$CH/fa_variant.txt
  mbest="" mbestv=0
  for d in .gpu-moe/ptx/*/; do
    v=$(basename "$d")
    fits 60 || break
    moevariant "$d"
    rc=$?
    t=$(grep -E '^BenchmarkMoE/down=Q4_K/n=512/mode=2' $L/moebench_$v.txt | grep -oE '[0-9.]+ us/op' | awk '{print $1}')
    if [ $rc = 0 ] && [ -n "$t" ] && { [ -z "$mbest" ] || awk -v a="$t" -v b="$mbestv" 'BEGIN{exit !(a < b)}'; }; then mbest=$v mbestv=$t; fi
  done
  stamp "MoE chosen: $mbest ($mbestv us at 512 rows)"
  [ -n "$mbest" ] && [ "$mbest" != base ] && cp .gpu-moe/ptx/$mbest/* $CH/
  echo "$mbest" >$CH/moe_variant.txt
  ls $CH
  fits 60 && speed fp8_32k_base 60 FTCHAT_PROFILE=0 -- --model $L8 --ctx-size 33792 --depths 32768 --dtypes fp8_e4m3 --prefill 512 --decode 16
  fits 60 && speed fp8_32k_chosen 60 FTCHAT_PTX_DIR=$CH -- --model $L8 --ctx-size 33792 --depths 32768 --dtypes fp8_e4m3 --prefill 512 --decode 16
  WORK=/tmp/peer scripts/peer_llamacpp.sh status 2>/dev/null | tail -3
  ls -l /tmp/*.gguf*
  tar -czf "$OUT/first-logs.tgz" -C /tmp/out first
  ;;
check)
  L=/tmp/out/check; mkdir -p $L; [ -x $B/ftchat ] || unpack
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $L/machine.txt
  WORK=/tmp/peer JOBS=10 DETACH=1 scripts/peer_llamacpp.sh build
  gen llama-3.1-8b $L8
  gen smollm2-135m /tmp/s.gguf
  [ -s $M30 ] || setsid nohup sh -c "$B/ftchat dev gen-model --preset qwen3-30b-a3b --type Q4_K -o $M30.tmp && mv $M30.tmp $M30" \
    >/tmp/gen30.log 2>&1 </dev/null &
  stamp "FA test, worst error per case"
  (cd gpu && FTCHAT_REQUIRE_GPU=1 timeout 60 $B/gpu.test -test.v -test.run '^TestAttentionFAMatchesHostStore$') >$L/fatest.txt 2>&1
  echo "rc=$?; worst: $(grep -oE 'max rel. error [0-9.e+-]+' $L/fatest.txt | awk '{print $4}' | sort -g | tail -3 | tr '\n' ' ')"
  stamp "every gpu-package test"
  T_TEST=150 gtests gpu gpu.test . $L/gpu_test.log
  stamp "every engine GPU test"
  T_TEST=170 gtests engine engine.test GPU $L/engine_test.log
  stamp "FA bench"
  (cd gpu && FTCHAT_BENCH_ONLY=fa FTCHAT_BENCH_MD=$L/fa.md timeout 80 $B/gpu.test \
    -test.run '^$' -test.bench '^BenchmarkAttention$' -test.benchtime 5x) >$L/fabench.txt 2>&1
  echo "rc=$?"; grep -E '^\|' $L/fa.md | tail -n +3 | head -40
  stamp "MoE bench"
  (cd gpu && timeout 50 $B/gpu.test -test.run '^$' -test.bench 'BenchmarkMoE$/down=(Q4_K|Q6_K)/n=(256|512)/mode=2$' -test.benchtime 20x) >$L/moebench.txt 2>&1
  grep -E '^BenchmarkMoE' $L/moebench.txt | sed -E 's/ +/ /g'
  stamp "waiting for the 30B file"
  for _ in $(seq 24); do [ -s $M30 ] && break; sleep 5; done
  if [ -s $M30 ] && fits 60; then
    speed m30prof 60 FTCHAT_PROFILE=1 FTCHAT_PROFILE_OUT=$L/m30_profile.txt -- --model $M30 --ctx-size 8192 --depths 4096 --dtypes fp8_e4m3 --prefill 512 --decode 16
    head -40 $L/m30_profile.txt
  fi
  WORK=/tmp/peer scripts/peer_llamacpp.sh status 2>/dev/null | tail -3
  tar -czf "$OUT/check-logs.tgz" -C /tmp/out check
  ;;
router)
  L=/tmp/out/router; mkdir -p $L; [ -x $B/ftchat ] || unpack
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $L/machine.txt
  WORK=/tmp/peer JOBS=16 DETACH=1 scripts/peer_llamacpp.sh build
  gen smollm2-135m /tmp/s.gguf
  [ -s $M30 ] || setsid nohup sh -c "$B/ftchat dev gen-model --preset qwen3-30b-a3b --type Q4_K -o $M30.tmp && mv $M30.tmp $M30" \
    >/tmp/gen30.log 2>&1 </dev/null &
  stamp "router, MoE, hybrid and offload tests"
  T_TEST=120 gtests gpu gpu.test 'Router|MoE|Hybrid|Offload|Split' $L/gpu_test.log
  grep -E 'slices=.*max error' $L/gpu_test.log | head -24
  stamp "every engine GPU test"
  T_TEST=150 gtests engine engine.test GPU $L/engine_test.log
  stamp "MoE bench"
  (cd gpu && timeout 50 $B/gpu.test -test.run '^$' -test.bench 'BenchmarkMoE$/down=(Q4_K|Q6_K)/n=(256|512)/mode=2$' -test.benchtime 20x) >$L/moebench.txt 2>&1
  grep -E '^BenchmarkMoE' $L/moebench.txt | sed -E 's/ +/ /g'
  stamp "waiting for the 30B file"
  for _ in $(seq 36); do [ -s $M30 ] && break; sleep 5; done
  ls -l $M30
  speed m30 200 FTCHAT_PTX_DIR=$PTXD -- --model $M30 --ctx-size 33792 --depths 0,4096,32768 \
    --dtypes fp8_e4m3,bf16 --prefill 512 --decode 128
  fits 60 && speed m30prof 50 FTCHAT_PROFILE=1 FTCHAT_PROFILE_OUT=$L/m30_profile.txt -- --model $M30 --ctx-size 8192 --depths 4096 --dtypes fp8_e4m3 --prefill 512 --decode 4
  grep -E 'moe_router|moe_gemm|attn_fa|outside' $L/m30_profile.txt | head -12
  fits 40 && TRIES=$(( (570 - $(date +%s) + T0 - 30) / 3 )) REPS=1 llamabench $M30 m30 0,4096,32768 f16
  tar -czf "$OUT/router-logs.tgz" -C /tmp/out router
  ;;
final)
  L=/tmp/out/final; mkdir -p $L; [ -x $B/ftchat ] || unpack
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $L/machine.txt
  gen smollm2-135m /tmp/s.gguf
  [ -s $M30 ] || setsid nohup sh -c "$B/ftchat dev gen-model --preset qwen3-30b-a3b --type Q4_K -o $M30.tmp && mv $M30.tmp $M30" \
    >/tmp/gen30.log 2>&1 </dev/null &
  stamp "router and MoE path tests"
  T_TEST=100 gtests gpu gpu.test '^(TestMoERouterLogits|TestMoEPaths)$' $L/gpu_test.log
  grep -E 'slices=.*max error' $L/gpu_test.log | head -24
  stamp "engine GPU tests not reached before"
  T_TEST=100 gtests engine engine.test 'TestGPUExpertPlacement|TestHybridResumeLogitsMatchFromScratchGPU' $L/engine_test.log
  stamp "waiting for the 30B file"
  for _ in $(seq 30); do [ -s $M30 ] && break; sleep 5; done
  fits 100 && speed m30 120 FTCHAT_PTX_DIR=$PTXD -- --model $M30 --ctx-size 33792 --depths 0,4096,32768 \
    --dtypes fp8_e4m3,bf16 --prefill 512 --decode 64
  tar -czf "$OUT/final-logs.tgz" -C /tmp/out final
  ;;
waves)
  L=/tmp/out/waves; mkdir -p $L; [ -x $B/ftchat ] || unpack
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $L/machine.txt
  [ -s $M30 ] || setsid nohup sh -c "$B/ftchat dev gen-model --preset qwen3-30b-a3b --type Q4_K -o $M30.tmp && mv $M30.tmp $M30" \
    >/tmp/gen30.log 2>&1 </dev/null &
  gen llama-3.1-8b $L8
  for w in 2 1; do
    speed l8b_w$w 60 FTCHAT_FA_WAVES=$w -- --model $L8 --ctx-size 33792 --depths 4096,32768 --dtypes fp8_e4m3,bf16 --prefill 512 --decode 8
  done
  for _ in $(seq 30); do [ -s $M30 ] && break; sleep 5; done
  for w in 2 1; do
    fits 50 && speed m30_w$w 60 FTCHAT_FA_WAVES=$w -- --model $M30 --ctx-size 33792 --depths 4096,32768 --dtypes fp8_e4m3,bf16 --prefill 512 --decode 8
  done
  tar -czf "$OUT/waves-logs.tgz" -C /tmp/out waves
  ;;
next)
  L=/tmp/out/next; mkdir -p $L; [ -x $B/ftchat ] || unpack
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $L/machine.txt
  for d in .gpu-moe/ptx/*/; do
    [ -d "$d" ] || continue
    fits 60 || break
    moevariant "$d"
  done
  NCU=$(find_ncu)
  if [ -n "$NCU" ] && fits 120; then
    stamp "ncu: attn_fa over fp8 pages at 32K"
    (cd gpu && FTCHAT_BENCH_ONLY=fa FTCHAT_FA_LEAN=1 FTCHAT_FA_DEPTHS=32768 timeout 150 "$NCU" --clock-control none \
      --target-processes all --kernel-name 'regex:^attn_fa_e4m3_d128' --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section Occupancy --section SchedulerStats \
      --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section LaunchStats \
      $B/gpu.test -test.run '^$' -test.bench '^BenchmarkAttention$' -test.benchtime 1x) >$L/ncu_fa.txt 2>&1
    echo "rc=$?"; grep -iE "^\s+attn_fa|Duration|DRAM Throughput|L2 Hit|L1/TEX Hit|Mem Busy|Compute \(SM\) Throughput|Achieved Occupancy|Issued Warp|No Eligible|Registers Per|Warp Cycles Per Issued|Stall|Block Limit|Pipe" $L/ncu_fa.txt | head -50
  fi
  if [ -n "$NCU" ] && fits 90; then
    stamp "ncu: the grouped gate/up GEMM, 512 rows"
    (cd gpu && timeout 100 "$NCU" --clock-control none --target-processes all --kernel-name 'regex:^moe_gemm_gu_q4_k' \
      --launch-skip 2 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section Occupancy \
      --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats \
      $B/gpu.test -test.run '^$' -test.bench 'BenchmarkMoE$/down=Q4_K/n=512/mode=2$' -test.benchtime 3x) >$L/ncu_moe.txt 2>&1
    echo "rc=$?"; grep -iE "^\s+moe_gemm|Duration|DRAM Throughput|L2 Hit|Mem Busy|Compute \(SM\) Throughput|Achieved Occupancy|Issued Warp|No Eligible|Registers Per|Warp Cycles Per Issued|Stall|Block Limit" $L/ncu_moe.txt | head -40
  fi
  NSYS=$(command -v nsys || ls /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda*/bin/nsys 2>/dev/null | head -1)
  if [ -n "$NSYS" ] && fits 100; then
    stamp "nsys: 8B decode steps, fp8 at 4K"
    gen llama-3.1-8b $L8
    timeout 90 "$NSYS" profile --trace=cuda --cuda-graph-trace=node --force-overwrite true -o /tmp/nsys_l8b \
      $B/ftchat bench speed --model $L8 --device cuda --ctx-size 8192 --depths 4096 --dtypes fp8_e4m3 --prefill 512 --decode 64 \
      >$L/nsys_run.txt 2>&1
    echo "rc=$?"; grep -E '^fp8' $L/nsys_run.txt
    "$NSYS" stats --report cuda_gpu_trace --format csv --force-export true --output /tmp/nsys_l8b /tmp/nsys_l8b.nsys-rep >$L/nsys_stats.txt 2>&1
    f=$(ls /tmp/nsys_l8b*cuda_gpu_trace*.csv 2>/dev/null | head -1)
    [ -n "$f" ] && python3 scripts/kernel_gaps.py "$f" 100 | tee $L/gaps.txt && xz -c "$f" >$L/gpu_trace.csv.xz
  fi
  tar -czf "$OUT/next-logs.tgz" -C /tmp/out next
  ;;
peer8b)
  L=/tmp/out/peer8b; mkdir -p $L; [ -x $B/ftchat ] || unpack
  gen llama-3.1-8b $L8
  gen smollm2-135m /tmp/s.gguf
  REPS=2 llamabench $L8 l8b 0,4096,32768 f16 q8_0
  speed l8b 200 FTCHAT_PTX_DIR=$PTXD -- --model $L8 --ctx-size 33792 --depths 0,4096,32768 \
    --dtypes bf16,fp8_e4m3 --prefill 512 --decode 128
  REPS=2 llamabench /tmp/s.gguf smol 0,4096 f16 q8_0
  speed smol 60 FTCHAT_PTX_DIR=$PTXD -- --model /tmp/s.gguf --ctx-size 8192 --depths 0,4096 \
    --dtypes bf16,fp8_e4m3 --prefill 512 --decode 128
  if [ -n "$PTXD" ] && fits 150; then
    stamp "engine GPU tests with $PTXD"
    T_TEST=$((570 - $(date +%s) + T0 - 15)) gtests engine engine.test 'GPU' $L/engine_test.log "FTCHAT_PTX_DIR=$PTXD"
  fi
  tar -czf "$OUT/peer8b-logs.tgz" -C /tmp/out peer8b
  ;;
peer30b)
  L=/tmp/out/peer30b; mkdir -p $L; [ -x $B/ftchat ] || unpack
  stamp "waiting for the 30B file"
  for _ in $(seq 60); do [ -s $M30 ] && break; sleep 5; done
  gen qwen3-30b-a3b $M30; ls -l $M30
  REPS=1 llamabench $M30 m30 0,4096,32768 f16 q8_0
  speed m30 220 FTCHAT_PTX_DIR=$PTXD -- --model $M30 --ctx-size 33792 --depths 0,4096,32768 \
    --dtypes fp8_e4m3,bf16 --prefill 512 --decode 128
  tar -czf "$OUT/peer30b-logs.tgz" -C /tmp/out peer30b
  ;;
*)
  echo "usage: $0 first|check|router|final|waves|next|peer8b|peer30b" >&2
  exit 2
  ;;
esac
