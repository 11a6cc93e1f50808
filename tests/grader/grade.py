#!/usr/bin/env python3
"""Grades an HTTP server with the integration suite: run by tests/grade.sh (which installs and builds first).

    grade.py [--profile course|static] [--quick] [--chapter N] [--rubric FILE] [--report DIR] [--timeout S]
             [--check-timeout S] [--memory MIB] [--user NAME] [--perf] [--suite BINARY] [--list] -- COMMAND [ARGS...]
    grade.py [options] [--jobs N] --each 'submissions/*/run.sh' [-- COMMAND WITH {submission}]
    grade.py [options] --url http://127.0.0.1:PORT/ [--pid PID]

The checks are the GoogleTest suite's (build/integration_tests), run on one command: the suite reads it from
PSP_GRADE_COMMAND (tests/support/server_fixture.hpp). This script only chooses the checks from the rubric, runs
them with a time limit, prints a line per check, and scores and reports what came back, out of every point of the
profile. It is the subreaper of what the server starts, and stops what is left at the end. Standard library only.

Exit status: 0 when every check passed, 1 when one did not (or the server never started), 2 on bad usage or a
command that cannot be graded as given.
"""

import argparse
import configparser
import json
import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
UNIT_SEPARATOR = "\x1f"  # between the command's words in PSP_GRADE_COMMAND
START_SECONDS = 10  # as the suite's kStartTimeout


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse would print and exit 2 itself; main() says it our way, then exits 2
        raise UsageError(message)


def parse_args(argv):
    if "--" in argv:
        at = argv.index("--")
        argv, command = argv[:at], argv[at + 1:]
    else:
        command = []
    p = Parser(prog="tests/grade.sh",
                                usage="%(prog)s [options] -- COMMAND [ARGS...]",
                                description="Grade the HTTP server that COMMAND starts. COMMAND may hold {port} "
                                "(and {root}, the folder to serve); without {port} it is given --port 0 and must "
                                "print 'listening on http://127.0.0.1:PORT/' first, as this repository's servers do.")
    p.add_argument("--profile", choices=["course", "static"], default="course",
                   help="course: this repository's contract (default); static: a general static-file server")
    p.add_argument("--quick", action="store_true", help="a few checks per category, under 30 s")
    p.add_argument("--chapter", type=int, choices=range(0, 8), default=None, metavar="N",
                   help="the chapter (1-7) whose model the server follows (chapter 01 serves one client at a "
                   "time); default 0, any concurrent model")
    p.add_argument("--rubric", default=os.path.join(HERE, "rubric.ini"), help="categories and points (an .ini)")
    p.add_argument("--report", default="grade-report", metavar="DIR", help="where report.md and report.json go")
    p.add_argument("--timeout", type=float, default=600, metavar="S", help="stop the checks after S seconds (600)")
    p.add_argument("--check-timeout", type=float, default=CHECK_LIMIT, metavar="S",
                   help=f"stop a check after S seconds, and fail it ({CHECK_LIMIT}): the rest go on")
    p.add_argument("--memory", type=int, default=16384, metavar="MIB",
                   help="the address space each server process may use (RLIMIT_AS), in MiB: 16384; 0 for no cap")
    p.add_argument("--user", metavar="NAME", default=None,
                   help="when the grader runs as root: the user the server runs as (default nobody; 'root' keeps "
                   "root). The server also gets a private TMPDIR, removed afterwards. Ignored when not root")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="with --each: grade N submissions at once (1). Each check of a submission still runs one "
                   "at a time; keep N at most the number of cores (2 on a 2-CPU machine gives the same verdicts)")
    p.add_argument("--perf", action="store_true",
                   help="also measure requests per second next to nginx (ab -k, 3 rounds): reported, not scored")
    p.add_argument("--suite", default=os.path.join(REPO, "build", "integration_tests"), help=argparse.SUPPRESS)
    p.add_argument("--list", action="store_true", help="list the profile's checks and their categories, run none")
    p.add_argument("--url", metavar="URL",
                   help="grade a server that is already running at http://127.0.0.1:PORT/ (no command): the checks "
                   "that need to start, signal or restart it, or to give it a flag or a folder, are lost with that "
                   "reason")
    p.add_argument("--pid", type=int, metavar="PID",
                   help="with --url: the server's process, for the checks that read it (CPU, descriptors); without "
                   "it they do not apply")
    p.add_argument("--each", metavar="PATTERN",
                   help="grade every file that PATTERN matches (quote it: 'submissions/*/run.sh'), one after the "
                   "other, each with the other options: a report per submission in DIR/NAME/ and one line each in "
                   "DIR/grades.csv and DIR/grades.jsonl. A command after -- is run instead, with {submission} "
                   "replaced by the file's path")

    args = p.parse_args(argv)
    args.url_port = None
    if args.url is not None:
        if command or args.each:
            raise UsageError("--url grades a server that is already running: give it without a command or --each")
        m = re.fullmatch(r"http://(?:127\.0\.0\.1|localhost):(\d{1,5})/?", args.url)
        if not m or not 0 < int(m.group(1)) < 65536:
            raise UsageError(f"--url {args.url}: give http://127.0.0.1:PORT/ (the checks connect to the loopback "
                             "only)")
        args.url_port = int(m.group(1))
    if args.pid is not None:
        if args.url is None:
            raise UsageError("--pid goes with --url (the grader knows the PID of a server it starts)")
        if args.pid <= 0:
            raise UsageError(f"--pid {args.pid}: not a process ID")
    if not command and not args.list and not args.each and args.url is None:
        raise UsageError("no command: put the server's command after --")
    args.command = command
    # A folder named like a chapter (01-blocking-single) only suggests its rules: a grade must not change with the
    # name of the folder a submission was unpacked into.
    args.suggestion = ""
    if args.chapter is None:
        args.chapter = 0
        suggested = chapter_from_path(command[0] if command else "")
        if suggested:
            args.suggestion = (f"judged as any concurrent model; for chapter {suggested:02d}'s rules pass "
                               f"--chapter {suggested}")
    return args


def check_command(args):
    """Raises UsageError, before anything runs, for a command that cannot be graded as given."""
    if args.url is not None:
        return check_url(args)
    program = args.command[0]
    if os.sep in program:
        if not os.path.exists(program):
            raise UsageError(f"the command {program} does not exist")
        if os.path.isdir(program) or not os.access(program, os.X_OK):
            raise UsageError(f"the command {program} is not an executable file (chmod +x {program}, or put its "
                             "interpreter first: -- python3 server.py ...)")
    elif not shutil.which(program):
        raise UsageError(f"the command {program} is not found in PATH")
    words = " ".join(args.command)
    if args.profile == "static" and "{port}" in words and "{root}" not in words:
        raise UsageError("the static profile grades a file server: put {root} in the command where the folder to "
                         "serve goes, e.g. -- python3 server.py {port} {root}")


def run_as(args):
    """The words that run the server as --user: [] unless the grader is root and the user is not root. Raises
    UsageError for an unknown user, a missing setpriv, or a command the user cannot read."""
    if os.geteuid() != 0 or args.url is not None:
        return [], None
    name = args.user or "nobody"
    if name == "root":
        return [], None
    import pwd
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise UsageError(f"--user {name}: no such user")
    setpriv = shutil.which("setpriv")
    if not setpriv:
        raise UsageError(f"running the server as {name} needs setpriv (apt-get install util-linux), or give --user root")
    # One capability is kept, CAP_IPC_LOCK: without it io_uring's rings count against RLIMIT_MEMLOCK, summed over
    # every process of the user (8 MiB here, and root may not raise it in a container): a server with a ring per
    # thread, or two graded at once (--jobs), fails io_uring_queue_init with ENOMEM. RLIMIT_AS still caps each one.
    prefix = [setpriv, f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups",
              "--inh-caps=+ipc_lock", "--ambient-caps=+ipc_lock", "--"]
    if args.command:
        program = shutil.which(args.command[0]) or args.command[0]
        paths = [program] + [w for w in args.command[1:] if os.sep in w and os.path.exists(w)]
        out = subprocess.run(prefix + ["sh", "-c", 'for f; do [ -r "$f" ] || echo "$f"; done', "sh", *paths],
                             capture_output=True, text=True, timeout=30)
        bad = out.stdout.split("\n")[0].strip()
        if bad:
            raise UsageError(f"the server runs as the user {name} (--user), who cannot read {bad}: put the command "
                             f"where {name} can read it (each folder above it needs o+x), or give --user root to run "
                             "it as root")
    return prefix, entry


def check_url(args):
    """Raises UsageError when nothing accepts at --url, or --pid names no process."""
    if args.pid is not None:
        try:
            os.kill(args.pid, 0)
        except ProcessLookupError:
            raise UsageError(f"--pid {args.pid}: no such process")
        except PermissionError:
            pass  # another user's: it exists
    try:
        socket.create_connection(("127.0.0.1", args.url_port), timeout=2).close()
    except OSError as e:
        raise UsageError(f"--url {args.url}: nothing accepts connections there ({e.strerror or e}): start the "
                         "server first")


def chapter_from_path(path):
    """1 for build/01-blocking-single/run_server: a lab's server follows its chapter's model."""
    for part in reversed(os.path.normpath(path).split(os.sep)[:-1]):
        m = re.match(r"0([1-7])-", part)
        if m:
            return int(m.group(1))
    return 0


# ---- the rubric -------------------------------------------------------------------------------------------------

class Category:
    def __init__(self, name, points, checks, quick, quiet=()):
        self.name, self.points, self.checks, self.quick = name, points, checks, quick
        self.quiet = list(quiet)  # checks that a server passes by doing nothing (rubric.ini [passes without an answer])


QUIET = "passes without an answer"
CHOICES = {}  # rubric.ini [choices]: the grader's taste where the RFCs leave a server free, for the checks


def choice_env():
    """The rubric's [choices] for the suite: PSP_GRADE_CHOICE_NAME=value (tests/support/server_fixture.hpp)."""
    return {f"PSP_GRADE_CHOICE_{name.upper()}": value for name, value in CHOICES.items()}


def load_rubric(path, profile):
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # check names are case-sensitive
    if not parser.read(path):
        raise UsageError(f"cannot read the rubric {path}")
    categories = []
    for section in parser.sections():
        if "/" not in section:
            continue
        section_profile, name = section.split("/", 1)
        if section_profile != profile:
            continue
        s = parser[section]
        try:
            points = float(s.get("points", "0"))
        except ValueError:
            raise UsageError(f"{path} [{section}]: points must be a number")
        categories.append(Category(name, points, s.get("checks", "").split(), s.get("quick", "").split()))
    if not categories:
        raise UsageError(f"{path} has no category for the profile '{profile}'")
    rfc = list(parser["rfc"].items()) if parser.has_section("rfc") else []
    CHOICES.clear()
    if parser.has_section("choices"):
        CHOICES.update(parser["choices"].items())
    if parser.has_section(QUIET):
        for cat in categories:
            cat.quiet = parser[QUIET].get("checks", "").split()
    return categories, rfc


def glob(name, pattern):
    """* is any run of characters and ? any one; nothing else is special (a check name holds [brackets])."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, name) is not None


def matches(name, patterns):
    return any(glob(name, p) for p in patterns)


# ---- the suite's tests as checks ---------------------------------------------------------------------------------

def check_name(test):
    """AllServers/Refused.ErrorStatusThenClosed/graded_post -> Refused.ErrorStatusThenClosed[post]"""
    parts = test.split("/")
    suite_and_test = parts[1] if len(parts) >= 3 else parts[0]
    param = parts[-1]
    case = param[len("graded_"):] if param.startswith("graded_") else ""
    return suite_and_test + (f"[{case}]" if case else "")


def list_tests(suite, env):
    out = subprocess.run([suite, "--gtest_list_tests"], env=env, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"{suite} --gtest_list_tests failed: {out.stderr.strip()}")
    tests, prefix = [], None
    for line in out.stdout.splitlines():
        if not line.strip() or line.startswith("Running main()"):
            continue
        if not line.startswith(" "):
            prefix = line.strip()
        else:
            tests.append(prefix + line.split("#")[0].strip())
    return [t for t in tests if not t.startswith("GoogleTestVerification.")]


def choose(tests, categories, quick):
    """[(test, check, category)] in the suite's order: each test in the first category that names it."""
    chosen = []
    for test in tests:
        check = check_name(test)
        bare = check.split("[")[0]
        for cat in categories:
            if matches(bare, cat.checks) or matches(check, cat.checks):
                if not quick or matches(bare, cat.quick) or matches(check, cat.quick):
                    chosen.append((test, check, cat))
                break
    return chosen


# ---- starting the server once, to fail fast with one sentence ---------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cap_memory():
    """In the server's child process, before exec: the address space tests/grade.sh --memory allows (as the suite's
    ServerProcess does, from the same PSP_GRADE_MEMORY_MB)."""
    mb = int(os.environ.get("PSP_GRADE_MEMORY_MB", "0") or 0)
    if mb > 0:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (mb << 20, mb << 20))


def start(command, root, extra=()):
    """Starts the server as the suite does: (process, port, None) once it accepts a connection, else
    (None, None, one sentence saying why not)."""
    templated = any("{port}" in w for w in command)
    port = free_port()
    words = [w.replace("{port}", str(port)).replace("{root}", root) for w in command]
    if not templated:
        words += ["--port", "0", *extra]
    try:
        proc = subprocess.Popen(words, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, preexec_fn=cap_memory)
    except OSError as e:
        return None, None, f"the command does not start: {e.strerror} ({words[0]})."
    why = None
    deadline = time.monotonic() + START_SECONDS
    if not templated:
        line = read_line(proc.stdout, deadline)
        m = LISTENING.fullmatch(line.strip()) if line else None
        if m:
            port = int(m.group(1))
        else:
            try:
                proc.wait(timeout=1)  # it may be exiting: then say so rather than "no line"
            except subprocess.TimeoutExpired:
                pass
            if proc.poll() is not None:
                why = (f"the server exited ({describe_status(proc.returncode)}) before printing "
                       f"'listening on http://127.0.0.1:PORT/'{stderr_tail(proc)}.{port_hint(proc)}")
            else:
                why = (f"the server printed no 'listening on http://127.0.0.1:PORT/' line within {START_SECONDS} s"
                       + (f" (its first line: {line.strip()!r})" if line else "") + ".")
    while why is None:
        if proc.poll() is not None:
            why = f"the server exited ({describe_status(proc.returncode)}) before accepting a connection" \
                  f"{stderr_tail(proc)}."
            if proc.returncode == 0:
                why += (" A server that exits 0 at once has usually gone into the background (a daemon): run it in "
                        "the foreground (busybox httpd -f, nginx -g 'daemon off;'), so the grader can stop it.")
        elif time.monotonic() > deadline:
            why = f"nothing accepted connections on 127.0.0.1:{port} within {START_SECONDS} s."
        else:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            except OSError:
                time.sleep(0.05)
                continue
            # A daemon's child may take the first connection while the process we started is exiting 0. Any other
            # end after accepting (a crash on a connection closed before a byte, say) is for the checks to report.
            try:
                proc.wait(timeout=0.3)
            except subprocess.TimeoutExpired:
                return proc, port, None
            if proc.returncode != 0:
                return proc, port, None
            why = ("the server exited 0 before accepting a connection itself: it went into the background (a "
                   "daemon): run it in the foreground (busybox httpd -f, nginx -g 'daemon off;'), so the grader "
                   "can stop it.")
    stop(proc)
    return None, None, why


LISTENING = re.compile(r"listening on http://(?:127\.0\.0\.1|localhost):(\d+)/")


def port_hint(proc):
    """A hint for a server that refused the --port 0 it was given because its command has no {port}."""
    if proc.returncode and "--port" in proc.stderr_text:
        return (" It does not take --port: put {port} in the command where the port goes "
                "(tests/grade.sh -- python3 server.py {port}), and the grader fills it in.")
    return ""


def trial_in_suite(suite, env, chosen, report_dir):
    """The first check run alone, which starts the server exactly as every check does, with the same folder as
    {root}: for a command that did not start with preflight()'s empty folder, since it may need what the real one
    holds (a subfolder, an index.html). None when it started, else why not."""
    json_path = os.path.join(report_dir, "trial.json")
    try:
        subprocess.run([suite, "--gtest_filter=" + chosen[0][0], "--gtest_output=json:" + json_path],
                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    except subprocess.TimeoutExpired:
        return None  # the checks will say what is wrong, each with its own time limit
    for detail in failure_details(json_path).values():
        message = detail.get("message", "")
        at = message.find("did not start (")
        if at >= 0:
            return "with the checks' folder as {root}, " + message[at:].split("\n")[0]
    return None


def preflight(command):
    """(None, behaviour) when the command starts a server that accepts a connection, else (one sentence saying why
    not, ""). behaviour is what probe() saw of one plain request."""
    root = tempfile.mkdtemp(prefix="psp-grade-root-")
    os.chmod(root, 0o755)
    try:
        proc, port, why = start(command, root)
        behaviour = ""
        if proc:
            behaviour = probe(port)
            stop(proc)
        return why, behaviour
    finally:
        shutil.rmtree(root, ignore_errors=True)


PROBE_REQUEST = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"


def probe(port, seconds=None):
    """What a server does with one plain request: "answers" (a byte came back, valid or not), "silent" (the
    connection stayed open and nothing came in `seconds`) or "closes" (closed or reset without a byte)."""
    seconds = PROBE_SECONDS if seconds is None else seconds
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
    except OSError:
        return "answers"  # cannot tell: the checks will say
    with s:
        try:
            s.sendall(PROBE_REQUEST)
            s.settimeout(seconds)
            return "answers" if s.recv(1) else "closes"
        except socket.timeout:
            return "silent"
        except OSError:
            return "closes"


def behaviour_note(behaviour):
    """The report's first words for a server that answered no request: one sentence, what was sent and seen."""
    request = "GET / HTTP/1.1 with Host and Connection: close"
    if behaviour == "silent":
        return (f"The server {SILENT}: the grader sent {request} and no byte came back in {PROBE_SECONDS} s, the "
                f"connection still open. So each check had a short limit of {SILENT_LIMIT} s. Make it answer a "
                "plain GET first: read the request head up to the empty line, then write a status line, headers "
                "and the body.")
    if behaviour == "closes":
        return (f"The server {CLOSES}: the grader sent {request} and the connection was closed (or reset) with no "
                "byte back. Make it answer a plain GET first: read the request head up to the empty line, then "
                "write a status line, headers and the body, before closing.")
    return ""


# ---- a performance check, next to nginx: reported, not scored ---------------------------------------------------

PERF_AB = ["ab", "-q", "-k", "-n", "20000", "-c", "10"]


def ab_rate(port):
    """Requests per second from one ab run, or None (with ab's complaint printed) when a request failed."""
    out = subprocess.run(PERF_AB + [f"http://127.0.0.1:{port}/"], capture_output=True, text=True, timeout=120)
    rate = re.search(r"Requests per second:\s+([\d.]+)", out.stdout)
    failed = re.search(r"Failed requests:\s+(\d+)", out.stdout)
    non_2xx = re.search(r"Non-2xx responses:\s+(\d+)", out.stdout)
    if out.returncode != 0 or not rate or (failed and int(failed.group(1))) or non_2xx:
        return None
    return float(rate.group(1))


def perf(command):
    """The server and nginx (tests/grader/nginx.sh), each serving a 1 KB body, under the same ab load, alternately,
    3 rounds: median requests per second of each and their ratio. A server of this course runs with --delay-us 0, so
    that the two do the same work."""
    missing = [t for t in ("ab", "nginx") if not shutil.which(t) and not os.path.exists(f"/usr/sbin/{t}")]
    if missing:
        return {"error": "needs ab and nginx: apt-get install apache2-utils nginx-light"}
    root = tempfile.mkdtemp(prefix="psp-grade-perf-")
    os.chmod(root, 0o755)
    with open(os.path.join(root, "index.html"), "w") as f:
        f.write("x" * 1024)
    rates = {"server": [], "nginx": []}
    try:
        for _ in range(3):
            for name, cmd, extra in (("server", command, ["--delay-us", "0"]),
                                     ("nginx", [os.path.join(HERE, "nginx.sh"), "{port}", "{root}"], [])):
                proc, port, why = start(cmd, root, extra)
                if not proc:
                    return {"error": f"{name}: {why}"}
                try:
                    rate = ab_rate(port)
                finally:
                    stop(proc)
                if rate is None:
                    return {"error": f"{name}: ab reported failed or non-2xx requests ({' '.join(PERF_AB)})"}
                rates[name].append(rate)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    server, nginx = sorted(rates["server"])[1], sorted(rates["nginx"])[1]
    return {"load": " ".join(PERF_AB), "rounds": 3, "server_rps": server, "nginx_rps": nginx,
            "ratio": round(server / nginx, 2), "all": rates}


def read_line(stream, deadline):
    with selectors.DefaultSelector() as sel:
        sel.register(stream, selectors.EVENT_READ)
        data = b""
        while b"\n" not in data and time.monotonic() < deadline:
            if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                break
            chunk = os.read(stream.fileno(), 4096)
            if not chunk:
                break
            data += chunk
        return data.decode(errors="replace").split("\n")[0] if data else ""


def stderr_tail(proc):
    """The last line the exited server wrote to stderr. Read without blocking for long: a child it left running
    (a daemon) may hold the pipe open."""
    data = b""
    if proc.poll() is not None:
        deadline = time.monotonic() + 0.5
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stderr, selectors.EVENT_READ)
            while len(data) < 4000 and sel.select(timeout=max(0.0, deadline - time.monotonic())):
                chunk = os.read(proc.stderr.fileno(), 4000)
                if not chunk:
                    break
                data += chunk
    err = data.decode(errors="replace").strip()
    proc.stderr_text = getattr(proc, "stderr_text", "") + err
    return f"; it said: {err.splitlines()[-1]}" if err else ""


def describe_status(code):
    return f"killed by {signal.Signals(-code).name}" if code < 0 else f"status {code}"


def stop(proc):
    """Stops a process we started and everything in its session, by PID: SIGTERM, then SIGKILL after 3 s."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=3)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of its session
    except ProcessLookupError:
        pass
    proc.wait()


# ---- running the checks ------------------------------------------------------------------------------------------

RESULT_LINE = re.compile(r"^\[\s+(OK|FAILED|SKIPPED)\s+\] (\S+)(?:, where GetParam\(\) = .*?)? \((\d+) ms\)$")
RUN_LINE = re.compile(r"^\[ RUN      \] (\S+)$")

CHECK_LIMIT = 120  # seconds one check may take (--check-timeout): the slowest healthy check takes about 25 s
PROBE_SECONDS = 5  # how long the probe's plain GET waits for a first byte
SILENT_LIMIT = 2   # seconds each check has once the server is known to answer nothing
SILENT_AT_ONCE = 12  # checks run at once against a server known to answer nothing (they wait, they do not work)
SILENT = "accepted connections but never answered a request"
CLOSES = "accepted connections but closed them without answering a request"


class Stopped(Exception):
    """SIGTERM or SIGINT while the checks run: what has finished is reported."""


def run_batch(suite, env, tests, json_path, deadline, limit, on_result):
    """Runs `tests` in one suite process, in the suite's order, each within `limit` seconds and all before
    `deadline`. Calls on_result(test, result, ms, reason, output) as each finishes. Returns (stopped, why): the
    test stopped at its limit (or None), and "limit", "deadline" or "" (the process ended by itself)."""
    cmd = [suite, "--gtest_filter=" + ":".join(tests), "--gtest_color=no", "--gtest_output=json:" + json_path]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    pending, output, current, since = "", [], None, time.monotonic()
    stopped, why = None, ""
    try:
        while True:
            now = time.monotonic()
            if now >= deadline:
                stopped, why = current, "deadline"
                break
            if current is not None and now - since >= limit:
                stopped, why = current, "limit"
                break
            wake = min(deadline - now, (since + limit - now) if current is not None else 1.0, 1.0)
            if not sel.select(timeout=max(0.01, wake)):
                continue
            chunk = os.read(proc.stdout.fileno(), 65536).decode(errors="replace")
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split("\n")
            for line in lines:
                m = RUN_LINE.match(line)
                if m:
                    current, since, output = m.group(1), time.monotonic(), []
                    continue
                output.append(line)
                m = RESULT_LINE.match(line)
                if m and m.group(2) == current:
                    on_result(current, {"OK": "passed", "FAILED": "failed", "SKIPPED": "skipped"}[m.group(1)],
                              int(m.group(3)), output)
                    current = None
    finally:
        sel.close()
        servers = descendants(proc.pid) if proc.poll() is None else []  # the servers of a check stopped midway
        stop(proc)
        for pid in servers:  # the check's, not left behind by the student's server: stopped here, never blamed
            for target in (-pid, pid):
                try:
                    os.kill(target, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        proc.stdout.close()
        remove_static_roots(proc.pid)
    if stopped is not None:
        on_result(stopped, "stopped", int((time.monotonic() - since) * 1000), output)
    elif current is not None:  # the suite itself ended during a check (it should not)
        on_result(current, "failed", int((time.monotonic() - since) * 1000),
                  output + [f"the test process ended during this check ({describe_status(proc.returncode)})"])
    return stopped, why


def run_checks(suite, env, chosen, report_dir, timeout, limit, silent=""):
    """Runs the chosen checks, printing a line per check as it finishes. Each check has `limit` seconds (a check
    past it is stopped, failed, and the rest go on in a new process); the whole run has `timeout`. A server found
    `silent` (it accepted and never answered) gives each check SILENT_LIMIT seconds instead, a few at once. Returns
    ({test: (result, ms, reason)}, {test: {"message": ...}} from the checks' own output, "timeout", "stopped" or
    "")."""
    by_test = {test: (check, cat) for test, check, cat in chosen}
    results, printed = {}, {}
    width = max(len(c.name) for _, _, c in chosen)
    deadline = time.monotonic() + timeout
    each_limit = SILENT_LIMIT if silent else limit

    def on_result(test, result, ms, output):
        if test not in by_test or test in results:
            return
        reason = skip_reason(output) if result == "skipped" else ""
        if result == "stopped":
            said = "\n".join(line for line in output if not line.startswith("[")).strip()
            because = (f"the server {silent}: stopped after the grader's short limit of {each_limit:g} s"
                       if silent else f"stopped by the grader after its time limit of {each_limit:g} s "
                       "(--check-timeout)")
            printed[test] = {"message": f"{because}; the check was waiting for the server."
                             + (f"\nIt had found so far:\n{said}" if said and "Failure" in said else "")}
            result = "failed"
        elif result == "failed":
            printed[test] = {"message": clean_output(output)}
        result = classify(result, reason)
        results[test] = (result, ms, reason)
        check, cat = by_test[test]
        mark = {"passed": "pass", "failed": "FAIL", "skipped": "skip", "lacking": "LACK"}[result]
        print(f"  {mark}  {cat.name:<{width}}  {check} ({ms} ms)", flush=True)

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.signal(sig, lambda *_: (_ for _ in ()).throw(Stopped()))
    end = ""
    try:
        if silent:
            end = run_apart(suite, env, [t for t, _, _ in chosen], report_dir, deadline, each_limit, on_result)
        else:
            run = 0
            while not end:
                left = [t for t, _, _ in chosen if t not in results]
                if not left:
                    break
                _, why = run_batch(suite, env, left, os.path.join(report_dir, f"gtest-{run}.json"), deadline,
                                   each_limit, on_result)
                run += 1
                if why == "deadline":
                    end = "timeout"
                elif not why and all(t in results for t in left):
                    break
                elif not why and not any(t in results for t in left):
                    break  # the process ran nothing of what was asked: do not loop
    except Stopped:
        end = "stopped"
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    details = {}
    for name in sorted(os.listdir(report_dir)):
        if re.fullmatch(r"gtest-\d+\.json", name):
            details.update(failure_details(os.path.join(report_dir, name)))
            os.remove(os.path.join(report_dir, name))
    for test, said in printed.items():  # a stopped check has no JSON; a finished one's JSON has more
        if results.get(test, ("",))[0] == "failed" and (test not in details or "message" not in details[test]):
            details.setdefault(test, {}).update(said)
    return results, details, end


def descendants(pid):
    """The processes below `pid` (its children, theirs...), from /proc: the servers a suite process started."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def remove_static_roots(pid):
    """The folders a suite process builds for {root} (tests/support/static_root.hpp: psp-static-PID-XXXXXX in /dev/shm
    or /tmp), left behind when the grader stopped it at a check's limit. Links in them are removed, not followed."""
    for base in ("/dev/shm", "/tmp"):
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for name in names:
            if name.startswith(f"psp-static-{pid}-"):
                shutil.rmtree(os.path.join(base, name), ignore_errors=True)


def run_apart(suite, env, tests, report_dir, deadline, limit, on_result):
    """Each test in its own suite process, SILENT_AT_ONCE at a time, each within `limit`: for a server that answers
    nothing, where a check only waits. Returns "timeout" when the deadline came first, else ""."""
    import concurrent.futures
    import threading
    lock = threading.Lock()

    def locked(*a):
        with lock:
            on_result(*a)

    def one(i, test):
        if time.monotonic() >= deadline:
            return "deadline"
        return run_batch(suite, env, [test], os.path.join(report_dir, f"gtest-{i}.json"), deadline, limit,
                         locked)[1]

    with concurrent.futures.ThreadPoolExecutor(SILENT_AT_ONCE) as pool:
        whys = list(pool.map(one, range(len(tests)), tests))
    return "timeout" if "deadline" in whys else ""


def clean_output(lines):
    """A failed check's message from its printed output (GoogleTest's "FILE:LINE: Failure" blocks)."""
    text = "\n".join(line for line in lines if not RESULT_LINE.match(line))
    blocks = re.split(r"^\S+\.(?:cpp|hpp):\d+: Failure\n", text, flags=re.M)[1:]
    return "\n".join(clean(b) for b in blocks).strip() or text.strip()


# The suite's skips that mean "the command lacks what this check needs" (server_fixture.hpp): its flags, {root},
# this repository's command line. Such a check is not passed, with that reason: a total never shrinks because a
# command left something out. Every other skip (the kernel has no io_uring, say) is "does not apply".
LACKING = ("a flag of this repository's servers", "put {root} in the command", "a {port} command does not have",
           "needs the grader to start the server")


def server_text(args):
    if args.url is None:
        return " ".join(args.command)
    return f"{args.url} (already running{f', PID {args.pid}' if args.pid else ', no --pid'})"


# What server_process.hpp throws for a check that a server graded with --url cannot take: it needs the grader to
# start the server (lost, as "lacking"), or its PID, which --pid did not give (does not apply: "skipped").
NEEDS_ITS_PROCESS = "needs the grader to start the server"
NEEDS_ITS_PID = "does not apply without --pid"


def attached_verdicts(results, details):
    """GoogleTest fails a check whose test threw; for a server graded with --url, the exception says why it could
    not be taken (ServerProcess::Attached): lacking, or skipped without a PID."""
    for test, (result, ms, reason) in list(results.items()):
        message = details.get(test, {}).get("message", "")
        m = re.search(r'C\+\+ exception with description "(.*)" thrown in', message, re.S)
        if result != "failed" or not m:
            continue
        if m.group(1).startswith(NEEDS_ITS_PROCESS):
            results[test] = ("lacking", ms, m.group(1))
        elif m.group(1).startswith(NEEDS_ITS_PID):
            results[test] = ("skipped", ms, m.group(1))


def classify(result, reason):
    return "lacking" if result == "skipped" and any(p in reason for p in LACKING) else result


def skip_reason(lines):
    """The message after GoogleTest's "FILE:LINE: Skipped" line, up to the result line."""
    for i, line in enumerate(lines):
        if line.endswith(": Skipped"):
            return "\n".join(lines[i + 1:-1]).strip()
    return ""


def failure_details(json_path):
    """{test: {"message": ..., "transcript": ...}} from GoogleTest's JSON report (absent when it was killed)."""
    details = {}
    try:
        with open(json_path) as f:
            report = json.load(f)
    except (OSError, ValueError):
        return details
    for suite in report.get("testsuites", []):
        for t in suite.get("testsuite", []):
            name = f"{suite['name']}.{t['name']}"
            entry = {"transcript": t.get("transcript", "")}
            messages = [clean(f["failure"]) for f in t.get("failures", [])]
            messages.sort(key=lambda m: "the server crashed (" not in m)  # the root cause first, then its effects
            if messages:
                entry["message"] = "\n".join(messages)
            if t.get("stderr"):
                entry["stderr"] = t["stderr"]
            details[name] = entry
    return details


def clean(message):
    """Drops GoogleTest's file:line prefix, which names the suite's source, not the student's, turns its "Google Test
    trace" (printed after the failure it explains) into a first line: "while: WHAT", and drops its assertion frame
    ("Value of: r / Actual: false / Expected: true"), keeping the check's own words."""
    message = re.sub(r"^\S+\.(?:cpp|hpp):\d+\n(?:Failed\n)?", "", message.strip())
    body, _, trace = message.partition("\nGoogle Test trace:\n")
    steps = [re.sub(r"^\S+\.(?:cpp|hpp):\d+: ", "", line) for line in trace.splitlines() if line.strip()]
    body = re.sub(r"\d+-byte object <[0-9A-F -]*>", "(a value the check names above)", body)  # GoogleTest's dump
    return "\n".join([f"while: {s}" for s in reversed(steps)] + [unframe(body.strip())])


def unframe(body):
    """GoogleTest's frame around an assertion's message, gone: "Value of: X / Actual: false (WHY) / Expected: true"
    becomes WHY; "Expected equality of these values: A Which is: 1, B Which is: 2" becomes "A is 1, expected 2";
    a bare "Value of: X / Actual: false" with no words of its own becomes "X is false"."""
    lines = body.splitlines()
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^Value of: (.*)$", line)
        if m and i + 1 < len(lines) and re.match(r"^\s*Actual: (true|false)", lines[i + 1]):
            # The assertion's own words may run over several lines, up to the ")" before "Expected: ...".
            end = next((k for k in range(i + 1, len(lines)) if re.match(r"^Expected: (true|false)$", lines[k])),
                       len(lines))
            actual = "\n".join(lines[i + 1:end]).strip()[len("Actual: "):]
            words = re.match(r"^(true|false) \((.*)\)$", actual, re.S)
            if not words:
                end, actual = i + 2, lines[i + 1].strip()[len("Actual: "):]
            i = end
            if i < len(lines) and re.match(r"^Expected: (true|false)$", lines[i]):
                i += 1
            rest = [ln for ln in lines[i:] if ln.strip()]
            if words:
                out.append(words.group(2))
            elif not rest:
                out.append(f"{m.group(1)} is {actual}, expected {'true' if actual == 'false' else 'false'}")
            continue
        if line.startswith("Expected equality of these values:"):
            j, names, values = i + 1, [], []
            while j < len(lines) and lines[j].startswith("  "):
                if lines[j].strip().startswith("Which is: "):
                    values[-1] = lines[j].strip()[len("Which is: "):]
                else:
                    names.append(lines[j].strip())
                    values.append(lines[j].strip())
                j += 1
            if len(names) == 2:
                out.append(f"{names[0]} is {values[0]}, expected {values[1]}")
                i = j
                continue
        out.append(line)
        i += 1
    return "\n".join(out)


def short(text, n):
    """At most n characters of one line, cut between words, never inside a parenthesis nor before a dangling "stderr:"
    that would show nothing."""
    text = text.split("; the last lines of its stderr")[0].split("; stderr:")[0].strip()
    if len(text) <= n:
        return text
    cut = text[:n].rsplit(" ", 1)[0]
    while cut.count("(") > cut.count(")"):
        cut = cut[:cut.rindex("(")].rstrip(" ;,:")
    return cut.rstrip(" ;,:") + " ..."


GTEST_NOISE = ("while:", "Value of:", "Actual:", "Expected:", "Which is:", "Expected equality", "Failed",
               "Expected:", "  ")


def cause_of(message):
    """The line of a failure that says what went wrong, without GoogleTest's "Value of: r / Actual: false" frame."""
    lines = [line for line in message.splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if line.lstrip().startswith("Actual: false ("):  # an assertion's own words, in GoogleTest's parentheses
            return line.split("(", 1)[1].rstrip(":)").strip()
        if not line.lstrip().startswith(GTEST_NOISE) and not line.startswith("  "):
            if line.rstrip().endswith(":") and i + 1 < len(lines) and lines[i + 1].startswith("  "):
                # "2 of 6 failed:" and its first item
                return f"{line.strip()} {lines[i + 1].strip()}"
            return line.strip()
    return lines[0].strip() if lines else ""


# How tests/support/client.hpp words the ways an exchange fails: a root cause starts there, whatever step came first.
CLIENT_WORDS = ("server closed the connection", "connection failed:", "timed out waiting", "malformed status line",
                "malformed header line", "response needs exactly one Content-Length", "bad Content-Length",
                "send: ", "connect: ")


# The check whose plain GET every other check of the profile relies on: when it fails, the report says so first.
PREREQUISITE = {"course": "Http.GetAndHeadHaveExactHeadersAndBody",
                "static": "StaticFiles.EachTypeWithItsContentTypeLengthAndLastModified"}
PLAIN_GET = {"course": "GET /", "static": "a plain GET of a file"}


def client_failure(message):
    """True when a failure says that no valid response came back (client.hpp's words: a close, a timeout, a
    malformed head), rather than a valid response with the wrong content."""
    cause = cause_of(message)
    return any(p in cause for p in CLIENT_WORDS) and "crashed (" not in message


def mark_dependents(chosen, results, details, profile):
    """One root cause, one failure: when the profile's plain GET got no valid response, every other check that failed
    the same way (no valid response) did not test what it is about. It becomes "not run", still lost (the total is
    fixed), its message pointing at the prerequisite. A check that failed otherwise (a leak, a crash, a wrong
    status) keeps its own failure. Returns the prerequisite's check name, or ""."""
    by_check = {check: test for test, check, _ in chosen}
    first = by_check.get(PREREQUISITE[profile])
    if not first or results.get(first, ("",))[0] != "failed":
        return ""
    if not client_failure(details.get(first, {}).get("message", "")):
        return ""
    prerequisite = PREREQUISITE[profile]
    for test, check, _ in chosen:
        result, ms, _ = results.get(test, ("", 0, ""))
        message = details.get(test, {}).get("message", "")
        if test != first and result == "failed" and client_failure(message):
            results[test] = ("not run", ms, f"not run: {PLAIN_GET[profile]} did not get a valid response (see "
                             f"{prerequisite}); here: {cause_of(message).split('; received')[0]}")
    return prerequisite


def void_quiet_passes(chosen, results, details):
    """A server that answered nothing valid in a category gets nothing there: a check that a server passes by doing
    nothing (it sits idle, it closes a dribbling client) counts only when another check of its category got a valid
    HTTP answer (it passed, or failed on what a valid response said: a wrong status, a leak). Where no such check of
    the category ran (skipped, lacking), the whole run decides. Otherwise the quiet pass becomes failed, saying why.
    Returns the checks changed."""
    changed = []

    def is_quiet(check, cat):
        return matches(check.split("[")[0], cat.quiet) or matches(check, cat.quiet)

    def outcome(t):
        return results.get(t, ("not run",))[0]

    def got_answer(t):
        if outcome(t) == "passed":
            return True
        message = details.get(t, {}).get("message", "")
        return outcome(t) == "failed" and not client_failure(message) and not any(
            words in message for words in (SILENT, "stopped by the grader"))

    loud = [(t, c) for t, check, c in chosen if not is_quiet(check, c) and outcome(t) in ("passed", "failed", "not run")]
    anywhere = any(got_answer(t) for t, _ in loud)
    for cat in {id(c): c for _, _, c in chosen}.values():
        quiet = [(t, check) for t, check, c in chosen if c is cat and is_quiet(check, cat)]
        mine = [t for t, c in loud if c is cat]
        answered = any(got_answer(t) for t in mine) if mine else anywhere
        if answered:
            continue
        for t, check in quiet:
            result, ms, _ = results.get(t, ("", 0, ""))
            if result == "passed":
                results[t] = ("failed", ms, "")
                details[t] = {"message": f"passed only by doing nothing, and counts nothing: no check of the "
                              f"category '{cat.name}' got a valid HTTP answer (a rubric choice: rubric.ini "
                              f"[{QUIET}])"}
                changed.append(check)
    return changed


def root_causes(checks):
    """[(cause, [checks])], the most checks first: failures grouped by their cause, numbers made alike, so that
    one defect seen by nine checks reads as one line."""
    groups = {}
    dependents = []
    for c in checks:
        if c["result"] not in ("failed", "lacking", "not run"):
            continue
        if DEPENDENT.match(c["message"]):
            dependents.append(c)  # counted with the failure of the check it names, below
            continue
        cause = cause_of(c["message"]) or "(no message)"
        cause = cause.replace(f" during {c['check']}", "").split("; the last lines of its stderr")[0]
        # "response 0: server closed the connection ...; received: 1024 bytes '...'" and "warm-up client 3: server
        # closed ..." are one cause: the client's words from where they start, without what came with them.
        at = min((cause.find(p) for p in CLIENT_WORDS if p in cause), default=0)
        cause = cause[at:].split("; received")[0]
        key = re.sub(r"\d+", "N", cause)
        groups.setdefault(key, (cause, []))[1].append(c["check"])
    for c in dependents:
        prerequisite = DEPENDENT.match(c["message"]).group(1)
        group = next((g for g in groups.values() if prerequisite in g[1]), None)
        if group:
            group[1].append(c["check"])
        else:
            groups.setdefault(c["message"], (c["message"].split("; here:")[0], []))[1].append(c["check"])
    return sorted(groups.values(), key=lambda g: -len(g[1]))


DEPENDENT = re.compile(r"not run: .*? did not get a valid response \(see (\S+)\)")


def some(names, shown=3):
    """The first few of a list, and how many more: 'A, B, C and 6 more'."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


# ---- score and reports ---------------------------------------------------------------------------------------------

def score(chosen, results, categories):
    """A row per category: points x passed / (passed + failed + lacking + not run). The total is out of every
    category's points, whatever happened: a check the command could not take ("lacking") is lost, and only a check
    that does not apply ("skipped") leaves its category's count. A category with nothing left to count scores 0."""
    rows = []
    for cat in categories:
        mine = [results.get(t, ("not run",))[0] for t, _, c in chosen if c is cat]
        passed, failed, not_run = mine.count("passed"), mine.count("failed"), mine.count("not run")
        lacking = mine.count("lacking")
        counted = passed + failed + lacking + not_run
        got = cat.points * passed / counted if counted else 0.0
        rows.append({"category": cat.name, "points": cat.points, "score": round(got, 1), "passed": passed,
                     "failed": failed, "lacking": lacking, "skipped": mine.count("skipped"), "not run": not_run})
    total = sum(r["score"] for r in rows)
    possible = sum(cat.points for cat in categories)
    return rows, round(total, 1), possible


def rfc_for(check, rfc):
    for pattern, section in rfc:
        if glob(check.split("[")[0], pattern):
            return section
    return ""


def write_reports(out_dir, args, chosen, results, details, rows, total, possible, rfc, note, performance,
                  headline=""):
    os.makedirs(out_dir, exist_ok=True)
    checks = []
    for test, check, cat in chosen:
        result, ms, skipped_because = results.get(test, ("not run", 0, ""))
        d = details.get(test, {})
        message = (skipped_because or d.get("message", "")) if result != "passed" else ""
        if result == "lacking" and message.startswith(NEEDS_ITS_PROCESS):
            message = "not passed (--url): " + message
        elif result == "lacking":
            message = "not passed: the command lacks what this check needs: " + message
        message = message.replace("during this check", f"during {check}")
        checks.append({"check": check, "category": cat.name, "result": result, "ms": ms, "message": message,
                       "stderr": d.get("stderr", "") if result == "failed" else "",
                       "transcript": d.get("transcript", "") if result == "failed" else "",
                       "rfc": rfc_for(check, rfc) if result == "failed" else ""})
    counts = {k: sum(1 for c in checks if c["result"] == k) for k in RESULTS}
    report = {"command": args.command, "url": args.url, "pid": args.pid, "profile": args.profile, "quick": args.quick,
              "chapter": args.chapter, "suggestion": args.suggestion, "score": total, "possible": possible, "note": note, "headline": headline, **counts,
              "first_cause": first_cause(note, checks), "categories": rows, "checks": checks,
              "performance": performance}
    with open(os.path.join(out_dir, "report.json"), "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")

    md = [f"# Grade: {total:g} / {possible:g}" + (f": {headline}" if headline else ""), ""]
    if args.suggestion:
        md += [f"**Note: {args.suggestion}.**", ""]
    md += [f"- {'Server' if args.url is not None else 'Command'}: `{server_text(args)}`",
          f"- Profile: {args.profile}{' (quick)' if args.quick else ''}; chapter: "
          f"{args.chapter if args.chapter else 'any concurrent model'}",
          f"- Checks: {count_text(counts)}", ""]
    if note:
        md += [f"**{note}**", ""]
    md += ["| category | score | points | passed | failed | lacking | skipped |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        md.append(f"| {r['category']} | {r['score']:g} | {r['points']:g} | {r['passed']} | {r['failed']} "
                  f"| {r['lacking']} | {r['skipped']} |")
    causes = root_causes(checks) if not note else []
    if causes:
        md += ["", "## Root causes", ""]
        first = next((c for c in checks if c["check"] == PREREQUISITE[args.profile] and c["result"] == "failed"), None)
        if first:
            md += [f"**Fix this first**: {first['check']} failed ({short(cause_of(first['message']), 200)}). Almost every "
                   "other check starts with a plain request like it, so many failures below may be this one.", ""]
        md += ["Failures grouped by what went wrong, the most checks first:", ""]
        md += [f"- {short(cause, 200)} ({len(names)} check{'s' if len(names) > 1 else ''}: {some(names)})"
               for cause, names in causes]
    if performance:
        md += ["", "## Performance (not scored)", "", perf_text(performance)]
    dependents = [c for c in checks if c["result"] == "not run" and DEPENDENT.match(c["message"])]
    failed = [c for c in checks if c["result"] in ("failed", "not run") and c not in dependents]
    # Checks that failed with the very same words and nothing else to show (a silent server's, each stopped at its
    # limit) are one section: the student reads the cause once.
    same = {}
    for c in failed:
        if c["message"].strip() and not c["transcript"] and not c["stderr"]:
            same.setdefault(c["message"].strip(), []).append(c)
    grouped = {id(c) for group in same.values() if len(group) > 1 for c in group}
    if failed:
        md += ["", "## What failed", ""]
        for message, group in same.items():
            if len(group) > 1:
                md += [f"### {len(group)} checks, each the same way", "", "```", message, "```", "",
                       "; ".join(f"{c['check']} ({c['category']})" for c in group), ""]
        for c in failed:
            if id(c) in grouped:
                continue
            md += [f"### {c['check']} ({c['category']})", ""]
            if c["rfc"]:
                md += [f"See {c['rfc']}.", ""]
            md += ["```", (c["message"] or "(not run: see the note above)").strip(), "```", ""]
            if c["transcript"]:
                md += ["The last exchanges:", "", "```", c["transcript"].strip(), "```", ""]
            if c["stderr"] and c["stderr"].strip() not in c["message"]:
                md += ["The last lines the server wrote to stderr:", "", "```", c["stderr"].strip(), "```", ""]
    if dependents:
        md += ["", f"## Not run: {dependents[0]['message'].split('; here:')[0][len('not run: '):]} (counted as "
               "lost)", "", "Each of these failed the same way, with no valid response to look at; they say nothing "
               "about what they check until that is fixed:", ""]
        md += [f"- {c['check']}: {short(c['message'].split('; here: ', 1)[-1], 200)}" for c in dependents]
    lacking = [c for c in checks if c["result"] == "lacking"]
    if lacking:
        md += ["", "## Not passed: the command lacks what the check needs (counted as lost)", ""]
        md += [f"- {c['check']}: {c['message'].split(': ', 2)[-1].strip()}" for c in lacking]
    skipped = [c for c in checks if c["result"] == "skipped"]
    if skipped:
        md += ["", "## Skipped (not scored)", ""]
        md += [f"- {c['check']}: {c['message'].strip() or 'does not apply'}" for c in skipped]
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write("\n".join(md).rstrip() + "\n")
    return counts


RESULTS = ("passed", "failed", "lacking", "skipped", "not run")


def count_text(counts):
    return ", ".join(f"{counts[k]} {k}" for k in RESULTS if counts[k] or k in ("passed", "failed"))


def first_cause(note, checks):
    """One line for a table of submissions: why the server did not start, else the first failure's first line."""
    if note:
        return note
    causes = root_causes(checks)
    if causes:
        cause, names = causes[0]
        return f"{short(cause, 200)} ({len(names)} check{'s' if len(names) > 1 else ''}: {some(names)})"
    return ""


def perf_text(p):
    if "error" in p:
        return f"Not measured: {p['error']}"
    return (f"{p['server_rps']:,.0f} requests/s, nginx {p['nginx_rps']:,.0f} on the same machine: "
            f"{p['ratio']:g} x nginx (`{p['load']}`, median of {p['rounds']} alternating rounds; nginx sends its 1 KB "
            f"from a file, tests/grader/nginx.sh. On a small machine ab itself is often the limit, so a ratio near 1 "
            f"says \"as fast as the client can ask\", and a run can differ from the next by a factor of 2)")


def submission_name(path):
    """submissions/alice/run.sh -> alice; submissions/bob.py -> bob.py: the folder that holds it, if not the
    pattern's own folder."""
    folder = os.path.basename(os.path.dirname(os.path.abspath(path)))
    return folder if os.path.basename(path) in ("run.sh", "run", "server", "start.sh") else os.path.basename(path)


def each_options(argv):
    """The options of this run, less --each and --report, for each submission's own run."""
    out, skip = [], False
    for i, word in enumerate(argv):
        if word == "--":
            break
        if skip:
            skip = False
            continue
        if word in ("--each", "--report", "--jobs"):
            skip = True
            continue
        if word.startswith(("--each=", "--report=", "--jobs=")):
            continue
        out.append(word)
    return out


def grade_each(args, argv):
    """Grades every submission that args.each matches, each by its own run of this script (its own report, its own
    process tree), --jobs at a time; writes a line to grades.csv and grades.jsonl in args.report as each finishes,
    and at the end grades.md, a table of the class in name order, also printed. Exit 0 when every submission got
    full marks, 1 otherwise, 2 when the pattern matches nothing."""
    import concurrent.futures
    import csv
    import glob as globbing
    import threading
    paths = sorted(globbing.glob(args.each))
    if not paths:
        print(f"tests/grade.sh: --each {args.each} matches no file", file=sys.stderr)
        return 2
    if args.jobs < 1:
        print("tests/grade.sh: --jobs takes a number of at least 1", file=sys.stderr)
        return 2
    os.makedirs(args.report, exist_ok=True)
    options = each_options(argv)
    fields = ["name", "score", "possible", "exit", "seconds", "first_cause", "path"]
    rows, lock = [], threading.Lock()
    started_all = time.monotonic()

    def one(path):
        name = submission_name(path)
        report = os.path.join(args.report, name)
        command = [w.replace("{submission}", path) for w in args.command] if args.command else [path]
        if os.path.exists(os.path.join(report, "report.json")):
            os.remove(os.path.join(report, "report.json"))  # an earlier run's, which a usage error would leave
        started = time.monotonic()
        out = subprocess.run([sys.executable, os.path.abspath(__file__), *options, "--report", report, "--",
                              *command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        seconds = round(time.monotonic() - started, 1)
        row = {"name": name, "score": None, "possible": None, "exit": out.returncode, "seconds": seconds,
               "first_cause": "", "path": path}
        said = out.stdout.strip().splitlines() or [""]
        try:
            with open(os.path.join(report, "report.json")) as f:
                r = json.load(f)
            row.update(score=r["score"], possible=r["possible"], first_cause=r.get("first_cause", ""))
        except (OSError, ValueError, KeyError):
            row["first_cause"] = said[0] if out.returncode == 2 else said[-1]  # a usage error: its first line
        with lock:
            writer.writerow(row)
            table.flush()
            lines.write(json.dumps(row) + "\n")
            lines.flush()
            rows.append(row)
            print(f"== {name}: {' '.join(command)}\n   {score_text(row)}  exit {row['exit']}  {seconds:g} s  "
                  f"{short(row['first_cause'], 120)}", flush=True)

    with open(os.path.join(args.report, "grades.csv"), "w", newline="") as table, \
            open(os.path.join(args.report, "grades.jsonl"), "w") as lines:
        writer = csv.DictWriter(table, fieldnames=fields)
        writer.writeheader()
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(one, paths))
    rows.sort(key=lambda r: r["name"])
    summary = class_table(rows, time.monotonic() - started_all, args.jobs)
    with open(os.path.join(args.report, "grades.md"), "w") as f:
        f.write("\n".join(summary) + "\n")
    print("\n" + "\n".join(summary))
    print(f"grades: {os.path.join(args.report, 'grades.md')}, grades.csv and grades.jsonl ({len(rows)} submissions)")
    return 0 if all(r["exit"] == 0 for r in rows) else 1


def score_text(row):
    return "-" if row["score"] is None else f"{row['score']:g} / {row['possible']:g}"


def class_table(rows, seconds, jobs):
    """The class at a glance, in name order: a Markdown table."""
    out = [f"# Grades: {len(rows)} submissions in {seconds:.0f} s (--jobs {jobs})", "",
           "| submission | score | exit | seconds | first cause |", "|---|---:|---:|---:|---|"]
    for r in rows:
        cause = short(r["first_cause"], 100).replace("|", "\\|")
        out.append(f"| {r['name']} | {score_text(r)} | {r['exit']} | {r['seconds']:g} | {cause} |")
    return out


def become_subreaper():
    """Orphans of the graded server (a daemon's child, a wrapper's) become this process's children rather than
    init's, so that sweep() can find and stop them. Linux only (prctl PR_SET_CHILD_SUBREAPER); False elsewhere."""
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def sweep():
    """Stops (SIGKILL) and reaps every process left as this process's child: what a graded server left behind
    (it went into the background, or started helpers that outlived it). Returns their descriptions."""
    left = []
    me = str(os.getpid())
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "PID (comm) ": state, ppid, ...
        if fields[1] != me:
            continue
        if fields[0] != "Z":
            left.append(f"{pid} ({cmdline or stat[stat.index('(') + 1:stat.rindex(')')]})")
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(int(pid), 0)
        except ChildProcessError:
            pass
    return left


def main(argv):
    try:
        args = parse_args(argv)
        categories, rfc = load_rubric(args.rubric, args.profile)
        if not args.list and not args.each:
            check_command(args)
    except UsageError as e:
        print(f"tests/grade.sh: {e}\nusage: tests/grade.sh [options] -- COMMAND [ARGS...] (--help for the options)",
              file=sys.stderr)
        return 2
    if args.each:
        return grade_each(args, argv)
    try:
        prefix, user = run_as(args) if not args.list else ([], None)
    except UsageError as e:
        print(f"tests/grade.sh: {e}", file=sys.stderr)
        return 2
    # A private temporary folder for the server (TMPDIR) and for the grader's own, removed at the end.
    private = tempfile.mkdtemp(prefix="psp-grade-tmp-")
    if user:
        os.chown(private, user.pw_uid, user.pw_gid)
    tempfile.tempdir = private
    os.environ["TMPDIR"] = private
    try:
        return grade(args, categories, rfc, prefix, user)
    finally:
        tempfile.tempdir = None
        shutil.rmtree(private, ignore_errors=True)


def grade(args, categories, rfc, prefix, user):
    """Grades args.command (run through `prefix`: setpriv to --user) or args.url; returns the exit status."""
    os.environ["PSP_GRADE_MEMORY_MB"] = str(args.memory)  # for the suite's servers and for start()'s
    served = prefix + args.command if args.command else []
    env = dict(os.environ, PSP_GRADE_COMMAND=UNIT_SEPARATOR.join(served or ["(none)"]),
               PSP_GRADE_CHAPTER=str(args.chapter), PSP_GRADE_PROFILE=args.profile, **choice_env())
    if args.url is not None:  # the suite attaches to the running server (server_fixture.hpp, launch_attached)
        env.update(PSP_GRADE_URL_PORT=str(args.url_port), PSP_GRADE_URL_PID=str(args.pid or 0))
    chosen = choose(list_tests(args.suite, env), categories, args.quick)
    if args.list:
        for _, check, cat in chosen:
            print(f"{cat.name}\t{check}")
        return 0
    if not chosen:
        print("tests/grade.sh: the rubric chooses no check for this profile", file=sys.stderr)
        return 2

    started = time.monotonic()
    become_subreaper()
    print(f"grading: {server_text(args)} ({args.profile}{', quick' if args.quick else ''}, "
          f"{len(chosen)} checks)", flush=True)
    if args.suggestion:
        print(f"note: {args.suggestion}", flush=True)
    os.makedirs(args.report, exist_ok=True)
    if user:
        print(f"the server runs as {user.pw_name} (--user), with TMPDIR={tempfile.gettempdir()}", flush=True)

    if args.url is None:
        why, behaviour = preflight(served)
    else:  # check_url() found the running server
        why, behaviour = None, probe(args.url_port)
    if why and any("{root}" in w for w in args.command) and "(a daemon)" not in why:
        why = trial_in_suite(args.suite, env, chosen, args.report)
    headline = ""
    if why:
        results, note, details = {}, f"The server did not start: {why}", {}
        headline = "the server did not start"
        print(note, flush=True)
    else:
        note = behaviour_note(behaviour)
        if note:
            headline = f"the server {SILENT if behaviour == 'silent' else CLOSES}"
            print(note, flush=True)
        results, details, end = run_checks(args.suite, env, chosen, args.report, args.timeout, args.check_timeout,
                                           silent=SILENT if behaviour == "silent" else "")
        if end == "timeout":
            note = f"{note} Stopped at the time limit of {args.timeout:g} s (--timeout); the checks not run count " \
                   "as failed.".strip()
        elif end == "stopped":
            note = f"{note} Stopped by a signal before the end; the checks not run count as failed.".strip()
        attached_verdicts(results, details)
        mark_dependents(chosen, results, details, args.profile)
        void_quiet_passes(chosen, results, details)
    performance = None
    if args.perf and not why and args.url is not None:
        performance = {"error": "--perf starts the server itself, next to nginx: give a command, not --url"}
    elif args.perf and not why:
        print("performance: ab next to nginx, 3 rounds...", flush=True)
        performance = perf(served)
    survivors = sweep()
    if survivors:
        more = f" and {len(survivors) - 3} more" if len(survivors) > 3 else ""
        line = (f"Left running by the server, and stopped now by the grader: {', '.join(survivors[:3])}{more}. A "
                "server must stay in the foreground, and stop what it started when it stops.")
        note = f"{note} {line}".strip()
    rows, total, possible = score(chosen, results, categories)
    counts = write_reports(args.report, args, chosen, results, details, rows, total, possible, rfc, note, performance,
                           headline)

    width = max(len(r["category"]) for r in rows)
    print(f"\n{'category':<{width}}  score")
    for r in rows:
        lost = ", ".join(f"{r[k]} {k}" for k in ("failed", "lacking", "not run") if r[k])
        print(f"{r['category']:<{width}}  {r['score']:g} / {r['points']:g}" + (f"  ({lost})" if lost else ""))
    print(f"{'total':<{width}}  {total:g} / {possible:g}   ({count_text(counts)}; "
          f"{time.monotonic() - started:.0f} s)")
    if performance:
        print("performance (not scored): " + perf_text(performance))
    print(f"report: {os.path.join(args.report, 'report.md')} and report.json")
    if note:
        print(note)
    for cause, names in ([] if note else root_causes(json.load(open(os.path.join(args.report, "report.json")))["checks"]))[:3]:
        print(f"cause: {short(cause, 160)} ({len(names)} check{'s' if len(names) > 1 else ''})")
    if args.suggestion:
        print(f"note: {args.suggestion}")
    lost = counts["failed"] + counts["lacking"] + counts["not run"]
    return 0 if lost == 0 and not why else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
