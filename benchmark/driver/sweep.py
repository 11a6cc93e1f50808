"""The default mode (throughput) and --mode files: each server in turn, started once per pass, warmed up, then
measured at each concurrency level (files: for each file, after checking its bytes with curl and cmp).

With --repeat, main makes one pass over all the servers per repetition, rather than repeating each row back to
back: a burst of other work on the machine then lands on every server a little, instead of on one server's row.
"""

from __future__ import annotations

import os
import subprocess

from .measure import (COUNTERS_SCHEMA, MEASURED, Target, begin_pass, counters_cost, measure_run, measured_again,
                      warm_up)
from .servers import Server
from .session import FILES, CsvTable, Session

# raw.csv's columns. The summary keeps the columns before `repetition` as the row's key, takes the median of the
# others over the repetitions, and sums failed + non2xx into `failures`.
THROUGHPUT = ("server", "concurrency", "repetition", *MEASURED)
FILES_SCHEMA = ("server", "file", "connections", "repetition", "requests_per_s", "mib_per_s", "mean_ms", "p99_ms",
                "complete", "failed", "non2xx", "bytes_per_req", *MEASURED[6:])


def schema(mode: str) -> tuple[str, ...]:
    return FILES_SCHEMA if mode == "files" else THROUGHPUT


def targets(mode: str) -> list[Target]:
    """In throughput mode "/" (the fixed 1 KB answer); in files mode one per file."""
    if mode != "files":
        return [Target()]
    return [Target(f"/{name}", size, name) for name, size in FILES]


def make_files(session: Session) -> None:
    """--mode files: makes the files once per run (deleted at the end): numbered 16-byte lines, the same in every
    run, so a byte sent from the wrong offset shows in cmp; and an index.html for "/"."""
    session.files_dir = session.path("files")
    os.makedirs(session.files_dir, exist_ok=True)
    for name, size in FILES:
        path = os.path.join(session.files_dir, name)
        with open(path, "w", encoding="ascii") as file:
            file.write("".join("%015d\n" % i for i in range(-(-size // 16))))
        if os.path.getsize(path) != size:
            raise RuntimeError(f"could not make {name}")
    with open(os.path.join(session.files_dir, "index.html"), "w", encoding="ascii") as file:
        listing = " ".join(f"{name}:{size}" for name, size in FILES)
        file.write(f"<!doctype html>\n<title>benchmark files</title>\n<p>{listing}</p>\n")
    os.chmod(session.files_dir, 0o755)  # nginx's workers, as nobody when we are root, must read them
    for name in os.listdir(session.files_dir):
        os.chmod(os.path.join(session.files_dir, name), 0o644)


def verify_file(session: Session, server: Server, path: str, file: str) -> str:
    """Fetches PATH once and compares the body with FILE, byte for byte: "" when it is the same, else what is
    wrong."""
    got = session.path("fetched")
    if os.path.exists(got):
        os.unlink(got)
    result = subprocess.run(["curl", "-s", "-o", got, "-w", "%{http_code}", "--max-time", "20",
                             f"http://127.0.0.1:{server.port}{path}"], capture_output=True, text=True, check=False)
    code = result.stdout
    if result.returncode != 0:
        return f"curl failed (exit status {result.returncode}{', HTTP ' + code if code else ''})"
    if code != "200":
        return f"GET {path} answered {code}, not 200"
    with open(got, "rb") as answer, open(file, "rb") as original:
        got_bytes, want = answer.read(), original.read()
    if len(got_bytes) != len(want):
        return f"GET {path} sent {len(got_bytes)} bytes, not the file's {len(want)}"
    if got_bytes != want:
        first = next(i for i, (a, b) in enumerate(zip(got_bytes, want)) if a != b) + 1
        return f"GET {path} sent {len(want)} bytes that differ from the file from byte {first} on"
    return ""


class Sweep:
    """The throughput and files modes: raw.csv, and the progress counter across all the passes."""

    def __init__(self, session: Session, raw_csv: str):
        self.session, o = session, session.options
        self.targets = targets(o.mode)
        self.table = CsvTable(raw_csv, schema(o.mode))
        self.counters = CsvTable(os.path.join(os.path.dirname(raw_csv), "counters.csv"), COUNTERS_SCHEMA)
        self.counters_probed = False  # (once per run: the first run of the first server that perf counted)
        self.progress = 0
        self.total = len(o.servers) * len(self.targets) * len(o.concurrencies) * int(o.repeat)

    def run(self) -> None:
        o = self.session.options
        if o.mode == "files":
            make_files(self.session)
        for rep in range(1, int(o.repeat) + 1):
            for spec in o.servers:
                self.benchmark_server(spec, rep)

    def row(self, spec: str, target: Target, c: int, rep: int, figures: dict[str, str]) -> None:
        key = {"server": spec, "repetition": rep}
        if self.session.options.mode == "files":
            key.update(file=target.file, connections=c)
        else:
            key["concurrency"] = c
        self.table.add({**key, **{name: figures[name] for name in self.table.fields if name not in key}})

    def failed_row(self, spec: str, target: Target, c: int, rep: int, why: str) -> None:
        """A row for a run that could not be made: every figure n/a, and the check says why."""
        figures = {name: None for name in self.table.fields}
        figures["check"] = "FAILED: " + why
        self.row(spec, target, c, rep, figures)

    def benchmark_server(self, spec: str, rep: int) -> None:
        """One pass over one server: start it, then for each target warm it up and run at each concurrency."""
        s, o = self.session, self.session.options
        runs_left = len(self.targets) * len(o.concurrencies)
        pass_ = begin_pass(s, spec, rep)
        with Server(s, spec) as server:
            if not server.started:
                s.fail_check(f"{spec} {server.problem or 'did not start'}")
                for target in self.targets:
                    for c in o.concurrencies:
                        self.failed_row(spec, target, c, rep, server.problem or "did not start")
                self.progress += runs_left
                return
            s.say(f"  {server.command} on port {server.port} (pid {' '.join(map(str, server.pids))})")
            # Files: check what comes back before measuring how fast it comes. "/" is the folder: its index.html.
            if o.mode == "files":
                problem = verify_file(s, server, "/", os.path.join(s.files_dir, "index.html"))
                if problem:
                    s.fail_check(f"{spec}: {problem}")
            for target in self.targets:
                if o.mode == "files":
                    problem = verify_file(s, server, target.path, os.path.join(s.files_dir, target.file))
                    if problem:
                        s.fail_check(f"{spec}: {problem}")
                        for c in o.concurrencies:
                            self.failed_row(spec, target, c, rep, f"wrong body: {problem}")
                        self.progress += len(o.concurrencies)
                        runs_left -= len(o.concurrencies)
                        continue
                    s.say(f"  GET {target.path}: 200, the {target.length} bytes of {target.file} (curl, cmp)")
                warm_up(s, server, spec, target, pass_)
                for c in o.concurrencies:
                    self.progress += 1
                    runs_left -= 1
                    s.say(f"[{self.progress}/{self.total}] {spec}{' ' + target.file if target.file else ''} c={c}"
                          f"{pass_.label}")
                    attempt = 0
                    while True:
                        figures = measure_run(s, server, spec, c, rep, target, pass_)
                        again = measured_again(s, figures, attempt, server.alive())  # (marks the row first)
                        self.row(spec, target, c, rep, figures)
                        if not again:
                            break
                        attempt += 1
                    if not self.counters_probed and server.alive():
                        self.counters_probed = True
                        counters_cost(s, server, spec, c, target, pass_, figures, self.counters)
                    if not server.alive():
                        server.stop()
                        s.error(f"  {spec} died (exit status {server.exit}); skipping its remaining runs in this "
                                "pass")
                        self.progress += runs_left
                        return
            server.stop()
        if server.exit not in (None, 0):
            s.warn(f"{spec} exited with status {server.exit} on SIGTERM (expected 0)")

