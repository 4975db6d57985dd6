#!/usr/bin/env bash
# Peer benchmark on a GPU machine with no network: llama.cpp's llama-bench and
# `ftchat bench speed` on the same random-weight GGUFs.
#
# Carry (device tool `carry`): .gpu-peer (scripts/llamacpp_tarball.sh makes
# .gpu-peer/llama.cpp.tar.xz, ~2 MB) and .gpu (scripts/gpu_bundle.sh with
# BUNDLE=ftchat makes .gpu/ftchat). Run from the repo root:
#
#   scripts/peer_llamacpp.sh [all|build|models|bench|status|wait]  (default all; wait: TRIES=N x 3 s for a detached build)
#
#   build   unpack the tarball into $WORK and build llama-bench with
#           -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=$ARCH -DLLAMA_CURL=OFF (skipped
#           when $WORK/llama.cpp/build/bin/llama-bench exists)
#   models  .gpu/ftchat dev gen-model --preset P --type $TYPE -o /tmp/P.gguf for each
#           P in $PRESETS (skipped when the file exists)
#   bench   for each model: llama-bench -fa 1 -p 512 -n 128 -d $DEPTHS with f16 KV,
#           then with q8_0 KV; then ftchat bench speed (bf16 and fp8_e4m3 KV) at
#           the same depths, prefill 512, decode 128
#   status  show the detached run's log tail and the logs in $OUT
#
# DETACH=1 starts the steps under setsid and returns at once (one device
# command may run 10 minutes; a detached run lives until the machine is
# given back): call again with `status` to follow it.
# Logs: $WORK/out, one file per step and model; at the end of a run and on
# `status` they are packed into $OUT/peer-logs.tar.gz (+ $OUT/peer-summary.txt)
# because the device tool returns at most 8 files. OUT defaults to .gpu-peer/out.
#
# cmake: the device image has cmake and ninja. Where cmake is missing and no
# pip index is reachable, carry the PyPI `cmake` wheel (a self-contained
# binary): `pip download --no-deps --only-binary=:all: --platform
# manylinux2014_x86_64 cmake -d .gpu-peer`; this script installs any
# .gpu-peer/cmake-*.whl into $WORK/cmake-site and uses its bin/cmake.
#
# Tried on a 2-core dev VM with a CPU-only build of the stripped tree (33 min
# wall, busy machine; WORK=/tmp/peertest with build -> build-cpu, NGL=0,
# DEVICE=cpu, PRESETS="qwen35moe-tiny qwen3-tiny", DEPTHS=0,256): models and
# bench ran, llama-bench took both synth files with f16 and q8_0 KV and -fa 1.
#
# ftchat reads tokenizer.ggml.pre "qwen35" only once engine/tokenizer maps it;
# until then its qwen3.6-35b-a3b step fails at load (llama-bench is unaffected).
#
# Environment: PRESETS (default "qwen3-30b-a3b qwen3.6-35b-a3b"), TYPE (Q4_K),
# DEPTHS (0,4096,32768), ARCH (90), JOBS (nproc), WORK (/tmp/peer), OUT,
# LOGS ($WORK/out),
# FTCHAT (.gpu/ftchat), CTX (ftchat --ctx-size, default 40960), NGL (99),
# DEVICE (ftchat --device, default cuda), REPS (llama-bench -r, default 5),
# FTCHAT_BENCH (0: the bench step runs llama-bench only).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
STEP=${1:-all}
OUT=${OUT:-$ROOT/.gpu-peer/out}
WORK=${WORK:-/tmp/peer}
PRESETS=${PRESETS:-qwen3-30b-a3b qwen3.6-35b-a3b}
TYPE=${TYPE:-Q4_K}
DEPTHS=${DEPTHS:-0,4096,32768}
ARCH=${ARCH:-90}
JOBS=${JOBS:-$(nproc)}
FTCHAT=${FTCHAT:-$ROOT/.gpu/ftchat}
CTX=${CTX:-40960}
NGL=${NGL:-99}
DEVICE=${DEVICE:-cuda}
REPS=${REPS:-5}
FTCHAT_BENCH=${FTCHAT_BENCH:-1}
TARBALL=$ROOT/.gpu-peer/llama.cpp.tar.xz
BENCH=$WORK/llama.cpp/build/bin/llama-bench
LOGS=${LOGS:-$WORK/out}
mkdir -p "$OUT" "$WORK" "$LOGS"

log() { echo "[peer $(date -u +%T)] $*" | tee -a "$LOGS/peer.log"; }

pack_logs() { # the device tool returns at most 8 files: one archive + a summary
  [ "$OUT" = "$LOGS" ] && return 0
  tar -C "$LOGS" -czf "$OUT/peer-logs.tar.gz" . 2>/dev/null
  { cat "$LOGS/peer.log" 2>/dev/null; for f in "$LOGS"/llama-bench-*.md "$LOGS"/ftchat-*.txt; do
      [ -f "$f" ] && { echo "== $(basename "$f")"; cat "$f"; }; done; } >"$OUT/peer-summary.txt"
}

find_cmake() {
  if command -v cmake >/dev/null 2>&1; then echo cmake; return; fi
  local whl
  whl=$(ls "$ROOT"/.gpu-peer/cmake-*.whl 2>/dev/null | head -1)
  if [ -n "$whl" ]; then
    python3 -m pip install -q --no-index --no-deps --target "$WORK/cmake-site" "$whl" >&2 &&
      { echo "$WORK/cmake-site/bin/cmake"; return; }
  fi
  echo ""
}

do_build() {
  if [ -x "$BENCH" ]; then log "build: $BENCH exists, skipped"; return 0; fi
  [ -f "$TARBALL" ] || { log "build: $TARBALL missing (run scripts/llamacpp_tarball.sh and carry .gpu-peer)"; return 1; }
  local CM
  CM=$(find_cmake)
  [ -n "$CM" ] || { log "build: no cmake and no .gpu-peer/cmake-*.whl"; return 1; }
  rm -rf "$WORK/llama.cpp" && tar -C "$WORK" -xJf "$TARBALL" || return 1
  local gen=()
  command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
  log "build: configure ($CM, nvcc $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*'), arch $ARCH)"
  (cd "$WORK/llama.cpp" && "$CM" -S . -B build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_TOOLS=ON -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON) >"$LOGS/build-configure.log" 2>&1 ||
    { log "build: configure failed (see build-configure.log)"; tail -20 "$LOGS/build-configure.log"; return 1; }
  log "build: llama-bench with -j$JOBS"
  local t0=$SECONDS
  (cd "$WORK/llama.cpp" && "$CM" --build build --target llama-bench -j "$JOBS") >"$LOGS/build.log" 2>&1 ||
    { log "build: failed (see build.log)"; tail -30 "$LOGS/build.log"; return 1; }
  log "build: done in $((SECONDS - t0)) s"
}

do_models() {
  [ -x "$FTCHAT" ] || { log "models: $FTCHAT missing (BUNDLE=ftchat scripts/gpu_bundle.sh, carry .gpu)"; return 1; }
  for p in $PRESETS; do
    local f=/tmp/$p.gguf
    if [ -s "$f" ]; then log "models: $f exists, skipped"; continue; fi
    log "models: gen-model $p $TYPE"
    local t0=$SECONDS
    "$FTCHAT" dev gen-model --preset "$p" --type "$TYPE" -o "$f" >"$LOGS/gen-$p.log" 2>&1 ||
      { log "models: $p failed"; tail -5 "$LOGS/gen-$p.log"; return 1; }
    log "models: $f $(du -h "$f" | cut -f1) in $((SECONDS - t0)) s"
  done
}

do_bench() {
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv >"$LOGS/gpu_info.txt" 2>&1
  for p in $PRESETS; do
    local f=/tmp/$p.gguf
    [ -s "$f" ] || { log "bench: $f missing"; continue; }
    if [ -x "$BENCH" ]; then
      for kv in f16 q8_0; do
        log "bench: llama-bench $p kv $kv"
        "$BENCH" -m "$f" -ngl "$NGL" -fa 1 -p 512 -n 128 -r "$REPS" -d "$DEPTHS" -ctk "$kv" -ctv "$kv" -o md \
          >"$LOGS/llama-bench-$p-$kv.md" 2>"$LOGS/llama-bench-$p-$kv.err" ||
          { log "bench: llama-bench $p $kv failed"; tail -5 "$LOGS/llama-bench-$p-$kv.err"; }
        cat "$LOGS/llama-bench-$p-$kv.md"
      done
    else
      log "bench: no llama-bench ($BENCH); build first"
    fi
    if [ -x "$FTCHAT" ] && [ "$FTCHAT_BENCH" = 1 ]; then
      log "bench: ftchat bench speed $p"
      "$FTCHAT" bench speed --model "$f" --device "$DEVICE" --ctx-size "$CTX" --depths "$DEPTHS" \
        --dtypes bf16,fp8_e4m3 --prefill 512 --decode 128 >"$LOGS/ftchat-$p.txt" 2>&1 ||
        log "bench: ftchat $p failed"
      cat "$LOGS/ftchat-$p.txt"
    fi
  done
}

run_steps() {
  case $1 in
  all) do_build && do_models && do_bench ;;
  build) do_build ;;
  models) do_models ;;
  bench) do_bench ;;
  *) echo "usage: $0 [all|build|models|bench|status]" >&2; return 2 ;;
  esac
}

if [ "$STEP" = wait ]; then
  # Wait (up to TRIES x 3 s, default 100) for a detached build's llama-bench;
  # stops early when the detached run has ended. Exit 0 when it is there.
  LB=$WORK/llama.cpp/build/bin/llama-bench
  for _ in $(seq 1 "${TRIES:-100}"); do
    [ -x "$LB" ] && exit 0
    kill -0 "$(cat "$WORK/detached.pid" 2>/dev/null)" 2>/dev/null || break
    sleep 3
  done
  [ -x "$LB" ]
  exit
fi
if [ "$STEP" = status ]; then
  [ -f "$WORK/detached.pid" ] && { kill -0 "$(cat "$WORK/detached.pid")" 2>/dev/null && echo "detached run $(cat "$WORK/detached.pid") running" || echo "detached run finished"; }
  tail -20 "$WORK/detached.log" 2>/dev/null
  ls -la "$LOGS"
  pack_logs
  exit 0
fi
if [ "${DETACH:-0}" = 1 ]; then
  # setsid: a new session, so the run outlives this command on the device machine.
  setsid env DETACH=0 OUT="$LOGS" WORK="$WORK" LOGS="$LOGS" "$0" "$STEP" >"$WORK/detached.log" 2>&1 < /dev/null &
  echo $! >"$WORK/detached.pid"
  echo "peer: detached as pid $(cat "$WORK/detached.pid"); follow with: $0 status"
  exit 0
fi
run_steps "$STEP"
rc=$?
pack_logs
exit $rc
