#!/usr/bin/env bash
# Builds the fuzz targets with clang (libFuzzer, AddressSanitizer, UndefinedBehaviorSanitizer) in build-fuzz/:
# parser_fuzz (the request parser) and path_fuzz (the --root path rules). Then runs each through CTest for the same
# fixed number of executions from its seed corpus. Any crash, sanitizer report or broken promise fails the run.
# fuzz/README.md says how to run them longer and what to do with a crash.
#
#   ./fuzz/run_fuzz.sh            200,000 executions of each, what CI runs (a minute or two on a 2-core machine)
#   ./fuzz/run_fuzz.sh 2000000    ten times longer
#
# On a fresh Debian/Ubuntu machine it first installs the packages it needs when run as root; otherwise it prints
# the one apt-get line to run.
set -euo pipefail
cd "$(dirname "$0")/.."

runs="${1:-200000}"
case "$runs" in
  "" | *[!0-9]*) echo "usage: $0 [RUNS]   (RUNS: a number of executions, 200000 by default)" >&2; exit 2 ;;
esac

# shellcheck source-path=SCRIPTDIR/..
source tools/ensure-packages.sh  # ensure_packages
# libclang-rt-dev holds libFuzzer and the sanitizers' runtimes for the default clang; Debian 12 installs it apart
# from clang. The rest is what configuring the top-level CMakeLists.txt needs, although only the fuzzer is built.
ensure_packages clang libclang-rt-dev cmake make pkg-config liburing-dev libboost-dev libgtest-dev || exit 1

build="build-fuzz"
cmake -S . -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPSP_FUZZ=ON \
  -DPSP_FUZZ_RUNS="$runs" >/dev/null
cmake --build "$build" --target parser_fuzz path_fuzz -j"$(nproc)"
ctest --test-dir "$build" -R '^(parser|path)_fuzz_run$' --output-on-failure
