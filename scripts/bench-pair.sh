#!/usr/bin/env bash
# scripts/bench-pair.sh — replicated dyad (a two-zone pair over DDS on
# loopback) beside single-node dyad and a 3-member etcd 3.6 cluster, same
# machine, same run, same client (etcd's `benchmark` tool): put with 1 and
# 64 clients through the primary and through the replica (forwarded), and
# linearizable range on the replica and the primary under a concurrent put
# load. Loopback only.
#
# Usage: scripts/bench-pair.sh [TOTAL_PER_RUN]   (default 20000)
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

ic="a=http://127.0.0.1:2380,b=http://127.0.0.1:22380"
.cache/bin/dyad serve --name a --data-dir "$work/a" --initial-cluster "$ic" --listen-client-urls http://127.0.0.1:52379 --log-level warn 2>"$work/a.log" &
pids+=($!)
.cache/bin/dyad serve --name b --data-dir "$work/b" --initial-cluster "$ic" --listen-client-urls http://127.0.0.1:53379 --log-level warn 2>"$work/b.log" &
pids+=($!)
.cache/bin/dyad serve --data-dir "$work/single" --listen-client-urls http://127.0.0.1:54379 --log-level warn 2>"$work/s.log" &
pids+=($!)
cluster="e1=http://127.0.0.1:55380,e2=http://127.0.0.1:56380,e3=http://127.0.0.1:57380"
for i in 1 2 3; do
  "$BIN/etcd-3.6" --name e$i --data-dir "$work/e$i" --listen-client-urls http://127.0.0.1:5$((4+i))379 \
    --advertise-client-urls http://127.0.0.1:5$((4+i))379 --listen-peer-urls http://127.0.0.1:5$((4+i))380 \
    --initial-advertise-peer-urls http://127.0.0.1:5$((4+i))380 --initial-cluster "$cluster" --log-level error 2>"$work/e$i.log" &
  pids+=($!)
done
sleep 6
.cache/bin/dyad status --endpoints 127.0.0.1:52379,127.0.0.1:53379 >&2

# run ENDPOINT CLIENTS ARGS... -> "rps p50ms p99ms"
run() {
  local ep=$1 clients=$2; shift 2
  "$BIN/benchmark" --precise --endpoints "$ep" --clients "$clients" --conns $(( clients < 8 ? clients : 8 )) "$@" 2>/dev/null |
    awk '/Requests\/sec/ {r=$2} /50% in/ {p50=$3*1000} /99% in/ {p99=$3*1000} END {printf "%.0f %.3f %.3f\n", r, p50, p99}'
}
printf "%-34s %8s | %10s %9s %9s\n" target clients rps p50_ms p99_ms
for clients in 1 64; do
  total=$TOTAL; [ "$clients" = 1 ] && total=$(( TOTAL / 4 ))
  for t in "dyad pair, put via primary:127.0.0.1:52379" "dyad pair, put via replica:127.0.0.1:53379" \
           "dyad single node, put:127.0.0.1:54379" "etcd 3 members, put (leader):127.0.0.1:55379,127.0.0.1:56379,127.0.0.1:57379"; do
    name=${t%%:*}; ep=${t#*:}
    read -r rps p50 p99 < <(run "$ep" "$clients" put --key-size 8 --val-size 256 --sequential-keys --key-space-size 100000 --total "$total")
    printf "%-34s %8s | %10s %9s %9s\n" "$name" "$clients" "$rps" "$p50" "$p99"
  done
done
# Reads under a concurrent write load (64 put clients on the primary).
"$BIN/benchmark" --endpoints 127.0.0.1:52379 --clients 64 --conns 8 put --key-size 8 --val-size 256 --total 10000000 >/dev/null 2>&1 &
load=$!
sleep 1
for t in "dyad pair, linearizable range on replica:127.0.0.1:53379" "dyad pair, linearizable range on primary:127.0.0.1:52379"; do
  name=${t%%:*}; ep=${t#*:}
  read -r rps p50 p99 < <(run "$ep" 16 range foo --consistency l --total "$TOTAL")
  printf "%-34s %8s | %10s %9s %9s\n" "$name" 16 "$rps" "$p50" "$p99"
done
kill $load 2>/dev/null || true
