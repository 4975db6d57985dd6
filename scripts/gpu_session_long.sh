#!/usr/bin/env bash
# The NVFP4 headline run (issue 12) and the long-context side-by-side runs
# (issues 11 and 13) in three back-to-back device calls of at most 10 minutes.
# Files under /tmp survive between the calls while the machine stays warm, so
# the calls must follow one another without a pause; the first copies the
# binaries to /tmp/bin and the later ones read them from there.
#
# Here (needs Go):   scripts/gpu_session.sh bundle      (.gpu/*.xz, .gpu-peer/llama.cpp.tar.xz)
# There, call 1:     scripts/gpu_session_long.sh tests      (carry .gpu and .gpu-peer)
#   llama.cpp build (detached), the Qwen3.6-35B-A3B-shaped NVFP4 GGUF and a
#   4-block Q4_K one, GPU-vs-CPU tests, the decode A/B on the 4-block file
#   (FTCHAT_* switches of the new paths), the MoE/host-expert benchmarks, and
#   the 8 GiB plan of the NVFP4 file for 131,072 tokens in fp8 and bf16.
# There, call 2:     scripts/gpu_session_long.sh offload
#   under --gpu-memory 8GiB: ftchat on the NVFP4 file at depths 4K / 32K /
#   128K (a 130,496-token prompt, then a 512-token chunk and decode), fp8 and
#   bf16 at the fp8 plan's split, decode of the other host-expert modes, then
#   llama-bench --n-cpu-moe on the same file.
# There, call 3:     scripts/gpu_session_long.sh fullgpu
#   the same NVFP4 file with every weight on the GPU, ftchat and llama-bench
#   at depths 0 / 4K / 32K / 128K; the Intel host's CPU fp8/bf16 decode.
# Logs are packed into one tgz per call in $OUT (the tool returns ≤ 8 files).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-.gpu/out}
WORK=${WORK:-/tmp/peer}
export WORK
NV=/tmp/q36-nvfp4.gguf      # Qwen3.6-35B-A3B shape, NVFP4 with per-expert .scale vectors
Q4L=/tmp/q36-4l-q4k.gguf    # the same block shapes in 4 blocks, Q4_K (decode A/B, profile)
B=/tmp/bin
LB=$WORK/llama.cpp/build/bin/llama-bench
CTX=${CTX:-131072}
LONGD=$((CTX - 512 - 64))   # the 128K prompt: depth + measured chunk + decode fill the context
mkdir -p "$OUT"
stamp() { echo "[$(date -u +%T)] $*"; }
# new decode paths of this session, each with its switch (old path = 0)
NEWPATHS=${NEWPATHS:-FTCHAT_DEVICE_SAMPLING=1 FTCHAT_MOEV=2 FTCHAT_FUSE=1 FTCHAT_PREFILL_ATTN=fa}
OLDPATHS=${OLDPATHS:-FTCHAT_DEVICE_SAMPLING=0 FTCHAT_MOEV=1 FTCHAT_FUSE=0 FTCHAT_PREFILL_ATTN=old}
NEWTESTS='TestDeviceSampling|TestSampleKernelModule|TestTopKPasses|TestMoE|TestRMSNormVariants|TestAddRMSNorm|TestNorms|TestHostExpert|TestHostMoEMatchesCPU|TestSplitCPUSlots|TestFP8|TestHFMixedModelGPUvsCPU|'"${FA_TESTS:-TestAttention|TestFASmem|TestBatchMetaFA|TestKV}"

wait_llama() { TRIES=${1:-100} scripts/peer_llamacpp.sh wait; }

case ${1:-} in
tests)
  L=/tmp/out/tests; mkdir -p $L $B
  for f in .gpu/*.xz; do n=$(basename "${f%.xz}"); xz -dc "$f" >"$B/$n" && chmod +x "$B/$n"; done
  { nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,pcie.link.gen.max,pcie.link.width.max --format=csv
    echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(free -g | awk '/Mem:/{print $2}') GiB"
    date -u +%FT%TZ; } 2>&1 | tee "$L/machine.txt"
  JOBS=${JOBS:-10} DETACH=1 scripts/peer_llamacpp.sh build
  ( [ -s $NV ] || $B/ftchat dev gen-model --preset qwen3.6-35b-a3b --type NVFP4 -o $NV
    [ -s $Q4L ] || $B/ftchat dev gen-model --preset qwen3.6-35b-a3b-4l --type Q4_K -o $Q4L
    echo done ) >/tmp/gen.log 2>&1 &
  # This session's new kernels and paths, at the default settings and with
  # every new switch on; the kernels the session did not touch ran last time.
  stamp "gpu tests"
  (cd gpu && FTCHAT_REQUIRE_GPU=1 timeout "${T_GPU:-150}" $B/gpu.test -test.v -test.run "${GPU_TESTS:-$NEWTESTS}" \
    -test.skip 'TestPTX' -test.timeout 300s) >"$L/gpu_test.log" 2>&1
  echo "gpu tests rc=$?"; grep -E '^(--- FAIL|FAIL|ok|PASS|panic)' "$L/gpu_test.log" | head -30
  stamp "gpu tests, new paths on ($NEWPATHS)"
  (cd gpu && env $NEWPATHS FTCHAT_REQUIRE_GPU=1 timeout "${T_GPU2:-60}" $B/gpu.test -test.v -test.run 'TestMoE|TestNorms|TestHostExpertModel' \
    -test.timeout 300s) >"$L/gpu_test_new.log" 2>&1
  echo "gpu tests (new paths) rc=$?"; grep -E '^(--- FAIL|FAIL|ok|PASS|panic)' "$L/gpu_test_new.log" | head -30
  stamp "engine GPU tests, new paths on"
  (cd engine && env $NEWPATHS FTCHAT_REQUIRE_GPU=1 timeout "${T_ENGINE:-140}" $B/engine.test -test.v -test.run "${ENGINE_TESTS:-GPU|Placement}" \
    -test.timeout 300s) >"$L/engine_test.log" 2>&1
  echo "engine tests rc=$?"; grep -E '^(--- FAIL|FAIL|ok|PASS|panic)' "$L/engine_test.log" | head -40
  stamp "waiting for the models"
  for _ in $(seq 1 120); do grep -q '^done' /tmp/gen.log && break; sleep 2; done
  tail -3 /tmp/gen.log; ls -la $NV $Q4L
  stamp "gpu benchmarks"
  (cd gpu && timeout "${T_BENCHS:-90}" $B/gpu.test -test.run '^$' -test.bench "${GPU_BENCH:-MoEDecode|AddRMSNorm|SampleRow|ReadBandwidth}" -test.benchtime 20x) \
    >"$L/gpu_bench.log" 2>&1
  (cd gpu && timeout 60 $B/gpu.test -test.run '^$' -test.bench 'HostExperts/(device|mapped|stream|cpu|cpu-intdot|split|split-intdot|split-c[1-4]|split-intdot-c[1-4])/rows=(1|8)$' \
    -test.benchtime 20x) >>"$L/gpu_bench.log" 2>&1
  # prefill attention: the block kernel and attn_fa side by side (TFLOP/s table at the end)
  (cd gpu && FTCHAT_BENCH_ONLY=fa timeout 60 $B/gpu.test -test.run '^$' -test.bench 'BenchmarkAttention' -test.benchtime 1x) \
    >"$L/attn_fa_bench.log" 2>&1
  grep -E '^Benchmark|GB/s' "$L/gpu_bench.log" | head -80
  grep -vE '^(goos|goarch|pkg|cpu):' "$L/attn_fa_bench.log" | tail -30
  # Decode A/B: the same file and command with the old and the new paths, alternating.
  for r in 1; do
    for set in old new; do
      vars=$OLDPATHS; [ $set = new ] && vars=$NEWPATHS
      stamp "4-block Q4_K, $set paths ($vars), run $r" | tee -a "$L/ab.txt"
      env $vars timeout 60 $B/ftchat bench speed --model $Q4L --device cuda --ctx-size 8192 --depths 0,4096 \
        --dtypes fp8_e4m3 --prefill 512 --decode 128 >>"$L/ab.txt" 2>&1
    done
  done
  env $NEWPATHS FTCHAT_PROFILE=1 timeout 60 $B/ftchat bench speed --model $Q4L --device cuda --ctx-size 4096 --depths 0 \
    --dtypes fp8_e4m3 --prefill 512 --decode 64 >"$L/profile_new.txt" 2>&1
  cat "$L/ab.txt"
  stamp "8 GiB plans of the NVFP4 file, $CTX tokens"
  for kv in fp8_e4m3 bf16; do
    timeout 60 $B/ftchat bench capacity --model $NV --device cuda --gpu-memory 8GiB --ctx-size $CTX --kv-cache-dtype $kv 2>&1 |
      tee "$L/capacity_$kv.txt"
  done
  scripts/peer_llamacpp.sh status | tail -3
  tar -czf "$OUT/tests-logs.tgz" -C /tmp/out tests
  ;;
offload)
  L=/tmp/out/offload; mkdir -p $L
  # fp8's automatic plan at the full context; bf16 runs at the same split
  # (its pool then holds fewer tokens: bench capacity says how many).
  ncmoe=$(grep -oE -- '--n-cpu-moe [0-9]+' /tmp/out/tests/capacity_fp8_e4m3.txt | grep -oE '[0-9]+' | head -1)
  ncmoe=${NCMOE:-${ncmoe:-32}}
  echo "split: --n-cpu-moe $ncmoe" | tee "$L/split.txt"
  stamp "ftchat fp8, auto, depths 4096,32768,$LONGD (the 128K prompt)" | tee -a "$L/speed.txt"
  env $NEWPATHS timeout 250 $B/ftchat bench speed --model $NV --device cuda --gpu-memory 8GiB --ctx-size $CTX --n-cpu-moe "$ncmoe" \
    --depths "4096,32768,$LONGD" --dtypes fp8_e4m3 --prefill 512 --decode 64 >>"$L/speed.txt" 2>&1 || echo "rc=$?" >>"$L/speed.txt"
  cat "$L/speed.txt"
  # bf16 at the same split: as deep as its pool goes. Planned here from the
  # GGUF header (bench capacity, no GPU needed): fp8's plan for 131,072 tokens
  # is --n-cpu-moe 32 and leaves 1.52 GiB of pool = 156,928 fp8 tokens or
  # 79,680 bf16 ones, so bf16 runs with a 78,848-token context.
  stamp "ftchat bf16, auto" | tee -a "$L/speed.txt"
  env $NEWPATHS timeout 130 $B/ftchat bench speed --model $NV --device cuda --gpu-memory 8GiB --ctx-size "${BF16_CTX:-78848}" --n-cpu-moe "$ncmoe" \
    --depths "${BF16_DEPTHS:-4096,32768,78272}" --dtypes bf16 --prefill 512 --decode 64 >>"$L/speed.txt" 2>&1 || echo "rc=$?" >>"$L/speed.txt"
  tail -n 5 "$L/speed.txt"
  llama() { # $1 = KV type: llama-bench with the same split, depths 0 and 4096
    stamp "llama-bench --n-cpu-moe $ncmoe, $1 KV" | tee -a "$L/llama.md"
    timeout "${T_LLAMA:-90}" $LB -m $NV -ngl 99 -fa 1 -p 512 -n 64 -r 1 -d 0,4096 -ctk $1 -ctv $1 --n-cpu-moe "$ncmoe" -o md \
      >>"$L/llama.md" 2>"$L/llama-$1.err" || { echo "rc=$?"; tail -5 "$L/llama-$1.err"; } | tee -a "$L/llama.md"
  }
  if wait_llama 20; then llama f16; else echo "llama.cpp build not ready"; tail -5 "$WORK/detached.log"; fi
  for run in ${RUNS:-split cpu}; do
    stamp "ftchat fp8, --expert-run $run, depth 0" | tee -a "$L/speed.txt"
    env $NEWPATHS timeout 60 $B/ftchat bench speed --model $NV --device cuda --gpu-memory 8GiB --ctx-size 8192 --n-cpu-moe "$ncmoe" \
      --expert-run "$run" --depths 0 --dtypes fp8_e4m3 --prefill 512 --decode 64 >>"$L/speed.txt" 2>&1 || echo "rc=$?" >>"$L/speed.txt"
    tail -n 2 "$L/speed.txt"
  done
  [ -x "$LB" ] && llama q8_0
  cat "$L/llama.md"
  tar -czf "$OUT/offload-logs.tgz" -C /tmp/out offload
  ;;
fullgpu)
  L=/tmp/out/fullgpu; mkdir -p $L
  HF=/tmp/q36-nvfp4-mixed
  ( rm -rf $HF; /usr/bin/time -v $B/ftchat dev gen-hf --preset qwen3.6-35b-a3b --quant nvfp4-mixed -o $HF ) >"$L/gen_hf.txt" 2>&1 &
  stamp "Intel host CPU, fp8 vs bf16 decode (SmolLM2 shape; the HF directory is written meanwhile)"
  $B/ftchat dev gen-model --preset smollm2-135m --type Q4_1 -o /tmp/s.gguf >/dev/null 2>&1
  grep -m1 'model name' /proc/cpuinfo | tee "$L/intelcpu.txt"
  for r in 1 2 3; do
    order=fp8_e4m3,bf16; [ $r = 2 ] && order=bf16,fp8_e4m3
    timeout 50 $B/ftchat bench speed --model /tmp/s.gguf --device cpu --depths 1024,4096 --prefill 256 --decode 32 --dtypes $order 2>&1 |
      grep -vE "…|^$" | tee -a "$L/intelcpu.txt"
  done
  wait
  stamp "ftchat full GPU, NVFP4 35B" | tee -a "$L/speed.txt"
  env $NEWPATHS timeout 170 $B/ftchat bench speed --model $NV --device cuda --ctx-size $CTX \
    --depths "0,4096,32768,$LONGD" --dtypes fp8_e4m3,bf16 --prefill 512 --decode 128 >>"$L/speed.txt" 2>&1 || echo "rc=$?" >>"$L/speed.txt"
  cat "$L/speed.txt"
  stamp "llama-bench full GPU, NVFP4 35B" | tee -a "$L/llama.md"
  timeout "${T_LLAMA:-150}" $LB -m $NV -ngl 99 -fa 1 -p 512 -n 128 -r 1 -d "0,4096,32768,$LONGD" -ctk f16 -ctv f16 -o md \
    >>"$L/llama.md" 2>"$L/llama.err" || { echo "rc=$?"; tail -5 "$L/llama.err"; } | tee -a "$L/llama.md"
  cat "$L/llama.md"
  stamp "the 35B NVFP4 MIXED HF directory under --gpu-memory 8GiB (load time, peak RSS)"
  tail -n 25 "$L/gen_hf.txt" | grep -E 'Elapsed|Maximum resident|Exit'; du -sh $HF
  ( cd /tmp && env $NEWPATHS /usr/bin/time -v timeout 120 $B/ftchat bench speed --model $HF --device cuda --gpu-memory 8GiB --ctx-size 8192 \
      --depths 0 --dtypes fp8_e4m3 --prefill 512 --decode 32 ) >"$L/hf_load.txt" 2>&1
  grep -vE '…' "$L/hf_load.txt" | grep -E 'plan|GPU:|fp8|Elapsed|Maximum resident|Exit|rror' | head -20
  tar -czf "$OUT/fullgpu-logs.tgz" -C /tmp/out fullgpu
  ;;
verify)
  # A fresh machine after the first three calls: the defaults flipped by
  # them (new kernels on), the fixed tests, and the serve load test on the
  # dense Llama-3.1-8B shape (issue 14's batching target).
  L=/tmp/out/verify; mkdir -p $L $B
  for f in .gpu/*.xz; do n=$(basename "${f%.xz}"); xz -dc "$f" >"$B/$n" && chmod +x "$B/$n"; done
  ( $B/ftchat dev gen-model --preset llama-3.1-8b --type Q4_K -o /tmp/l8b.gguf; echo done ) >/tmp/gen8b.log 2>&1 &
  stamp "gpu tests at the new defaults"
  (cd gpu && FTCHAT_REQUIRE_GPU=1 timeout "${T_GPU:-150}" $B/gpu.test -test.v -test.run \
    'TestMoE|TestNorms|TestRMSNorm|TestAddRMSNorm|TestAttention|TestFA|TestHostExpert|TestHostMoEMatchesCPU|TestDeviceSampling|TestSampleKernelModule|TestTopKPasses|TestFP8|TestHybrid' \
    -test.skip 'TestPTX' -test.timeout 300s) >"$L/gpu_test.log" 2>&1
  echo "gpu tests rc=$?"; grep -E '^(--- FAIL|FAIL|ok|PASS|panic)' "$L/gpu_test.log" | head -30
  grep -E '^--- (PASS|FAIL|SKIP)' "$L/gpu_test.log" | awk '{print $2, $3}' | tr '\n' ' '; echo
  stamp "engine GPU tests at the new defaults"
  (cd engine && FTCHAT_REQUIRE_GPU=1 timeout "${T_ENGINE:-120}" $B/engine.test -test.v -test.run 'GPU|Placement' -test.timeout 300s) \
    >"$L/engine_test.log" 2>&1
  echo "engine tests rc=$?"; grep -E '^--- (PASS|FAIL|SKIP)' "$L/engine_test.log" | awk '{print $2, $3}' | tr '\n' ' '; echo
  for _ in $(seq 1 60); do grep -q '^done' /tmp/gen8b.log && break; sleep 2; done
  stamp "serve load test, Llama-3.1-8B shape"
  timeout "${LOAD_T:-170}" python3 scripts/loadtest.py --ftchat $B/ftchat --model /tmp/l8b.gguf --device cuda --max-tokens 64 \
    --kv-dtypes bf16,fp8_e4m3 --json "$L/loadtest.json" 2>&1 | tee "$L/loadtest.txt"
  tar -czf "$OUT/verify-logs.tgz" -C /tmp/out verify
  ;;
moe30)
  # The Qwen3-30B-A3B shape (48 attention layers: where attn_fa matters most)
  # at the new defaults, full GPU, depths 0 to 128K. No llama.cpp build in
  # this call: compare with the llama-bench rows of an earlier run, named.
  L=/tmp/out/moe30; mkdir -p $L $B
  [ -x $B/ftchat ] || { xz -dc .gpu/ftchat.xz >$B/ftchat && chmod +x $B/ftchat; }
  M=/tmp/qwen3-30b-a3b.gguf
  [ -s $M ] || $B/ftchat dev gen-model --preset qwen3-30b-a3b --type Q4_K -o $M >"$L/gen.log" 2>&1
  stamp "ftchat bench speed, qwen3-30b-a3b Q4_K" | tee "$L/speed.txt"
  timeout "${T_BENCH:-110}" $B/ftchat bench speed --model $M --device cuda --ctx-size 40960 --depths 0,4096,32768 \
    --dtypes fp8_e4m3,bf16 --prefill 512 --decode 128 2>&1 | grep -v '…' | tee -a "$L/speed.txt"
  timeout "${T_LONG:-110}" $B/ftchat bench speed --model $M --device cuda --ctx-size $CTX --depths $LONGD \
    --dtypes fp8_e4m3 --prefill 512 --decode 128 2>&1 | grep -v '…' | tee -a "$L/speed.txt"
  cp "$L/speed.txt" "$OUT/moe30_speed.txt"
  ;;
*)
  echo "usage: $0 tests|offload|fullgpu|verify|moe30" >&2
  exit 2
  ;;
esac
