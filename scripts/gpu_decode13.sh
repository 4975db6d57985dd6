#!/usr/bin/env bash
# Issue 13 decode kernels on the GPU machine, in one call: the second MoE
# decode GEMVs and moe_topk2 (FTCHAT_MOEV=2), rmsnorm2 and the fused
# add_rmsnorm (FTCHAT_FUSE=1), each against the first kernels.
#
# Here (needs Go):  scripts/gpu_decode13.sh bundle
#   builds .gpu-d13/{ftchat,gpu.test,engine.test}.xz (static, CGO_ENABLED=0)
# There:            scripts/gpu_decode13.sh run     (carry .gpu-d13)
#   1. gpu tests of the new kernels (both variants against the CPU; bit
#      identity of moe_topk2 and of add_rmsnorm), then the existing MoE and
#      norm tests with FTCHAT_MOEV=2 FTCHAT_FUSE=1 (all decode paths on the
#      new kernels);
#   2. BenchmarkMoEDecode (GB/s of both GEMV variants, 35B and 30B shapes,
#      1 and 4 tokens) and BenchmarkAddRMSNorm (v1, v2, fused);
#   3. the engine's whole-model GPU tests with the new kernels;
#   4. `ftchat bench speed` on the synthetic PRESET model (default
#      qwen3.6-35b-a3b-4l, Q4_K) for each setting in ENVS, then the
#      per-kernel profile (FTCHAT_PROFILE=1) of the first and the last.
# Logs go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
B=.gpu-d13
OUT=${OUT:-$B/out}
PRESET=${PRESET:-qwen3.6-35b-a3b-4l}
DECODE=${DECODE:-64}
NEW="FTCHAT_MOEV=2 FTCHAT_FUSE=1"
ENVS=${ENVS:-"base|FTCHAT_MOEV=2|FTCHAT_FUSE=1|$NEW"}
mkdir -p "$OUT"
stamp() { echo "[$(date -u +%T)] $*"; }

case ${1:-} in
bundle)
  set -e
  mkdir -p $B
  flags=(-trimpath -ldflags='-s -w')
  CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go test -c "${flags[@]}" -o $B/gpu.test ./gpu/
  CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go test -c "${flags[@]}" -o $B/engine.test ./engine/
  CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build "${flags[@]}" -o $B/ftchat .
  xz -9f -T0 $B/gpu.test $B/engine.test $B/ftchat
  du -sh $B/*
  ;;
run)
  for f in $B/*.xz; do xz -dc "$f" >"${f%.xz}" && chmod +x "${f%.xz}"; done
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu_info.txt"
  model=/tmp/$PRESET.gguf
  gen=/tmp/gen.log
  ($B/ftchat dev gen-model --preset "$PRESET" --type Q4_K -o "$model" >$gen 2>&1; echo "done rc=$?" >>$gen) &
  rc=0
  stamp "gpu tests (new kernels, both variants)"
  (cd gpu && FTCHAT_REQUIRE_GPU=1 timeout 90 ../$B/gpu.test -test.v -test.timeout 120s \
    -test.run 'TestMoEGemvVariants|TestMoETopk|TestRMSNormVariants|TestAddRMSNorm|TestMoEKernelModules') >"$OUT/test_new.log" 2>&1 || rc=1
  grep -E '^(--- |FAIL|ok|PASS|panic)|rror' "$OUT/test_new.log" | grep -v '^    --- PASS' | head -30
  stamp "existing MoE and norm tests with $NEW"
  (cd gpu && env $NEW FTCHAT_REQUIRE_GPU=1 timeout 120 ../$B/gpu.test -test.v -test.timeout 150s \
    -test.run 'TestMoE|TestNorms') >"$OUT/test_existing_new.log" 2>&1 || rc=1
  grep -E '^(--- |FAIL|ok|PASS|panic)|rror' "$OUT/test_existing_new.log" | grep -v '^    --- PASS' | head -30
  stamp "benchmarks"
  (cd gpu && timeout 150 ../$B/gpu.test -test.run '^$' -test.bench 'BenchmarkMoEDecode|BenchmarkAddRMSNorm' \
    -test.benchtime 1x -test.timeout 200s) >"$OUT/bench.log" 2>&1 || rc=1
  grep -E 'Benchmark|bandwidth|FAIL|panic|rror' "$OUT/bench.log" | sed -E 's/ +/ /g'
  stamp "engine GPU tests with $NEW"
  (cd engine && env $NEW FTCHAT_REQUIRE_GPU=1 timeout 120 ../$B/engine.test -test.v -test.run 'GPU' -test.timeout 150s) \
    >"$OUT/engine_new.log" 2>&1 || rc=1
  grep -E '^(--- |FAIL|ok|PASS|panic)' "$OUT/engine_new.log" | head -20
  while ! grep -q '^done' $gen 2>/dev/null; do sleep 1; done
  tail -1 $gen
  bench() { timeout "${BENCH_T:-35}" $B/ftchat bench speed --model "$model" --device cuda --gpu-memory 48GiB --ctx-size 4096 \
    --depths 0 --dtypes fp8_e4m3 --prefill 512 --decode "$DECODE"; }
  IFS='|' read -ra envs <<<"$ENVS"
  for e in "${envs[@]}"; do
    stamp "bench speed: $e"
    (if [ "$e" != base ]; then export $e; fi; bench) >"$OUT/speed.txt.tmp" 2>&1
    grep -v '^\[' "$OUT/speed.txt.tmp" | tail -2
    cat "$OUT/speed.txt.tmp" >>"$OUT/speed.txt"
  done
  rm -f "$OUT/speed.txt.tmp"
  for e in "${envs[0]}" "${envs[-1]}"; do
    stamp "profile: $e"
    tag=$(echo "$e" | tr -c 'A-Za-z0-9\n' _)
    (if [ "$e" != base ]; then export $e; fi; export FTCHAT_PROFILE=1 FTCHAT_PROFILE_OUT="$OUT/profile_$tag.md"; bench) >/tmp/profile_$tag.txt 2>&1
    [ -s "$OUT/profile_$tag.md" ] && head -32 "$OUT/profile_$tag.md" || tail -5 /tmp/profile_$tag.txt
  done
  exit $rc
  ;;
*)
  echo "usage: $0 bundle|run" >&2
  exit 2
  ;;
esac
