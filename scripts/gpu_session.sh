#!/usr/bin/env bash
# One device session's whole GPU run, in two calls of at most 10 minutes
# (files under /tmp survive between back-to-back calls while the machine is warm).
#
# Here (needs Go):   scripts/gpu_session.sh bundle
#   .gpu/ftchat, .gpu/gpu.test.gz, .gpu/engine.test.gz and .gpu-peer/llama.cpp.tar.xz
# There, call 1:     scripts/gpu_session.sh run1    (carry .gpu and .gpu-peer)
#   starts the llama.cpp build and the model generation detached, runs the
#   GPU-vs-CPU tests (hybrid ops, MoE, FP4 weights, whole models), then
#   `ftchat bench speed` and `bench capacity` on the generated files
# There, call 2:     scripts/gpu_session.sh run2
#   waits for the llama.cpp build and runs llama-bench on the same files
# Issue 12 (experts in host RAM under --gpu-memory 8GiB), two calls back to
# back after `bundle`: offload1 (tests, llama.cpp build, 35B-A3B file, ftchat
# auto plan, full-GPU decode with/without the pinned logits copy) and
# offload2 (llama-bench --n-cpu-moe on the same split, the mapped and
# streamed modes, the serve load test).
# Logs go to $OUT (default .gpu/out), one summary per call.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-.gpu/out}
PRESETS=${PRESETS:-qwen3-30b-a3b qwen3.6-35b-a3b}
DEPTHS=${DEPTHS:-0,4096,32768}
export WORK=${WORK:-/tmp/peer} PRESETS DEPTHS
mkdir -p "$OUT"
stamp() { echo "[$(date -u +%T)] $*"; }

case ${1:-} in
bundle)
  set -e
  BUNDLE="ftchat" scripts/gpu_bundle.sh
  flags=(-trimpath -ldflags='-s -w')
  CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go test -c "${flags[@]}" -o .gpu/gpu.test ./gpu/
  CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go test -c "${flags[@]}" -o .gpu/engine.test ./engine/
  # A call carries at most 64 MiB with the tree. The three binaries embed the
  # same gzip-compressed PTX, which xz cannot shrink alone: one tar under a
  # dictionary larger than a binary stores it once (~22 MB instead of ~52).
  rm -f .gpu/*.xz
  tar -C .gpu -cf - ftchat gpu.test engine.test | xz -T1 --lzma2=preset=6,dict=192MiB >.gpu/bundle.tar.xz
  rm -f .gpu/gpu.test .gpu/engine.test .gpu/ftchat
  [ -f .gpu-peer/llama.cpp.tar.xz ] || scripts/llamacpp_tarball.sh
  du -sh .gpu/* .gpu-peer/*
  ;;
run1)
  xz -dc .gpu/bundle.tar.xz | tar -C .gpu -xf -
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu_info.txt"
  date -u +%FT%TZ | tee -a "$OUT/gpu_info.txt"
  # The build takes CPU cores only; the GPU measurements below overlap it
  # (host-side launch work shares the CPU with the compiler: noted with the numbers).
  JOBS=${JOBS:-10} DETACH=1 scripts/peer_llamacpp.sh build
  mkdir -p "$WORK/out"
  (scripts/peer_llamacpp.sh models >"$WORK/out/models.txt" 2>&1; echo done >>"$WORK/out/models.txt") &
  stamp "gpu tests"
  (cd gpu && FTCHAT_REQUIRE_GPU=1 timeout 150 ../.gpu/gpu.test -test.run "${GPU_TESTS:-Hybrid|MoE|FP4|NVFP4|MXFP4|MatMul}" -test.timeout 300s) \
    >"$OUT/gpu_test.log" 2>&1
  echo "gpu tests rc=$?"; grep -E '^(--- FAIL|FAIL|ok|PASS|panic)' "$OUT/gpu_test.log" | head -30
  stamp "engine GPU tests"
  (cd engine && timeout 100 ../.gpu/engine.test -test.v -test.run "${ENGINE_TESTS:-GPU}" -test.timeout 300s) \
    >"$OUT/engine_test.log" 2>&1
  echo "engine tests rc=$?"; grep -E '^(--- |FAIL|ok|PASS|panic)' "$OUT/engine_test.log" | head -30
  stamp "waiting for models"
  while ! grep -q '^done' "$WORK/out/models.txt" 2>/dev/null; do sleep 2; done
  cat "$WORK/out/models.txt"
  : >"$OUT/ftchat_bench.txt"
  for p in $PRESETS; do
    stamp "ftchat bench speed $p" | tee -a "$OUT/ftchat_bench.txt"
    timeout "${BENCH_T:-150}" .gpu/ftchat bench speed --model "/tmp/$p.gguf" --device cuda --ctx-size 40960 \
      --depths "$DEPTHS" --dtypes bf16,fp8_e4m3 --prefill 512 --decode 128 >>"$OUT/ftchat_bench.txt" 2>&1 ||
      echo "ftchat bench $p: rc=$?" >>"$OUT/ftchat_bench.txt"
  done
  stamp "bench capacity" | tee -a "$OUT/ftchat_bench.txt"
  .gpu/ftchat bench capacity --model /tmp/qwen3.6-35b-a3b.gguf --device cuda --gpu-memory 8GiB >>"$OUT/ftchat_bench.txt" 2>&1
  cat "$OUT/ftchat_bench.txt"
  scripts/peer_llamacpp.sh status | tail -5
  ;;
run2)
  stamp "waiting for the llama.cpp build"
  scripts/peer_llamacpp.sh wait
  tail -3 "$WORK/detached.log"
  REPS=${REPS:-2} FTCHAT_BENCH=0 OUT="$OUT" scripts/peer_llamacpp.sh bench
  ;;
offload1)
  # Issue 12's run, call 1: llama.cpp build (detached), the 35B-A3B-shaped
  # file, the GPU tests of host experts / NVFP4 MoE / placement / whole
  # models, then ftchat under --gpu-memory 8GiB (auto) and the full-GPU
  # decode with and without the pinned logits copy.
  L=/tmp/out/offload1; mkdir -p $L # many logs: packed into one file of $OUT at the end
  xz -dc .gpu/bundle.tar.xz | tar -C .gpu -xf -
  nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv | tee "$L/gpu_info.txt"
  date -u +%FT%TZ | tee -a "$L/gpu_info.txt"
  JOBS=${JOBS:-12} DETACH=1 scripts/peer_llamacpp.sh build
  model=/tmp/qwen3.6-35b-a3b-Q4_K.gguf
  ( [ -s $model ] || .gpu/ftchat dev gen-model --preset qwen3.6-35b-a3b --type Q4_K -o $model >/tmp/gen35.log 2>&1
    echo done >>/tmp/gen35.log ) &
  stamp "gpu tests"
  (cd gpu && FTCHAT_REQUIRE_GPU=1 timeout 120 ../.gpu/gpu.test -test.v -test.run "${GPU_TESTS:-HostExpert|HostMoE|NVFP4|MoE|Placement|Gemvr|Pinned|Profile|MatMul}" -test.timeout 300s) \
    >"$L/gpu_test.log" 2>&1
  echo "gpu tests rc=$?"; grep -E '^(--- FAIL|FAIL|ok|PASS|panic)' "$L/gpu_test.log" | head -30
  stamp "engine GPU tests"
  (cd engine && timeout 140 ../.gpu/engine.test -test.v -test.run "${ENGINE_TESTS:-GPU|Placement}" -test.timeout 300s) \
    >"$L/engine_test.log" 2>&1
  echo "engine tests rc=$?"; grep -E '^(--- |FAIL|ok|PASS|panic)|greedy tokens identical' "$L/engine_test.log" | head -40
  stamp "waiting for the model"
  while ! grep -q '^done' /tmp/gen35.log 2>/dev/null; do sleep 2; done
  tail -2 /tmp/gen35.log
  REPS=1 RUNS="${RUNS1:-auto}" T_BENCH=170 OUT="$L/offload" scripts/gpu_offload.sh .gpu/ftchat $model
  for pin in 1 0; do
    stamp "full GPU, FTCHAT_PINNED_D2H=$pin" | tee -a "$L/fullgpu.txt"
    FTCHAT_PINNED_D2H=$pin timeout 60 .gpu/ftchat bench speed --model $model --device cuda --ctx-size 8192 \
      --depths 0 --dtypes fp8_e4m3 --prefill 512 --decode 128 >>"$L/fullgpu.txt" 2>&1
  done
  cat "$L/fullgpu.txt"
  scripts/peer_llamacpp.sh status | tail -3
  tar -czf "$OUT/offload1-logs.tgz" -C /tmp/out offload1
  ;;
offload2)
  # Call 2 (back to back): llama-bench with --n-cpu-moe on the same file and
  # budget split, the other host-expert modes, and the serve load test.
  L=/tmp/out/offload2; mkdir -p $L
  model=/tmp/qwen3.6-35b-a3b-Q4_K.gguf
  stamp "waiting for the llama.cpp build"
  scripts/peer_llamacpp.sh wait
  tail -2 "$WORK/detached.log"
  lb=$WORK/llama.cpp/build/bin/llama-bench
  stamp "llama-bench, all on the GPU"
  timeout 120 $lb -m $model -ngl 99 -fa 1 -p 512 -n 128 -r 1 -d 0,4096 -ctk f16 -ctv f16 -o md 2>/dev/null | tee "$L/llama_fullgpu.md"
  REPS=1 RUNS="${RUNS2:-mapped stream}" T_BENCH=150 LLAMA_BENCH=$lb LLAMA_REPS=1 LLAMA_NCMOE="${LLAMA_NCMOE:-}" \
    OUT="$L/offload2" scripts/gpu_offload.sh .gpu/ftchat $model
  stamp "serve load test"
  timeout 200 python3 scripts/loadtest.py --ftchat .gpu/ftchat --model $model --device cuda --max-tokens 64 \
    --kv-dtypes bf16,fp8_e4m3 --json "$L/loadtest.json" 2>&1 | tee "$L/loadtest.txt"
  tar -czf "$OUT/offload2-logs.tgz" -C /tmp/out offload2
  ;;
serveload)
  # The serve load test on the GPU (issue 14): concurrency 1..16 against
  # `ftchat serve` with a Qwen3.6-35B-A3B-shaped 4-block hybrid MoE (real
  # block dims, state slots per sequence), bf16 vs fp8 KV; plus the NVFP4
  # whole-model test.
  for f in .gpu/ftchat.xz .gpu/gpu.test.xz; do xz -dc "$f" >"${f%.xz}" && chmod +x "${f%.xz}"; done
  model=/tmp/qwen3.6-35b-a3b-4l.gguf
  [ -s $model ] || .gpu/ftchat dev gen-model --preset qwen3.6-35b-a3b-4l --type Q4_K -o $model >/tmp/gen4l.log 2>&1 &
  (cd gpu && FTCHAT_REQUIRE_GPU=1 timeout 60 ../.gpu/gpu.test -test.v -test.run 'NVFP4ModelGPUvsCPU' -test.timeout 120s) 2>&1 |
    grep -E '^(--- |    --- |FAIL|ok|PASS)|hybrid prefill|> 3e-2' | head -20
  wait
  timeout "${LOAD_T:-170}" python3 scripts/loadtest.py --ftchat .gpu/ftchat --model $model --device cuda --max-tokens 64 \
    --kv-dtypes bf16,fp8_e4m3 --json "$OUT/loadtest.json" 2>&1 | tee "$OUT/loadtest.txt"
  ;;
intelcpu)
  # The GPU machine's host is an Intel Xeon (AVX-512): CPU fp8 vs bf16 KV
  # decode at depths 1024 and 4096 (issue 15), on the SmolLM2-135M shape
  # written by gen-model (the real file is not carried), 3 runs with the
  # dtype order alternating.
  xz -dc .gpu/ftchat.xz >/tmp/ft && chmod +x /tmp/ft
  grep -m1 'model name' /proc/cpuinfo; grep -m1 -o 'avx512f' /proc/cpuinfo; nproc
  /tmp/ft dev gen-model --preset smollm2-135m --type Q4_1 -o /tmp/s.gguf >/dev/null 2>&1
  for r in 1 2 3; do
    order=fp8_e4m3,bf16; [ $r = 2 ] && order=bf16,fp8_e4m3
    timeout 50 /tmp/ft bench speed --model /tmp/s.gguf --device cpu --depths 1024,4096 --prefill 256 --decode 32 --dtypes $order 2>&1 | grep -vE "…|^$"
  done
  ;;
*)
  echo "usage: $0 bundle|run1|run2|offload1|offload2|serveload|intelcpu" >&2
  exit 2
  ;;
esac
