#!/usr/bin/env bash
# Runs every fuzz target in the module (each `func FuzzXxx` in a _test.go
# file) for FUZZTIME (default 10s) each. Inputs that fail are written by go
# test under the package's testdata/fuzz/ and become regression seeds.
#   FUZZTIME=10m FUZZFLAGS=-parallel=1 scripts/fuzz.sh     # the long runs
#   scripts/fuzz.sh FuzzFromJSON                           # one target
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
time=${FUZZTIME:-10s}
# go test minimizes each new interesting input for up to 60 s by default,
# which stalls targets with large seeds (FuzzOpen, FuzzLoadModel) for most
# of a short run; crashers are still minimized within this bound.
minimize=${FUZZMINIMIZETIME:-5s}
# -timeout 0: go test's default 10m timeout would otherwise end a 10m
# run with "context deadline exceeded"; -fuzztime bounds the run.
only=${1:-}
status=0
while IFS=: read -r file name; do
  [ -n "$only" ] && [ "$name" != "$only" ] && continue
  pkg=./$(dirname "$file")
  echo "== $name ($pkg, $time)"
  # shellcheck disable=SC2086
  if ! CGO_ENABLED=0 $GO test -run '^$' -fuzz "^${name}\$" -timeout 0 -fuzztime "$time" -fuzzminimizetime "$minimize" ${FUZZFLAGS:-} "$pkg"; then
    status=1
  fi
done < <(grep -rHo --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]+' . | sed -e 's|^\./||' -e 's|:func |:|' | sort -u)
exit $status
