"""The servers: what a spec means (folder, variant flags, threads), and a running server as a context manager.

    with Server(session, "05-epoll") as server:   # started on a free port, or server.problem says why not
        if server.started: ... server.port, server.pids ...
    # stopped here, by PID, whatever happened inside: SIGTERM, then SIGKILL after a bounded grace

A spec is FOLDER[:FLAG...] (see options.resolve_servers); nginx, the reference, is just "nginx".
"""

from __future__ import annotations

import grp
import json
import os
import random
import re
import resource
import signal
import socket
import string
import subprocess
import time

from .options import ALL_SERVERS, FLOOR
from .session import BODY_BYTES, Session, first_line, read, which

TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nginx.conf.template")
STOP_GRACE_S = 5.0  # servers finish the responses in flight within about 2 s


def folder(spec: str) -> str:
    return spec.split(":", 1)[0]


def binary(build_dir: str, spec: str) -> str:
    if spec == FLOOR:
        return os.path.join(build_dir, "benchmark", "floor")
    return os.path.join(build_dir, folder(spec), "run_server")


def variant_flags(spec: str) -> list[str]:
    """A variant's extra flags as arguments: 06-io_uring:--sqpoll=50:--fixed-files gives --sqpoll, 50,
    --fixed-files. The servers take a flag's value as the next argument, and a spec cannot hold a space."""
    if ":" not in spec:
        return []
    flags: list[str] = []
    for part in spec.split(":")[1:]:
        if not part:  # (read -ra drops a trailing empty part)
            continue
        flags.extend(part.split("=", 1))
    return flags


def threads_of(spec: str, threads: int | str | None, cpus: int) -> str:
    """The threads a server runs with: its variant's --threads, else --threads, else one per CPU."""
    value = str(threads or cpus)
    flags = variant_flags(spec)
    for previous, current in zip(flags, flags[1:]):
        if previous == "--threads":
            value = current
    return value


def is_single_threaded(spec: str, threads: int | None, nginx_workers: int | None, cpus: int) -> bool:
    if spec.startswith(("01-", "03-")):
        return True
    if spec.startswith(("05-", "06-", "07-")):
        return threads_of(spec, threads, cpus) == "1"
    if spec == "nginx":
        return nginx_workers == 1
    return False


def server_flags(session: Session, spec: str, threads: str = "", delay_us: str = "") -> list[str]:
    """The flags each server gets. 01, 02 and 03 refuse --threads (they have no pool and no loops to size). A
    variant's own flags come last, so that they win over the script's (05:--threads=1). THREADS and DELAY_US
    override the options' (--mode scaling sets them for each row). The floor takes only --threads and
    --delay-us 0: it has no handler."""
    o = session.options
    threads = threads or ("" if o.threads is None else str(o.threads))
    delay_us = delay_us or str(o.delay_us)
    if spec == FLOOR:
        return ["--delay-us", "0", *(["--threads", threads] if threads else [])]
    flags = ["--delay-us", delay_us, "--handler", o.handler]
    if spec.startswith(("04-", "05-", "06-", "07-")) and threads:
        flags += ["--threads", threads]
    # Held idle connections must outlive the measurement; the default idle timeout is 5 s.
    if o.mode in ("connections", "idle"):
        flags += ["--idle-timeout", "600"]
    if o.mode == "files":
        flags += ["--root", session.files_dir]
    return flags + variant_flags(spec)


QUERY = os.path.join(".cmake", "api", "v1", "query", "client-psp-benchmark", "codemodel-v2")
REPLY = os.path.join(".cmake", "api", "v1", "reply")


def build_target(build_dir: str, name: str) -> str:
    """The CMake target that builds BUILD/NAME/run_server: server_NN for the seven chapters; for another folder (an
    optional build, e.g. 07-asio-uring), the target whose artifact that file is, as CMake's file API says (any
    generator). "" when there is none (a binary put there by hand, or a folder CMake does not configure)."""
    if name in ALL_SERVERS:
        return f"server_{name[:2]}"
    return cmake_artifacts(build_dir).get(f"{name}/run_server", "")


def cmake_artifacts(build_dir: str) -> dict[str, str]:
    """Artifact path (relative to BUILD) -> its target's name, from the codemodel reply of CMake's file API. With no
    reply yet in a configured BUILD, asks for one (a query file) and lets CMake configure again to write it."""
    replies = reply_index(build_dir)
    if replies is None and os.path.isfile(os.path.join(build_dir, "CMakeCache.txt")):
        os.makedirs(os.path.dirname(os.path.join(build_dir, QUERY)), exist_ok=True)
        open(os.path.join(build_dir, QUERY), "a", encoding="ascii").close()
        subprocess.run(["cmake", build_dir], capture_output=True, check=False)
        replies = reply_index(build_dir)
    artifacts: dict[str, str] = {}
    try:
        codemodel = replies["reply"]["client-psp-benchmark"]["codemodel-v2"]["jsonFile"]
        with open(os.path.join(build_dir, REPLY, codemodel), encoding="utf-8") as file:
            configurations = json.load(file)["configurations"]
        for target in configurations[0]["targets"] if configurations else []:
            with open(os.path.join(build_dir, REPLY, target["jsonFile"]), encoding="utf-8") as file:
                details = json.load(file)
            for artifact in details.get("artifacts", []):
                artifacts[os.path.normpath(artifact["path"])] = details["name"]
    except (TypeError, KeyError, IndexError, OSError, ValueError):
        return artifacts
    return artifacts


def reply_index(build_dir: str) -> dict | None:
    """The newest index-*.json of the file API's reply folder (None when there is none)."""
    try:
        indexes = sorted(name for name in os.listdir(os.path.join(build_dir, REPLY))
                         if name.startswith("index-") and name.endswith(".json"))
        if not indexes:
            return None
        with open(os.path.join(build_dir, REPLY, indexes[-1]), encoding="utf-8") as file:
            return json.load(file)
    except (OSError, ValueError):
        return None


def children_of(pid: int) -> list[int]:
    """The processes whose parent is PID (nginx's workers; our servers have none). Scans every process's parent,
    since /proc/PID/task/TID/children is not in every kernel."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = read(f"/proc/{entry}/stat")
        fields = stat.rsplit(") ", 1)[-1].split()
        if len(fields) > 1 and fields[1] == str(pid):
            found.append(int(entry))
    return found


def unprivileged_group() -> str:
    """Debian's and Ubuntu's group for nobody is nogroup; other systems call it nobody."""
    try:
        grp.getgrnam("nogroup")
        return "nogroup"
    except KeyError:
        return "nobody"


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def exit_status(returncode: int) -> int:
    """As bash's `wait` reports it: 128 + N for a process killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


class Server:
    """One running server of ours, or nginx: started by __enter__, stopped by __exit__ (or by stop())."""

    def __init__(self, session: Session, spec: str, stop_grace_s: float = STOP_GRACE_S, cpus: str = "",
                 flags: list[str] | None = None):
        """CPUS: a taskset list the server is confined to ("0-3"; --pin otherwise). FLAGS: its flags, in place of
        server_flags()' (for nginx: none are taken; --mode scaling sets its workers through the options)."""
        self.session, self.spec, self.stop_grace_s = session, spec, stop_grace_s
        self.cpus, self.flags = cpus, flags
        self.process: subprocess.Popen | None = None
        self.pids: list[int] = []
        self.port = 0
        self.command = ""   # how the log and the console name it
        self.problem = ""   # why it did not start
        self.exit: int | None = None  # its exit status, once stopped

    @property
    def started(self) -> bool:
        return self.process is not None

    @property
    def pid(self) -> int:
        return self.process.pid if self.process else 0

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def pin_prefix(self) -> list[str]:
        o = self.session.options
        if self.cpus:
            return ["taskset", "-c", self.cpus]
        if o.pin and is_single_threaded(self.spec, o.threads, o.nginx_workers, self.session.cpus):
            return ["taskset", "-c", "0"]
        return []

    def __enter__(self) -> "Server":
        try:
            if self.spec == "nginx":
                self.start_nginx()
            else:
                self.start_ours()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start_ours(self) -> None:
        """Starts the server with --port 0 and reads the port from its first line, `listening on
        http://HOST:PORT/`. On failure prints one sentence and sets problem."""
        s = self.session
        flags = server_flags(s, self.spec) if self.flags is None else self.flags
        name = "benchmark/floor" if self.spec == FLOOR else f"{folder(self.spec)}/run_server"
        self.command = f"{name} --port 0 {' '.join(flags)}"
        if self.cpus:
            self.command += f" (CPUs {self.cpus})"
        out, err = s.path("server.stdout"), s.path("server.stderr")
        with open(out, "wb") as stdout, open(err, "wb") as stderr:
            self.process = subprocess.Popen(
                [*s.launch_prefix, *self.pin_prefix(), binary(s.options.build_dir, self.spec), "--port", "0", *flags],
                stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            match = re.fullmatch(r"listening on http://127\.0\.0\.1:([0-9]+)/", first_line(out))
            if match:
                self.port = int(match.group(1))
                self.pids = [self.pid, *self.wait_for_workers(flags, deadline)]
                return
            if self.process.poll() is not None:
                status = exit_status(self.process.returncode)
                self.process = None
                why = first_line(err, 300)
                self.problem = "did not start"
                if s.options.mode == "files" and "'--root'" in why:
                    self.problem = "takes no --root yet: it cannot serve files"
                    s.error(f"error: {self.spec} cannot serve files: it does not take --root yet (it said: {why})")
                else:
                    s.error(f"error: {self.spec} did not start (exit status {status}): {why}")
                return
            time.sleep(0.05)
        s.error(f"error: {self.spec} printed no 'listening on http://127.0.0.1:PORT/' line within 10 s")
        self.problem = "did not start"
        self.stop()

    def wait_for_workers(self, flags: list[str], deadline: float) -> list[int]:
        """With --processes P the listening line comes before the workers are forked (common/workers.hpp): wait
        until all P are there, so that every figure summed over self.pids counts them."""
        expected = next((int(value) for name, value in zip(flags, flags[1:]) if name == "--processes"), 0)
        workers = children_of(self.pid)
        while len(workers) < expected and time.monotonic() < deadline and self.alive():
            time.sleep(0.05)
            workers = children_of(self.pid)
        return workers

    def nginx_limits(self) -> tuple[int, int]:
        """worker_connections and worker_rlimit_nofile: room for the most connections the run opens at once."""
        o = self.session.options
        counts = o.concurrencies
        if o.mode == "connections":
            counts = o.conn_counts
        if o.mode == "idle":
            counts = [max(o.idle_counts) + max(o.concurrencies)]
        max_conns = max([1024] + [value + 1024 for value in counts])
        # No worker can open more descriptors than the hard limit, and each allocates its whole connection table
        # at start: a million-entry table per worker would not fit in memory.
        files = max_conns * 2
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        if hard != resource.RLIM_INFINITY:
            files = min(files, hard)
            max_conns = min(max_conns, hard - 32)
        return max_conns, files

    def start_nginx(self) -> None:
        """The reference: nginx answering the same 1 KB from memory (`return 200`, as our servers answer), or in
        --mode files serving the same folder as the servers; from the configuration template, on 127.0.0.1, with
        as many workers as the servers have threads."""
        s, o = self.session, self.session.options
        directory = s.path("nginx")
        os.makedirs(os.path.join(directory, "temp"), exist_ok=True)
        # Like for like: our servers answer from memory, so nginx does too (reading a file per request cost it
        # about 14 µs against 8-9: issue 28). The same body, and headers of the same size class (Server, Date,
        # Content-Type, Content-Length, Connection).
        values = {"user_line": "", "workers": o.nginx_workers, "dir": directory, "listen_extra": "",
                  "files_lines": "",
                  "site": f'location / {{ return 200 "{"x" * BODY_BYTES}"; }}'}
        values["max_conns"], values["files"] = self.nginx_limits()
        # As root, nginx's workers drop to an unprivileged user (who must be able to read the files served).
        if os.geteuid() == 0:
            values["user_line"] = f"user nobody {unprivileged_group()};"
            os.chmod(s.tmp, 0o755)
            os.chmod(directory, 0o755)
        self.command = f"nginx -p {directory} -c nginx.conf (worker_processes {o.nginx_workers}, return 200"
        # Holding connections, each worker listens on a socket of its own (reuseport), and the kernel spreads the
        # connections evenly among them by hash. With one shared socket, the worker that wakes first takes most
        # of them, and once it has worker_connections it closes its idle keep-alive ones to make room. Scaling
        # across cores, it is also our event loops' shape: one SO_REUSEPORT listener per loop.
        if o.mode in ("connections", "scaling"):
            values["listen_extra"] = " reuseport"
            self.command += ", listen reuseport"
        self.command += ")"
        # --mode files: sent the way nginx is usually set up for static files (sendfile, and tcp_nopush: the
        # headers go out in the same packet as the start of the file).
        if o.mode == "files":
            values["site"] = f"root {s.files_dir};"
            values["files_lines"] = ("sendfile on;\n  tcp_nopush on;\n  types { text/html html; "
                                     "application/octet-stream bin; }")
            self.command = (f"nginx -p {directory} -c nginx.conf (worker_processes {o.nginx_workers}, root "
                            f"{s.files_dir}, sendfile on, tcp_nopush on)")
        with open(TEMPLATE, encoding="utf-8") as template_file:
            template = string.Template(template_file.read())
        config, error_log, output = (os.path.join(directory, name) for name in ("nginx.conf", "error.log",
                                                                                "nginx.out"))
        for _ in range(5):  # a few tries, in case another program takes the port first
            port = 20000 + random.randrange(12000)  # below the ephemeral range: the clients' ports never collide
            if listening(port):
                continue
            with open(config, "w", encoding="utf-8") as file:
                file.write(template.substitute(values, port=port))
            with open(output, "wb") as out:
                self.process = subprocess.Popen(
                    [*s.launch_prefix, *self.pin_prefix(), which("nginx"), "-p", directory, "-c", config,
                     "-e", error_log], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.alive() and not listening(port):
                time.sleep(0.05)
            if self.alive():
                self.port = port
                # The master binds the port before it forks the workers: wait for them too.
                while time.monotonic() < deadline:
                    self.pids = [self.pid, *children_of(self.pid)]
                    if len(self.pids) > int(o.nginx_workers):
                        return
                    time.sleep(0.05)
                self.stop()
                break
            self.process.wait()
            self.process = None
            if "Address already in use" not in read(error_log) + read(output):
                break
        said = next((line for line in (read(error_log) + read(output)).split("\n")
                     if re.search("emerg|alert|error", line)), "")
        s.error(f"error: nginx did not start: {said}")
        self.problem = "did not start"

    def stop(self) -> None:
        """SIGTERM, then SIGKILL to every process of the server after the grace. Sets exit."""
        if self.process is None:
            return
        try:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=self.stop_grace_s)
            except subprocess.TimeoutExpired:
                pass
        finally:
            # The server itself while it is not reaped (its PID cannot be reused yet), and its children (nginx's
            # workers) in any case: they outlive a master killed by SIGKILL.
            others = [pid for pid in self.pids if pid != self.pid]
            for pid in ([self.pid] if self.process.poll() is None else []) + others:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            self.exit = exit_status(self.process.wait())
            self.process = None
            self.pids = []
