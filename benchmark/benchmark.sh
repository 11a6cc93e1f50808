#!/usr/bin/env bash
# benchmark.sh: measure the seven servers side by side, the same way, with nginx as the reference.
#
#   ./benchmark/benchmark.sh              the default run: 01..07 and nginx, `ab -n 10000 -c C`, C = 1 10 100 500
#   ./benchmark/benchmark.sh 05 06 -k     only 05 and 06 (and nginx), with keep-alive
#   ./benchmark/benchmark.sh --mode files a 100 KiB and a 1 MiB file through wrk, 100 and 1000 connections
#   ./benchmark/benchmark.sh --mode idle  10 busy clients beside 0 to 10,000 idle keep-alive connections
#   ./benchmark/benchmark.sh --mode latency   latency against a steady offered load, 10 % to 150 % of capacity
#   ./benchmark/benchmark.sh --mode connections   what idle keep-alive connections cost, up to a million
#   ./benchmark/benchmark.sh 06 06:--sqpoll=50   a server and a variant of it (extra flags) side by side
#   ./benchmark/benchmark.sh --help       every option (each can also come from a PSP_* environment variable)
#
# This file only launches the driver, a Python 3 program (standard library only) in benchmark/driver/, whose
# file names are its steps:
#   options.py      every option, its PSP_* variable and its default by mode; every refusal (exit status 2)
#   environment.py  installs missing tools (tools/ensure-packages.sh) and builds the servers in Release
#                   (cmake --build, incremental), then checks the machine and says what would distort the numbers
#   host.py         every change to the machine (sysctls, the descriptor limit, memory cgroups), put back on exit
#   servers.py      a server as a context manager: started on --port 0, pinned, stopped by PID whatever happens;
#                   nginx, the reference, from nginx.conf.template
#   tools.py        ab, wrk, openloop and idle_conns: one run, one record (command, status, output, figures)
#   sample.py       what the server spent, from /proc and perf
#   measure.py      one measured run and its checks; every full output appended to benchmark/output.log
#   sweep.py        the default mode and --mode files;  idle.py, latency.py, connections.py: the other modes,
#                   each with the schema its raw.csv is written from
#   summary.py      summary.csv, summary.md, the plot and fingerprints.json in benchmark/results/DATE/
# The numbers (parsing, medians, tables, plots) are driver/analyse.py's. Tests: test_driver.py, test_analyse.py.
#
# Exit status: 0 when every check passed; 1 when a check failed, a server did not start or a tool is missing;
# 2 on a bad option; 130 when interrupted. Nothing is left running, even on Ctrl-C or an error.

set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)

# The driver needs Python 3.9 or later (a Debian package, installed as root like the load tools).
if ! command -v python3 >/dev/null 2>&1; then
  # shellcheck source=/dev/null  # (a path shellcheck cannot resolve from every working directory)
  source "$REPO/tools/ensure-packages.sh"
  ensure_packages python3 || { echo "error: the benchmark needs: python3" >&2; exit 1; }
fi
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 9))'; then
  echo "error: the benchmark needs Python 3.9 or later; this python3 is $(python3 -V 2>&1)" >&2
  exit 1
fi

# exec: the driver gets Ctrl-C and SIGTERM itself, and stops what it started before it leaves.
export PYTHONPATH=$SCRIPT_DIR${PYTHONPATH:+:$PYTHONPATH}
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ in the working tree
exec python3 -m driver "$@"
