"""--mode scaling: what each model does with more cores.

For each core count K (--cores), each server is confined to CPUs 0..K-1 (taskset) with K event loops or pool
threads (--threads K; nginx: K workers; 02: a thread per connection, on those CPUs), and wrk to all the other CPUs,
one client thread per CPU. Two loads: keep-alive, and a new connection per request (`Connection: close`, which
every server answers by closing); two handlers: --delay-us 0 (what the I/O model costs) and 1 ms (where Little's
law caps a row at C connections / 1 ms). The floor (benchmark/floor.cpp: bare loops, no parsing) and nginx from
memory are measured the same way, as references.

Per row: req/s, the server's CPU per request and the requests it serves per CPU second (the server's own work,
whatever the client could do), and how busy the client's CPUs were. Above CLIENT_BOUND_PCT the row is marked
client-bound: it measured wrk, not the server (analyse.scaling_columns; GUIDE.md 6b: on 16 CPUs with 8 for wrk,
every server "reached" 900k req/s at K = 8).
"""

from __future__ import annotations

import http.client
import os

from . import disturbance, sample, tools
from .measure import begin_pass, measured_again
from .options import FLOOR
from .servers import Server, server_flags
from .session import BODY_BYTES, CsvTable, Session, ratio, read

SCHEMA = ("server", "cores", "connection", "delay_us", "repetition", "requests_per_s", "p99_ms", "complete",
          "failed", "non2xx", "cpu_us_per_req", "server_cpus", "rps_per_cpu", "client_busy_pct",
          *disturbance.COLUMNS, "check")
CONNECTIONS = ("keep-alive", "close")  # the `connection` column: how the client uses its connections
WARM_UP, WARM_UP_S = "1s", 1  # wrk's warm-up of each server started: page faults, thread pools, the accept queue


def cpu_list(first: int, last: int) -> str:
    """A taskset CPU list: "0", "0-3"."""
    return str(first) if first == last else f"{first}-{last}"


def client_cpus(k: int, cpus: int) -> list[int]:
    """The client's CPUs when the server has the first K: all the others."""
    return list(range(k, cpus))


def check_body(port: int) -> str:
    """One GET /: "" when it is a 200 with the 1 KB body every server answers, else what is wrong."""
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request("GET", "/")
        response = connection.getresponse()
        body = response.read()
        connection.close()
    except (OSError, http.client.HTTPException) as error:
        return f"GET / failed: {error}"
    if response.status != 200 or len(body) != BODY_BYTES:
        return f"GET / answered {response.status} with {len(body)} bytes (expected 200 and {BODY_BYTES})"
    return ""


class Scaling:
    """Every (K, server, handler, load) in turn: raw.csv, and the progress counter."""

    def __init__(self, session: Session, raw_csv: str):
        self.session, o = session, session.options
        self.table = CsvTable(raw_csv, SCHEMA)
        self.progress = 0
        self.total = len(o.cores) * int(o.repeat) * sum(
            len(self.delays(spec)) * len(CONNECTIONS) for spec in o.servers)

    def delays(self, spec: str) -> list[int]:
        """The floor has no handler: it is measured without a wait only."""
        delays = self.session.options.delays
        return [delay for delay in delays if delay == 0] if spec == FLOOR else delays

    def run(self) -> None:
        s, o = self.session, self.session.options
        if o.cores == [1] and s.cpus <= 3:
            s.say(f"(on {s.cpus} CPUs only K = 1 leaves the client a CPU of its own: a machine with more CPUs "
                  "shows the curve, see benchmark/README.md on packing a run for one)")
        for rep in range(1, int(o.repeat) + 1):
            for k in o.cores:
                for spec in o.servers:
                    for delay in self.delays(spec):
                        # The floor ends each connection after one answer only when told at its start (--close).
                        groups = [[load] for load in CONNECTIONS] if spec == FLOOR else [list(CONNECTIONS)]
                        for loads in groups:
                            self.measure_server(spec, k, delay, loads, rep)

    def flags(self, spec: str, k: int, delay: int, loads: list[str]) -> list[str] | None:
        """The server's flags for K cores (nginx: its workers, set in the options it reads)."""
        if spec == "nginx":
            self.session.options.nginx_workers = k
            return None
        flags = server_flags(self.session, spec, threads=str(k), delay_us=str(delay))
        if spec == FLOOR and loads == ["close"]:
            flags.append("--close")
        return flags

    def measure_server(self, spec: str, k: int, delay: int, loads: list[str], rep: int) -> None:
        s, o = self.session, self.session.options
        begin_pass(s, f"{spec} K={k} --delay-us {delay}", rep)
        with Server(s, spec, cpus=cpu_list(0, k - 1), flags=self.flags(spec, k, delay, loads)) as server:
            problem = server.problem or ("" if server.started else "did not start")
            if server.started:
                s.say(f"  {server.command} on port {server.port} (pid {' '.join(map(str, server.pids))})")
                problem = check_body(server.port)
            if problem:
                s.fail_check(f"{spec} K={k}: {problem}")
                for load in loads:
                    self.progress += 1
                    self.row(spec, k, load, delay, rep, {"check": "FAILED: " + problem})
                return
            self.wrk(server, k, loads[0], "warm-up", WARM_UP, WARM_UP_S)
            for load in loads:
                self.progress += 1
                s.say(f"[{self.progress}/{self.total}] {spec} K={k} {load} --delay-us {delay}")
                attempt = 0
                while True:
                    figures = self.measure(server, spec, k, load)
                    again = measured_again(s, figures, attempt, server.alive())  # (marks the row first)
                    self.row(spec, k, load, delay, rep, figures)
                    if not again:
                        break
                    attempt += 1
                if not server.alive():
                    server.stop()  # (which reaps it: its exit status)
                    s.fail_check(f"{spec} K={k} died (exit status {server.exit})")
                    return
            server.stop()
        if server.exit not in (None, 0):
            s.warn(f"{spec} exited with status {server.exit} on SIGTERM (expected 0)")

    def row(self, spec: str, k: int, load: str, delay: int, rep: int, figures: dict[str, str]) -> None:
        key = {"server": spec, "cores": k, "connection": load, "delay_us": delay, "repetition": rep}
        self.table.add({**key, **{name: figures.get(name) for name in SCHEMA if name not in key}})

    def wrk(self, server: Server, k: int, load: str, what: str, duration: str, seconds: int) -> tools.Record:
        """wrk on the client's CPUs, one thread per CPU, its output appended to the log."""
        s, o = self.session, self.session.options
        cpus = client_cpus(k, s.cpus)
        command = tools.wrk_command(f"http://127.0.0.1:{server.port}/", o.concurrencies[0], len(cpus), duration,
                                    headers=["Connection: close"] if load == "close" else [])
        prefix = ["taskset", "-c", cpu_list(cpus[0], cpus[-1])]
        s.log_header(f"{server.spec} K={k} {load} {what}", " ".join(command), server.command,
                     f"server CPUs 0-{k - 1}, client CPUs {prefix[-1]}")
        out = s.path("run.out")
        status = tools.run_client(seconds + 60, [*prefix, *command], out)
        s.append_file_to_log(out)
        output = read(out)
        return tools.Record(command, status, output, tools.parse("wrk", output))

    def measure(self, server: Server, spec: str, k: int, load: str) -> dict[str, str]:
        """One measured run: what wrk did, what the server spent, and how busy the client's CPUs were."""
        s, o = self.session, self.session.options
        cpus = client_cpus(k, s.cpus)
        ticks_before, client_before = sample.cpu_ticks(server.pids), sample.cpu_times(cpus)
        with disturbance.Window(server.pids, o.disturbed_pct) as window:
            record = self.wrk(server, k, load, "run", o.duration, o.duration_s)
        ticks, client_after = sample.cpu_ticks(server.pids) - ticks_before, sample.cpu_times(cpus)
        f, problems = record.figures, []
        if record.status != 0:
            problems.append(f"wrk exited with status {record.status}")
        if f["failed"] != 0:
            problems.append(f"socket errors: {f['failed']}")
        if f["non2xx"] != 0:
            problems.append(f"non-2xx responses: {f['non2xx']}")
        if not server.alive():
            problems.append("the server died")
        for problem in problems:
            s.fail_check(f"{spec} K={k} {load}: {problem}")
        cpu_s = ticks / sample.TICKS_PER_S
        figures = {"requests_per_s": f["rps"], "p99_ms": f["p99_ms"], "complete": f["complete"],
                   "failed": f["failed"], "non2xx": f["non2xx"],
                   "cpu_us_per_req": ratio(cpu_s * 1e6, f["complete"], 2),
                   "server_cpus": ratio(cpu_s, o.duration_s, 2),
                   "rps_per_cpu": ratio(f["complete"], cpu_s, 0),
                   "client_busy_pct": round(sample.busy_percent(client_before, client_after)),
                   "check": "FAILED: " + ";".join(problems) if problems else "ok", **window.result.columns()}
        for line in record.output.split("\n"):
            if "Requests/sec" in line or "Socket errors" in line or "Non-2xx" in line:
                s.say("  " + line.strip())
        s.say(f"  server: {figures['cpu_us_per_req']} µs CPU per request, {figures['server_cpus']} CPUs busy, "
              f"{figures['rps_per_cpu']} req per CPU second; client CPUs {figures['client_busy_pct']} % busy")
        s.say(f"  {window.result.sentence()}")
        return figures
