#!/usr/bin/env bash
# scripts/fuzz.sh — every fuzz target in dyad, one after another, FUZZTIME each.
#
#   scripts/fuzz.sh                        every target for 10s (CI: a step of scripts/test.sh)
#   FUZZTIME=10m scripts/fuzz.sh           long runs (make fuzz FUZZTIME=10m)
#   FUZZ_TARGETS='FuzzRPC FuzzLoad' scripts/fuzz.sh
#
# Go runs one -fuzz target per go test invocation, so each gets its own, with
# one worker (-parallel 1: the machines are shared, and the in-process node
# targets start a whole server per worker). The seed corpora and the inputs
# kept in testdata/fuzz already run as plain unit tests; here the fuzzer
# explores. An input that makes a target fail is written by Go into the
# package's testdata/fuzz/<target>/: commit it with the fix, so that it runs
# as a regression case in every plain `go test` from then on.
#
# The budget is a duration, not a count of executions, so that every target
# gets the same time whatever its speed. Go 1.26's fuzz coordinator can fail a
# duration-bounded run with a bare "context deadline exceeded" when the
# deadline races a busy worker (golang/go#75804, fixed in Go 1.27). A run that
# fails with exactly that and wrote no failing input (scripts/testsum
# fuzzrace decides) is retried, up to twice, and the log says so; any other
# failure counts at once. Every target runs even if an earlier one failed; the
# exit status is non-zero if any failed.
#
# Environment: FUZZTIME (a -fuzztime duration, default 10s), FUZZ_TARGETS
# (names; default all), FUZZ_EVENTS (append the go test -json events of the
# final attempt of each target to this file; scripts/test.sh), TESTSUM (a
# built scripts/testsum; built into .cache/bin otherwise).
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
export GOTOOLCHAIN=local

fuzztime=${FUZZTIME:-10s}
log() { echo "fuzz: $*"; }
if [[ -z ${TESTSUM:-} ]]; then
	mkdir -p .cache/bin
	go build -o .cache/bin/testsum ./scripts/testsum || exit 2
	TESTSUM=$PWD/.cache/bin/testsum
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Packages with fuzz targets, found without compiling every test binary.
mapfile -t pkgs < <(grep -rl --include='*_test.go' '^func Fuzz' internal cmd test 2>/dev/null | xargs -r -n1 dirname | sort -u)
failed=() ran=()
for dir in "${pkgs[@]}"; do
	pkg=./$dir
	for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz'); do
		if [[ -n ${FUZZ_TARGETS:-} && " $FUZZ_TARGETS " != *" $target "* ]]; then
			continue
		fi
		ran+=("$target")
		for attempt in 1 2 3; do
			log "$target ($pkg) for $fuzztime"
			go test -json -run '^$' -fuzz "^${target}\$" -fuzztime="$fuzztime" -parallel 1 "$pkg" 2>&1 |
				tee "$tmp/events" | "$TESTSUM" stream
			rc=${PIPESTATUS[0]}
			if ((rc == 0)); then
				break
			fi
			if ((attempt < 3)) && "$TESTSUM" fuzzrace "$tmp/events"; then
				log "$target: a bare 'context deadline exceeded' and no failing input: Go's fuzz coordinator race (golang/go#75804); retrying"
				continue
			fi
			failed+=("$target")
			break
		done
		if [[ -n ${FUZZ_EVENTS:-} ]]; then
			cat "$tmp/events" >>"$FUZZ_EVENTS"
		fi
	done
done
for want in ${FUZZ_TARGETS:-}; do
	if [[ " ${ran[*]} " != *" $want "* ]]; then
		log "FUZZ_TARGETS: no fuzz target named $want"
		failed+=("$want")
	fi
done
if ((${#failed[@]} > 0)); then
	log "${#ran[@]} targets run for $fuzztime each; failed: ${failed[*]}"
	exit 1
fi
log "${#ran[@]} targets run for $fuzztime each; none failed"
