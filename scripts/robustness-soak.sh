#!/usr/bin/env bash
# scripts/robustness-soak.sh — the long robustness soak (test/robustness).
#
#   scripts/robustness-soak.sh [CYCLES]     (default 100; or make robustness-soak)
#
# Runs the whole fault table of test/robustness again and again, each row on
# a fresh two-zone pair in network namespaces, until CYCLES fault cycles have
# run, checking every history with porcupine, every acknowledged write and
# every watch (see test/robustness/doc.go). Needs root and iproute2, like
# the two-zone tests. One JSON line per run goes to
# $DYAD_ROBUSTNESS_RESULTS (default .cache/robustness/soak-<date>.jsonl);
# the totals (runs, fault cycles, histories checked, operations,
# acknowledged writes and lost ones, watch events and problems) are the
# last "soak total" line. About 13 s per run, 1-2 cycles a run:
# 100 cycles took 18 minutes on a shared 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
export GOTOOLCHAIN=local
export DYAD_REQUIRE_PEERS=1

cycles="${1:-100}"
cache="${DYAD_CACHE:-.cache}"
mkdir -p "$cache/robustness" "$cache/bin"
cache=$(cd "$cache" && pwd) # absolute: the tests run in their package's directory
export DYAD_ROBUSTNESS_RESULTS="${DYAD_ROBUSTNESS_RESULTS:-$cache/robustness/soak-$(date -u +%Y%m%d-%H%M%S).jsonl}"
export DYAD_ROBUSTNESS_SOAK_CYCLES="$cycles"

echo "soak: building dyad with failpoints"
go build -tags failpoints -o "$cache/bin/dyad-failpoints" ./cmd/dyad
export DYAD_FAILPOINTS_BIN="$cache/bin/dyad-failpoints"

echo "soak: $cycles fault cycles; results in $DYAD_ROBUSTNESS_RESULTS"
set +e
go test -count=1 -timeout 12h -v -run '^TestSoak$' ./test/robustness 2>&1 | tee "${DYAD_ROBUSTNESS_RESULTS%.jsonl}.log" |
	grep -E '^(=== RUN|\s*--- (PASS|FAIL)|\s+(robustness|harness)_test.go:[0-9]+: (soak|result|total)|FAIL|ok )'
rc=${PIPESTATUS[0]}
set -e
exit "$rc"
