#!/usr/bin/env bash
# Grades any HTTP server with this repository's integration suite: the checks, scored by a rubric a teacher can
# edit (tests/grader/rubric.ini), with a Markdown and a JSON report.
#
#   ./tests/grade.sh -- ./build/05-epoll/run_server                   a server of this course (it prints its port)
#   ./tests/grade.sh --quick -- ./build/05-epoll/run_server           a few checks per category, under 30 s
#   ./tests/grade.sh --chapter 1 -- ./build/01-blocking-single/run_server   chapter 01's rules (one at a time)
#   ./tests/grade.sh --profile static -- python3 my_server.py {port} {root}  any static-file server, any language
#   ./tests/grade.sh --quick --report reports --each 'submissions/*/run.sh'  a folder of submissions: grades.csv
#   ./tests/grade.sh --jobs 2 --report reports --each 'submissions/*/run.sh'   two at a time; grades.md, a table
#   ./tests/grade.sh --quick --url http://127.0.0.1:8080/ --pid 1234     a server already running (left running)
#   ./tests/grade.sh --help                                           every option
#
# As root, the server runs as nobody (--user NAME; --user root keeps root), with a private TMPDIR removed after.
# Exit status: 0 when every check passed, 1 when one failed, 2 on bad usage. Like tests/run_tests.sh, it first
# installs the packages it needs when run as root (otherwise it prints the one apt-get line), and builds the suite
# in build/.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"

# shellcheck source=tools/ensure-packages.sh source-path=SCRIPTDIR/..
source "$repo/tools/ensure-packages.sh"  # ensure_packages
ensure_packages g++ cmake make pkg-config liburing-dev libboost-dev libasio-dev libgtest-dev python3 || exit 1

case " $* " in
  *" --help "* | *" -h "*) ;;  # no build needed to print the options
  *)
    if [ ! -f "$repo/build/CMakeCache.txt" ]; then
      cmake -S "$repo" -B "$repo/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
    fi
    if ! log=$(cmake --build "$repo/build" -j"$(nproc)" --target integration_tests 2>&1); then
      printf '%s\n' "$log" >&2
      echo "tests/grade.sh: the suite did not build (above)" >&2
      exit 2
    fi
    ;;
esac
exec python3 "$repo/tests/grader/grade.py" "$@"
