#!/usr/bin/env python3
"""Proves tests/grade.sh --url: grades a server that this script started, as a teacher would grade one already
running, and checks that the grader left it running.

    check_url.py [grade.py options] -- SERVER [ARGS...]

Starts SERVER --port 0 (one of this repository's servers: it prints its listening line), then runs grade.py --url
http://127.0.0.1:PORT/ --pid PID with the options given (--quick, a --rubric). It checks that no check failed
(a correct server), that at least one passed, that the checks needing to start, signal or restart the server were
lost with that reason ("lacking", exit 1), and that the server still runs afterwards. Exit 0 when all of that held.
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv):
    at = argv.index("--")
    options, server = argv[:at], argv[at + 1:]
    proc = subprocess.Popen([*server, "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()  # the seven servers print it first, at once
        m = re.fullmatch(r"listening on http://127\.0\.0\.1:(\d+)/\n", line)
        if not m:
            print(f"FAIL: the server's first line was {line!r}")
            return 1
        with tempfile.TemporaryDirectory(prefix="psp-url-") as report:
            run = subprocess.run([sys.executable, os.path.join(HERE, "grade.py"), *options, "--report", report,
                                  "--url", f"http://127.0.0.1:{m.group(1)}/", "--pid", str(proc.pid)],
                                 capture_output=True, text=True)
            print(run.stdout[-4000:], run.stderr[-2000:], sep="", end="")
            try:
                with open(os.path.join(report, "report.json")) as f:
                    checks = json.load(f)["checks"]
            except (OSError, ValueError, KeyError):
                checks = []
        results = [c["result"] for c in checks]
        problems = []
        if run.returncode != 1:
            problems.append(f"grade.py exited {run.returncode}, not 1 (some checks need the grader to start it)")
        if "failed" in results or "not run" in results:
            problems.append("a check failed: " + ", ".join(c["check"] for c in checks
                                                           if c["result"] in ("failed", "not run")))
        if "passed" not in results:
            problems.append("no check passed")
        if not any(c["result"] == "lacking" and "needs the grader to start the server" in c["message"]
                   for c in checks):
            problems.append("no check was lost for needing the grader to start the server")
        if proc.poll() is not None:
            problems.append(f"the server is no longer running (status {proc.returncode}): the grader stopped it")
        for p in problems:
            print("FAIL:", p)
        if not problems:
            print("ok: graded by its URL, and left running")
        return 1 if problems else 0
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
