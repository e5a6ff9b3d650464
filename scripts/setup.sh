#!/usr/bin/env bash
# scripts/setup.sh — idempotent machine setup for a fresh Debian 12 (bookworm) box.
# Run as root. Installs the apt packages dyad's dev/test tooling needs and checks
# that a Go toolchain >= 1.24 is available.
#
# Usage: scripts/setup.sh            # install what is missing; ~1 s when nothing is
#        SETUP_VERBOSE=1 scripts/setup.sh   # show apt output
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
  postgresql            # Debian 12's default is PostgreSQL 15
  jq curl ca-certificates
  openssl               # the certs tests check dyad's signed documents with openssl smime
  fuse3 kmod            # /dev/fuse for powerfs, the power-cut tests' filesystem (kmod: modprobe)
  build-essential pkg-config
)
GO_MIN_MAJOR=1
GO_MIN_MINOR=24
GO_DEFAULT_DIR=/usr/local/go/bin

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
if ! is_installed postgresql-15; then
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
if ! command -v go >/dev/null 2>&1; then
  if [[ -x $GO_DEFAULT_DIR/go ]]; then
    export PATH="$GO_DEFAULT_DIR:$PATH"
    log "go is not on PATH; using $GO_DEFAULT_DIR/go (add 'export PATH=$GO_DEFAULT_DIR:\$PATH' to your shell)"
  else
    die "Go >= $GO_MIN_MAJOR.$GO_MIN_MINOR not found (expected at $GO_DEFAULT_DIR/go)"
  fi
fi
gover=$(go env GOVERSION 2>/dev/null || true)          # e.g. go1.26.8
[[ $gover =~ ^go([0-9]+)\.([0-9]+) ]] || die "cannot parse Go version from '$(go version 2>&1)'"
gmaj=${BASH_REMATCH[1]} gmin=${BASH_REMATCH[2]}
if ((gmaj < GO_MIN_MAJOR || (gmaj == GO_MIN_MAJOR && gmin < GO_MIN_MINOR))); then
  die "Go $gover at $(command -v go) is too old; need >= $GO_MIN_MAJOR.$GO_MIN_MINOR"
fi
log "go: $gover ($(command -v go))"
log "done"
