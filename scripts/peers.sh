#!/usr/bin/env bash
# scripts/peers.sh — build the real etcd "peer" binaries (the reference
# implementation dyad is compared against) from the Go module proxy.
#
# Binaries land in ${DYAD_CACHE:-<repo>/.cache}/peers/bin:
#   etcd-3.6  etcdctl  etcdutl  benchmark      (etcd 3.6 line)
#   etcd-3.5  etcdctl-3.5  etcdutl-3.5         (etcd 3.5 line)
#   kine                                       (k3s' kine, SQLite + PostgreSQL)
#
# `go install go.etcd.io/etcd/...@ver` does not work (etcd's go.mod files carry
# replace directives), so for each etcd line a tiny wrapper module is generated
# under peers/src/etcd-<ver>/ (go.mod + main.go calling etcdmain.Main) that
# requires the published modules, and every binary is built inside it.
#
# kine has no replace directives, so it is built with a plain
# `go install github.com/k3s-io/kine@<ver>` (cgo on: its SQLite driver is
# mattn/go-sqlite3), into a private GOBIN, then moved into bin/. It is not in
# the default set (it costs about 5 CPU-minutes); `dyad bench` needs it.
#
# Each binary has a stamp file (peers/stamps/<name>) holding the version it was
# built from; a binary whose stamp matches is skipped, so re-runs are instant.
# Changing a version (env overrides below) rebuilds only what it affects.
set -euo pipefail

usage() {
  cat <<EOF
Usage: scripts/peers.sh [--force] [--print-bin-dir] [NAME...]

Build etcd peer binaries into \${DYAD_CACHE:-<repo>/.cache}/peers/bin.
NAME is any of: ${ALL_NAMES[*]}
(default: all but kine). Already-built binaries are skipped.

Options:
  --print-bin-dir   print the bin dir path as the last line of output
  --force           rebuild the named binaries even if up to date
  --list            list the binaries and the versions they would be built from
  -h, --help        show this help

Environment:
  DYAD_CACHE            cache root (default: <repo>/.cache)
  ETCD36_VERSION        server/etcdctl/etcdutl version, 3.6 line   (default: $ETCD36_VERSION)
  ETCD36_ROOT_VERSION   go.etcd.io/etcd/v3 version (benchmark)     (default: $ETCD36_ROOT_VERSION)
  ETCD35_VERSION        server/etcdctl/etcdutl version, 3.5 line   (default: $ETCD35_VERSION)
  KINE_VERSION          github.com/k3s-io/kine version             (default: $KINE_VERSION)
EOF
}

# --------------------------------------------------------------- configuration
# The proxy has go.etcd.io/etcd/v3 (the root module, home of tools/benchmark)
# only at a few versions: v3.6.8 is the newest 3.6 one, so the 3.6 wrapper pins
# the root module there while server/etcdctl/etcdutl are newer.
# 3.5: newest 3.5 at which the proxy serves server, etcdctl AND etcdutl.
ETCD36_VERSION=${ETCD36_VERSION:-v3.6.16}
ETCD36_ROOT_VERSION=${ETCD36_ROOT_VERSION:-v3.6.8}
ETCD35_VERSION=${ETCD35_VERSION:-v3.5.35}
KINE_VERSION=${KINE_VERSION:-v0.17.5}
# Build tags of k3s' own kine/SQLite builds (facts.md).
KINE_TAGS="sqlite_unlock_notify,sqlite_vtable,sqlite_stat4,sqlite_preupdate_hook,sqlite_math_functions,sqlite_dbstat,sqlite_column_metadata"

ALL_NAMES=(etcd-3.6 etcdctl etcdutl benchmark etcd-3.5 etcdctl-3.5 etcdutl-3.5 kine)
# What a run without NAMEs builds: everything but kine (slow, bench only).
DEFAULT_NAMES=(etcd-3.6 etcdctl etcdutl benchmark etcd-3.5 etcdctl-3.5 etcdutl-3.5)

# name -> "line|package" ("." = the wrapper's own main package)
declare -A TARGET=(
  [etcd-3.6]="3.6|."
  [etcdctl]="3.6|go.etcd.io/etcd/etcdctl/v3"
  [etcdutl]="3.6|go.etcd.io/etcd/etcdutl/v3"
  [benchmark]="3.6|go.etcd.io/etcd/v3/tools/benchmark"
  [etcd-3.5]="3.5|."
  [etcdctl-3.5]="3.5|go.etcd.io/etcd/etcdctl/v3"
  [etcdutl-3.5]="3.5|go.etcd.io/etcd/etcdutl/v3"
  [kine]="kine|github.com/k3s-io/kine"
)

log() { echo "peers: $*"; }
die() { echo "peers: ERROR: $*" >&2; exit 1; }

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${DYAD_CACHE:-$REPO/.cache}
PEERS=$CACHE/peers
BIN=$PEERS/bin
SRC=$PEERS/src
STAMPS=$PEERS/stamps
LOGS=$PEERS/logs

# line -> wrapper version (directory name) and the modules it requires
wrapper_version() {
  case $1 in
    3.6) echo "$ETCD36_VERSION" ;;
    3.5) echo "$ETCD35_VERSION" ;;
    kine) echo "$KINE_VERSION" ;;
  esac
}
wrapper_modules() {
  case $1 in
    3.6) echo "go.etcd.io/etcd/server/v3@$ETCD36_VERSION go.etcd.io/etcd/etcdctl/v3@$ETCD36_VERSION" \
              "go.etcd.io/etcd/etcdutl/v3@$ETCD36_VERSION go.etcd.io/etcd/v3@$ETCD36_ROOT_VERSION" ;;
    3.5) echo "go.etcd.io/etcd/server/v3@$ETCD35_VERSION go.etcd.io/etcd/etcdctl/v3@$ETCD35_VERSION" \
              "go.etcd.io/etcd/etcdutl/v3@$ETCD35_VERSION" ;;
    kine) echo "github.com/k3s-io/kine@$KINE_VERSION tags=$KINE_TAGS" ;;
  esac
}
# the version a binary is built "from", for messages
display_version() {
  if [[ $1 == benchmark ]]; then echo "$ETCD36_ROOT_VERSION"; else wrapper_version "${TARGET[$1]%%|*}"; fi
}
# what a binary's stamp records: every module version that goes into it
stamp_value() {
  wrapper_modules "${TARGET[$1]%%|*}"
}

# ------------------------------------------------------------------ arguments
print_bin_dir=0 force=0 list=0
names=()
while (($#)); do
  case $1 in
    --print-bin-dir) print_bin_dir=1 ;;
    --force) force=1 ;;
    --list) list=1 ;;
    -h|--help) usage; exit 0 ;;
    -*) usage >&2; die "unknown option: $1" ;;
    *) [[ -n ${TARGET[$1]:-} ]] || { usage >&2; die "unknown binary: $1"; }
       names+=("$1") ;;
  esac
  shift
done
((${#names[@]})) || names=("${DEFAULT_NAMES[@]}")

if ((list)); then
  for n in "${ALL_NAMES[@]}"; do
    line=${TARGET[$n]%%|*} pkg=${TARGET[$n]#*|}
    [[ $pkg == . ]] && pkg=go.etcd.io/etcd/server/v3/etcdmain
    ver=$(display_version "$n")
    state=missing
    [[ -x $BIN/$n && -f $STAMPS/$n && $(<"$STAMPS/$n") == "$(stamp_value "$n")" ]] && state=built
    printf 'peers: %-12s %-8s %-8s %s\n' "$n" "$ver" "$state" "$pkg"
  done
  ((print_bin_dir)) && echo "$BIN"
  exit 0
fi

# ------------------------------------------------------------------ what to do
up_to_date() {
  [[ -x $BIN/$1 && -f $STAMPS/$1 && $(<"$STAMPS/$1") == "$(stamp_value "$1")" ]]
}
todo=()
for n in "${names[@]}"; do
  if ((force)) || ! up_to_date "$n"; then
    todo+=("$n")
  else
    log "$n: up to date ($(display_version "$n"))"
  fi
done

if ((${#todo[@]})); then
  mkdir -p "$BIN" "$SRC" "$STAMPS" "$LOGS"
  # one build at a time per cache dir
  exec 9>"$PEERS/.lock"
  if ! flock -n 9; then
    log "waiting for another peers.sh run to finish"
    flock 9
  fi

  if ! command -v go >/dev/null 2>&1; then
    [[ -x /usr/local/go/bin/go ]] || die "go not found (run scripts/setup.sh)"
    export PATH="/usr/local/go/bin:$PATH"
  fi
  # Deterministic, self-contained Go environment for the wrapper modules:
  #  -mod=mod        let go build add missing requirements / go.sum lines
  #  -buildvcs=false the wrapper lives inside dyad's git work tree
  #  GOWORK=off      never pick up a go.work from the repo above
  #  GOTOOLCHAIN     never try to download another toolchain
  #  CGO_ENABLED=0   static binaries, like etcd's release builds
  export GOFLAGS="-mod=mod -buildvcs=false" GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0
  BUILD_FLAGS=(-trimpath "-ldflags=-s -w")

  prepare_wrapper() { # line -> prints wrapper dir
    local line=$1 ver dir mods want
    ver=$(wrapper_version "$line")
    dir=$SRC/etcd-$ver
    mods=$(wrapper_modules "$line")
    if [[ -f $dir/.ready && $(<"$dir/.ready") == "$mods" ]]; then
      echo "$dir"; return
    fi
    log "etcd $line: preparing wrapper module $dir (go get $mods)" >&2
    mkdir -p "$dir"
    rm -f "$dir/.ready" "$dir/go.sum"
    cat >"$dir/go.mod" <<EOF
module dyad.local/peers/etcd-$ver

go 1.24
EOF
    cat >"$dir/main.go" <<'EOF'
// Code generated by dyad scripts/peers.sh; DO NOT EDIT.

// Command etcd runs the upstream etcd server (what etcd's own server/main.go does).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
EOF
    local logf=$LOGS/wrapper-etcd-$ver.log
    # No `go mod tidy`: it would drop the etcdctl/etcdutl/root requirements that
    # main.go does not import, and the builds below would then float to @latest.
    # shellcheck disable=SC2086 # $mods is a word list
    if ! (cd "$dir" && go get $mods) >"$logf" 2>&1; then
      tail -n 40 "$logf" >&2
      die "etcd $line: go get failed (full log: $logf)"
    fi
    echo "$mods" >"$dir/.ready"
    echo "$dir"
  }

  # kine: `go install pkg@version` in module-aware mode outside any module,
  # with cgo for SQLite. GOFLAGS=-mod=mod is not allowed there.
  build_kine() {
    local logf=$LOGS/kine.log gobin=$PEERS/.gobin-kine
    rm -rf "$gobin"
    (cd "$PEERS" && GOFLAGS=-buildvcs=false CGO_ENABLED=1 GOBIN=$gobin \
      go install -trimpath "-ldflags=-s -w" -tags "$KINE_TAGS" "github.com/k3s-io/kine@$KINE_VERSION") >"$logf" 2>&1 \
      || { tail -n 40 "$logf" >&2; rm -rf "$gobin"; die "kine: build failed (full log: $logf)"; }
    mv -f "$gobin/kine" "$BIN/.kine.tmp"
    rm -rf "$gobin"
  }

  declare -A WRAPPER=()
  for n in "${todo[@]}"; do
    line=${TARGET[$n]%%|*} pkg=${TARGET[$n]#*|}
    if [[ $line == kine ]]; then
      log "kine: building $pkg@$KINE_VERSION (cgo, SQLite tags)"
      start=$SECONDS
      rm -f "$STAMPS/kine"
      build_kine
      mv -f "$BIN/.kine.tmp" "$BIN/kine"
      stamp_value kine >"$STAMPS/kine"
      log "kine: built in $((SECONDS - start))s ($(du -h "$BIN/kine" | cut -f1))"
      continue
    fi
    if [[ -z ${WRAPPER[$line]:-} ]]; then
      WRAPPER[$line]=$(prepare_wrapper "$line")
    fi
    dir=${WRAPPER[$line]}
    logf=$LOGS/$n.log
    log "$n: building $pkg@$(display_version "$n") in $(basename "$dir")"
    start=$SECONDS
    rm -f "$STAMPS/$n"
    if ! (cd "$dir" && go build "${BUILD_FLAGS[@]}" -o "$BIN/.$n.tmp" "$pkg") >"$logf" 2>&1; then
      tail -n 40 "$logf" >&2
      rm -f "$BIN/.$n.tmp"
      die "$n: build failed (full log: $logf)"
    fi
    mv -f "$BIN/.$n.tmp" "$BIN/$n"
    stamp_value "$n" >"$STAMPS/$n"
    log "$n: built in $((SECONDS - start))s ($(du -h "$BIN/$n" | cut -f1))"
  done
fi

log "bin dir: $BIN"
((print_bin_dir)) && echo "$BIN"
exit 0
