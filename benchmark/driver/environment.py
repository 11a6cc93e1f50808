"""Before the first server starts: the tools installed, the servers built, the machine described and checked.

Packages are installed by tools/ensure-packages.sh (the same function as the tests and the fuzzing use: as root
it installs, otherwise it prints the apt-get line); builds are `cmake --build`, incremental, so that a stale
binary is never measured.
"""

from __future__ import annotations

import json
import os
import platform
import re
import resource
import shutil
import subprocess
import time

from . import servers
from .host import Host
from .options import FLOOR
from .sample import probe_perf
from .session import Session, command_output, cpu_count, have, read


class Stop(Exception):
    """The run cannot go on: the message has been printed; exit status 1."""


def packed() -> dict[str, str]:
    """A packed run's packed.json (benchmark/pack.sh): {"commit", "build_type"}; {} outside a pack."""
    folder = os.environ.get("PSP_PACKED", "")
    return json.loads(read(os.path.join(folder, "packed.json")) or "{}") if folder else {}


def ensure_packages(session: Session, *packages: str) -> bool:
    if packed():  # a pack has what it needs, and its machine may have no package source at all
        return False
    script = os.path.join(session.repo, "tools", "ensure-packages.sh")
    return subprocess.run(["bash", "-c", '. "$0" && ensure_packages "$@"', script, *packages],
                          check=False).returncode == 0


def ensure_tools(session: Session) -> None:
    """Installs what this run needs when it is missing. gnuplot and perf are optional: without them there is no
    plot, and the syscall column says why."""
    o = session.options
    # (--mode scaling warms up and checks the body itself: it needs no ab, so a packed run carries none)
    needed_commands = ["python3"] if o.mode == "scaling" else ["ab", "python3"]
    if o.tool == "wrk":
        needed_commands.append("wrk")
    if o.reference:
        needed_commands.append("nginx")
    if o.mode == "files":
        needed_commands.append("curl")  # fetches each file once, for cmp
    package = {"ab": "apache2-utils", "python3": "python3", "wrk": "wrk", "nginx": "nginx", "curl": "curl"}
    needed = [package[name] for name in needed_commands if not have(name)]
    if needed and not ensure_packages(session, *needed):
        session.error(f"error: the benchmark needs: {' '.join(needed)}")
        raise Stop()
    for name in needed_commands:
        if not have(name):
            session.error(f"error: {name} is needed but not found in PATH")
            raise Stop()
    if not have("gnuplot") and not ensure_packages(session, "gnuplot-nox"):
        session.error("(no plot without gnuplot)")
    if o.use_perf and o.mode not in ("connections", "scaling") and not have("perf") and not ensure_packages(session, "linux-perf"):
        session.error("(no syscall counts without perf)")


def client_binary(session: Session, name: str) -> str:
    """idle_conns or openloop, built with the servers."""
    return os.path.join(session.options.build_dir, "benchmark", name)


def build_servers(session: Session) -> None:
    """Builds the servers (and idle_conns or openloop) in Release; --no-build only checks that they exist."""
    o = session.options
    targets: list[str] = []
    binaries: list[str] = []
    for spec in o.servers:
        if spec == "nginx":
            continue
        binaries.append(servers.binary(o.build_dir, spec))
        target = "floor" if spec == FLOOR else servers.build_target(o.build_dir, servers.folder(spec))
        if not target:
            if not o.no_build:
                session.warn(f"no CMake target of {o.build_dir} builds {servers.folder(spec)}/run_server that the "
                             "script can find: it is measured as it is, not rebuilt")
        elif target not in targets:
            targets.append(target)
    for mode, client in (("connections", "idle_conns"), ("idle", "idle_conns"), ("latency", "openloop")):
        if o.mode == mode:
            targets.append(client)
            binaries.append(client_binary(session, client))
    if not o.no_build and targets:
        log = session.path("build.log")
        if not os.path.isfile(os.path.join(o.build_dir, "CMakeCache.txt")):
            if not ensure_packages(session, "cmake", "g++", "make", "pkg-config", "liburing-dev", "libboost-dev",
                                   "libasio-dev", "libgtest-dev"):
                raise Stop()
            session.say(f"configuring a Release build in {o.build_dir}")
            if not run_logged(["cmake", "-S", session.repo, "-B", o.build_dir, "-DCMAKE_BUILD_TYPE=Release"], log):
                session.error(tail(log, 20))
                session.error(f"error: cmake could not configure {o.build_dir}")
                raise Stop()
        session.say(f"building {' '.join(targets)} in {o.build_dir}")
        if not run_logged(["cmake", "--build", o.build_dir, "-j", str(cpu_count()), "--target", *targets], log):
            session.error(tail(log, 30))
            session.error("error: the build failed (output above)")
            raise Stop()
    for path in binaries:
        if not os.access(path, os.X_OK):
            session.error(f"error: {path} is missing; build it or drop --no-build")
            raise Stop()
    # A Debug or sanitizer build would measure the instrumentation, not the I/O model.
    cache = read(os.path.join(o.build_dir, "CMakeCache.txt"))
    # A packed build (benchmark/pack.sh: g++ -O2 -static, no CMake) says what it is in packed.json.
    build_type = next(iter(re.findall(r"^CMAKE_BUILD_TYPE:[A-Z]*=(.*)$", cache, re.M)),
                      packed().get("build_type", ""))
    sanitize = next(iter(re.findall(r"^PSP_SANITIZE:[A-Z]*=(.*)$", cache, re.M)), "")
    session.build_type = (build_type or "unknown") + (f" + {sanitize} sanitizer" if sanitize else "")
    if not build_type.startswith("Release") or sanitize:
        session.warn(f"the servers in {o.build_dir} are a '{session.build_type}' build, not Release: the numbers "
                     "are not comparable")


def run_logged(command: list[str], log: str) -> bool:
    with open(log, "wb") as out:
        return subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False).returncode == 0


def tail(path: str, count: int) -> str:
    return "\n".join(read(path).rstrip("\n").split("\n")[-count:])


def measured_commit(repo: str) -> str:
    """HEAD's short commit, with -dirty when the code to measure differs from it; "no commit" outside git. Only the
    code counts (as in pack.sh and campaign.py): a page of docs/ edited during a run does not make its numbers
    unreadable, nor does benchmark/results/, which is data (the campaign rewrites its record there between runs)."""
    commit = command_output(["git", "-C", repo, "rev-parse", "--short", "HEAD"]).strip()
    if not commit:
        return "no commit"
    code = ["0*", "common/", "benchmark/", ":(exclude)benchmark/results"]  # 0*: a pathspec glob ("0*/" matches none)
    changed = subprocess.run(["git", "-C", repo, "diff", "--quiet", "HEAD", "--", *code], capture_output=True,
                             check=False).returncode != 0
    return commit + ("-dirty" if changed else "")


def describe_machine(session: Session) -> dict[str, str]:
    """The machine, for the log headers and the summary."""
    cpuinfo = read("/proc/cpuinfo")
    session.cpu_model = next(iter(re.findall(r"^model name[^:]*: (.*)$", cpuinfo, re.M)), "")
    session.cpus = cpu_count()
    session.kernel = platform.release()
    os_name = next(iter(re.findall(r'^PRETTY_NAME="?([^"\n]*)"?$', read("/etc/os-release"), re.M)), "unknown")
    meminfo = re.search(r"^MemTotal:\s+([0-9]+)", read("/proc/meminfo"), re.M)
    memory = "%.1f GiB" % (int(meminfo.group(1)) / 1048576) if meminfo else ""
    virt = next(iter(re.findall(r"^Hypervisor vendor: *(.*)$", command_output(["lscpu"]), re.M)), "")
    # A packed run (benchmark/pack.sh) has no git: packed.json says which commit it was packed from.
    session.commit = packed().get("commit") or measured_commit(session.repo)
    ab_words = command_output(["ab", "-V"]).split("\n", 1)[0].split()
    return {"os": os_name, "memory": memory, "virt": virt, "ab_version": ab_words[4] if len(ab_words) > 4 else ""}


def cpu_busy_percent() -> int:
    """How busy the CPUs are, over one second, in percent (from the idle time in /proc/stat)."""
    def times() -> tuple[int, int]:
        fields = [int(value) for value in read("/proc/stat").split("\n", 1)[0].split()[1:8]]
        return sum(fields), fields[3] + fields[4]
    first = times()
    time.sleep(1)
    second = times()
    total = second[0] - first[0]
    return int(100 * (1 - (second[1] - first[1]) / total) + 0.5) if total > 0 else 0


def check_environment(session: Session, machine: dict[str, str], host: Host, start_load: str,
                      prepare_connections=None) -> int:
    """Says what it found, raises the soft descriptor limit if it must, and warns about what distorts results.
    Returns how busy the CPUs were (percent)."""
    o = session.options
    max_c = max(o.concurrencies)
    if o.mode == "idle":
        max_c += max(o.idle_counts)
    session.say("environment")
    virt = f", {machine['virt']} VM" if machine["virt"] else ""
    session.say(f"  machine: {session.cpu_model}, {session.cpus} CPUs, {machine['memory']}{virt}; {machine['os']}; "
                f"kernel {session.kernel}")
    session.say(f"  commit: {session.commit}; servers: {o.build_dir} ({session.build_type})")
    if o.mode != "scaling":
        session.say(f"  ab: {command_path('ab')} ({machine['ab_version']})")
    if o.tool == "wrk":
        session.say(f"  wrk: {command_path('wrk')}")
    # Each of the client and the server holds one descriptor per connection, plus a few of its own. Serving files,
    # a server also holds the open file, and 06 a pipe (two descriptors), for each connection.
    need = 4 * max_c + 64 if o.mode == "files" else max_c + 64
    if o.mode == "connections":
        prepare_connections()
        need = 0
    soft, hard = Host.nofile()
    if soft != resource.RLIM_INFINITY and soft < need:
        host.raise_nofile(need, hard_too=os.geteuid() == 0)
        session.say(f"  open files: soft limit raised from {soft} to {limit_text(Host.nofile()[0])} (need {need})")
    elif o.mode != "connections":
        session.say(f"  open files: soft limit {limit_text(soft)} (need {need})")
    soft = Host.nofile()[0]
    if soft != resource.RLIM_INFINITY and soft < need:
        session.warn(f"ulimit -n is {soft} but {max_c} connections need about {need} descriptors: expect EMFILE and "
                     "failures (raise the hard limit)")
    # The accept queue must hold every connection that arrives at once: idle_conns opens at most 500 at a time.
    burst = min(max_c, 500) if o.mode in ("connections", "idle") else max_c
    somaxconn = int(host.sysctl("net.core.somaxconn") or 0)
    session.say(f"  net.core.somaxconn: {somaxconn} (connections arriving at once: up to {burst})")
    if somaxconn < burst:
        session.warn(f"net.core.somaxconn is {somaxconn}, below the {burst} connections that arrive at once: the "
                     "accept queue overflows and dropped SYNs add 1 s retries (sysctl -w net.core.somaxconn=4096)")
    if int(host.sysctl("net.ipv4.tcp_tw_reuse") or 0) == 0 and not o.keepalive:
        session.warn("net.ipv4.tcp_tw_reuse is 0: thousands of new connections a second can exhaust the client's "
                     "ports (sysctl -w net.ipv4.tcp_tw_reuse=2)")
    if session.cpus < 2:
        session.warn("one CPU: the client and the server share it, so every server looks slower than it is")
        o.pin = False
    # Other work on the machine competes with the client and the server. The load average also counts our own
    # build of a minute ago, so look at the CPUs over the last second instead.
    busy = cpu_busy_percent()
    session.say(f"  CPUs busy before the run: {busy} % (load average {start_load})")
    if busy > 15:
        session.warn(f"the CPUs are {busy} % busy with other work before the run: expect noisy, lower numbers")
    if o.mode == "connections":
        return busy
    session.perf_state = probe_perf(o.use_perf and o.mode != "scaling")
    if session.perf_state == "ok":
        session.say("  perf: counting context switches and syscalls of the server")
    else:
        session.say(f"  perf: {session.perf_state}; the syscall column will say so")
    session.say("  gnuplot: a plot will be drawn" if have("gnuplot") else "  gnuplot: missing, no plot")
    return busy


def command_path(name: str) -> str:
    """command -v NAME: its path, or "" when it is not in PATH."""
    return shutil.which(name) or ""


def limit_text(value: int) -> str:
    return "unlimited" if value == resource.RLIM_INFINITY else str(value)
