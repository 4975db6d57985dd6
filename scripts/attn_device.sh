#!/usr/bin/env bash
# GPU correctness tests and benchmarks of the paged KV write and attention
# kernels, on a machine with an NVIDIA GPU and no Go toolchain. Build the
# test binary first (on any machine, no cgo):
#
#   CGO_ENABLED=0 go test -c -o .gpu/attn.test ./gpu
#
# then run this from the repository root. Logs and the markdown table go to
# $OUT (default /tmp/attn-out). ATTN_BENCH=0 skips the benchmarks;
# FTCHAT_BENCH_ONLY=decode|pages|prefill runs one group.
set -uo pipefail
OUT=${OUT:-/tmp/attn-out}
mkdir -p "$OUT"
BIN=$(realpath .gpu/attn.test)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
cd gpu
rc=0
FTCHAT_REQUIRE_GPU=1 "$BIN" -test.run "${ATTN_TESTS:-KVWrite|Attention|ChooseSplits|PTX|DeviceRoundTrip}" -test.v -test.timeout 150s \
  >"$OUT/tests.log" 2>&1 || rc=$?
grep -E "^(--- FAIL|FAIL|ok|PASS)|max rel|differ|Error|panic" "$OUT/tests.log" | grep -v "^    --- PASS" | head -80
grep -cE "^    --- PASS" "$OUT/tests.log" | sed 's/^/subtests passed: /'
echo "tests rc=$rc"
if [ "${ATTN_BENCH:-1}" != 0 ]; then
  FTCHAT_BENCH_MD="$OUT/bench.md" "$BIN" -test.run '^$' -test.bench Attention -test.benchtime 1x -test.timeout 270s \
    >"$OUT/bench.log" 2>&1 || echo "bench rc=$?"
  grep -E "read bandwidth|FAIL|Error|panic" "$OUT/bench.log" | head
  cat "$OUT/bench.md" 2>/dev/null
fi
exit $rc
