"""What one run of the benchmark shares between its steps: the options, the console, the log, the checks.

Everything the run prints goes through say(), warn() and fail_check(): one line each, flushed at once, so that it
interleaves with what the load tools and the build print, in order. The failed checks are counted (the exit
status), and the warnings are repeated at the end of summary.md.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field

from .analyse import cell_text, ratio  # noqa: F401  (ratio: for the modes)
from .options import Options

BODY_BYTES = 1024  # what every server (and the nginx reference) answers; ab must report exactly this
# --mode files: the files served, NAME:BYTES (index.html, for "/", is made too). Numbered 16-byte lines.
FILES = (("100KiB.bin", 102400), ("1MiB.bin", 1048576))
PERF_EVENTS = "task-clock,context-switches,raw_syscalls:sys_enter"  # software events: work in VMs too


def have(command: str) -> bool:
    """A command in PATH, or in /usr/sbin (nginx and perf live there, outside a user's PATH)."""
    return shutil.which(command) is not None or os.access(f"/usr/sbin/{command}", os.X_OK)


def which(command: str) -> str:
    return shutil.which(command) or f"/usr/sbin/{command}"


def cpu_count() -> int:
    """nproc: the CPUs this process may run on."""
    return len(os.sched_getaffinity(0))


def now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())


@dataclass
class Session:
    options: Options
    repo: str
    script_dir: str
    tmp: str = ""
    warnings: list[str] = field(default_factory=list)
    failures: int = 0
    # The machine, set by environment.describe_machine(); written into every log header and the summary.
    commit: str = ""
    kernel: str = ""
    cpu_model: str = ""
    cpus: int = 0
    build_type: str = ""
    perf_state: str = ""
    files_dir: str = ""  # --mode files: the folder the servers serve
    launch_prefix: list[str] = field(default_factory=list)  # words before a server's command (a cgroup)

    @property
    def log_file(self) -> str:
        return self.options.log_file

    def say(self, text: str = "") -> None:
        print(text, flush=True)

    def error(self, text: str) -> None:
        """A line on stderr (an error, or a note that is not part of the run's story)."""
        sys.stdout.flush()
        print(text, file=sys.stderr, flush=True)

    def warn(self, text: str) -> None:
        self.error(f"warning: {text}")
        self.warnings.append(text)

    def fail_check(self, text: str) -> None:
        self.error(f"  !! CHECK FAILED: {text}")
        self.failures += 1

    def append_log(self, text: str) -> None:
        with open(self.log_file, "a", encoding="utf-8", errors="surrogateescape") as log:
            log.write(text)

    def append_file_to_log(self, *paths: str) -> None:
        """cat PATH... >> the log: each file's bytes as they are."""
        with open(self.log_file, "ab") as log:
            for path in paths:
                try:
                    with open(path, "rb") as source:
                        log.write(source.read())
                except FileNotFoundError:
                    pass

    def log_header(self, what: str, load: str, server_command: str, pinned: str) -> None:
        self.append_log(f"\n==== {now()} | {what} | {load} | server: {server_command} | pinned: {pinned} | commit "
                        f"{self.commit} | kernel {self.kernel} | {self.cpu_model} x{self.cpus} ====\n")

    def path(self, name: str) -> str:
        """A scratch file of this run (deleted at the end)."""
        return os.path.join(self.tmp, name)


def read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as file:
            return file.read()
    except FileNotFoundError:
        return ""


def first_line(path: str, limit: int = 0) -> str:
    """head -1 (of the first LIMIT bytes when LIMIT is given), without its newline."""
    text = read(path)
    if limit:
        text = text[:limit]
    return text.split("\n", 1)[0]


def last_line(path: str) -> str:
    lines = read(path).rstrip("\n").split("\n")
    return lines[-1] if lines else ""


def command_output(command: list[str]) -> str:
    """What a command prints (stdout and stderr), or "" when it cannot run."""
    try:
        return subprocess.run(command, capture_output=True, text=True, check=False).stdout
    except OSError:
        return ""


class CsvTable:
    """A CSV file whose header and rows come from one field list (a mode's schema), through csv.DictWriter: a row
    must give exactly the schema's fields, so a column cannot drift from its name. Ordinary quoting (a cell with
    a comma or a quote is quoted); a value is written through analyse.cell_text (None as n/a, numbers as numbers)."""

    def __init__(self, path: str, fields: tuple[str, ...]):
        self.path, self.fields = path, fields
        with open(path, "w", encoding="utf-8", newline="") as file:
            self.writer(file).writeheader()

    def writer(self, file) -> csv.DictWriter:
        return csv.DictWriter(file, fieldnames=self.fields, lineterminator="\n", extrasaction="raise")

    def add(self, row: dict[str, object]) -> None:
        missing = [name for name in self.fields if name not in row]
        if missing:
            raise ValueError(f"{os.path.basename(self.path)}: a row without {', '.join(missing)}")
        with open(self.path, "a", encoding="utf-8", newline="") as file:
            self.writer(file).writerow({name: cell_text(value) for name, value in row.items()})
