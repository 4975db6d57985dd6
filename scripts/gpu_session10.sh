#!/usr/bin/env bash
# Device calls of the eighth session (2026-12-03). Here: scripts/gpu_session.sh
# bundle. There (carry .gpu; chain the calls, the machine goes back ~30 s
# after one):
#
#   scripts/gpu_session10.sh probe
#     one call, most useful first, each part skipped when the call's 560 s
#     would not hold it: gemmq's grid (FTCHAT_GEMMQ_CTAS) at 8/16/32 rows;
#     the serve load test at 1 and 16 with the batcher's step profile (host
#     forward / device wait / sample / other a step); the FA prefill
#     attention at 0/4K/32K/128K (issue 11/13: prefill falls behind
#     llama.cpp from 4K); the 16-row serve without CUDA graphs.
#   scripts/gpu_session10.sh group
#     the grouped gemmq (q/k/v and gate/up of one x in one launch and one
#     reduce) and FA prefill at 8 warps: the GPU tests, the rows bench with
#     and without grouping at 2 and 3 CTAs per SM, the serve load test at
#     1..16 (128 tokens a request, bf16 and fp8; then 64 tokens, and
#     FTCHAT_GEMMQ_GROUP=0), and `bench speed` at 4K/32K with FA at 8 and
#     4 warps.
#   scripts/gpu_session10.sh single
#     one row through gemmq (FTCHAT_GEMMQ_MIN=1, the default since), alone
#     and grouped, against the whole-x GEMV: the rows bench, `bench speed`
#     decode, the serve load test at 1 and 16, and the tests with one row on
#     gemmq. (It ran with the bench's modes then named q1 and q1group.)
#   scripts/gpu_session10.sh all
#     (prepared, not run) every GPU test of the gpu and engine packages.
#   scripts/gpu_session10.sh verify
#     the GPU tests the group call left out, the engine's GPU tests, and
#     TestGPUSessionDeviceSampling three more times.
# Logs: one tgz per call in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-.gpu/out}
B=/tmp/bin
L8=/tmp/l8b.gguf
mkdir -p "$OUT" $B
. scripts/gpu_lib.sh # stamp, unpack, gen, gtests
T0=$(date +%s)
# fits S: whether S more seconds stay inside the call's budget.
fits() { [ $(($(date +%s) - T0 + $1)) -le ${BUDGET:-560} ]; }
serve() { # tag, env..., then loadtest flags after --
  local tag=$1; shift
  local envs=(); while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  stamp "serve $tag"
  env "${envs[@]}" timeout 150 python3 scripts/loadtest.py --ftchat $B/ftchat --model $L8 --device cuda \
    --json $L/lt_$tag.json "$@" >$L/lt_$tag.txt 2>&1
  echo "rc=$?"; tail -n 16 $L/lt_$tag.txt
}
case ${1:-} in
probe)
  L=/tmp/out/probe; mkdir -p $L; [ -x $B/ftchat ] || unpack
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  gen llama-3.1-8b $L8
  stamp "gemmq grid sweep (CTAs per SM; default 3 then)"
  for c in 2 3 4 6; do
    fits 40 || break
    (cd gpu && FTCHAT_GEMMQ_CTAS=$c timeout 40 $B/gpu.test -test.run '^$' -test.bench 'MatMulDecodeRows/n=(8|16|32)$/default$' \
      -test.benchtime 20x) >$L/rows_ctas$c.txt 2>&1
    grep -E '^Benchmark' $L/rows_ctas$c.txt | sed -E "s/^/ctas=$c /; s/ +[0-9]+ ns\/op//"
  done
  fits 150 && serve prof FTCHAT_BATCH_PROFILE=1 -- --max-tokens 128 --kv-dtypes fp8_e4m3 --levels 1,16 --profile
  if fits 160; then
    stamp "FA prefill attention at depth"
    (cd gpu && FTCHAT_BENCH_ONLY=fa FTCHAT_FA_DEPTHS=0,4096,32768,130560 FTCHAT_BENCH_MD=$L/fa.md timeout 150 $B/gpu.test \
      -test.run '^$' -test.bench 'Attention' -test.benchtime 5x) >$L/fa.txt 2>&1
    echo "rc=$?"; tail -40 $L/fa.md 2>/dev/null || tail -20 $L/fa.txt
  fi
  fits 150 && serve nographs FTCHAT_CUDA_GRAPHS=0 FTCHAT_BATCH_PROFILE=1 -- --max-tokens 128 --kv-dtypes fp8_e4m3 --levels 1,16 --profile
  tar -czf "$OUT/probe-logs.tgz" -C /tmp/out probe
  ;;
group)
  L=/tmp/out/group; mkdir -p $L; [ -x $B/ftchat ] || unpack
  gen llama-3.1-8b $L8
  gen smollm2-135m /tmp/s.gguf
  stamp "gpu tests"
  T_TEST=170 gtests gpu gpu.test 'Gemmq|MatMul|Graph|F16Compute|AttentionFA|AttentionKernelsForEveryPair' $L/gpu_test.log
  stamp "engine GPU tests"
  T_TEST=120 gtests engine engine.test 'GPU' $L/engine_test.log
  stamp "rows bench: one launch per weight against grouped, CTAs per SM 2 (default) and 3"
  for c in 2 3; do
    fits 40 || break
    (cd gpu && FTCHAT_GEMMQ_CTAS=$c FTCHAT_ROWS_MODES=default,group timeout 40 $B/gpu.test -test.run '^$' \
      -test.bench 'MatMulDecodeRows/n=(2|8|16|32)$' -test.benchtime 20x) >$L/rows_ctas$c.txt 2>&1
    grep -E '^Benchmark' $L/rows_ctas$c.txt | sed -E "s/^/ctas=$c /; s/ +[0-9]+ ns\/op//"
  done
  fits 200 && serve t128 FTCHAT_BATCH_PROFILE=1 -- --max-tokens 128 --kv-dtypes bf16,fp8_e4m3 --levels 1,2,4,8,16 --profile
  fits 90 && serve t64 FTCHAT_BATCH_PROFILE=1 -- --max-tokens 64 --kv-dtypes fp8_e4m3 --levels 1,16 --profile
  fits 90 && serve nogroup FTCHAT_GEMMQ_GROUP=0 FTCHAT_BATCH_PROFILE=1 -- --max-tokens 128 --kv-dtypes fp8_e4m3 --levels 1,16 --profile
  for w in 8 4; do
    fits 70 || break
    stamp "bench speed, FA prefill with $w warps"
    FTCHAT_FA_WARPS=$w timeout 70 $B/ftchat bench speed --model $L8 --device cuda --ctx-size 33792 --depths 4096,32768 \
      --dtypes fp8_e4m3 --prefill 512 --decode 16 >$L/speed_w$w.txt 2>&1
    echo "rc=$?"; tail -8 $L/speed_w$w.txt
  done
  tar -czf "$OUT/group-logs.tgz" -C /tmp/out group
  ;;
verify)
  L=/tmp/out/verify; mkdir -p $L; [ -x $B/ftchat ] || unpack
  gen smollm2-135m /tmp/s.gguf
  stamp "gpu tests the group call did not run (FA prefill at 8 warps reaches the hybrid, MoE and offload paths)"
  T_TEST=230 gtests gpu gpu.test 'Hybrid|MoE|FP4|Attention|Norm|Sample|Offload|Split|Host|Expert|Placement' $L/gpu_test.log
  stamp "engine GPU tests"
  T_TEST=130 gtests engine engine.test 'GPU' $L/engine_test.log
  stamp "TestGPUSessionDeviceSampling, 3 more times (step compositions now fixed)"
  (cd engine && FTCHAT_TEST_MODEL=/tmp/s.gguf FTCHAT_REQUIRE_GPU=1 timeout 60 $B/engine.test -test.v \
    -test.run '^TestGPUSessionDeviceSampling$' -test.count 3) >$L/devsample.log 2>&1
  echo "rc=$?"; grep -E '^--- (PASS|FAIL)' $L/devsample.log
  tar -czf "$OUT/verify-logs.tgz" -C /tmp/out verify
  ;;
all)
  # For the next session: every GPU test of the gpu and engine packages on
  # this tree (the eighth session's last changes, one row on gemmq by
  # default, the hybrid blocks' grouped matmuls and the mixed-type sets of
  # MatMulShared, did not run on a GPU as a whole).
  L=/tmp/out/all; mkdir -p $L; [ -x $B/ftchat ] || unpack
  gen smollm2-135m /tmp/s.gguf
  stamp "gpu tests, all"
  T_TEST=400 gtests gpu gpu.test '.' $L/gpu_test.log
  stamp "engine GPU tests"
  T_TEST=150 gtests engine engine.test 'GPU' $L/engine_test.log
  tar -czf "$OUT/all-logs.tgz" -C /tmp/out all
  ;;
single)
  L=/tmp/out/single; mkdir -p $L; [ -x $B/ftchat ] || unpack
  gen llama-3.1-8b $L8
  gen smollm2-135m /tmp/s.gguf
  stamp "one row: the whole-x GEMV against gemmq, alone and grouped"
  (cd gpu && FTCHAT_ROWS_MODES=noq,default,group timeout 40 $B/gpu.test -test.run '^$' \
    -test.bench 'MatMulDecodeRows/n=1$' -test.benchtime 20x) >$L/rows1.txt 2>&1
  grep -E '^Benchmark' $L/rows1.txt | sed -E "s/ +[0-9]+ ns\/op//"
  for m in 2 1; do # 2: one row on the whole-x GEMV (the default when this ran), 1: on gemmq
    fits 45 || break
    stamp "bench speed, FTCHAT_GEMMQ_MIN=$m"
    FTCHAT_GEMMQ_MIN=$m timeout 45 $B/ftchat bench speed --model $L8 --device cuda --ctx-size 8192 --depths 0,4096 \
      --dtypes fp8_e4m3 --prefill 512 --decode 64 >$L/speed_min$m.txt 2>&1
    echo "rc=$?"; grep -E '^fp8' $L/speed_min$m.txt
  done
  stamp "gpu tests: gemmq with one row, grouped"
  T_TEST=60 gtests gpu gpu.test '^TestMatMulGemmq$' $L/gpu_test.log
  stamp "engine GPU tests with FTCHAT_GEMMQ_MIN=1"
  T_TEST=70 gtests engine engine.test 'GPUMatchesCPUWholeModel|GPUDecodeGraphsMatchDirect|GPUSessionDeviceSampling' $L/engine_test.log FTCHAT_GEMMQ_MIN=1
  fits 60 && serve min1 FTCHAT_GEMMQ_MIN=1 FTCHAT_BATCH_PROFILE=1 -- --max-tokens 128 --kv-dtypes fp8_e4m3 --levels 1,16 --profile
  tar -czf "$OUT/single-logs.tgz" -C /tmp/out single
  ;;
*)
  echo "usage: $0 probe|group|verify|single|all" >&2
  exit 2
  ;;
esac
