#!/usr/bin/env bash
# Install nvcc (CUDA 11.8, Debian bookworm's nvidia-cuda-toolkit) to regenerate
# the committed PTX in gpu/kernels/. CI does not need this: the PTX is committed.
# Usage: sudo scripts/install_nvcc.sh   (log: /tmp/nvcc-install.log)
set -euo pipefail
LOG=${LOG:-/tmp/nvcc-install.log}
SRC=/etc/apt/sources.list.d/debian.sources
if [ -f "$SRC" ]; then
  # enable contrib non-free next to main (deb822 format)
  sed -i -E 's/^Components: main$/Components: main contrib non-free non-free-firmware/' "$SRC"
else
  echo "deb http://deb.debian.org/debian bookworm main contrib non-free non-free-firmware" \
    > /etc/apt/sources.list.d/bookworm-nonfree.list
fi
apt-get update >>"$LOG" 2>&1
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nvidia-cuda-toolkit >>"$LOG" 2>&1
nvcc --version | tee -a "$LOG"
