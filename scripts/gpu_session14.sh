#!/usr/bin/env bash
# Device calls of the thirteenth session (2026-12-06): decode's host side
# (device ops run inline on the caller's thread, FTCHAT_DEVICE_INLINE, against
# the device goroutine), the fused q/k norm + RoPE + KV write and one-launch
# MoE routing, and issue 13's ftchat rows. They ran on one H200, back to back
# (the later two as typed into the device tool then; the modes are those
# commands). The CFG_* ways were env switches then; all three are the
# defaults now. Here:
#   scripts/gpu_session.sh bundle
# There (carry .gpu; chain the calls without a pause, the machine goes back
# ~30 s after one and /tmp with it):
#   [BUDGET=S] [NO30=1] scripts/gpu_session14.sh solo
#     the tests of this session's kernels and the engine's replay/graph/
#     whole-model tests with everything new on ($CFG_all); then, with
#     nothing else on the host, decode three ways (ab: base, fuse, all) with
#     CPU profiles on the 8B file, `ftchat bench speed` (bf16, fp8,
#     0/4K/32K) on it with everything on, and as time allows the same on the
#     30B file.
#   scripts/gpu_session14.sh full
#     every gpu-package and engine GPU test with everything on, then the
#     fp16-compute test with each change alone.
#   scripts/gpu_session14.sh rep2
#     base against all once more on the 8B and 30B files, and SmolLM2 both
#     ways.
# No llama.cpp build: the session's device time allowed one machine and
# about 13 minutes. Logs: one tgz per call in $OUT (pprof files beside it).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-.gpu/out}
B=/tmp/bin
L8=/tmp/l8b.gguf
M30=/tmp/m30.gguf
mkdir -p "$OUT"
. scripts/gpu_lib.sh # stamp, unpack, gen, gtests, speed, llamabench, find_ncu
T0=$(date +%s)
fits() { [ $(($(date +%s) - T0 + $1)) -le ${BUDGET:-570} ]; }
gen30() {
  [ -s $M30 ] || pgrep -f "gen-model --preset qwen3-30b-a3b" >/dev/null ||
    setsid nohup sh -c "$B/ftchat dev gen-model --preset qwen3-30b-a3b --type Q4_K -o $M30.tmp && mv $M30.tmp $M30" \
      >/tmp/gen30.log 2>&1 </dev/null &
}
wait30() { for _ in $(seq "${1:-36}"); do [ -s $M30 ] && return 0; sleep 5; done; return 1; }
# The three ways ab compares: base (as committed before this session),
# fuse (the fused q/k norm + RoPE + KV write and one-launch MoE routing),
# all (fuse, and device ops inline).
CFG_base="FTCHAT_DEVICE_INLINE=0 FTCHAT_FUSE_ROPE_KV=0 FTCHAT_MOE_ROUTER_TOPK=0"
CFG_fuse="FTCHAT_DEVICE_INLINE=0 FTCHAT_FUSE_ROPE_KV=1 FTCHAT_MOE_ROUTER_TOPK=1"
CFG_all="FTCHAT_DEVICE_INLINE=1 FTCHAT_FUSE_ROPE_KV=1 FTCHAT_MOE_ROUTER_TOPK=1"
# ab TAG MODEL REPS: decode (fp8, depth 0 and 4K, 128 steps) in each way,
# REPS times, alternating, with a CPU profile of the first run of each.
ab() {
  local tag=$1 m=$2 i cfg
  for i in $(seq "$3"); do
    for cfg in base fuse all; do
      local prof=() envs
      [ $i = 1 ] && prof=(--cpuprofile "$OUT/${tag}_$cfg.pprof")
      eval "envs=\$CFG_$cfg"
      # shellcheck disable=SC2086
      speed ${tag}_${cfg}_$i 120 $envs -- --model $m --ctx-size 8192 --depths 0,4096 \
        --dtypes fp8_e4m3 --prefill 512 --decode 128 "${prof[@]}"
    done
  done
}
case ${1:-} in
full)
  # (after solo, same machine) every gpu-package test and every engine GPU
  # test with everything new on; then TestGPUFP16ComputeMatchesCPU with
  # each change alone, to tell which one moved its margin.
  L=/tmp/out/full; mkdir -p $L; [ -x $B/ftchat ] || unpack
  gen smollm2-135m /tmp/s.gguf
  T_TEST=170 gtests gpu gpu.test . $L/gpu_test.log "$CFG_all"
  T_TEST=190 gtests engine engine.test GPU $L/engine_test.log "$CFG_all"
  for c in "$CFG_base" "FTCHAT_DEVICE_INLINE=0 FTCHAT_FUSE_ROPE_KV=1 FTCHAT_MOE_ROUTER_TOPK=0" \
    "FTCHAT_DEVICE_INLINE=0 FTCHAT_FUSE_ROPE_KV=0 FTCHAT_MOE_ROUTER_TOPK=1" "FTCHAT_DEVICE_INLINE=1 FTCHAT_FUSE_ROPE_KV=0 FTCHAT_MOE_ROUTER_TOPK=0"; do
    echo "== $c"
    T_TEST=40 gtests engine engine.test TestGPUFP16ComputeMatchesCPU $L/fp16.log "$c"
    grep -E 'mean error|exceeds' $L/fp16.log
  done
  tar -czf "$OUT/full-logs.tgz" -C /tmp/out full
  ;;
rep2)
  # (after solo, same machine) a second run of base and all on the 8B and
  # 30B files, and SmolLM2 both ways.
  L=/tmp/out/rep2; mkdir -p $L; [ -x $B/ftchat ] || unpack
  gen llama-3.1-8b $L8; gen smollm2-135m /tmp/s.gguf; gen30; wait30 60
  for m in $L8 $M30; do
    for cfg in base all; do
      eval "envs=\$CFG_$cfg"
      # shellcheck disable=SC2086
      speed $(basename $m .gguf)_${cfg}_2 60 $envs -- --model $m --ctx-size 8192 --depths 0,4096 --dtypes fp8_e4m3 --prefill 512 --decode 128
    done
  done
  # shellcheck disable=SC2086
  speed smol_all 40 $CFG_all -- --model /tmp/s.gguf --ctx-size 8192 --depths 0,4096 --dtypes bf16,fp8_e4m3 --prefill 512 --decode 128
  # shellcheck disable=SC2086
  speed smol_base 40 $CFG_base -- --model /tmp/s.gguf --ctx-size 8192 --depths 0,4096 --dtypes fp8_e4m3 --prefill 512 --decode 128
  tar -czf "$OUT/rep2-logs.tgz" -C /tmp/out rep2
  ;;
solo)
  # One call, no llama.cpp build: the tests of this session's kernels, the
  # inline/goroutine decode comparison with CPU profiles, and issue 13's
  # ftchat rows on the 8B and 30B files.
  L=/tmp/out/solo; mkdir -p $L; [ -x $B/ftchat ] || unpack
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $L/machine.txt
  [ "${NO30:-}" ] || gen30
  (gen llama-3.1-8b $L8; gen smollm2-135m /tmp/s.gguf) &
  stamp "new and touched kernels' tests: device ops inline"
  T_TEST=110 gtests gpu gpu.test 'KVWrite|RoPE|Norm|TestAttention|TestMoETopk|TestMoERouter|TestMoEPaths|Graph' $L/gpu_test.log "$CFG_all"
  wait
  stamp "engine GPU tests: replay, graphs, whole model, all three on"
  T_TEST=100 gtests engine engine.test 'TestGPUReplayLastStep|TestGPUDecodeGraphsMatchDirect|TestGPUMatchesCPUWholeModel|TestGreedyAgreement' $L/engine_test.log "$CFG_all"
  [ "${NO30:-}" ] || { stamp "waiting for the 30B file"; wait30 30; }
  ls -l /tmp/*.gguf*
  # Nothing else runs on the host from here.
  ab l8b $L8 1
  # shellcheck disable=SC2086
  fits 100 && speed l8b 120 $CFG_all -- --model $L8 --ctx-size 33792 --depths 0,4096,32768 \
    --dtypes bf16,fp8_e4m3 --prefill 512 --decode 128
  fits 120 && [ -s $M30 ] && ab m30 $M30 1
  # shellcheck disable=SC2086
  fits 90 && [ -s $M30 ] && speed m30 $((${BUDGET:-570} - $(date +%s) + T0 - 10)) $CFG_all -- --model $M30 --ctx-size 33792 \
    --depths 0,4096,32768 --dtypes bf16,fp8_e4m3 --prefill 512 --decode 64
  tar -czf "$OUT/solo-logs.tgz" -C /tmp/out solo
  ;;
*)
  echo "usage: $0 solo|full|rep2" >&2
  exit 2
  ;;
esac
