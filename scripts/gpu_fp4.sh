#!/usr/bin/env bash
# NVFP4 / MXFP4 on the GPU (issue 12 item 1): the GPU-vs-CPU tests of the FP4
# kernels (GEMV, GEMM, embed, MoE, per-tensor second-level scale) and their
# benchmarks at the Qwen3.6-35B-A3B expert shapes, in one device call.
#
#   scripts/gpu_fp4.sh build   here (needs Go): a static gpu test binary,
#                              gzip-compressed, into .gpu-fp4/ (git-ignored)
#   scripts/gpu_fp4.sh run     on the GPU machine, from the repository root,
#                              with .gpu-fp4 carried; logs in $OUT
#
# FP4_TESTS / FP4_BENCH override the -test.run / -test.bench patterns.
set -uo pipefail
cd "$(dirname "$0")/.."
B=.gpu-fp4
case ${1:-run} in
build)
  set -e
  mkdir -p $B
  CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go test -c -trimpath -ldflags='-s -w' -o $B/gpu.test ./gpu/
  gzip -9f $B/gpu.test
  du -sh $B/*
  ;;
run)
  OUT=${OUT:-$B/out}
  mkdir -p "$OUT"
  gzip -dc $B/gpu.test.gz > $B/gpu.test && chmod +x $B/gpu.test
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$OUT/gpu_info.txt"
  rc=0
  # gpu tests read kernels/*.cu relative to the package directory.
  (cd gpu && FTCHAT_REQUIRE_GPU=1 timeout "${FP4_T_TEST:-150}" ../$B/gpu.test -test.v \
    -test.run "${FP4_TESTS:-FP4|NVFP4|MatMulAllTypes|EmbedAllTypes|KernelModules}" -test.timeout 300s) \
    > "$OUT/fp4_test.log" 2>&1 || rc=1
  grep -E '^(--- |ok|FAIL|PASS)' "$OUT/fp4_test.log" | tail -40
  (cd gpu && timeout "${FP4_T_BENCH:-150}" ../$B/gpu.test -test.run '^$' \
    -test.bench "${FP4_BENCH:-FP4MatMul}" -test.benchtime 200x) > "$OUT/fp4_bench.log" 2>&1 || rc=1
  grep -E 'Benchmark' "$OUT/fp4_bench.log"
  exit $rc
  ;;
*)
  echo "usage: $0 build|run" >&2
  exit 2
  ;;
esac
