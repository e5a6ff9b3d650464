# dyad's top-level commands. Each target is a thin wrapper over a script in
# scripts/, which documents itself; the scripts are what CI runs.
#
#   make build        build dyad into .cache/bin/dyad
#   make test         the whole test suite, exactly as CI runs it (scripts/test.sh)
#   make bench-deps   install/build every external benchmark target into the cache:
#                     Debian's postgresql-15 (and the rest of scripts/setup.sh, as root),
#                     etcd 3.6 and kine from the Go module proxy (scripts/peers.sh)
#   make bench        the full side-by-side report (docs/BENCHMARKS.md), into
#                     bench-results/<date-time>; BENCH_FLAGS adds `dyad bench` flags
#   make robustness-soak  the long robustness soak: SOAK_CYCLES (default 100) fault
#                     cycles against a two-zone pair, every history checked (root)
#
# DYAD_CACHE moves the cache (default .cache).

SHELL := /usr/bin/env bash
export PATH := /usr/local/go/bin:$(PATH)
export GOTOOLCHAIN := local

BENCH_FLAGS ?=
SOAK_CYCLES ?= 100

.PHONY: build test bench-deps bench robustness-soak

build:
	go build -o .cache/bin/dyad ./cmd/dyad

test:
	scripts/test.sh

bench-deps:
	@if [[ $$(id -u) -eq 0 ]]; then scripts/setup.sh; else echo "bench-deps: not root, skipping the Debian packages (scripts/setup.sh)"; fi
	scripts/peers.sh etcd-3.6 etcdctl kine

bench:
	scripts/bench.sh $(BENCH_FLAGS)

robustness-soak:
	scripts/robustness-soak.sh $(SOAK_CYCLES)
