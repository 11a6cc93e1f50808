#!/usr/bin/env bash
# Checks a code lab's reference solution (docs/solutions/lab-N.M.patch): it still applies to the sources, the patched
# server builds without a warning from its own folder as the chapter says, and it passes (or, for a lab that takes
# something out, fails) the integration tests its header names.
#
#   docs/tools/check_solution.sh docs/solutions/lab-1.4.patch BUILD_DIR
#
# BUILD_DIR holds the CMake build whose integration_tests binary runs the checks. The patch is applied to a copy of
# common/ and the chapter's folder in a temporary folder, never to your checkout. A patch file starts with a header
# of "Key: value" lines, before its first "diff --git" line (git apply ignores them):
#
#   Server: 01                      the chapter whose main.cpp (or another file in its folder) the patch changes
#   Source: main.cpp                optional: the file to build, in that folder (default main.cpp)
#   Passes: *s01_blocking_single*   a GoogleTest filter the patched server must pass
#   Fails: *Deadline*s01_*          optional: a filter it must fail (what the lab takes out, a test catches)
set -euo pipefail

patch_file=${1:?usage: check_solution.sh PATCH BUILD_DIR}
build_dir=${2:?usage: check_solution.sh PATCH BUILD_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
patch_file=$(cd "$(dirname "$patch_file")" && pwd)/$(basename "$patch_file")

field() { sed -n "/^diff --git/q; s/^$1: *//p" "$patch_file" | head -1; }
server=$(field Server)
source_file=$(field Source)
passes=$(field Passes)
fails=$(field Fails)
if [ -z "$server" ] || [ -z "$passes" ]; then
  echo "$patch_file: its header needs Server: and Passes: lines" >&2
  exit 1
fi
folders=("$root/$server"-*/)
folder=$(basename "${folders[0]}")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$root/common" "$root/$folder" "$work/"
if ! (cd "$work" && git apply --whitespace=nowarn "$patch_file"); then
  echo "FAIL: $(basename "$patch_file") no longer applies to $folder: refresh it against the current sources" >&2
  exit 1
fi

libs=()
[ "$server" = 06 ] && libs=(-luring)
echo "building $folder/${source_file:-main.cpp} with the solution applied"
(cd "$work/$folder" && g++ -std=c++17 -O2 -pthread -Wall -Wextra -Werror -o run_server "${source_file:-main.cpp}" \
  "${libs[@]}")

variable=PSP_SERVER_$server
[ "$source_file" = advanced.cpp ] && variable=PSP_SERVER_06_ADVANCED
export "$variable=$work/$folder/run_server"
count=$("$build_dir/integration_tests" --gtest_filter="$passes" --gtest_list_tests | grep -c '^  ' || true)
[ "$count" -gt 0 ] || { echo "FAIL: the filter '$passes' names no test" >&2; exit 1; }
echo "running the $count tests '$passes' on it (they must pass)"
"$build_dir/integration_tests" --gtest_filter="$passes" --gtest_brief=1
if [ -n "$fails" ]; then
  # Every test the filter names must fail, not merely one of them: the header is the lab's list of what catches the
  # change, and a student compares it with what they see.
  echo "running the tests '$fails' on it (each must fail: the lab takes out what they check)"
  "$build_dir/integration_tests" --gtest_filter="$fails" >"$work/fails.log" 2>&1 || true
  result() { grep -E "^\[ +($1) +\] .*\([0-9]+ ms\)$" "$work/fails.log" | sed -E 's/^\[[^]]*\] ([^ ,]+).*/\1/' | sort -u || true; }
  not_failed=$(result 'OK|SKIPPED')
  failed=$(result FAILED)
  if [ -n "$not_failed" ] || [ -z "$failed" ]; then
    echo "FAIL: the header's Fails: list is not what fails on the solution; these did not fail:" >&2
    echo "${not_failed:-(no test ran)}" >&2
    exit 1
  fi
  echo "$failed"
fi
echo "$(basename "$patch_file"): the solution applies, builds and behaves as its lab says"
