# shellcheck shell=bash
# Start a server for a lab, on a free port, and keep its PID: source this file, do not run it.
#
#   . tools/serve.sh [--fds N] COMMAND [ARGS...]   start COMMAND ARGS --port 0 in the background, wait for its
#                                                 "listening on" line, then set PORT, PID and URL in your shell
#   stop_server [PID...]                          stop those servers (default: every one started this way) with
#                                                 SIGTERM, as Ctrl-C would, and wait until each has exited
#
#   . tools/serve.sh ./build/05-epoll/run_server --threads 1
#   curl -i "$URL"                                # http://127.0.0.1:PORT/
#   ab -n 1000 -c 10 "$URL"
#   stop_server
#
# --fds N starts the server with a limit of N descriptors (ulimit -n, in the server's process only). Without a
# --port in ARGS, the server gets --port 0 and the kernel picks a free port, so no lab collides with another server
# (or another student) on 8080. The server's output goes to the file named by $SERVE_LOG. Two servers at once:
# source this file twice and copy PORT between the two (P05=$PORT). Stop them by their PID, never by name: `pkill
# run_server` would also stop someone else's.

if [ -z "${BASH_VERSION:-}" ] || [ "${BASH_SOURCE[0]}" = "$0" ]; then
  echo "tools/serve.sh: source it in bash, so that it can set PORT and PID in your shell: . tools/serve.sh COMMAND" >&2
  # shellcheck disable=SC2317  # exit when run, return when sourced in another shell
  exit 2 2>/dev/null || return 2
fi

stop_server() {
  local pid tries kept=()
  local pids=("$@")
  [ ${#pids[@]} -gt 0 ] || pids=("${SERVE_PIDS[@]}")
  for pid in "${pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || continue
    for ((tries = 0; tries < 50; tries++)); do  # every server in this course exits within its 2 s stop grace
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "stop_server: $pid did not stop within 5 s of SIGTERM; killed" >&2
      kill -KILL "$pid" 2>/dev/null
    fi
    echo "stopped $pid"
  done
  for pid in "${SERVE_PIDS[@]}"; do  # forget the ones just stopped
    [[ " ${pids[*]} " == *" $pid "* ]] || kept+=("$pid")
  done
  SERVE_PIDS=("${kept[@]}")
}

serve_start() {
  local fds="" log arg port_given=no line tries
  if [ "${1:-}" = "--fds" ]; then fds=$2; shift 2; fi
  if [ $# -eq 0 ]; then
    echo "usage: . tools/serve.sh [--fds N] COMMAND [ARGS...]" >&2
    return 2
  fi
  for arg in "$@"; do [ "$arg" = "--port" ] && port_given=yes; done
  [ $port_given = yes ] || set -- "$@" --port 0
  log=$(mktemp "${TMPDIR:-/tmp}/serve.XXXXXX.log")
  if [ -n "$fds" ]; then
    (ulimit -n "$fds" && exec "$@") >"$log" 2>&1 &
  else
    "$@" >"$log" 2>&1 &
  fi
  local pid=$!
  for ((tries = 0; tries < 100; tries++)); do  # 10 s: a server prints the line as soon as it listens
    line=$(grep -m1 -o 'listening on http://[^ ]*' "$log" || true)  # no match yet is not an error (set -e)
    [ -n "$line" ] && break
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "serve.sh: '$*' exited before it listened; its output:" >&2
      cat "$log" >&2
      return 1
    fi
    sleep 0.1
  done
  if [ -z "$line" ]; then
    echo "serve.sh: '$*' printed no 'listening on' line within 10 s; stopped it (its output is in $log)" >&2
    kill -KILL "$pid" 2>/dev/null
    return 1
  fi
  URL=${line#listening on }
  PORT=${URL##*:}
  PORT=${PORT%/}
  PID=$pid
  SERVE_LOG=$log
  SERVE_PIDS+=("$pid")
  export PORT PID URL SERVE_LOG
  echo "$1 is listening on $URL (PID $PID, output in \$SERVE_LOG); stop it with: stop_server"
}

serve_start "$@"
