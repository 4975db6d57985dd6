#!/usr/bin/env bash
# One device session's whole GPU run, in two calls of at most 10 minutes
# (files under /tmp survive between back-to-back calls while the machine is warm).
#
# Here (needs Go):   scripts/gpu_session.sh bundle
#   .gpu/ftchat, .gpu/gpu.test.gz, .gpu/engine.test.gz and .gpu-peer/llama.cpp.tar.xz
# There, call 1:     scripts/gpu_session.sh run1    (carry .gpu and .gpu-peer)
#   starts the llama.cpp build and the model generation detached, runs the
#   GPU-vs-CPU tests (hybrid ops, MoE, FP4 weights, whole models), then
#   `ftchat bench speed` and `bench capacity` on the generated files
# There, call 2:     scripts/gpu_session.sh run2
#   waits for the llama.cpp build and runs llama-bench on the same files
# Logs go to $OUT (default .gpu/out), one summary per call.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-.gpu/out}
PRESETS=${PRESETS:-qwen3-30b-a3b qwen3.6-35b-a3b}
DEPTHS=${DEPTHS:-0,4096,32768}
export WORK=${WORK:-/tmp/peer} PRESETS DEPTHS
mkdir -p "$OUT"
stamp() { echo "[$(date -u +%T)] $*"; }

case ${1:-} in
bundle)
  set -e
  BUNDLE="ftchat" scripts/gpu_bundle.sh
  flags=(-trimpath -ldflags='-s -w')
  CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go test -c "${flags[@]}" -o .gpu/gpu.test ./gpu/
  CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go test -c "${flags[@]}" -o .gpu/engine.test ./engine/
  xz -9f -T0 .gpu/gpu.test .gpu/engine.test .gpu/ftchat   # a call carries at most 64 MiB
  [ -f .gpu-peer/llama.cpp.tar.xz ] || scripts/llamacpp_tarball.sh
  du -sh .gpu/* .gpu-peer/*
  ;;
run1)
  for f in .gpu/*.xz; do xz -dc "$f" >"${f%.xz}" && chmod +x "${f%.xz}"; done
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu_info.txt"
  date -u +%FT%TZ | tee -a "$OUT/gpu_info.txt"
  # The build takes CPU cores only; the GPU measurements below overlap it
  # (host-side launch work shares the CPU with the compiler: noted with the numbers).
  JOBS=${JOBS:-10} DETACH=1 scripts/peer_llamacpp.sh build
  mkdir -p "$WORK/out"
  (scripts/peer_llamacpp.sh models >"$WORK/out/models.txt" 2>&1; echo done >>"$WORK/out/models.txt") &
  stamp "gpu tests"
  (cd gpu && FTCHAT_REQUIRE_GPU=1 timeout 150 ../.gpu/gpu.test -test.run "${GPU_TESTS:-Hybrid|MoE|FP4|NVFP4|MXFP4|MatMul}" -test.timeout 300s) \
    >"$OUT/gpu_test.log" 2>&1
  echo "gpu tests rc=$?"; grep -E '^(--- FAIL|FAIL|ok|PASS|panic)' "$OUT/gpu_test.log" | head -30
  stamp "engine GPU tests"
  (cd engine && timeout 100 ../.gpu/engine.test -test.v -test.run "${ENGINE_TESTS:-GPU}" -test.timeout 300s) \
    >"$OUT/engine_test.log" 2>&1
  echo "engine tests rc=$?"; grep -E '^(--- |FAIL|ok|PASS|panic)' "$OUT/engine_test.log" | head -30
  stamp "waiting for models"
  while ! grep -q '^done' "$WORK/out/models.txt" 2>/dev/null; do sleep 2; done
  cat "$WORK/out/models.txt"
  : >"$OUT/ftchat_bench.txt"
  for p in $PRESETS; do
    stamp "ftchat bench speed $p" | tee -a "$OUT/ftchat_bench.txt"
    timeout "${BENCH_T:-150}" .gpu/ftchat bench speed --model "/tmp/$p.gguf" --device cuda --ctx-size 40960 \
      --depths "$DEPTHS" --dtypes bf16,fp8_e4m3 --prefill 512 --decode 128 >>"$OUT/ftchat_bench.txt" 2>&1 ||
      echo "ftchat bench $p: rc=$?" >>"$OUT/ftchat_bench.txt"
  done
  stamp "bench capacity" | tee -a "$OUT/ftchat_bench.txt"
  .gpu/ftchat bench capacity --model /tmp/qwen3.6-35b-a3b.gguf --device cuda --gpu-memory 8GiB >>"$OUT/ftchat_bench.txt" 2>&1
  cat "$OUT/ftchat_bench.txt"
  scripts/peer_llamacpp.sh status | tail -5
  ;;
run2)
  stamp "waiting for the llama.cpp build"
  for _ in $(seq 1 100); do
    [ -x "$WORK/llama.cpp/build/bin/llama-bench" ] && break
    kill -0 "$(cat "$WORK/detached.pid" 2>/dev/null)" 2>/dev/null || break
    sleep 3
  done
  tail -3 "$WORK/detached.log"
  REPS=${REPS:-2} FTCHAT_BENCH=0 OUT="$OUT" scripts/peer_llamacpp.sh bench
  ;;
*)
  echo "usage: $0 bundle|run1|run2" >&2
  exit 2
  ;;
esac
