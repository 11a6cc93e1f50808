#!/usr/bin/env python3
"""Proves the grader on a deliberately broken server: it must lose exactly the checks for that server's defect.

    check_broken.py --lose "PATTERN ..." [--may-lose "PATTERN ..."] [--baseline "COMMAND ..."] [grade.py options]
                    -- COMMAND [ARGS...]

Grades COMMAND with tests/grader/grade.py and compares the checks it failed with --lose (patterns over check
names, as in rubric.ini): every failed check must match a pattern, and every pattern must match a failed check.
--may-lose names checks the defect fails or not depending on timing: they may fail, and need not.
With --baseline, the same server without its defect is graded too, and only what the broken one loses beyond it
is compared (a small Python server has shortcomings of its own that are not the defect under test). Run by CTest
(tests/grader/CMakeLists.txt); exit status 0 when the grader behaved, 1 when not.
"""

import json
import os
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from grade import glob  # noqa: E402


def lost_checks(grade_args, command):
    with tempfile.TemporaryDirectory(prefix="psp-grade-") as report:
        run = subprocess.run([sys.executable, os.path.join(HERE, "grade.py"), *grade_args, "--report", report,
                              "--", *command], capture_output=True, text=True)
        print(run.stdout[-3000:], run.stderr[-2000:], sep="", end="")
        if run.returncode == 2:
            sys.exit(f"check_broken.py: grade.py refused its arguments: {run.stderr.strip()}")
        with open(os.path.join(report, "report.json")) as f:
            report_json = json.load(f)
    return {c["check"] for c in report_json["checks"] if c["result"] in ("failed", "not run")}, run.returncode


def main(argv):
    at = argv.index("--")
    options, command = argv[:at], argv[at + 1:]
    lose, may_lose, baseline, grade_args = [], [], None, []
    i = 0
    while i < len(options):
        if options[i] == "--lose":
            lose = options[i + 1].split()
            i += 2
        elif options[i] == "--may-lose":
            may_lose = options[i + 1].split()
            i += 2
        elif options[i] == "--baseline":
            baseline = shlex.split(options[i + 1])
            i += 2
        else:
            grade_args.append(options[i])
            i += 1

    lost, status = lost_checks(grade_args, command)
    if baseline:
        print(f"--- the baseline, without the defect: {' '.join(baseline)}")
        base_lost, _ = lost_checks(grade_args, baseline)
        if base_lost - lost:
            print(f"FAIL: the broken server passed checks that its baseline failed: {sorted(base_lost - lost)}")
            return 1
        lost -= base_lost
    problems = []
    if status != 1:
        problems.append(f"grade.py exited {status}, not 1")
    unexpected = sorted(c for c in lost if not any(glob(c, p) for p in lose + may_lose))
    if unexpected:
        problems.append(f"lost checks that are not the defect's: {unexpected}")
    missing = [p for p in lose if not any(glob(c, p) for c in lost)]
    if missing:
        problems.append(f"did not lose: {missing}")
    for p in problems:
        print("FAIL:", p)
    if not problems:
        print(f"ok: lost exactly the expected checks ({len(lost)}): {sorted(lost)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
