"""What the server spent, read from /proc (and perf, around the load tool: see tools.perf_wrap).

Each function takes the server's PIDs (the server and its child processes: nginx's workers) and sums over them.
A process that exits meanwhile simply stops counting.
"""

from __future__ import annotations

import csv
import glob
import io
import os
import subprocess
import threading

from .session import PERF_EVENTS, have, read

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def stat_fields(text: str) -> list[str]:
    """The fields of a /proc/PID/stat line after the command name: [0] is the state, [11] utime, [12] stime."""
    return text.rsplit(") ", 1)[-1].split()


def cpu_ticks(pids: list[int]) -> int:
    """utime + stime (+ cutime + cstime, zero here: the servers do not fork) in clock ticks, of every server
    process. Linux adds a thread's times to its process when the thread exits, so 02's finished threads count.
    The kernel threads io_uring creates for a ring are threads of the server's process (since Linux 5.12): the
    SQPOLL thread (iou-sqp-PID) and the io-wq workers (iou-wrk-PID), exited ones included (see README)."""
    total = 0
    for pid in pids:
        fields = stat_fields(read(f"/proc/{pid}/stat"))
        if len(fields) > 14:
            total += sum(int(value) for value in fields[11:15])
    return total


def cpu_ns(pids: list[int]) -> int:
    """The CPU time of every thread of the server, in nanoseconds (schedstat): finer than cpu_ticks' 10 ms ticks,
    for a server that should spend none. Threads that exit meanwhile are not counted."""
    total = 0
    for pid in pids:
        for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
            words = read(path).split()
            if words:
                total += int(words[0])
    return total


def io_uring_thread_ticks(pids: list[int]) -> dict[str, int]:
    """TID -> ticks, for each live io_uring kernel thread of the server (iou-sqp-*, iou-wrk-*). Only live threads:
    an io-wq worker that exits during the run is in cpu_ticks but not here, so this part is a lower bound."""
    ticks = {}
    for pid in pids:
        for path in glob.glob(f"/proc/{pid}/task/*/stat"):
            text = read(path)
            name = text.split(" ", 2)[1] if text.count(" ") >= 2 else ""
            if name.startswith(("(iou-sqp-", "(iou-wrk-")):
                fields = stat_fields(text)
                ticks[text.split(" ", 1)[0]] = int(fields[11]) + int(fields[12])
    return ticks


def io_uring_ticks_between(before: dict[str, int], after: dict[str, int]) -> int:
    """The ticks the io_uring threads took between two listings (the threads of the second one)."""
    return sum(value - before.get(tid, 0) for tid, value in after.items())


def cpu_times(cpus: list[int]) -> tuple[int, int]:
    """(all, idle) jiffies of the given CPUs since boot, from their /proc/stat lines (idle counts iowait)."""
    total = idle = 0
    wanted = {f"cpu{cpu}" for cpu in cpus}
    for line in read("/proc/stat").split("\n"):
        fields = line.split()
        if fields and fields[0] in wanted:
            values = [int(value) for value in fields[1:8]]
            total, idle = total + sum(values), idle + values[3] + values[4]
    return total, idle


def busy_percent(before: tuple[int, int], after: tuple[int, int]) -> float:
    """How busy some CPUs were between two cpu_times() readings, in percent of all their time."""
    total, idle = after[0] - before[0], after[1] - before[1]
    return 100.0 * (total - idle) / total if total > 0 else 0.0


def status_sum(pids: list[int], key: str) -> int:
    """The sum of a /proc/PID/status field (VmHWM:, Threads:) over the server's processes."""
    total = 0
    for pid in pids:
        for line in read(f"/proc/{pid}/status").split("\n"):
            words = line.split()
            if words and words[0] == key and len(words) > 1:
                total += int(words[1])
    return total


def context_switches(pids: list[int]) -> int:
    """Without perf: the counters in /proc are per thread, so sum the live threads (02's finished threads are
    lost; perf counts them)."""
    total = 0
    for pid in pids:
        for path in glob.glob(f"/proc/{pid}/task/*/status"):
            for line in read(path).split("\n"):
                if "ctxt_switches" in line:
                    total += int(line.split()[1])
    return total


def reset_peak_rss(pids: list[int]) -> str:
    """Peak RSS since the last reset: writing 5 to clear_refs resets VmHWM (Linux 4.0+), so each run gets its
    own peak. Says which: "run", or "since start" where it could not."""
    scope = "run"
    for pid in pids:
        try:
            with open(f"/proc/{pid}/clear_refs", "w", encoding="ascii") as file:
                file.write("5")
        except OSError:
            scope = "since start"
    return scope


class ThreadSampler:
    """02 creates and ends a thread per connection, so the thread count at the end of a run says nothing about its
    peak: sample it every 0.1 s while the load runs (a context manager; peak() once it is over)."""

    def __init__(self, pids: list[int]):
        self.pids, self.samples = pids, []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)

    def sample(self) -> None:
        while True:
            self.samples.append(status_sum(self.pids, "Threads:"))
            if self.done.wait(0.1):
                return

    def __enter__(self) -> "ThreadSampler":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()

    def peak(self) -> int:
        return max(self.samples + [status_sum(self.pids, "Threads:")])


def probe_perf(use_perf: bool) -> str:
    """"ok" when perf can count the server's syscalls and context switches, or why not (the columns say it)."""
    if not use_perf:
        return "n/a (--no-perf)"
    if not have("perf"):
        return "n/a (perf missing)"
    result = subprocess.run(["perf", "stat", "-x,", "-e", PERF_EVENTS, "--", "true"], capture_output=True,
                            text=True, check=False)
    out = result.stdout + result.stderr
    if result.returncode == 0 and "not supported" not in out:
        return "ok"
    lowered = out.lower()
    if any(word in lowered for word in ("permission", "paranoid", "access")):
        return "n/a (perf not permitted)"
    return "n/a (perf cannot count syscalls)"


def perf_count(perf_txt: str, event: str) -> int | None:
    """An event's count in perf stat's -x, output, read with the csv module (the first field of the row whose third
    is EVENT); None when perf wrote no such row, or `<not counted>`."""
    for row in csv.reader(io.StringIO(read(perf_txt))):
        if len(row) > 2 and row[2] == event:
            try:
                return int(float(row[0]))
            except ValueError:
                return None
    return None
