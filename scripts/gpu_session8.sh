#!/usr/bin/env bash
# Device calls of the seventh session (2026-12-03): the Q4_K GEMM from
# registers (gemmq, gpu/gemmq.go) for 2..32-row matmuls. Here:
# scripts/gpu_session.sh bundle. There (carry .gpu):
#
#   scripts/gpu_session8.sh gemmq
#     gemmq's tests on both compute flavours and the MatMul tests whose
#     paths it now takes over or leaves to the others; the decode-step
#     matmuls by rows with gemmq ("default") and without ("noq"); gemmq's
#     grid (CTAs per SM) at 8/16/32 rows; Nsight Compute on the 16-row down
#     matmul when ncu reads the counters.
#   scripts/gpu_session8.sh serve
#     the serve load test on the Llama-3.1-8B shape (issue 14's >= 8x at
#     16), gemmq's and the attention/graph tests, and the rows bench at
#     1..32. scripts/gpu_session8.sh engine: the engine's GPU and batcher
#     tests (a SmolLM2-shape Q4_K from gen-model as FTCHAT_TEST_MODEL).
# Logs: one tgz per call in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-.gpu/out}
B=/tmp/bin
L8=/tmp/l8b.gguf
mkdir -p "$OUT" $B
. scripts/gpu_lib.sh # stamp, unpack, gtests
case ${1:-} in
gemmq)
  L=/tmp/out/gemmq; mkdir -p $L; [ -x $B/ftchat ] || unpack
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  stamp "tests"
  T_TEST=240 gtests gpu gpu.test 'TestMatMulGemmq|TestMatMulAllTypes|TestMatMulGemvPaths|TestMatMulSplitK|TestMatMulSkinny|TestF16Compute|TestGemmqSplits' $L/tests.log
  grep -E 'gemmq vs (cpu|float64)|worst row|error vs float64' $L/tests.log | sort | uniq -c | sort -rn | head -5
  grep -E 'gemmq.*relative error' $L/tests.log | awk '{print $NF, $0}' | sort -g | tail -3
  stamp "rows: gemmq (default) vs without (noq)"
  (cd gpu && FTCHAT_ROWS_MODES=default,noq,q1 timeout 150 $B/gpu.test -test.run '^$' -test.bench 'MatMulDecodeRows' -test.benchtime 20x) >$L/rows.txt 2>&1
  grep -E '^Benchmark' $L/rows.txt
  stamp "rows, Q6_K weights"
  (cd gpu && FTCHAT_ROWS_TYPE=Q6_K FTCHAT_ROWS_MODES=default,noq,q1 timeout 100 $B/gpu.test -test.run '^$' -test.bench 'MatMulDecodeRows/n=(1|2|8|16|32)/' -test.benchtime 20x) >$L/rows_q6k.txt 2>&1
  grep -E '^Benchmark' $L/rows_q6k.txt
  stamp "gemmq grid sweep (CTAs per SM)"
  for c in 2 4 6 8; do
    # (go test splits -test.bench at '/': one pattern per level)
    (cd gpu && FTCHAT_GEMMQ_CTAS=$c timeout 60 $B/gpu.test -test.run '^$' -test.bench 'MatMulDecodeRows/n=(4|8|16|32)$/default$' \
      -test.benchtime 20x) >$L/rows_ctas$c.txt 2>&1
    grep -E '^Benchmark' $L/rows_ctas$c.txt | sed "s/^/ctas=$c /"
  done
  NCU=$(find_ncu)
  if [ -n "$NCU" ]; then
    stamp "ncu: n=16 down"
    (cd gpu && FTCHAT_ROWS_SHAPES=down timeout 150 "$NCU" --clock-control none --target-processes all \
      --kernel-name 'regex:^gemmq' --launch-skip 4 --launch-count 3 \
      --section SpeedOfLight --section WarpStateStats --section Occupancy --section SchedulerStats --section LaunchStats \
      $B/gpu.test -test.run '^$' -test.bench 'MatMulDecodeRows/n=16/default$' -test.benchtime 1x) >$L/ncu_16.txt 2>&1
    echo "rc=$?"; grep -iE "^\s+gemmq|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Issued Warp|No Eligible|Registers Per|Warp Cycles Per Issued|Stall" $L/ncu_16.txt | head -40
  fi
  tar -czf "$OUT/gemmq-logs.tgz" -C /tmp/out gemmq
  ;;
serve)
  L=/tmp/out/serve; mkdir -p $L; [ -x $B/ftchat ] || unpack
  [ -s $L8 ] || $B/ftchat dev gen-model --preset llama-3.1-8b --type Q4_K -o $L8 >/dev/null 2>&1
  stamp "serve load test, gemmq default"
  timeout 220 python3 scripts/loadtest.py --ftchat $B/ftchat --model $L8 --device cuda --max-tokens 64 \
    --kv-dtypes bf16,fp8_e4m3 --profile --json "$L/loadtest.json" >"$L/loadtest.txt" 2>&1
  grep -vE 'profile' "$L/loadtest.txt" | tail -n 24
  stamp "gpu tests: gemmq, attention metadata, graphs"
  T_TEST=200 gtests gpu gpu.test 'TestMatMulGemmq|TestGemmq|BatchMeta|TestAttention|Graph|TestMatMulAllTypes|TestF16ComputeMatMul|TestF16ComputeLarge' $L/gpu.log
  stamp "rows (default, noq) at 1..32"
  (cd gpu && FTCHAT_ROWS_MODES=default,noq timeout 100 $B/gpu.test -test.run '^$' -test.bench 'MatMulDecodeRows/n=(1|2|8|16|32)/' -test.benchtime 20x) >$L/rows.txt 2>&1
  grep -E '^Benchmark' $L/rows.txt | sed -E 's/ +[0-9]+ ns\/op//'
  tar -czf "$OUT/serve-logs.tgz" -C /tmp/out serve
  ;;
engine)
  L=/tmp/out/engine; mkdir -p $L; [ -x $B/ftchat ] || unpack
  [ -s /tmp/s.gguf ] || $B/ftchat dev gen-model --preset smollm2-135m --type Q4_K -o /tmp/s.gguf >/dev/null 2>&1
  T_TEST=240 gtests engine engine.test 'GPU|Batcher' $L/engine.log
  tar -czf "$OUT/engine-logs.tgz" -C /tmp/out engine
  ;;
*)
  echo "usage: $0 gemmq|serve|engine" >&2
  exit 2
  ;;
esac
