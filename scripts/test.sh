#!/usr/bin/env bash
# scripts/test.sh — dyad's whole test suite, exactly as CI runs it.
#
# Steps, in order (DYAD_TEST_STEPS selects some, e.g. "unit,fuzz"):
#   setup       Debian packages (scripts/setup.sh)
#   peers       real etcd/etcdctl/etcdutl 3.5 and 3.6 from the Go module
#               proxy into .cache/peers (scripts/peers.sh)
#   k8s         kube-apiserver, kube-controller-manager, kube-scheduler and
#               kwok for test/e2e into .cache/k8s (scripts/k8s.sh; about 10
#               minutes on a clean cache, nothing once built; built before any
#               test so that it never competes with timing-sensitive tests)
#   vet         go vet, also with -tags failpoints
#   build       dyad into .cache/bin/dyad
#   unit        unit tests with the race detector (internal/, cmd/, scripts/)
#   fuzz        every fuzz target for FUZZTIME (default 10s) each (scripts/fuzz.sh)
#   failpoints  internal/failpoint's tests in the failpoints build
#   suites      the peer suites in test/: apiserver storage conformance,
#               etcdctl, clientv3 concurrency, snapshot migration and
#               differential tests against real etcd, power cuts, the
#               two-zone tests, ...
#   robustness  every row of the robustness fault table once (test/robustness;
#               the long soak is scripts/robustness-soak.sh)
#   e2e         the Kubernetes end-to-end smoke (test/e2e: a real control
#               plane per zone, 100 pods, loss of the primary's zone), last,
#               so that its CPU load does not skew the others' failover timings
#
# Every step runs even when an earlier one failed (a step that needs what a
# failed one should have built fails on its own, visibly). The tests run
# under `go test -json`, read by scripts/testsum, which prints one line per
# package, every failure with its output and every skip with its reason;
# the summary at the end gives each step's wall time and its tests passed,
# failed and skipped, and the last line totals them: "N passed, N failed,
# N skipped". The exit status is non-zero if anything failed.
#
# Missing prerequisites are failures here, never skips (DYAD_REQUIRE_PEERS=1,
# internal/testenv): a missing peer binary, root, FUSE, openssl, the DDS
# Security plugins. The only skips allowed are listed, with their reasons,
# in test/skips.txt; any other skip fails the run.
#
# Environment:
#   DYAD_TEST_STEPS   comma- or space-separated steps to run (default: all)
#   FUZZTIME          time per fuzz target (default 10s; scripts/fuzz.sh)
#   DYAD_CACHE        cache root for peers and k8s (default .cache)
#   DYAD_TEST_OUT     where the events and the summary go (default .cache/test)
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
export GOTOOLCHAIN=local
export DYAD_REQUIRE_PEERS=1

all_steps=(setup peers k8s vet build unit fuzz failpoints suites robustness e2e)
log() { echo "test: $*"; }
die() { echo "test: ERROR: $*" >&2; exit 2; }

selected=" ${DYAD_TEST_STEPS:-${all_steps[*]}} "
selected=${selected//,/ }
for s in $selected; do
	[[ " ${all_steps[*]} " == *" $s "* ]] || die "DYAD_TEST_STEPS: no step named '$s' (steps: ${all_steps[*]})"
done

out="${DYAD_TEST_OUT:-.cache/test}"
rm -rf "$out"
mkdir -p "$out" .cache/bin
out=$(cd "$out" && pwd)
steps_file="$out/steps.tsv"
: >"$steps_file"

# The summariser itself: nothing can be reported without it.
go build -o .cache/bin/testsum ./scripts/testsum || die "cannot build scripts/testsum"
testsum="$PWD/.cache/bin/testsum"
export TESTSUM="$testsum"
export DYAD_PEERS_BIN="${DYAD_PEERS_BIN:-${DYAD_CACHE:-$PWD/.cache}/peers/bin}"

# step NAME CMD...: run CMD (a shell function or command) if NAME is
# selected, and record its exit code and wall time. CMD may write go test
# events to $events; testsum report reads them.
step() {
	local name=$1
	shift
	if [[ $selected != *" $name "* ]]; then
		return 0
	fi
	events="$out/$name.jsonl"
	log "== $name"
	local t0=$SECONDS
	"$@"
	local rc=$?
	local file=-
	[[ -s $events ]] && file=$events
	printf '%s\t%d\t%d\t%s\n' "$name" "$rc" $((SECONDS - t0)) "$file" >>"$steps_file"
	log "== $name: exit $rc after $((SECONDS - t0))s"
}

# gotest ARGS...: go test -json ARGS, its events to $events and a compact
# log to stdout; the exit code is go test's.
gotest() {
	go test -json "$@" 2>&1 | "$testsum" stream -out "$events"
	return "${PIPESTATUS[0]}"
}

peers() { scripts/peers.sh etcd-3.6 etcd-3.5 etcdctl etcdutl etcdctl-3.5 etcdutl-3.5; }
vet() {
	local rc=0
	go vet ./... || rc=1
	go vet -tags failpoints ./internal/failpoint ./internal/storage ./internal/server ./cmd/dyad || rc=1
	return $rc
}
unit() { gotest -race -count=1 -timeout 15m ./internal/... ./cmd/... ./scripts/...; }
fuzz() { FUZZ_EVENTS="$events" scripts/fuzz.sh; }
failpoints() { gotest -count=1 -tags failpoints ./internal/failpoint; }
# test/robustness and test/e2e run in steps of their own.
suites() { gotest -count=1 -timeout 30m $(go list ./test/... | grep -v -e '/test/e2e$' -e '/test/robustness$'); }
robustness() { DYAD_ROBUSTNESS=ci gotest -count=1 -timeout 30m ./test/robustness; }
e2e() { gotest -count=1 -timeout 20m ./test/e2e/; }

start=$SECONDS
step setup scripts/setup.sh
step peers peers
step k8s scripts/k8s.sh
step vet vet
step build go build -o .cache/bin/dyad ./cmd/dyad
step unit unit
step fuzz fuzz
step failpoints failpoints
step suites suites
step robustness robustness
step e2e e2e

log "== summary (${DYAD_TEST_STEPS:-all steps}, $((SECONDS - start))s; events in $out)"
"$testsum" report -steps "$steps_file" -allow test/skips.txt | tee "$out/summary.txt"
exit "${PIPESTATUS[0]}"
