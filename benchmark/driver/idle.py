"""--mode idle: busy clients beside N held idle connections (the C10K situation).

For each N: a fresh server, N idle keep-alive connections held by idle_conns --hold, then the busy clients (ab -c C,
without and with -k) beside them, measured by the same measure_run as the default mode. A server that cannot hold
all N (it refused some or left some unanswered: 03 past FD_SETSIZE, 01 and 04 with one connection per thread) gets
rows that say so, and no failed check: that is its limit, not a fault.
"""

from __future__ import annotations

import os

from .environment import client_binary
from .measure import (COUNTERS_SCHEMA, MEASURED, Target, begin_pass, counters_cost, measure_run, measured_again,
                      warm_up)
from .servers import Server
from .session import CsvTable, Session, first_line
from .tools import IdleHolder

SCHEMA = ("server", "idle", "keepalive", "concurrency", "repetition", *MEASURED)


def hold_idle(session: Session, server: Server, spec: str, holder: IdleHolder) -> str:
    """Starts the holder and waits for its `holding ...` line: "" when the server holds all N and still answers a
    new client, else why not (and a failed check when idle_conns itself could not run)."""
    n = holder.n
    if not holder.hold():
        problem = f"idle_conns could not hold {n} connections: {first_line(holder.err)}"
        session.fail_check(f"{spec}: {problem}")
        return problem
    h = holder.held
    session.say(f"  holding {h['held']} of {n} idle connections (refused {h['refused']}, closed {h['closed']}, "
                f"unanswered {h['blocked']}; set up in {h['setup_s']} s); a new client: {h['probe']}")
    if h["held"] < n:
        return (f"it held {h['held']} of {n} idle connections (refused {h['refused']}, closed {h['closed']}, "
                f"unanswered {h['blocked']})")
    if h["probe"] != 200:
        return f"a new client got no answer beside {n} idle connections"
    return ""


def release_idle(session: Session, spec: str, holder: IdleHolder) -> None:
    """Stops the holder and checks what it saw meanwhile: none of the held connections closed by the server, and
    the server still serving a new client afterwards."""
    if not holder.release():
        return
    session.append_file_to_log(holder.out, holder.err)
    final, n = holder.final, holder.n
    if "dropped" not in final:
        session.fail_check(f"{spec} beside {n} idle: idle_conns did not finish: {first_line(holder.err)}")
        return
    if final["dropped"] != 0:
        session.fail_check(f"{spec} beside {n} idle: it closed {final['dropped']} of the held connections during "
                           "the runs")
    if final.get("after_status") != 200:
        session.fail_check(f"{spec} beside {n} idle: no answer to a new client after the connections were released")


class Idle:
    def __init__(self, session: Session, raw_csv: str):
        self.session, o = session, session.options
        self.table = CsvTable(raw_csv, SCHEMA)
        self.counters = CsvTable(os.path.join(os.path.dirname(raw_csv), "counters.csv"), COUNTERS_SCHEMA)
        self.counters_probed = False  # (once per run: the first run of the first server that perf counted)
        self.progress = 0
        self.total = len(o.servers) * len(o.idle_counts) * 2 * len(o.concurrencies) * int(o.repeat)

    def run(self) -> None:
        for rep in range(1, int(self.session.options.repeat) + 1):
            for spec in self.session.options.servers:
                self.idle_population(spec, rep)

    def row(self, spec: str, n: int, keepalive: bool, c: int, rep: int, figures: dict[str, str]) -> None:
        key = {"server": spec, "idle": n, "keepalive": "yes" if keepalive else "no", "concurrency": c,
               "repetition": rep}
        self.table.add({**key, **{name: figures[name] for name in MEASURED}})

    def idle_population(self, spec: str, rep: int) -> None:
        s, o = self.session, self.session.options
        pass_ = begin_pass(s, spec, rep)
        for n in o.idle_counts:
            o.keepalive = False
            with Server(s, spec) as server:
                holder = None
                limit = ""
                if not server.started:
                    s.fail_check(f"{spec} {server.problem or 'did not start'}")
                else:
                    s.say(f"  {server.command} on port {server.port} (pid {' '.join(map(str, server.pids))})")
                    warm_up(s, server, spec, Target(), pass_)
                    if n > 0:
                        holder = IdleHolder(client_binary(s, "idle_conns"), server.port, server.pid, n, 1,
                                            s.path("hold.out"), s.path("hold.err"))
                with holder or _Nothing():
                    if holder:
                        limit = hold_idle(s, server, spec, holder)
                    for keepalive in (False, True):
                        o.keepalive = keepalive
                        for c in o.concurrencies:
                            self.progress += 1
                            s.say(f"[{self.progress}/{self.total}] {spec} beside {n} idle connections, c={c}"
                                  f"{', keep-alive' if keepalive else ''}{pass_.label}")
                            if not server.started:
                                figures = failed(server.problem or "did not start")
                            elif limit:
                                s.say(f"  not run: {limit}")
                                figures = failed(limit, "not run: ")
                            else:
                                attempt = 0
                                figures = measure_run(s, server, spec, c, rep, Target(), pass_, idle=f"{n}")
                                while measured_again(s, figures, attempt, server.alive()):
                                    self.row(spec, n, keepalive, c, rep, figures)  # (marked measured again)
                                    attempt += 1
                                    figures = measure_run(s, server, spec, c, rep, Target(), pass_, idle=f"{n}")
                                if not self.counters_probed and server.alive():
                                    self.counters_probed = True
                                    counters_cost(s, server, spec, c, Target(), pass_, figures, self.counters)
                            self.row(spec, n, keepalive, c, rep, figures)
                    o.keepalive = False
                    if holder:
                        release_idle(s, spec, holder)


def failed(why: str, prefix: str = "FAILED: ") -> dict[str, str]:
    """The figures of a run that could not be made (or, with the prefix "not run: ", is past the server's limit,
    which is no failure)."""
    return {**{name: None for name in MEASURED}, "check": prefix + why}


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None
