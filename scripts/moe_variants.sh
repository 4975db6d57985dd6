#!/usr/bin/env bash
# Builds PTX of the grouped MoE GEMMs (gpu/kernels/moe.cuh via moe_<type>.cu)
# with other tuning knobs (MOE_LOADER, MOE_FASTDQ, MOE_PREFETCH) into
# .gpu-moe/ptx/<variant>/moe_<type>_sm89.ptx, for a device run that times
# them side by side (scripts/gpu_moe.sh variants): FTCHAT_PTX_DIR pointing
# there makes the gpu package load that PTX instead of the embedded one.
# Needs nvcc 11.8 (scripts/install_nvcc.sh). Prints register use on sm_90.
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-nvcc}
# base: the committed defaults (MOE_LOADER 2 since 2026-12-04).
declare -A V=(
  [base]=""
  [loader1]="-DMOE_LOADER=1"
  [fastdq]="-DMOE_FASTDQ=1"
  [prefetch]="-DMOE_PREFETCH=1"
  [prefetchfd]="-DMOE_PREFETCH=1 -DMOE_FASTDQ=1"
)
for name in ${VARIANTS:-base loader1 fastdq prefetch}; do
  d=.gpu-moe/ptx/$name
  mkdir -p "$d"
  for t in ${TYPES:-q4_k q6_k q8_0 f16}; do
    # shellcheck disable=SC2086
    "$NVCC" -ptx -arch=compute_89 -O3 -lineinfo -std=c++17 -allow-unsupported-compiler -DFTCHAT_SM=89 ${V[$name]} \
      -o "$d/moe_${t}_sm89.ptx" gpu/kernels/moe_$t.cu 2>/dev/null
    if command -v ptxas >/dev/null; then
      { ptxas -arch=sm_90 -v "$d/moe_${t}_sm89.ptx" -o /dev/null 2>&1 || echo "ptxas failed (its report only)"; } |
        grep -E "Compiling|Used|spill|failed" | paste - - - | cut -c1-170 || true
    fi
  done
done
