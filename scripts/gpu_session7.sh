#!/usr/bin/env bash
# Device calls prepared for the session after the sixth (written 2026-12-03,
# not yet run). Here: scripts/gpu_session.sh bundle and
# scripts/gpu_session7.sh variants. There (carry .gpu):
#
#   scripts/gpu_session7.sh profile
#     Nsight Compute (hardware counters: the Firecracker runtime has them,
#     device/KINDS.md) on the decode-step matmuls at 1 and 16 rows: the
#     whole-x GEMV, the split-K tile GEMM (the 9..127-row default) and the
#     skinny GEMM, so the next kernel change is chosen from stall reasons
#     (docs/benchmarks.md 2026-12-03: 16 rows cost 3.6-4.3x one row, where
#     a weight-bound step would cost ~1x). Falls back to a note when ncu
#     cannot read the counters (gVisor). Then the same matmuls at 9/16/32
#     rows with the split-K grid at 2..12 CTAs per SM (FTCHAT_GEMM_SPLIT_CTAS),
#     and three variants of the Q4_K module (GEMM_PIPE=1: the split-K GEMM
#     loads the next k step during this one's mmas; MM_FASTDQ=1: Q4_K
#     straight to bf16 pairs; GEMV_PREFETCH=1: the 2..8-row GEMV prefetches
#     its next chunk; PTX via FTCHAT_PTX_DIR): their tests against the CPU,
#     then their rows.
#   scripts/gpu_session7.sh serve
#     the serve load test on the Llama-3.1-8B shape with the split-K
#     default (issue 14's >= 8x at 16), the fp16-compute tests, and
#     TestNVFP4ModelGPUvsCPU with the sm75 flavour forced (its plain-CPU
#     reference under fp16 compute).
# Logs: one tgz per call in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-.gpu/out}
B=/tmp/bin
L8=/tmp/l8b.gguf
mkdir -p "$OUT" $B
. scripts/gpu_lib.sh # stamp, unpack, gtests
case ${1:-} in
variants) # here, with nvcc: mm_q4_k's sm89 PTX with one tuning knob each (mm.cuh)
  for v in pipe:GEMM_PIPE fastdq:MM_FASTDQ gemvpf:GEMV_PREFETCH; do
    name=${v%%:*}; mkdir -p .gpu/ptxvar/$name
    (cd gpu/kernels && nvcc -ptx -arch=compute_89 -O3 -std=c++17 -allow-unsupported-compiler -DFTCHAT_SM=89 -D${v#*:}=1 \
      -o ../../.gpu/ptxvar/$name/mm_q4_k_sm89.ptx mm_q4_k.cu) && gzip -9f .gpu/ptxvar/$name/mm_q4_k_sm89.ptx
  done
  ls -la .gpu/ptxvar/*
  ;;
profile)
  L=/tmp/out/profile; mkdir -p $L; [ -x $B/ftchat ] || unpack
  NCU=$(find_ncu)
  [ -n "$NCU" ] || { echo "no ncu on this machine"; exit 1; }
  for mode in "n=1/default" "n=16/default" "n=16/skinny"; do
    tag=$(echo "$mode" | tr '/=' '__')
    stamp "ncu: $mode"
    (cd gpu && FTCHAT_ROWS_SHAPES=down timeout 200 "$NCU" --clock-control none --target-processes all \
      --kernel-name 'regex:^(gemvx_q4_k|gemms_q4_k|gemm_reduce_q4_k|gemmt16_q4_k)$' --launch-skip 4 --launch-count 4 \
      --section SpeedOfLight --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis \
      --section SchedulerStats --section LaunchStats \
      $B/gpu.test -test.run '^$' -test.bench "MatMulDecodeRows/$mode\$" -test.benchtime 1x) >"$L/ncu_$tag.txt" 2>&1
    echo "rc=$?"; grep -iE "^\s+(gemvx|gemms|gemmt|gemm_reduce)|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|stall|Issued Warp|No Eligible|One or More Eligible|Registers Per|Block Limit|Warp Cycles" "$L/ncu_$tag.txt" | head -80
  done
  for var in pipe fastdq gemvpf; do
    [ -d .gpu/ptxvar/$var ] || continue
    stamp "variant $var (Q4_K PTX via FTCHAT_PTX_DIR): tests, then rows"
    (cd gpu && FTCHAT_PTX_DIR=$PWD/../.gpu/ptxvar/$var FTCHAT_REQUIRE_GPU=1 timeout 120 $B/gpu.test -test.v \
      -test.run 'TestMatMulSplitK|TestMatMulAllTypes|TestMatMulGemvPaths' -test.timeout 200s) >"$L/${var}_tests.log" 2>&1
    echo "rc=$?"; grep -E '^(--- |FAIL|ok|PASS)' "$L/${var}_tests.log" | head
    grep -E 'Q4_K .*vs cpu' "$L/${var}_tests.log" | head -8
    (cd gpu && FTCHAT_PTX_DIR=$PWD/../.gpu/ptxvar/$var timeout 60 $B/gpu.test -test.run '^$' \
      -test.bench 'MatMulDecodeRows/n=(1|2|8|16|32)/default$' -test.benchtime 20x) >"$L/rows_$var.txt" 2>&1
    grep -E '^Benchmark' "$L/rows_$var.txt" | sed "s/^/$var /"
  done
  stamp "GEMV vs split-K GEMM at 2..8 rows (the crossover, FTCHAT_GEMM_MIN_TOKENS)"
  (cd gpu && timeout 90 $B/gpu.test -test.run '^$' -test.bench 'MatMulDecodeRows/n=(2|4|8)/' -test.benchtime 20x) >"$L/rows_small.txt" 2>&1
  grep -E '^Benchmark' "$L/rows_small.txt"
  stamp "split-K grid sweep: CTAs per SM (default 4)"
  for c in 2 4 6 8 12; do
    (cd gpu && FTCHAT_GEMM_SPLIT_CTAS=$c timeout 60 $B/gpu.test -test.run '^$' -test.bench 'MatMulDecodeRows/n=(9|16|32)/default$' \
      -test.benchtime 20x) >"$L/rows_ctas$c.txt" 2>&1
    grep -E '^Benchmark' "$L/rows_ctas$c.txt" | sed "s/^/ctas=$c /"
  done
  tar -czf "$OUT/profile-logs.tgz" -C /tmp/out profile
  ;;
serve)
  L=/tmp/out/serve; mkdir -p $L; [ -x $B/ftchat ] || unpack
  [ -s $L8 ] || $B/ftchat dev gen-model --preset llama-3.1-8b --type Q4_K -o $L8 >/dev/null 2>&1
  stamp "serve load test, split-K default"
  timeout 200 python3 scripts/loadtest.py --ftchat $B/ftchat --model $L8 --device cuda --max-tokens 64 \
    --kv-dtypes bf16,fp8_e4m3 --profile --json "$L/loadtest.json" >"$L/loadtest.txt" 2>&1
  grep -vE 'profile' "$L/loadtest.txt" | tail -n 24
  stamp "fp16-compute tests (TestF16ComputeLargeActivations is new)"
  (cd gpu && FTCHAT_REQUIRE_GPU=1 timeout 150 $B/gpu.test -test.v -test.run 'TestF16Compute' -test.timeout 200s) >"$L/f16.log" 2>&1
  echo "rc=$?"; grep -E '^(--- |FAIL|ok|PASS)' "$L/f16.log" | head
  stamp "NVFP4 model test, sm75 flavour forced"
  (cd gpu && FTCHAT_PTX_FLAVOUR=sm75 FTCHAT_REQUIRE_GPU=1 timeout 150 $B/gpu.test -test.v -test.run 'TestNVFP4ModelGPUvsCPU' \
    -test.timeout 200s) >"$L/nvfp4_sm75.log" 2>&1
  echo "rc=$?"; grep -E '^(--- |FAIL|ok|PASS)' "$L/nvfp4_sm75.log" | head
  tar -czf "$OUT/serve-logs.tgz" -C /tmp/out serve
  ;;
*)
  echo "usage: $0 profile|serve" >&2
  exit 2
  ;;
esac
