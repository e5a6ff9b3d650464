#!/usr/bin/env bash
# scripts/bench.sh — the full side-by-side benchmark from a clean clone:
# installs Debian's packages (PostgreSQL 15, Cyclone DDS, iproute2) when run
# as root, builds etcd 3.6 and kine v0.17.5 from the Go module proxy into
# .cache/peers/bin (scripts/peers.sh), builds dyad, then runs `dyad bench`
# with any arguments given (see `dyad bench --help`).
#
# Usage: scripts/bench.sh [dyad bench flags...]
#   e.g. scripts/bench.sh --clients 1,64 --duration 3s --out bench-results/today
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH" GOTOOLCHAIN=local
if [[ $(id -u) -eq 0 ]]; then
  scripts/setup.sh --bench
fi
bin=$(scripts/peers.sh --print-bin-dir etcd-3.6 kine | tail -1)
go build -o .cache/bin/dyad ./cmd/dyad
exec .cache/bin/dyad bench --peers-bin "$bin" "$@"
