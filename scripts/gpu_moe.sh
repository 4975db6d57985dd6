#!/usr/bin/env bash
# MoE on the GPU (issue 13 item 0): GPU-vs-CPU MoE tests, the MoE
# benchmarks at the Qwen3-30B-A3B shape, and the engine's whole-model GPU
# tests, in one device call.
#
#   scripts/gpu_moe.sh build     here (needs Go): static test binaries,
#                                gzip-compressed, into .gpu-moe/ (git-ignored)
#   scripts/gpu_moe.sh run       on the GPU machine, from the repository root,
#                                with .gpu-moe carried; logs in $OUT
#   scripts/gpu_moe.sh variants  there too, after scripts/moe_variants.sh here:
#                                the grouped-GEMM variants of .gpu-moe/ptx/*,
#                                each checked (TestMoEPaths -short) and timed
#                                (1, 256, 512 rows) in the same run
#
# Stages are bounded (MOE_T_TEST, MOE_T_BENCH, MOE_T_ENGINE seconds) so the
# call ends inside a 240 s device limit. MOE_TESTS / MOE_BENCH / ENGINE_TESTS
# override the -test.run / -test.bench patterns (ENGINE_TESTS=none skips).
set -uo pipefail
cd "$(dirname "$0")/.."
B=.gpu-moe
case ${1:-run} in
build)
  set -e
  mkdir -p $B
  flags=(-trimpath -ldflags='-s -w')
  CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go test -c "${flags[@]}" -o $B/gpu.test ./gpu/
  CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go test -c "${flags[@]}" -o $B/engine.test ./engine/
  gzip -9f $B/gpu.test $B/engine.test
  du -sh $B/*
  ;;
run)
  OUT=${OUT:-$B/out}
  mkdir -p "$OUT"
  for f in $B/*.test.gz; do gzip -dc "$f" > "${f%.gz}" && chmod +x "${f%.gz}"; done
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1 | tee "$OUT/gpu_info.txt"
  date -u +%FT%TZ | tee -a "$OUT/gpu_info.txt"
  rc=0
  # gpu tests read kernels/*.cu relative to the package directory.
  (cd gpu && FTCHAT_REQUIRE_GPU=1 timeout "${MOE_T_TEST:-80}" ../$B/gpu.test -test.v -test.run "${MOE_TESTS:-MoE}" -test.timeout 300s) \
    > "$OUT/moe_test.log" 2>&1 || rc=1
  grep -E '^(--- |    --- |FAIL|ok|PASS|panic)|relative error .* >|rror' "$OUT/moe_test.log" | grep -v '^    --- PASS' | head -60
  grep -cE 'relative error' "$OUT/moe_test.log" | sed 's/^/compared: /'
  grep -E 'mode=2\) *$|mode=2:|n=513 top-8' "$OUT/moe_test.log" | head -12
  (cd gpu && timeout "${MOE_T_BENCH:-95}" ../$B/gpu.test -test.run '^$' -test.bench "${MOE_BENCH:-MoE}" -test.benchtime 20x -test.timeout 300s) \
    > "$OUT/moe_bench.log" 2>&1 || rc=1
  grep -E 'Benchmark|bandwidth|FAIL|panic|rror' "$OUT/moe_bench.log" | sed -E 's/ +/ /g'
  if [ "${ENGINE_TESTS:-GPU}" != none ]; then
    (cd engine && timeout "${MOE_T_ENGINE:-45}" ../$B/engine.test -test.v -test.run "${ENGINE_TESTS:-GPU}" -test.timeout 300s) \
      > "$OUT/engine_gpu.log" 2>&1 || rc=1
    grep -E '^(--- |FAIL|ok|PASS|panic)|identical|qwen3moe' "$OUT/engine_gpu.log" | head -40
  fi
  exit $rc
  ;;
variants)
  OUT=${OUT:-$B/out}
  mkdir -p "$OUT"
  for f in $B/*.test.gz; do gzip -dc "$f" > "${f%.gz}" && chmod +x "${f%.gz}"; done
  rc=0
  for d in $B/ptx/*/; do
    v=$(basename "$d")
    (cd gpu && FTCHAT_PTX_DIR=../$d FTCHAT_REQUIRE_GPU=1 timeout 60 ../$B/gpu.test -test.short -test.v -test.run 'TestMoEPaths' -test.timeout 120s) \
      > "$OUT/variant_$v.log" 2>&1 || rc=1
    echo "== $v: $(grep -c 'relative error' "$OUT/variant_$v.log") compared, $(grep -c 'relative error .* >' "$OUT/variant_$v.log") over tolerance, $(grep -c FAIL "$OUT/variant_$v.log") FAIL lines"
    (cd gpu && FTCHAT_PTX_DIR=../$d timeout 60 ../$B/gpu.test -test.run '^$' -test.bench 'BenchmarkMoE$/down/n=(1|256|512)$/mode=2$' -test.benchtime 20x) \
      >> "$OUT/variant_$v.log" 2>&1 || rc=1
    grep -E '^BenchmarkMoE' "$OUT/variant_$v.log" | sed -E 's/ +/ /g' | awk '{print "   ", $1, $(NF-1), "us/op"}'
  done
  exit $rc
  ;;
*)
  echo "usage: scripts/gpu_moe.sh build|run|variants" >&2
  exit 2
  ;;
esac
