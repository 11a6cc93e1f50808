"""The end of a run: summary.csv (the median of the repetitions), summary.md (what ran, where, and the tables),
the plot, and fingerprints.json (what code each server was built from, when docs/tools/fingerprint.py exists).

The arithmetic and the formats are analyse.py's (tested against the committed runs); this module says
which of its tables each mode shows, and writes the page around them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass

from .session import BODY_BYTES, FILES, Session, command_output, have, which
from .scaling import WARM_UP
from . import analyse, disturbance

CONN_PROBES = 100     # --mode connections: new clients timed one after another beside the held connections
IDLE_WINDOW_S = 5     # --mode connections: how long the server's CPU time is watched while the connections idle


@dataclass
class Context:
    """What the page says about the run beyond the options."""
    start_time: str
    command_line: str
    machine: dict[str, str]
    busy: int
    start_load: str
    results_dir: str


def summarize(raw_csv: str, summary_csv: str, mode: str = "") -> None:
    """raw.csv -> summary.csv: the columns before `repetition` are the row's key; the median of the others (and,
    in --mode scaling, the ratio to the floor and the client-bound mark)."""
    rows = analyse.summarize(analyse.read_rows(raw_csv))
    if mode == "scaling":
        rows = analyse.scaling_columns(rows)
    analyse.write_text(summary_csv, analyse.csv_text(rows))


def table(kind: str, csv_path: str, tool: str = "ab") -> list[str]:
    return analyse.markdown_table(analyse.table_columns(kind, tool), analyse.read_rows(csv_path))


def tables(session: Session, results_dir: str) -> list[str]:
    """Each mode's tables (its columns: a list in analyse.py's TABLES)."""
    o = session.options
    summary_csv, raw_csv = (os.path.join(results_dir, name) for name in ("summary.csv", "raw.csv"))
    if o.mode == "throughput":
        return table("throughput", summary_csv, o.tool)  # with wrk, "connections" for c
    if o.mode == "files":
        return table("files", summary_csv)
    if o.mode == "idle":
        return table("idle", summary_csv)
    if o.mode == "scaling":
        return table("scaling", summary_csv)
    if o.mode == "latency":
        return [*table("latency", summary_csv), "", *analyse.knees(analyse.read_rows(summary_csv),
                                                                   float(o.p99_target))]
    # connections: from raw.csv, one run per row; then the slabs of the rows whose kernel memory was measured.
    rows = analyse.read_rows(raw_csv)
    column = rows[0].index("slabs")
    measured = [rows[0]] + [row for row in rows[1:] if len(row) > column and row[column] not in ("", "n/a")]
    return [*table("connections", raw_csv), "",
            *analyse.markdown_table(analyse.table_columns("slabs"), measured)]


def load_description(session: Session) -> str:
    o = session.options
    if o.mode == "connections":
        return ("idle_conns --hold: N idle keep-alive connections (each answered once), from as many holder processes "
                "as the descriptor limit needs, 16 source addresses (127.1.K.x) each; then "
                f"{CONN_PROBES} new clients timed one after another, the kernel's memory read (kernel_memory.py), and "
                f"the server's CPU time over {IDLE_WINDOW_S} s idle")
    if o.mode == "idle":
        return (f"ab, {o.requests} requests per run, -c {' '.join(map(str, o.concurrencies))}, a new connection per "
                "request and keep-alive (-k), beside N idle keep-alive connections that idle_conns --hold opened "
                "first (each answered once, then silent)")
    if o.mode == "latency":
        c = o.concurrencies[0]
        how, k = (f"keep-alive on {c} connections", " -k") if o.keepalive else (
            f"a new connection per request, at most {c} at once", "")
        return (f"openloop, {o.duration_s} s per offered rate, {how}; requests sent on a fixed schedule, latency "
                "measured from each one's intended send time (the closed-loop view: from its actual send); capacity "
                f"measured first with ab -n {o.requests} -c {c}{k}; knee: the highest rate whose p99 stays under "
                f"{o.p99_target} ms")
    if o.mode == "scaling":
        return (f"wrk -c {o.concurrencies[0]}, {o.duration} per run after a {WARM_UP} warm-up, on the CPUs the "
                "server does not have (K..N-1), one client thread per CPU; keep-alive, and a new connection per "
                "request (-H 'Connection: close'); the server on CPUs 0..K-1 with --threads K (nginx: K workers), "
                f"for K in {', '.join(map(str, o.cores))}; --delay-us {' and '.join(map(str, o.delays))}; "
                f"client-bound: the client's CPUs more than {analyse.CLIENT_BOUND_PCT} % busy (/proc/stat)")
    if o.tool == "wrk":
        return f"wrk, {o.duration} per run, keep-alive, {o.wrk_threads} client thread(s), --latency"
    return (f"ab, {o.requests} requests per run, "
            f"{'keep-alive (-k)' if o.keepalive else 'a new connection per request'}")


def nginx_version() -> str:
    result = subprocess.run([which("nginx"), "-v"], capture_output=True, text=True, check=False)
    return (result.stdout + result.stderr).strip().split("nginx/")[-1]


def header(session: Session, context: Context) -> list[str]:
    o, m = session.options, context.machine
    counted_by = "perf stat -p" if session.perf_state == "ok" else session.perf_state
    if o.mode == "latency":
        counted_by = "not counted in this mode"
    threads = f" --threads {o.threads}" if o.threads else ""
    virt = f", {m['virt']} VM" if m["virt"] else ""
    lines = [f"# Benchmark: {o.mode}, {context.start_time} to {time.strftime('%H:%M:%S %Z')}", "",
             f"- Machine: {session.cpu_model}, {session.cpus} CPUs, {m['memory']}{virt}; {m['os']}",
             f"- Kernel: {session.kernel}",
             f"- Commit: {session.commit}; servers built in {o.build_dir} ({session.build_type})",
             f"- Command: `{context.command_line}`",
             f"- Load: {load_description(session)}"]
    if o.mode == "files":
        files = ", ".join(f"{name} ({size} bytes)" for name, size in FILES)
        lines.append(f"- Files: {files}, in one folder made for the run; before its runs, each server's answer for "
                     "each file (and for /, its index.html) is fetched once with curl and compared with cmp, and "
                     "every run checks the bytes wrk read")
    if o.mode != "connections":
        if o.mode == "latency":
            lines.append(f"- Repetitions: {o.repeat} per server and offered rate, each a whole pass over the servers "
                         "at the same rates; the tables give the median of each column")
        else:
            per = {"files": "file and connection count", "idle": "idle count, keep-alive and concurrency",
                   "scaling": "core count, load and handler"}.get(o.mode, "concurrency")
            lines.append(f"- Repetitions: {o.repeat} per server and {per}; the table gives the median of each "
                         "column, and the spread of req/s as (max - min) / median; vs nginx: req/s divided by "
                         "nginx's in the same run")
        pinning = "single-threaded servers on CPU 0, client on CPU 1" if o.pin else "off"
        if o.mode == "scaling":
            pinning = "the server on CPUs 0..K-1, the client on the others"
        delays = " and ".join(map(str, o.delays)) if o.mode == "scaling" else o.delay_us
        threads = " --threads K" if o.mode == "scaling" else threads
        lines.append(f"- Server flags: {'--root DIR ' if o.mode == 'files' else ''}--delay-us {delays} --handler "
                     f"{o.handler}{threads}{' --idle-timeout 600' if o.mode == 'idle' else ''}; pinning: {pinning}")
        lines.append("- Server counters: CPU from /proc (utime+stime of every thread, io_uring's kernel threads "
                     f"included), context switches and syscalls: {counted_by}")
    else:
        lines.append(f"- Server flags: --delay-us {o.delay_us} --handler {o.handler}{threads} --idle-timeout 600")
    if ":" in " ".join(o.servers):
        lines.append("- Variants: a row named SERVER:--flag=value ran with `--flag value` added after the flags above")
    if o.reference and o.mode == "files":
        lines.append(f"- Reference: nginx {nginx_version()} serving the same folder, sendfile on, tcp_nopush on, "
                     f"worker_processes {o.nginx_workers}, access_log off")
    elif o.reference:
        workers = "K" if o.mode == "scaling" else o.nginx_workers
        lines.append(f"- Reference: nginx {nginx_version()} answering the same {BODY_BYTES} bytes from memory "
                     f"(`return 200`), worker_processes {workers}, access_log off")
    if "floor" in o.servers:
        loops = "K" if o.mode == "scaling" else (o.threads or "2")
        lines.append(f"- Floor: benchmark/floor.cpp, {loops} epoll loops on SO_REUSEPORT listeners that answer our "
                     "exact response without parsing" + (" (with --close for a new connection per request); vs "
                                                          "floor: req/s per server CPU divided by the floor's"
                                                          if o.mode == "scaling" else ""))
    wrk = ""
    if o.tool == "wrk":
        wrk = ", " + " ".join(command_output(["wrk", "-v"]).split("\n", 1)[0].split()[:2])
    lines.append(f"- Tools: {wrk[2:] if o.mode == 'scaling' else 'ab ' + m['ab_version'] + wrk}")
    lines.append(f"- Before the run: CPUs {context.busy} % busy, load average {context.start_load}")
    if o.mode != "connections":
        lines.append(disturbance.describe(o.disturbed_pct, o.retry_disturbed))
    lines.append(counters_note(session, context.results_dir))
    if session.failures:
        lines.append(f"- **Checks: {session.failures} failed** (see the check column and {session.log_file})")
    else:
        lines.append("- Checks: all passed")
    return lines


def counters_note(session: Session, results_dir: str) -> str:
    """What the per-request counters (perf stat -p around the load tool) cost, from counters.csv: the same run with
    them and without, back to back (measure.counters_cost); or why there is nothing to compare."""
    o = session.options
    if o.mode in ("latency", "scaling", "connections"):
        return ("- Counters cost: none to state: this mode runs no per-request counters (the server's CPU time is "
                "read from /proc before and after each run)")
    if session.perf_state != "ok":
        return (f"- Counters cost: none to state: no per-request counters ran ({session.perf_state}); CPU from "
                "/proc only")
    path = os.path.join(results_dir, "counters.csv")
    rows = analyse.records(analyse.read_rows(path)) if os.path.isfile(path) else []
    pair = {row["counters"]: row for row in rows}
    if set(pair) != {"perf stat", "none"}:
        return "- Counters cost: not measured in this run (the first server's first run did not complete with perf)"
    counted, bare = pair["perf stat"], pair["none"]
    cpu_with, cpu_without = analyse.number(counted["cpu_us_per_req"]), analyse.number(bare["cpu_us_per_req"])
    rps_with, rps_without = analyse.number(counted["requests_per_s"]), analyse.number(bare["requests_per_s"])
    change = analyse.ratio((cpu_with or 0) - (cpu_without or 0), cpu_without, 3)
    cpu = (f"CPU {counted['cpu_us_per_req']} µs/req with perf stat counting, {bare['cpu_us_per_req']} without"
           + (f" ({change * 100:+.0f} %)" if change is not None else ""))
    rps = f"{rps_with:.0f} and {rps_without:.0f} req/s" if rps_with and rps_without else "req/s not measured"
    others = [analyse.number(row["other_cpu_pct"]) for row in (counted, bare)]
    caveat = ""
    if any(other is not None and other > o.disturbed_pct for other in others):
        caveat = (f"; other processes took {counted['other_cpu_pct']} and {bare['other_cpu_pct']} % of the CPUs "
                  "during the two: disturbed")
    return (f"- Counters cost: {counted['server']} at c={counted['concurrency']}, the same run with perf stat -p "
            f"counting syscalls and context switches and without, back to back: {cpu}; {rps} (counters.csv; one "
            f"pair of runs, as noisy as any single run{caveat}). The CPU µs/req column above includes that cost")


def write_summary(session: Session, context: Context) -> None:
    lines = [*header(session, context), "", *tables(session, context.results_dir), ""]
    passes = disturbance.passes_table(analyse.read_rows(os.path.join(context.results_dir, "raw.csv")))
    if passes:
        lines += ["Disturbance (other processes' share of all CPUs during each run, in the order of the run):", "",
                  *passes, ""]
    if session.warnings:
        lines += ["Warnings:", *(f"- {warning}" for warning in session.warnings), ""]
    lines.append(f"Columns are explained in benchmark/README.md. Full outputs: {session.log_file}.")
    analyse.write_text(os.path.join(context.results_dir, "summary.md"), "".join(f"{line}\n" for line in lines))


def plot_results(session: Session, results_dir: str, title: str) -> None:
    """The plot (SVG and PNG, by gnuplot, drawn by analyse.py); each problem it reports becomes a warning."""
    o = session.options
    if not have("gnuplot"):
        return
    summary_csv = os.path.join(results_dir, "summary.csv")
    try:
        if o.mode == "connections":
            problems = analyse.plot_memory(summary_csv, results_dir, title)
        elif o.mode in analyse.PANELS:
            problems = analyse.plot_panels(summary_csv, results_dir, o.mode, title, float(o.p99_target))
        else:
            problems = analyse.plot(summary_csv, results_dir, title,
                                    "connections" if o.tool == "wrk" else "concurrency")
    except (OSError, ValueError) as error:
        problems = [f"analyse.py plot: {error}"]
    for problem in problems:
        session.warn(problem)


FINGERPRINT = "docs/tools/fingerprint.py"


def write_fingerprints(session: Session, results_dir: str) -> None:
    """fingerprints.json beside the results: a fingerprint of each server's code (docs/tools/fingerprint.py
    --json), so that a page quoting this run can tell when the code it measured has changed since. Nothing when
    the script is not there (an older checkout); a note when it fails (the results stand without it)."""
    packed = os.environ.get("PSP_PACKED", "")  # a packed run's: computed where it was packed (benchmark/pack.sh)
    if packed:
        shutil.copyfile(os.path.join(packed, "fingerprints.json"), os.path.join(results_dir, "fingerprints.json"))
        return
    script = os.path.join(session.repo, FINGERPRINT)
    if not os.path.isfile(script):
        return
    result = subprocess.run(["python3", script, "--json", "--root", session.repo], cwd=session.repo,
                            capture_output=True, check=False)
    if result.returncode != 0 or not result.stdout.strip():
        session.error(f"(no fingerprints.json: {FINGERPRINT} --json exited with status {result.returncode})")
        return
    with open(os.path.join(results_dir, "fingerprints.json"), "wb") as file:
        file.write(result.stdout)
