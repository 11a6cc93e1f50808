#!/usr/bin/env python3
"""Tests of timeline.py, the strace parser and renderer: `python3 docs/tools/test_timeline.py`
(CTest: docs_timeline_tool)."""

import contextlib
import glob
import io
import os
import re
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import timeline  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

# Two threads whose calls interleave, as `strace -f -ttt -T` writes them: 101 is the process, 102 a worker.
TRACE = """\
101 1000.000000 execve("build/04-threadpool/run_server", ["build/04-threadpool/run_server", "--threads", "2"], \
0x7ffd /* 4 vars */) = 0 <0.000100>
101 1000.001000 clone3({flags=CLONE_VM|CLONE_THREAD, child_tid=0x7f}, 88) = 102 <0.000050>
102 1000.001100 futex(0x7fff, FUTEX_WAIT_BITSET_PRIVATE, 0, NULL, FUTEX_BITSET_MATCH_ANY <unfinished ...>
101 1000.002000 write(1, "listening on http://127.0.0.1:4242/\\n", 36) = 36 <0.000010>
101 1000.002100 poll([{fd=5, events=POLLIN}], 1, -1) = 1 ([{fd=5, revents=POLLIN}]) <0.200000>
101 1000.202200 accept4(5, NULL, NULL, SOCK_CLOEXEC <unfinished ...>
102 1000.202210 <... futex resumed>) = 0 <0.201200>
101 1000.202250 <... accept4 resumed>) = 6 <0.000040>
101 1000.202300 futex(0x7fff, FUTEX_WAKE_PRIVATE, 1) = 1 <0.000020>
102 1000.202400 recvfrom(6, "GET / HTTP/1.1\\r\\n"..., 4096, 0, NULL, NULL) = 54 <0.000010>
102 1000.202500 clock_nanosleep(CLOCK_REALTIME, 0, {tv_sec=0, tv_nsec=1000000},  <unfinished ...>
101 1000.202600 poll([{fd=5, events=POLLIN}], 1, -1 <unfinished ...>
102 1000.203600 <... clock_nanosleep resumed>0x7f5c) = 0 <0.001100>
102 1000.203700 sendto(6, "HTTP/1.1 200 OK\\r\\n"..., 1160, MSG_NOSIGNAL, NULL, 0) = 1160 <0.000030>
102 1000.203800 shutdown(6, SHUT_WR) = 0 <0.000020>
102 1000.203900 recvfrom(6, "", 4096, 0, NULL, NULL) = 0 <0.000010>
102 1000.204000 close(6)        = 0 <0.000010>
101 1000.204100 <... poll resumed>) = 1 ([{fd=5, revents=POLLIN}]) <0.001500>
101 1000.204200 accept4(5, NULL, NULL, SOCK_CLOEXEC) = 6 <0.000020>
101 1000.204300 close(6)        = 0 <0.000010>
101 1000.204400 accept4(5, NULL, NULL, SOCK_CLOEXEC) = -1 EAGAIN (Resource temporarily unavailable) <0.000005>
101 1000.204500 poll([{fd=5, events=POLLIN}], 1, -1 <unfinished ...>
101 1000.300000 <... poll resumed>) = ? ERESTART_RESTARTBLOCK (Interrupted by signal) <0.095500>
101 1000.300010 --- SIGTERM {si_signo=SIGTERM, si_code=SI_USER, si_pid=1, si_uid=0} ---
102 1000.300100 futex(0x7fff, FUTEX_WAIT_PRIVATE, 2, NULL <unfinished ...>
102 1000.300200 +++ exited with 0 +++
101 1000.300300 +++ exited with 0 +++
"""


def calls_named(trace, name):
    return [c for c in trace.calls if c.name == name]


class ParseTest(unittest.TestCase):
    def setUp(self):
        self.trace = timeline.parse(TRACE)

    def test_unfinished_and_resumed_lines_make_one_call(self):
        accepts = calls_named(self.trace, "accept4")
        self.assertEqual(len(accepts), 3)
        first = accepts[0]
        self.assertEqual((first.tid, first.ret, first.fd()), (101, "6", 5))
        self.assertEqual(first.args, "5, NULL, NULL, SOCK_CLOEXEC")
        sleep = calls_named(self.trace, "clock_nanosleep")[0]
        self.assertIn("tv_nsec=1000000", sleep.args)
        self.assertTrue(sleep.args.endswith("0x7f5c"))  # the resumed line's arguments are appended
        self.assertFalse(any(c.unfinished for c in self.trace.calls if c.tid == 101))

    def test_durations_come_from_dash_T(self):
        sleep = calls_named(self.trace, "clock_nanosleep")[0]
        self.assertAlmostEqual(sleep.start, 1000.2025)
        self.assertAlmostEqual(sleep.end - sleep.start, 0.0011)
        futex = calls_named(self.trace, "futex")[0]  # began before the clone's caller went on: its own start
        self.assertAlmostEqual(futex.start, 1000.0011)
        self.assertAlmostEqual(futex.end, 1000.2023)

    def test_errors_signals_and_exits(self):
        eagain = calls_named(self.trace, "accept4")[2]
        self.assertEqual((eagain.ret, eagain.tail), ("-1", "EAGAIN (Resource temporarily unavailable)"))
        last_poll = calls_named(self.trace, "poll")[-1]
        self.assertEqual(last_poll.ret, "?")
        self.assertEqual(self.trace.signals, [(101, 1000.30001, "SIGTERM")])
        self.assertEqual([tid for tid, _, _ in self.trace.exits], [102, 101])
        dying = calls_named(self.trace, "futex")[-1]  # the thread exited inside it: it ends there
        self.assertAlmostEqual(dying.end, 1000.3002)

    def test_a_resumed_line_without_its_start_is_kept(self):
        trace = timeline.parse("7 5.000000 <... read resumed>\"x\", 10) = 1 <0.000500>\n")
        (call,) = trace.calls
        self.assertEqual((call.name, call.ret), ("read", "1"))

    def test_lines_that_are_not_strace_lines_are_ignored(self):
        self.assertEqual(timeline.parse("strace: Process 1 attached\n\n").calls, [])


class LaneTest(unittest.TestCase):
    def test_the_process_first_then_threads_in_clone_order(self):
        trace = timeline.parse(TRACE)
        self.assertEqual(timeline.lanes(trace), [(101, "main thread"), (102, "worker 1")])

    def test_threads_named_after_the_model(self):
        trace = timeline.parse(TRACE.replace("04-threadpool", "05-epoll"))
        self.assertEqual(timeline.lanes(trace)[1], (102, "thread 1"))

    def test_a_thread_whose_clone_was_not_traced_still_gets_a_lane(self):
        trace = timeline.parse("1 1.0 read(0, \"\", 1) = 0 <0.1>\n3 1.1 read(0, \"\", 1) = 0 <0.1>\n")
        self.assertEqual([tid for tid, _ in timeline.lanes(trace)], [1, 3])


class KindTest(unittest.TestCase):
    def kind_of(self, line):
        return timeline.kind(timeline.parse("1 1.0 " + line + "\n").calls[0])

    def test_kinds(self):
        self.assertEqual(self.kind_of("epoll_pwait2(5, [], 256, NULL, NULL, 8) = 1 <0.1>"), "wait")
        self.assertEqual(self.kind_of("epoll_pwait2(5, [], 256, {tv_sec=0, tv_nsec=9}, NULL, 8) = 0 <0.1>"), "timer")
        self.assertEqual(self.kind_of("poll([{fd=5, events=POLLIN}], 1, 5) = 0 (Timeout) <0.005>"), "timer")
        self.assertEqual(self.kind_of("io_uring_enter(5, 1, 1, 0, NULL, 8) = 1 <0.001>"), "wait")
        self.assertEqual(self.kind_of("clock_nanosleep(CLOCK_REALTIME, 0, {tv_sec=0}, 0x1) = 0 <0.001>"), "timer")
        self.assertEqual(self.kind_of("sendto(6, \"\", 1, 0, NULL, 0) = 1 <0.1>"), "send")
        self.assertEqual(self.kind_of("setsockopt(6, SOL_SOCKET, SO_RCVTIMEO, \"\", 16) = 0 <0.1>"), "other")


class ConnectionTest(unittest.TestCase):
    def test_a_reused_fd_is_a_new_connection(self):
        trace = timeline.parse(TRACE)
        conns, _ = timeline.connections(trace)
        numbers = {(c.name, round(c.start, 4)): conns.get(id(c)) for c in trace.calls}
        self.assertEqual(numbers[("recvfrom", 1000.2024)], (1, 6))
        self.assertEqual(numbers[("close", 1000.204)], (1, 6))
        self.assertEqual(numbers[("close", 1000.2043)], (2, 6))  # fd 6 again, after the first one's close
        self.assertIsNone(numbers[("poll", 1000.0021)])

    def test_connections_accepted_without_a_system_call(self):  # io_uring: the first shutdown names it
        text = ("1 1.000 openat(AT_FDCWD, \"/etc/localtime\", O_RDONLY) = 10 <0.001>\n"
                "1 1.002 read(10, \"TZif\", 4096) = 4 <0.001>\n"
                "1 1.004 shutdown(9, SHUT_WR) = 0 <0.001>\n"
                "1 1.006 close(9) = 0 <0.001>\n")
        trace = timeline.parse(text)
        conns, files = timeline.connections(trace)
        read, shutdown = trace.calls[1], trace.calls[2]
        self.assertEqual(files[id(read)], "localtime")
        self.assertEqual(conns[id(shutdown)], (1, 9))
        self.assertEqual(timeline.label(read, None, "localtime"), "read localtime")


class RenderTest(unittest.TestCase):
    def test_the_axis_starts_at_the_first_wake_up(self):
        trace = timeline.parse(TRACE)
        t0, start, end = timeline.window(trace)
        self.assertAlmostEqual(t0, 1000.2021)  # the end of the poll that waited 200 ms for the first client
        self.assertLess(start, t0)
        self.assertGreater(end, 1000.204405)  # the last call that ended before the stop (not the interrupted poll)
        self.assertLess(end, 1000.2046)  # plus a margin of 3 %

    def test_deterministic_and_captioned(self):
        trace = timeline.parse(TRACE)
        svg = timeline.render(trace)
        self.assertEqual(svg, timeline.render(timeline.parse(TRACE)))
        self.assertIn("strace inflates every duration", svg)
        self.assertIn(">worker 1<", svg)
        self.assertIn(">accept \u2192 6<", svg)
        self.assertIn(">sleep 1 ms<", svg)

    def test_check(self):
        with tempfile.TemporaryDirectory() as tmp:
            src, out = os.path.join(tmp, "t.strace"), os.path.join(tmp, "t.svg")
            with open(src, "w", encoding="utf-8") as f:
                f.write(TRACE)
            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(timeline.main(["render", src, out, "--check"]), 1)  # missing
                self.assertEqual(timeline.main(["render", src, out]), 0)
                self.assertEqual(timeline.main(["render", src, out, "--check"]), 0)
                with open(out, "a", encoding="utf-8") as f:
                    f.write(" ")
                self.assertEqual(timeline.main(["render", src, out, "--check"]), 1)

    def test_committed_figures_have_no_overlapping_labels(self):
        svgs = sorted(glob.glob(os.path.join(HERE, "..", "timelines", "*.svg")))
        for path in svgs:
            with open(path, encoding="utf-8") as f:
                svg = f.read()
            boxes = []
            for m in re.finditer(r'<text x="([\d.]+)" y="(\d+)" font-size="9" fill="#222">([^<]*)</text>', svg):
                x, y, text = float(m.group(1)), int(m.group(2)), m.group(3)
                boxes.append((y, x, x + len(text) * timeline.CHAR_W, text))
            boxes.sort()
            for a, b in zip(boxes, boxes[1:]):
                if a[0] == b[0]:
                    self.assertLessEqual(a[2], b[1], "%s: %r overlaps %r" % (os.path.basename(path), a[3], b[3]))


if __name__ == "__main__":
    unittest.main()
