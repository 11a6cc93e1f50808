#!/usr/bin/env bash
# Builds the seven servers (and the variants of 06 and 07 the integration suite also runs) and the tests, then runs
# every test with CTest.
#
#   ./tests/run_tests.sh                      the normal build, in build/
#   ./tests/run_tests.sh --sanitize address   AddressSanitizer + UndefinedBehaviorSanitizer, in build-address/
#   ./tests/run_tests.sh --sanitize thread    ThreadSanitizer, in build-thread/
#   ./tests/run_tests.sh --build-only [...]   install and build only, for the labs: no test runs
#
# On a fresh Debian/Ubuntu machine it first installs the packages it needs when run as root; otherwise it prints
# the one apt-get line to run.
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=""
build_only=no
usage() { echo "usage: $0 [--build-only] [--sanitize address|thread]" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --build-only) build_only=yes; shift ;;
    --sanitize)
      case "${2:-}" in address | thread) sanitize=$2; shift 2 ;; *) usage ;; esac ;;
    *) usage ;;
  esac
done

# shellcheck source-path=SCRIPTDIR/..
source tools/ensure-packages.sh  # ensure_packages
# Everything any test needs, once, before CTest starts: the build's libraries, and the load tools the benchmark's
# smoke tests drive. Installed here, the tests that CTest runs in parallel never need to install anything.
ensure_packages g++ cmake make pkg-config liburing-dev libboost-dev libasio-dev libgtest-dev python3 \
  apache2-utils wrk curl || exit 1
# Optional: without them the benchmark draws no plot and counts no syscalls, and its shellcheck test is skipped.
# (linux-perf is Debian's name; Ubuntu's is linux-tools-*, so a failure here is not fatal.)
# strace, ss and nstat (iproute2) and pmap (procps) are the labs' tools; minimal images lack them.
if [ "$(id -u)" -eq 0 ]; then
  ensure_packages gnuplot-nox linux-perf shellcheck || echo "(optional: gnuplot-nox, linux-perf or shellcheck could not be installed)" >&2
  ensure_packages strace iproute2 procps || echo "(optional: the labs' strace, iproute2 or procps could not be installed)" >&2
fi

build="build${sanitize:+-$sanitize}"
build_type=Release
[ -n "$sanitize" ] && build_type=RelWithDebInfo
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE="$build_type" -DPSP_SANITIZE="$sanitize" >/dev/null
cmake --build "$build" -j"$(nproc)"
if [ $build_only = yes ]; then
  echo "built in $build/: each server is $build/NN-name/run_server (no test was run)"
  exit 0
fi

# Sanitizers: fail on the first report, and keep going across the fork()s the tests make.
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export TSAN_OPTIONS="halt_on_error=1${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)"
