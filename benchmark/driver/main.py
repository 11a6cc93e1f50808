"""The benchmark's steps, in order, for every mode:

  1. the options (options.py), refused before anything starts;
  2. the tools installed and the servers built (environment.py);
  3. the machine described and checked, its limits raised where the mode needs it (environment.py, host.py);
  4. the mode's passes over the servers (sweep.py, idle.py, latency.py, connections.py), each row written to
     raw.csv through the mode's schema, every full tool output appended to the log;
  5. the summary: summary.csv, summary.md, the plot, fingerprints.json (summary.py).

Exit status: 0 when every check passed; 1 when a check failed, a server did not start or a tool is missing; 2 on a
bad option; 130 when interrupted. Nothing is left running and every host setting is put back, whatever happens:
each server, client and holder is a context manager, and Host.restore() runs in a finally block (SIGTERM is
turned into KeyboardInterrupt so that it unwinds the same way as Ctrl-C).
"""

from __future__ import annotations

import os
import shutil
import shlex
import signal
import string
import sys
import tempfile
import time

from . import environment, options, servers, summary
from .host import Host, HostError
from .session import Session, have, read

SCRIPT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(SCRIPT_DIR)


def usage() -> str:
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "usage.txt"), encoding="utf-8") as file:
        return string.Template(file.read()).substitute(files_servers=" ".join(options.FILES_SERVERS),
                                                       idle_servers=" ".join(options.IDLE_SERVERS))


def command_line(argv: list[str]) -> str:
    """The command as summary.md quotes it, each argument quoted for a POSIX shell (shlex.join). A packed run
    (benchmark/pack.sh) is quoted as the two commands that make it again on a machine like its own."""
    program = "benchmark/pack.sh PACK && PACK/run.sh" if os.environ.get("PSP_PACKED") else "benchmark/benchmark.sh"
    return " ".join([program, shlex.join(argv)]) if argv else program


def interrupted(signum, frame) -> None:
    print("interrupted: stopping the server and leaving", file=sys.stderr, flush=True)
    raise KeyboardInterrupt()


def run_mode(session: Session, results_dir: str) -> None:
    """The mode's passes over the servers, then summary.csv (connections: raw.csv as it is)."""
    from . import connections, idle, latency, scaling, sweep  # (each mode's module: its schema and its passes)
    mode = session.options.mode
    raw_csv, summary_csv = (os.path.join(results_dir, name) for name in ("raw.csv", "summary.csv"))
    runner = {"connections": connections.Connections, "latency": latency.Latency, "idle": idle.Idle,
              "scaling": scaling.Scaling}.get(mode, sweep.Sweep)(session, raw_csv)
    runner.run()
    if mode == "connections":
        shutil.copyfile(raw_csv, summary_csv)
    else:
        summary.summarize(raw_csv, summary_csv, mode)


def main(argv: list[str]) -> int:
    start_time = time.strftime("%Y-%m-%d %H:%M:%S")
    try:
        opts = options.parse(argv, dict(os.environ), REPO, SCRIPT_DIR, servers.build_target)
    except options.Help:
        print(usage(), end="", flush=True)
        return 0
    except options.UsageError as error:
        print(f"usage: benchmark/benchmark.sh [options] [SERVER...]\nerror: {error}\nrun benchmark/benchmark.sh --help "
              "for the options", file=sys.stderr, flush=True)
        return 2
    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)
    session = Session(opts, REPO, SCRIPT_DIR)
    session.tmp = tempfile.mkdtemp(prefix="psp-benchmark.", dir=os.environ.get("TMPDIR") or "/tmp")
    host = Host(session.say)
    try:
        return run(session, host, start_time, argv)
    except environment.Stop:
        return 1
    except HostError as error:
        session.error(f"error: {error}")
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the console is gone (`| head`): nothing more can be said; clean up all the same
        sys.stdout = open(os.devnull, "w", encoding="utf-8")  # (so that restore()'s lines and exit do not fail)
        return 1
    finally:
        host.restore()
        shutil.rmtree(session.tmp, ignore_errors=True)


def run(session: Session, host: Host, start_time: str, argv: list[str]) -> int:
    o = session.options
    start_load = " ".join(read("/proc/loadavg").split()[:3])  # before our own build adds to it
    environment.ensure_tools(session)
    environment.build_servers(session)
    machine = environment.describe_machine(session)
    prepare = None
    if o.mode == "connections":
        from .connections import prepare_connections
        prepare = lambda: prepare_connections(session, host)  # noqa: E731
    busy = environment.check_environment(session, machine, host, start_load, prepare)

    results_dir = os.path.join(o.results_root, time.strftime("%Y-%m-%d_%H%M%S"))
    while os.path.exists(results_dir):
        results_dir += "_"
    os.makedirs(results_dir)
    os.makedirs(os.path.dirname(os.path.abspath(o.log_file)), exist_ok=True)
    title = "openloop" if o.mode == "latency" else o.tool
    if o.mode == "scaling":
        title += f" -c {o.concurrencies[0]}, server on CPUs 0..K-1, client on the others"
    elif o.keepalive and o.mode != "idle":
        title += " keep-alive"
    delays = " and ".join(map(str, o.delays)) if o.mode == "scaling" else o.delay_us
    title += (f", --delay-us {delays} --handler {o.handler}, {session.cpus} CPUs, kernel {session.kernel}, "
              f"commit {session.commit}")

    run_mode(session, results_dir)
    context = summary.Context(start_time, command_line(argv), machine, busy, start_load, results_dir)
    summary.write_summary(session, context)
    summary.write_fingerprints(session, results_dir)
    if o.mode != "files":
        summary.plot_results(session, results_dir, title)

    session.say("")
    for line in read(os.path.join(results_dir, "summary.md")).split("\n"):
        if line.startswith("| "):
            session.say(line)
    session.say("")
    plots = ", plot.svg, plot.png" if have("gnuplot") and o.mode != "files" else ""
    session.say(f"results: {results_dir} (summary.md, summary.csv, raw.csv{plots})")
    session.say(f"full outputs appended to {o.log_file}")
    if session.failures:
        session.error(f"FAILED: {session.failures} check(s) failed; see above and the check column")
        return 1
    session.say("all checks passed")
    return 0
