# dyad's top-level commands. Each target is a thin wrapper over a script in
# scripts/, which documents itself; the scripts are what CI runs.
#
#   make build        build dyad into .cache/bin/dyad
#   make release      a versioned tarball in dist/: dyad-VERSION+COMMIT-linux-ARCH.tar.gz
#                     (bin/dyad stamped with the commit, the systemd unit, the
#                     Kubernetes manifests, the kubeadm example, README and
#                     OPERATIONS), and dist/dyad-linux-ARCH.tar.gz, a copy that
#                     deploy/Dockerfile picks up
#   make test         the whole test suite, exactly as CI runs it (scripts/test.sh);
#                     every step runs, the summary lists each step's time, every
#                     failure and skip; DYAD_TEST_STEPS=unit,fuzz runs some steps
#   make fuzz         every fuzz target for FUZZTIME each (default 5m; scripts/fuzz.sh,
#                     CI gives each 10s); FUZZ_TARGETS='FuzzRPC FuzzLoad' picks some.
#                     A failing input lands in the package's testdata/fuzz: commit it
#                     with the fix
#   make bench-deps   install/build every external benchmark target into the cache:
#                     Debian's postgresql-15 (and the rest of scripts/setup.sh, as root),
#                     etcd 3.6 and kine from the Go module proxy (scripts/peers.sh)
#   make bench        the full side-by-side report (docs/BENCHMARKS.md), into
#                     bench-results/<date-time>; BENCH_FLAGS adds `dyad bench` flags
#   make e2e-deps     build kube-apiserver, kube-controller-manager, kube-scheduler
#                     (v1.36) and kwok into the cache (scripts/k8s.sh; ~10 min clean)
#   make e2e          every end-to-end Kubernetes scenario on two zones (test/e2e,
#                     DYAD_E2E_FULL=1; needs root): zone losses, 1,000 pods on dyad
#                     and etcd, the etcd contrast, a rolling restart. Figures are
#                     appended to e2e-results/figures.txt
#   make sim          the deterministic simulator of the protocol core (internal/repl/sim)
#                     on every core: SIM_DURATION (default 10m) of seeds from SIM_FIRST,
#                     or SIM_SEEDS seeds; prints steps/s, total steps, porcupine-checked
#                     operations, faults, and each failing seed with a shrunk trace
#   make powercut     the long power-cut runs (test/crash; root and /dev/fuse):
#                     POWERCUT_CYCLES (default 200) cuts of one node, then
#                     PAIR_POWERCUT_CYCLES (default 60) cuts of a pair (both
#                     zones, the primary's, the replica's), every acknowledged
#                     write checked after each
#   make robustness-soak  the long robustness soak: SOAK_CYCLES (default 100) fault
#                     cycles against a two-zone pair, every history checked (root)
#
# DYAD_CACHE moves the cache (default .cache).

SHELL := /usr/bin/env bash
export PATH := /usr/local/go/bin:$(PATH)
export GOTOOLCHAIN := local

BENCH_FLAGS ?=
SOAK_CYCLES ?= 100
POWERCUT_CYCLES ?= 200
PAIR_POWERCUT_CYCLES ?= 60
SIM_DURATION ?= 10m
FUZZTIME ?= 5m

.PHONY: build release test fuzz bench-deps bench e2e-deps e2e robustness-soak powercut sim

build:
	go build -o .cache/bin/dyad ./cmd/dyad

# The commit is stamped with -ldflags because GOFLAGS may say -buildvcs=false
# and a source tarball has no .git; `dyad version` prints it.
release:
	@set -euo pipefail; \
	commit=$$(git rev-parse HEAD 2>/dev/null || true); \
	modified=false; if [[ -n $$commit && -n $$(git status --porcelain 2>/dev/null) ]]; then modified=true; fi; \
	arch=$$(go env GOARCH); mkdir -p dist/.build; \
	go build -trimpath -ldflags "-X main.stampedCommit=$$commit -X main.stampedModified=$$modified" -o dist/.build/dyad ./cmd/dyad; \
	name=dyad-$$(dist/.build/dyad version --short)-linux-$$arch; stage=dist/.build/$$name; \
	rm -rf "$$stage"; mkdir -p "$$stage/bin" "$$stage/deploy" "$$stage/docs"; \
	mv dist/.build/dyad "$$stage/bin/dyad"; \
	cp -r deploy/systemd deploy/kubernetes deploy/kubeadm deploy/fence "$$stage/deploy/"; \
	cp README.md "$$stage/"; cp docs/OPERATIONS.md "$$stage/docs/"; \
	tar -C dist/.build -czf "dist/$$name.tar.gz" --owner=0 --group=0 "$$name"; \
	cp "dist/$$name.tar.gz" "dist/dyad-linux-$$arch.tar.gz"; rm -rf dist/.build; \
	echo "release: dist/$$name.tar.gz"

test:
	scripts/test.sh

fuzz:
	FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

bench-deps:
	@if [[ $$(id -u) -eq 0 ]]; then scripts/setup.sh --bench; else echo "bench-deps: not root, skipping the Debian packages (scripts/setup.sh)"; fi
	scripts/peers.sh etcd-3.6 etcdctl kine

bench:
	scripts/bench.sh $(BENCH_FLAGS)

e2e-deps:
	scripts/k8s.sh
	scripts/peers.sh etcd-3.6

e2e: e2e-deps
	mkdir -p e2e-results
	set -o pipefail; DYAD_E2E_FULL=1 DYAD_REQUIRE_PEERS=1 DYAD_E2E_FIGURES=$(CURDIR)/e2e-results/figures.txt \
		go test -count=1 -v -timeout 90m ./test/e2e/ 2>&1 | tee e2e-results/e2e-$$(date +%Y%m%d-%H%M%S).log

robustness-soak:
	scripts/robustness-soak.sh $(SOAK_CYCLES)

powercut:
	DYAD_REQUIRE_PEERS=1 DYAD_POWERCUT_CYCLES=$(POWERCUT_CYCLES) go test -count=1 -timeout 90m -v -run '^TestPowerCut$$' ./test/crash
	DYAD_REQUIRE_PEERS=1 DYAD_PAIR_POWERCUT_CYCLES=$(PAIR_POWERCUT_CYCLES) go test -count=1 -timeout 90m -v -run '^TestPairPowerCut$$' ./test/crash

# The simulator runs as a test so that it shares the unit step's code; -v
# prints its report. SIM_SEEDS, when set, wins over SIM_DURATION.
sim:
	SIM_DURATION=$(SIM_DURATION) go test -count=1 -timeout 0 -v -run '^TestSoak$$' ./internal/repl/sim
