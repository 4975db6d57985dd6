#!/usr/bin/env bash
# Per-kernel decode breakdown on the GPU machine, in one call.
#
# Here (needs Go):  scripts/gpu_profile.sh bundle
#   builds .gpu-perf/{ftchat,gpu.test}.xz (static, CGO_ENABLED=0)
# There:            scripts/gpu_profile.sh run     (carry .gpu-perf)
#   writes the synthetic model (PRESET, default qwen3.6-35b-a3b-4l, Q4_K),
#   runs the GEMV GPU-vs-CPU tests and the read-bandwidth benchmark, then
#   `ftchat bench speed` (batch 1, depth 0, fp8 KV) for each GEMV kernel in
#   GEMVS (FTCHAT_GEMV values; "whole" is the default gemvx), first plain
#   (tok/s with CUDA graphs), then with FTCHAT_PROFILE=1 (the per-kernel
#   table, gpu/profile.go). Logs and tables go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-.gpu-perf/out}
PRESET=${PRESET:-qwen3.6-35b-a3b-4l}
GEMVS=${GEMVS:-whole rows}
DECODE=${DECODE:-64}
mkdir -p "$OUT"
stamp() { echo "[$(date -u +%T)] $*"; }

case ${1:-} in
bundle)
  set -e
  mkdir -p .gpu-perf
  grep -qx '/.gpu-perf/' .git/info/exclude || echo '/.gpu-perf/' >>.git/info/exclude
  flags=(-trimpath -ldflags='-s -w')
  CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go test -c "${flags[@]}" -o .gpu-perf/gpu.test ./gpu/
  CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build "${flags[@]}" -o .gpu-perf/ftchat .
  xz -9f -T0 .gpu-perf/gpu.test .gpu-perf/ftchat
  du -sh .gpu-perf/*
  ;;
run)
  for f in .gpu-perf/*.xz; do xz -dc "$f" >"${f%.xz}" && chmod +x "${f%.xz}"; done
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu_info.txt"
  date -u +%FT%TZ | tee -a "$OUT/gpu_info.txt"
  model=/tmp/$PRESET.gguf
  gen=/tmp/gen.log # $OUT brings back at most 8 files: logs that matter only on failure stay in /tmp
  (.gpu-perf/ftchat dev gen-model --preset "$PRESET" --type Q4_K -o "$model" >$gen 2>&1; echo "done rc=$?" >>$gen) &
  stamp "gpu tests + read bandwidth"
  (cd gpu && FTCHAT_REQUIRE_GPU=1 timeout 40 ../.gpu-perf/gpu.test -test.run "${GPU_TESTS:-TestMatMulGemvr|TestMatMulGemvPaths|TestProfile}" \
    -test.bench BenchmarkReadBandwidth -test.benchtime 1x -test.timeout 120s) >"$OUT/gpu_test.log" 2>&1
  echo "gpu tests rc=$?"
  grep -E '^(--- FAIL|FAIL|ok|PASS|panic)|readGB/s|read bandwidth' "$OUT/gpu_test.log" | head -20
  while ! grep -q '^done' $gen 2>/dev/null; do sleep 1; done
  tail -1 $gen
  bench() { timeout "${BENCH_T:-35}" .gpu-perf/ftchat bench speed --model "$model" --device cuda --gpu-memory 48GiB --ctx-size 4096 \
    --depths 0 --dtypes fp8_e4m3 --prefill 512 --decode "$DECODE"; }
  # The profile of the default kernel first (the table is what matters most), then tok/s both ways.
  first=${GEMVS%% *}
  profile() {
    stamp "profile, FTCHAT_GEMV=$1"
    FTCHAT_GEMV=$1 FTCHAT_PROFILE=1 FTCHAT_PROFILE_OUT="$OUT/profile_$1.md" bench >/tmp/profile_run_$1.txt 2>&1
    echo "rc=$?"; [ -s "$OUT/profile_$1.md" ] && head -32 "$OUT/profile_$1.md" || tail -5 /tmp/profile_run_$1.txt
  }
  profile "$first"
  for g in $GEMVS; do
    stamp "bench speed, FTCHAT_GEMV=$g"
    FTCHAT_GEMV=$g bench >"$OUT/speed_$g.txt" 2>&1
    grep -v '^\[' "$OUT/speed_$g.txt" | tail -2
  done
  for g in $GEMVS; do [ "$g" = "$first" ] || profile "$g"; done
  ;;
*)
  echo "usage: $0 bundle|run" >&2
  exit 2
  ;;
esac
