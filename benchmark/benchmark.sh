#!/usr/bin/env bash
# benchmark.sh: measure the seven servers side by side, the same way, with nginx as the reference.
#
#   ./benchmark/benchmark.sh              the default run: 01..07 and nginx, `ab -n 10000 -c C`, C = 1 10 100 500
#   ./benchmark/benchmark.sh 05 06 -k     only 05 and 06 (and nginx), with keep-alive
#   ./benchmark/benchmark.sh --help       every option
#
# What it does, one function per step:
#   1. installs missing tools (as root) and builds the servers in Release      ensure_tools, build_servers
#   2. checks the environment and says what would distort the numbers          check_environment
#   3. for each server: starts it on a free port, warms it up, runs the load
#      tool at each concurrency, measures what the server spent, stops it     benchmark_server
#   4. appends every full ab/wrk output to benchmark/output.log, checks it    measure_run, check_run
#   5. writes the summary (Markdown, CSV, plot) into benchmark/results/DATE/   write_summary, plot_results
# A second mode (--mode connections) measures what holding idle connections costs each server: connection_cost,
# with the client in idle_conns.cpp.
#
# Exit status: 0 when every check passed; 1 when a check failed, a server did not start or a tool is missing;
# 2 on a bad option. Nothing is left running, even on Ctrl-C or an error (see cleanup).

set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
ALL_SERVERS=(01-blocking-single 02-thread-per-conn 03-select 04-threadpool 05-epoll 06-io_uring 07-asio)
BODY_BYTES=1024   # what every server (and the nginx reference) answers; ab must report exactly this
PERF_EVENTS=task-clock,context-switches,raw_syscalls:sys_enter  # software events: work in VMs too

# ---- Options: every one can also come from the environment ----------------------------------------------

mode=${PSP_MODE:-throughput}
server_list=${PSP_SERVERS:-}
concurrency_list=${PSP_CONCURRENCY:-1 10 100 500}
requests=${PSP_REQUESTS:-10000}
repeat=${PSP_REPEAT:-1}
warmup=${PSP_WARMUP:-1000}
keepalive=${PSP_KEEPALIVE:-0}
tool=${PSP_TOOL:-ab}
duration=${PSP_DURATION:-10s}
wrk_threads=${PSP_WRK_THREADS:-1}
delay_us=${PSP_DELAY_US:-1000}
handler=${PSP_HANDLER:-wait}
threads=${PSP_THREADS:-}
pin=${PSP_PIN:-0}
reference=${PSP_REFERENCE:-1}
use_perf=${PSP_PERF:-1}
conn_list=${PSP_CONNS:-1000 5000 10000}
build_dir=${PSP_BUILD_DIR:-$REPO/build}
no_build=${PSP_NO_BUILD:-0}
results_root=${PSP_RESULTS_DIR:-$SCRIPT_DIR/results}
log_file=${PSP_LOG:-$SCRIPT_DIR/output.log}

usage() {
  cat <<EOF
usage: benchmark/benchmark.sh [options] [SERVER...]

Measures the servers side by side with the same load and checks every run. SERVER is a chapter number
(01..07, or 1..7) or folder name; the default is all seven. The nginx reference row is added unless
--no-reference. Every option can also be set in the environment variable shown.

Load
  -c, --concurrency LIST   concurrency levels (wrk: connections), space or comma separated
                           [PSP_CONCURRENCY, default "1 10 100 500"]
  -n, --requests N         requests per ab run [PSP_REQUESTS, default 10000]
  -r, --repeat N           runs per server and concurrency, each a whole pass over the servers; the
                           summary reports the median and the spread [PSP_REPEAT, default 1]
  -w, --warmup N           warm-up requests before measuring each server, 0 for none [PSP_WARMUP, default 1000]
  -k, --keep-alive         ab -k: reuse connections (HTTP/1.0 keep-alive) [PSP_KEEPALIVE=1]
  -t, --tool ab|wrk        load tool [PSP_TOOL, default ab]; wrk always uses keep-alive, runs for --duration
                           and reports its latency distribution (--latency)
  -d, --duration TIME      wrk run time, e.g. 10s or 1m [PSP_DURATION, default 10s]
      --wrk-threads N      wrk client threads (never more than the connections) [PSP_WRK_THREADS, default 1]

Servers
      --delay-us N         simulated handler time passed to the servers [PSP_DELAY_US, default 1000]
      --handler MODE       wait, sleep or spin, passed to the servers [PSP_HANDLER, default wait]
      --threads N          pool size (04) or event loops (05, 06, 07), and nginx's worker_processes; 01, 02
                           and 03 take no --threads [PSP_THREADS, default: the servers' own; nginx: one per CPU]
      --pin                pin single-threaded servers (01, 03, and 05..07/nginx with one thread) to CPU 0 and
                           the client to CPU 1, which cuts run-to-run spread [PSP_PIN=1]
      --no-reference       leave out the nginx reference row [PSP_REFERENCE=0]

Measurement
      --no-perf            do not count syscalls and context switches with perf stat [PSP_PERF=0]
      --mode MODE          throughput (default), or connections: the cost of idle keep-alive connections
                           [PSP_MODE]
      --conns LIST         connection counts for --mode connections [PSP_CONNS, default "1000 5000 10000"]

Files
      --build-dir DIR      where the servers are built (BUILD/NN-name/run_server) [PSP_BUILD_DIR, default build]
      --no-build           do not build; use the binaries already in --build-dir [PSP_NO_BUILD=1]
      --results-dir DIR    parent of the dated results folder [PSP_RESULTS_DIR, default benchmark/results]
      --log FILE           the log every full ab/wrk output is appended to [PSP_LOG, default benchmark/output.log]
  -h, --help               this help

Examples
  benchmark/benchmark.sh                                  the default run (about 4 minutes on 2 cores)
  benchmark/benchmark.sh -r 3 05 06                       05 and 06 against nginx, median of 3
  benchmark/benchmark.sh -t wrk -c 100 --delay-us 0 05 06 keep-alive, no handler wait
  benchmark/benchmark.sh --mode connections               what 1,000 to 10,000 idle connections cost
EOF
}

die_usage() {
  echo "error: $1" >&2
  echo "run benchmark/benchmark.sh --help for the options" >&2
  exit 2
}

need_value() { [[ $# -ge 2 && -n $2 ]] || die_usage "$1 needs a value"; }

parse_args() {
  while (($# > 0)); do
    case $1 in
      -h | --help) usage; exit 0 ;;
      -c | --concurrency) need_value "$@"; concurrency_list=$2; shift ;;
      -n | --requests) need_value "$@"; requests=$2; shift ;;
      -r | --repeat) need_value "$@"; repeat=$2; shift ;;
      -w | --warmup) need_value "$@"; warmup=$2; shift ;;
      -k | --keep-alive) keepalive=1 ;;
      -t | --tool) need_value "$@"; tool=$2; shift ;;
      -d | --duration) need_value "$@"; duration=$2; shift ;;
      --wrk-threads) need_value "$@"; wrk_threads=$2; shift ;;
      --delay-us) need_value "$@"; delay_us=$2; shift ;;
      --handler) need_value "$@"; handler=$2; shift ;;
      --threads) need_value "$@"; threads=$2; shift ;;
      --pin) pin=1 ;;
      --no-reference) reference=0 ;;
      --no-perf) use_perf=0 ;;
      --mode) need_value "$@"; mode=$2; shift ;;
      --conns) need_value "$@"; conn_list=$2; shift ;;
      --build-dir) need_value "$@"; build_dir=$2; shift ;;
      --no-build) no_build=1 ;;
      --results-dir) need_value "$@"; results_root=$2; shift ;;
      --log) need_value "$@"; log_file=$2; shift ;;
      -*) die_usage "unknown option $1" ;;
      *) server_list+=" $1" ;;
    esac
    shift
  done
}

is_count() { [[ $1 =~ ^[0-9]+$ ]] && (($1 > 0)); }

# Turns the option strings into arrays and refuses what cannot work, before anything is started.
validate_options() {
  read -ra concurrencies <<<"${concurrency_list//,/ }"
  read -ra conn_counts <<<"${conn_list//,/ }"
  local value
  for value in "${concurrencies[@]}"; do is_count "$value" || die_usage "bad concurrency '$value'"; done
  for value in "${conn_counts[@]}"; do is_count "$value" || die_usage "bad connection count '$value'"; done
  ((${#concurrencies[@]} > 0)) || die_usage "no concurrency level given"
  is_count "$requests" || die_usage "bad request count '$requests'"
  is_count "$repeat" || die_usage "bad repetition count '$repeat'"
  is_count "$wrk_threads" || die_usage "bad wrk thread count '$wrk_threads'"
  [[ $warmup =~ ^[0-9]+$ ]] || die_usage "bad warm-up count '$warmup'"
  [[ $delay_us =~ ^[0-9]+$ ]] || die_usage "bad --delay-us '$delay_us'"
  [[ -z $threads ]] || is_count "$threads" || die_usage "bad --threads '$threads'"
  [[ $handler =~ ^(wait|sleep|spin)$ ]] || die_usage "--handler must be wait, sleep or spin"
  [[ $mode =~ ^(throughput|connections)$ ]] || die_usage "--mode must be throughput or connections"
  [[ $tool =~ ^(ab|wrk)$ ]] || die_usage "--tool must be ab or wrk"
  [[ $duration =~ ^([0-9]+)(s|m)?$ ]] || die_usage "bad --duration '$duration' (e.g. 10s or 2m)"
  duration_s=${BASH_REMATCH[1]}
  if [[ ${BASH_REMATCH[2]} == m ]]; then duration_s=$((duration_s * 60)); fi
  if [[ $tool == wrk ]]; then keepalive=1; fi
  if [[ $tool == ab ]]; then
    for value in "${concurrencies[@]}"; do
      ((value <= requests)) || die_usage "concurrency $value is above the request count $requests (ab refuses it)"
    done
  fi

  servers=()
  local name folder found
  for name in ${server_list:-${ALL_SERVERS[*]}}; do
    if [[ $name =~ ^[1-7]$ ]]; then name=0$name; fi
    found=
    for folder in "${ALL_SERVERS[@]}"; do
      if [[ $folder == "$name" || $folder == "$name"-* ]]; then found=$folder; fi
    done
    [[ -n $found ]] || die_usage "unknown server '$name' (expected 01..07)"
    servers+=("$found")
  done
  if ((reference)); then servers+=(nginx); fi
  nginx_workers=${threads:-$(nproc)}
}

# ---- Small helpers ----------------------------------------------------------------------------------------

say() { printf '%s\n' "$*"; }
warnings=()
warn() {
  say "warning: $*" >&2
  warnings+=("$*")
}
failures=0
fail_check() {
  say "  !! CHECK FAILED: $*" >&2
  failures=$((failures + 1))
}
now() { date -u '+%Y-%m-%d %H:%M:%S UTC'; }

# Floating-point arithmetic for the per-request figures; prints n/a when the divisor is zero or missing.
ratio() { awk -v a="$1" -v b="$2" -v f="${3:-%.2f}" 'BEGIN { if (b + 0 == 0 || a == "n/a") print "n/a"; else printf f "\n", a / b }'; }

# ---- Cleanup: whatever happens, stop what we started (by PID, never by name) ------------------------------

TMP=
server_pid=
server_pids=()
sampler_pid=
client_pid=

# shellcheck disable=SC2317  # (shellcheck does not see that the EXIT trap calls it)
cleanup() {
  local status=$?
  if [[ -n $client_pid ]]; then
    kill -TERM "$client_pid" 2>/dev/null || true
    wait "$client_pid" 2>/dev/null || true
  fi
  stop_thread_sampler
  stop_server >/dev/null 2>&1 || true
  if [[ -n $TMP ]]; then rm -rf "$TMP"; fi
  exit "$status"
}
trap cleanup EXIT
trap 'say "interrupted: stopping the server and leaving" >&2; exit 130' INT TERM

# ---- 1. Tools and build -----------------------------------------------------------------------------------

have() { command -v "$1" >/dev/null 2>&1 || [[ -x /usr/sbin/$1 ]]; }

# Installs what this run needs when it is missing (as root; otherwise prints the apt-get line and stops).
# gnuplot and perf are optional: without them there is no plot, and the syscall column says why.
ensure_tools() {
  # shellcheck source=/dev/null  # (a path shellcheck cannot resolve from every working directory)
  source "$REPO/tools/ensure-packages.sh"
  local needed=()
  have ab || needed+=(apache2-utils)
  if [[ $tool == wrk ]] && ! have wrk; then needed+=(wrk); fi
  if ((reference)) && ! have nginx; then needed+=(nginx); fi
  if ((${#needed[@]} > 0)); then
    ensure_packages "${needed[@]}" || { say "error: the benchmark needs: ${needed[*]}" >&2; exit 1; }
  fi
  local command_name
  for command_name in ab $([[ $tool == wrk ]] && echo wrk) $( ((reference)) && echo nginx); do
    have "$command_name" || { say "error: $command_name is needed but not found in PATH" >&2; exit 1; }
  done
  if ! have gnuplot; then ensure_packages gnuplot-nox || say "(no plot without gnuplot)" >&2; fi
  if ((use_perf)) && [[ $mode == throughput ]] && ! have perf; then
    ensure_packages linux-perf || say "(no syscall counts without perf)" >&2
  fi
}

server_binary() { printf '%s/%s/run_server' "$build_dir" "$1"; }
client_binary() { printf '%s/benchmark/idle_conns' "$build_dir"; }

# Builds the servers (and idle_conns) in Release. cmake --build is incremental, so running it every time
# costs a second and guarantees we never measure a stale binary. --no-build only checks they exist.
build_servers() {
  local targets=() binaries=() name
  for name in "${servers[@]}"; do
    if [[ $name != nginx ]]; then
      targets+=("server_${name:0:2}")
      binaries+=("$(server_binary "$name")")
    fi
  done
  if [[ $mode == connections ]]; then
    targets+=(idle_conns)
    binaries+=("$(client_binary)")
  fi
  if ((${#targets[@]} == 0)); then return 0; fi
  if ((!no_build)); then
    if [[ ! -f $build_dir/CMakeCache.txt ]]; then
      ensure_packages cmake g++ make pkg-config liburing-dev libboost-dev libgtest-dev || exit 1
      say "configuring a Release build in $build_dir"
      cmake -S "$REPO" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release >"$TMP/build.log" 2>&1 ||
        { tail -20 "$TMP/build.log" >&2; say "error: cmake could not configure $build_dir" >&2; exit 1; }
    fi
    say "building ${targets[*]} in $build_dir"
    cmake --build "$build_dir" -j "$(nproc)" --target "${targets[@]}" >"$TMP/build.log" 2>&1 ||
      { tail -30 "$TMP/build.log" >&2; say "error: the build failed (output above)" >&2; exit 1; }
  fi
  for name in "${binaries[@]}"; do
    [[ -x $name ]] || { say "error: $name is missing; build it or drop --no-build" >&2; exit 1; }
  done
  # A Debug or sanitizer build would measure the instrumentation, not the I/O model.
  local type sanitize
  type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build_dir/CMakeCache.txt" 2>/dev/null || true)
  sanitize=$(sed -n 's/^PSP_SANITIZE:[A-Z]*=//p' "$build_dir/CMakeCache.txt" 2>/dev/null || true)
  build_type=${type:-unknown}${sanitize:+ + $sanitize sanitizer}
  if [[ $type != Release || -n $sanitize ]]; then
    warn "the servers in $build_dir are a '$build_type' build, not Release: the numbers are not comparable"
  fi
}

# ---- 2. The environment -----------------------------------------------------------------------------------

perf_state=  # "ok", or why the perf columns are missing
probe_perf() {
  if ((!use_perf)); then perf_state="n/a (--no-perf)"; return; fi
  if ! have perf; then perf_state="n/a (perf missing)"; return; fi
  local out
  if out=$(perf stat -x, -e "$PERF_EVENTS" -- true 2>&1) &&
    ! grep -q 'not supported' <<<"$out"; then
    perf_state=ok
  elif grep -qi 'permission\|paranoid\|access' <<<"$out"; then
    perf_state="n/a (perf not permitted)"
  else
    perf_state="n/a (perf cannot count syscalls)"
  fi
}

describe_machine() {
  cpu_model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
  cpu_count=$(nproc)
  kernel=$(uname -r)
  # shellcheck source=/dev/null
  os=$( (. /etc/os-release && echo "$PRETTY_NAME") 2>/dev/null || echo unknown)
  memory=$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
  virt=$(awk -F': *' '/^Hypervisor vendor/ { print $2 }' <(lscpu 2>/dev/null) || true)
  commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo "no commit")
  if [[ $commit != "no commit" ]] && ! git -C "$REPO" diff --quiet HEAD 2>/dev/null; then commit+="-dirty"; fi
  ab_version=$(ab -V 2>/dev/null | awk 'NR == 1 { print $5 }')
}

# How busy the CPUs are, over one second, in percent (from the idle time in /proc/stat).
cpu_busy_percent() {
  local first second
  first=$(awk '/^cpu / { print $2 + $3 + $4 + $5 + $6 + $7 + $8, $5 + $6 }' /proc/stat)
  sleep 1
  second=$(awk '/^cpu / { print $2 + $3 + $4 + $5 + $6 + $7 + $8, $5 + $6 }' /proc/stat)
  awk -v a="$first" -v b="$second" 'BEGIN { split(a, x, " "); split(b, y, " "); total = y[1] - x[1]
    printf "%d\n", (total > 0) ? 100 * (1 - (y[2] - x[2]) / total) + 0.5 : 0 }'
}

# Says what it found, raises the soft descriptor limit if it must, and warns about what distorts results.
check_environment() {
  local max_c=0 value need soft hard
  for value in "${concurrencies[@]}"; do
    if ((value > max_c)); then max_c=$value; fi
  done
  if [[ $mode == connections ]]; then
    for value in "${conn_counts[@]}"; do
      if ((value > max_c)); then max_c=$value; fi
    done
  fi
  say "environment"
  say "  machine: $cpu_model, $cpu_count CPUs, $memory${virt:+, $virt VM}; $os; kernel $kernel"
  say "  commit: $commit; servers: $build_dir ($build_type)"
  say "  ab: $(command -v ab) ($ab_version)"
  if [[ $tool == wrk ]]; then say "  wrk: $(command -v wrk)"; fi

  # Each of the client and the server holds one descriptor per connection, plus a few of its own.
  need=$((max_c + 64))
  soft=$(ulimit -Sn)
  hard=$(ulimit -Hn)
  if [[ $soft != unlimited ]] && ((soft < need)); then
    if [[ $hard != unlimited ]] && ((hard < need)) && ((EUID == 0)); then ulimit -Hn "$need" 2>/dev/null || true; fi
    ulimit -Sn "$need" 2>/dev/null || true
    say "  open files: soft limit raised from $soft to $(ulimit -Sn) (need $need)"
  else
    say "  open files: soft limit $soft (need $need)"
  fi
  soft=$(ulimit -Sn)
  if [[ $soft != unlimited ]] && ((soft < need)); then
    warn "ulimit -n is $soft but $max_c connections need about $need descriptors: expect EMFILE and failures (raise the hard limit)"
  fi

  # The accept queue must hold every connection that arrives at once: idle_conns opens at most 500 at a time.
  local burst=$max_c
  if [[ $mode == connections ]]; then burst=500; fi
  value=$(cat /proc/sys/net/core/somaxconn)
  say "  net.core.somaxconn: $value (connections arriving at once: up to $burst)"
  if ((value < burst)); then
    warn "net.core.somaxconn is $value, below the $burst connections that arrive at once: the accept queue overflows and dropped SYNs add 1 s retries (sysctl -w net.core.somaxconn=4096)"
  fi
  value=$(cat /proc/sys/net/ipv4/tcp_tw_reuse)
  if ((value == 0 && !keepalive)); then
    warn "net.ipv4.tcp_tw_reuse is 0: thousands of new connections a second can exhaust the client's ports (sysctl -w net.ipv4.tcp_tw_reuse=2)"
  fi
  if ((cpu_count < 2)); then
    warn "one CPU: the client and the server share it, so every server looks slower than it is"
    pin=0
  fi
  # Other work on the machine competes with the client and the server. The load average also counts our own
  # build of a minute ago, so look at the CPUs over the last second instead.
  busy=$(cpu_busy_percent)
  say "  CPUs busy before the run: $busy % (load average $start_load)"
  if ((busy > 15)); then
    warn "the CPUs are $busy % busy with other work before the run: expect noisy, lower numbers"
  fi
  if [[ $mode == connections ]]; then return 0; fi
  probe_perf
  if [[ $perf_state == ok ]]; then say "  perf: counting context switches and syscalls of the server"
  else say "  perf: $perf_state; the syscall column will say so"; fi
  if have gnuplot; then say "  gnuplot: a plot will be drawn"; else say "  gnuplot: missing, no plot"; fi
}

# ---- 3. One server: start, measure, stop ------------------------------------------------------------------

is_single_threaded() {
  case $1 in
    01-* | 03-*) return 0 ;;
    05-* | 06-* | 07-*) [[ ${threads:-$(nproc)} == 1 ]] ;;
    nginx) [[ $nginx_workers == 1 ]] ;;
    *) return 1 ;;
  esac
}

# The flags each server gets. 01, 02 and 03 refuse --threads (they have no pool and no loops to size).
server_flags() {
  local flags=(--delay-us "$delay_us" --handler "$handler")
  case $1 in 04-* | 05-* | 06-* | 07-*) if [[ -n $threads ]]; then flags+=(--threads "$threads"); fi ;; esac
  # Held idle connections must outlive the measurement; the default idle timeout is 5 s.
  if [[ $mode == connections ]]; then flags+=(--idle-timeout 600); fi
  printf '%s\n' "${flags[@]}"
}

# server_pids: the server and its child processes (nginx's workers; our servers have none). Scans the parent
# of every process, since /proc/PID/task/TID/children is not in every kernel.
find_server_pids() {
  server_pids=("$server_pid")
  local stat rest ppid
  for stat in /proc/[0-9]*/stat; do
    rest=$(cat "$stat" 2>/dev/null) || continue
    rest=${rest##*) }
    read -r _ ppid _ <<<"$rest"
    if [[ $ppid == "$server_pid" ]]; then
      stat=${stat#/proc/}
      server_pids+=("${stat%/stat}")
    fi
  done
}

# Starts a server with --port 0 and reads the port from its first line, `listening on http://HOST:PORT/`.
# Sets server_pid and server_port; on failure prints one sentence and returns 1.
start_server() {
  local name=$1 out=$TMP/$1.stdout err=$TMP/$1.stderr line flags prefix=()
  mapfile -t flags < <(server_flags "$name")
  if ((pin)) && is_single_threaded "$name"; then prefix=(taskset -c 0); fi
  server_command="$name/run_server --port 0 ${flags[*]}"
  rm -f "$out"  # the loop below must not read an earlier instance's port
  "${prefix[@]}" "$(server_binary "$name")" --port 0 "${flags[@]}" >"$out" 2>"$err" &
  server_pid=$!
  local deadline=$((SECONDS + 10))
  while ((SECONDS < deadline)); do
    line=
    if [[ -s $out ]]; then IFS= read -r line <"$out" || true; fi
    if [[ $line =~ ^listening\ on\ http://127\.0\.0\.1:([0-9]+)/$ ]]; then
      server_port=${BASH_REMATCH[1]}
      find_server_pids
      return 0
    fi
    if ! kill -0 "$server_pid" 2>/dev/null; then
      local status=0
      wait "$server_pid" || status=$?
      server_pid=
      say "error: $name did not start (exit status $status): $(head -c 300 "$err" | head -1)" >&2
      return 1
    fi
    sleep 0.05
  done
  say "error: $name printed no 'listening on http://127.0.0.1:PORT/' line within 10 s" >&2
  stop_server
  return 1
}

# The reference: nginx serving a 1 KB file, from a configuration generated here, on 127.0.0.1, with as many
# workers as the servers have threads. access_log off: our servers do not log either.
# keepalive_requests is raised so that, like our servers, nginx never closes a busy keep-alive connection.
start_nginx() {
  local dir=$TMP/nginx port user_line='' max_conns=1024 value prefix=() nginx_bin
  local counts=("${concurrencies[@]}")
  if [[ $mode == connections ]]; then counts=("${conn_counts[@]}"); fi
  for value in "${counts[@]}"; do
    if ((value + 1024 > max_conns)); then max_conns=$((value + 1024)); fi
  done
  mkdir -p "$dir/www" "$dir/temp"
  head -c "$BODY_BYTES" /dev/zero | tr '\0' 'x' >"$dir/www/index.html"
  # As root, nginx's workers drop to an unprivileged user, who must be able to read the file.
  if ((EUID == 0)); then
    user_line="user nobody nogroup;"
    chmod 755 "$TMP" "$dir" "$dir/www"
    chmod 644 "$dir/www/index.html"
  fi
  server_command="nginx -p $dir -c nginx.conf (worker_processes $nginx_workers)"
  for _ in 1 2 3 4 5; do  # a few tries, in case another program takes the port first
    port=$((20000 + RANDOM % 12000))  # below the ephemeral range, so the clients' ports never collide with it
    if (: <>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi  # someone listens there
    cat >"$dir/nginx.conf" <<EOF
# generated by benchmark.sh for one run; deleted afterwards
$user_line
daemon off;
worker_processes $nginx_workers;
worker_rlimit_nofile $((max_conns * 2));
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections $max_conns; }
http {
  access_log off;
  default_type text/plain;
  keepalive_requests 1000000;
  keepalive_timeout 600s;
  client_body_temp_path $dir/temp/body;
  proxy_temp_path $dir/temp/proxy;
  fastcgi_temp_path $dir/temp/fastcgi;
  uwsgi_temp_path $dir/temp/uwsgi;
  scgi_temp_path $dir/temp/scgi;
  server {
    listen 127.0.0.1:$port backlog=4096;
    root $dir/www;
    location / { try_files /index.html =404; }
  }
}
EOF
    nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
    if ((pin)) && is_single_threaded nginx; then prefix=(taskset -c 0); fi
    "${prefix[@]}" "$nginx_bin" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" >"$TMP/nginx.out" 2>&1 &
    server_pid=$!
    local deadline=$((SECONDS + 10))
    while ((SECONDS < deadline)) && kill -0 "$server_pid" 2>/dev/null; do
      if (: <>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
      sleep 0.05
    done
    if kill -0 "$server_pid" 2>/dev/null; then
      server_port=$port
      # The master binds the port before it forks the workers: wait for them too.
      while ((SECONDS < deadline)); do
        find_server_pids
        if ((${#server_pids[@]} > nginx_workers)); then return 0; fi
        sleep 0.05
      done
      stop_server
      break
    fi
    wait "$server_pid" 2>/dev/null || true
    server_pid=
    grep -q 'Address already in use' "$dir/error.log" "$TMP/nginx.out" 2>/dev/null || break
  done
  say "error: nginx did not start: $(grep -h -m1 'emerg\|alert\|error' "$dir/error.log" "$TMP/nginx.out" 2>/dev/null | head -1)" >&2
  return 1
}

# SIGTERM, then SIGKILL after 5 s (servers finish the responses in flight within about 2 s). Sets server_exit.
stop_server() {
  server_exit=
  if [[ -z $server_pid ]]; then return 0; fi
  kill -TERM "$server_pid" 2>/dev/null || true
  local deadline=$((SECONDS + 5)) pid
  while kill -0 "$server_pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.05; done
  for pid in "${server_pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  server_exit=0
  wait "$server_pid" 2>/dev/null || server_exit=$?
  server_pid=
  server_pids=()
}

# ---- Reading what the server spent, from /proc and perf ---------------------------------------------------

# utime + stime (+ cutime + cstime, zero here: the servers do not fork) in clock ticks, of every server
# process. Linux adds a thread's times to its process when the thread exits, so 02's finished threads count.
cpu_ticks() {
  local pid
  for pid in "${server_pids[@]}"; do cat "/proc/$pid/stat" 2>/dev/null || true; done |
    awk '{ sub(/.*\) /, ""); total += $12 + $13 + $14 + $15 } END { print total + 0 }'
}

# Sum of a /proc/PID/status field (VmHWM:, Threads:) over the server's processes.
status_sum() {
  local key=$1 pid
  for pid in "${server_pids[@]}"; do cat "/proc/$pid/status" 2>/dev/null || true; done |
    awk -v key="$key" '$1 == key { total += $2 } END { print total + 0 }'
}

# Context switches without perf: the counters in /proc are per thread, so sum the live threads (02's finished
# threads are lost; perf counts them).
proc_context_switches() {
  local pid file
  for pid in "${server_pids[@]}"; do
    for file in "/proc/$pid/task/"*/status; do cat "$file" 2>/dev/null || true; done
  done | awk '/ctxt_switches/ { total += $2 } END { print total + 0 }'
}

# Peak RSS since the last reset: writing 5 to clear_refs resets VmHWM (Linux 4.0+), so each run gets its own peak.
reset_peak_rss() {
  local pid
  peak_rss_scope=run
  for pid in "${server_pids[@]}"; do
    echo 5 2>/dev/null >"/proc/$pid/clear_refs" || peak_rss_scope="since start"
  done
}

# 02 creates and ends a thread per connection, so the thread count at the end of a run says nothing about its
# peak: sample it every 0.1 s while the load runs.
start_thread_sampler() {
  : >"$TMP/threads.samples"
  (while :; do
    status_sum Threads: >>"$TMP/threads.samples"
    sleep 0.1
  done) &
  sampler_pid=$!
}

stop_thread_sampler() {
  if [[ -z $sampler_pid ]]; then return 0; fi
  kill "$sampler_pid" 2>/dev/null || true
  wait "$sampler_pid" 2>/dev/null || true
  sampler_pid=
}

# Runs a client (ab, wrk, idle_conns) under `timeout`, in the background, and waits for it. Two reasons:
# bash runs the Ctrl-C trap only once a *foreground* command has ended, whereas `wait` returns at once; and
# timeout puts the client in its own process group and passes a SIGTERM on to all of it (perf, taskset, ab),
# so cleanup stops the whole chain through one PID. run_client SECONDS STDOUT STDERR COMMAND...
run_client() {
  local seconds=$1 out=$2 err=$3 status=0
  shift 3
  if [[ $out == "$err" ]]; then
    timeout --kill-after=5 "$seconds" "$@" >"$out" 2>&1 &
  else
    timeout --kill-after=5 "$seconds" "$@" >"$out" 2>"$err" &
  fi
  client_pid=$!
  wait "$client_pid" || status=$?
  client_pid=
  return "$status"
}

# ---- One measured run --------------------------------------------------------------------------------------

log_header() {  # $1: what ran; $2: the load command
  printf '\n==== %s | %s | %s | server: %s | pinned: %s | commit %s | kernel %s | %s x%s ====\n' \
    "$(now)" "$1" "$2" "$server_command" "$pinned" "$commit" "$kernel" "$cpu_model" "$cpu_count" >>"$log_file"
}

# Extracts one field from ab's output: ab_field 'Failed requests:' 3
ab_field() { awk -v label="$1" -v n="$2" 'index($0, label) == 1 { print $n; exit }' "$TMP/run.out"; }

# Parses ab's or wrk's output in $TMP/run.out into: complete failed non2xx rps mean_ms p99_ms doc_length.
parse_output() {
  if [[ $tool == ab ]]; then
    complete=$(ab_field 'Complete requests:' 3)
    failed=$(ab_field 'Failed requests:' 3)
    non2xx=$(ab_field 'Non-2xx responses:' 3)
    rps=$(ab_field 'Requests per second:' 4)
    mean_ms=$(ab_field 'Time per request:' 4)
    doc_length=$(ab_field 'Document Length:' 3)
    p99_ms=$(awk -F, '$1 == 99 { print $2 }' "$TMP/percentiles.csv" 2>/dev/null || true)
  else
    # wrk prints times with units (812.00us, 1.20ms, 1.01s): convert to ms.
    read -r complete failed non2xx rps mean_ms p99_ms < <(awk '
      function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0
                       if (v ~ /m$/) return v * 60000; return v * 1000 }
      $1 == "Latency" && mean == "" { mean = ms($2) }
      $1 == "99%" { p99 = ms($2) }
      $2 == "requests" && $3 == "in" { complete = $1 }
      /Socket errors:/ { gsub(/,/, ""); errors = $4 + $6 + $8 + $10 }
      /Non-2xx or 3xx responses:/ { non2xx = $5 }
      $1 == "Requests/sec:" { rps = $2 }
      function or_na(v) { return v == "" ? "n/a" : v }
      END { printf "%d %d %d %s %s %s\n", complete, errors, non2xx, or_na(rps), or_na(mean), or_na(p99) }' "$TMP/run.out")
    doc_length=$BODY_BYTES  # wrk does not report it; the ab warm-up checked it
  fi
  complete=${complete:-0} failed=${failed:-n/a} non2xx=${non2xx:-0}
  rps=${rps:-n/a} mean_ms=${mean_ms:-n/a} p99_ms=${p99_ms:-n/a}
}

# The checks every run must pass; each failure is printed loudly and counted. Sets run_check.
check_run() {
  local what=$1 status=$2 expected=$3 problems=()
  if ((status == 124 || status == 137)); then problems+=("$tool timed out")
  elif ((status != 0)); then problems+=("$tool exited with status $status: $(tail -1 "$TMP/run.out")"); fi
  if [[ $doc_length != "$BODY_BYTES" ]]; then problems+=("Document Length: ${doc_length:-none} (expected $BODY_BYTES bytes)"); fi
  if [[ $failed != 0 ]]; then
    if [[ $tool == ab ]]; then problems+=("Failed requests: $failed"); else problems+=("socket errors: $failed"); fi
  fi
  if [[ $non2xx != 0 ]]; then problems+=("Non-2xx responses: $non2xx"); fi
  if [[ -n $expected && $complete != "$expected" ]]; then problems+=("Complete requests: $complete of $expected"); fi
  if ! kill -0 "$server_pid" 2>/dev/null; then problems+=("the server died"); fi
  run_check=ok
  if ((${#problems[@]} > 0)); then
    local problem
    for problem in "${problems[@]}"; do fail_check "$what: $problem"; done
    run_check="FAILED: $(IFS=';'; echo "${problems[*]//,/}")"
  fi
}

load_command() {  # $1: concurrency, $2: requests (ab) -> fills the array `load_cmd`
  if [[ $tool == ab ]]; then
    load_cmd=(ab -q -r -n "$2" -c "$1")
    if ((keepalive)); then load_cmd+=(-k); fi
  else
    load_cmd=(wrk -t "$((wrk_threads < $1 ? wrk_threads : $1))" -c "$1" -d "$duration" --latency)
  fi
  load_cmd+=("http://127.0.0.1:$server_port/")
}

# Warm-up: page faults, thread pools, caches. Always ab, so that in wrk mode too the body length is checked.
warm_up() {
  local name=$1 c=10 status=0
  if ((warmup == 0)); then return 0; fi
  if ((keepalive)); then c=1; fi  # 01 and 04 serve one keep-alive connection per thread: more would hang
  if ((c > warmup)); then c=$warmup; fi
  load_cmd=(ab -q -r -n "$warmup" -c "$c")
  if ((keepalive)); then load_cmd+=(-k); fi
  load_cmd+=("http://127.0.0.1:$server_port/")
  log_header "$name warm-up" "${load_cmd[*]}"
  run_client $((60 + warmup / 20)) "$TMP/run.out" "$TMP/run.out" "${client_prefix[@]}" "${load_cmd[@]}" || status=$?
  cat "$TMP/run.out" >>"$log_file"
  local saved_tool=$tool
  tool=ab
  parse_output
  check_run "$name warm-up" "$status" "$warmup"
  tool=$saved_tool
}

# One measured run at concurrency $2; appends a row to raw.csv.
measure_run() {
  local name=$1 c=$2 rep=$3 status=0 limit cpu_before ctx_before perf_pids
  load_command "$c" "$requests"
  say "  ${load_cmd[*]}"
  log_header "$name c=$c run $rep/$repeat" "${load_cmd[*]}"
  if [[ $tool == ab ]]; then limit=$((60 + requests / 50)); else limit=$((duration_s + 60)); fi
  local wrapped=("${client_prefix[@]}" "${load_cmd[@]}")
  if [[ $tool == ab ]]; then
    # -e: the same percentiles as ab's table, which prints whole milliseconds, with decimals.
    wrapped=("${client_prefix[@]}" ab -e "$TMP/percentiles.csv" "${load_cmd[@]:1}")
  fi
  if [[ $perf_state == ok ]]; then
    perf_pids=$(IFS=,; echo "${server_pids[*]}")
    # With -p, perf counts only the server (and the threads it creates), for as long as the client runs.
    wrapped=(perf stat -x "," -e "$PERF_EVENTS" -p "$perf_pids" -o "$TMP/perf.txt" -- "${wrapped[@]}")
  fi
  rm -f "$TMP/percentiles.csv" "$TMP/perf.txt"
  reset_peak_rss
  cpu_before=$(cpu_ticks)
  ctx_before=$(proc_context_switches)
  start_thread_sampler
  run_client "$limit" "$TMP/run.out" "$TMP/run.out" "${wrapped[@]}" || status=$?
  stop_thread_sampler
  local cpu_after ctx_after peak_rss peak_threads
  cpu_after=$(cpu_ticks)
  ctx_after=$(proc_context_switches)
  peak_rss=$(status_sum VmHWM:)
  peak_threads=$( (cat "$TMP/threads.samples"; status_sum Threads:) | sort -n | tail -1)

  cat "$TMP/run.out" >>"$log_file"
  parse_output
  local expected=$requests
  if [[ $tool == wrk ]]; then expected=; fi
  check_run "$name c=$c" "$status" "$expected"

  # Per request: CPU from /proc (clock ticks), context switches and syscalls from perf when it counted.
  local ticks_per_s cpu_us ctx_per_req syscalls_per_req="$perf_state"
  if [[ $perf_state == ok ]]; then syscalls_per_req=n/a; fi  # unless perf reports below
  ticks_per_s=$(getconf CLK_TCK)
  cpu_us=$(ratio "$(((cpu_after - cpu_before) * 1000000 / ticks_per_s))" "$complete" %.1f)
  ctx_per_req=$(ratio $((ctx_after - ctx_before)) "$complete")
  if [[ $perf_state == ok && -s $TMP/perf.txt ]]; then
    ctx_per_req=$(ratio "$(awk -F, '$3 == "context-switches" { print $1 + 0 }' "$TMP/perf.txt")" "$complete")
    syscalls_per_req=$(ratio "$(awk -F, '$3 == "raw_syscalls:sys_enter" { print $1 + 0 }' "$TMP/perf.txt")" "$complete" %.1f)
    { echo "--- perf stat of the server during this run"; grep -v '^#\|^$' "$TMP/perf.txt"; } >>"$log_file"
  fi
  echo "--- what the server spent: cpu_us_per_req=$cpu_us ctxsw_per_req=$ctx_per_req syscalls_per_req=$syscalls_per_req peak_rss_kib=$peak_rss ($peak_rss_scope) peak_threads=$peak_threads" >>"$log_file"

  # The selected lines, as the run goes.
  if [[ $tool == ab ]]; then
    grep -E '^(Failed requests|Non-2xx responses|Time per request|Requests per second):' "$TMP/run.out" | sed 's/^/  /' || true
  else
    grep -E 'Latency  |99%|requests in|Socket errors|Non-2xx|Requests/sec' "$TMP/run.out" | sed 's/^ */  /' || true
  fi
  say "  server per request: ${cpu_us} us CPU, $ctx_per_req context switches, $syscalls_per_req syscalls; peak $((peak_rss / 1024)) MiB RSS, $peak_threads threads"
  echo "$name,$c,$rep,$rps,$mean_ms,$p99_ms,$complete,$failed,$non2xx,$cpu_us,$ctx_per_req,$syscalls_per_req,$peak_rss,$peak_threads,$run_check" >>"$raw_csv"
}

progress=0
# One pass over one server: start it, warm it up, one run at each concurrency, stop it. With --repeat, main
# makes one pass over all the servers per repetition, rather than repeating each row back to back: a burst
# of other work on the machine then lands on every server a little, instead of on one server's whole row.
benchmark_server() {
  local name=$1 rep=$2 c runs_left=${#concurrencies[@]} pass=""
  client_prefix=()
  pinned=no
  if ((pin)) && is_single_threaded "$name"; then client_prefix=(taskset -c 1); pinned="server CPU 0, client CPU 1"; fi
  if ((repeat > 1)); then pass=" (run $rep/$repeat)"; fi
  say ""
  say "== $name$pass"
  local started=0
  if [[ $name == nginx ]]; then start_nginx && started=1; else start_server "$name" && started=1; fi
  if ((!started)); then
    fail_check "$name did not start"
    for c in "${concurrencies[@]}"; do echo "$name,$c,$rep,n/a,n/a,n/a,0,n/a,0,n/a,n/a,n/a,n/a,n/a,FAILED: did not start" >>"$raw_csv"; done
    progress=$((progress + runs_left))
    return 0
  fi
  say "  $server_command on port $server_port (pid ${server_pids[*]})"
  warm_up "$name"
  for c in "${concurrencies[@]}"; do
    progress=$((progress + 1))
    runs_left=$((runs_left - 1))
    say "[$progress/$total_runs] $name c=$c$pass"
    measure_run "$name" "$c" "$rep"
    if ! kill -0 "$server_pid" 2>/dev/null; then
      stop_server
      say "  $name died (exit status $server_exit); skipping its remaining runs in this pass" >&2
      progress=$((progress + runs_left))
      return 0
    fi
  done
  stop_server
  if [[ -n $server_exit && $server_exit != 0 ]]; then warn "$name exited with status $server_exit on SIGTERM (expected 0)"; fi
}

# ---- The connection-cost mode --------------------------------------------------------------------------

# Opens N idle keep-alive connections (idle_conns) to a fresh server, for each N, and records what they cost.
connection_cost() {
  local name=$1 n line status started
  pinned=no
  client_prefix=()
  say ""
  say "== $name"
  for n in "${conn_counts[@]}"; do
    progress=$((progress + 1))
    say "[$progress/$total_runs] $name: $n idle connections"
    started=0
    if [[ $name == nginx ]]; then start_nginx && started=1; else start_server "$name" && started=1; fi
    if ((!started)); then
      fail_check "$name did not start"
      echo "$name,$n,,,,,,,,,,,,,,,FAILED: did not start" >>"$raw_csv"
      continue
    fi
    local cmd=("$(client_binary)" --port "$server_port" --connections "$n" --pid "$server_pid")
    log_header "$name connections=$n" "idle_conns --connections $n"
    status=0
    run_client $((120 + n / 20)) "$TMP/run.out" "$TMP/run.err" "${cmd[@]}" || status=$?
    cat "$TMP/run.out" "$TMP/run.err" >>"$log_file"
    line=$(tail -1 "$TMP/run.out")
    record_connection_cost "$name" "$n" "$status" "$line"
    stop_server
  done
}

# Turns idle_conns' key=value line into a row, printing the gist and checking it.
record_connection_cost() {
  local name=$1 n=$2 status=$3 line=$4 key problems=()
  local -A r=()
  for key in $line; do r[${key%%=*}]=${key#*=}; done
  if ((status != 0)) || [[ -z ${r[held]:-} ]]; then
    problems+=("idle_conns failed (status $status): $(head -1 "$TMP/run.err")")
  else
    say "  held ${r[held]}, refused ${r[refused]}, closed ${r[closed]}, blocked ${r[blocked]}, dropped ${r[dropped]} (set up in ${r[setup_s]} s)"
    say "  per held connection: ${r[rss_kib_per_conn]} KiB RSS, ${r[threads_per_conn]} threads, ${r[fds_per_conn]} descriptors"
    say "  a new client meanwhile: ${r[probe_ok]}/${r[probes]} answered, median ${r[probe_median_ms]} ms, max ${r[probe_max_ms]} ms (${r[probe_refused]} refused, ${r[probe_timeout]} timed out)"
    ((r[server_alive] == 1)) || problems+=("the server died")
    ((r[after_status] == 200)) || problems+=("no answer to a new client after the connections were released")
    ((r[dropped] == 0)) || problems+=("${r[dropped]} held connections were closed by the server")
    # select() cannot watch an fd >= FD_SETSIZE (1024): past it, 03 must answer 503 or close, never hold.
    if [[ $name == 03-* ]] && ((r[held] >= 1024)); then
      problems+=("03 held ${r[held]} connections, more than select() can watch (FD_SETSIZE 1024)")
    fi
    # 01 and 04 serve one connection per thread: blocked connections and a waiting newcomer are their cost,
    # shown in the table, not a failure. Every other model must serve or refuse each connection, and answer
    # a newcomer promptly (03 past FD_SETSIZE answers it 503: refused cleanly is fine).
    case $name in
      01-* | 04-*) ;;
      *)
        ((r[blocked] == 0)) || problems+=("${r[blocked]} connections were neither answered nor refused")
        ((r[probe_timeout] == 0)) || problems+=("a new client got no answer while the connections were held")
        if [[ ${r[probe_median_ms]} != n/a ]] && awk -v ms="${r[probe_median_ms]}" 'BEGIN { exit !(ms > 20) }'; then
          problems+=("a new client waited ${r[probe_median_ms]} ms (median), not promptly (20 ms at most)")
        fi
        ;;
    esac
  fi
  local check=ok problem
  if ((${#problems[@]} > 0)); then
    for problem in "${problems[@]}"; do fail_check "$name with $n connections: $problem"; done
    check="FAILED: $(IFS=';'; echo "${problems[*]//,/}")"
  fi
  echo "$name,$n,${r[held]:-},${r[refused]:-},${r[closed]:-},${r[blocked]:-},${r[dropped]:-},${r[rss_kib_per_conn]:-},${r[threads_per_conn]:-},${r[fds_per_conn]:-},${r[probe_ok]:-},${r[probe_refused]:-},${r[probe_timeout]:-},${r[probe_median_ms]:-},${r[probe_max_ms]:-},${r[after_status]:-},$check" >>"$raw_csv"
}

# ---- 5. The summary -----------------------------------------------------------------------------------------

# The median of each column over the repetitions (an even count takes the mean of the middle two), the
# spread of req/s as (max - min) / median, the failures summed over all runs, and the first failed check.
summarize_runs() {
  awk -F, '
    function median(list,   v, n, i, j, t) {
      n = split(list, v, "|")
      if (n == 0 || v[1] !~ /^[0-9.]+$/) return v[1]  # "n/a", or "n/a (why)"
      for (i = 2; i <= n; i++) { t = v[i]; for (j = i - 1; j > 0 && v[j] + 0 > t + 0; j--) v[j + 1] = v[j]; v[j + 1] = t }
      return (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    }
    NR == 1 { next }
    {
      key = $1 "," $2
      if (!(key in runs)) { order[++groups] = key }
      runs[key]++
      for (col = 4; col <= 14; col++) values[key, col] = (runs[key] == 1) ? $col : values[key, col] "|" $col
      fails[key] += ($8 ~ /^[0-9]+$/ ? $8 : 0) + ($9 ~ /^[0-9]+$/ ? $9 : 0)
      if ($15 != "ok") { bad[key]++; if (!(key in why)) why[key] = $15 }
      if ($4 != "n/a") { if (!(key in lo) || $4 + 0 < lo[key]) lo[key] = $4 + 0; if (!(key in hi) || $4 + 0 > hi[key]) hi[key] = $4 + 0 }
    }
    END {
      print "server,concurrency,runs,requests_per_s,rps_min,rps_max,spread_pct,mean_ms,p99_ms,failures,cpu_us_per_req,ctxsw_per_req,syscalls_per_req,peak_rss_kib,peak_threads,check"
      for (g = 1; g <= groups; g++) {
        k = order[g]; m = median(values[k, 4])
        spread = (m != "n/a" && m > 0 && runs[k] > 1) ? sprintf("%.1f", (hi[k] - lo[k]) * 100 / m) : "n/a"
        check = bad[k] ? (bad[k] == runs[k] ? why[k] : why[k] " (" bad[k] " of " runs[k] " runs)") : "ok"
        printf "%s,%d,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n", k, runs[k], m, (k in lo ? lo[k] : "n/a"),
          (k in hi ? hi[k] : "n/a"), spread, median(values[k, 5]), median(values[k, 6]), fails[k],
          median(values[k, 10]), median(values[k, 11]), median(values[k, 12]), median(values[k, 13]),
          median(values[k, 14]), check
      }
    }' "$raw_csv"
}

throughput_table() {  # summary.csv -> Markdown
  awk -F, -v unit="$([[ $tool == wrk ]] && echo connections || echo c)" '
    function num(v, f) { return (v ~ /^n\/a/ || v == "") ? v : sprintf(f, v) }
    NR == 1 {
      print "| server | " unit " | req/s | spread | mean ms | p99 ms | failures | CPU µs/req | ctx sw/req | syscalls/req | peak RSS MiB | peak threads | check |"
      print "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
      next
    }
    {
      name = ($1 == "nginx") ? "nginx (reference)" : $1
      spread = ($7 == "n/a") ? "–" : $7 "%"
      rss = ($14 == "n/a") ? "n/a" : sprintf("%.1f", $14 / 1024)
      printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", name, $2, num($4, "%.0f"),
        spread, num($8, "%.3f"), num($9, "%.2f"), $10, num($11, "%.1f"), num($12, "%.2f"), num($13, "%.1f"), rss,
        num($15, "%.0f"), $16
    }' "$summary_csv"
}

connection_table() {  # raw.csv of the connection mode -> Markdown
  awk -F, '
    NR == 1 {
      print "| server | connections | held | refused | blocked | dropped | RSS KiB/conn | threads/conn | fds/conn | new client ms (median / max) | after release | check |"
      print "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"
      next
    }
    {
      name = ($1 == "nginx") ? "nginx (reference)" : $1
      refused = ($4 == "") ? "" : $4 + $5
      probe = ($12 + $13 > 0 && $11 == 0) ? ($13 > 0 ? "no answer" : "refused") : $14 " / " $15
      after = ($16 == "") ? "" : ($16 == 200 ? "served" : "NOT served")
      printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", name, $2, $3, refused, $6, $7, $8, $9, $10,
        probe, after, $17
    }' "$raw_csv"
}

# Two panels, req/s and p99 against concurrency (log scale), one line per server; SVG and PNG.
plot_results() {
  if ! have gnuplot; then return 0; fi
  local data=$results_dir/plot.dat index=0 name plots_rps=() plots_p99=() label
  : >"$data"
  for name in "${servers[@]}"; do
    if ! awk -F, -v s="$name" '$1 == s && $4 != "n/a" { found = 1 } END { exit !found }' "$summary_csv"; then
      continue  # did not start: nothing to draw
    fi
    { awk -F, -v s="$name" '$1 == s && $4 != "n/a" { print $2, $4, $9 }' "$summary_csv"; printf '\n\n'; } >>"$data"
    label=$name
    if [[ $name == nginx ]]; then label="nginx (reference)"; fi
    plots_rps+=("'$data' index $index using 1:2 with linespoints title '$label'")
    plots_p99+=("'$data' index $index using 1:3 with linespoints title '$label'")
    index=$((index + 1))
  done
  if ((index == 0)); then return 0; fi
  local x_label=concurrency
  if [[ $tool == wrk ]]; then x_label="connections"; fi
  local terminal
  for terminal in "svg size 1200,500 dynamic" "pngcairo size 1200,500"; do
    local extension=svg
    if [[ $terminal == png* ]]; then extension=png; fi
    gnuplot 2>>"$TMP/gnuplot.err" <<EOF || warn "gnuplot could not draw the $extension plot: $(head -1 "$TMP/gnuplot.err")"
set terminal $terminal noenhanced
set colorsequence podo
set output '$results_dir/plot.$extension'
set multiplot layout 1,2 title "$plot_title"
set logscale x
set xrange [0.8:*]
set xlabel '$x_label'
set bmargin 8
set key below maxrows 3
set grid
set ylabel 'requests per second'
set yrange [0:*]
plot $(IFS=,; echo "${plots_rps[*]}")
set ylabel 'p99 latency (ms)'
set logscale y
set yrange [*:*]
unset key
plot $(IFS=,; echo "${plots_p99[*]}")
unset multiplot
EOF
  done
}

write_summary() {
  local md=$results_dir/summary.md load_desc
  if [[ $tool == wrk ]]; then load_desc="wrk, $duration per run, keep-alive, $wrk_threads client thread(s), --latency"
  else load_desc="ab, $requests requests per run, $( ((keepalive)) && echo "keep-alive (-k)" || echo "a new connection per request")"; fi
  if [[ $mode == connections ]]; then load_desc="idle_conns: N idle keep-alive connections, then 5 new clients timed"; fi
  {
    echo "# Benchmark: $mode, $start_time to $(date '+%H:%M:%S %Z')"
    echo
    echo "- Machine: $cpu_model, $cpu_count CPUs, $memory${virt:+, $virt VM}; $os"
    echo "- Kernel: $kernel"
    echo "- Commit: $commit; servers built in $build_dir ($build_type)"
    echo "- Command: \`$command_line\`"
    echo "- Load: $load_desc"
    if [[ $mode == throughput ]]; then
      echo "- Repetitions: $repeat per server and concurrency; the table gives the median of each column, and the spread of req/s as (max - min) / median"
      echo "- Server flags: --delay-us $delay_us --handler $handler${threads:+ --threads $threads}; pinning: $( ((pin)) && echo "single-threaded servers on CPU 0, client on CPU 1" || echo off)"
      echo "- Server counters: CPU from /proc (utime+stime), context switches and syscalls: $( [[ $perf_state == ok ]] && echo "perf stat -p" || echo "$perf_state")"
    else
      echo "- Server flags: --delay-us $delay_us --handler $handler${threads:+ --threads $threads} --idle-timeout 600"
    fi
    if ((reference)); then echo "- Reference: nginx $(nginx_version) serving a $BODY_BYTES-byte file, worker_processes $nginx_workers, access_log off"; fi
    echo "- Tools: ab $ab_version$( [[ $tool == wrk ]] && echo ", $(wrk -v 2>&1 | awk 'NR == 1 { print $1, $2 }')")"
    echo "- Before the run: CPUs $busy % busy, load average $start_load"
    if ((failures > 0)); then echo "- **Checks: $failures failed** (see the check column and $log_file)"; else echo "- Checks: all passed"; fi
    echo
    if [[ $mode == throughput ]]; then throughput_table; else connection_table; fi
    echo
    if ((${#warnings[@]} > 0)); then
      echo "Warnings:"
      printf -- '- %s\n' "${warnings[@]}"
      echo
    fi
    echo "Columns are explained in benchmark/README.md. Full outputs: $log_file."
  } >"$md"
}

nginx_version() { nginx_bin=$(command -v nginx || echo /usr/sbin/nginx); "$nginx_bin" -v 2>&1 | sed 's|.*nginx/||'; }

# ---- Main ------------------------------------------------------------------------------------------------

main() {
  start_time=$(date '+%Y-%m-%d %H:%M:%S')
  command_line=benchmark/benchmark.sh
  if (($# > 0)); then command_line+=$(printf ' %q' "$@"); fi
  parse_args "$@"
  validate_options
  TMP=$(mktemp -d "${TMPDIR:-/tmp}/psp-benchmark.XXXXXX")
  start_load=$(awk '{ print $1, $2, $3 }' /proc/loadavg)  # before our own build adds to it
  ensure_tools
  build_servers
  describe_machine
  check_environment

  results_dir=$results_root/$(date '+%Y-%m-%d_%H%M%S')
  while [[ -e $results_dir ]]; do results_dir+=_; done
  mkdir -p "$results_dir" "$(dirname "$log_file")"
  raw_csv=$results_dir/raw.csv
  summary_csv=$results_dir/summary.csv
  plot_title=$tool
  if ((keepalive)); then plot_title+=" keep-alive"; fi
  plot_title+=", --delay-us $delay_us --handler $handler, $cpu_count CPUs, kernel $kernel, commit $commit"

  local name
  if [[ $mode == throughput ]]; then
    total_runs=$((${#servers[@]} * ${#concurrencies[@]} * repeat))
    echo "server,concurrency,repetition,requests_per_s,mean_ms,p99_ms,complete,failed,non2xx,cpu_us_per_req,ctxsw_per_req,syscalls_per_req,peak_rss_kib,peak_threads,check" >"$raw_csv"
    local rep
    for ((rep = 1; rep <= repeat; rep++)); do
      for name in "${servers[@]}"; do benchmark_server "$name" "$rep"; done
    done
    summarize_runs >"$summary_csv"
    write_summary
    plot_results
  else
    total_runs=$((${#servers[@]} * ${#conn_counts[@]}))
    echo "server,connections,held,refused,closed,blocked,dropped,rss_kib_per_conn,threads_per_conn,fds_per_conn,probe_ok,probe_refused,probe_timeout,probe_median_ms,probe_max_ms,after_status,check" >"$raw_csv"
    for name in "${servers[@]}"; do connection_cost "$name"; done
    cp "$raw_csv" "$summary_csv"
    write_summary
  fi

  say ""
  sed -n '/^| /p' "$results_dir/summary.md"
  say ""
  say "results: $results_dir (summary.md, summary.csv, raw.csv$(have gnuplot && [[ $mode == throughput ]] && echo ", plot.svg, plot.png"))"
  say "full outputs appended to $log_file"
  if ((failures > 0)); then
    say "FAILED: $failures check(s) failed; see above and the check column" >&2
    exit 1
  fi
  say "all checks passed"
  # Exit here rather than return: bash reads a script as it runs it, so after a return it would read on from
  # its old position in this file, and an edit made during a long run would execute whatever landed there.
  exit 0
}

main "$@"
