#!/usr/bin/env bash
# Host-resident MoE experts on the GPU machine (issue 12 item 3): ftchat's
# bench speed under an 8 GiB budget for each way of running the experts
# that stay in host RAM, then llama.cpp's llama-bench with --n-cpu-moe on
# the same file when LLAMA_BENCH is given. One device call; stages are
# bounded by T_BENCH seconds each.
#
#   scripts/gpu_offload.sh [FTCHAT [MODEL]]
#
# FTCHAT defaults to .gpu/ftchat (BUNDLE=ftchat scripts/gpu_bundle.sh; carry
# it xz-compressed: a .xz next to it is unpacked). MODEL defaults to a
# Qwen3.6-35B-A3B-shaped random-weight GGUF of TYPE (Q4_K) generated here
# with `ftchat dev gen-model` into /tmp (reused when present).
#
# Runs, each at the KV dtypes DTYPES (bf16,fp8_e4m3) and REPS times, medians
# printed per (run, dtype, depth):
#   auto       the planner's placement, --expert-run auto (prefill streams,
#              decode mapped: the GPU reads the selected experts in host
#              RAM), depths DEPTHS (4096,32768; LONG=1 adds 131072)
#   mapped     the same placement, every call mapped (--expert-run mapped)
#   stream     the same placement, every call streamed (--expert-run stream)
#   cpu        the same placement, every call on the CPU (--expert-run cpu),
#              depths CPU_DEPTHS (0: filling a deep context on the CPU takes
#              minutes; its decode is what auto's decode runs)
#   auto-ref   cpu with FTCHAT_HOST_MOE=reference: the CPU path through the
#              CPU backend's own MoE (same results, one parallel loop per
#              expert matmul) instead of the phased one, to compare
#   cpu-moe    every block's experts in host RAM (--cpu-moe), auto run
# Then llama-bench -ngl 99 -fa 1 -p 512 -n DECODE -d DEPTHS with f16 and q8_0
# KV (it has no fp8 KV) for each --n-cpu-moe in LLAMA_NCMOE (default: all
# blocks, the --cpu-moe equivalent, and each N of ftchat's plan as
# `ftchat bench capacity --gpu-memory 8GiB` prints it: the same split).
#
# Environment: OUT (.gpu/out/offload), GPU_MEMORY (8GiB), PREFILL (512),
# DECODE (64), REPS (3), T_BENCH (seconds per bench command, 300),
# RUNS ("auto mapped auto-ref stream cpu cpu-moe"), LLAMA_BENCH, LLAMA_NCMOE, LLAMA_REPS (3).
set -uo pipefail
cd "$(dirname "$0")/.."
FTCHAT=${1:-.gpu/ftchat}
TYPE=${TYPE:-Q4_K}
MODEL=${2:-/tmp/qwen3.6-35b-a3b-$TYPE.gguf}
OUT=${OUT:-.gpu/out/offload}
GPU_MEMORY=${GPU_MEMORY:-8GiB}
DTYPES=${DTYPES:-bf16,fp8_e4m3}
DEPTHS=${DEPTHS:-4096,32768}
[ "${LONG:-0}" = 1 ] && DEPTHS=$DEPTHS,131072
CPU_DEPTHS=${CPU_DEPTHS:-0}
PREFILL=${PREFILL:-512}
DECODE=${DECODE:-64}
REPS=${REPS:-3}
T_BENCH=${T_BENCH:-300}
RUNS=${RUNS:-auto mapped auto-ref stream cpu cpu-moe}
mkdir -p "$OUT"
stamp() { echo "[offload $(date -u +%T)] $*"; }

if [ ! -x "$FTCHAT" ] && [ -f "$FTCHAT.xz" ]; then
  xz -dc "$FTCHAT.xz" >"$FTCHAT" && chmod +x "$FTCHAT"
fi
[ -x "$FTCHAT" ] || { echo "gpu_offload: $FTCHAT is not an executable ftchat (BUNDLE=ftchat scripts/gpu_bundle.sh)" >&2; exit 2; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv
  echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(free -g | awk '/Mem:/{print $2}') GiB"
  date -u +%FT%TZ; } 2>&1 | tee "$OUT/machine.txt"

if [ ! -s "$MODEL" ]; then
  stamp "gen-model qwen3.6-35b-a3b $TYPE -> $MODEL"
  "$FTCHAT" dev gen-model --preset qwen3.6-35b-a3b --type "$TYPE" -o "$MODEL" >"$OUT/gen.log" 2>&1 ||
    { tail -5 "$OUT/gen.log"; exit 1; }
fi
ls -la "$MODEL"
maxdepth=$(echo "$DEPTHS,$CPU_DEPTHS" | tr , '\n' | sort -n | tail -1)
CTX=$((maxdepth + PREFILL + DECODE + 1024))

stamp "plan"
timeout 120 "$FTCHAT" bench capacity --model "$MODEL" --device cuda --gpu-memory "$GPU_MEMORY" --ctx-size "$CTX" 2>&1 | tee "$OUT/capacity.txt"

: >"$OUT/speed.txt"
for run in $RUNS; do
  flags=(--expert-run auto)
  depths=$DEPTHS
  case $run in
  auto) ;;
  stream) flags=(--expert-run stream) ;;
  mapped) flags=(--expert-run mapped) ;;
  cpu) flags=(--expert-run cpu); depths=$CPU_DEPTHS ;;
  cpu-moe) flags=(--cpu-moe --expert-run auto) ;;
  auto-ref) flags=(--expert-run cpu); depths=$CPU_DEPTHS ;; # decode no longer runs on the CPU under auto
  *) echo "gpu_offload: unknown run $run (auto, mapped, auto-ref, stream, cpu, cpu-moe)" >&2; continue ;;
  esac
  env=()
  [ "$run" = auto-ref ] && env=(FTCHAT_HOST_MOE=reference)
  for rep in $(seq 1 "$REPS"); do
    stamp "bench speed $run rep $rep: ${flags[*]} depths $depths" | tee -a "$OUT/speed.log"
    env "${env[@]}" timeout "$T_BENCH" "$FTCHAT" bench speed --model "$MODEL" --device cuda --gpu-memory "$GPU_MEMORY" --ctx-size "$CTX" \
      "${flags[@]}" --depths "$depths" --dtypes "$DTYPES" --prefill "$PREFILL" --decode "$DECODE" \
      >"$OUT/speed-$run-$rep.txt" 2>&1
    rc=$?
    cat "$OUT/speed-$run-$rep.txt" >>"$OUT/speed.log"
    [ $rc = 0 ] || { echo "  rc=$rc"; tail -3 "$OUT/speed-$run-$rep.txt"; }
    # Table rows: kv depth prefill decode device...
    awk -v run="$run" '$2 ~ /^[0-9]+$/ && $3 ~ /^[0-9.]+$/ {print run, $1, $2, $3, $4}' "$OUT/speed-$run-$rep.txt" >>"$OUT/speed.txt"
  done
done

stamp "medians over $REPS runs (tokens/s)"
sort -k1,1 -k2,2 -k3,3n "$OUT/speed.txt" | awk '
  function flush() { if (n == 0) return
    m = int((n + 1) / 2); printf "%-8s %-10s %8s %12s %12s  (%d runs)\n", r, k, d, p[m], q[m], n; n = 0 }
  { key = $1 " " $2 " " $3
    if (key != last) { flush(); last = key; r = $1; k = $2; d = $3 }
    n++; p[n] = $4; q[n] = $5
    for (i = n; i > 1 && p[i-1] > p[i]; i--) { t = p[i]; p[i] = p[i-1]; p[i-1] = t }
    for (i = n; i > 1 && q[i-1] > q[i]; i--) { t = q[i]; q[i] = q[i-1]; q[i-1] = t } }
  END { flush() }
  BEGIN { printf "%-8s %-10s %8s %12s %12s\n", "run", "kv", "depth", "prefill t/s", "decode t/s" }' | tee "$OUT/medians.txt"

if [ -n "${LLAMA_BENCH:-}" ]; then
  if [ -x "$LLAMA_BENCH" ]; then
    # Default: every block on the host, and each split ftchat's plan chose.
    plan=$( (grep -oE '/[0-9]+ layers' "$OUT/capacity.txt" | grep -oE '[0-9]+' | head -1
      grep -oE -- '--n-cpu-moe [0-9]+' "$OUT/capacity.txt" | grep -oE '[0-9]+') | sort -un | tr '\n' ' ')
    for n in ${LLAMA_NCMOE:-${plan:-40}}; do
      for kv in f16 q8_0; do
        stamp "llama-bench --n-cpu-moe $n kv $kv"
        timeout "$T_BENCH" "$LLAMA_BENCH" -m "$MODEL" -ngl 99 -fa 1 -p "$PREFILL" -n "$DECODE" -r "${LLAMA_REPS:-3}" \
          -d "$DEPTHS" -ctk "$kv" -ctv "$kv" --n-cpu-moe "$n" -o md \
          >"$OUT/llama-bench-ncmoe$n-$kv.md" 2>"$OUT/llama-bench-ncmoe$n-$kv.err" ||
          { echo "  llama-bench failed:"; tail -5 "$OUT/llama-bench-ncmoe$n-$kv.err"; }
        cat "$OUT/llama-bench-ncmoe$n-$kv.md"
      done
    done
  else
    echo "gpu_offload: LLAMA_BENCH=$LLAMA_BENCH is not executable (scripts/peer_llamacpp.sh build)" >&2
  fi
fi
