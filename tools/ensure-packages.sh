#!/usr/bin/env bash
# ensure_packages PKG...: make sure the Debian/Ubuntu packages are installed.
# As root, installs the missing ones (one `apt-get update` first); otherwise prints the one
# `apt-get update && apt-get install` line that is needed and returns 1. Sourced by tests/run_tests.sh,
# benchmark/benchmark.sh and fuzz/run_fuzz.sh.
#
# Several of these may run at once (CTest runs the benchmark's smoke tests in parallel, and each may install what
# it misses), and dpkg allows one installer at a time. So the project's own installs take turns on one lock file,
# and each looks again at what is missing once it has the lock (the one before it may have installed it). Against
# any other apt-get on the machine (unattended-upgrades, a person), apt waits for its lock instead of failing.

ensure_packages_missing() {
  local pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || printf '%s\n' "$pkg"
  done
}

ensure_packages() {
  local missing=()
  mapfile -t missing < <(ensure_packages_missing "$@")
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing packages; install them with:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    return 1
  fi
  (
    flock 9  # one install at a time; released when this subshell ends
    mapfile -t missing < <(ensure_packages_missing "$@")
    [ ${#missing[@]} -eq 0 ] && exit 0
    echo "installing missing packages: ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    local wait_for_apt=(-o DPkg::Lock::Timeout=600)  # seconds to wait for another apt-get or dpkg to finish
    { apt-get "${wait_for_apt[@]}" update -qq &&
      apt-get "${wait_for_apt[@]}" install -y -qq --no-install-recommends "${missing[@]}"; } >&2 || {
      echo "error: apt-get could not install: ${missing[*]}" >&2
      exit 1
    }
  ) 9>/var/lock/progressive-server-primitives-apt.lock
}
