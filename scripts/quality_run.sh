#!/usr/bin/env bash
# Runs the KV-cache quality measurements of docs/kv-cache.md §10 on the CPU
# backend: static-scale calibration, then perplexity / KL divergence / top-1
# agreement of fp8_e4m3, fp8_e5m2 and fp8_e4m3 with static scales against a
# bf16 cache on English prose and on Go source, then the needle table.
#
# Usage: scripts/quality_texts.sh DIR && scripts/quality_run.sh DIR OUTDIR
# Environment:
#   FTCHAT   the ftchat binary (default: go run .)
#   MODEL    GGUF (default $FTCHAT_TEST_MODEL or the cached SmolLM2-135M-Instruct.Q4_1.gguf)
#   WINDOW, STRIDE          sliding window (default 512, 384)
#   PROSE_TOKENS, CODE_TOKENS, CALIB_TOKENS   text prefixes used (default 20736, 20736, 8192)
#   NEEDLE_LENGTHS          haystack sizes (default 1024,4096,7936)
#   STEPS                   which steps to run (default "calib prose code needle")
#   VARIANTS                dtypes compared with bf16 (default fp8_e4m3:dynamic,fp8_e5m2:dynamic,fp8_e4m3:static)
set -euo pipefail
cd "$(dirname "$0")/.."
texts=${1:-/tmp/ftchat-quality}
out=${2:-$texts/out}
mkdir -p "$out"
FTCHAT=${FTCHAT:-go run .}
MODEL=${MODEL:-${FTCHAT_TEST_MODEL:-${XDG_CACHE_HOME:-$HOME/.cache}/ftchat/models/SmolLM2-135M-Instruct.Q4_1.gguf}}
WINDOW=${WINDOW:-512}
STRIDE=${STRIDE:-384}
PROSE_TOKENS=${PROSE_TOKENS:-20736}
CODE_TOKENS=${CODE_TOKENS:-20736}
CALIB_TOKENS=${CALIB_TOKENS:-8192}
NEEDLE_LENGTHS=${NEEDLE_LENGTHS:-1024,4096,7936}
STEPS=${STEPS:-calib prose code needle}
scales=$out/scales_e4m3.json
variants=${VARIANTS:-fp8_e4m3:dynamic,fp8_e5m2:dynamic,fp8_e4m3:static}
common=(--model "$MODEL" --device cpu)

run() { echo "+ $*" | tee -a "$out/commands.txt"; "$@"; }

for step in $STEPS; do
	case $step in
	calib)
		# Calibrated on the Go specification, evaluated on other texts.
		run $FTCHAT calibrate "${common[@]}" --text "$texts/calib.txt" --max-text-tokens "$CALIB_TOKENS" \
			--window "$WINDOW" -o "$scales" 2>"$out/calib.log"
		;;
	prose | code)
		n=$PROSE_TOKENS
		[ "$step" = code ] && n=$CODE_TOKENS
		run $FTCHAT bench quality "${common[@]}" --text "$texts/$step.txt" --max-text-tokens "$n" \
			--window "$WINDOW" --stride "$STRIDE" --kv-cache-dtype "$variants" --kv-scales "$scales" \
			--json-file "$out/quality_$step.json" 2>"$out/quality_$step.log" | tee "$out/quality_$step.txt"
		;;
	needle)
		run $FTCHAT bench needle "${common[@]}" --text "$texts/prose.txt" --lengths "$NEEDLE_LENGTHS" \
			--depths 0.1,0.5,0.9 --kv-cache-dtype "$variants" --kv-scales "$scales" \
			--json-file "$out/needle.json" 2>"$out/needle.log" | tee "$out/needle.txt"
		;;
	*)
		echo "unknown step $step (calib, prose, code, needle)" >&2
		exit 2
		;;
	esac
done
