# Helpers the GPU session scripts (scripts/gpu_session5.sh .. 13) source on
# the device machine. $B is where the bundle's binaries go.

stamp() { echo "[$(date -u +%T)] $*"; }

# unpack puts .gpu/bundle.tar.xz's binaries (or an older bundle's per-binary
# .gpu/*.xz) into $B.
unpack() {
  mkdir -p "$B"
  if [ -f .gpu/bundle.tar.xz ]; then xz -dc .gpu/bundle.tar.xz | tar -C "$B" -xf - && chmod +x "$B"/*; return; fi
  for f in .gpu/*.xz; do n=$(basename "${f%.xz}"); xz -dc "$f" >"$B/$n" && chmod +x "$B/$n"; done
}

# gen PRESET FILE: a random-weight Q4_K model of that shape from the
# bundle's ftchat, unless FILE is there already (it survives back-to-back
# calls under /tmp).
gen() { [ -s "$2" ] || "$B/ftchat" dev gen-model --preset "$1" --type Q4_K -o "$2" >/dev/null 2>&1; }

# gtests DIR BIN REGEX LOG [ENV=VAL]: Go tests by name from $B/BIN in DIR
# with FTCHAT_REQUIRE_GPU=1 (timeout T_TEST, default 200 s); prints the
# exit code, the failures and one line of verdicts.
gtests() {
  (cd "$1" && env FTCHAT_TEST_MODEL=/tmp/s.gguf FTCHAT_REQUIRE_GPU=1 ${5:-} timeout "${T_TEST:-200}" "$B/$2" -test.v \
    -test.run "$3" -test.timeout $((${T_TEST:-200} + 100))s) >"$4" 2>&1
  echo "$2 rc=$?"; grep -E '^(--- FAIL|FAIL|panic)' "$4" | head -20
  grep -E '^--- (PASS|FAIL|SKIP)' "$4" | awk '{print $2, $3}' | tr '\n' ' '; echo
}

# find_ncu prints the Nsight Compute binary of the machine (PATH, the
# Nsight install or the CUDA toolkit), nothing when there is none.
find_ncu() {
  command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda*/bin/ncu 2>/dev/null | head -1
}

# ptxdir NAME: the PTX variant directory .gpu/ptxvar/NAME ('' = the committed PTX).
ptxdir() { [ -n "${1:-}" ] && echo "$PWD/.gpu/ptxvar/$1"; }
# rows TAG VARIANT [ENV=VAL...]: the one-layer-plus-head rows bench
# (BenchmarkMatMulDecodeRows, grouped) into $L/rows_TAG.txt, its lines
# prefixed with TAG.
rows() { # tag, PTX variant ('' = committed), env... (ROWS_N: the row counts; the env may set other FTCHAT_ROWS_MODES)
  local tag=$1 v=$2; shift 2
  (cd gpu && env FTCHAT_PTX_DIR="$(ptxdir "$v")" FTCHAT_ROWS_MODES=group "$@" timeout 45 $B/gpu.test -test.run '^$' \
    -test.bench "MatMulDecodeRows/n=(${ROWS_N:-1|2|8|16|32})\$" -test.benchtime 20x) >$L/rows_$tag.txt 2>&1
  grep -E '^Benchmark' $L/rows_$tag.txt | sed -E "s/^/$tag /; s/ +[0-9]+ ns\/op//"
}

# speed TAG TIMEOUT ENV... -- ARGS: `ftchat bench speed --device cuda ARGS`
# with ENV into $L/speed_TAG.txt; prints the exit code and the result rows.
speed() {
  local tag=$1 to=$2; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  stamp "bench speed $tag (${envs[*]})"
  env "${envs[@]}" timeout "$to" $B/ftchat bench speed --device cuda "$@" >$L/speed_$tag.txt 2>&1
  echo "rc=$?"; grep -E '^(fp8|bf16)' $L/speed_$tag.txt
}

# llamabench FILE TAG DEPTHS KV...: llama-bench (-fa 1, pp512, tg128, REPS
# repetitions, default 2; LB_TIMEOUT seconds each, default 240) on FILE for
# each KV type, once the detached build of scripts/peer_llamacpp.sh is
# done (TRIES x 3 s), into $L/lb_TAG_KV.md.
llamabench() {
  local f=$1 tag=$2 depths=$3; shift 3
  local lb=/tmp/peer/llama.cpp/build/bin/llama-bench
  stamp "waiting for llama-bench"
  WORK=/tmp/peer TRIES=${TRIES:-60} scripts/peer_llamacpp.sh wait || { echo "no llama-bench"; tail -20 /tmp/peer/detached.log; return; }
  for kv in "$@"; do
    stamp "llama-bench $tag $kv"
    timeout "${LB_TIMEOUT:-240}" $lb -m $f -ngl 99 -fa 1 -p 512 -n 128 -r ${REPS:-2} -d $depths -ctk $kv -ctv $kv -o md >$L/lb_${tag}_$kv.md 2>$L/lb_${tag}_$kv.err
    echo "rc=$?"; cat $L/lb_${tag}_$kv.md
  done
}
