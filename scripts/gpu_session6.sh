#!/usr/bin/env bash
# Device call of the sixth session (2026-12-03): one call, after the first
# three of scripts/gpu_session5.sh (skinny, moe q36, moe m30).
#
# Here (needs Go and nvcc): scripts/gpu_session.sh bundle, then
#   scripts/gpu_session6.sh variants   (skinny-GEMM prefetch variants of
#   mm_q4_k's sm89 PTX into .gpu/ptxvar/p0..p3, for FTCHAT_PTX_DIR)
# There:   scripts/gpu_session6.sh verify   (carry .gpu)
#   1. the fp16-compute (sm75 PTX) tests with the activation row scales
#      (TestF16Compute*), the skinny GEMM and MoE tests, whole models in
#      fp16 compute against the CPU;
#   2. the standard GPU-vs-CPU tests with the sm75 flavour forced
#      (FTCHAT_PTX_FLAVOUR=sm75, the flavour of Turing laptops);
#   3. the decode-step matmuls by rows with each prefetch variant of the
#      skinny GEMM (FTCHAT_PTX_DIR) beside the committed PTX.
# Logs: one tgz in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-.gpu/out}
B=/tmp/bin
L=/tmp/out/verify
mkdir -p "$OUT" $L $B
. scripts/gpu_lib.sh # stamp, unpack, gtests
case ${1:-} in
variants)
  for v in 0 1 2 3; do
    mkdir -p .gpu/ptxvar/p$v
    (cd gpu/kernels && nvcc -ptx -arch=compute_89 -O3 -std=c++17 -allow-unsupported-compiler -DFTCHAT_SM=89 \
      -DGT_PREFETCH=$v -o ../../.gpu/ptxvar/p$v/mm_q4_k_sm89.ptx mm_q4_k.cu) &
  done
  wait
  gzip -9f .gpu/ptxvar/p*/mm_q4_k_sm89.ptx
  ls -la .gpu/ptxvar/*
  ;;
verify)
  [ -x $B/ftchat ] || unpack
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $L/machine.txt
  [ -s /tmp/s.gguf ] || $B/ftchat dev gen-model --preset smollm2-135m --type Q4_1 -o /tmp/s.gguf >/dev/null 2>&1
  stamp "fp16 compute, skinny GEMM, MoE"
  T_TEST=200 gtests gpu gpu.test 'TestF16Compute|TestMatMulSkinny|TestGemmtSplits|TestMoE|TestMatMulAllTypes|TestKernelModules' $L/gpu_test.log
  T_TEST=100 gtests engine engine.test 'TestGPUFP16ComputeMatchesCPU|TestGPUMatchesCPUWholeModel' $L/engine_test.log
  stamp "standard tests, sm75 flavour forced"
  T_TEST=150 gtests gpu gpu.test 'TestMatMulAllTypes|TestMatMulGemvPaths|TestMatMulSkinny|TestMoEPaths|TestAttentionMatchesHostStore|TestAttentionFAMatchesHostStore|TestHybridModelGPUvsCPU' \
    $L/gpu_sm75.log FTCHAT_PTX_FLAVOUR=sm75
  T_TEST=100 gtests engine engine.test 'TestGPUMatchesCPUWholeModel|TestGPUDecodeGraphsMatchDirect' $L/engine_sm75.log FTCHAT_PTX_FLAVOUR=sm75
  stamp "decode-step matmuls by rows, skinny GEMM variants"
  for v in committed p0 p1 p2 p3; do
    dir=""; [ $v != committed ] && dir=$PWD/.gpu/ptxvar/$v
    (cd gpu && FTCHAT_PTX_DIR=$dir timeout 60 $B/gpu.test -test.run '^$' -test.bench 'MatMulDecodeRows/n=(1|16|32)/(default|skinny)$' \
      -test.benchtime 20x) >$L/rows_$v.txt 2>&1
    grep -E "^Benchmark" $L/rows_$v.txt | sed "s/^/$v /"
  done
  tar -czf "$OUT/verify-logs.tgz" -C /tmp/out verify
  ;;
*)
  echo "usage: $0 variants|verify" >&2
  exit 2
  ;;
esac
