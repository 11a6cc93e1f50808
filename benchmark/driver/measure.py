"""One measured run of ab or wrk against a running server, as the default, files and idle modes make it: the
warm-up, the run with what the server spent around it, the checks every run must pass, and the log.

measure_run returns the run's MEASURED figures; the mode adds its key columns (server, concurrency, ...) and
writes the row through its own schema.
"""

from __future__ import annotations

import os
import re
import resource
from dataclasses import dataclass

from . import disturbance, sample, tools
from .servers import Server, is_single_threaded
from .session import BODY_BYTES, Session, cell_text, ratio, read

# The figures of a measured run, in raw.csv's order (after the mode's key columns).
MEASURED = ("requests_per_s", "mean_ms", "p99_ms", "complete", "failed", "non2xx", "cpu_us_per_req",
            "io_uring_threads_cpu_us_per_req", "ctxsw_per_req", "syscalls_per_req", "peak_rss_kib", "peak_threads",
            *disturbance.COLUMNS, "check")


NO_COUNTERS = "n/a (counters cost: run without perf)"  # the syscalls column of counters.csv's run without perf
COUNTERS_SCHEMA = ("server", "concurrency", "counters", "requests_per_s", "cpu_us_per_req", "other_cpu_pct",
                   "check")  # counters.csv: the same run with perf stat counting and without (counters_cost)


@dataclass
class Target:
    """What is requested: the URL path, the body length every answer must have, and (--mode files) the file's
    name, which is also the `file` column of the results."""
    path: str = "/"
    length: int = BODY_BYTES
    file: str = ""


@dataclass
class Pass:
    """One pass over one server (begin_pass): its client prefix when pinned, and how the log says so."""
    client_prefix: list[str]
    pinned: str
    label: str  # " (run 2/3)" with --repeat


def begin_pass(session: Session, spec: str, rep: int) -> Pass:
    """The start of a pass over one server, in every mode: pins it and its client when asked (--pin), and prints
    the header."""
    o = session.options
    prefix, pinned = [], "no"
    if o.pin and is_single_threaded(spec, o.threads, o.nginx_workers, session.cpus):
        prefix, pinned = ["taskset", "-c", "1"], "server CPU 0, client CPU 1"
    label = f" (run {rep}/{o.repeat})" if int(o.repeat) > 1 else ""
    session.say("")
    session.say(f"== {spec}{label}")
    return Pass(prefix, pinned, label)


def check_run(session: Session, server: Server, tool: str, what: str, record: tools.Record, expected: int | None,
              target: Target, connections: int = 0) -> str:
    """The checks every run must pass; each failure is printed loudly and counted. Returns the check column."""
    f, status, problems = record.figures, record.status, []
    if status == tools.TIMED_OUT:
        problems.append(f"{tool} timed out")
    elif status != 0:
        lines = record.output.rstrip("\n").split("\n")
        problems.append(f"{tool} exited with status {status}: {lines[-1] if lines else ''}")
    if f["doc_length"] != target.length:
        problems.append(f"Document Length: {f['doc_length'] or 'none'} (expected {target.length} bytes)")
    if f["failed"] != 0:
        failed = "n/a" if f["failed"] is None else f["failed"]
        problems.append(f"Failed requests: {failed}" if tool == "ab" else f"socket errors: {failed}")
    if f["non2xx"] != 0:
        problems.append(f"Non-2xx responses: {f['non2xx']}")
    if expected is not None and f["complete"] != expected:
        problems.append(f"Complete requests: {f['complete']} of {expected}")
    if session.options.mode == "files" and tool == "wrk":
        # Every complete response carried the whole file and a head (under 1 KiB); each of the c connections may
        # also have been part-way through one more when wrk stopped. Outside these bounds, wrong bytes came back.
        complete = f["complete"]
        low, high = complete * target.length, (complete + connections) * (target.length + 1024)
        if f["bytes_read"] is None:
            problems.append("no byte count from wrk (wrk_done.lua)")
        elif not low <= f["bytes_read"] <= high:
            problems.append(f"wrk read {f['bytes_read']} bytes for {complete} responses of a {target.length}-byte "
                            f"file (expected {low} to {high})")
    if not server.alive():
        problems.append("the server died")
    for problem in problems:
        session.fail_check(f"{what}: {problem}")
    return "FAILED: " + ";".join(problems) if problems else "ok"


def url(server: Server, target: Target) -> str:
    return f"http://127.0.0.1:{server.port}{target.path}"


def warm_up(session: Session, server: Server, spec: str, target: Target, pass_: Pass) -> None:
    """Page faults, thread pools, caches. Always ab, so that in wrk mode too the body length is checked."""
    o = session.options
    warmup = o.warmup
    if warmup == 0:
        return
    c = 1 if o.keepalive else 10  # 01 and 04 serve one keep-alive connection per thread: more would hang
    command = tools.ab_command(url(server, target), min(c, warmup), warmup, o.keepalive)
    what = spec + (f" {target.file}" if target.file else "")
    session.log_header(f"{what} warm-up", " ".join(command), server.command, pass_.pinned)
    out = session.path("run.out")
    status = tools.run_client(60 + warmup // 20, [*pass_.client_prefix, *command], out)
    session.append_file_to_log(out)
    output = read(out)
    record = tools.Record(command, status, output, tools.parse("ab", output))
    check_run(session, server, "ab", f"{what} warm-up", record, warmup, target)


def measure_run(session: Session, server: Server, spec: str, c: int, rep: int, target: Target, pass_: Pass,
                idle: str = "", counters: bool = True) -> dict:
    """One measured run at concurrency C: the MEASURED figures (and bytes_per_req, mib_per_s for files)."""
    o = session.options
    what = spec + (f" {target.file}" if target.file else "") + (f" beside {idle} idle" if idle else "") + f" c={c}"
    if not counters:
        what += " without perf (counters cost)"
    if o.tool == "ab":
        command = tools.ab_command(url(server, target), c, o.requests, o.keepalive)
        limit = 60 + o.requests // 50
    else:
        # Files: at 1,000 connections, 1,000 MiB are in flight, and fair sharing at about 1 GiB/s makes each
        # answer take about a second, near wrk's default limit of 2 s, past which it counts a timeout error.
        command = tools.wrk_command(url(server, target), c, o.wrk_threads, o.duration,
                                    "10s" if o.mode == "files" else "")
        limit = o.duration_s + 60
    session.say(f"  {' '.join(command)}")
    session.log_header(f"{what} run {rep}/{o.repeat}", " ".join(command), server.command, pass_.pinned)
    # perf stat -p opens a counter per event and thread: 02 beside 10,000 idle connections has 10,000 threads,
    # more counters than this process may open. Then this run goes without perf, and its columns say why.
    run_perf = session.perf_state if counters else NO_COUNTERS
    if run_perf == "ok" and (sample.status_sum(server.pids, "Threads:") * 3 + c + 64 >
                             resource.getrlimit(resource.RLIMIT_NOFILE)[0]):
        run_perf = "n/a (too many threads for perf)"
    out, percentiles, perf_txt = (session.path(name) for name in ("run.out", "percentiles.csv", "perf.txt"))
    for path in (percentiles, perf_txt):
        if os.path.exists(path):
            os.unlink(path)
    perf = tools.perf_wrap(server.pids, perf_txt) if run_perf == "ok" else []
    peak_rss_scope = sample.reset_peak_rss(server.pids)
    cpu_before = sample.cpu_ticks(server.pids)
    iou_before = sample.io_uring_thread_ticks(server.pids)
    ctx_before = sample.context_switches(server.pids)
    with disturbance.Window(server.pids, o.disturbed_pct) as window, sample.ThreadSampler(server.pids) as threads:
        record = tools.load(o.tool, command, limit, out, pass_.client_prefix, perf, percentiles)
    cpu_after = sample.cpu_ticks(server.pids)
    iou_after = sample.io_uring_thread_ticks(server.pids)
    ctx_after = sample.context_switches(server.pids)
    peak_rss = sample.status_sum(server.pids, "VmHWM:")
    peak_threads = threads.peak()

    session.append_file_to_log(out)
    f = record.figures
    if o.tool == "wrk":
        f["doc_length"] = target.length  # wrk does not report it: the warm-up (and curl) checked it
    check = check_run(session, server, o.tool, what, record, o.requests if o.tool == "ab" else None, target, c)

    # Per request: CPU from /proc (clock ticks), context switches and syscalls from perf when it counted.
    complete = f["complete"]
    cpu_us = ratio((cpu_after - cpu_before) * 1000000 // sample.TICKS_PER_S, complete, 1)
    iou_ticks = sample.io_uring_ticks_between(iou_before, iou_after)
    iou_us = ratio(iou_ticks * 1000000 // sample.TICKS_PER_S, complete, 1)
    ctx_per_req = ratio(ctx_after - ctx_before, complete)
    syscalls_per_req = None if run_perf == "ok" else run_perf  # (a reason, as text, where perf did not count)
    if run_perf == "ok" and os.path.exists(perf_txt) and os.path.getsize(perf_txt) > 0:
        ctx_per_req = ratio(sample.perf_count(perf_txt, "context-switches"), complete)
        syscalls_per_req = ratio(sample.perf_count(perf_txt, "raw_syscalls:sys_enter"), complete, 1)
        lines = [line for line in read(perf_txt).split("\n") if line and not line.startswith("#")]
        session.append_log("--- perf stat of the server during this run\n" + "".join(f"{x}\n" for x in lines))
    bytes_per_req = ratio(f["bytes_read"], complete, 0)
    files_part = (f" bytes_read={cell_text(f['bytes_read'])} bytes_per_req={cell_text(bytes_per_req)}"
                  if target.file else "")
    session.append_log(f"--- what the server spent: cpu_us_per_req={cell_text(cpu_us)} (io_uring_threads_us_per_req="
                       f"{cell_text(iou_us)}) ctxsw_per_req={cell_text(ctx_per_req)} syscalls_per_req="
                       f"{cell_text(syscalls_per_req)} peak_rss_kib={peak_rss} "
                       f"({peak_rss_scope}) peak_threads={peak_threads}{files_part}\n")

    # The selected lines, as the run goes.
    for line in record.output.split("\n"):
        if o.tool == "ab" and re.match(r"(Failed requests|Non-2xx responses|Time per request|Requests per second):",
                                       line):
            session.say(f"  {line}")
        elif o.tool == "wrk" and re.search(r"Latency  |99%|requests in|Socket errors|Non-2xx|Requests/sec", line):
            session.say("  " + line.lstrip(" "))
    if o.mode == "files":
        session.say(f"  transfer: {cell_text(f['mib_per_s'])} MiB/s; {cell_text(bytes_per_req)} bytes read per "
                    f"response (the file: {target.length} bytes, plus the head)")
    iou_part = f" (of which io_uring kernel threads: {iou_us} us)" if iou_us else ""
    session.say(f"  server per request: {cell_text(cpu_us)} us CPU{iou_part}, {cell_text(ctx_per_req)} context "
                f"switches, {cell_text(syscalls_per_req)} syscalls; peak {peak_rss // 1024} MiB RSS, {peak_threads} "
                "threads")
    session.say(f"  {window.result.sentence()}")
    session.append_log(f"--- {window.result.sentence()}\n")
    return {"requests_per_s": f["rps"], "mean_ms": f["mean_ms"], "p99_ms": f["p99_ms"], "complete": complete,
            "failed": f["failed"], "non2xx": f["non2xx"], "cpu_us_per_req": cpu_us,
            "io_uring_threads_cpu_us_per_req": iou_us, "ctxsw_per_req": ctx_per_req,
            "syscalls_per_req": syscalls_per_req, "peak_rss_kib": peak_rss, "peak_threads": peak_threads,
            "check": check, "mib_per_s": f["mib_per_s"], "bytes_per_req": bytes_per_req,
            **window.result.columns()}


def measured_again(session: Session, figures: dict, attempt: int, alive: bool) -> bool:
    """After a run: True when it was disturbed, --retry-disturbed allows one more attempt and the server is still
    up. Its figures are then marked "measured again" (the row is kept in raw.csv, left out of the summary), and
    the caller measures the run once more."""
    if figures.get("disturbed") != "yes" or attempt >= disturbance.retries(session.options) or not alive:
        return False
    figures["disturbed"] = disturbance.SUPERSEDED
    session.say(f"  disturbed: measuring this run again ({attempt + 1} of at most {disturbance.RETRIES})")
    return True


def counters_cost(session: Session, server: Server, spec: str, c: int, target: Target, pass_: Pass,
                  counted: dict, table) -> None:
    """What the per-request counters cost: right after a run that perf counted (COUNTED, its figures), the same
    run once more without perf. Both go to counters.csv (TABLE), never to raw.csv; summary.md states the
    difference. Only where perf counts: without it there is nothing to compare."""
    if session.perf_state != "ok" or not isinstance(counted.get("syscalls_per_req"), float):
        return
    session.say(f"  counters cost: {spec} c={c} once more without perf stat")
    bare = measure_run(session, server, spec, c, 0, target, pass_, counters=False)
    for label, figures in (("perf stat", counted), ("none", bare)):
        table.add({"server": spec, "concurrency": c, "counters": label,
                   **{name: figures[name] for name in COUNTERS_SCHEMA[3:]}})
