#!/usr/bin/env bash
# Builds everything a GPU device run needs into .gpu/ (git-ignored; carry it
# to the GPU machine, which has no Go toolchain): the gpu package's test
# binary (tests + benchmarks), the ftchat binary (for `ftchat dev gen-model`
# random-weight GGUFs and end-to-end runs) and scripts/gpu_run.sh's inputs.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
mkdir -p .gpu
CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $GO test -c -trimpath -ldflags="-s -w" -o .gpu/gpu.test ./gpu/
if CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $GO build -trimpath -ldflags="-s -w" -o .gpu/ftchat . 2>/dev/null; then
  echo "gpu-bundle: .gpu/ftchat built"
else
  echo "gpu-bundle: ftchat binary did not build; bundle has the gpu tests only" >&2
fi
cp scripts/gpu_run.sh .gpu/
du -sh .gpu/* | sed 's/^/gpu-bundle: /'
