#!/usr/bin/env bash
# Runs the binaries built by `make gpu-bundle` on a machine with an NVIDIA GPU
# (no Go toolchain needed). Logs go to $OUT (default .gpu/out).
# Usage: scripts/gpu_run.sh [gpu-test-regexp] [gpu-bench-regexp] [engine-test-regexp]
# Each part runs only if its binary is in .gpu/.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-.gpu/out}
mkdir -p "$OUT"
RUN=${1:-.}
BENCH=${2:-}
ENGINE_RUN=${3:-GPU}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1 | tee "$OUT/gpu_info.txt"
date -u +%FT%TZ >> "$OUT/gpu_info.txt"
rc=0
summary() { grep -E '^(--- |PASS|FAIL|ok|panic)|error|Error' || true; }
if [ -x .gpu/gpu.test ]; then
  # gpu tests read kernels/*.cu relative to the package directory.
  (cd gpu && FTCHAT_REQUIRE_GPU=1 ../.gpu/gpu.test -test.v -test.run "$RUN" -test.timeout 300s 2>&1) | tee "$OUT/gpu_test.log" | summary
  grep -q '^FAIL' "$OUT/gpu_test.log" && rc=1
  if [ -n "$BENCH" ]; then
    (cd gpu && ../.gpu/gpu.test -test.run '^$' -test.bench "$BENCH" -test.benchtime 20x 2>&1) | tee "$OUT/gpu_bench.log"
  fi
fi
if [ -x .gpu/engine.test ]; then
  (cd engine && ../.gpu/engine.test -test.v -test.run "$ENGINE_RUN" -test.timeout 500s 2>&1) | tee "$OUT/engine_test.log" | summary
  grep -q '^FAIL' "$OUT/engine_test.log" && rc=1
fi
exit $rc
