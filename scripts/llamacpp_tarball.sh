#!/usr/bin/env bash
# Packs the llama.cpp tree vendored in the llama-cpp-python sdist, stripped to
# what `llama-bench` needs with the CPU and CUDA backends, into
# .gpu-peer/llama.cpp.tar.xz (git-ignored: /.gpu*/), for scripts/peer_llamacpp.sh
# on a GPU machine that cannot download anything.
#
# Kept: top-level CMake files and cmake/, include/, src/, common/, ggml/
# (CMake files, include/, src/ base files, ggml-cpu/, ggml-cuda/), the vendor
# headers common/ links (nlohmann, sheredom, cpp-httplib), tools/llama-bench/,
# licenses. Dropped: every other backend, tools, examples, tests, models, docs.
# Two CMake files are replaced by short ones written here, so the stripped
# tree configures: tools/CMakeLists.txt (llama-bench only) and
# vendor/CMakeLists.txt (no miniaudio/stb/hash: only mtmd uses them).
#
# Usage: scripts/llamacpp_tarball.sh [LLAMA_CPP_DIR]
#   LLAMA_CPP_DIR defaults to /tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp
#   (pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d /tmp/lcp
#    && tar -C /tmp/lcp -xzf /tmp/lcp/llama_cpp_python-0.3.36.tar.gz)
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:-/tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp}
OUTDIR=.gpu-peer
[ -f "$SRC/CMakeLists.txt" ] && [ -d "$SRC/ggml/src/ggml-cuda" ] || { echo "llamacpp-tarball: no llama.cpp tree at $SRC" >&2; exit 2; }
mkdir -p "$OUTDIR"
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
T=$STAGE/llama.cpp
mkdir -p "$T"

copy() { # copy paths relative to $SRC, keeping the layout
  for p in "$@"; do
    [ -e "$SRC/$p" ] || { echo "llamacpp-tarball: missing $p" >&2; exit 1; }
    mkdir -p "$T/$(dirname "$p")"
    cp -a "$SRC/$p" "$T/$p"
  done
}

copy CMakeLists.txt CMakePresets.json LICENSE cmake include src common licenses tools/llama-bench
copy vendor/nlohmann vendor/sheredom vendor/cpp-httplib
copy ggml/CMakeLists.txt ggml/cmake ggml/include
# ggml/src: every plain file (base library sources, CMakeLists.txt) plus the two backends
mkdir -p "$T/ggml/src"
find "$SRC/ggml/src" -maxdepth 1 -type f -exec cp -a {} "$T/ggml/src/" \;
copy ggml/src/ggml-cpu ggml/src/ggml-cuda
# fail loudly if ggml-cuda ever includes another backend's files
if grep -rhoE '#include "\.\./ggml-[a-z]+/' "$T/ggml/src/ggml-cuda" | grep -v -e ggml-cuda -e ggml-cpu | head -1 | grep -q .; then
  echo "llamacpp-tarball: ggml-cuda includes another backend's files; keep them too" >&2
  exit 1
fi

cat >"$T/tools/CMakeLists.txt" <<'EOF'
# Stripped by ftchat's scripts/llamacpp_tarball.sh: llama-bench only.
find_package(Threads REQUIRED)
llama_add_compile_flags()
add_subdirectory(llama-bench)
EOF
cat >"$T/vendor/CMakeLists.txt" <<'EOF'
# Stripped by ftchat's scripts/llamacpp_tarball.sh: what llama-common links.
add_subdirectory(nlohmann)
add_subdirectory(sheredom)
if (LLAMA_BUILD_COMMON)
    add_subdirectory(cpp-httplib)
endif()
EOF
# where the tree came from
{
  echo "source: $SRC"
  grep -m1 -E '^Version:' "$SRC/../../PKG-INFO" 2>/dev/null | sed 's/^/llama-cpp-python /' || true
  date -u +%FT%TZ
} >"$T/FTCHAT_PEER_SOURCE.txt"

tar -C "$STAGE" -cJf "$OUTDIR/llama.cpp.tar.xz" --owner=0 --group=0 --numeric-owner llama.cpp
echo "llamacpp-tarball: $OUTDIR/llama.cpp.tar.xz $(du -h "$OUTDIR/llama.cpp.tar.xz" | cut -f1) ($(du -sh "$T" | cut -f1) unpacked)"
