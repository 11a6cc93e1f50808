"""--mode latency: a steady offered load, open loop, at rates around each server's capacity, and the latency
percentiles at each (timed from each request's intended send time: see openloop.cpp).

One pass over one server: start it, warm it up, measure its capacity with ab (first repetition, unless --rates),
then offer each rate for --duration, in increasing order, with a second's rest between them for the backlog of an
overload to drain.
"""

from __future__ import annotations

import time

from . import disturbance, sample, tools
from .environment import client_binary
from .measure import Target, begin_pass, check_run, url, warm_up
from .servers import Server
from .analyse import count, number
from .session import BODY_BYTES, CsvTable, Session, ratio, read

# Offered loads, as fractions of the capacity ab measures, when --rates gives none: from light load, through the
# knee, to overload, where the queue (and the corrected latency) grows for as long as the run lasts.
FRACTIONS = (0.1, 0.25, 0.5, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5)
SCHEMA = ("server", "rate", "repetition", "requests_per_s", "load_pct", "p50_ms", "p90_ms", "p99_ms", "p999_ms",
          "max_ms", "mean_ms", "u_p99_ms", "u_p999_ms", "complete", "failed", "non2xx", "cpu_us_per_req",
          "gen_lag_p99_ms", *disturbance.COLUMNS, "generator", "check")
# openloop's own bound (kMaxLagP99Ms in openloop.cpp): past it, the generator fell behind its schedule, and the
# latencies at that rate include its lateness. Such a rate is measured again (RETRIES times at most), whatever
# --retry-disturbed says; if it still lags, its row says `generator` behind, and the knee does not count it.
GEN_LAG_BOUND_MS = 1.0
# The columns openloop's line gives, by name in raw.csv and in that line.
FROM_OPENLOOP = {"requests_per_s": "achieved_rps", "p50_ms": "p50_ms", "p90_ms": "p90_ms", "p99_ms": "p99_ms",
                 "p999_ms": "p999_ms", "max_ms": "max_ms", "mean_ms": "mean_ms", "u_p99_ms": "u_p99_ms",
                 "u_p999_ms": "u_p999_ms", "gen_lag_p99_ms": "gen_lag_p99_ms"}


def offered_rates(rps: float, rates: list[int]) -> list[int]:
    """--rates, lowest first (the knee is read in order), or the FRACTIONS of the capacity, rounded to 10 req/s."""
    if rates:
        return sorted(rates)
    return [max(10, int(float(rps) * fraction / 10 + 0.5) * 10) for fraction in FRACTIONS]


def keep_quietest(attempts: list[dict]) -> list[dict]:
    """The runs of one rate, in order, all but one marked "measured again" (left out of the summary and the knee):
    the one kept is the first at which the generator kept its schedule and other processes took the least, so that
    one bad second of the machine does not set the knee; when the generator lagged in every one, the least
    disturbed of them (its row says so)."""
    def noise(row: dict) -> tuple:
        other = (row.get("other_cpu_pct") or 0) + (row.get("steal_pct") or 0)
        return (row.get("generator") == "behind", other)
    kept = min(range(len(attempts)), key=lambda index: noise(attempts[index]))
    for index, row in enumerate(attempts):
        if index != kept:
            row["disturbed"] = disturbance.SUPERSEDED
    return attempts


class Latency:
    def __init__(self, session: Session, raw_csv: str):
        self.session, o = session, session.options
        self.table = CsvTable(raw_csv, SCHEMA)
        self.rates_of: dict[str, list[int]] = {}   # measured in the first repetition, kept for the others
        self.capacity_of: dict[str, int] = {}
        self.rate_count = len(o.rates) or len(FRACTIONS)
        self.progress = 0
        self.total = len(o.servers) * self.rate_count * int(o.repeat)

    def run(self) -> None:
        for rep in range(1, int(self.session.options.repeat) + 1):
            for spec in self.session.options.servers:
                self.latency_server(spec, rep)

    def latency_server(self, spec: str, rep: int) -> None:
        s, o = self.session, self.session.options
        c = o.concurrencies[0]
        pass_ = begin_pass(s, spec, rep)
        with Server(s, spec) as server:
            if server.started:
                s.say(f"  {server.command} on port {server.port} (pid {' '.join(map(str, server.pids))})")
                warm_up(s, server, spec, Target(), pass_)
                if spec not in self.rates_of:
                    self.measure_capacity(server, spec, c, pass_)
            if not server.started or spec not in self.rates_of:
                # (A capacity run that failed has said so in its own failed check.)
                if not server.started:
                    s.fail_check(f"{spec} {server.problem or 'did not start'}")
                why = "no capacity: its ab run failed" if server.started else server.problem or "did not start"
                for rate in self.rates_of.get(spec) or o.rates or ["n/a"]:
                    self.table.add({**{name: None for name in SCHEMA}, "server": spec, "rate": rate,
                                    "repetition": rep, "check": "FAILED: " + why})
                self.progress += self.rate_count
                return
            for rate in self.rates_of[spec]:
                self.progress += 1
                s.say(f"[{self.progress}/{self.total}] {spec} at {rate} req/s{pass_.label}")
                attempts = [self.latency_run(server, spec, rate, rep, c, pass_)]
                while self.measure_again(attempts[-1], len(attempts) - 1, server.alive()):
                    time.sleep(1)
                    attempts.append(self.latency_run(server, spec, rate, rep, c, pass_))
                for row in keep_quietest(attempts):
                    self.table.add(row)
                if not server.alive():
                    s.error(f"  {spec} died; skipping its remaining rates in this pass")
                    break
                time.sleep(1)

    def measure_capacity(self, server: Server, spec: str, c: int, pass_) -> None:
        """What ab, closed loop, gets from the server with C connections (a new one per request, or -k); sets
        the server's rates."""
        s, o = self.session, self.session.options
        command = tools.ab_command(url(server, Target()), c, o.requests, o.keepalive)
        s.say(f"  capacity: {' '.join(command)}")
        s.log_header(f"{spec} capacity", " ".join(command), server.command, pass_.pinned)
        out = s.path("run.out")
        status = tools.run_client(60 + o.requests // 50, [*pass_.client_prefix, *command], out)
        s.append_file_to_log(out)
        output = read(out)
        record = tools.Record(command, status, output, tools.parse("ab", output))
        check = check_run(s, server, "ab", f"{spec} capacity", record, o.requests, Target())
        rps = record.figures["rps"]
        if check != "ok" or rps is None:
            return
        self.capacity_of[spec] = int(rps)
        self.rates_of[spec] = offered_rates(rps, o.rates)
        s.say(f"  capacity {self.capacity_of[spec]} req/s; offered loads: "
              f"{' '.join(map(str, self.rates_of[spec]))} req/s")

    def measure_again(self, row: dict, attempt: int, alive: bool) -> bool:
        """Whether this rate is measured once more: the generator fell behind (always), or other processes
        disturbed the run (with --retry-disturbed); at most disturbance.RETRIES times (keep_quietest then picks
        the row that counts)."""
        s = self.session
        lagged = row["generator"] == "behind"
        disturbed = row["disturbed"] == "yes" and attempt < disturbance.retries(s.options)
        if not alive or attempt >= disturbance.RETRIES or not (lagged or disturbed):
            return False
        why = "the load generator fell behind" if lagged else "other processes disturbed it"
        s.say(f"  {why}: measuring this rate again ({attempt + 1} of at most {disturbance.RETRIES})")
        return True

    def latency_run(self, server: Server, spec: str, rate: int, rep: int, c: int, pass_) -> dict:
        """One rate: openloop for --duration, the server's CPU read from /proc around it; a row of raw.csv."""
        s, o = self.session, self.session.options
        binary = client_binary(s, "openloop")
        out, err = s.path("run.out"), s.path("run.err")
        command = [binary, "--port", str(server.port), "--rate", str(rate), "--duration", str(o.duration_s),
                   "--connections", str(c), "--expect-length", str(BODY_BYTES),
                   *([] if o.keepalive else ["--new-conn"])]
        s.say("  " + " ".join(word.rsplit("/", 1)[-1] for word in command))
        s.log_header(f"{spec} rate={rate} run {rep}/{o.repeat}", " ".join(command), server.command, pass_.pinned)
        cpu_before = sample.cpu_ticks(server.pids)
        with disturbance.Window(server.pids, o.disturbed_pct) as window:
            record = tools.openloop(binary, server.port, rate, o.duration_s, c, o.keepalive, pass_.client_prefix,
                                    out, err, BODY_BYTES)
        cpu_after = sample.cpu_ticks(server.pids)
        s.say(f"  {window.result.sentence()}")
        s.append_log(f"--- {window.result.sentence()}\n")
        s.append_file_to_log(out, err)
        r, problems = record.figures, []
        # Past its capacity a server may time out, drop or refuse requests (04 answers 503 when its queue is full):
        # that is what this mode shows, counted in the failures column, not a failed check. A refusal at or below
        # the capacity is one, as are a wrong body, a dead server and a generator that failed.
        if record.status != 0 or "completed" not in r:
            problems.append(f"openloop failed (status {record.status}): {read(err).split(chr(10), 1)[0]}")
        else:
            if r["bad_status"] > 0 and rate <= self.capacity_of.get(spec, 0):
                problems.append(f"{r['bad_status']} answers were not 200, at or below the capacity")
            if r["bad_length"] != 0:
                problems.append(f"{r['bad_length']} answers had a body other than {BODY_BYTES} bytes")
            if r["fell_behind"]:
                s.warn(f"{spec} at {rate} req/s: openloop fell behind its schedule (its own lag p99 "
                       f"{r['gen_lag_p99_ms']} ms; on a CPU {r['gen_cpu_pct']} % of the run, waiting for one "
                       f"{r['gen_wait_pct']} %): the latencies there include the generator's lateness")
            s.say(f"  achieved {r['achieved_rps']} req/s; latency from the intended send time p50 {r['p50_ms']} "
                  f"p99 {r['p99_ms']} p99.9 {r['p999_ms']} max {r['max_ms']} ms; from the actual send p99 "
                  f"{r['u_p99_ms']} ms; {r['errors']} errors, {r['timeouts']} timeouts")
        if not server.alive():
            problems.append("the server died")
        for problem in problems:
            s.fail_check(f"{spec} at {rate} req/s: {problem}")
        row = {name: number(r.get(key)) for name, key in FROM_OPENLOOP.items()}
        row.update(server=spec, rate=rate, repetition=rep, load_pct=None, failed=None, cpu_us_per_req=None,
                   complete=count(r.get("completed")) or 0, non2xx=count(r.get("bad_status")) or 0,
                   check="FAILED: " + ";".join(problems) if problems else "ok", **window.result.columns())
        lag = number(r.get("gen_lag_p99_ms"))
        behind = count(r.get("fell_behind")) or (lag is not None and lag > GEN_LAG_BOUND_MS)
        row["generator"] = None if lag is None else ("behind" if behind else "ok")
        if "completed" in r:
            row["failed"] = r["scheduled"] - r["completed"]  # errors, timeouts, unsent; refused: non2xx
            row["cpu_us_per_req"] = ratio((cpu_after - cpu_before) * 1000000 // sample.TICKS_PER_S, r["completed"],
                                          1)
        if spec in self.capacity_of:
            row["load_pct"] = ratio(rate * 100, self.capacity_of[spec], 0)
        return row
