#!/usr/bin/env bash
# run_soak.sh: the soak run. Drives each server with a long mix of keep-alive, close, pipelined, malformed and
# reset connections (the client is soak.cpp), then checks that its descriptors and RSS came back to their starting
# level, that it still answers GET and HEAD exactly, that not one well-formed request failed, and that SIGTERM
# exits 0. One summary line per server.
#
#   tests/soak/run_soak.sh                        every server, 1,000,000 requests each (the full run)
#   tests/soak/run_soak.sh -n 20000 05 01         05 and 01, 20,000 requests each (what CI runs)
#   tests/soak/run_soak.sh --help                 every option
#
# Servers and the soak client come from a CMake build folder (default: build/ at the top of the repository).
# Without a soak binary there, the script compiles one with g++ into a temporary folder.
#
# Exit status: 0 when every server passed, 1 when one failed or is missing, 2 on a bad option.

set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/../.." && pwd)
ALL_SERVERS=(01-blocking-single 02-thread-per-conn 03-select 04-threadpool 05-epoll 06-io_uring 07-asio)

REQUESTS=${SOAK_REQUESTS:-1000000}
CONNECTIONS=${SOAK_CONNECTIONS:-64}
DELAY_US=${SOAK_DELAY_US:-0}
SEED=${SOAK_SEED:-1}
BUILD_DIR=${SOAK_BUILD_DIR:-$REPO/build}
RSS_SLACK_KIB=${SOAK_RSS_SLACK_KIB:-2048}

usage() {
  cat <<EOF
usage: $0 [options] [SERVER...]

SERVER is a chapter number (01..07) or folder name (05-epoll); default: all seven.

options (each also from the environment variable in brackets):
  -n, --requests N       requests per server, after a warm-up of min(N/20, 5000) [SOAK_REQUESTS, 1000000]
  -c, --connections C    connections at once [SOAK_CONNECTIONS, 64]
  -d, --delay-us D       the servers' simulated handler [SOAK_DELAY_US, 0]
  -s, --seed S           seed of the mix [SOAK_SEED, 1]
  -b, --build-dir DIR    CMake build folder with the servers (and tests/soak/soak) [SOAK_BUILD_DIR, build/]
      --rss-slack-kib K  RSS growth allowed after the warm-up, in KiB [SOAK_RSS_SLACK_KIB, 2048]
  -h, --help             this text
EOF
}

die_usage() {
  echo "error: $1" >&2
  usage >&2
  exit 2
}

servers=()
while (($# > 0)); do
  case $1 in
    -n | --requests) REQUESTS=${2:-}; shift 2 || die_usage "$1 needs a value" ;;
    -c | --connections) CONNECTIONS=${2:-}; shift 2 || die_usage "$1 needs a value" ;;
    -d | --delay-us) DELAY_US=${2:-}; shift 2 || die_usage "$1 needs a value" ;;
    -s | --seed) SEED=${2:-}; shift 2 || die_usage "$1 needs a value" ;;
    -b | --build-dir) BUILD_DIR=${2:-}; shift 2 || die_usage "$1 needs a value" ;;
    --rss-slack-kib) RSS_SLACK_KIB=${2:-}; shift 2 || die_usage "$1 needs a value" ;;
    -h | --help) usage; exit 0 ;;
    -*) die_usage "unknown option $1" ;;
    *) servers+=("$1"); shift ;;
  esac
done
for value in "$REQUESTS" "$CONNECTIONS" "$DELAY_US" "$SEED" "$RSS_SLACK_KIB"; do
  [[ $value =~ ^[0-9]+$ ]] || die_usage "not a number: '$value'"
done
((${#servers[@]} > 0)) || servers=("${ALL_SERVERS[@]}")

# "5", "05" or "05-epoll" -> "05-epoll"
folder_of() {
  local s want=$1
  if [[ $want =~ ^[0-9]$ ]]; then want=0$want; fi
  for s in "${ALL_SERVERS[@]}"; do
    if [[ $s == "$want" || ${s%%-*} == "$want" ]]; then
      echo "$s"
      return 0
    fi
  done
  return 1
}

scratch=""
# shellcheck disable=SC2317  # (shellcheck does not see that the EXIT trap calls it)
cleanup() { if [[ -n $scratch ]]; then rm -rf "$scratch"; fi; }
trap cleanup EXIT

soak=$BUILD_DIR/tests/soak/soak
if [[ ! -x $soak ]]; then
  scratch=$(mktemp -d)
  soak=$scratch/soak
  echo "no $BUILD_DIR/tests/soak/soak: compiling the soak client with g++"
  g++ -std=c++17 -O2 -pthread -I"$REPO" -o "$soak" "$SCRIPT_DIR/soak.cpp"
fi

echo "soak: $REQUESTS requests per server, $CONNECTIONS connections, --delay-us $DELAY_US, seed $SEED"
failed=0
for s in "${servers[@]}"; do
  if ! folder=$(folder_of "$s"); then
    echo "$s: FAIL no such server (one of: ${ALL_SERVERS[*]})"
    failed=1
    continue
  fi
  binary=$BUILD_DIR/$folder/run_server
  if [[ ! -x $binary ]]; then
    echo "$folder: FAIL not built: no $binary (build with cmake first, or pass -b)"
    failed=1
    continue
  fi
  # The soak client starts the server itself (--port 0), and stops it by its PID.
  if ! "$soak" --server "$binary" --requests "$REQUESTS" --connections "$CONNECTIONS" --delay-us "$DELAY_US" \
    --seed "$SEED" --rss-slack-kib "$RSS_SLACK_KIB"; then
    failed=1
  fi
done
exit "$failed"
