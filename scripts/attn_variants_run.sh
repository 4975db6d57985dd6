#!/usr/bin/env bash
# Device side of scripts/attn_variants.sh: for every PTX build under
# .gpu/ptx/<variant>, runs the attention correctness tests (-short: no 128K
# cases) and the "key" decode/prefill benchmarks with that PTX, then names
# the fastest variant that passed (sum of all key times) in .gpu/best_variant.
# Needs .gpu/gpu.test (make gpu-bundle). Logs go to $OUT (default .gpu/out).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-.gpu/out}
mkdir -p "$OUT"
BIN=$(realpath .gpu/gpu.test)
best="" bestT=""
echo base > .gpu/best_variant
for dir in .gpu/ptx/*/; do
  v=$(basename "$dir")
  abs=$(realpath "$dir")
  if ! (cd gpu && FTCHAT_PTX_DIR=$abs FTCHAT_REQUIRE_GPU=1 "$BIN" -test.short -test.run 'TestAttentionMatchesHostStore|TestBackendKVAttention' \
    -test.timeout 120s >"$OUT/variant_$v.test.log" 2>&1); then
    echo "$v: FAILED correctness"; grep -E "^\s*--- FAIL|rel" "$OUT/variant_$v.test.log" | head -5; continue
  fi
  (cd gpu && FTCHAT_PTX_DIR=$abs FTCHAT_BENCH_ONLY=key FTCHAT_BENCH_MD="$OUT/variant_$v.md" "$BIN" -test.run '^$' \
    -test.bench Attention -test.benchtime 1x -test.timeout 200s >"$OUT/variant_$v.bench.log" 2>&1)
  total=$(grep -oE '[0-9.]+ us/call' "$OUT/variant_$v.bench.log" | awk '{s += $1} END {printf "%.1f", s}')
  echo "$v: total $total us"
  grep -E '^\| (Llama|SmolLM2)' "$OUT/variant_$v.md" | awk -F'|' -v v="$v" '{printf "  %-9s %-28s %-9s b%-3s ctx%-7s new%-5s %9s us %6s%% ratio %s\n", v, $2, $3, $5, $6, $7, $9, $11, $12}'
  if [ -n "$total" ] && { [ -z "$bestT" ] || awk -v a="$total" -v b="$bestT" 'BEGIN {exit !(a < b)}'; }; then
    best=$v bestT=$total
    echo "$best" > .gpu/best_variant
  fi
done
echo "best: $best ($bestT us)"
