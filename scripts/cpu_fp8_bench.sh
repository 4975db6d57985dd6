#!/usr/bin/env bash
# Records CPU fp8_e4m3 vs bf16 KV decode speed on this machine, the
# measurement issue 15 asks for on an Intel Xeon (docs/benchmarks.md, "CPU
# fp8 vs bf16"): the attention microbenchmark, then end-to-end decode at
# depths 1,024 and 4,096 on the default model, RUNS times with the dtype
# order alternating, and the median fp8/bf16 decode ratio per depth
# against the target (>= 0.9). Run it on an otherwise idle machine.
#
# Usage: scripts/cpu_fp8_bench.sh [OUTDIR]      (default /tmp/ftchat-cpu-fp8)
# Environment:
#   MODEL    GGUF (default $FTCHAT_TEST_MODEL, else the cached SmolLM2-135M-Instruct.Q4_1.gguf,
#            fetched with `ftchat pull smollm2` when missing)
#   RUNS     end-to-end runs (default 3)
#   THREADS  --threads for the end-to-end runs (default 0: all cores)
#   DEPTHS   context depths (default 1024,4096, the issue's)
#   BENCHTIME  -test.benchtime of the microbenchmarks (default 1s)
# Writes OUTDIR/report.md (machine, commit, commands, raw output, summary)
# and prints it.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/ftchat-cpu-fp8}
RUNS=${RUNS:-3}
THREADS=${THREADS:-0}
DEPTHS=${DEPTHS:-1024,4096}
BENCHTIME=${BENCHTIME:-1s}
mkdir -p "$out"
report=$out/report.md

cpu=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
vendor=$(grep -m1 '^vendor_id' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
family=$(grep -m1 '^cpu family' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
cpumodel=$(grep -m1 '^model\s*:' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
simd=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -xE 'avx2|fma|f16c|avx512f|avx512bw|avx512_bf16|amx_bf16' | tr '\n' ' ')
if [ "$vendor" != GenuineIntel ]; then
	echo "note: this CPU is $vendor ($cpu), not Intel; recording it anyway" >&2
fi

echo "building ftchat and the kvcache benchmark…" >&2
go build -o "$out/ftchat" .
go test -c -o "$out/kvcache.test" ./engine/kvcache

MODEL=${MODEL:-${FTCHAT_TEST_MODEL:-${XDG_CACHE_HOME:-$HOME/.cache}/ftchat/models/SmolLM2-135M-Instruct.Q4_1.gguf}}
if [ ! -f "$MODEL" ]; then
	MODEL=$("$out/ftchat" pull smollm2)
fi

{
	echo "# CPU fp8_e4m3 vs bf16 KV decode"
	echo
	echo "- date: $(date -u +%Y-%m-%dT%H:%MZ)"
	echo "- commit: $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (with local changes)')"
	echo "- CPU: \`$cpu\` ($vendor, family $family model $cpumodel), $(nproc) logical CPUs; SIMD: $simd"
	echo "- load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "- $(go version)"
	echo "- model: $MODEL"
	echo
	echo "## AttendDecode4K and DecodeFP8 (engine/kvcache, 3 runs)"
	echo
	echo '```'
	echo "kvcache.test -test.run '^\$' -test.bench 'AttendDecode4K|DecodeFP8' -test.benchtime $BENCHTIME -test.count 3"
} >"$report"
echo "microbenchmarks…" >&2
(cd engine/kvcache && "$out/kvcache.test" -test.run '^$' -test.bench 'AttendDecode4K|DecodeFP8' -test.benchtime "$BENCHTIME" -test.count 3) | tee -a "$report" >&2
{
	echo '```'
	echo
	echo "## End to end, $RUNS runs"
	echo
	echo '```'
} >>"$report"
: >"$out/speed.txt"
for i in $(seq 1 "$RUNS"); do
	order=fp8_e4m3,bf16
	if [ $((i % 2)) -eq 0 ]; then order=bf16,fp8_e4m3; fi
	cmd=("$out/ftchat" bench speed --model "$MODEL" --device cpu --threads "$THREADS" --depths "$DEPTHS" --prefill 256 --decode 32 --dtypes "$order")
	echo "run $i/$RUNS: ${cmd[*]}" >&2
	echo "# run $i: ${cmd[*]} (load $(cut -d' ' -f1 /proc/loadavg))" >>"$report"
	"${cmd[@]}" | tee -a "$report" | awk -v run="$i" '$1 ~ /^(bf16|fp8_e4m3)$/ {print run, $1, $2, $3, $4}' >>"$out/speed.txt"
done
{
	echo '```'
	echo
	echo "## Summary: median decode tok/s over the runs"
	echo
	echo "| depth | bf16 | fp8_e4m3 | fp8 / bf16 | target >= 0.9 |"
	echo "|---|---|---|---|---|"
	for depth in ${DEPTHS//,/ }; do
		med() { awk -v d="$depth" -v k="$1" '$2 == k && $3 == d {print $5}' "$out/speed.txt" | sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
		b=$(med bf16)
		f=$(med fp8_e4m3)
		awk -v d="$depth" -v b="$b" -v f="$f" 'BEGIN {r = (b > 0) ? f / b : 0; printf "| %d | %.1f | %.1f | %.2f | %s |\n", d, b, f, r, (r >= 0.9 ? "met" : "missed")}'
	done
	echo
	echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
} >>"$report"
cat "$report"
