#!/usr/bin/env bash
# pack.sh: the benchmark in one folder, for a larger machine that has no packages and no network.
#
#   ./benchmark/pack.sh DIR          here, from a checkout with the packages installed (the test command's)
#   DIR/run.sh [OPTION...] [SERVER...]   there, as root: the benchmark's --mode scaling by default, e.g.
#   DIR/run.sh --cores "1 2 4 8" -d 3s   (its results land in DIR/results/DATE/, its full outputs in DIR/results)
#
# What goes in, and why:
#   build/       the seven servers, the floor, openloop and idle_conns, each built alone from its one source file
#                with -static (each main.cpp builds by itself: the project's rule), so the other machine's C
#                library does not matter;
#   bin/, lib/   wrk, nginx and taskset as that machine may lack them: each binary with every shared library it
#                loads and the dynamic loader itself, started through a wrapper in bin/ as
#                `lib/ld-linux-x86-64.so.2 --library-path lib PROGRAM`, so exactly these libraries are used;
#   benchmark/   the driver (Python 3.9+, standard library only: the machine must have a python3);
#   packed.json  the commit it was packed from and how it was built, and fingerprints.json, the fingerprint of
#                each server's code (docs/tools/fingerprint.py), so that a run there is tied to the code as a run
#                here is (the driver reads them when PSP_PACKED names the folder, and then installs nothing).
# Any run of more than 2 CPUs that the course quotes is committed as a results folder with its machine: copy
# DIR/results/DATE/ into benchmark/results/.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
[[ $# -eq 1 && $1 != -* ]] || { echo "usage: benchmark/pack.sh DIR" >&2; exit 2; }
out=$(mkdir -p "$1" && cd "$1" && pwd)

# shellcheck source=/dev/null
source "$repo/tools/ensure-packages.sh"
ensure_packages g++ liburing-dev libboost-dev libasio-dev wrk nginx util-linux python3

rm -rf "${out:?}/build" "${out:?}/bin" "${out:?}/lib" "${out:?}/libexec" "${out:?}/benchmark"
mkdir -p "$out/build/benchmark" "$out/bin" "$out/lib" "$out/libexec" "$out/benchmark"
flags=(-std=c++17 -O2 -pthread -static)
build() {  # build NAME SOURCE [LIBRARIES...]: one static binary, the build's line printed
  local name=$1 source=$2
  shift 2
  mkdir -p "$(dirname "$out/build/$name")"
  echo "  g++ ${flags[*]} -o build/$name $source $*"
  g++ "${flags[@]}" -o "$out/build/$name" "$repo/$source" "$@"
}
echo "building statically into $out/build"
for folder in 01-blocking-single 02-thread-per-conn 03-select 04-threadpool 05-epoll 07-asio; do
  build "$folder/run_server" "$folder/main.cpp" &
done
build 06-io_uring/run_server 06-io_uring/main.cpp -luring &
for tool in floor openloop idle_conns; do build "benchmark/$tool" "benchmark/$tool.cpp" & done
for job in $(jobs -p); do wait "$job"; done  # (each failure stops the script: set -e and wait's status)

echo "copying wrk, nginx and taskset with their libraries and the loader into $out/bin and $out/lib"
loader=$(readlink -f /lib64/ld-linux-x86-64.so.2)
cp "$loader" "$out/lib/ld-linux-x86-64.so.2"
for program in wrk nginx taskset; do
  path=$(command -v "$program" || echo "/usr/sbin/$program")
  cp "$path" "$out/libexec/$program"
  ldd "$path" | awk '/=> \// { print $3 }' | while read -r library; do cp -L "$library" "$out/lib/"; done
  # The wrapper: the packed loader runs the program with the packed libraries (exec: the same PID, so the
  # driver stops nginx's master by the PID it started).
  # shellcheck disable=SC2016  # ($here and $0 are the wrapper's, expanded when it runs, not now)
  printf '%s\n' '#!/bin/sh' 'here=$(cd "$(dirname "$0")/.." && pwd)' \
    "exec \"\$here/lib/ld-linux-x86-64.so.2\" --library-path \"\$here/lib\" \"\$here/libexec/$program\" \"\$@\"" \
    > "$out/bin/$program"
  chmod +x "$out/bin/$program"
done

echo "copying the driver into $out/benchmark"
cp -r "$here/driver" "$here/kernel_memory.py" "$here/wrk_done.lua" "$here/benchmark.sh" \
  "$out/benchmark/"
find "$out/benchmark" -name __pycache__ -prune -exec rm -rf {} +
commit=$(git -C "$repo" rev-parse --short HEAD)
git -C "$repo" diff --quiet HEAD -- 0*/ common/ benchmark/ ":(exclude)benchmark/results" || commit+=-dirty
python3 "$repo/docs/tools/fingerprint.py" --json --root "$repo" > "$out/fingerprints.json"
printf '{"commit": "%s", "build_type": "Release (g++ -O2 -static, benchmark/pack.sh)"}\n' "$commit" \
  > "$out/packed.json"

cat > "$out/run.sh" <<'EOF'
#!/bin/sh
# The benchmark from this folder (made by benchmark/pack.sh): --mode scaling unless another --mode is given.
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$here/results"
# (As environment variables, so that the command line a summary records is the one given here.)
export PATH="$here/bin:$PATH" PSP_PACKED="$here" PSP_NO_BUILD=1 PSP_BUILD_DIR="$here/build" \
  PSP_RESULTS_DIR="${PSP_RESULTS_DIR:-$here/results}" PSP_LOG="${PSP_LOG:-$here/results/output.log}" \
  PSP_MODE="${PSP_MODE:-scaling}"
exec "$here/benchmark/benchmark.sh" "$@"
EOF
chmod +x "$out/run.sh"
echo "packed $(du -sh "$out" | cut -f1) into $out (commit $commit); run it there as root: $out/run.sh --help"
