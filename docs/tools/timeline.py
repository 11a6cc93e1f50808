#!/usr/bin/env python3
"""Timelines of a server at work, drawn from a real strace of three concurrent requests.

  python3 docs/tools/timeline.py record SERVER_DIR OUT.strace [-- SERVER_ARGS...]
  python3 docs/tools/timeline.py render IN.strace OUT.svg [--check]

record (by hand, needs strace): starts build/SERVER_DIR/run_server --host 127.0.0.1 --port 0 under
`strace -f -ttt -T`, waits for its "listening on" line, opens three client connections at nearly the same instant
(one thread each; GET / with Connection: close), reads the three responses, stops the server with SIGTERM (by its
PID) and waits for it. Next to OUT.strace it writes OUT.json: the command line, the date, the kernel, the machine.

render: draws the trace as an SVG, one lane per thread, one box per system call from its start to its end, coloured
by kind, with the connection's descriptor under the calls that move its bytes. The x axis is in ms from the server's
first wake-up for the clients (the first call to return after the "listening on" line). The output depends only on
IN.strace and IN.json, so --check can regenerate it in memory and exit 1 when OUT.svg differs (CTest).

Standard library only.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

# The system calls worth seeing: the network, the waits (readiness, completions, sleeps, timers), the threads'
# hand-offs, and the console write that says "listening on" (the origin of the time axis).
TRACED = ("execve,openat,accept,accept4,recvfrom,recvmsg,read,sendto,sendmsg,write,writev,sendfile,"
          "poll,ppoll,select,pselect6,epoll_wait,epoll_pwait,epoll_pwait2,epoll_ctl,io_uring_enter,"
          "nanosleep,clock_nanosleep,timerfd_settime,clone,clone3,futex,shutdown,close,setsockopt")

# Flags per model: one loop thread for the event loops (the lesson is one loop serving all three), and a pool of 4
# for 04 (its default 16 would be 16 lanes, 13 of them idle). 01 and 02 take no --threads. The handler: default.
DEFAULT_ARGS = {
    "04-threadpool": ["--threads", "4"],
    "05-epoll": ["--threads", "1"],
    "06-io_uring": ["--threads", "1"],
    "07-asio": ["--threads", "1"],
}


# ----------------------------------------------------------------------------------------------------------- record

def _machine():
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu_model": model or platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "arch": platform.machine()}


def _strace_version():
    try:
        out = subprocess.run(["strace", "-V"], capture_output=True, text=True, check=False).stdout
        return out.splitlines()[0].strip() if out else ""
    except OSError:
        return ""


def _children(pid):
    """The PIDs whose parent is `pid` (read from /proc, no name involved)."""
    kids = []
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid), encoding="ascii") as f:
            kids = [int(x) for x in f.read().split()]
    except OSError:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % entry, encoding="ascii", errors="replace") as f:
                    stat = f.read()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    kids.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return kids


def _client(port, barrier, result, i):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # made before the barrier: only connect() races
    s.settimeout(10)
    barrier.wait()
    t0 = time.time()
    s.connect(("127.0.0.1", port))
    t1 = time.time()
    s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    t2 = time.time()
    s.close()
    result[i] = {"connect_start": round(t0, 6), "connected": round(t1, 6), "response_end": round(t2, 6),
                 "status": data.split(b"\r\n", 1)[0].decode("ascii", "replace"), "bytes": len(data)}


def record(server_dir, out, server_args):
    binary = os.path.join(ROOT, "build", server_dir, "run_server")
    if not os.access(binary, os.X_OK):
        sys.exit("timeline.py: %s is not built" % binary)
    args = server_args if server_args else DEFAULT_ARGS.get(server_dir, [])
    server = [os.path.relpath(binary, ROOT), "--host", "127.0.0.1", "--port", "0"] + args
    shown_out = os.path.relpath(out, ROOT) if out.startswith(ROOT + os.sep) else out
    cmd = ["strace", "-f", "-ttt", "-T", "-s", "40", "-e", "trace=" + TRACED, "-o", shown_out] + server
    print(" ".join(shlex.quote(c) for c in cmd))
    strace = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    found = threading.Event()
    port = []

    def read_output():
        for line in strace.stdout:
            lines.append(line)
            m = re.search(r"listening on http://[^ ]*:(\d+)/", line)
            if m and not port:
                port.append(int(m.group(1)))
                found.set()

    reader = threading.Thread(target=read_output, daemon=True)
    reader.start()
    server_pid = None
    try:
        deadline = time.monotonic() + 20
        while not found.wait(0.1) and strace.poll() is None and time.monotonic() < deadline:
            pass
        if not found.is_set():
            reader.join(1)
            sys.exit("timeline.py: the server printed no 'listening on' line; its output:\n" + "".join(lines))
        kids = _children(strace.pid)
        if len(kids) != 1:
            sys.exit("timeline.py: expected one child of strace (PID %d), found %r" % (strace.pid, kids))
        server_pid = kids[0]
        time.sleep(0.2)  # let the server settle in its wait, so the three requests are all the trace shows
        barrier = threading.Barrier(3)
        result = [None] * 3
        clients = [threading.Thread(target=_client, args=(port[0], barrier, result, i)) for i in range(3)]
        for c in clients:
            c.start()
        for c in clients:
            c.join(20)
        time.sleep(0.05)
    finally:
        if server_pid is None:  # it failed before the clients: stop what was started, still by PID
            kids = _children(strace.pid)
            server_pid = kids[0] if len(kids) == 1 else None
        if server_pid is not None:
            os.kill(server_pid, signal.SIGTERM)
        elif strace.poll() is None:
            strace.terminate()
        try:
            strace.wait(10)
        except subprocess.TimeoutExpired:
            if server_pid is not None:
                os.kill(server_pid, signal.SIGKILL)
            else:
                strace.kill()
            strace.wait(10)
        reader.join(5)
    side = {
        "command": " ".join(shlex.quote(c) for c in cmd),
        "server": server_dir,
        "recorded_with": "python3 docs/tools/timeline.py record %s %s%s" % (
            server_dir, shown_out, "".join(" " + shlex.quote(a) for a in ["--"] + server_args) if server_args else ""),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "kernel": platform.release(),
        "machine": _machine(),
        "strace": _strace_version(),
        "clients": result,
    }
    with open(os.path.splitext(out)[0] + ".json", "w", encoding="utf-8") as f:
        json.dump(side, f, indent=2, sort_keys=True)
        f.write("\n")
    ok = all(r and r["status"].startswith("HTTP/1.1 200") for r in result)
    print("%s: %d lines of trace in %s; responses: %s" % (
        server_dir, sum(1 for _ in open(out, encoding="utf-8", errors="replace")), out,
        ", ".join(r["status"] if r else "none" for r in result)))
    return 0 if ok else 1


# ------------------------------------------------------------------------------------------------------------ parse

class Call:
    """One system call of one thread: start and end in seconds (strace -ttt, -T)."""
    __slots__ = ("tid", "name", "args", "start", "end", "ret", "tail", "unfinished")

    def __init__(self, tid, name, args, start):
        self.tid, self.name, self.args, self.start = tid, name, args, start
        self.end, self.ret, self.tail, self.unfinished = start, "", "", False

    def fd(self):
        m = re.match(r"\s*(-?\d+)", self.args)
        return int(m.group(1)) if m else None

    def __repr__(self):
        return "Call(%d %s %.6f-%.6f = %s)" % (self.tid, self.name, self.start, self.end, self.ret)


class Trace:
    def __init__(self):
        self.calls = []      # every finished (or never finished) call, in the order their first line appeared
        self.signals = []    # (tid, time, name)
        self.exits = []      # (tid, time, text)
        self.first_tid = None
        self.binary = ""


LINE = re.compile(r"^(\d+)\s+(\d+\.\d+)\s+(.*)$")
RESUMED = re.compile(r"^<\.\.\. (\w+) resumed>(.*)$")
CALL = re.compile(r"^(\w+)\((.*)$")


def _finish(call, text, ts):
    """Parses the `ARGS) = RET ... <DUR>` end of a line into `call`."""
    cut = text.rfind(") = ")
    if cut < 0:
        call.args += text
        call.ret, call.end = "?", ts
        return
    call.args += text[:cut]
    rest = text[cut + 4:]
    m = re.search(r"\s*<([\d.]+|unavailable)>\s*$", rest)
    dur = None
    if m:
        if m.group(1) != "unavailable":
            dur = float(m.group(1))
        rest = rest[:m.start()]
    parts = rest.split(None, 1)
    call.ret = parts[0] if parts else "?"
    call.tail = parts[1] if len(parts) > 1 else ""
    call.end = call.start + dur if dur is not None else max(ts, call.start)


def parse(text):
    """Parses `strace -f -ttt -T` output. Pairs each `<unfinished ...>` with its `<... NAME resumed>`."""
    trace = Trace()
    pending = {}  # tid -> the Call waiting for its resumed line
    for raw in text.splitlines():
        m = LINE.match(raw.strip())
        if not m:
            continue
        tid, ts, rest = int(m.group(1)), float(m.group(2)), m.group(3)
        if trace.first_tid is None:
            trace.first_tid = tid
        if rest.startswith("---"):
            sig = re.match(r"--- (\w+)", rest)
            trace.signals.append((tid, ts, sig.group(1) if sig else "?"))
            continue
        if rest.startswith("+++"):
            trace.exits.append((tid, ts, rest.strip("+ ")))
            if tid in pending:  # died inside a call
                call = pending.pop(tid)
                call.end, call.ret = ts, "?"
            continue
        r = RESUMED.match(rest)
        if r:
            call = pending.pop(tid, None)
            if call is None or call.name != r.group(1):  # a resumed line without its start: keep what it says
                call = Call(tid, r.group(1), "", ts)
                trace.calls.append(call)
            call.unfinished = False
            _finish(call, r.group(2), ts)
            continue
        c = CALL.match(rest)
        if not c:
            continue
        call = Call(tid, c.group(1), "", ts)
        trace.calls.append(call)
        body = c.group(2)
        if body.endswith("<unfinished ...>"):
            call.args = body[:-len("<unfinished ...>")].rstrip()
            call.unfinished = True
            pending[tid] = call
        else:
            _finish(call, body, ts)
        if call.name == "execve" and not trace.binary:
            b = re.match(r'"([^"]*)"', call.args)
            trace.binary = b.group(1) if b else ""
    last = max([c.end for c in trace.calls] + [t for _, t, _ in trace.signals + trace.exits] + [0.0])
    for call in pending.values():  # never resumed (the trace ended first): it lasts to the end of the trace
        call.end = max(last, call.start)
    return trace


def _ret_int(call):
    try:
        return int(call.ret)
    except ValueError:
        return None


def lanes(trace):
    """[(tid, label)] in order: the process's first thread, then the threads in the order they were created."""
    order = [trace.first_tid] if trace.first_tid is not None else []
    for call in trace.calls:
        if call.name in ("clone", "clone3"):
            child = _ret_int(call)
            if child and child > 0 and child not in order:
                order.append(child)
    for call in trace.calls:  # threads whose clone was not traced
        if call.tid not in order:
            order.append(call.tid)
    model = os.path.basename(os.path.dirname(trace.binary))
    noun = {"04-threadpool": "worker", "02-thread-per-conn": "conn thread"}.get(model, "thread")
    out = []
    for i, tid in enumerate(order):
        out.append((tid, "main thread" if i == 0 else "%s %d" % (noun, i)))
    return out


# ------------------------------------------------------------------------------------------------------------ kinds

WAITS = {"poll", "ppoll", "select", "pselect6", "epoll_wait", "epoll_pwait", "epoll_pwait2", "io_uring_enter"}
KINDS = [  # kind, colour, legend
    ("wait", "#4e79a7", "wait for readiness / completions (poll, epoll_pwait2, io_uring_enter)"),
    ("timer", "#b07aa1", "the handler's 1 ms: nanosleep, or a wait that ended on its timer"),
    ("accept", "#59a14f", "accept (new connection: its fd)"),
    ("recv", "#76b7b2", "recv / read"),
    ("send", "#f28e2b", "send / write"),
    ("close", "#e15759", "shutdown / close"),
    ("sync", "#bab0ac", "futex (a thread waits for / wakes another), clone"),
    ("other", "#d4d4d4", "setsockopt, epoll_ctl"),
]
COLOUR = {k: c for k, c, _ in KINDS}


def kind(call):
    n = call.name
    if n in ("nanosleep", "clock_nanosleep", "timerfd_settime"):
        return "timer"
    if n in WAITS:
        # A readiness wait with a finite timeout that returned 0: it ended on the earliest timer, the handler's.
        # (io_uring_enter returns the SQEs it submitted, not the CQEs that woke it; but a wait whose timeout passed
        # with no completion fails with ETIME, and 06's timeout is the earliest deadline of its heap, the handler's.)
        if n != "io_uring_enter" and call.ret == "0" and ("Timeout" in call.tail or "tv_sec=" in call.args):
            return "timer"
        if n == "io_uring_enter" and "ETIME" in call.tail:
            return "timer"
        return "wait"
    if n in ("accept", "accept4"):
        return "accept"
    if n in ("recvfrom", "recvmsg", "read"):
        return "recv"
    if n in ("sendto", "sendmsg", "write", "writev", "sendfile"):
        return "send"
    if n in ("close", "shutdown"):
        return "close"
    if n in ("futex", "clone", "clone3"):
        return "sync"
    return "other"


def _ints(text):
    return [int(v) for v in re.findall(r"-?\d+", text)]


def connections(trace):
    """Follows the client connections through the trace. Returns ({id(call): (n, fd)}, {id(call): path}): for each
    call on a connection's fd, the connection's number (1, 2, 3... in the order they began) and fd; for each call on
    a file's fd, the file. A connection begins when accept returns its fd, or (io_uring accepts without a system call)
    at the first shutdown/recvfrom/sendto on an fd not known otherwise; it ends at its close, after which the same fd
    number may serve the next connection."""
    events = []  # (time, order, what, call): the fd table changes at an accept's or an openat's return
    for seq, call in enumerate(trace.calls):
        events.append((call.start, 1, seq, call))
        if call.name in ("accept", "accept4", "openat") and (_ret_int(call) or -1) >= 0:
            events.append((call.end, 0, seq, call))
    events.sort(key=lambda e: (e[0], e[2], e[1]))
    conns, files = {}, {}
    open_conn, open_file = {}, {}
    count = 0
    for _, order, _, call in events:
        if order == 0:  # the return of an accept or openat
            fd = _ret_int(call)
            if call.name == "openat":
                path = re.search(r'"([^"]*)"', call.args)
                open_file[fd] = os.path.basename(path.group(1)) if path else "file"
            else:
                count += 1
                open_conn[fd] = count
                conns[id(call)] = (count, fd)
            continue
        fd = call.fd()
        if call.name in ("accept", "accept4", "openat", "execve", "epoll_ctl") or fd is None:
            continue
        if fd not in open_conn and fd not in open_file and fd > 2 and call.name in ("shutdown", "recvfrom", "sendto"):
            count += 1
            open_conn[fd] = count
        if fd in open_conn:
            conns[id(call)] = (open_conn[fd], fd)
        elif fd in open_file:
            files[id(call)] = open_file[fd]
        if call.name == "close":
            open_conn.pop(fd, None)
            open_file.pop(fd, None)
    return conns, files


def label(call, conn, path):
    """A short text for the box. conn: (number, fd) of the connection it serves, or None; path: the file's name."""
    k, ret = kind(call), _ret_int(call)
    if k == "accept":
        return "accept \u2192 %d" % ret if ret is not None and ret >= 0 else "accept: " + (call.tail.split(" ")[0] or
                                                                                      call.ret)
    if conn and k in ("recv", "send", "close"):
        verb = {"recvfrom": "recv", "recvmsg": "recv", "sendto": "send", "sendmsg": "send"}.get(call.name, call.name)
        return "%s %d%s" % (verb, conn[1], ": EOF" if k == "recv" and ret == 0 else "")
    if path and k == "recv":
        return "read " + path
    if call.name == "io_uring_enter":
        n = _ints(call.args)
        return "enter: submit %d" % n[1] if len(n) >= 2 and call.ret != "?" else "io_uring_enter"
    if call.name in WAITS:
        return "%s: %s" % (call.name, "timer" if k == "timer" else "waiting" if call.ret == "?" else
                           "%s ready" % call.ret)
    if k == "timer":
        m = re.search(r"tv_sec=(\d+), tv_nsec=(\d+)", call.args)
        return "sleep %g ms" % (int(m.group(1)) * 1e3 + int(m.group(2)) / 1e6) if m else call.name
    if call.name == "futex":
        op = re.search(r"FUTEX_(WAKE|WAIT)", call.args)
        return "futex " + op.group(1).lower() if op else "futex"
    if call.name in ("clone", "clone3"):
        return "clone"
    return ""


# ----------------------------------------------------------------------------------------------------------- render

WIDTH = 900
LEFT = 112            # the lane labels
RIGHT = 14
BOX_H = 16
STRIP_H = 4           # the connection's colour, under a box
LABEL_H = 11          # one row of box labels
MAX_ROWS = 8
LANE_GAP = 8
CHAR_W = 5.6          # a generous average width of a character at font-size 9 (DejaVu Sans), for the layout
CONN_COLOURS = ["#1a1a1a", "#e8b400", "#c2188b", "#2ca02c", "#8c564b", "#17becf"]
FONT = 'font-family="DejaVu Sans, Verdana, Arial, sans-serif"'


def _esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def _f(x):
    return "%.1f" % x


def window(trace, clients=()):
    """(t0, start, end) in seconds. t0, the origin of the axis, is the server's first wake-up for the clients: the
    return of the first call, after the "listening on" line, that had been blocked for 50 ms or more (the recorder
    waits 200 ms before the clients connect); failing that, the first accept's return. The window runs from a little
    before t0 (or the first client's connect) to a little after the last call that ended before the stop signal
    (and not because of it)."""
    listen = next((c for c in trace.calls if c.name == "write" and "listening on" in c.args), None)
    after = listen.end if listen else min(c.start for c in trace.calls)
    woke = [c.end for c in trace.calls if c.start >= after and c.end - c.start >= 0.05]
    accepts = [c.end for c in trace.calls if kind(c) == "accept" and (_ret_int(c) or -1) >= 0]
    t0 = min(woke) if woke else min(accepts) if accepts else after
    stops = [t for _, t, name in trace.signals if t > t0 and name in ("SIGTERM", "SIGINT")]
    stop = min(stops) if stops else float("inf")
    ends = [c.end for c in trace.calls if t0 <= c.end < stop and c.ret != "?" and "EINTR" not in c.tail]
    ends += [c["response_end"] for c in clients]
    last = max(ends) if ends else t0 + 0.001
    first = min([t0] + [c["connect_start"] for c in clients])
    margin = 0.03 * (last - first)
    return t0, first - margin, last + margin


def render(trace, sidecar=None):
    clients = sorted((c for c in (sidecar or {}).get("clients", []) or [] if c), key=lambda c: c["connect_start"])
    t0, w_start, w_end = window(trace, clients)
    span = w_end - w_start
    plot_w = WIDTH - LEFT - RIGHT

    def x(t):
        return LEFT + (min(max(t, w_start), w_end) - w_start) / span * plot_w

    conns, files = connections(trace)
    shown = [c for c in trace.calls if c.end >= w_start and c.start <= w_end and c.name != "execve"]
    model = os.path.basename(os.path.dirname(trace.binary)) or "server"
    lane_list = [(tid, name) for tid, name in lanes(trace) if any(c.tid == tid for c in shown)]

    span_ms = span * 1000
    step = next((s for s in (0.1, 0.2, 0.25, 0.5, 1, 2, 2.5, 5, 10, 20, 50, 100, 200, 500) if span_ms / s <= 12),
                1000)
    top = 92
    y = top
    out = []

    if clients:  # the clients' side, as the recorder timed it
        out.append('<text x="6" y="%d" font-size="12" font-weight="bold" fill="#222">clients</text>' % (y + 11))
        out.append('<text x="6" y="%d" font-size="8" fill="#777">connect to last byte</text>' % (y + 23))
        for i, c in enumerate(clients):
            cy = y + i * 11
            x0, x1 = x(c["connect_start"]), x(c["response_end"])
            out.append('<rect x="%s" y="%d" width="%s" height="10" fill="#ccd0d5"/>' % (_f(x0), cy, _f(x1 - x0)))
            out.append('<text x="%s" y="%d" font-size="8" text-anchor="end" fill="#222">%.2f ms</text>' % (
                _f(x1 - 3), cy + 8, (c["response_end"] - c["connect_start"]) * 1000))
        y += max(3, len(clients)) * 11 + LANE_GAP + 2

    lanes_top = y
    lane_rows = []
    for tid, name in lane_list:
        calls = sorted((c for c in shown if c.tid == tid), key=lambda c: (c.start, c.end))
        rows_end = []   # where each label row is taken up to
        placed = []     # (call, text, None inside the box | (row, x of the text, x of the leader))
        for c in calls:
            text = label(c, conns.get(id(c)), files.get(id(c)))
            if not text:
                continue
            x0, x1 = x(c.start), x(c.end)
            width = len(text) * CHAR_W + 4
            if x1 - x0 >= width + 4:
                placed.append((c, text, None))
                continue
            cx = (x0 + x1) / 2
            right = min(max(cx - 3, LEFT), WIDTH - RIGHT - width)  # the text to the right of its leader line
            left = min(max(cx - width + 3, LEFT), WIDTH - RIGHT - width)  # or to its left
            for row, taken in enumerate(rows_end + [None]):
                if row == MAX_ROWS:
                    break
                lx = right if taken is None or right >= taken[1] + 4 else left
                if taken is None or lx >= taken[1] + 4:
                    if taken is None:
                        rows_end.append(None)
                    rows_end[row] = (lx, lx + width)
                    placed.append((c, text, (row, lx, cx)))
                    break
        lane_h = max(BOX_H + STRIP_H + 3 + len(rows_end) * LABEL_H, 28) + LANE_GAP
        lane_rows.append((tid, name, calls, placed, y, lane_h))
        y += lane_h
    lanes_bottom = y - LANE_GAP // 2

    # the axis: a grid line and a number every `step` ms, 0 at t0
    grid = []
    tick = -int((t0 - w_start) * 1000 / step + 1e-9)
    while t0 + tick * step / 1000 <= w_end + 1e-12:
        t = t0 + tick * step / 1000
        if t >= w_start - 1e-12:
            gx = _f(x(t))
            grid.append('<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="%s"/>' % (
                gx, top - 4, gx, lanes_bottom, "#888" if tick == 0 else "#e4e4e4"))
            grid.append('<text x="%s" y="%d" font-size="10" text-anchor="middle" fill="#444">%s</text>' % (
                gx, top - 8, ("%g" % round(tick * step, 6)).replace("-", "\u2212")))
        tick += 1
    grid.append('<text x="%d" y="%d" font-size="10" text-anchor="end" fill="#444">ms</text>' % (
        WIDTH - RIGHT, top - 20))
    out = grid + out

    for i, (tid, name, calls, placed, ly, lane_h) in enumerate(lane_rows):
        out.append('<line x1="0" y1="%d" x2="%d" y2="%d" stroke="#ddd"/>' % (ly - 5, WIDTH, ly - 5))
        out.append('<text x="6" y="%d" font-size="12" font-weight="bold" fill="#222">%s</text>' % (ly + 12, _esc(name)))
        out.append('<text x="6" y="%d" font-size="9" fill="#777">tid %d</text>' % (ly + 24, tid))
        for c in calls:
            x0, x1 = x(c.start), x(c.end)
            w = max(x1 - x0, 1.2)
            title = "%s(%s) = %s %s, %.3f to %.3f ms" % (c.name, c.args[:70], c.ret, c.tail[:40],
                                                         (c.start - t0) * 1000, (c.end - t0) * 1000)
            out.append('<rect x="%s" y="%d" width="%s" height="%d" fill="%s" stroke="#333" stroke-width="0.3">'
                       '<title>%s</title></rect>' % (_f(x0), ly, _f(w), BOX_H, COLOUR[kind(c)], _esc(title)))
            conn = conns.get(id(c))
            if conn:
                out.append('<rect x="%s" y="%d" width="%s" height="%d" fill="%s"/>' % (
                    _f(x0), ly + BOX_H + 1, _f(max(w, 2.5)), STRIP_H, CONN_COLOURS[(conn[0] - 1) % 6]))
        for c, text, where in placed:
            x0, x1 = x(c.start), x(c.end)
            if where is None:
                out.append('<text x="%s" y="%d" font-size="9" text-anchor="middle" fill="#fff">%s</text>' % (
                    _f((x0 + x1) / 2), ly + 12, _esc(text)))
                continue
            row, lx, cx = where
            ty = ly + BOX_H + STRIP_H + 3 + row * LABEL_H + 8
            out.append('<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="#aaa" stroke-width="0.6"/>' % (
                _f(cx), ly + BOX_H + STRIP_H + 1, _f(cx), ty - 7))
            out.append('<text x="%s" y="%d" font-size="9" fill="#222">%s</text>' % (_f(lx), ty, _esc(text)))

    # the legend: the kinds in two columns, then the connections
    y = lanes_bottom + 14
    for i, (k, colour, text) in enumerate(KINDS):
        lx, ly = 10 + (i % 2) * 445, y + (i // 2) * 15
        out.append('<rect x="%d" y="%d" width="12" height="10" fill="%s" stroke="#333" stroke-width="0.3"/>' % (
            lx, ly, colour))
        out.append('<text x="%d" y="%d" font-size="10" fill="#222">%s</text>' % (lx + 17, ly + 9, _esc(text)))
    y += ((len(KINDS) + 1) // 2) * 15
    numbers = sorted({n for n, _ in conns.values()})
    if numbers:
        out.append('<text x="10" y="%d" font-size="10" fill="#222">the strip under a call: its connection,</text>' % (
            y + 9))
        lx = 205
        for n in numbers[:6]:
            out.append('<rect x="%d" y="%d" width="12" height="%d" fill="%s"/>' % (
                lx, y + 4, STRIP_H, CONN_COLOURS[(n - 1) % 6]))
            out.append('<text x="%d" y="%d" font-size="10" fill="#222">%d</text>' % (lx + 15, y + 9, n))
            lx += 32
        out.append('<text x="%d" y="%d" font-size="10" fill="#222">(in the order they began)</text>' % (lx, y + 9))
        y += 15
    notes = ["strace stops the server at every system call, so every duration here is inflated, many times over:",
             "only the order of the calls and their overlap are meaningful. A box at the left edge began earlier.",
             "0 ms: the server's first wake-up for the clients. The SVG's boxes carry the full call (hover)."]
    if sidecar:
        m = sidecar.get("machine", {})
        notes.append("Recorded %s, Linux %s, %s (%s CPUs), %s." % (
            sidecar.get("date", "?")[:10], sidecar.get("kernel", "?"), m.get("cpu_model", "?"), m.get("cpus", "?"),
            sidecar.get("strace", "strace")))
    y += 6
    for note in notes:
        out.append('<text x="10" y="%d" font-size="10" fill="#555">%s</text>' % (y + 9, _esc(note)))
        y += 13
    height = y + 6

    execve = next((c for c in trace.calls if c.name == "execve"), None)
    flags = " ".join(re.findall(r'"([^"]*)"', execve.args.split("]", 1)[0])[2:]) if execve else ""
    head = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" %s>' % (
        WIDTH, height, WIDTH, height, FONT),
        '<rect width="100%" height="100%" fill="#fff"/>',
        '<text x="10" y="21" font-size="15" font-weight="bold" fill="#111">%s: three concurrent requests, as strace '
        'saw them</text>' % _esc(model),
        '<text x="10" y="38" font-size="11" fill="#444">%s</text>' % _esc(
            "run_server %s. Three clients connect at once; each sends GET / with Connection: close." % flags),
        '<text x="10" y="53" font-size="11" fill="#b03030">%s</text>' % _esc(
            "strace inflates every duration: read the order and the overlap, not the lengths."),
    ]
    return "\n".join(head + out + ["</svg>"]) + "\n"


def render_file(src, sidecar_path=None):
    with open(src, encoding="utf-8", errors="replace") as f:
        trace = parse(f.read())
    if sidecar_path is None:
        sidecar_path = os.path.splitext(src)[0] + ".json"
    sidecar = None
    if os.path.exists(sidecar_path):
        with open(sidecar_path, encoding="utf-8") as f:
            sidecar = json.load(f)
    return render(trace, sidecar)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="trace a server answering three concurrent requests")
    rec.add_argument("server_dir", help="e.g. 05-epoll (build/05-epoll/run_server)")
    rec.add_argument("out", help="the trace to write, e.g. docs/timelines/05-epoll.strace")
    rec.add_argument("server_args", nargs="*", help="after --: the server's flags instead of the defaults")
    ren = sub.add_parser("render", help="draw a trace as an SVG")
    ren.add_argument("src")
    ren.add_argument("out")
    ren.add_argument("--check", action="store_true", help="exit 1 if OUT differs from what the trace gives")
    a = ap.parse_args(argv)
    if a.cmd == "record":
        return record(a.server_dir, os.path.abspath(a.out), a.server_args)
    svg = render_file(a.src)
    if a.check:
        try:
            with open(a.out, encoding="utf-8") as f:
                same = f.read() == svg
        except OSError:
            same = False
        if not same:
            print("%s is out of date: run python3 docs/tools/timeline.py render %s %s" % (a.out, a.src, a.out))
            return 1
        return 0
    with open(a.out, "w", encoding="utf-8") as f:
        f.write(svg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
