#!/usr/bin/env bash
# scripts/setup.sh — idempotent machine setup for a fresh Debian 12 (bookworm) box.
# Run as root. Installs the apt packages dyad's build and tests need, and the
# Go toolchain that go.mod asks for (its "go" line) when none, or an older
# one, is found at /usr/local/go or on PATH.
#
# Usage: scripts/setup.sh            # install what is missing; ~1 s when nothing is
#        scripts/setup.sh --bench    # also PostgreSQL 15 (kine's backend in `make bench`)
#        SETUP_VERBOSE=1 scripts/setup.sh   # show apt output
#
# The Go toolchain: Debian's golang-go is used when it is new enough (on
# bookworm it is 1.19, so it is not). Otherwise Debian's golang-go is installed
# only as a bootstrap, and it downloads the official toolchain module
# golang.org/toolchain@v0.0.1-go<version>.linux-<arch> from the Go module proxy
# (GOPROXY, checked against GOSUMDB exactly like any module, which is what
# GOTOOLCHAIN=auto does), and the toolchain is installed into /usr/local/go.
#
# Re-runs are cheap: when every package is already installed (dpkg status check)
# apt is not touched at all. `apt-get update` runs at most once per run, and only
# when the package lists are missing or an install attempt needs fresh lists.
set -euo pipefail

# Every prerequisite a test checks through internal/testenv is here: under
# DYAD_REQUIRE_PEERS=1 (scripts/test.sh) a missing one fails its test.
PACKAGES=(
  cyclonedds-dev cyclonedds-tools  # cyclonedds-tools: ddsperf, for the perf tests
  libddsc0debian        # Cyclone DDS itself and its DDS Security plugins (libdds_security_*.so)
  iproute2              # network namespaces and tc for the two-zone fault tests
  etcd-client
  jq curl ca-certificates
  openssl               # the certs tests check dyad's signed documents with openssl smime
  fuse3 kmod            # /dev/fuse for powerfs, the power-cut tests' filesystem (kmod: modprobe)
  prometheus            # promtool: test/monitoring checks and unit-tests deploy/monitoring's rules
  systemd               # systemd-analyze: test/site verifies the shipped snapshot timer and service
  build-essential pkg-config
)
# Only the benchmark's kine target needs a database; running dyad does not.
BENCH_PACKAGES=(
  postgresql            # Debian 12's default is PostgreSQL 15
)
GO_ROOT=${SETUP_GO_ROOT:-/usr/local/go}   # SETUP_GO_ROOT: install elsewhere (tests)
GO_DEFAULT_DIR=$GO_ROOT/bin

bench=0
case ${1:-} in
  --bench) bench=1 ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--bench]" >&2; exit 2 ;;
esac
if ((bench)); then PACKAGES+=("${BENCH_PACKAGES[@]}"); fi

log() { echo "setup: $*"; }
die() { echo "setup: ERROR: $*" >&2; exit 1; }

if [[ $(id -u) -ne 0 ]]; then
  die "must run as root (apt-get install)"
fi
command -v dpkg-query >/dev/null && command -v apt-get >/dev/null \
  || die "this script targets Debian (dpkg/apt-get not found)"
if [[ -r /etc/debian_version ]] && [[ $(cut -d. -f1 /etc/debian_version) != 12 ]]; then
  log "warning: expected Debian 12, found $(cat /etc/debian_version)"
fi

is_installed() {
  [[ $(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null) == ii* ]]
}

# ---------------------------------------------------------------- apt packages
missing=()
for p in "${PACKAGES[@]}"; do
  is_installed "$p" || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  log "all ${#PACKAGES[@]} apt packages already installed"
else
  log "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt_log=$(mktemp /tmp/dyad-setup-apt.XXXXXX.log)
  trap 'rm -f "$apt_log"' EXIT
  updated=0
  # Wait (up to SETUP_APT_LOCK_TIMEOUT s) for a concurrent apt/dpkg instead of failing.
  apt_opts=(-o "DPkg::Lock::Timeout=${SETUP_APT_LOCK_TIMEOUT:-600}")
  run_apt() {
    if [[ ${SETUP_VERBOSE:-0} == 1 ]]; then
      apt-get "${apt_opts[@]}" "$@" 2>&1 | tee -a "$apt_log"; return "${PIPESTATUS[0]}"
    fi
    apt-get -q "${apt_opts[@]}" "$@" >>"$apt_log" 2>&1
  }
  apt_update() {
    ((updated)) && return 0
    log "apt-get update"
    run_apt update || { tail -n 30 "$apt_log" >&2; die "apt-get update failed"; }
    updated=1
  }
  # Update first only if the lists are empty or some package has no candidate;
  # otherwise try the install straight away and fall back to update+retry.
  need_update=0
  if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
    need_update=1
  else
    for p in "${missing[@]}"; do
      cand=$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ {print $2}')
      if [[ -z $cand || $cand == "(none)" ]]; then need_update=1; break; fi
    done
  fi
  ((need_update)) && apt_update
  install() { run_apt install -y --no-install-recommends "${missing[@]}"; }
  if ! install; then
    if ((updated)); then
      tail -n 30 "$apt_log" >&2; die "apt-get install failed"
    fi
    log "install failed with current lists ($(grep -E '^E:' "$apt_log" | tail -n 1)); refreshing and retrying"
    apt_update
    install || { tail -n 30 "$apt_log" >&2; die "apt-get install failed"; }
  fi
  still=()
  for p in "${missing[@]}"; do is_installed "$p" || still+=("$p"); done
  ((${#still[@]} == 0)) || die "still not installed after apt-get: ${still[*]}"
  log "installed ${#missing[@]} package(s)"
fi

# PostgreSQL: the project targets 15 (bookworm's default major).
if ((bench)) && ! is_installed postgresql-15; then
  die "postgresql is installed but postgresql-15 is not (dpkg: $(dpkg-query -W -f='${Depends}' postgresql 2>/dev/null))"
fi

# ---------------------------------------------------------------- FUSE
# powerfs (test/testutil/powerfs) mounts through /dev/fuse as root; the
# device appears once the fuse module is loaded.
if [[ ! -e /dev/fuse ]]; then
  log "loading the fuse module (no /dev/fuse)"
  modprobe fuse || die "modprobe fuse failed: the power-cut tests need /dev/fuse"
fi

# ---------------------------------------------------------------- Go toolchain
# The version go.mod requires ("go 1.26.8"); a "toolchain" line, if any, wins.
gomod="$(dirname "$0")/../go.mod"
GO_WANT=$(awk '$1 == "toolchain" {sub(/^go/, "", $2); t = $2} $1 == "go" {g = $2} END {print (t != "" ? t : g)}' "$gomod")
[[ $GO_WANT =~ ^[0-9]+\.[0-9]+(\.[0-9]+)?$ ]] || die "cannot read the Go version from $gomod (got '$GO_WANT')"

# version_ge A B: A >= B for dotted versions ("1.26.8" >= "1.26").
version_ge() { [[ $(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1) == "$2" ]]; }
# go_version BIN: "1.26.8" for a working go binary, empty otherwise.
go_version() { "$1" env GOVERSION 2>/dev/null | sed -n 's/^go\([0-9][0-9.]*\).*/\1/p'; }

have_go() { # prints the path of a go that is new enough
  local g v
  for g in "$GO_DEFAULT_DIR/go" "$(command -v go 2>/dev/null || true)"; do
    [[ -n $g && -x $g ]] || continue
    v=$(go_version "$g")
    if [[ -n $v ]] && version_ge "$v" "$GO_WANT"; then echo "$g"; return 0; fi
  done
  return 1
}

apt_install() { # packages...: install with the same lock wait and log as above
  export DEBIAN_FRONTEND=noninteractive
  local opts=(-o "DPkg::Lock::Timeout=${SETUP_APT_LOCK_TIMEOUT:-600}")
  apt-get -q "${opts[@]}" install -y --no-install-recommends "$@" >/dev/null 2>&1 ||
    { apt-get -q "${opts[@]}" update >/dev/null 2>&1 && apt-get -q "${opts[@]}" install -y --no-install-recommends "$@"; }
}

install_go() {
  local arch
  case $(dpkg --print-architecture) in
    amd64) arch=amd64 ;; arm64) arch=arm64 ;;
    *) die "no Go toolchain module for $(dpkg --print-architecture); install Go >= $GO_WANT into $GO_ROOT by hand" ;;
  esac
  # 1. Debian's own package, when it is new enough.
  local cand
  cand=$(apt-cache policy golang-go 2>/dev/null | awk '/Candidate:/ {print $2}' | sed 's/^[0-9]*://; s/[~+-].*//')
  if [[ -n $cand && $cand != "(none)" ]] && version_ge "$cand" "$GO_WANT"; then
    log "installing Debian's golang-go $cand"
    apt_install golang-go || die "apt-get install golang-go failed"
    return 0
  fi
  # 2. The official toolchain module from the Go module proxy, fetched by a
  #    bootstrap Go (Debian's, or whatever older go is present).
  local boot
  boot=$(command -v go 2>/dev/null || true)
  [[ -x $GO_DEFAULT_DIR/go ]] && boot=$GO_DEFAULT_DIR/go
  if [[ -z $boot ]]; then
    log "installing Debian's golang-go ${cand:-?} to bootstrap Go $GO_WANT"
    apt_install golang-go || die "apt-get install golang-go failed"
    boot=/usr/bin/go
  fi
  local mod="golang.org/toolchain@v0.0.1-go$GO_WANT.linux-$arch" tmp dir
  tmp=$(mktemp -d /tmp/dyad-setup-go.XXXXXX)
  log "downloading $mod from the Go module proxy ($($boot env GOPROXY))"
  # GOTOOLCHAIN=local: a bootstrap new enough to switch toolchains must not
  # switch for this download. GOFLAGS=-modcacherw: the temporary cache can be removed.
  dir=$(cd "$tmp" && GOTOOLCHAIN=local GOFLAGS=-modcacherw GOMODCACHE="$tmp/mod" \
        "$boot" mod download -json "$mod" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [[ -n $dir && -f $dir/bin/go ]] || { rm -rf "$tmp"; die "downloading $mod failed"; }
  # Module zips carry no file modes: make the binaries executable again.
  chmod -R u+w "$dir"
  chmod +x "$dir"/bin/* "$dir"/pkg/tool/*/*
  if [[ -e $GO_ROOT ]]; then
    rm -rf "$GO_ROOT.old" && mv "$GO_ROOT" "$GO_ROOT.old"
    log "moved the old $GO_ROOT to $GO_ROOT.old"
  fi
  mkdir -p "$(dirname "$GO_ROOT")"
  cp -a "$dir" "$GO_ROOT"
  rm -rf "$GO_ROOT.old" "$tmp"
}

if ! gobin=$(have_go); then
  old=$(command -v go 2>/dev/null || true)
  [[ -x $GO_DEFAULT_DIR/go ]] && old=$GO_DEFAULT_DIR/go
  log "Go >= $GO_WANT not found${old:+ ($old is go$(go_version "$old"))}; installing it"
  install_go
  gobin=$(have_go) || die "Go $GO_WANT is still not available after installing it"
fi
if [[ $(command -v go 2>/dev/null || true) != "$gobin" ]]; then
  log "$gobin is not first on PATH: add 'export PATH=$(dirname "$gobin"):\$PATH' to your shell"
fi
log "go: go$(go_version "$gobin") ($gobin; go.mod needs $GO_WANT)"
log "done"
