#!/usr/bin/env bash
# Builds PTX of gpu/kernels/attention.cu with other tuning knobs (the ATTN_*
# macros) into .gpu/ptx/<variant>/attention_sm{89,90}.ptx, for a device run that
# benchmarks them side by side: FTCHAT_PTX_DIR=.gpu/ptx/<variant> makes the
# gpu package load that PTX instead of the embedded one. Needs nvcc (11.8,
# scripts/install_nvcc.sh). Prints each variant's register use on sm_90.
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-nvcc}
declare -A V=(
  [base]=""
  [fp8f16i]="-DATTN_FP8_F16=1"
  [fp8f16]="90 -DATTN_FP8_F16=1"
  [fp8f16st1]="90 -DATTN_FP8_F16=1 -DATTN_ST2_MIN_D_FP8=256"
  [fp8f16tl2]="90 -DATTN_FP8_F16=1 -DATTN_ST2_BYTES_FP8=8192"
  [fp8f16b3]="90 -DATTN_FP8_F16=1 -DATTN_ST2_MIN_D_FP8=256 -DATTN_MINB_D128_FP8=3"
  # FA prefill without the lo half of p (PV MMAs halved), and of q too
  # (QK^T halved as well): what the hi/lo precision costs at depth.
  [faplo0]="90 -DFA_PLO=0"
  [faqlo0]="90 -DFA_PLO=0 -DFA_QLO=0"
  # the embedded sm_90 build, for variants built for compute_90
  [base90]="90"
  # FA prefill over FP8 pages on fp16 MMAs (the codes widened to fp16,
  # exactly): with both lo halves, without p's, without q's and p's
  [fp8hlo]="90 -DFA_FP8_F16=1"
  [fp8h]="90 -DFA_FP8_F16=1 -DFA_HPLO=0"
  [fp8hq]="90 -DFA_FP8_F16=1 -DFA_HPLO=0 -DFA_HQLO=0"
)
for name in ${VARIANTS:-${!V[@]}}; do
  d=.gpu/ptx/$name
  mkdir -p "$d"
  # A leading "90" builds for compute_90 (Hopper), named as the embedded
  # sm_90 PTX; without it compute_89 (the name an sm_90 device loads when
  # the directory has no sm90 file).
  sm=89 flags=${V[$name]}
  if [[ $flags == 90* ]]; then sm=90 flags=${flags#90}; fi
  rm -f "$d"/attention_sm*.ptx
  # shellcheck disable=SC2086
  "$NVCC" -ptx -arch=compute_$sm -O3 -lineinfo -std=c++17 -allow-unsupported-compiler -DFTCHAT_SM=$sm $flags \
    -o "$d/attention_sm$sm.ptx" gpu/kernels/attention.cu
  if command -v ptxas >/dev/null; then
    { ptxas -arch=sm_90 -v "$d/attention_sm$sm.ptx" -o /dev/null 2>&1 || echo "ptxas failed (its report only)"; } | grep -E "Compiling|Used|spill" | paste - - - |
      grep -E "attn_(bf16|e4m3)_d(64|128)'" | sed -E "s/ptxas info +: //g; s/^/$name: /" | sed -E 's/Compiling entry function//; s/for .sm_90.//'
  fi
done
