"""--mode connections: what holding idle connections costs each server, in user space and in the kernel.

For each N: a fresh server; idle_conns --hold opens N idle keep-alive connections and times new clients; then the
kernel's growth (kernel_memory.py), the server's CPU while they sit idle, and the release. The steps stop, for that
server, at the first N it does not hold (the row says what stopped it), or that would not fit in memory.

As root it raises the system limits that --conns needs (host.py: printed, and put back on every exit), and puts
the server and the client in memory cgroups of their own, to tell the client's kernel memory from the server's.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import time

from . import sample
from .environment import client_binary
from .host import Host
from .idle import release_idle
from .measure import begin_pass
from .servers import Server, server_flags
from .session import CsvTable, Session, cell_text, first_line, read
from .summary import CONN_PROBES, IDLE_WINDOW_S
from .tools import IdleHolder, key_values

FROM_HOLDER = ("held", "refused", "closed", "blocked", "untried", "dropped", "processes", "setup_s",
               "rss_kib_per_conn", "threads_per_conn", "fds_per_conn")
FROM_KERNEL = ("kernel_b", "server_kernel_b", "client_kernel_b", "server_charged_b", "available_drop_b")
PROBES = ("probe_ok", "probe_refused", "probe_timeout", "probe_median_ms", "probe_p99_ms", "probe_max_ms",
          "after_status")
SCHEMA = ("server", "connections", *FROM_HOLDER, *FROM_KERNEL, "idle_cpu_ms", *PROBES, "stopped_by", "slabs",
          "check")
FREE_MARGIN_KIB = 1024 * 1024  # a step must leave at least 1 GiB of the machine's memory available
FIRST_GUESS_B = 20480  # bytes per connection (both ends, all of it) assumed before a step has measured it
KERNEL_MEMORY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kernel_memory.py")

# The cgroups of the run (prepare_connections), "" when there are none.
cgroups = {"server": "", "client": ""}


def in_cgroup(directory: str) -> list[str]:
    """The words that start a command inside a cgroup: in_cgroup(DIR) + COMMAND."""
    if not directory:
        return []
    return ["sh", "-c", 'echo $$ >"$0/cgroup.procs" && exec "$@"', directory]


def prepare_connections(session: Session, host: Host) -> None:
    """What --conns needs of the machine, raised where it must be (each change printed, and undone on exit), and
    the memory cgroups that tell the client's kernel memory from the server's (see kernel_memory.py)."""
    o = session.options
    conn_max = max(o.conn_counts)
    need = conn_max + 64
    why = f"{conn_max} connections"
    # Descriptors: the server holds one per connection, in one process (nginx: spread over its workers); so does
    # the client, spread over as many holder processes as it needs.
    host.raise_sysctl("fs.nr_open", need, why)
    host.raise_sysctl("fs.file-max", 2 * conn_max + 65536, why)
    soft, hard = Host.nofile()
    if hard < need:
        host.raise_nofile(need, hard_too=True)
        if Host.nofile()[1] != need:
            session.say(f"  open files: the hard limit stays {hard}: raising it needs CAP_SYS_RESOURCE, which this "
                        f"root lacks; one server process holds at most about {hard - 16} connections")
    host.raise_nofile(Host.nofile()[1], hard_too=False)
    session.say(f"  open files: {Host.nofile()[0]} per process")
    # 02 starts a thread per connection: a process ID and two memory mappings (stack and guard page) each.
    if any(spec.startswith("02-") for spec in o.servers):
        host.raise_sysctl("kernel.threads-max", conn_max + 4096, why)
        host.raise_sysctl("kernel.pid_max", min(conn_max + 4096, 4194304), why)
        host.raise_sysctl("vm.max_map_count", 2 * conn_max + 65530, why)
    parent = Host.memory_cgroup()
    try:
        if not parent:
            raise OSError()
        cgroups["server"] = host.make_cgroup(parent, f"psp-server-{os.getpid()}")
        cgroups["client"] = host.make_cgroup(parent, f"psp-client-{os.getpid()}")
        session.say(f"  memory cgroups: {cgroups['server']} and {cgroups['client']} (the kernel memory each side's "
                    "system calls allocate)")
    except OSError:
        cgroups.update(server="", client="")
        session.say("  memory cgroups: not available (not root, or no memory controller): the kernel columns count "
                    "both ends")
    if not os.access("/proc/slabinfo", os.R_OK):
        session.say("  /proc/slabinfo: not readable (not root): no slab column")


# The models that take --processes (common/workers.hpp), and the share of a process's descriptor limit the mode
# plans to use in each: SO_REUSEPORT spreads connections by a hash of their addresses, so some workers get more.
PROCESS_MODELS = ("05-", "06-", "07-")
PLANNED_SHARE = 0.8


def per_process(nofile: int) -> int:
    """The connections the mode plans for one process under a descriptor limit of NOFILE (a few are its own)."""
    return int((nofile - 64) * PLANNED_SHARE)


def worker_processes(spec: str, n: int, nofile: int) -> int:
    """How many worker processes a server needs to hold N connections, where it can have several: 1 where one
    process holds them (or the model has no --processes, or the spec sets it itself)."""
    if not spec.startswith(PROCESS_MODELS) or "--processes" in spec or nofile == resource.RLIM_INFINITY:
        return 1
    return max(1, -(-n // per_process(nofile)))


def kernel_snapshot(path: str, settle: bool = False) -> None:
    command = ["python3", KERNEL_MEMORY, "snapshot", path]
    for name in ("server", "client"):
        if cgroups[name]:
            command += ["--cgroup", f"{name}={cgroups[name]}"]
    subprocess.run(command + (["--settle"] if settle else []), check=False)


def descriptors(pid: int) -> int:
    """The number of descriptors a process holds (the size of /proc/PID/fd, Linux 6.2 and later; else counted)."""
    try:
        count = os.stat(f"/proc/{pid}/fd").st_size
        return count or len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def what_stopped(session: Session, server: Server, spec: str, n: int, held: dict[str, str]) -> str:
    """What stopped a server short of N, read while the connections are held: a process at its descriptor limit,
    select()'s FD_SETSIZE, one connection per thread, or a thread that could not be started."""
    for pid in server.pids:
        fds = descriptors(pid)
        match = re.search(r"^Max open files +(\S+)", read(f"/proc/{pid}/limits"), re.M)
        if match and match.group(1).isdigit() and fds + 16 >= int(match.group(1)):
            return f"descriptors: a process at {fds} of its {match.group(1)} (ulimit -n)"
    if not server.alive():
        return "it died"
    if spec.startswith("03-"):
        return "select(): FD_SETSIZE is 1024"
    if spec.startswith("01-"):
        return "one thread: one connection at a time"
    if spec.startswith("04-"):
        return "threads: one connection per worker thread, the others closed"
    if spec.startswith("02-"):
        said = next((line for line in read(session.path("server.stderr")).split("\n")
                     if re.search("thread|resource", line, re.I)), "see its output in the log")
        return f"threads: it held {held['held']}; {said}"
    return (f"it held {held['held']} of {n} (refused {held['refused']}, closed {held['closed']}, unanswered "
            f"{held['blocked']})")


class Connections:
    def __init__(self, session: Session, raw_csv: str):
        self.session, o = session, session.options
        self.table = CsvTable(raw_csv, SCHEMA)
        self.progress = 0
        self.total = len(o.servers) * len(o.conn_counts)
        self.pinned = "no"

    def run(self) -> None:
        for spec in self.session.options.servers:
            self.connection_cost(spec)

    def row(self, spec: str, n: int, check: str, stopped: str, final: dict[str, str], kmem: dict[str, str],
            idle_ms: str = "") -> None:
        row = {name: final.get(name, "") for name in (*FROM_HOLDER, *PROBES)}
        row.update({name: kmem.get(name, "") for name in FROM_KERNEL})
        row.update(server=spec, connections=n, idle_cpu_ms=idle_ms, stopped_by=stopped, slabs=kmem.get("slabs", ""),
                   check=check)
        self.table.add(row)

    def connection_cost(self, spec: str) -> None:
        s = self.session
        stopped, guess_b = "", FIRST_GUESS_B
        self.pinned = begin_pass(s, spec, 1).pinned
        for n in s.options.conn_counts:
            self.progress += 1
            s.say(f"[{self.progress}/{self.total}] {spec}: {n} idle connections")
            meminfo = re.search(r"^MemAvailable:\s+([0-9]+)", read("/proc/meminfo"), re.M)
            avail_kib = int(meminfo.group(1)) if meminfo else 0
            need_kib = n * guess_b * 5 // 4 // 1024
            if not stopped and need_kib > avail_kib - FREE_MARGIN_KIB:
                stopped = (f"memory: {n} connections need about {need_kib // 1048576 + 1} GiB at {guess_b} bytes "
                           f"each, {avail_kib // 1048576} GiB available")
            if stopped:
                s.say(f"  not run: {stopped}")
                self.row(spec, n, "not run", stopped, {}, {})
                continue
            step_stopped, kmem = self.connection_step(spec, n)
            if step_stopped:
                stopped = step_stopped
            drop = kmem.get("available_drop_b")
            if isinstance(drop, int) and drop > 0:
                guess_b = drop

    def connection_step(self, spec: str, n: int) -> tuple[str, dict[str, str]]:
        """One server, one N: what stopped it short of N ("" when it held them all), and the kernel's growth."""
        s = self.session
        flags = server_flags(s, spec)
        processes = worker_processes(spec, n, Host.nofile()[0])
        if processes > 1:
            flags += ["--processes", str(processes)]
            s.say(f"  --processes {processes}: {n} connections, planned at most {per_process(Host.nofile()[0])} "
                  f"per process (each may hold {Host.nofile()[0]} descriptors, and the kernel spreads connections "
                  "among the listeners by hash, not evenly)")
        s.launch_prefix = in_cgroup(cgroups["server"])
        try:
            with Server(s, spec, flags=flags) as server:
                s.launch_prefix = []
                return self.held_step(server, spec, n)
        finally:
            s.launch_prefix = []

    def held_step(self, server: Server, spec: str, n: int) -> tuple[str, dict[str, str]]:
        s = self.session
        kmem: dict[str, str] = {}
        step_stopped, idle_ms, problems = "", None, []
        if not server.started:
            s.fail_check(f"{spec} did not start")
            self.row(spec, n, "FAILED: did not start", "", {}, {})
            return "it did not start", kmem
        s.log_header(f"{spec} connections={n}", f"idle_conns --connections {n} --probes {CONN_PROBES} --hold",
                     server.command, self.pinned)
        before, after = s.path("before.json"), s.path("after.json")
        kernel_snapshot(before, settle=True)
        holder = IdleHolder(client_binary(s, "idle_conns"), server.port, server.pid, n, CONN_PROBES,
                            s.path("hold.out"), s.path("hold.err"), in_cgroup(cgroups["client"]))
        with holder:
            if holder.hold():
                h = holder.held
                s.say(f"  holding {h['held']} of {n} idle connections (refused {h['refused']}, closed "
                      f"{h['closed']}, unanswered {h['blocked']}; set up in {h['setup_s']} s); a new client: "
                      f"{h['probe']}")
                kernel_snapshot(after)
                if h["held"] < n:
                    step_stopped = what_stopped(s, server, spec, n, h)
                ticks = sample.cpu_ns(server.pids)
                time.sleep(IDLE_WINDOW_S)
                idle_ms = round((sample.cpu_ns(server.pids) - ticks) / 1e6, 1)
            else:
                s.fail_check(f"{spec}: idle_conns could not hold {n} connections: {first_line(holder.err)}")
            release_idle(s, spec, holder)
        final, held = holder.final, holder.held
        # Per connection only when all N were held: refused connections leave TIME_WAIT sockets behind.
        if "held" in final and os.path.exists(after) and held.get("held") == n:
            diff = subprocess.run(["python3", KERNEL_MEMORY, "diff", before, after, "--held", str(n)],
                                  capture_output=True, text=True, check=False).stdout
            kmem = key_values(diff)
        for path in (before, after):
            if os.path.exists(path):
                os.unlink(path)
        if "held" not in final:
            problems.append(f"idle_conns failed: {first_line(holder.err)}")
            step_stopped = "idle_conns failed"
        else:
            problems += self.report(spec, n, final, kmem, step_stopped, idle_ms)
        for problem in problems:
            s.fail_check(f"{spec} with {n} connections: {problem}")
        check = "FAILED: " + ";".join(problems) if problems else "ok"
        self.row(spec, n, check, step_stopped, final, kmem, idle_ms)
        return step_stopped, kmem

    def report(self, spec: str, n: int, last: dict[str, str], kmem: dict[str, str], step_stopped: str,
               idle_ms: str) -> list[str]:
        """Prints what a held connection cost, and returns the problems (the checks of this step)."""
        s, problems = self.session, []
        s.say(f"  per held connection: server {last['rss_kib_per_conn']} KiB user, "
              f"{kmem.get('server_kernel_b', 'n/a')} B kernel; client {kmem.get('client_kernel_b', 'n/a')} B kernel; "
              f"{last['threads_per_conn']} threads, {last['fds_per_conn']} descriptors")
        s.say(f"  slabs grown (bytes per connection, both ends): {kmem.get('slabs', 'n/a')}")
        s.say(f"  a new client meanwhile: {last['probe_ok']}/{last['probes']} answered, median "
              f"{last['probe_median_ms']} ms, p99 {last['probe_p99_ms']} ms; the server's CPU over {IDLE_WINDOW_S} s "
              f"idle: {cell_text(idle_ms)} ms")
        if step_stopped:
            s.say(f"  stopped by {step_stopped}")
        if last.get("server_alive") != 1:
            problems.append("the server died")
        # select() cannot watch an fd >= FD_SETSIZE (1024): past it, 03 must answer 503 or close, never hold.
        if spec.startswith("03-") and last["held"] >= 1024:
            problems.append(f"03 held {last['held']} connections, more than select() can watch (FD_SETSIZE 1024)")
        # 01 and 04 serve one connection per thread: blocked connections and a waiting newcomer are their cost,
        # shown in the table, not a failure. Every other model must serve or refuse each connection, and answer a
        # newcomer promptly unless it is at its limit (a server may leave newcomers in the accept queue then).
        if not spec.startswith(("01-", "04-")) and not step_stopped:
            if last["blocked"] != 0:
                problems.append(f"{last['blocked']} connections were neither answered nor refused")
            if last["probe_timeout"] != 0:
                problems.append("a new client got no answer while the connections were held")
            median = last["probe_median_ms"]
            if median is not None and median > 10:
                problems.append(f"a new client waited {median} ms (median), not promptly (10 ms at most)")
        return problems

