#!/usr/bin/env bash
# scripts/bench-core.sh — single-node dyad beside single-node etcd 3.6, same
# machine, same run, same client (etcd's own `benchmark` tool): put and
# linearizable/serializable range with 1 and 64 clients. Prints a table of
# p50/p99 latency and throughput and the dyad/etcd ratio. Loopback only.
#
# Usage: scripts/bench-core.sh [TOTAL_PER_RUN]   (default 20000)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH" GOTOOLCHAIN=local
TOTAL=${1:-20000}
BIN=$(scripts/peers.sh --print-bin-dir etcd-3.6 benchmark | tail -1)
go build -o .cache/bin/dyad ./cmd/dyad
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

.cache/bin/dyad serve --data-dir "$work/dyad" --listen-client-urls http://127.0.0.1:42379 --log-level warn 2>"$work/dyad.log" &
pids+=($!)
"$BIN/etcd-3.6" --name e --data-dir "$work/etcd" --listen-client-urls http://127.0.0.1:43379 \
  --advertise-client-urls http://127.0.0.1:43379 --listen-peer-urls http://127.0.0.1:43380 \
  --initial-advertise-peer-urls http://127.0.0.1:43380 --initial-cluster e=http://127.0.0.1:43380 \
  --log-level error 2>"$work/etcd.log" &
pids+=($!)
sleep 3

# run TARGET ENDPOINT CLIENTS ARGS... -> "rps p50ms p99ms"
run() {
  local ep=$1 clients=$2; shift 2
  "$BIN/benchmark" --precise --endpoints "$ep" --clients "$clients" --conns $(( clients < 8 ? clients : 8 )) "$@" 2>/dev/null |
    awk '/Requests\/sec/ {rps=$2} /50% in/ {p50=$3} /99% in/ {p99=$3} END {printf "%.0f %.3f %.3f\n", rps, p50*1000, p99*1000}'
}

printf "%-22s %8s | %10s %9s %9s | %10s %9s %9s | %7s %7s\n" workload clients dyad_rps p50_ms p99_ms etcd_rps p50_ms p99_ms rps_x p50_x
for clients in 1 64; do
  total=$TOTAL; [ "$clients" = 1 ] && total=$(( TOTAL / 4 ))
  for wl in "put:put --key-size 16 --val-size 256 --key-space-size 10000 --sequential-keys" \
            "range-linearizable:range k0000000001 --consistency l" \
            "range-serializable:range k0000000001 --consistency s"; do
    name=${wl%%:*}; args=${wl#*:}
    read -r d_rps d_50 d_99 < <(run 127.0.0.1:42379 "$clients" $args --total "$total")
    read -r e_rps e_50 e_99 < <(run 127.0.0.1:43379 "$clients" $args --total "$total")
    printf "%-22s %8s | %10s %9s %9s | %10s %9s %9s | %7.2f %7.2f\n" "$name" "$clients" \
      "$d_rps" "$d_50" "$d_99" "$e_rps" "$e_50" "$e_99" \
      "$(awk -v a="$d_rps" -v b="$e_rps" "BEGIN{print a/b}")" "$(awk -v a="$d_50" -v b="$e_50" "BEGIN{print a/b}")"
  done
done
