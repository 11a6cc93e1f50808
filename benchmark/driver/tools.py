"""The load tools, ab, wrk, openloop and idle_conns: each run is one function that returns a record (its exact
command, its exit status, its raw output for the log, and the figures read from it).

Every client runs in a process group of its own (subprocess's start_new_session), so that one signal to the group
reaches the whole chain (perf, taskset, ab): past its time limit run_client sends the group SIGTERM, then SIGKILL
5 s later, and on Ctrl-C it stops the group before it lets the interruption go on.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field

from . import analyse  # the parsers, tested against recorded outputs
from .session import PERF_EVENTS, read

SCRIPT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WRK_DONE = os.path.join(SCRIPT_DIR, "wrk_done.lua")


@dataclass
class Record:
    """One run of a load tool: what ran, how it ended, what it printed, and what that says."""
    command: list[str]
    status: int = 0
    output: str = ""
    figures: dict[str, str] = field(default_factory=dict)


TIMED_OUT = 124  # run_client's status for a client stopped at its time limit (as timeout(1) said it)
KILL_AFTER_S = 5  # how long a client stopped at its limit has to leave before SIGKILL


def stop_group(process: subprocess.Popen) -> None:
    """SIGTERM to the client's process group, SIGKILL KILL_AFTER_S later if anything of it is still there."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=KILL_AFTER_S)
            return
        except subprocess.TimeoutExpired:
            continue
    process.wait()


def run_client(seconds: float, command: list[str], out: str, err: str | None = None) -> int:
    """Runs COMMAND in a process group of its own, its output into OUT (and its errors into ERR, or OUT too); its
    exit status, or TIMED_OUT when it ran past SECONDS (and was stopped, with all it started)."""
    with open(out, "wb") as stdout, open(err or os.devnull, "wb") as stderr:
        process = subprocess.Popen(command, stdout=stdout, stderr=stdout if err is None else stderr,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            return process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            stop_group(process)
            return TIMED_OUT
        except BaseException:  # Ctrl-C, SIGTERM: stop the client before leaving
            stop_group(process)
            raise


def ab_command(url: str, concurrency: int, requests: int, keepalive: bool) -> list[str]:
    return ["ab", "-q", "-r", "-n", str(requests), "-c", str(concurrency), *(["-k"] if keepalive else []), url]


def wrk_command(url: str, connections: int, threads: int, duration: str, timeout: str = "",
                headers: list[str] | None = None) -> list[str]:
    """wrk_done.lua prints wrk's exact counters on one line when the run is over, for parse_wrk. HEADERS are
    added to every request (`Connection: close`: wrk then opens a new connection for each request)."""
    return ["wrk", "-t", str(min(threads, connections)), "-c", str(connections), "-d", duration, "--latency",
            "-s", WRK_DONE, *(["--timeout", timeout] if timeout else []),
            *[word for header in headers or [] for word in ("-H", header)], url]


def parse(tool: str, output: str, percentiles: str = "") -> dict[str, str]:
    """The PARSED_FIELDS of analyse.py from a tool's output (ab: and its -e percentile file)."""
    return analyse.parse_ab(output, percentiles) if tool == "ab" else analyse.parse_wrk(output)


def load(tool: str, command: list[str], seconds: int, out: str, prefix: list[str], perf: list[str],
         percentiles: str) -> Record:
    """One measured run of ab or wrk (COMMAND as the console and the log show it): run with the client's
    PREFIX (taskset) and under PERF (perf stat -p ...), ab with -e PERCENTILES."""
    wrapped = [*prefix, *command]
    if tool == "ab":
        # -e: the same percentiles as ab's table, which prints whole milliseconds, with decimals.
        wrapped = [*prefix, "ab", "-e", percentiles, *command[1:]]
    status = run_client(seconds, [*perf, *wrapped], out)
    output = read(out)
    return Record(command, status, output, parse(tool, output, read(percentiles) if tool == "ab" else ""))


def perf_wrap(pids: list[int], perf_txt: str) -> list[str]:
    """With -p, perf counts only the server (and the threads it creates), for as long as the client runs."""
    return ["perf", "stat", "-x", ",", "-e", PERF_EVENTS, "-p", ",".join(map(str, pids)), "-o", perf_txt, "--"]


def typed_value(text: str):
    """One value of such a line: an int ("200", "000"), a float ("1.286"), None for "n/a", else the text."""
    if text == "n/a":
        return None
    if re.fullmatch(r"-?[0-9]+", text):
        return int(text)
    figure = analyse.number(text)
    return text if figure is None else figure


def key_values(line: str) -> dict:
    """`a=1 b=2.5 c=n/a d=refused` -> {"a": 1, "b": 2.5, "c": None, "d": "refused"} (the lines openloop and
    idle_conns print), each value typed by typed_value."""
    return {word.split("=", 1)[0]: typed_value(word.split("=", 1)[1]) for word in line.split() if "=" in word}


def openloop(binary: str, port: int, rate: int, seconds: int, connections: int, keepalive: bool, prefix: list[str],
             out: str, err: str, expect_length: int) -> Record:
    """One offered rate through openloop: its last line's figures (completed, p99_ms, ...; none when it failed)."""
    command = [binary, "--port", str(port), "--rate", str(rate), "--duration", str(seconds), "--connections",
               str(connections), "--expect-length", str(expect_length), *([] if keepalive else ["--new-conn"])]
    status = run_client(seconds + 60, [*prefix, *command], out, err)
    output = read(out)
    lines = output.rstrip("\n").split("\n")
    return Record(command, status, output + read(err), key_values(lines[-1] if lines else ""))


class IdleHolder:
    """idle_conns --hold: N idle keep-alive connections held against the server until release() (a SIGTERM: it
    releases them with resets), and the figures of its `holding ...` line and of its final line."""

    def __init__(self, binary: str, port: int, server_pid: int, n: int, probes: int, out: str, err: str,
                 prefix: list[str] | None = None):
        self.n, self.out, self.err = n, out, err
        self.command = [*(prefix or []), binary, "--port", str(port), "--connections", str(n), "--pid",
                        str(server_pid), "--probes", str(probes), "--hold"]
        self.process: subprocess.Popen | None = None
        self.held: dict[str, str] = {}    # the holding line's figures
        self.final: dict[str, str] = {}   # the last line's figures, once released

    def hold(self) -> bool:
        """Starts it and waits for its `holding ...` line (False when it never came: it could not run)."""
        if os.path.exists(self.out):
            os.unlink(self.out)  # the loop below must not read an earlier holder's line
        with open(self.out, "wb") as stdout, open(self.err, "wb") as stderr:
            self.process = subprocess.Popen(self.command, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 120 + self.n // 1000
        line = ""
        while time.monotonic() < deadline and self.process.poll() is None:
            line = read(self.out).split("\n", 1)[0]
            if line.startswith("holding"):
                break
            time.sleep(0.1)
        if not line.startswith("holding"):
            line = read(self.out).split("\n", 1)[0]
        if not line.startswith("holding"):
            return False
        self.held = key_values(line[len("holding "):])
        return True

    def release(self) -> bool:
        """SIGTERM, then SIGKILL past a deadline (a million resets take a while); False when it was not running."""
        if self.process is None:
            return False
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30 + self.n // 20000)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None
        lines = read(self.out).rstrip("\n").split("\n")
        self.final = key_values(lines[-1]) if lines else {}
        return True

    def __enter__(self) -> "IdleHolder":
        return self

    def __exit__(self, *exc) -> None:
        if self.process is not None:
            self.release()
