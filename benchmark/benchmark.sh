#!/usr/bin/env bash
# benchmark.sh: measure the seven servers side by side, the same way, with nginx as the reference.
#
#   ./benchmark/benchmark.sh              the default run: 01..07 and nginx, `ab -n 10000 -c C`, C = 1 10 100 500
#   ./benchmark/benchmark.sh 05 06 -k     only 05 and 06 (and nginx), with keep-alive
#   ./benchmark/benchmark.sh --mode files a 100 KiB and a 1 MiB file through wrk, 100 and 1000 connections
#   ./benchmark/benchmark.sh --mode idle  10 busy clients beside 0 to 10,000 idle keep-alive connections
#   ./benchmark/benchmark.sh --mode latency   latency against a steady offered load, 10 % to 150 % of capacity
#   ./benchmark/benchmark.sh 06 06:--sqpoll=50   a server and a variant of it (extra flags) side by side
#   ./benchmark/benchmark.sh --help       every option
#
# What it does, one function per step:
#   1. installs missing tools (as root) and builds the servers in Release      ensure_tools, build_servers
#   2. checks the environment and says what would distort the numbers          check_environment
#   3. for each server: starts it on a free port, warms it up, runs the load
#      tool at each concurrency, measures what the server spent, stops it     benchmark_server
#   4. appends every full ab/wrk output to benchmark/output.log, checks it    measure_run, check_run
#   5. writes the summary (Markdown, CSV, plot) into benchmark/results/DATE/   write_summary, plot_results
# Other modes:
#   --mode connections  what holding idle connections costs each server: connection_cost, with the client in
#                       idle_conns.cpp;
#   --mode files        real files (--root) next to nginx serving the same folder: make_files, verify_file, and
#                       the same benchmark_server with one target per file;
#   --mode idle         busy clients beside N held idle ones (the C10K situation): idle_population, with
#                       idle_conns --hold keeping them while the same measure_run runs ab;
#   --mode latency      a steady offered load, open loop, at rates around each server's capacity, and the latency
#                       percentiles at each: latency_server, with the load generator in openloop.cpp.
# Parsing, statistics, tables and plots are in analyse.py (tested by test_analyse.py).
#
# Exit status: 0 when every check passed; 1 when a check failed, a server did not start or a tool is missing;
# 2 on a bad option. Nothing is left running, even on Ctrl-C or an error (see cleanup).

set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
ALL_SERVERS=(01-blocking-single 02-thread-per-conn 03-select 04-threadpool 05-epoll 06-io_uring 07-asio)
# --mode files measures the models that serve many keep-alive connections at once by default. 01 serves one
# connection at a time, so wrk's other connections time out (a failed check by design); 02 and 04 can be named.
FILES_SERVERS=(03 05 06 07)
# --mode idle leaves out 01 for the same reason: beside one idle connection (or one of ab's kept-alive ones) it
# serves nobody else. Named, it gets rows that say so.
IDLE_SERVERS=(02 03 04 05 06 07)
BODY_BYTES=1024   # what every server (and the nginx reference) answers; ab must report exactly this
# --mode files: the files served, NAME:BYTES (index.html, for "/", is made too). Numbered 16-byte lines.
FILES=(100KiB.bin:102400 1MiB.bin:1048576)
PERF_EVENTS=task-clock,context-switches,raw_syscalls:sys_enter  # software events: work in VMs too

# ---- Options: every one can also come from the environment ----------------------------------------------

mode=${PSP_MODE:-throughput}
server_list=${PSP_SERVERS:-}
concurrency_list=${PSP_CONCURRENCY:-}  # default by mode, in validate_options
requests=${PSP_REQUESTS:-10000}
repeat=${PSP_REPEAT:-1}
warmup=${PSP_WARMUP:-1000}
keepalive=${PSP_KEEPALIVE:-0}
tool=${PSP_TOOL:-}  # default by mode: ab, or wrk for --mode files
duration=${PSP_DURATION:-}  # default by mode: 10s (wrk), 5s per rate (--mode latency)
wrk_threads=${PSP_WRK_THREADS:-1}
delay_us=${PSP_DELAY_US:-}  # default by mode: 1000, or 0 for --mode files
handler=${PSP_HANDLER:-wait}
threads=${PSP_THREADS:-}
nginx_workers=${PSP_NGINX_WORKERS:-}  # default: --threads, else one per CPU
pin=${PSP_PIN:-0}
reference=${PSP_REFERENCE:-1}
use_perf=${PSP_PERF:-1}
conn_list=${PSP_CONNS:-1000 10000 100000 1000000}
idle_list=${PSP_IDLE:-0 1000 5000 10000}
rate_list=${PSP_RATES:-}  # default: fractions of each server's measured capacity
p99_target=${PSP_P99_TARGET:-10}
build_dir=${PSP_BUILD_DIR:-$REPO/build}
no_build=${PSP_NO_BUILD:-0}
results_root=${PSP_RESULTS_DIR:-$SCRIPT_DIR/results}
log_file=${PSP_LOG:-$SCRIPT_DIR/output.log}

usage() {
  cat <<EOF
usage: benchmark/benchmark.sh [options] [SERVER...]

Measures the servers side by side with the same load and checks every run. SERVER is a chapter number
(01..07, or 1..7) or folder name; the default is all seven (--mode files: ${FILES_SERVERS[*]}; idle: ${IDLE_SERVERS[*]}). The nginx
reference row is added unless --no-reference. Every option can also be set in the environment variable shown.

A SERVER may carry extra flags after colons, for a variant of it: 06:--sqpoll=50, 07:--topology=pool,
06:--sqpoll=50:--fixed-files. Each part is one flag; FLAG=VALUE is passed as two arguments (--sqpoll 50). The
variant's flags come after the script's own, so 05:--threads=1 overrides --threads. The row is named after the
whole spec (06-io_uring:--sqpoll=50). SERVER may also be any folder of the build directory that holds a
run_server (e.g. 07-asio-uring, an optional build).

Load
  -c, --concurrency LIST   concurrency levels (wrk: connections), space or comma separated
                           [PSP_CONCURRENCY, default "1 10 100 500"; --mode files: "100 1000"]
  -n, --requests N         requests per ab run [PSP_REQUESTS, default 10000]
  -r, --repeat N           runs per server and concurrency, each a whole pass over the servers; the
                           summary reports the median and the spread [PSP_REPEAT, default 1]
  -w, --warmup N           warm-up requests before measuring each server, 0 for none [PSP_WARMUP, default 1000]
  -k, --keep-alive         ab -k: reuse connections (HTTP/1.0 keep-alive) [PSP_KEEPALIVE=1]
  -t, --tool ab|wrk        load tool [PSP_TOOL, default ab; --mode files: always wrk]; wrk always uses
                           keep-alive, runs for --duration and reports its latency distribution (--latency)
  -d, --duration TIME      wrk run time, e.g. 10s or 1m [PSP_DURATION, default 10s; --mode latency: the
                           time at each rate, default 5s]
      --wrk-threads N      wrk client threads (never more than the connections) [PSP_WRK_THREADS, default 1]

Servers
      --delay-us N         simulated handler time passed to the servers [PSP_DELAY_US, default 1000;
                           --mode files: 0]
      --handler MODE       wait, sleep or spin, passed to the servers [PSP_HANDLER, default wait]
      --threads N          pool size (04) or event loops (05, 06, 07), and nginx's worker_processes; 01, 02
                           and 03 take no --threads [PSP_THREADS, default: the servers' own; nginx: one per CPU]
      --nginx-workers N    nginx's worker_processes alone [PSP_NGINX_WORKERS, default: as --threads]; each worker
                           is a process with a descriptor limit of its own, so more workers hold more connections
      --pin                pin single-threaded servers (01, 03, and 05..07/nginx with one thread) to CPU 0 and
                           the client to CPU 1, which cuts run-to-run spread [PSP_PIN=1]
      --no-reference       leave out the nginx reference row [PSP_REFERENCE=0]

Measurement
      --no-perf            do not count syscalls and context switches with perf stat [PSP_PERF=0]
      --mode MODE          throughput (default); connections: what idle keep-alive connections cost, user
                           space and kernel, up to each server's limit (as root it raises the system limits
                           that --conns needs, and puts them back);
                           files: a 100 KiB and a 1 MiB file served with --root, through wrk; idle: ab with
                           and without keep-alive (-c 10 by default) beside N idle keep-alive connections
                           [PSP_MODE]; latency: openloop sends on a fixed schedule (a new connection per
                           request, or -k) at rates up to 150 % of the capacity ab measures first, and
                           reports latency from each request's intended send time
      --conns LIST         connection counts for --mode connections [PSP_CONNS, default "1000 10000 100000 1000000"]
      --idle LIST          idle connection counts for --mode idle [PSP_IDLE, default "0 1000 5000 10000"]
      --rates LIST         offered loads in req/s for --mode latency [PSP_RATES, default: 10, 25, 50, 70, 80,
                           90, 100, 110, 125 and 150 % of each server's capacity, measured with ab -c C]
      --p99-target MS      --mode latency: the knee is the highest rate whose p99 stays under MS
                           [PSP_P99_TARGET, default 10]

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
  benchmark/benchmark.sh -t wrk -c 100 --delay-us 0 06 06:--sqpoll=50    a variant next to the default
  benchmark/benchmark.sh --mode files -r 3                files through 03, 05, 06, 07 and nginx, median of 3
  benchmark/benchmark.sh --mode connections               idle connections, 1,000 up to a million or the limit
  benchmark/benchmark.sh --mode idle -r 3                 busy clients beside idle ones, median of 3
  benchmark/benchmark.sh --mode latency 01 04 05          where each model's latency turns upward
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
      --nginx-workers) need_value "$@"; nginx_workers=$2; shift ;;
      --pin) pin=1 ;;
      --no-reference) reference=0 ;;
      --no-perf) use_perf=0 ;;
      --mode) need_value "$@"; mode=$2; shift ;;
      --conns) need_value "$@"; conn_list=$2; shift ;;
      --idle) need_value "$@"; idle_list=$2; shift ;;
      --rates) need_value "$@"; rate_list=$2; shift ;;
      --p99-target) need_value "$@"; p99_target=$2; shift ;;
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
max_of() { printf '%s\n' "$@" | sort -n | tail -1; }

# Turns the option strings into arrays and refuses what cannot work, before anything is started.
validate_options() {
  [[ $mode =~ ^(throughput|connections|files|idle|latency)$ ]] ||
    die_usage "--mode must be throughput, connections, files, idle or latency"
  if [[ $mode == idle ]]; then
    [[ ${tool:-ab} == ab ]] || die_usage "--mode idle uses ab (with and without -k, by itself)"
    concurrency_list=${concurrency_list:-10}
  fi
  if [[ $mode == latency ]]; then
    [[ ${tool:-ab} == ab ]] || die_usage "--mode latency uses openloop (and ab to measure capacity)"
    concurrency_list=${concurrency_list:-100}
    [[ $concurrency_list =~ ^[0-9]+$ ]] || die_usage "--mode latency takes one connection count (-c N)"
    duration=${duration:-5s}
  fi
  duration=${duration:-10s}
  if [[ $mode == files ]]; then
    [[ ${tool:-wrk} == wrk ]] || die_usage "--mode files always uses wrk (it checks the bytes read; ab cannot)"
    tool=wrk
    concurrency_list=${concurrency_list:-100 1000}
    delay_us=${delay_us:-0}
  fi
  tool=${tool:-ab}
  concurrency_list=${concurrency_list:-1 10 100 500}
  delay_us=${delay_us:-1000}
  read -ra concurrencies <<<"${concurrency_list//,/ }"
  read -ra conn_counts <<<"${conn_list//,/ }"
  read -ra idle_counts <<<"${idle_list//,/ }"
  local value
  for value in "${idle_counts[@]}"; do [[ $value =~ ^[0-9]+$ ]] || die_usage "bad idle connection count '$value'"; done
  read -ra rates <<<"${rate_list//,/ }"
  for value in "${rates[@]}"; do is_count "$value" || die_usage "bad rate '$value' (requests per second)"; done
  is_count "$p99_target" || die_usage "bad --p99-target '$p99_target' (milliseconds)"
  for value in "${concurrencies[@]}"; do is_count "$value" || die_usage "bad concurrency '$value'"; done
  for value in "${conn_counts[@]}"; do is_count "$value" || die_usage "bad connection count '$value'"; done
  ((${#concurrencies[@]} > 0)) || die_usage "no concurrency level given"
  is_count "$requests" || die_usage "bad request count '$requests'"
  is_count "$repeat" || die_usage "bad repetition count '$repeat'"
  is_count "$wrk_threads" || die_usage "bad wrk thread count '$wrk_threads'"
  [[ $warmup =~ ^[0-9]+$ ]] || die_usage "bad warm-up count '$warmup'"
  [[ $delay_us =~ ^[0-9]+$ ]] || die_usage "bad --delay-us '$delay_us'"
  [[ -z $threads ]] || is_count "$threads" || die_usage "bad --threads '$threads'"
  [[ -z $nginx_workers ]] || is_count "$nginx_workers" || die_usage "bad --nginx-workers '$nginx_workers'"
  [[ $handler =~ ^(wait|sleep|spin)$ ]] || die_usage "--handler must be wait, sleep or spin"
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

  # servers: one spec per row, FOLDER[:FLAG...], the folder spelled out (05 -> 05-epoll, 06:--x=1 ->
  # 06-io_uring:--x=1), so that the row names the binary and the flags it ran with.
  servers=()
  local spec name folder found part parts default_list=("${ALL_SERVERS[@]}")
  if [[ $mode == files ]]; then default_list=("${FILES_SERVERS[@]}"); fi
  if [[ $mode == idle ]]; then default_list=("${IDLE_SERVERS[@]}"); fi
  for spec in ${server_list:-${default_list[*]}}; do
    # The spec becomes a CSV cell and a Markdown cell: keep it to plain characters.
    [[ $spec =~ ^[A-Za-z0-9._/=:+@%-]+$ ]] || die_usage "server '$spec' has a character other than letters, digits and ._/=:+@%-"
    name=${spec%%:*}
    if [[ $name =~ ^[1-7]$ ]]; then name=0$name; fi
    found=
    for folder in "${ALL_SERVERS[@]}"; do
      if [[ $folder == "$name" || $folder == "$name"-* ]]; then found=$folder; fi
    done
    # Any other folder of the build directory with a run_server in it (an optional build, e.g. 07-asio-uring).
    if [[ -z $found && $name =~ ^[A-Za-z0-9][A-Za-z0-9._+-]*$ ]] &&
      { [[ -x $build_dir/$name/run_server ]] || [[ -n $(build_target "$name") ]]; }; then
      found=$name
    fi
    [[ -n $found ]] || die_usage "unknown server '$name' (expected 01..07, or a folder of $build_dir that holds a run_server)"
    if [[ $spec == *:* ]]; then
      IFS=: read -ra parts <<<"${spec#*:}:"  # (the extra colon makes "06:" one empty part, refused below)
      for part in "${parts[@]}"; do
        [[ $part == -* ]] || die_usage "in server '$spec', '$part' is not a flag (each part after a colon starts with -)"
      done
      found+=:${spec#*:}
    fi
    for part in "${servers[@]}"; do
      [[ $part != "$found" ]] || die_usage "server '$found' is named twice"
    done
    servers+=("$found")
  done
  if ((reference)); then servers+=(nginx); fi
  nginx_workers=${nginx_workers:-${threads:-$(nproc)}}
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
launch_prefix=()  # words before a server's command: in_cgroup, in --mode connections

# shellcheck disable=SC2317  # (shellcheck does not see that the EXIT trap calls it)
cleanup() {
  local status=$?
  local pid
  for pid in "$client_pid" "$holder_pid"; do
    if [[ -z $pid ]]; then continue; fi
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  stop_thread_sampler
  stop_server >/dev/null 2>&1 || true
  remove_cgroups
  restore_settings
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
  have python3 || needed+=(python3)  # analyse.py
  if [[ $tool == wrk ]] && ! have wrk; then needed+=(wrk); fi
  if ((reference)) && ! have nginx; then needed+=(nginx); fi
  if [[ $mode == files ]] && ! have curl; then needed+=(curl); fi  # fetches each file once, for cmp
  if ((${#needed[@]} > 0)); then
    ensure_packages "${needed[@]}" || { say "error: the benchmark needs: ${needed[*]}" >&2; exit 1; }
  fi
  local command_name
  for command_name in ab python3 $([[ $tool == wrk ]] && echo wrk) $( ((reference)) && echo nginx) \
    $([[ $mode == files ]] && echo curl); do
    have "$command_name" || { say "error: $command_name is needed but not found in PATH" >&2; exit 1; }
  done
  if ! have gnuplot; then ensure_packages gnuplot-nox || say "(no plot without gnuplot)" >&2; fi
  if ((use_perf)) && [[ $mode != connections ]] && ! have perf; then
    ensure_packages linux-perf || say "(no syscall counts without perf)" >&2
  fi
}

# A server spec is FOLDER[:FLAG...] (see validate_options); nginx is just "nginx".
server_folder() { printf '%s' "${1%%:*}"; }
server_binary() { printf '%s/%s/run_server' "$build_dir" "$(server_folder "$1")"; }
client_binary() { printf '%s/benchmark/idle_conns' "$build_dir"; }
open_loop_binary() { printf '%s/benchmark/openloop' "$build_dir"; }

# The extra flags of a variant, one argument per line: 06-io_uring:--sqpoll=50:--fixed-files gives --sqpoll, 50,
# --fixed-files. The servers take a flag's value as the next argument, and a spec cannot hold a space.
variant_flags() {
  local part parts
  [[ $1 == *:* ]] || return 0
  IFS=: read -ra parts <<<"${1#*:}"
  for part in "${parts[@]}"; do
    if [[ $part == *=* ]]; then printf '%s\n%s\n' "${part%%=*}" "${part#*=}"; else printf '%s\n' "$part"; fi
  done
}

# The threads a server runs with: its variant's --threads, else --threads, else one per CPU.
threads_of() {
  local value=${threads:-$(nproc)} previous='' flag
  while IFS= read -r flag; do
    if [[ $previous == --threads ]]; then value=$flag; fi
    previous=$flag
  done < <(variant_flags "$1")
  printf '%s' "$value"
}

# The CMake target that builds BUILD/FOLDER/run_server: server_NN for the seven chapters; for another folder
# (an optional build, e.g. 07-asio-uring), the target whose rule in the generated Makefiles writes that file.
# Prints nothing when there is none (another generator, or a binary put there by hand).
build_target() {
  local folder=$1 dir
  if [[ " ${ALL_SERVERS[*]} " == *" $folder "* ]]; then printf 'server_%s' "${folder:0:2}"; return 0; fi
  [[ -f $build_dir/CMakeFiles/TargetDirectories.txt ]] || return 0
  while IFS= read -r dir; do
    if awk -v rule="$folder/run_server:" 'index($0, rule) == 1 || index($0, "/" rule) { found = 1; exit }
      END { exit !found }' "$dir/build.make" 2>/dev/null; then
      basename "$dir" .dir
      return 0
    fi
  done <"$build_dir/CMakeFiles/TargetDirectories.txt"
}

# Builds the servers (and idle_conns) in Release. cmake --build is incremental, so running it every time
# costs a second and guarantees we never measure a stale binary. --no-build only checks they exist.
build_servers() {
  local targets=() binaries=() name folder target
  for name in "${servers[@]}"; do
    if [[ $name == nginx ]]; then continue; fi
    folder=$(server_folder "$name")
    binaries+=("$(server_binary "$name")")
    target=$(build_target "$folder")
    if [[ -z $target ]]; then
      ((no_build)) || warn "no CMake target of $build_dir builds $folder/run_server that the script can find: it is measured as it is, not rebuilt"
    elif [[ " ${targets[*]} " != *" $target "* ]]; then
      targets+=("$target")
    fi
  done
  if [[ $mode == connections || $mode == idle ]]; then
    targets+=(idle_conns)
    binaries+=("$(client_binary)")
  fi
  if [[ $mode == latency ]]; then
    targets+=(openloop)
    binaries+=("$(open_loop_binary)")
  fi
  if ((!no_build && ${#targets[@]} > 0)); then
    if [[ ! -f $build_dir/CMakeCache.txt ]]; then
      ensure_packages cmake g++ make pkg-config liburing-dev libboost-dev libasio-dev libgtest-dev || exit 1
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
  if [[ $mode == idle ]]; then max_c=$((max_c + $(max_of "${idle_counts[@]}"))); fi
  say "environment"
  say "  machine: $cpu_model, $cpu_count CPUs, $memory${virt:+, $virt VM}; $os; kernel $kernel"
  say "  commit: $commit; servers: $build_dir ($build_type)"
  say "  ab: $(command -v ab) ($ab_version)"
  if [[ $tool == wrk ]]; then say "  wrk: $(command -v wrk)"; fi

  # Each of the client and the server holds one descriptor per connection, plus a few of its own. Serving files,
  # a server also holds the open file, and 06 a pipe (two descriptors), for each connection.
  need=$((max_c + 64))
  if [[ $mode == files ]]; then need=$((4 * max_c + 64)); fi
  if [[ $mode == connections ]]; then prepare_connections; need=0; fi
  soft=$(ulimit -Sn)
  hard=$(ulimit -Hn)
  if [[ $soft != unlimited ]] && ((soft < need)); then
    if [[ $hard != unlimited ]] && ((hard < need)) && ((EUID == 0)); then ulimit -Hn "$need" 2>/dev/null || true; fi
    ulimit -Sn "$need" 2>/dev/null || true
    say "  open files: soft limit raised from $soft to $(ulimit -Sn) (need $need)"
  elif [[ $mode != connections ]]; then
    say "  open files: soft limit $soft (need $need)"
  fi
  soft=$(ulimit -Sn)
  if [[ $soft != unlimited ]] && ((soft < need)); then
    warn "ulimit -n is $soft but $max_c connections need about $need descriptors: expect EMFILE and failures (raise the hard limit)"
  fi

  # The accept queue must hold every connection that arrives at once: idle_conns opens at most 500 at a time.
  local burst=$max_c
  if [[ $mode == connections || $mode == idle ]] && ((burst > 500)); then burst=500; fi
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
    05-* | 06-* | 07-*) [[ $(threads_of "$1") == 1 ]] ;;
    nginx) [[ $nginx_workers == 1 ]] ;;
    *) return 1 ;;
  esac
}

# The flags each server gets, one per line. 01, 02 and 03 refuse --threads (they have no pool and no loops to
# size). A variant's own flags come last, so that they win over the script's (05:--threads=1).
server_flags() {
  local flags=(--delay-us "$delay_us" --handler "$handler")
  case $1 in 04-* | 05-* | 06-* | 07-*) if [[ -n $threads ]]; then flags+=(--threads "$threads"); fi ;; esac
  # Held idle connections must outlive the measurement; the default idle timeout is 5 s.
  if [[ $mode == connections || $mode == idle ]]; then flags+=(--idle-timeout 600); fi
  if [[ $mode == files ]]; then flags+=(--root "$files_dir"); fi
  printf '%s\n' "${flags[@]}"
  variant_flags "$1"
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
# Sets server_pid and server_port; on failure prints one sentence, sets start_problem and returns 1.
start_server() {
  local name=$1 out=$TMP/server.stdout err=$TMP/server.stderr line flags prefix=()
  mapfile -t flags < <(server_flags "$name")
  if ((pin)) && is_single_threaded "$name"; then prefix=(taskset -c 0); fi
  server_command="$(server_folder "$name")/run_server --port 0 ${flags[*]}"
  rm -f "$out"  # the loop below must not read an earlier instance's port
  "${launch_prefix[@]}" "${prefix[@]}" "$(server_binary "$name")" --port 0 "${flags[@]}" >"$out" 2>"$err" &
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
      local why
      why=$(head -c 300 "$err" | head -1)
      start_problem="did not start"
      if [[ $mode == files && $why == *"'--root'"* ]]; then
        start_problem="takes no --root yet: it cannot serve files"
        say "error: $name cannot serve files: it does not take --root yet (it said: $why)" >&2
      else
        say "error: $name did not start (exit status $status): $why" >&2
      fi
      return 1
    fi
    sleep 0.05
  done
  say "error: $name printed no 'listening on http://127.0.0.1:PORT/' line within 10 s" >&2
  start_problem="did not start"
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
  if [[ $mode == idle ]]; then counts=($(($(max_of "${idle_counts[@]}") + $(max_of "${concurrencies[@]}")))); fi
  for value in "${counts[@]}"; do
    if ((value + 1024 > max_conns)); then max_conns=$((value + 1024)); fi
  done
  # No worker can open more descriptors than the hard limit, and each allocates its whole connection table at
  # start: a million-entry table per worker would not fit in memory.
  local files=$((max_conns * 2)) hard
  hard=$(ulimit -Hn)
  if [[ $hard != unlimited ]]; then
    if ((files > hard)); then files=$hard; fi
    if ((max_conns > hard - 32)); then max_conns=$((hard - 32)); fi
  fi
  mkdir -p "$dir/www" "$dir/temp"
  head -c "$BODY_BYTES" /dev/zero | tr '\0' 'x' >"$dir/www/index.html"
  # As root, nginx's workers drop to an unprivileged user, who must be able to read the file.
  if ((EUID == 0)); then
    user_line="user nobody nogroup;"
    chmod 755 "$TMP" "$dir" "$dir/www"
    chmod 644 "$dir/www/index.html"
  fi
  server_command="nginx -p $dir -c nginx.conf (worker_processes $nginx_workers)"
  # Holding connections, each worker listens on a socket of its own (reuseport), and the kernel spreads the
  # connections evenly among them by hash. With one shared socket, the worker that wakes first takes most of them,
  # and once it has worker_connections it closes its idle keep-alive ones to make room for new ones.
  local listen_extra=""
  if [[ $mode == connections ]]; then
    listen_extra=" reuseport"
    server_command="nginx -p $dir -c nginx.conf (worker_processes $nginx_workers, listen reuseport)"
  fi
  # --mode files: the folder the servers serve, sent the way nginx is usually set up for static files (sendfile,
  # and tcp_nopush: the headers go out in the same packet as the start of the file). A folder gets its index.html.
  local site="root $dir/www;
    location / { try_files /index.html =404; }" files_lines=""
  if [[ $mode == files ]]; then
    site="root $files_dir;"
    files_lines="sendfile on;
  tcp_nopush on;
  types { text/html html; application/octet-stream bin; }"
    server_command="nginx -p $dir -c nginx.conf (worker_processes $nginx_workers, root $files_dir, sendfile on, tcp_nopush on)"
  fi
  for _ in 1 2 3 4 5; do  # a few tries, in case another program takes the port first
    port=$((20000 + RANDOM % 12000))  # below the ephemeral range, so the clients' ports never collide with it
    if (: <>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi  # someone listens there
    cat >"$dir/nginx.conf" <<EOF
# generated by benchmark.sh for one run; deleted afterwards
$user_line
daemon off;
worker_processes $nginx_workers;
worker_rlimit_nofile $files;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections $max_conns; }
http {
  access_log off;
  default_type text/plain;
  keepalive_requests 1000000;
  keepalive_timeout 600s;
  $files_lines
  client_body_temp_path $dir/temp/body;
  proxy_temp_path $dir/temp/proxy;
  fastcgi_temp_path $dir/temp/fastcgi;
  uwsgi_temp_path $dir/temp/uwsgi;
  scgi_temp_path $dir/temp/scgi;
  server {
    listen 127.0.0.1:$port backlog=4096$listen_extra;
    $site
  }
}
EOF
    nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
    if ((pin)) && is_single_threaded nginx; then prefix=(taskset -c 0); fi
    "${launch_prefix[@]}" "${prefix[@]}" "$nginx_bin" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" >"$TMP/nginx.out" 2>&1 &
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
# The kernel threads io_uring creates for a ring are threads of the server's process (since Linux 5.12): the
# SQPOLL thread (iou-sqp-PID) and the io-wq workers (iou-wrk-PID). So they are counted here too, exited ones
# included (checked on Linux 6.18 with a ring whose SQPOLL thread spun while the program slept; see README).
cpu_ticks() {
  local pid
  for pid in "${server_pids[@]}"; do cat "/proc/$pid/stat" 2>/dev/null || true; done |
    awk '{ sub(/.*\) /, ""); total += $12 + $13 + $14 + $15 } END { print total + 0 }'
}

# The CPU time of every thread of the server, in nanoseconds (schedstat): finer than cpu_ticks' 10 ms ticks, for
# a server that should spend none. Threads that exit meanwhile are not counted; the idle servers start none.
cpu_ns() {
  local pid
  for pid in "${server_pids[@]}"; do cat "/proc/$pid/task/"*/schedstat 2>/dev/null || true; done |
    awk '{ total += $1 } END { printf "%.0f\n", total }'
}

# "TID TICKS" for each live io_uring kernel thread of the server (iou-sqp-*, iou-wrk-*), to show the part of
# the CPU time they took. It only sees live threads: an io-wq worker that exits during the run is in cpu_ticks
# but not here, so this part is a lower bound.
io_uring_thread_ticks() {
  local pid file
  for pid in "${server_pids[@]}"; do
    for file in "/proc/$pid/task/"*/stat; do cat "$file" 2>/dev/null || true; done
  done | awk '$2 ~ /^\(iou-(sqp|wrk)-/ { tid = $1; sub(/.*\) /, ""); print tid, $12 + $13 }'
}

# The ticks the io_uring threads took between two io_uring_thread_ticks listings (threads in the second one).
io_uring_ticks_between() {
  awk 'NR == FNR { before[$1] = $2; next } { total += $2 - before[$1] } END { print total + 0 }' "$1" "$2"
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

# What is requested, set by benchmark_server for each target: the URL path, the body length every answer must
# have, and (--mode files) the file's name, which is also the `file` column of the results.
target_path=/
expected_length=$BODY_BYTES
target_file=

log_header() {  # $1: what ran; $2: the load command
  printf '\n==== %s | %s | %s | server: %s | pinned: %s | commit %s | kernel %s | %s x%s ====\n' \
    "$(now)" "$1" "$2" "$server_command" "$pinned" "$commit" "$kernel" "$cpu_model" "$cpu_count" >>"$log_file"
}

# The analyser: parses the load tools' output, summarizes, makes the tables and the plot (see its first lines).
analyse() { python3 "$SCRIPT_DIR/analyse.py" "$@"; }

# Parses the load tool's output in $TMP/run.out (ab: and its percentile file, -e) into the variables complete
# failed non2xx rps mean_ms p99_ms doc_length bytes_read mib_per_s. The analyser prints them on one line,
# `complete=10000 failed=0 non2xx=0 rps=11862.96 ...`, n/a for what the output does not say; with wrk, from the
# line that wrk_done.lua prints (exact counts, where wrk's own summary rounds them).
parse_output() {
  local line fields field
  # Unknown until the line says (nothing of the previous run may survive).
  complete=n/a failed=n/a non2xx=n/a rps=n/a mean_ms=n/a p99_ms=n/a doc_length=n/a bytes_read=n/a mib_per_s=n/a
  line=$(analyse parse "$tool" "$TMP/run.out" --percentiles "$TMP/percentiles.csv")
  read -ra fields <<<"$line"
  for field in "${fields[@]}"; do
    case ${field%%=*} in  # only these names: a line cannot set any other variable
      complete | failed | non2xx | rps | mean_ms | p99_ms | doc_length | bytes_read | mib_per_s)
        printf -v "${field%%=*}" '%s' "${field#*=}" ;;
    esac
  done
  # wrk does not report the body length: the ab warm-up (and in files mode curl) checked it.
  if [[ $tool == wrk ]]; then doc_length=$expected_length; fi
}

# The checks every run must pass; each failure is printed loudly and counted. Sets run_check.
# check_run WHAT STATUS EXPECTED_COMPLETE [CONNECTIONS]
check_run() {
  local what=$1 status=$2 expected=$3 c=${4:-0} problems=()
  if ((status == 124 || status == 137)); then problems+=("$tool timed out")
  elif ((status != 0)); then problems+=("$tool exited with status $status: $(tail -1 "$TMP/run.out")"); fi
  if [[ $doc_length != "$expected_length" ]]; then problems+=("Document Length: ${doc_length:-none} (expected $expected_length bytes)"); fi
  if [[ $failed != 0 ]]; then
    if [[ $tool == ab ]]; then problems+=("Failed requests: $failed"); else problems+=("socket errors: $failed"); fi
  fi
  if [[ $non2xx != 0 ]]; then problems+=("Non-2xx responses: $non2xx"); fi
  if [[ -n $expected && $complete != "$expected" ]]; then problems+=("Complete requests: $complete of $expected"); fi
  if [[ $mode == files && $tool == wrk ]]; then
    # Every complete response carried the whole file and a head (under 1 KiB); each of the c connections may
    # also have been part-way through one more when wrk stopped. Outside these bounds, wrong bytes came back.
    local low=$((complete * expected_length)) high=$(((complete + c) * (expected_length + 1024)))
    if [[ $bytes_read == n/a ]]; then problems+=("no byte count from wrk (wrk_done.lua)")
    elif ((bytes_read < low || bytes_read > high)); then
      problems+=("wrk read $bytes_read bytes for $complete responses of a $expected_length-byte file (expected $low to $high)")
    fi
  fi
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
    # wrk_done.lua prints wrk's exact counters on one line when the run is over, for parse_output.
    load_cmd=(wrk -t "$((wrk_threads < $1 ? wrk_threads : $1))" -c "$1" -d "$duration" --latency
      -s "$SCRIPT_DIR/wrk_done.lua")
    # Files: at 1,000 connections, 1,000 MiB are in flight, and fair sharing at about 1 GiB/s makes each answer
    # take about a second, near wrk's default limit of 2 s, past which it counts the request as a timeout error.
    if [[ $mode == files ]]; then load_cmd+=(--timeout 10s); fi
  fi
  load_cmd+=("http://127.0.0.1:$server_port$target_path")
}

# Warm-up: page faults, thread pools, caches. Always ab, so that in wrk mode too the body length is checked.
warm_up() {
  local name=$1 c=10 status=0
  if ((warmup == 0)); then return 0; fi
  if ((keepalive)); then c=1; fi  # 01 and 04 serve one keep-alive connection per thread: more would hang
  if ((c > warmup)); then c=$warmup; fi
  load_cmd=(ab -q -r -n "$warmup" -c "$c")
  if ((keepalive)); then load_cmd+=(-k); fi
  load_cmd+=("http://127.0.0.1:$server_port$target_path")
  log_header "$name${target_file:+ $target_file} warm-up" "${load_cmd[*]}"
  run_client $((60 + warmup / 20)) "$TMP/run.out" "$TMP/run.out" "${client_prefix[@]}" "${load_cmd[@]}" || status=$?
  cat "$TMP/run.out" >>"$log_file"
  local saved_tool=$tool
  tool=ab
  parse_output
  check_run "$name${target_file:+ $target_file} warm-up" "$status" "$warmup"
  tool=$saved_tool
}

# One measured run at concurrency $2; appends a row to raw.csv.
measure_run() {
  local name=$1 c=$2 rep=$3 status=0 limit cpu_before ctx_before perf_pids what
  what="$name${target_file:+ $target_file}${idle_key:+ beside ${idle_key%%,*} idle} c=$c"
  load_command "$c" "$requests"
  say "  ${load_cmd[*]}"
  log_header "$what run $rep/$repeat" "${load_cmd[*]}"
  if [[ $tool == ab ]]; then limit=$((60 + requests / 50)); else limit=$((duration_s + 60)); fi
  local wrapped=("${client_prefix[@]}" "${load_cmd[@]}")
  if [[ $tool == ab ]]; then
    # -e: the same percentiles as ab's table, which prints whole milliseconds, with decimals.
    wrapped=("${client_prefix[@]}" ab -e "$TMP/percentiles.csv" "${load_cmd[@]:1}")
  fi
  # perf stat -p opens a counter per event and thread: 02 beside 10,000 idle connections has 10,000 threads,
  # more counters than this process may open. Then this run goes without perf, and its columns say why.
  local run_perf=$perf_state
  if [[ $perf_state == ok ]] && (($(status_sum Threads:) * 3 + c + 64 > $(ulimit -Sn))); then
    run_perf="n/a (too many threads for perf)"
  fi
  if [[ $run_perf == ok ]]; then
    perf_pids=$(IFS=,; echo "${server_pids[*]}")
    # With -p, perf counts only the server (and the threads it creates), for as long as the client runs.
    wrapped=(perf stat -x "," -e "$PERF_EVENTS" -p "$perf_pids" -o "$TMP/perf.txt" -- "${wrapped[@]}")
  fi
  rm -f "$TMP/percentiles.csv" "$TMP/perf.txt"
  reset_peak_rss
  cpu_before=$(cpu_ticks)
  io_uring_thread_ticks >"$TMP/iou.before"
  ctx_before=$(proc_context_switches)
  start_thread_sampler
  run_client "$limit" "$TMP/run.out" "$TMP/run.out" "${wrapped[@]}" || status=$?
  stop_thread_sampler
  local cpu_after ctx_after peak_rss peak_threads
  cpu_after=$(cpu_ticks)
  io_uring_thread_ticks >"$TMP/iou.after"
  ctx_after=$(proc_context_switches)
  peak_rss=$(status_sum VmHWM:)
  peak_threads=$( (cat "$TMP/threads.samples"; status_sum Threads:) | sort -n | tail -1)

  cat "$TMP/run.out" >>"$log_file"
  parse_output
  local expected=$requests
  if [[ $tool == wrk ]]; then expected=; fi
  check_run "$what" "$status" "$expected" "$c"

  # Per request: CPU from /proc (clock ticks), context switches and syscalls from perf when it counted.
  local ticks_per_s cpu_us iou_us ctx_per_req syscalls_per_req="$run_perf"
  if [[ $run_perf == ok ]]; then syscalls_per_req=n/a; fi  # unless perf reports below
  ticks_per_s=$(getconf CLK_TCK)
  cpu_us=$(ratio "$(((cpu_after - cpu_before) * 1000000 / ticks_per_s))" "$complete" %.1f)
  iou_us=$(ratio "$(($(io_uring_ticks_between "$TMP/iou.before" "$TMP/iou.after") * 1000000 / ticks_per_s))" "$complete" %.1f)
  ctx_per_req=$(ratio $((ctx_after - ctx_before)) "$complete")
  if [[ $run_perf == ok && -s $TMP/perf.txt ]]; then
    ctx_per_req=$(ratio "$(awk -F, '$3 == "context-switches" { print $1 + 0 }' "$TMP/perf.txt")" "$complete")
    syscalls_per_req=$(ratio "$(awk -F, '$3 == "raw_syscalls:sys_enter" { print $1 + 0 }' "$TMP/perf.txt")" "$complete" %.1f)
    { echo "--- perf stat of the server during this run"; grep -v '^#\|^$' "$TMP/perf.txt" || true; } >>"$log_file"
  fi
  local bytes_per_req
  bytes_per_req=$(ratio "$bytes_read" "$complete" %.0f)
  echo "--- what the server spent: cpu_us_per_req=$cpu_us (io_uring_threads_us_per_req=$iou_us) ctxsw_per_req=$ctx_per_req syscalls_per_req=$syscalls_per_req peak_rss_kib=$peak_rss ($peak_rss_scope) peak_threads=$peak_threads${target_file:+ bytes_read=$bytes_read bytes_per_req=$bytes_per_req}" >>"$log_file"

  # The selected lines, as the run goes.
  if [[ $tool == ab ]]; then
    grep -E '^(Failed requests|Non-2xx responses|Time per request|Requests per second):' "$TMP/run.out" | sed 's/^/  /' || true
  else
    grep -E 'Latency  |99%|requests in|Socket errors|Non-2xx|Requests/sec' "$TMP/run.out" | sed 's/^ */  /' || true
  fi
  if [[ $mode == files ]]; then
    say "  transfer: $mib_per_s MiB/s; $bytes_per_req bytes read per response (the file: $expected_length bytes, plus the head)"
  fi
  local iou_part=""
  if [[ $iou_us != n/a && $iou_us != 0.0 ]]; then iou_part=" (of which io_uring kernel threads: $iou_us us)"; fi
  say "  server per request: ${cpu_us} us CPU$iou_part, $ctx_per_req context switches, $syscalls_per_req syscalls; peak $((peak_rss / 1024)) MiB RSS, $peak_threads threads"
  if [[ $mode == files ]]; then
    echo "$name,$target_file,$c,$rep,$rps,$mib_per_s,$mean_ms,$p99_ms,$complete,$failed,$non2xx,$bytes_per_req,$cpu_us,$iou_us,$ctx_per_req,$syscalls_per_req,$peak_rss,$peak_threads,$run_check" >>"$raw_csv"
  else
    echo "$name${idle_key:+,$idle_key},$c,$rep,$rps,$mean_ms,$p99_ms,$complete,$failed,$non2xx,$cpu_us,$iou_us,$ctx_per_req,$syscalls_per_req,$peak_rss,$peak_threads,$run_check" >>"$raw_csv"
  fi
}

# raw.csv's columns, by mode. The summary keeps the columns before `repetition` as the row's key, takes the
# median of the others over the repetitions, and sums failed + non2xx into `failures`.
RAW_THROUGHPUT=server,concurrency,repetition,requests_per_s,mean_ms,p99_ms,complete,failed,non2xx,cpu_us_per_req,io_uring_threads_cpu_us_per_req,ctxsw_per_req,syscalls_per_req,peak_rss_kib,peak_threads,check
RAW_IDLE=server,idle,keepalive,${RAW_THROUGHPUT#server,}
RAW_FILES=server,file,connections,repetition,requests_per_s,mib_per_s,mean_ms,p99_ms,complete,failed,non2xx,bytes_per_req,cpu_us_per_req,io_uring_threads_cpu_us_per_req,ctxsw_per_req,syscalls_per_req,peak_rss_kib,peak_threads,check

# A raw.csv row for a run that could not be made (the server did not start, or served the wrong bytes; or, with
# the prefix "not run: ", it is past the server's limit, which is no failure).
failed_row() {  # $1: server, $2: concurrency, $3: repetition, $4: why, [$5: the check's prefix]
  local row="$1${idle_key:+,$idle_key},$2,$3" columns filled i
  if [[ $mode == files ]]; then row="$1,$target_file,$2,$3"; fi
  IFS=, read -ra columns < <(head -1 "$raw_csv")
  IFS=, read -ra filled <<<"$row"
  for ((i = ${#filled[@]}; i < ${#columns[@]} - 1; i++)); do row+=",n/a"; done
  echo "$row,${5-FAILED: }${4//,/}" >>"$raw_csv"
}

# The targets of a run: in throughput mode "/" (the fixed 1 KB answer); in files mode one per file.
# Each entry: PATH:BYTES:FILE.
set_targets() {
  targets=("/:$BODY_BYTES:")
  if [[ $mode != files ]]; then return 0; fi
  targets=()
  local entry
  for entry in "${FILES[@]}"; do targets+=("/${entry%%:*}:${entry#*:}:${entry%%:*}"); done
}

# --mode files: makes the files once per run in $TMP/files (deleted at the end): numbered 16-byte lines, the
# same in every run, so a byte sent from the wrong offset shows in cmp; and an index.html for "/".
make_files() {
  files_dir=$TMP/files
  mkdir -p "$files_dir"
  local entry
  for entry in "${FILES[@]}"; do
    awk -v n="${entry#*:}" 'BEGIN { for (i = 0; i < n / 16; i++) printf "%015d\n", i }' >"$files_dir/${entry%%:*}"
    [[ $(stat -c %s "$files_dir/${entry%%:*}") == "${entry#*:}" ]] || { say "error: could not make ${entry%%:*}" >&2; exit 1; }
  done
  printf '<!doctype html>\n<title>benchmark files</title>\n<p>%s</p>\n' "${FILES[*]}" >"$files_dir/index.html"
  chmod 755 "$files_dir"  # nginx's workers, as nobody when we are root, must read them
  chmod 644 "$files_dir"/*
}

# Fetches a path once and compares the body with the file, byte for byte. Prints what is wrong and returns 1.
verify_file() {  # $1: URL path, $2: the file
  local got=$TMP/fetched status=0 code
  rm -f "$got"
  code=$(curl -s -o "$got" -w '%{http_code}' --max-time 20 "http://127.0.0.1:$server_port$1") || status=$?
  if ((status != 0)); then echo "curl failed (exit status $status${code:+, HTTP $code})"; return 1; fi
  if [[ $code != 200 ]]; then echo "GET $1 answered $code, not 200"; return 1; fi
  local got_size size
  got_size=$(stat -c %s "$got") size=$(stat -c %s "$2")
  if ((got_size != size)); then echo "GET $1 sent $got_size bytes, not the file's $size"; return 1; fi
  if ! cmp -s "$got" "$2"; then
    echo "GET $1 sent $size bytes that differ from the file from byte $(cmp "$got" "$2" | sed -n 's/.* differ: byte \([0-9]*\),.*/\1/p') on"
    return 1
  fi
}

progress=0

# The start of a pass over one server, in every mode: pins it and its client when asked (--pin), and prints the
# header. Sets client_prefix, pinned, and the caller's `pass` (" (run 2/3)" with --repeat).
begin_pass() {  # $1: server, $2: repetition
  client_prefix=()
  pinned=no
  if ((pin)) && is_single_threaded "$1"; then client_prefix=(taskset -c 1); pinned="server CPU 0, client CPU 1"; fi
  pass=""
  if ((repeat > 1)); then pass=" (run $2/$repeat)"; fi
  say ""
  say "== $1$pass"
}

# Starts a server of ours, or nginx; on failure, start_problem says why.
start_named() {
  start_problem=
  if [[ $1 == nginx ]]; then start_nginx; else start_server "$1"; fi
}

# One pass over one server: start it, then for each target (the fixed answer, or each file) warm it up and run
# at each concurrency; stop it. With --repeat, main makes one pass over all the servers per repetition, rather
# than repeating each row back to back: a burst of other work on the machine then lands on every server a
# little, instead of on one server's whole row.
benchmark_server() {
  local name=$1 rep=$2 c target runs_left=$((${#targets[@]} * ${#concurrencies[@]})) pass problem
  begin_pass "$name" "$rep"
  local started=0
  start_named "$name" && started=1
  if ((!started)); then
    fail_check "$name ${start_problem:-did not start}"
    for target in "${targets[@]}"; do
      target_file=${target##*:}
      for c in "${concurrencies[@]}"; do failed_row "$name" "$c" "$rep" "${start_problem:-did not start}"; done
    done
    progress=$((progress + runs_left))
    return 0
  fi
  say "  $server_command on port $server_port (pid ${server_pids[*]})"
  # Files: check what comes back before measuring how fast it comes. "/" is the folder: its index.html.
  if [[ $mode == files ]] && ! problem=$(verify_file / "$files_dir/index.html"); then fail_check "$name: $problem"; fi
  for target in "${targets[@]}"; do
    target_path=${target%%:*} target_file=${target##*:}
    expected_length=${target#*:}
    expected_length=${expected_length%%:*}
    if [[ $mode == files ]]; then
      if ! problem=$(verify_file "$target_path" "$files_dir/$target_file"); then
        fail_check "$name: $problem"
        for c in "${concurrencies[@]}"; do failed_row "$name" "$c" "$rep" "wrong body: $problem"; done
        progress=$((progress + ${#concurrencies[@]}))
        runs_left=$((runs_left - ${#concurrencies[@]}))
        continue
      fi
      say "  GET $target_path: 200, the $expected_length bytes of $target_file (curl, cmp)"
    fi
    warm_up "$name"
    for c in "${concurrencies[@]}"; do
      progress=$((progress + 1))
      runs_left=$((runs_left - 1))
      say "[$progress/$total_runs] $name${target_file:+ $target_file} c=$c$pass"
      measure_run "$name" "$c" "$rep"
      if ! kill -0 "$server_pid" 2>/dev/null; then
        stop_server
        say "  $name died (exit status $server_exit); skipping its remaining runs in this pass" >&2
        progress=$((progress + runs_left))
        return 0
      fi
    done
  done
  stop_server
  if [[ -n $server_exit && $server_exit != 0 ]]; then warn "$name exited with status $server_exit on SIGTERM (expected 0)"; fi
}

# ---- The connection-cost mode --------------------------------------------------------------------------

RAW_CONNECTIONS=server,connections,held,refused,closed,blocked,untried,dropped,processes,setup_s,rss_kib_per_conn,threads_per_conn,fds_per_conn,kernel_b,server_kernel_b,client_kernel_b,server_charged_b,available_drop_b,idle_cpu_ms,probe_ok,probe_refused,probe_timeout,probe_median_ms,probe_p99_ms,probe_max_ms,after_status,stopped_by,slabs,check
CONN_PROBES=100        # new clients timed one after another beside the held connections: median and p99
IDLE_WINDOW_S=5        # how long the server's CPU time is watched while the connections sit idle
FREE_MARGIN_KIB=$((1024 * 1024))  # a step must leave at least 1 GiB of the machine's memory available
FIRST_GUESS_B=20480    # bytes per connection (both ends, all of it) assumed before a step has measured it

# The system settings this mode raises, "key old-value" each; put back by restore_settings, also on exit.
changed_settings=()
raise_sysctl() {  # $1: a sysctl key (fs.nr_open); $2: the value it needs at least
  local file=/proc/sys/${1//.//} old
  old=$(cat "$file" 2>/dev/null) || return 0
  if ((old >= $2)); then return 0; fi
  if ((EUID != 0)); then
    say "error: ${conn_max} connections need $1 raised from $old to $2, which only root can do: run it as root, or with smaller --conns" >&2
    exit 1
  fi
  say "  sysctl $1: $old -> $2 (put back after the run)"
  echo "$2" >"$file"
  changed_settings+=("$1 $old")
}
# shellcheck disable=SC2317  # (called by cleanup, from the EXIT trap)
restore_settings() {
  local entry key
  for entry in "${changed_settings[@]}"; do
    key=${entry%% *}
    echo "${entry#* }" >"/proc/sys/${key//.//}" && say "  sysctl $key: put back to ${entry#* }"
  done
  changed_settings=()
}

# What --conns needs of the machine, raised where it must be (each change printed, and undone on exit), and
# the memory cgroups that tell the client's kernel memory from the server's (see kernel_memory.py).
conn_max=0
server_cg=
client_cg=
prepare_connections() {
  conn_max=$(max_of "${conn_counts[@]}")
  local need=$((conn_max + 64)) hard
  # Descriptors: the server holds one per connection, in one process (nginx: spread over its workers); so
  # does the client, spread over as many holder processes as it needs.
  raise_sysctl fs.nr_open "$need"
  raise_sysctl fs.file-max $((2 * conn_max + 65536))
  hard=$(ulimit -Hn)
  if [[ $hard != unlimited ]] && ((hard < need)); then
    ulimit -Hn "$need" 2>/dev/null || true
    if [[ $(ulimit -Hn) != "$need" ]]; then
      say "  open files: the hard limit stays $hard: raising it needs CAP_SYS_RESOURCE, which this root lacks; one server process holds at most about $((hard - 16)) connections"
    fi
  fi
  ulimit -Sn "$(ulimit -Hn)"
  say "  open files: $(ulimit -Sn) per process"
  # 02 starts a thread per connection: a process ID and two memory mappings (stack and guard page) each.
  if [[ " ${servers[*]}" == *" 02-"* ]]; then
    raise_sysctl kernel.threads-max $((conn_max + 4096))
    raise_sysctl kernel.pid_max "$(( conn_max + 4096 < 4194304 ? conn_max + 4096 : 4194304 ))"
    raise_sysctl vm.max_map_count $((2 * conn_max + 65530))
  fi
  local parent
  parent=$(memory_cgroup) || true
  if [[ -n $parent ]] && mkdir -p "$parent/psp-server-$$" "$parent/psp-client-$$" 2>/dev/null; then
    server_cg=$parent/psp-server-$$ client_cg=$parent/psp-client-$$
    say "  memory cgroups: $server_cg and $client_cg (the kernel memory each side's system calls allocate)"
  else
    say "  memory cgroups: not available (not root, or no memory controller): the kernel columns count both ends"
  fi
  if [[ ! -r /proc/slabinfo ]]; then say "  /proc/slabinfo: not readable (not root): no slab column"; fi
}

# The directory of this shell's memory cgroup (v1, or v2 with the memory controller on for its children).
memory_cgroup() {
  local path
  path=$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup)
  if [[ -n $path && -w /sys/fs/cgroup/memory$path ]]; then echo "/sys/fs/cgroup/memory$path"; return 0; fi
  path=$(sed -n 's/^0:://p' /proc/self/cgroup)
  local dir=/sys/fs/cgroup$path
  if [[ -n $path ]] && grep -qw memory "$dir/cgroup.subtree_control" 2>/dev/null && [[ -w $dir ]]; then echo "$dir"; return 0; fi
  return 1
}

# shellcheck disable=SC2317  # (called by cleanup, from the EXIT trap)
remove_cgroups() {
  local dir
  for dir in "$server_cg" "$client_cg"; do
    if [[ -n $dir ]]; then rmdir "$dir" 2>/dev/null || true; fi
  done
}

# A command's words that start what follows them inside a cgroup: `in_cgroup DIR` + COMMAND.
in_cgroup() {
  if [[ -z $1 ]]; then return 0; fi
  # shellcheck disable=SC2016  # (the inner shell expands them)
  printf '%s\n' sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$1"
}

kernel_snapshot() {  # $1: the JSON file; [$2: --settle]
  python3 "$SCRIPT_DIR/kernel_memory.py" snapshot "$1" ${server_cg:+--cgroup "server=$server_cg"} \
    ${client_cg:+--cgroup "client=$client_cg"} ${2:+"$2"}
}

# For each N: a fresh server; idle_conns --hold opens N idle keep-alive connections and times new clients;
# then the kernel's growth, the server's CPU while they sit idle, and the release. The steps stop, for that
# server, at the first N it does not hold (the row says what stopped it), or that would not fit in memory.
connection_cost() {
  local name=$1 n stopped="" guess_b=$FIRST_GUESS_B avail_kib need_kib
  begin_pass "$name" 1
  for n in "${conn_counts[@]}"; do
    progress=$((progress + 1))
    say "[$progress/$total_runs] $name: $n idle connections"
    avail_kib=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo)
    need_kib=$((n * guess_b * 5 / 4 / 1024))
    if [[ -z $stopped ]] && ((need_kib > avail_kib - FREE_MARGIN_KIB)); then
      stopped="memory: $n connections need about $((need_kib / 1048576 + 1)) GiB at $guess_b bytes each, $((avail_kib / 1048576)) GiB available"
    fi
    if [[ -n $stopped ]]; then
      say "  not run: $stopped"
      last_line=() kmem=()
      conn_row "$name" "$n" "not run" "$stopped"
      continue
    fi
    connection_step "$name" "$n"
    if [[ -n $step_stopped ]]; then stopped=$step_stopped; fi
    if [[ ${kmem[available_drop_b]:-n/a} != n/a ]] && ((kmem[available_drop_b] > 0)); then guess_b=${kmem[available_drop_b]}; fi
  done
}

# One server, one N. Sets step_stopped when the server did not hold them all, and kmem (the kernel's growth).
declare -A kmem=()
connection_step() {
  local name=$1 n=$2 started=0 problems=() ticks idle_ms=n/a
  step_stopped=
  kmem=() held_line=() last_line=()
  launch_prefix=()
  if [[ -n $server_cg ]]; then mapfile -t launch_prefix < <(in_cgroup "$server_cg"); fi
  start_named "$name" && started=1
  launch_prefix=()
  if ((!started)); then
    fail_check "$name did not start"
    conn_row "$name" "$n" "FAILED: did not start" ""
    step_stopped="it did not start"
    return 0
  fi
  log_header "$name connections=$n" "idle_conns --connections $n --probes $CONN_PROBES --hold"
  kernel_snapshot "$TMP/before.json" --settle
  hold_probes=$CONN_PROBES
  mapfile -t holder_prefix < <(in_cgroup "$client_cg")
  hold_idle "$n" || true
  hold_probes=1 holder_prefix=()
  if [[ -n $holder_pid && -n ${held_line[held]:-} ]]; then
    kernel_snapshot "$TMP/after.json"
    if ((held_line[held] < n)); then step_stopped=$(what_stopped "$name" "$n"); fi
    ticks=$(cpu_ns)
    sleep "$IDLE_WINDOW_S"
    idle_ms=$(awk -v a="$ticks" -v b="$(cpu_ns)" 'BEGIN { printf "%.1f", (b - a) / 1e6 }')
  fi
  release_idle "$name" "$n"
  # Per connection only when all N were held: refused connections leave TIME_WAIT sockets behind.
  if [[ -n ${last_line[held]:-} && -f $TMP/after.json ]] && ((held_line[held] == n)); then
    local key
    for key in $(python3 "$SCRIPT_DIR/kernel_memory.py" diff "$TMP/before.json" "$TMP/after.json" \
      --held "${held_line[held]}"); do kmem[${key%%=*}]=${key#*=}; done
  fi
  rm -f "$TMP/before.json" "$TMP/after.json"
  local r=${last_line[held]:+1}
  if [[ -z $r ]]; then
    problems+=("idle_conns failed: $(head -1 "$TMP/hold.err")")
    step_stopped="idle_conns failed"
  else
    say "  per held connection: server ${last_line[rss_kib_per_conn]} KiB user, ${kmem[server_kernel_b]:-n/a} B kernel; client ${kmem[client_kernel_b]:-n/a} B kernel; ${last_line[threads_per_conn]} threads, ${last_line[fds_per_conn]} descriptors"
    say "  slabs grown (bytes per connection, both ends): ${kmem[slabs]:-n/a}"
    say "  a new client meanwhile: ${last_line[probe_ok]}/${last_line[probes]} answered, median ${last_line[probe_median_ms]} ms, p99 ${last_line[probe_p99_ms]} ms; the server's CPU over ${IDLE_WINDOW_S} s idle: $idle_ms ms"
    if [[ -n $step_stopped ]]; then say "  stopped by $step_stopped"; fi
    ((last_line[server_alive] == 1)) || problems+=("the server died")
    # select() cannot watch an fd >= FD_SETSIZE (1024): past it, 03 must answer 503 or close, never hold.
    if [[ $name == 03-* ]] && ((last_line[held] >= 1024)); then
      problems+=("03 held ${last_line[held]} connections, more than select() can watch (FD_SETSIZE 1024)")
    fi
    # 01 and 04 serve one connection per thread: blocked connections and a waiting newcomer are their cost,
    # shown in the table, not a failure. Every other model must serve or refuse each connection, and answer
    # a newcomer promptly unless it is at its limit (then refusing it cleanly is fine).
    # At a limit (its descriptors), a server may leave newcomers waiting in the accept queue, as nginx does.
    case $name in
      01-* | 04-*) ;;
      *)
        if [[ -n $step_stopped ]]; then :; else
        ((last_line[blocked] == 0)) || problems+=("${last_line[blocked]} connections were neither answered nor refused")
        ((last_line[probe_timeout] == 0)) || problems+=("a new client got no answer while the connections were held")
        if [[ ${last_line[probe_median_ms]} != n/a ]] && awk -v ms="${last_line[probe_median_ms]}" 'BEGIN { exit !(ms > 10) }'; then
          problems+=("a new client waited ${last_line[probe_median_ms]} ms (median), not promptly (10 ms at most)")
        fi
        fi
        ;;
    esac
  fi
  local check=ok problem
  if ((${#problems[@]} > 0)); then
    for problem in "${problems[@]}"; do fail_check "$name with $n connections: $problem"; done
    check="FAILED: $(IFS=';'; echo "${problems[*]//,/}")"
  fi
  conn_row "$name" "$n" "$check" "$step_stopped" "$idle_ms"
  stop_server
}

# What stopped a server short of N, read while the connections are held: a process at its descriptor limit,
# select()'s FD_SETSIZE, one connection per thread, or a thread that could not be started.
what_stopped() {
  local name=$1 n=$2 pid fds limit
  for pid in "${server_pids[@]}"; do
    fds=$(stat -c %s "/proc/$pid/fd" 2>/dev/null)  # the number of descriptors (Linux 6.2 and later)
    if [[ $fds == 0 ]]; then fds=$(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l); fi
    limit=$(awk '/^Max open files/ { print $4 }' "/proc/$pid/limits" 2>/dev/null)
    if [[ $limit =~ ^[0-9]+$ ]] && ((fds + 16 >= limit)); then
      echo "descriptors: a process at $fds of its $limit (ulimit -n)"
      return 0
    fi
  done
  if ! kill -0 "$server_pid" 2>/dev/null; then echo "it died"; return 0; fi
  case $name in
    03-*) echo "select(): FD_SETSIZE is 1024" ;;
    01-*) echo "one thread: one connection at a time" ;;
    04-*) echo "threads: one connection per worker thread, the others closed" ;;
    02-*) echo "threads: it held ${held_line[held]}; $(grep -m1 -i 'thread\|resource' "$TMP/server.stderr" || echo "see its output in the log")" ;;
    *) echo "it held ${held_line[held]} of $n (refused ${held_line[refused]}, closed ${held_line[closed]}, unanswered ${held_line[blocked]})" ;;
  esac
}

conn_row() {  # $1: server, $2: N, $3: check, $4: what stopped it, [$5: idle CPU ms]
  local cols=() key
  for key in held refused closed blocked untried dropped processes setup_s rss_kib_per_conn threads_per_conn fds_per_conn; do
    cols+=("${last_line[$key]:-}")
  done
  for key in kernel_b server_kernel_b client_kernel_b server_charged_b available_drop_b; do cols+=("${kmem[$key]:-}"); done
  cols+=("${5:-}")
  for key in probe_ok probe_refused probe_timeout probe_median_ms probe_p99_ms probe_max_ms after_status; do
    cols+=("${last_line[$key]:-}")
  done
  cols+=("${4//,/;}" "${kmem[slabs]:-}" "${3//,/;}")
  (IFS=,; echo "$1,$2,${cols[*]}") >>"$raw_csv"
}

# ---- The idle-population mode --------------------------------------------------------------------------

# For each N: a fresh server, N idle keep-alive connections held by idle_conns --hold, then the busy clients
# (ab -c C, without and with -k) beside them, measured by the same measure_run as the throughput mode. A server
# that cannot hold all N (it refused some or left some unanswered: 03 past FD_SETSIZE, 01 and 04 with one
# connection per thread) gets rows that say so, and no failed check: that is its limit, not a fault.
idle_key=  # "N,no" or "N,yes": the idle count and keep-alive, the key columns measure_run adds to its row

idle_population() {
  local name=$1 rep=$2 n ka c started pass limit
  begin_pass "$name" "$rep"
  for n in "${idle_counts[@]}"; do
    keepalive=0
    started=0
    start_named "$name" && started=1
    limit=
    if ((!started)); then
      fail_check "$name ${start_problem:-did not start}"
    else
      say "  $server_command on port $server_port (pid ${server_pids[*]})"
      warm_up "$name"
      if ((n > 0)) && ! hold_idle "$n"; then limit=$hold_problem; fi
    fi
    for ka in no yes; do
      keepalive=0
      if [[ $ka == yes ]]; then keepalive=1; fi
      idle_key=$n,$ka
      for c in "${concurrencies[@]}"; do
        progress=$((progress + 1))
        say "[$progress/$total_runs] $name beside $n idle connections, c=$c$( ((keepalive)) && echo ", keep-alive")$pass"
        if ((!started)); then failed_row "$name" "$c" "$rep" "${start_problem:-did not start}"
        elif [[ -n $limit ]]; then say "  not run: $limit"; failed_row "$name" "$c" "$rep" "$limit" "not run: "
        else measure_run "$name" "$c" "$rep"; fi
      done
    done
    idle_key=
    keepalive=0
    release_idle "$name" "$n"
    stop_server
  done
}

# Starts idle_conns --hold against the running server and waits for its `holding ...` line. Returns 1 and sets
# hold_problem when the server did not hold all N (its limit), or idle_conns could not run (a failed check).
holder_pid=
hold_probes=1       # new clients timed beside the held connections
holder_prefix=()    # words before the command: in_cgroup
declare -A held_line=()  # the holding line's figures, by key
hold_idle() {
  local n=$1 line="" key deadline=$((SECONDS + 120 + $1 / 1000))
  held_line=()
  hold_problem=
  rm -f "$TMP/hold.out"  # the loop below must not read an earlier holder's line
  # New clients timed beside the held connections (one in the idle mode). No answer within 2 s means the server
  # serves nobody else while they are held (01 serves one connection at a time): ab would only time out.
  "${holder_prefix[@]}" "$(client_binary)" --port "$server_port" --connections "$n" --pid "$server_pid" \
    --probes "$hold_probes" --hold >"$TMP/hold.out" 2>"$TMP/hold.err" &
  holder_pid=$!
  while ((SECONDS < deadline)) && kill -0 "$holder_pid" 2>/dev/null; do
    if [[ -s $TMP/hold.out ]]; then IFS= read -r line <"$TMP/hold.out" || true; fi
    if [[ $line == holding* ]]; then break; fi
    sleep 0.1
  done
  if [[ $line != holding* ]]; then
    hold_problem="idle_conns could not hold $n connections: $(head -1 "$TMP/hold.err")"
    fail_check "$name: $hold_problem"
    return 1
  fi
  for key in ${line#holding }; do held_line[${key%%=*}]=${key#*=}; done
  say "  holding ${held_line[held]} of $n idle connections (refused ${held_line[refused]}, closed ${held_line[closed]}, unanswered ${held_line[blocked]}; set up in ${held_line[setup_s]} s); a new client: ${held_line[probe]}"
  if ((held_line[held] < n)); then
    hold_problem="it held ${held_line[held]} of $n idle connections (refused ${held_line[refused]}, closed ${held_line[closed]}, unanswered ${held_line[blocked]})"
    return 1
  fi
  if [[ ${held_line[probe]} != 200 ]]; then
    hold_problem="a new client got no answer beside $n idle connections"
    return 1
  fi
}

# Stops the holder (SIGTERM: it releases the connections with resets) and checks what it saw meanwhile: none of
# the held connections closed by the server, and the server still serving a new client afterwards.
declare -A last_line=()  # the final line's figures, by key
release_idle() {
  local name=$1 n=$2 line key
  last_line=()
  if [[ -z $holder_pid ]]; then return 0; fi
  kill -TERM "$holder_pid" 2>/dev/null || true
  local deadline=$((SECONDS + 30 + n / 20000))  # a million resets take a while
  while kill -0 "$holder_pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
  kill -KILL "$holder_pid" 2>/dev/null || true
  wait "$holder_pid" 2>/dev/null || true
  holder_pid=
  cat "$TMP/hold.out" "$TMP/hold.err" >>"$log_file"
  line=$(tail -1 "$TMP/hold.out")
  for key in $line; do last_line[${key%%=*}]=${key#*=}; done
  if [[ -z ${last_line[dropped]:-} ]]; then fail_check "$name beside $n idle: idle_conns did not finish: $(head -1 "$TMP/hold.err")"; return 0; fi
  ((last_line[dropped] == 0)) || fail_check "$name beside $n idle: it closed ${last_line[dropped]} of the held connections during the runs"
  ((last_line[after_status] == 200)) || fail_check "$name beside $n idle: no answer to a new client after the connections were released"
}

# ---- The latency mode -------------------------------------------------------------------------------------

# Offered loads, as fractions of the capacity ab measures, when --rates gives none: from light load, through the
# knee, to overload, where the queue (and the corrected latency) grows for as long as the run lasts.
LATENCY_FRACTIONS=(0.1 0.25 0.5 0.7 0.8 0.9 1.0 1.1 1.25 1.5)
RAW_LATENCY=server,rate,repetition,requests_per_s,load_pct,p50_ms,p90_ms,p99_ms,p999_ms,max_ms,mean_ms,u_p99_ms,u_p999_ms,complete,failed,non2xx,cpu_us_per_req,gen_lag_p99_ms,check
declare -A rates_of=()  # server -> its rates, measured in the first repetition and kept for the others
declare -A capacity_of=()

# One server: start it, warm it up, measure its capacity (first repetition, unless --rates), then offer each
# rate for --duration, in increasing order, with a second's rest between them for the backlog of an overload
# to drain.
latency_server() {
  local name=$1 rep=$2 rate pass started=0 c=${concurrencies[0]}
  begin_pass "$name" "$rep"
  start_named "$name" && started=1
  if ((started)); then
    say "  $server_command on port $server_port (pid ${server_pids[*]})"
    warm_up "$name"
    if [[ -z ${rates_of[$name]:-} ]]; then measure_capacity "$name" "$c"; fi
  fi
  if ((!started)) || [[ -z ${rates_of[$name]:-} ]]; then
    # (A capacity run that failed has said so in its own failed check.)
    if ((!started)); then fail_check "$name ${start_problem:-did not start}"; fi
    local why=${start_problem:-did not start}
    if ((started)); then why="no capacity: its ab run failed"; fi
    for rate in ${rates_of[$name]:-${rates[*]:-n/a}}; do
      echo "$name,$rate,$rep$(printf ',n/a%.0s' {1..15}),FAILED: $why" >>"$raw_csv"
    done
    progress=$((progress + rate_count))
    stop_server
    return 0
  fi
  for rate in ${rates_of[$name]}; do
    progress=$((progress + 1))
    say "[$progress/$total_runs] $name at $rate req/s$pass"
    latency_run "$name" "$rate" "$rep" "$c"
    if ! kill -0 "$server_pid" 2>/dev/null; then
      say "  $name died; skipping its remaining rates in this pass" >&2
      break
    fi
    sleep 1
  done
  stop_server
}

# Capacity: what ab, closed loop, gets from the server with C connections (a new one per request, or -k).
# Sets rates_of[NAME] from --rates, or from the fractions of the capacity, rounded to 10 req/s.
measure_capacity() {
  local name=$1 c=$2 status=0 fraction list=""
  load_cmd=(ab -q -r -n "$requests" -c "$c")
  if ((keepalive)); then load_cmd+=(-k); fi
  load_cmd+=("http://127.0.0.1:$server_port/")
  say "  capacity: ${load_cmd[*]}"
  log_header "$name capacity" "${load_cmd[*]}"
  run_client $((60 + requests / 50)) "$TMP/run.out" "$TMP/run.out" "${client_prefix[@]}" "${load_cmd[@]}" || status=$?
  cat "$TMP/run.out" >>"$log_file"
  parse_output
  check_run "$name capacity" "$status" "$requests"
  if [[ $run_check != ok || $rps == n/a ]]; then return 0; fi
  capacity_of[$name]=${rps%.*}
  if ((${#rates[@]} > 0)); then
    rates_of[$name]=$(printf '%s\n' "${rates[@]}" | sort -n | tr '\n' ' ')  # lowest first: the knee is read in order
    rates_of[$name]=${rates_of[$name]% }
  else
    for fraction in "${LATENCY_FRACTIONS[@]}"; do
      list+=" $(awk -v r="$rps" -v f="$fraction" 'BEGIN { v = int(r * f / 10 + 0.5) * 10; print (v < 10) ? 10 : v }')"
    done
    rates_of[$name]=${list# }
  fi
  say "  capacity ${capacity_of[$name]} req/s; offered loads: ${rates_of[$name]} req/s"
}

# One rate: openloop for --duration, the server's CPU read from /proc around it; appends a row to raw.csv.
latency_run() {
  local name=$1 rate=$2 rep=$3 c=$4 status=0 line key cpu_before cpu_after problems=()
  local -A r=()
  local cmd=("$(open_loop_binary)" --port "$server_port" --rate "$rate" --duration "$duration_s"
    --connections "$c" --expect-length "$BODY_BYTES")
  if ((!keepalive)); then cmd+=(--new-conn); fi
  say "  ${cmd[*]##*/}"
  log_header "$name rate=$rate run $rep/$repeat" "${cmd[*]}"
  cpu_before=$(cpu_ticks)
  run_client $((duration_s + 60)) "$TMP/run.out" "$TMP/run.err" "${client_prefix[@]}" "${cmd[@]}" || status=$?
  cpu_after=$(cpu_ticks)
  cat "$TMP/run.out" "$TMP/run.err" >>"$log_file"
  line=$(tail -1 "$TMP/run.out")
  for key in $line; do r[${key%%=*}]=${key#*=}; done
  # Past its capacity a server may time out, drop or refuse requests (04 answers 503 when its queue is full):
  # that is what this mode shows, counted in the failures column, not a failed check. A refusal at or below
  # the capacity is one, as are a wrong body, a dead server and a generator that failed.
  if ((status != 0)) || [[ -z ${r[completed]:-} ]]; then
    problems+=("openloop failed (status $status): $(head -1 "$TMP/run.err")")
  else
    if ((r[bad_status] > 0 && rate <= ${capacity_of[$name]:-0})); then
      problems+=("${r[bad_status]} answers were not 200, at or below the capacity")
    fi
    ((r[bad_length] == 0)) || problems+=("${r[bad_length]} answers had a body other than $BODY_BYTES bytes")
    if ((r[fell_behind])); then
      warn "$name at $rate req/s: openloop fell behind its schedule (its own lag p99 ${r[gen_lag_p99_ms]} ms; on a CPU ${r[gen_cpu_pct]} % of the run, waiting for one ${r[gen_wait_pct]} %): the latencies there include the generator's lateness"
    fi
    say "  achieved ${r[achieved_rps]} req/s; latency from the intended send time p50 ${r[p50_ms]} p99 ${r[p99_ms]} p99.9 ${r[p999_ms]} max ${r[max_ms]} ms; from the actual send p99 ${r[u_p99_ms]} ms; ${r[errors]} errors, ${r[timeouts]} timeouts"
  fi
  if ! kill -0 "$server_pid" 2>/dev/null; then problems+=("the server died"); fi
  local check=ok problem failed=n/a cpu_us=n/a load_pct=n/a
  if ((${#problems[@]} > 0)); then
    for problem in "${problems[@]}"; do fail_check "$name at $rate req/s: $problem"; done
    check="FAILED: $(IFS=';'; echo "${problems[*]//,/}")"
  fi
  if [[ -n ${r[completed]:-} ]]; then
    failed=$((r[scheduled] - r[completed]))  # errors, timeouts, unsent; the refused are in non2xx
    cpu_us=$(ratio "$(((cpu_after - cpu_before) * 1000000 / $(getconf CLK_TCK)))" "${r[completed]}" %.1f)
  fi
  if [[ -n ${capacity_of[$name]:-} ]]; then load_pct=$(ratio $((rate * 100)) "${capacity_of[$name]}" %.0f); fi
  echo "$name,$rate,$rep,${r[achieved_rps]:-n/a},$load_pct,${r[p50_ms]:-n/a},${r[p90_ms]:-n/a},${r[p99_ms]:-n/a},${r[p999_ms]:-n/a},${r[max_ms]:-n/a},${r[mean_ms]:-n/a},${r[u_p99_ms]:-n/a},${r[u_p999_ms]:-n/a},${r[completed]:-0},$failed,${r[bad_status]:-0},$cpu_us,${r[gen_lag_p99_ms]:-n/a},$check" >>"$raw_csv"
}

# ---- 5. The summary -----------------------------------------------------------------------------------------

# raw.csv -> summary.csv, in any mode whose raw.csv has a `repetition` column: the columns before it are the
# row's key (server, concurrency; or server, file, connections). For each row: the median of each column over
# the repetitions (an even count takes the mean of the middle two); for req/s also the min, the max, the
# spread as (max - min) / median, and vs_nginx, the ratio to the nginx row with the same key (same
# concurrency, same file); failed + non2xx summed over all runs as `failures`; the first failed check.
summarize_runs() { analyse summarize "$raw_csv"; }  # (the rules, in Python: analyse.py's summarize)

# The Markdown tables of summary.md. Each mode's columns (CSV column, heading, format) are a list in analyse.py's
# TABLES: a new mode adds its list there and a function here.
throughput_table() { analyse table throughput "$summary_csv" --tool "$tool"; }  # with wrk, "connections" for c
files_table() { analyse table files "$summary_csv"; }
connection_table() {  # from raw.csv: one run per row, nothing to summarize
  analyse table connections "$raw_csv"
  echo
  # The slabs of the rows whose kernel memory was measured (every connection held).
  analyse table slabs <(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "slabs") col = i; print; next }
    $col != "" && $col != "n/a"' "$raw_csv")
}
idle_table() { analyse table idle "$summary_csv"; }
latency_table() {
  analyse table latency "$summary_csv"
  echo
  analyse knee "$summary_csv" --target "$p99_target"
}


# Two panels, req/s and p99 against concurrency (log scale), one line per server; SVG and PNG. The analyser
# writes plot.dat and runs gnuplot, and prints what went wrong, one line each: warnings.
plot_results() {
  if ! have gnuplot; then return 0; fi
  local problem
  while IFS= read -r problem; do warn "$problem"; done < <(
    analyse plot "$summary_csv" "$results_dir" --mode "$mode" --tool "$tool" --title "$plot_title" \
      --target "$p99_target")
}

write_summary() {
  local md=$results_dir/summary.md load_desc entry files_desc=""
  if [[ $tool == wrk ]]; then load_desc="wrk, $duration per run, keep-alive, $wrk_threads client thread(s), --latency"
  else load_desc="ab, $requests requests per run, $( ((keepalive)) && echo "keep-alive (-k)" || echo "a new connection per request")"; fi
  if [[ $mode == connections ]]; then
    load_desc="idle_conns --hold: N idle keep-alive connections (each answered once), from as many holder processes as the descriptor limit needs, 16 source addresses (127.1.K.x) each; then $CONN_PROBES new clients timed one after another, the kernel's memory read (kernel_memory.py), and the server's CPU time over $IDLE_WINDOW_S s idle"
  fi
  if [[ $mode == idle ]]; then
    load_desc="ab, $requests requests per run, -c ${concurrencies[*]}, a new connection per request and keep-alive (-k), beside N idle keep-alive connections that idle_conns --hold opened first (each answered once, then silent)"
  fi
  if [[ $mode == latency ]]; then
    local c=${concurrencies[0]} how="a new connection per request, at most ${concurrencies[0]} at once" k=""
    if ((keepalive)); then how="keep-alive on $c connections" k=" -k"; fi
    load_desc="openloop, $duration_s s per offered rate, $how; requests sent on a fixed schedule, latency measured from each one's intended send time (the closed-loop view: from its actual send); capacity measured first with ab -n $requests -c $c$k; knee: the highest rate whose p99 stays under $p99_target ms"
  fi
  local counted_by="perf stat -p"
  if [[ $perf_state != ok ]]; then counted_by=$perf_state; fi
  if [[ $mode == latency ]]; then counted_by="not counted in this mode"; fi
  for entry in "${FILES[@]}"; do files_desc+="${files_desc:+, }${entry%%:*} (${entry#*:} bytes)"; done
  {
    echo "# Benchmark: $mode, $start_time to $(date '+%H:%M:%S %Z')"
    echo
    echo "- Machine: $cpu_model, $cpu_count CPUs, $memory${virt:+, $virt VM}; $os"
    echo "- Kernel: $kernel"
    echo "- Commit: $commit; servers built in $build_dir ($build_type)"
    echo "- Command: \`$command_line\`"
    echo "- Load: $load_desc"
    if [[ $mode == files ]]; then
      echo "- Files: $files_desc, in one folder made for the run; before its runs, each server's answer for each file (and for /, its index.html) is fetched once with curl and compared with cmp, and every run checks the bytes wrk read"
    fi
    if [[ $mode != connections ]]; then
      if [[ $mode == latency ]]; then
        echo "- Repetitions: $repeat per server and offered rate, each a whole pass over the servers at the same rates; the tables give the median of each column"
      else
        echo "- Repetitions: $repeat per server and $(case $mode in files) echo "file and connection count" ;; idle) echo "idle count, keep-alive and concurrency" ;; *) echo concurrency ;; esac); the table gives the median of each column, and the spread of req/s as (max - min) / median; vs nginx: req/s divided by nginx's in the same run"
      fi
      echo "- Server flags: $( [[ $mode == files ]] && echo "--root DIR ")--delay-us $delay_us --handler $handler${threads:+ --threads $threads}$( [[ $mode == idle ]] && echo " --idle-timeout 600"); pinning: $( ((pin)) && echo "single-threaded servers on CPU 0, client on CPU 1" || echo off)"
      echo "- Server counters: CPU from /proc (utime+stime of every thread, io_uring's kernel threads included), context switches and syscalls: $counted_by"
    else
      echo "- Server flags: --delay-us $delay_us --handler $handler${threads:+ --threads $threads} --idle-timeout 600"
    fi
    if [[ " ${servers[*]} " == *:* ]]; then
      echo "- Variants: a row named SERVER:--flag=value ran with \`--flag value\` added after the flags above"
    fi
    if ((reference)) && [[ $mode == files ]]; then
      echo "- Reference: nginx $(nginx_version) serving the same folder, sendfile on, tcp_nopush on, worker_processes $nginx_workers, access_log off"
    elif ((reference)); then
      echo "- Reference: nginx $(nginx_version) serving a $BODY_BYTES-byte file, worker_processes $nginx_workers, access_log off"
    fi
    echo "- Tools: ab $ab_version$( [[ $tool == wrk ]] && echo ", $(wrk -v 2>&1 | awk 'NR == 1 { print $1, $2 }')")"
    echo "- Before the run: CPUs $busy % busy, load average $start_load"
    if ((failures > 0)); then echo "- **Checks: $failures failed** (see the check column and $log_file)"; else echo "- Checks: all passed"; fi
    echo
    case $mode in
      throughput) throughput_table ;;
      files) files_table ;;
      connections) connection_table ;;
      idle) idle_table ;;
      latency) latency_table ;;
    esac
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
  if [[ $mode == latency ]]; then plot_title=openloop; fi
  if ((keepalive)) && [[ $mode != idle ]]; then plot_title+=" keep-alive"; fi
  plot_title+=", --delay-us $delay_us --handler $handler, $cpu_count CPUs, kernel $kernel, commit $commit"

  local name rep
  if [[ $mode == connections ]]; then
    total_runs=$((${#servers[@]} * ${#conn_counts[@]}))
    echo "$RAW_CONNECTIONS" >"$raw_csv"
    for name in "${servers[@]}"; do connection_cost "$name"; done
    cp "$raw_csv" "$summary_csv"
    write_summary
  elif [[ $mode == latency ]]; then
    echo "$RAW_LATENCY" >"$raw_csv"
    rate_count=${#rates[@]}
    if ((rate_count == 0)); then rate_count=${#LATENCY_FRACTIONS[@]}; fi
    total_runs=$((${#servers[@]} * rate_count * repeat))
    for ((rep = 1; rep <= repeat; rep++)); do
      for name in "${servers[@]}"; do latency_server "$name" "$rep"; done
    done
    summarize_runs >"$summary_csv"
    write_summary
  elif [[ $mode == idle ]]; then
    echo "$RAW_IDLE" >"$raw_csv"
    total_runs=$((${#servers[@]} * ${#idle_counts[@]} * 2 * ${#concurrencies[@]} * repeat))
    for ((rep = 1; rep <= repeat; rep++)); do
      for name in "${servers[@]}"; do idle_population "$name" "$rep"; done
    done
    summarize_runs >"$summary_csv"
    write_summary
  else
    set_targets
    if [[ $mode == files ]]; then
      make_files
      echo "$RAW_FILES" >"$raw_csv"
    else
      echo "$RAW_THROUGHPUT" >"$raw_csv"
    fi
    total_runs=$((${#servers[@]} * ${#targets[@]} * ${#concurrencies[@]} * repeat))
    for ((rep = 1; rep <= repeat; rep++)); do
      for name in "${servers[@]}"; do benchmark_server "$name" "$rep"; done
    done
    summarize_runs >"$summary_csv"
    write_summary
    if [[ $mode == throughput ]]; then plot_results; fi
  fi
  if [[ $mode =~ ^(idle|latency|connections)$ ]]; then plot_results; fi

  say ""
  sed -n '/^| /p' "$results_dir/summary.md"
  say ""
  say "results: $results_dir (summary.md, summary.csv, raw.csv$(have gnuplot && [[ $mode != files ]] && echo ", plot.svg, plot.png"))"
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
