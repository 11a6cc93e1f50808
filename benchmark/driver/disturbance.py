"""How much of the machine other processes took while a run was measured.

On a shared machine a pass can be slow because something else ran beside it, and its figures alone cannot say so.
A Window around one measured run reads, at its start and at its end:

- /proc/stat's first line: the CPU time of the whole machine (user, nice, system, irq, softirq: busy; idle and
  iowait; steal: time the hypervisor gave to another guest);
- the server's own CPU time (/proc/PID/stat of each of its processes, every thread included);
- the CPU time of this driver and of the children it has waited for (getrusage: the load tool, perf, taskset and
  whatever they waited for).

What is left of the busy time is the other processes' (and the kernel's own threads'): `other_cpu_pct`, in percent
of all the CPUs' time during the run, beside `steal_pct`. A run whose other_cpu_pct + steal_pct is above the
threshold (--disturbed-pct, default 10) is marked disturbed; with --retry-disturbed the mode measures it again.
Clock-tick resolution (10 ms): on a quiet machine a run of a few seconds reads 0 to 2 %.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

from . import sample
from .session import read

COLUMNS = ("other_cpu_pct", "steal_pct", "disturbed")  # raw.csv's columns, before `check`
RETRIES = 2  # --retry-disturbed: at most this many more runs of one disturbed run; the last one stays
SUPERSEDED = "measured again"  # the disturbed column of a run that was measured again (analyse.SUPERSEDED)


@dataclass
class Snapshot:
    busy: int    # jiffies of the whole machine, busy (steal not included)
    total: int   # jiffies of the whole machine, all of them (steal included)
    steal: int
    server: int  # the server's ticks
    ours: float  # this driver's and its waited-for children's CPU seconds


def machine_times(stat_text: str) -> tuple[int, int, int]:
    """(busy, total, steal) jiffies from /proc/stat's `cpu` line: user nice system idle iowait irq softirq steal
    (guest time is already inside user and nice)."""
    for line in stat_text.split("\n"):
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [int(value) for value in fields[1:9]] + [0] * max(0, 9 - len(fields))
            user, nice, system, idle, iowait, irq, softirq, steal = values[:8]
            busy = user + nice + system + irq + softirq
            return busy, busy + idle + iowait + steal, steal
    return 0, 0, 0


def own_seconds() -> float:
    """The CPU seconds of this process and of every child it has waited for."""
    self_usage, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return self_usage.ru_utime + self_usage.ru_stime + children.ru_utime + children.ru_stime


def snapshot(server_pids: list[int]) -> Snapshot:
    busy, total, steal = machine_times(read("/proc/stat"))
    return Snapshot(busy, total, steal, sample.cpu_ticks(server_pids), own_seconds())


@dataclass
class Disturbance:
    other_cpu_pct: float | None
    steal_pct: float | None
    disturbed: bool | None

    def columns(self) -> dict:
        mark = None if self.disturbed is None else ("yes" if self.disturbed else "no")
        return {"other_cpu_pct": self.other_cpu_pct, "steal_pct": self.steal_pct, "disturbed": mark}

    def sentence(self) -> str:
        if self.other_cpu_pct is None:
            return "other processes: not measured"
        mark = " DISTURBED" if self.disturbed else ""
        return (f"other processes took {self.other_cpu_pct:g} % of the CPUs during the run, steal "
                f"{self.steal_pct:g} %{mark}")


NOT_MEASURED = Disturbance(None, None, None)


def between(before: Snapshot, after: Snapshot, threshold_pct: float, ticks_per_s: int = sample.TICKS_PER_S
            ) -> Disturbance:
    """What other processes took between two snapshots, in percent of all the CPUs' time, and whether it is past
    THRESHOLD_PCT (with steal)."""
    total = after.total - before.total
    if total <= 0:
        return NOT_MEASURED
    ours = (after.ours - before.ours) * ticks_per_s + (after.server - before.server)
    other = max(0.0, (after.busy - before.busy) - ours)
    other_pct = round(100 * other / total, 1)
    steal_pct = round(100 * (after.steal - before.steal) / total, 1)
    return Disturbance(other_pct, steal_pct, other_pct + steal_pct > threshold_pct)


class Window:
    """A context manager around one measured run: Window(server_pids, threshold) ... .result (a Disturbance)."""

    def __init__(self, server_pids: list[int], threshold_pct: float):
        self.pids, self.threshold = server_pids, threshold_pct
        self.start: Snapshot | None = None
        self.result = NOT_MEASURED

    def __enter__(self) -> "Window":
        self.start = snapshot(self.pids)
        return self

    def __exit__(self, *exc) -> None:
        self.result = between(self.start, snapshot(self.pids), self.threshold)


def describe(threshold_pct: int, retry: bool) -> str:
    """The summary's line on how disturbance is measured."""
    again = (f"; with --retry-disturbed a disturbed run is measured again (up to {RETRIES} times), and the runs "
             "measured again are left out of the medians" if retry else "")
    return ("- Disturbance: the CPU time of processes other than the server, the client and the driver (/proc/stat "
            "less /proc/PID/stat and getrusage), and steal, each in % of all CPUs' time during each run; a run "
            f"above {threshold_pct} % together is marked disturbed{again}; per pass in the table \"Disturbance\" "
            "below, and in raw.csv (other_cpu_pct, steal_pct, disturbed)")


def passes_table(rows: list[list[str]]) -> list[str]:
    """raw.csv's rows -> a Markdown table of each pass (a server in one repetition): the disturbance of each of
    its runs, in order, and which runs were marked. Empty when raw.csv has no disturbance columns."""
    names = rows[0]
    if "other_cpu_pct" not in names or "repetition" not in names:
        return []
    key_count = names.index("repetition")
    at = {name: names.index(name) for name in (*COLUMNS, "repetition")}
    passes: dict[tuple[str, str], dict[str, list[str]]] = {}
    for row in rows[1:]:
        row = row + [""] * (len(names) - len(row))
        entry = passes.setdefault((row[0], row[at["repetition"]]), {"other": [], "steal": [], "marked": []})
        label = " ".join(f"{name}={value}" for name, value in zip(names[1:key_count], row[1:key_count]))
        entry["other"].append(row[at["other_cpu_pct"]])
        entry["steal"].append(row[at["steal_pct"]])
        if row[at["disturbed"]] == "yes":
            entry["marked"].append(label)
        elif row[at["disturbed"]] == "measured again":
            entry["marked"].append(label + " (measured again)")
    out = ["| server | pass | other processes' CPU %, each run | steal %, each run | disturbed runs |",
           "|---|---:|---:|---:|---|"]
    for (server, rep), entry in passes.items():
        out.append(f"| {'nginx (reference)' if server == 'nginx' else server} | {rep} | {', '.join(entry['other'])} "
                   f"| {', '.join(entry['steal'])} | {'; '.join(entry['marked']) or 'none'} |")
    return out


def retries(options) -> int:
    """How many more times a disturbed run may be measured: RETRIES with --retry-disturbed, else none."""
    return RETRIES if options.retry_disturbed else 0
