#!/usr/bin/env bash
# Device calls prepared for the session after the seventh (written
# 2026-12-03, not yet run). Here: scripts/gpu_session.sh bundle. There
# (carry .gpu; chain the calls, the machine goes back ~30 s after one):
#
#   scripts/gpu_session9.sh prefill
#     issue 11/13: why prefill falls behind llama.cpp from 4K on (sixth
#     session: Qwen3.6-35B-A3B 0.95/0.89/0.81x at 4K/32K/128K). The FA
#     prefill attention alone (BenchmarkAttention, FTCHAT_BENCH_ONLY=fa) at
#     0/4K/32K/128K on the Llama-8B and Qwen3.6 shapes in TFLOP/s, then
#     Nsight Compute on attn_fa at 32K (Qwen3.6 shape, bf16 and fp8).
#   scripts/gpu_session9.sh batch
#     issue 14: gemmq's grid (FTCHAT_GEMMQ_CTAS 2..8, default 3) at 8/16/32
#     rows, then one 16-row serve run with FTCHAT_PROFILE (kernel time per
#     step against the measured step: the ~4 ms a step that is not kernel
#     time) and one with FTCHAT_CUDA_GRAPHS=0 for contrast.
# Logs: one tgz per call in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-.gpu/out}
B=/tmp/bin
L8=/tmp/l8b.gguf
mkdir -p "$OUT" $B
. scripts/gpu_lib.sh # stamp, unpack, gtests
case ${1:-} in
prefill)
  L=/tmp/out/prefill; mkdir -p $L; [ -x $B/ftchat ] || unpack
  stamp "FA prefill attention at depth"
  (cd gpu && FTCHAT_BENCH_ONLY=fa FTCHAT_FA_DEPTHS=0,4096,32768,130560 FTCHAT_BENCH_MD=$L/fa.md timeout 300 $B/gpu.test \
    -test.run '^$' -test.bench 'Attention' -test.benchtime 5x) >$L/fa.txt 2>&1
  echo "rc=$?"; cat $L/fa.md 2>/dev/null | tail -40
  NCU=$(find_ncu)
  if [ -n "$NCU" ]; then
    stamp "ncu: attn_fa at 32K, Qwen3.6 shape"
    (cd gpu && FTCHAT_BENCH_ONLY=fa FTCHAT_FA_DEPTHS=32768 timeout 200 "$NCU" --clock-control none --target-processes all \
      --kernel-name 'regex:^attn_fa' --launch-skip 2 --launch-count 4 \
      --section SpeedOfLight --section WarpStateStats --section Occupancy --section SchedulerStats --section LaunchStats \
      --section MemoryWorkloadAnalysis $B/gpu.test -test.run '^$' -test.bench 'Attention' -test.benchtime 1x) >$L/ncu_fa.txt 2>&1
    echo "rc=$?"; grep -iE "^\s+attn_fa|Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Issued Warp|Registers Per|Shared Memory Config|Warp Cycles Per Issued|stall" $L/ncu_fa.txt | head -60
  fi
  tar -czf "$OUT/prefill-logs.tgz" -C /tmp/out prefill
  ;;
batch)
  L=/tmp/out/batch; mkdir -p $L; [ -x $B/ftchat ] || unpack
  [ -s $L8 ] || $B/ftchat dev gen-model --preset llama-3.1-8b --type Q4_K -o $L8 >/dev/null 2>&1
  stamp "gemmq grid sweep (CTAs per SM; default 3)"
  for c in 2 3 4 6 8; do
    # (go test splits -test.bench at '/': one pattern per level)
    (cd gpu && FTCHAT_GEMMQ_CTAS=$c timeout 60 $B/gpu.test -test.run '^$' -test.bench 'MatMulDecodeRows/n=(8|16|32)$/default$' \
      -test.benchtime 20x) >$L/rows_ctas$c.txt 2>&1
    grep -E '^Benchmark' $L/rows_ctas$c.txt | sed -E "s/^/ctas=$c /; s/ +[0-9]+ ns\/op//"
  done
  for v in "FTCHAT_PROFILE=1" "FTCHAT_CUDA_GRAPHS=0" ""; do
    tag=$(echo "${v:-default}" | tr '=' '_')
    stamp "serve at 1 and 16, ${v:-default}"
    env $v FTCHAT_PROFILE_OUT=$L/prof_$tag.txt timeout 120 python3 scripts/loadtest.py --ftchat $B/ftchat --model $L8 --device cuda \
      --max-tokens 128 --kv-dtypes fp8_e4m3 --levels 1,16 --profile --json $L/lt_$tag.json >$L/lt_$tag.txt 2>&1
    grep -vE 'profile' $L/lt_$tag.txt | tail -n 12
    [ -s $L/prof_$tag.txt ] && head -c 3000 $L/prof_$tag.txt
  done
  tar -czf "$OUT/batch-logs.tgz" -C /tmp/out batch
  ;;
*)
  echo "usage: $0 prefill|batch" >&2
  exit 2
  ;;
esac
