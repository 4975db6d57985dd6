#!/usr/bin/env bash
# Builds what a GPU device run needs into .gpu/ (git-ignored; carry it to the
# GPU machine, which has no Go toolchain). Binaries are static (CGO_ENABLED=0)
# and stripped. BUNDLE picks the parts (default "gpu ftchat"):
#   gpu     .gpu/gpu.test     the gpu package's tests and benchmarks
#   engine  .gpu/engine.test  the engine's tests (whole-model GPU vs CPU)
#   ftchat  .gpu/ftchat       the CLI (dev gen-model for random-weight GGUFs, bench)
# A device call may carry at most 64 MiB in all: carry only the parts a run uses.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
BUNDLE=${BUNDLE:-gpu ftchat}
mkdir -p .gpu
flags=(-trimpath -ldflags="-s -w")
for part in $BUNDLE; do
  case $part in
  gpu) CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $GO test -c "${flags[@]}" -o .gpu/gpu.test ./gpu/ ;;
  engine) CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $GO test -c "${flags[@]}" -o .gpu/engine.test ./engine/ ;;
  ftchat)
    if ! CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $GO build "${flags[@]}" -o .gpu/ftchat .; then
      echo "gpu-bundle: ftchat binary did not build" >&2
    fi ;;
  *) echo "gpu-bundle: unknown part $part (use gpu, engine, ftchat)" >&2; exit 2 ;;
  esac
done
cp scripts/gpu_run.sh scripts/gpu_e2e.sh .gpu/
du -sh .gpu/* | sed 's/^/gpu-bundle: /'
