#!/usr/bin/env bash
# scripts/run.sh — set up this machine, build dyad and run it.
#
# Today dyad runs as a single node (the two-zone pair arrives with DDS
# replication). The node serves the etcd v3 API on http://127.0.0.1:2379 and
# metrics/health on http://127.0.0.1:2381; data lives in .cache/run/.
# Stop it with Ctrl-C (SIGTERM/SIGINT drain and close cleanly).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
export GOTOOLCHAIN=local
scripts/setup.sh
echo "run: building dyad"
go build -o .cache/bin/dyad ./cmd/dyad
echo "run: try it:  etcdctl --endpoints 127.0.0.1:2379 put hello world"
exec .cache/bin/dyad serve --name zone-a --data-dir .cache/run/zone-a \
  --listen-client-urls http://127.0.0.1:2379 \
  --listen-metrics-urls http://127.0.0.1:2381 "$@"
