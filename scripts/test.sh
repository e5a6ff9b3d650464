#!/usr/bin/env bash
# scripts/test.sh — dyad's whole test suite, exactly as CI runs it.
#
# Installs what the tests need (Debian packages, real etcd/etcdctl/etcdutl
# built from the Go module proxy into .cache/), builds dyad, then runs:
#   - go vet
#   - unit tests (with the race detector) beside the code in internal/ and cmd/
#   - the peer suites in test/: apiserver storage conformance, etcdctl,
#     clientv3 concurrency, snapshot migration and differential tests
#     against real etcd, the two-zone tests and the short robustness run
#     (test/robustness; the long soak is scripts/robustness-soak.sh)
#   - the Kubernetes end-to-end smoke (test/e2e: a real control plane per
#     zone, 100 pods, loss of the primary's zone), with kube-apiserver,
#     kube-controller-manager, kube-scheduler and kwok built into .cache/k8s
#     by scripts/k8s.sh
# Missing peer binaries are failures here, never skips.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
export GOTOOLCHAIN=local
export DYAD_REQUIRE_PEERS=1

log() { echo "test: $*"; }
start=$(date +%s)

log "setting up the machine"
scripts/setup.sh
log "building peer binaries (cached in .cache/)"
scripts/peers.sh etcd-3.6 etcd-3.5 etcdctl etcdutl etcdctl-3.5 etcdutl-3.5
export DYAD_PEERS_BIN="$(scripts/peers.sh --print-bin-dir etcd-3.6 | tail -1)"
# The Kubernetes control plane of the end-to-end smoke test (test/e2e): about
# 10 minutes on a clean cache, nothing once built. Built here, before any test
# runs, so that the build never competes with timing-sensitive tests.
log "building Kubernetes components for test/e2e (cached in .cache/k8s)"
scripts/k8s.sh

log "go vet"
go vet ./...
log "building dyad"
go build -o .cache/bin/dyad ./cmd/dyad

log "unit tests (race detector)"
go test -race -count=1 -timeout 15m ./internal/... ./cmd/...
# Each fuzz target briefly (Go runs one -fuzz target per invocation); the
# seed corpus and testdata/fuzz regressions already ran above as unit tests.
# The budget is a count of executions, not a duration: Go 1.26's fuzz
# coordinator can fail a duration-bounded run with a bare "context deadline
# exceeded" when the deadline races a busy worker (golang/go#75804, fixed in
# Go 1.27). The in-process node targets run about 50 inputs a second, the
# decoders thousands; each count is a few seconds' worth on this machine.
# DYAD_FUZZTIME (a -fuzztime value) overrides them all.
fuzz_budget() {
	case "$1" in
	FuzzRPC | FuzzOpenDataFile) echo 250x ;;
	*) echo 20000x ;;
	esac
}
log "fuzz targets (${DYAD_FUZZTIME:-a few seconds} each)"
for pkg in ./internal/repl ./internal/mvcc ./internal/api ./internal/lease ./internal/conflict ./internal/server; do
	for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz'); do
		go test -run '^$' -fuzz "^${target}\$" -fuzztime="${DYAD_FUZZTIME:-$(fuzz_budget "$target")}" -parallel 1 "$pkg"
	done
done
log "failpoints build (vet, unit tests; test/robustness builds and uses it)"
go vet -tags failpoints ./internal/failpoint ./internal/storage ./internal/server ./cmd/dyad
go test -count=1 -tags failpoints ./internal/failpoint
log "peer suites"
# test/e2e (a whole Kubernetes control plane per zone) runs on its own after
# the others, so its CPU load does not skew their failover timings.
go test -count=1 -timeout 30m $(go list ./test/... | grep -v '/test/e2e$')
log "end-to-end smoke (test/e2e: 100 pods, loss of the primary's zone)"
e2e_start=$(date +%s)
go test -count=1 -timeout 20m ./test/e2e/
log "end-to-end smoke took $(( $(date +%s) - e2e_start ))s"
log "all tests passed in $(( $(date +%s) - start ))s"
