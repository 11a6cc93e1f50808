#!/usr/bin/env bash
# ensure_packages PKG...: make sure the Debian/Ubuntu packages are installed.
# As root, installs the missing ones (one `apt-get update` first); otherwise prints the one
# `apt-get install` line that is needed and returns 1. Sourced by tests/run_tests.sh and benchmark/benchmark.sh.

ensure_packages() {
  local missing=() pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing packages; install them with:" >&2
    echo "  sudo apt-get install -y ${missing[*]}" >&2
    return 1
  fi
  echo "installing missing packages: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >&2 || {
    echo "error: apt-get could not install: ${missing[*]}" >&2
    return 1
  }
}
