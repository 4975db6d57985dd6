#!/usr/bin/env bash
# Device calls of the thirteenth session (2026-12-06): decode's host side
# (device ops run inline on the caller's thread, FTCHAT_DEVICE_INLINE, against
# the device goroutine), the fused q/k norm + RoPE + KV write and one-launch
# MoE routing, and issue 13's ftchat rows. What ran, on one H200, back to
# back: `BUDGET=520 solo`, then `full` and `rep2` (as typed into the device
# tool then; the modes below are those commands). first/decode/rest/probe are
# prepared for a session with more device time (a llama.cpp build in the
# same chain). The CFG_* ways below were env switches then; all three are
# the defaults now. Here:
#   scripts/gpu_session.sh bundle
# There (carry .gpu and .gpu-peer; chain the calls without a pause, the
# machine goes back ~30 s after one and /tmp with it):
#   [BUDGET=S] [NO30=1] scripts/gpu_session14.sh solo
#     (when one call is all there is) the tests of this session's kernels
#     and the engine's replay/graph/whole-model tests with everything new
#     on ($CFG_all); then, with nothing else on the host, decode three ways
#     (ab: base, fuse, all) with CPU profiles on the 8B file, `ftchat bench
#     speed` (bf16, fp8, 0/4K/32K) on it with everything on, and as time
#     allows the same on the 30B file.
#   scripts/gpu_session14.sh full
#     (ran after solo) every gpu-package and engine GPU test with
#     everything on, then the fp16-compute test with each change alone.
#   scripts/gpu_session14.sh rep2
#     (ran after solo) base against all once more on the 8B and 30B files,
#     and SmolLM2 both ways.
#   scripts/gpu_session14.sh probe
#     (alone, first) the KV write, attention, norm, RoPE and MoE routing tests with
#     device ops inline; decode on the 8B file both ways with CPU profiles;
#     Nsight Systems traces of 8B decode both ways through kernel_gaps.py.
#   scripts/gpu_session14.sh first
#     starts the llama.cpp build (detached); writes the 8B and SmolLM2 files
#     and (in the background) the Qwen3-30B-A3B one; every gpu-package test
#     and every engine GPU test with FTCHAT_DEVICE_INLINE=1 (the fused KV
#     write is on in both ways); Nsight Compute on attn_fa over fp8 pages
#     at 32K as time allows.
#   scripts/gpu_session14.sh decode
#     decode with device ops inline against the device goroutine, back to
#     back, on the 8B and 30B files (fp8, depth 0 and 4K, 128 steps), each
#     with a Go CPU profile (bench speed --cpuprofile) into $OUT; an Nsight
#     Systems trace of 8B decode steps read by scripts/kernel_gaps.py (idle
#     time between kernels); llama-bench (f16 KV) on both files at
#     0/4K/32K; `ftchat bench speed` (bf16, fp8) on the 8B file at 0/4K/32K
#     in the faster way (written to /tmp/mode for the next call).
#   scripts/gpu_session14.sh rest
#     `ftchat bench speed` on the 30B file at 0/4K/32K and llama-bench and
#     `ftchat bench speed` on SmolLM2, in the way `decode` chose.
# Logs: one tgz per call in $OUT (pprof files beside it).
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
# decode_rate FILE DEPTH: the decode tok/s of a speed log's fp8 row at DEPTH.
decode_rate() { awk -v d="$2" '$1 == "fp8_e4m3" && $2 == d {print $4}' "$1" | head -1; }
# nsys_gaps TAG MODE ARGS...: an Nsight Systems trace of `ftchat bench
# speed ARGS` with FTCHAT_DEVICE_INLINE=MODE, read by kernel_gaps.py.
nsys_gaps() {
  local tag=$1 mode=$2 f; shift 2
  [ -n "$NSYS" ] || return
  stamp "nsys $tag, FTCHAT_DEVICE_INLINE=$mode"
  FTCHAT_DEVICE_INLINE=$mode timeout 90 "$NSYS" profile --trace=cuda --cuda-graph-trace=node --force-overwrite true -o /tmp/nsys_$tag \
    $B/ftchat bench speed --device cuda "$@" >$L/nsys_run_$tag.txt 2>&1
  echo "rc=$?"; grep -E '^fp8' $L/nsys_run_$tag.txt
  "$NSYS" stats --report cuda_gpu_trace --format csv --force-export true --output /tmp/nsys_$tag /tmp/nsys_$tag.nsys-rep >$L/nsys_stats_$tag.txt 2>&1
  f=$(ls /tmp/nsys_${tag}*cuda_gpu_trace*.csv 2>/dev/null | head -1)
  [ -n "$f" ] && python3 scripts/kernel_gaps.py "$f" 100 | tee $L/gaps_$tag.txt && xz -c "$f" >$L/gpu_trace_$tag.csv.xz
}
NSYS=$(command -v nsys || ls /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda*/bin/nsys 2>/dev/null | head -1)
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
probe)
  L=/tmp/out/probe; mkdir -p $L; [ -x $B/ftchat ] || unpack
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $L/machine.txt
  (gen llama-3.1-8b $L8; gen smollm2-135m /tmp/s.gguf) &
  stamp "KV write, attention, norm and RoPE tests, device ops inline"
  T_TEST=120 gtests gpu gpu.test 'KVWrite|RoPE|Norm|TestAttention|TestMoERouter|TestMoETopk|TestMoEPaths' $L/gpu_test.log FTCHAT_DEVICE_INLINE=1
  wait
  T_TEST=60 gtests engine engine.test 'TestGPUReplayLastStep|TestGPUDecodeGraphsMatchDirect' $L/engine_test.log FTCHAT_DEVICE_INLINE=1
  ab l8b $L8 1
  ab smol /tmp/s.gguf 1
  nsys_gaps l8b_1 1 --model $L8 --ctx-size 8192 --depths 4096 --dtypes fp8_e4m3 --prefill 512 --decode 64
  nsys_gaps l8b_0 0 --model $L8 --ctx-size 8192 --depths 4096 --dtypes fp8_e4m3 --prefill 512 --decode 64
  tar -czf "$OUT/probe-logs.tgz" -C /tmp/out probe
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
first)
  L=/tmp/out/first; mkdir -p $L; [ -x $B/ftchat ] || unpack
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $L/machine.txt
  WORK=/tmp/peer JOBS=14 DETACH=1 scripts/peer_llamacpp.sh build
  gen llama-3.1-8b $L8
  gen smollm2-135m /tmp/s.gguf
  gen30
  stamp "new and touched kernels' tests, graphs, MoE: device ops inline"
  T_TEST=150 gtests gpu gpu.test 'KVWrite|RoPE|Norm|TestAttention|MoE|Graph|Decode|Sample' $L/gpu_test.log FTCHAT_DEVICE_INLINE=1
  stamp "every engine GPU test, device ops inline"
  T_TEST=$((570 - $(date +%s) + T0 - 100)) gtests engine engine.test GPU $L/engine_test.log FTCHAT_DEVICE_INLINE=1
  # Beside the build: decode rates here are not clean, graph t/s is (GPU only).
  fits 60 && speed l8b_busy 50 FTCHAT_DEVICE_INLINE=1 -- --model $L8 --ctx-size 8192 --depths 0,4096 --dtypes fp8_e4m3 --prefill 512 --decode 32
  WORK=/tmp/peer scripts/peer_llamacpp.sh status 2>/dev/null | tail -2
  ls -l /tmp/*.gguf*
  tar -czf "$OUT/first-logs.tgz" -C /tmp/out first
  ;;
decode)
  L=/tmp/out/decode; mkdir -p $L; [ -x $B/ftchat ] || unpack
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $L/machine.txt
  gen llama-3.1-8b $L8
  gen30
  stamp "llama.cpp build"; WORK=/tmp/peer scripts/peer_llamacpp.sh status 2>/dev/null | tail -2
  # Nothing else runs on the host during these (no build, no generation).
  WORK=/tmp/peer TRIES=60 scripts/peer_llamacpp.sh wait >/dev/null 2>&1
  wait30 24
  ab l8b $L8 1
  [ -s $M30 ] && ab m30 $M30 1
  # The faster way at depth 0 for what follows.
  a=$(decode_rate $L/speed_l8b_inline1_1.txt 0) c=$(decode_rate $L/speed_l8b_inline0_1.txt 0)
  mode=0; awk -v a="${a:-0}" -v c="${c:-0}" 'BEGIN{exit !(a > c)}' && mode=1
  echo "$mode" >/tmp/mode; stamp "8B decode: inline $a tok/s vs goroutine $c: FTCHAT_DEVICE_INLINE=$mode"
  REPS=2 LB_TIMEOUT=120 llamabench $L8 l8b 0,4096,32768 f16
  speed l8b 150 FTCHAT_DEVICE_INLINE=$mode -- --model $L8 --ctx-size 33792 --depths 0,4096,32768 \
    --dtypes bf16,fp8_e4m3 --prefill 512 --decode 128
  fits 100 && REPS=1 LB_TIMEOUT=100 llamabench $M30 m30 0,4096,32768 f16
  fits 60 && speed m30 $((570 - $(date +%s) + T0 - 10)) FTCHAT_DEVICE_INLINE=$mode -- --model $M30 --ctx-size 33792 --depths 0,4096,32768 \
    --dtypes bf16,fp8_e4m3 --prefill 512 --decode 64
  tar -czf "$OUT/decode-logs.tgz" -C /tmp/out decode
  ;;
rest)
  L=/tmp/out/rest; mkdir -p $L; [ -x $B/ftchat ] || unpack
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $L/machine.txt
  mode=$(cat /tmp/mode 2>/dev/null || echo 1)
  gen smollm2-135m /tmp/s.gguf
  gen30; wait30 30
  [ -s /tmp/out/decode/lb_m30_f16.md ] || REPS=2 LB_TIMEOUT=150 llamabench $M30 m30 0,4096,32768 f16
  speed m30 230 FTCHAT_DEVICE_INLINE=$mode -- --model $M30 --ctx-size 33792 --depths 0,4096,32768 \
    --dtypes bf16,fp8_e4m3 --prefill 512 --decode 128
  fits 90 && REPS=2 LB_TIMEOUT=60 llamabench /tmp/s.gguf smol 0,4096 f16
  fits 50 && speed smol 60 FTCHAT_DEVICE_INLINE=$mode -- --model /tmp/s.gguf --ctx-size 8192 --depths 0,4096 \
    --dtypes bf16,fp8_e4m3 --prefill 512 --decode 128
  tar -czf "$OUT/rest-logs.tgz" -C /tmp/out rest
  ;;
*)
  echo "usage: $0 first|decode|rest" >&2
  exit 2
  ;;
esac
