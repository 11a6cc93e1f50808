"""The command line: every option, its environment variable, its default by mode, and every refusal.

parse(argv, environ) returns an Options or raises UsageError, whose message the caller prints after the usage
line, as `error: MESSAGE` and a pointer to --help, with exit status 2, before anything is started. The command
line is read by argparse (a parser built from the tables VALUED and SWITCHES below, which docs/tools/campaign.py
also reads); validate() then fills the defaults by mode and turns every number into an int.
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass, field
from typing import Optional

ALL_SERVERS = ("01-blocking-single", "02-thread-per-conn", "03-select", "04-threadpool", "05-epoll",
               "06-io_uring", "07-asio")
# --mode files measures the models that serve many keep-alive connections at once by default. 01 serves one
# connection at a time, so wrk's other connections time out (a failed check by design); 02 and 04 can be named.
FILES_SERVERS = ("03", "05", "06", "07")
# --mode idle leaves out 01 for the same reason: beside one idle connection (or one of ab's kept-alive ones) it
# serves nobody else. Named, it gets rows that say so.
IDLE_SERVERS = ("02", "03", "04", "05", "06", "07")
# --mode scaling: the thread-per-connection model and the three event loops, each beside the floor and nginx.
SCALING_SERVERS = ("02", "05", "06", "07")
MODES = ("throughput", "connections", "files", "idle", "latency", "scaling")
FLOOR = "floor"  # the reference row of benchmark/floor.cpp: the least an epoll server does per request


class UsageError(Exception):
    """A bad option: the run refuses it before it starts anything (exit status 2)."""


@dataclass
class Options:
    """The options of a run. The fields of numbers hold the text given (the environment, the command line) until
    validate() checks it and makes it an int; the lists (`*_list`, text) become the list fields below it."""
    mode: str = "throughput"
    server_list: str = ""
    concurrency_list: str = ""
    requests: int = 10000
    repeat: int = 1
    warmup: int = 1000
    keepalive: bool = False
    tool: str = ""
    duration: str = ""
    wrk_threads: int = 1
    delay_us: Optional[int] = None          # None: the mode's default
    handler: str = "wait"
    threads: Optional[int] = None           # None: the servers' own
    nginx_workers: Optional[int] = None     # None: as --threads, else one per CPU
    pin: bool = False
    reference: bool = True
    use_perf: bool = True
    retry_disturbed: bool = False
    disturbed_pct: int = 10
    conn_list: str = "1000 10000 100000 1000000"
    idle_list: str = "0 1000 5000 10000"
    rate_list: str = ""
    p99_target: int = 10
    core_list: str = ""
    build_dir: str = ""
    no_build: bool = False
    results_root: str = ""
    log_file: str = ""
    # Set by validate(): the lists as numbers, the duration in seconds, the server specs (one per row).
    concurrencies: list[int] = field(default_factory=list)
    conn_counts: list[int] = field(default_factory=list)
    idle_counts: list[int] = field(default_factory=list)
    rates: list[int] = field(default_factory=list)
    cores: list[int] = field(default_factory=list)
    delays: list[int] = field(default_factory=list)  # --mode scaling: the handler times measured
    duration_s: int = 0
    servers: list[str] = field(default_factory=list)


def flag(value: str) -> bool:
    """An on/off environment variable, read as bash's (( )) reads it: a non-zero number is on."""
    try:
        return int(value) != 0
    except ValueError:
        return False


# Each option that takes a value: its names and the Options field it sets.
VALUED = {"-c": "concurrency_list", "--concurrency": "concurrency_list", "-n": "requests", "--requests": "requests",
          "-r": "repeat", "--repeat": "repeat", "-w": "warmup", "--warmup": "warmup", "-t": "tool", "--tool": "tool",
          "-d": "duration", "--duration": "duration", "--wrk-threads": "wrk_threads", "--delay-us": "delay_us",
          "--handler": "handler", "--threads": "threads", "--nginx-workers": "nginx_workers", "--mode": "mode",
          "--conns": "conn_list", "--idle": "idle_list", "--rates": "rate_list", "--p99-target": "p99_target",
          "--cores": "core_list", "--build-dir": "build_dir", "--results-dir": "results_root", "--log": "log_file",
          "--disturbed-pct": "disturbed_pct"}
# The switches: their names, the field, and the value they set.
SWITCHES = {"-k": ("keepalive", True), "--keep-alive": ("keepalive", True), "--pin": ("pin", True),
            "--no-reference": ("reference", False), "--no-perf": ("use_perf", False),
            "--no-build": ("no_build", True), "--retry-disturbed": ("retry_disturbed", True)}
# The environment variable of each field, read before the command line (which wins).
ENVIRONMENT = {"mode": "PSP_MODE", "server_list": "PSP_SERVERS", "concurrency_list": "PSP_CONCURRENCY",
               "requests": "PSP_REQUESTS", "repeat": "PSP_REPEAT", "warmup": "PSP_WARMUP", "tool": "PSP_TOOL",
               "duration": "PSP_DURATION", "wrk_threads": "PSP_WRK_THREADS", "delay_us": "PSP_DELAY_US",
               "handler": "PSP_HANDLER", "threads": "PSP_THREADS", "nginx_workers": "PSP_NGINX_WORKERS",
               "conn_list": "PSP_CONNS", "idle_list": "PSP_IDLE", "rate_list": "PSP_RATES",
               "p99_target": "PSP_P99_TARGET", "core_list": "PSP_CORES", "build_dir": "PSP_BUILD_DIR",
               "results_root": "PSP_RESULTS_DIR", "log_file": "PSP_LOG", "disturbed_pct": "PSP_DISTURBED_PCT"}
FLAG_ENVIRONMENT = {"keepalive": "PSP_KEEPALIVE", "pin": "PSP_PIN", "reference": "PSP_REFERENCE",
                    "use_perf": "PSP_PERF", "no_build": "PSP_NO_BUILD", "retry_disturbed": "PSP_RETRY_DISTURBED"}


class Help(Exception):
    """-h or --help: the caller prints usage() and exits 0."""


def from_environment(environ: dict[str, str], repo: str, script_dir: str) -> Options:
    options = Options(build_dir=os.path.join(repo, "build"), results_root=os.path.join(script_dir, "results"),
                      log_file=os.path.join(script_dir, "output.log"))
    # As bash's ${VAR:-default}: an empty variable counts as unset.
    for name, variable in ENVIRONMENT.items():
        if environ.get(variable):
            setattr(options, name, environ[variable])
    for name, variable in FLAG_ENVIRONMENT.items():
        if environ.get(variable):
            setattr(options, name, flag(environ[variable]))
    return options


class Parser(argparse.ArgumentParser):
    """argparse, with its refusals raised as UsageError (main prints them, with the usage line, exit status 2)."""

    def error(self, message: str):
        raise UsageError(message)


class Value(argparse.Action):
    """An option's value: an empty one is refused, as a missing one is."""

    def __call__(self, parser, namespace, values, option_string=None):
        if values == "":
            raise argparse.ArgumentError(self, "needs a value")
        setattr(namespace, self.dest, values)


class Servers(argparse.Action):
    """The SERVER words, wherever they stand among the options, added to any from PSP_SERVERS."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, getattr(namespace, self.dest, "") + "".join(" " + value for value in values))


def parser() -> Parser:
    """The command line's parser, from VALUED and SWITCHES; -h is handled by main (usage.txt, not argparse's)."""
    result = Parser(prog="benchmark/benchmark.sh", usage="benchmark/benchmark.sh [options] [SERVER...]",
                    add_help=False, allow_abbrev=False)
    result.add_argument("-h", "--help", action="store_true", dest="help")
    for dest in dict.fromkeys(VALUED.values()):
        names = sorted((name for name, field_name in VALUED.items() if field_name == dest), key=len)
        result.add_argument(*names, dest=dest, action=Value, default=argparse.SUPPRESS)
    for dest, value in dict.fromkeys(SWITCHES.values()):
        names = sorted((name for name, setting in SWITCHES.items() if setting == (dest, value)), key=len)
        result.add_argument(*names, dest=dest, action="store_const", const=value, default=argparse.SUPPRESS)
    result.add_argument("server_list", nargs="*", action=Servers, default=argparse.SUPPRESS)
    return result


def parse_args(argv: list[str], options: Options) -> Options:
    namespace = argparse.Namespace(server_list=options.server_list)
    args = vars(parser().parse_intermixed_args(argv, namespace))
    if args.pop("help", False):
        raise Help()
    for name, value in args.items():
        setattr(options, name, value)
    return options


def text(value) -> str:
    """An option's value as text: "" for None (not given)."""
    return "" if value is None else str(value)


def is_count(value: str) -> bool:
    return re.fullmatch(r"[0-9]+", value) is not None and int(value) > 0


def words(text: str) -> list[str]:
    """A list option, space or comma separated."""
    return text.replace(",", " ").split()


def wrk_only(o: Options, refusal: str, connections: str) -> None:
    """A mode that always uses wrk: refuses another --tool, and sets wrk and the mode's default connections."""
    if (o.tool or "wrk") != "wrk":
        raise UsageError(refusal)
    o.tool = "wrk"
    o.concurrency_list = o.concurrency_list or connections


def validate(o: Options, has_build_target) -> Options:
    """Fills the defaults by mode and refuses what cannot work, in the order of today's checks (the first one
    that fails is the one reported). has_build_target(build_dir, folder) names the CMake target that builds
    FOLDER/run_server ("" for none)."""
    if o.mode not in MODES:
        raise UsageError("--mode must be throughput, connections, files, idle, latency or scaling")
    if o.mode == "idle":
        if (o.tool or "ab") != "ab":
            raise UsageError("--mode idle uses ab (with and without -k, by itself)")
        o.concurrency_list = o.concurrency_list or "10"
    if o.mode == "latency":
        if (o.tool or "ab") != "ab":
            raise UsageError("--mode latency uses openloop (and ab to measure capacity)")
        o.concurrency_list = o.concurrency_list or "100"
        if not re.fullmatch(r"[0-9]+", o.concurrency_list):
            raise UsageError("--mode latency takes one connection count (-c N)")
        o.duration = o.duration or "5s"
    if o.mode == "scaling":
        wrk_only(o, "--mode scaling uses wrk (one client thread per client CPU)", "256")
        o.duration = o.duration or "5s"
        # Both handlers unless one is named: 0 (what the I/O model costs) and 1 ms (where Little's law caps it).
        o.delays = [int(o.delay_us)] if re.fullmatch(r"[0-9]+", text(o.delay_us)) else [0, 1000]
        o.delay_us = text(o.delay_us) or "0"
    elif o.core_list:
        raise UsageError("--cores is for --mode scaling")
    o.duration = o.duration or "10s"
    if o.mode == "files":
        wrk_only(o, "--mode files always uses wrk (it checks the bytes read; ab cannot)", "100 1000")
        o.delay_us = text(o.delay_us) or "0"
    o.tool = o.tool or "ab"
    o.concurrency_list = o.concurrency_list or "1 10 100 500"
    o.delay_us = text(o.delay_us) or "1000"
    requests, repeat, warmup, wrk_threads, threads, nginx_workers, p99_target, disturbed_pct = map(text, (
        o.requests, o.repeat, o.warmup, o.wrk_threads, o.threads, o.nginx_workers, o.p99_target, o.disturbed_pct))
    concurrencies, conns, idles, rates = (words(o.concurrency_list), words(o.conn_list), words(o.idle_list),
                                          words(o.rate_list))
    for value in idles:
        if not re.fullmatch(r"[0-9]+", value):
            raise UsageError(f"bad idle connection count '{value}'")
    for value in rates:
        if not is_count(value):
            raise UsageError(f"bad rate '{value}' (requests per second)")
    if not is_count(p99_target):
        raise UsageError(f"bad --p99-target '{p99_target}' (milliseconds)")
    if not re.fullmatch(r"[0-9]+", disturbed_pct) or int(disturbed_pct) > 100:
        raise UsageError(f"bad --disturbed-pct '{disturbed_pct}' (a whole percentage, 0 to 100)")
    for value in concurrencies:
        if not is_count(value):
            raise UsageError(f"bad concurrency '{value}'")
    for value in conns:
        if not is_count(value):
            raise UsageError(f"bad connection count '{value}'")
    if not concurrencies:
        raise UsageError("no concurrency level given")
    checks = ((requests, is_count, f"bad request count '{requests}'"),
              (repeat, is_count, f"bad repetition count '{repeat}'"),
              (wrk_threads, is_count, f"bad wrk thread count '{wrk_threads}'"))
    for value, test, message in checks:
        if not test(value):
            raise UsageError(message)
    if not re.fullmatch(r"[0-9]+", warmup):
        raise UsageError(f"bad warm-up count '{warmup}'")
    if not re.fullmatch(r"[0-9]+", o.delay_us):
        raise UsageError(f"bad --delay-us '{o.delay_us}'")
    if threads and not is_count(threads):
        raise UsageError(f"bad --threads '{threads}'")
    if nginx_workers and not is_count(nginx_workers):
        raise UsageError(f"bad --nginx-workers '{nginx_workers}'")
    # From here on, every number is an int.
    o.requests, o.repeat, o.warmup, o.wrk_threads, o.p99_target, o.disturbed_pct = (
        int(requests), int(repeat), int(warmup), int(wrk_threads), int(p99_target), int(disturbed_pct))
    o.delay_us = int(o.delay_us)
    o.threads = int(threads) if threads else None
    o.nginx_workers = int(nginx_workers) if nginx_workers else None
    if o.handler not in ("wait", "sleep", "spin"):
        raise UsageError("--handler must be wait, sleep or spin")
    if o.tool not in ("ab", "wrk"):
        raise UsageError("--tool must be ab or wrk")
    match = re.fullmatch(r"([0-9]+)(s|m)?", o.duration)
    if not match:
        raise UsageError(f"bad --duration '{o.duration}' (e.g. 10s or 2m)")
    o.duration_s = int(match.group(1)) * (60 if match.group(2) == "m" else 1)
    if o.tool == "wrk":
        o.keepalive = True
    o.concurrencies = [int(value) for value in concurrencies]
    o.conn_counts = [int(value) for value in conns]
    o.idle_counts = [int(value) for value in idles]
    o.rates = [int(value) for value in rates]
    if o.tool == "ab":
        for value in o.concurrencies:
            if value > o.requests:
                raise UsageError(f"concurrency {value} is above the request count {o.requests} (ab refuses it)")
    if o.mode == "scaling":
        o.cores = scaling_cores(o.core_list)
        if o.mode == "scaling" and o.threads:
            raise UsageError("--mode scaling sets --threads to each core count itself")
        if o.mode == "scaling" and len(o.concurrencies) != 1:
            raise UsageError("--mode scaling takes one connection count (-c N)")
    o.servers = resolve_servers(o, has_build_target)
    # The floor is a row wherever its bare loops do what the servers do: keep-alive wrk runs without a handler.
    if o.reference and (o.mode == "scaling" or (o.mode == "throughput" and o.tool == "wrk" and o.delay_us == 0)):
        o.servers.append(FLOOR)
    if o.reference:
        o.servers.append("nginx")
    o.nginx_workers = o.nginx_workers or o.threads or len(os.sched_getaffinity(0))
    return o


def scaling_cores(text: str) -> list[int]:
    """--cores: how many CPUs the server gets in turn. The client needs CPUs of its own (the others), so each count
    leaves at least one. Default: the powers of two up to half the CPUs (1 on a 2-CPU machine)."""
    cpus = len(os.sched_getaffinity(0))
    if cpus < 2:
        raise UsageError("--mode scaling needs 2 CPUs or more: the server and the client each need CPUs of their own")
    if not text:
        return [1 << power for power in range(cpus.bit_length()) if 1 << power <= cpus // 2]
    cores = []
    for value in words(text):
        if not is_count(value):
            raise UsageError(f"bad core count '{value}'")
        if int(value) >= cpus:
            raise UsageError(f"--cores {value} leaves no CPU for the client ({cpus} CPUs here)")
        cores.append(int(value))
    return cores


def resolve_servers(o: Options, has_build_target) -> list[str]:
    """One spec per row, FOLDER[:FLAG...], the folder spelled out (05 -> 05-epoll, 06:--x=1 -> 06-io_uring:--x=1),
    so that the row names the binary and the flags it ran with."""
    default = {"files": FILES_SERVERS, "idle": IDLE_SERVERS, "scaling": SCALING_SERVERS}.get(o.mode, ALL_SERVERS)
    specs = o.server_list.split() or list(default)
    servers: list[str] = []
    for spec in specs:
        # The spec becomes a CSV cell and a Markdown cell: keep it to plain characters.
        if not re.fullmatch(r"[A-Za-z0-9._/=:+@%-]+", spec):
            raise UsageError(f"server '{spec}' has a character other than letters, digits and ._/=:+@%-")
        name = spec.split(":", 1)[0]
        if re.fullmatch(r"[1-7]", name):
            name = "0" + name
        found = ""
        for folder in ALL_SERVERS:
            if folder == name or folder.startswith(name + "-"):
                found = folder
        # Any other folder of the build directory with a run_server in it (an optional build, e.g. 07-asio-uring).
        if not found and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]*", name) and (
                os.access(os.path.join(o.build_dir, name, "run_server"), os.X_OK)
                or has_build_target(o.build_dir, name)):
            found = name
        if not found:
            raise UsageError(f"unknown server '{name}' (expected 01..07, or a folder of {o.build_dir} that holds "
                             "a run_server)")
        if ":" in spec:
            rest = spec.split(":", 1)[1]
            for part in rest.split(":"):  # ("06:" is one empty part, refused here)
                if not part.startswith("-"):
                    raise UsageError(f"in server '{spec}', '{part}' is not a flag (each part after a colon starts "
                                     "with -)")
            found += ":" + rest
        if found in servers:
            raise UsageError(f"server '{found}' is named twice")
        servers.append(found)
    return servers


def parse(argv: list[str], environ: dict[str, str], repo: str, script_dir: str, has_build_target) -> Options:
    """The options of a run: the environment, then the command line, then validate()."""
    return validate(parse_args(argv, from_environment(environ, repo, script_dir)), has_build_target)
