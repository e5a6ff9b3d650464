#!/usr/bin/env bash
# scripts/k8s.sh — build the real Kubernetes control plane used by the
# end-to-end tests (test/e2e) from the Go module proxy only:
#
#   kube-apiserver  kube-controller-manager  kube-scheduler   (k8s.io/kubernetes $K8S_VERSION)
#   kwok                                                       (sigs.k8s.io/kwok $KWOK_VERSION)
#   kwok-stages.yaml   kwok's Stage definitions (node/pod lifecycle) taken from
#                      the kwok module's kustomize/stage directory
#
# Everything lands in ${DYAD_CACHE:-<repo>/.cache}/k8s/bin.
#
# k8s.io/kubernetes cannot be `go install`ed: its go.mod replaces each of its
# staging modules (k8s.io/api, k8s.io/apiserver, ...) with ./staging/src/...
# and the proxy's zip does not carry them. So a wrapper module is generated
# under k8s/src/kubernetes-<ver>/ that requires k8s.io/kubernetes and replaces
# every staging module (the list is read from kubernetes' own go.mod, the
# `=> ./staging` lines) with its published v0.X.Y tag; the commands are then
# built inside the wrapper. The version variables that `make` would set by
# ldflags are set the same way, since clients (kubectl, client-go's discovery)
# parse the server's version.
#
# Each binary has a stamp (k8s/stamps/<name>) recording what it was built
# from; an up-to-date binary is skipped, so re-runs are instant. Costs on a
# clean cache, 2 shared cores: kube-apiserver ~6.5 min, then
# kube-controller-manager ~2 min, kube-scheduler ~10 s, kwok ~1 min.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.36.3}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
# Staging modules are tagged v0.<minor>.<patch> for kubernetes v1.<minor>.<patch>.
STAGING_VERSION=${STAGING_VERSION:-v0.${K8S_VERSION#v1.}}
# The proxy lacks this one at the matching patch release (facts.md).
declare -A STAGING_OVERRIDE=([k8s.io/sample-cli-plugin]=v0.36.1)

ALL_NAMES=(kube-apiserver kube-controller-manager kube-scheduler kwok)

usage() {
  cat <<USAGE
Usage: scripts/k8s.sh [--force] [--print-bin-dir] [--check] [NAME...]

Build Kubernetes components and kwok into \${DYAD_CACHE:-<repo>/.cache}/k8s/bin.
NAME is any of: ${ALL_NAMES[*]} (default: all). Up-to-date binaries are skipped.

Options:
  --check           exit 0 if every named binary is up to date, 1 otherwise (builds nothing)
  --print-bin-dir   print the bin dir path as the last line of output
  --force           rebuild the named binaries even if up to date
  -h, --help        show this help

Environment:
  DYAD_CACHE        cache root (default: <repo>/.cache)
  K8S_VERSION       k8s.io/kubernetes version   (default: $K8S_VERSION)
  STAGING_VERSION   staging modules version     (default: $STAGING_VERSION)
  KWOK_VERSION      sigs.k8s.io/kwok version    (default: $KWOK_VERSION)
USAGE
}

log() { echo "k8s: $*"; }
die() { echo "k8s: ERROR: $*" >&2; exit 1; }

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${DYAD_CACHE:-$REPO/.cache}
ROOT=$CACHE/k8s
BIN=$ROOT/bin
SRC=$ROOT/src
STAMPS=$ROOT/stamps
LOGS=$ROOT/logs

stamp_value() {
  case $1 in
    kwok) echo "sigs.k8s.io/kwok@$KWOK_VERSION" ;;
    *) echo "k8s.io/kubernetes@$K8S_VERSION staging@$STAGING_VERSION" ;;
  esac
}
up_to_date() {
  [[ -x $BIN/$1 && -f $STAMPS/$1 && $(<"$STAMPS/$1") == "$(stamp_value "$1")" ]] || return 1
  [[ $1 != kwok || -s $BIN/kwok-stages.yaml ]]
}

print_bin_dir=0 force=0 check=0
names=()
while (($#)); do
  case $1 in
    --print-bin-dir) print_bin_dir=1 ;;
    --force) force=1 ;;
    --check) check=1 ;;
    -h|--help) usage; exit 0 ;;
    -*) usage >&2; die "unknown option: $1" ;;
    *) [[ " ${ALL_NAMES[*]} " == *" $1 "* ]] || { usage >&2; die "unknown binary: $1"; }
       names+=("$1") ;;
  esac
  shift
done
((${#names[@]})) || names=("${ALL_NAMES[@]}")

if ((check)); then
  for n in "${names[@]}"; do up_to_date "$n" || exit 1; done
  exit 0
fi

todo=()
for n in "${names[@]}"; do
  if ((force)) || ! up_to_date "$n"; then todo+=("$n"); else log "$n: up to date"; fi
done

if ((${#todo[@]})); then
  mkdir -p "$BIN" "$SRC" "$STAMPS" "$LOGS"
  # One build at a time per cache dir (CI may start the tests while a
  # `make e2e-deps` is still running).
  exec 9>"$ROOT/.lock"
  if ! flock -n 9; then
    log "waiting for another k8s.sh run to finish"
    flock 9
  fi
  if ! command -v go >/dev/null 2>&1; then
    [[ -x /usr/local/go/bin/go ]] || die "go not found (run scripts/setup.sh)"
    export PATH="/usr/local/go/bin:$PATH"
  fi
  export GOFLAGS="-mod=mod -buildvcs=false" GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0

  # Re-check under the lock: the run we waited for may have built them.
  left=()
  for n in "${todo[@]}"; do
    if ((force)) || ! up_to_date "$n"; then left+=("$n"); fi
  done
  todo=("${left[@]+"${left[@]}"}")
fi

prepare_wrapper() { # prints the wrapper dir
  local dir=$SRC/kubernetes-$K8S_VERSION want
  want="$(stamp_value kube-apiserver)"
  if [[ -f $dir/.ready && $(<"$dir/.ready") == "$want" ]]; then echo "$dir"; return; fi
  log "preparing wrapper module $dir" >&2
  mkdir -p "$dir"
  rm -f "$dir/.ready" "$dir/go.sum"
  local logf=$LOGS/wrapper.log gomod
  gomod=$(cd "$dir" && GOFLAGS= go mod download -json "k8s.io/kubernetes@$K8S_VERSION" 2>"$logf" |
          sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p') || true
  [[ -n $gomod && -f $gomod ]] || { cat "$logf" >&2; die "cannot download k8s.io/kubernetes@$K8S_VERSION's go.mod"; }
  {
    echo "module dyad.local/k8s/kubernetes-$K8S_VERSION"
    echo
    echo "go $(sed -n 's/^go \([0-9.]*\)$/\1/p' "$gomod")"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    local mod ver
    # lines look like:  k8s.io/api => ./staging/src/k8s.io/api
    while read -r mod; do
      ver=${STAGING_OVERRIDE[$mod]:-$STAGING_VERSION}
      echo "	$mod => $mod $ver"
    done < <(sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/.*#\1#p' "$gomod")
    echo ")"
  } >"$dir/go.mod"
  grep -c '=> k8s.io' "$dir/go.mod" | { read -r c; log "wrapper replaces $c staging modules" >&2; }
  # A blank import pins k8s.io/kubernetes as a real dependency of the wrapper.
  cat >"$dir/tools.go" <<'GO'
// Code generated by dyad scripts/k8s.sh; DO NOT EDIT.

//go:build tools

// Package tools pins k8s.io/kubernetes; the commands are built from it.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver/app"
GO
  if ! (cd "$dir" && go mod tidy -e) >>"$logf" 2>&1; then
    tail -n 40 "$logf" >&2
    die "wrapper: go mod tidy failed (full log: $logf)"
  fi
  echo "$want" >"$dir/.ready"
  echo "$dir"
}

ldflags() {
  local major=${K8S_VERSION#v} minor
  minor=${major#*.}; minor=${minor%%.*}; major=${major%%.*}
  local f="-s -w" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    f+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    f+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$f"
}

build_kwok() {
  local logf=$LOGS/kwok.log gobin=$ROOT/.gobin-kwok
  rm -rf "$gobin"
  (cd "$ROOT" && GOFLAGS=-buildvcs=false GOBIN=$gobin \
    go install -trimpath "-ldflags=-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION") >"$logf" 2>&1 \
    || { tail -n 40 "$logf" >&2; rm -rf "$gobin"; die "kwok: build failed (full log: $logf)"; }
  # Stage definitions: without them kwok exits "no stages found".
  local moddir
  moddir=$(cd "$ROOT" && GOFLAGS= go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" |
           sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
  [[ -d $moddir/kustomize/stage ]] || die "kwok: no kustomize/stage in $moddir"
  local f out=$BIN/.kwok-stages.tmp
  : >"$out"
  # node-initialize + node-heartbeat-with-lease, pod-ready + pod-complete + pod-delete
  for f in "$moddir"/kustomize/stage/node/fast/node-initialize.yaml \
           "$moddir"/kustomize/stage/node/heartbeat-with-lease/*.yaml \
           "$moddir"/kustomize/stage/pod/fast/*.yaml; do
    [[ -f $f ]] || die "kwok: missing stage file $f"
    { echo "---"; grep -v '^---$' "$f"; } >>"$out"
  done
  mv -f "$out" "$BIN/kwok-stages.yaml"
  mv -f "$gobin/kwok" "$BIN/kwok"
  rm -rf "$gobin"
}

for n in "${todo[@]+"${todo[@]}"}"; do
  start=$SECONDS
  rm -f "$STAMPS/$n"
  if [[ $n == kwok ]]; then
    log "kwok: building sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
    build_kwok
  else
    dir=$(prepare_wrapper)
    logf=$LOGS/$n.log
    log "$n: building k8s.io/kubernetes/cmd/$n@$K8S_VERSION"
    if ! (cd "$dir" && nice go build -trimpath "-ldflags=$(ldflags)" -o "$BIN/.$n.tmp" "k8s.io/kubernetes/cmd/$n") >"$logf" 2>&1; then
      tail -n 40 "$logf" >&2
      rm -f "$BIN/.$n.tmp"
      die "$n: build failed (full log: $logf)"
    fi
    mv -f "$BIN/.$n.tmp" "$BIN/$n"
  fi
  stamp_value "$n" >"$STAMPS/$n"
  log "$n: built in $((SECONDS - start))s"
done

log "bin dir: $BIN"
((print_bin_dir)) && echo "$BIN"
exit 0
