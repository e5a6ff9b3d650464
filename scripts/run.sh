#!/usr/bin/env bash
# scripts/run.sh — set up this machine, build dyad and run a two-zone pair on
# it: node "zone-a" and node "zone-b", replicated over DDS on loopback.
#
#   zone-a: etcd API http://127.0.0.1:2379,  metrics/health http://127.0.0.1:2381
#   zone-b: etcd API http://127.0.0.1:22379, metrics/health http://127.0.0.1:22381
#
# Data lives in .cache/run/. Give clients both endpoints; either node takes
# writes. Ctrl-C stops both (SIGTERM drains and closes cleanly). Extra
# arguments are passed to both nodes. "scripts/run.sh --single" runs one
# node alone instead (the embedded single-node store).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
export GOTOOLCHAIN=local
scripts/setup.sh
echo "run: building dyad"
go build -o .cache/bin/dyad ./cmd/dyad
mkdir -p .cache/run

if [[ ${1:-} == --single ]]; then
  shift
  exec .cache/bin/dyad serve --name single --data-dir .cache/run/single \
    --listen-client-urls http://127.0.0.1:2379 --listen-metrics-urls http://127.0.0.1:2381 "$@"
fi

cluster="zone-a=http://127.0.0.1:2380,zone-b=http://127.0.0.1:22380"
pids=()
stop() {
  trap - INT TERM EXIT
  kill -TERM "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
}
trap stop INT TERM EXIT
start() { # name client-port metrics-port
  .cache/bin/dyad serve --name "$1" --data-dir ".cache/run/$1" \
    --initial-cluster "$cluster" --preferred-zone zone-a \
    --listen-client-urls "http://127.0.0.1:$2" --listen-metrics-urls "http://127.0.0.1:$3" \
    --log-format text "${@:4}" > >(sed -u "s/^/[$1] /") 2>&1 &
  pids+=($!) # the dyad process itself, so that stop() drains it with SIGTERM
}
start zone-a 2379 2381 "$@"
start zone-b 22379 22381 "$@"
for _ in $(seq 1 100); do
  if .cache/bin/dyad status --endpoints 127.0.0.1:2379,127.0.0.1:22379 >/dev/null 2>&1 &&
     curl -fs http://127.0.0.1:2381/readyz >/dev/null && curl -fs http://127.0.0.1:22381/readyz >/dev/null; then
    break
  fi
  sleep 0.2
done
.cache/bin/dyad status --endpoints 127.0.0.1:2379,127.0.0.1:22379 || true
cat <<'MSG'
run: the pair is up. Try:
  etcdctl --endpoints 127.0.0.1:2379,127.0.0.1:22379 put hello world
  etcdctl --endpoints 127.0.0.1:22379 get hello
  .cache/bin/dyad status
  kill -9 the leading node's process, and writes resume on the other within ~2 s
run: Ctrl-C stops both nodes.
MSG
wait
