#!/usr/bin/env bash
# Hybrid-model (Gated DeltaNet) GPU tests and benchmarks: gpu/hybrid_test.go
# on a machine with an NVIDIA GPU, logs to $OUT (default .gpu-gdn/out).
# Build here first (the GPU machine needs no Go toolchain):
#   scripts/gpu_hybrid.sh build     -> .gpu-gdn/gpu.test.xz (git-ignored; carry .gpu-gdn)
# then there:
#   scripts/gpu_hybrid.sh ['TestA TestB ...'] [bench-regexp]
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = build ]; then
  set -e
  mkdir -p .gpu-gdn
  CGO_ENABLED=0 GOOS=linux GOARCH=amd64 ${GO:-go} test -c -trimpath -ldflags='-s -w' -o .gpu-gdn/gpu.test ./gpu/
  xz -T0 -f .gpu-gdn/gpu.test
  ls -l .gpu-gdn
  exit 0
fi
OUT=${OUT:-.gpu-gdn/out}
mkdir -p "$OUT"
TESTS=${1:-'TestHybridElementwise TestCausalConv TestGatedDeltaRule TestStateSlots TestHybridDecodeGraph TestQwen35Attention TestHybridKernelsEmbedded TestChunkedFormMath TestHybridModelGPUvsCPU'}
BENCH=${2:-'BenchmarkGDN'}
bin=.gpu-gdn/gpu.test
[ -x $bin ] || { xz -dkf $bin.xz && chmod +x $bin; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1 | tee "$OUT/gpu_info.txt"
rc=0
: > "$OUT/hybrid_test.log"
# One process per test, so that a panic in one leaves the others' results.
for t in $TESTS; do
  (cd gpu && FTCHAT_REQUIRE_GPU=1 ../$bin -test.v -test.run "^$t\$" -test.timeout 60s 2>&1) >> "$OUT/hybrid_test.log"
done
grep -E '^(--- |PASS|FAIL|ok|panic)|relative error|rror' "$OUT/hybrid_test.log" | head -200
grep -q '^FAIL' "$OUT/hybrid_test.log" && rc=1
if [ -n "$BENCH" ]; then
  (cd gpu && ../$bin -test.run '^$' -test.bench "$BENCH" -test.benchtime 20x -test.timeout 90s 2>&1) | tee "$OUT/hybrid_bench.log"
fi
exit $rc
