#!/usr/bin/env python3
"""Proves the grader's verdict on one server: its exit status, its score, and sentences its report must hold.

    check_verdict.py [--exit N] [--score X | --score-between LOW HIGH] [--says TEXT]... [--never-says TEXT]...
                     [--first-line TEXT] [--within SECONDS] [grade.py options] -- COMMAND [ARGS...]

Grades COMMAND with tests/grader/grade.py (into a temporary folder) and checks that grade.py exited N (default 0),
that the total was X, or within LOW and HIGH (default: not checked), that report.md holds each TEXT and no
--never-says TEXT, that it begins with the line --first-line gives, and that grading took at most SECONDS. Run by
CTest for the fixtures of real servers' conventions and for real servers (tests/grader/CMakeLists.txt); exit status
0 when the verdict was the stated one.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv):
    at = argv.index("--")
    options, command = argv[:at], argv[at + 1:]
    want_exit, want_score, between, says, grade_args = 0, None, None, [], []
    first_line, within, never = None, None, []
    i = 0
    while i < len(options):
        if options[i] == "--score-between":
            between = (float(options[i + 1]), float(options[i + 2]))
            i += 3
        elif options[i] == "--first-line":
            first_line = options[i + 1]
            i += 2
        elif options[i] == "--never-says":
            never.append(options[i + 1])
            i += 2
        elif options[i] == "--within":
            within = float(options[i + 1])
            i += 2
        elif options[i] in ("--exit", "--score", "--says"):
            value = options[i + 1]
            if options[i] == "--exit":
                want_exit = int(value)
            elif options[i] == "--score":
                want_score = float(value)
            else:
                says.append(value)
            i += 2
        else:
            grade_args.append(options[i])
            i += 1
    with tempfile.TemporaryDirectory(prefix="psp-verdict-") as report:
        started = time.monotonic()
        run = subprocess.run([sys.executable, os.path.join(HERE, "grade.py"), *grade_args, "--report", report,
                              "--", *command], capture_output=True, text=True)
        seconds = time.monotonic() - started
        print(run.stdout[-4000:], run.stderr[-2000:], sep="", end="")
        try:
            with open(os.path.join(report, "report.md")) as f:
                text = f.read()
            with open(os.path.join(report, "report.json")) as f:
                score = json.load(f)["score"]
        except (OSError, ValueError, KeyError):
            text, score = run.stderr, None
    problems = []
    if run.returncode != want_exit:
        problems.append(f"grade.py exited {run.returncode}, not {want_exit}")
    if want_score is not None and score != want_score:
        problems.append(f"the score was {score}, not {want_score:g}")
    if between is not None and (score is None or not between[0] <= score <= between[1]):
        problems.append(f"the score was {score}, not between {between[0]:g} and {between[1]:g}")
    problems += [f"the report does not say: {s!r}" for s in says if s not in text]
    problems += [f"the report says what it must not: {s!r}" for s in never if s in text]
    if first_line is not None and text.split("\n")[0] != first_line:
        problems.append(f"the report's first line is {text.splitlines()[0] if text else ''!r}, not {first_line!r}")
    if within is not None and seconds > within:
        problems.append(f"grading took {seconds:.1f} s, more than {within:g} s")
    for p in problems:
        print("FAIL:", p)
    if not problems:
        print("ok: the verdict was the stated one")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
