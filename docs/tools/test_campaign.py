#!/usr/bin/env python3
"""Tests of campaign.py on a scratch git repository with fake results folders and a fake benchmark.sh, so that no
benchmark runs: `python3 docs/tools/test_campaign.py` (CTest: docs_campaign_tool)."""

import contextlib
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import campaign  # noqa: E402
from scratch import ScratchFiles  # noqa: E402
import fingerprint  # noqa: E402

SUMMARY = """\
# Benchmark: {mode}, 2026-01-0{day} 10:00:00 to 10:{minutes:02d}:30 UTC

- Machine: Test box, 2 CPUs
- Kernel: 6.1.0
- Command: `{command}`
- Repetitions: 3 per server and concurrency; medians

| server | c | req/s | syscalls/req |
|---|---:|---:|---:|
{rows}
"""

# The fake benchmark: writes a results folder like the driver's, names it on its `results:` line, and fails when
# FAKE_FAIL is part of its arguments. Every call is appended to FAKE_CALLS (outside the scratch repository).
FAKE_BENCHMARK = """\
#!/usr/bin/env python3
import os, shlex, sys
args = sys.argv[1:]
with open(os.environ["FAKE_CALLS"], "a") as f:
    f.write(shlex.join(args) + "\\n")
if os.environ.get("FAKE_FAIL") and os.environ["FAKE_FAIL"] in " ".join(args):
    print("!! CHECK FAILED: fake")
    sys.exit(1)
results = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
n = 1 + sum(name.startswith("2027-") for name in os.listdir(results))
folder = os.path.join(results, f"2027-01-01_0000{n:02d}")
os.makedirs(folder)
rows = "\\n".join(f"| {name} | 10 | {1000 + n} | 7.0 |" for name in os.environ["FAKE_ROWS"].split(","))
mode = args[args.index("--mode") + 1] if "--mode" in args else "throughput"
with open(os.path.join(folder, "summary.md"), "w") as f:
    f.write(os.environ["FAKE_SUMMARY"].format(mode=mode, day=9, minutes=1, command="benchmark/benchmark.sh " +
                                              shlex.join(args), rows=rows))
with open(os.path.join(folder, "fingerprints.json"), "w") as f:
    f.write(os.environ["FAKE_PRINTS"])
print("| a table line")
print(f"results: {folder} (summary.md, summary.csv, raw.csv)")
print("all checks passed")
"""

ROWS = "| 03-select | 10 | 900 | 5.0 |\n| 05-epoll | 10 | 1000 | 7.0 |\n| nginx (reference) | 10 | 2000 | – |"


class CampaignTest(ScratchFiles, unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = os.path.join(self.tmp.name, "a repo")  # a space in the path, as in a home folder
        self.calls = os.path.join(self.tmp.name, "calls.log")
        self.write("05-epoll/main.cpp", "int main() { return 0; }\n")
        self.write("03-select/main.cpp", "int main() { return 1; }\n")
        self.write("common/x.hpp", "inline int x() { return 1; }\n")
        self.write("benchmark/benchmark.sh", FAKE_BENCHMARK)
        os.chmod(os.path.join(self.root, "benchmark/benchmark.sh"), 0o755)
        self.write("README.md", "# Top\n\nSee [the course](docs/README.md).\n")
        self.write("docs/README.md", "# Contents\n")
        self.git("init", "-q")
        self.git("add", ".")
        self.git("commit", "-q", "-m", "scratch")
        self.prints = json.dumps(fingerprint.fingerprints(self.root))
        # Three runs: two of one command spelled two ways (the first of older code), one of another command.
        self.result("2026-01-01_100000", "benchmark/benchmark.sh --no-build -r 3 -t wrk 05", day=1, minutes=5,
                    prints=json.dumps({"05-epoll": "0" * 16, "03-select": "0" * 16}))
        self.result("2026-01-02_100000", "benchmark/benchmark.sh --tool wrk -r 3 --results-dir /tmp/x 5", day=2,
                    minutes=7)
        self.result("2026-01-03_100000", "benchmark/benchmark.sh --mode idle -r 3 03 05", day=3, minutes=20,
                    mode="idle")
        os.environ.update(FAKE_CALLS=self.calls, FAKE_SUMMARY=SUMMARY, FAKE_PRINTS=self.prints,
                          FAKE_ROWS="05-epoll,nginx (reference)")
        os.environ.pop("FAKE_FAIL", None)

    def tearDown(self):
        self.tmp.cleanup()

    def git(self, *args):
        return subprocess.run(["git", "-C", self.root, "-c", "user.name=t", "-c", "user.email=t@t", *args],
                              capture_output=True, text=True, check=True).stdout

    def result(self, name, command, day, minutes, mode="throughput", rows=ROWS, prints=None):
        self.write(f"benchmark/results/{name}/summary.md",
                   SUMMARY.format(mode=mode, day=day, minutes=minutes, command=command, rows=rows))
        self.write(f"benchmark/results/{name}/fingerprints.json", prints or self.prints)

    def line_of(self, path, text):
        """The number of the first line of `path` that holds `text`."""
        return next(n for n, line in enumerate(self.read(path).split("\n"), 1) if text in line)

    def campaign(self, *args):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = campaign.main(["--root", self.root, *args])
        return code, out.getvalue() + err.getvalue()

    def called(self):
        if not os.path.exists(self.calls):
            return []
        with open(self.calls, encoding="utf-8") as f:
            return f.read().splitlines()

    def cite_all(self):
        """A page citing the three runs: markers (one with its generated lines, to be skipped), a value, prose."""
        self.write("docs/page.md", "# Page\n\n"
                   "<!-- results: benchmark/results/2026-01-01_100000/summary.md rows=05 -->\n"
                   "A line sync.py generated: benchmark/results/2026-01-01_100000/summary.md\n"
                   "<!-- /results -->\n\n"
                   "05 makes <!-- value: benchmark/results/2026-01-03_100000/summary.md rows=05 col=req/s -->1000"
                   "<!-- /value --> req/s.\n\n"
                   "As [the second run](../benchmark/results/2026-01-02_100000/summary.md) and 2026-01-03_100000 "
                   "show, on 2026-01-04_100000 nothing ran.\n\n"
                   "<!-- results: benchmark/results/2026-01-03_100000/summary.md rows=03 -->\n")
        self.assertEqual(subprocess.run([sys.executable, os.path.join(campaign.HERE, "sync.py"), "--root",
                                         self.root], capture_output=True, text=True).returncode, 0)

    # ----------------------------------------------------------------------------------------------- --list

    def test_commands_that_differ_only_in_spelling_are_one(self):
        key = campaign.command_key
        self.assertEqual(key(["-t", "wrk", "-r", "3", "05"]), key(["--no-build", "--repeat", "3", "--tool", "wrk",
                                                                   "--results-dir", "/tmp/x", "--log", "/tmp/l",
                                                                   "5"]))
        self.assertEqual(key(["-c", "100,500", "05-epoll"]), key(["-c", "100  500", "05"]))
        self.assertEqual(key(["-r", "1", "--mode", "throughput", "05"]), key(["05"]))  # options at their default
        self.assertNotEqual(key(["05", "06"]), key(["06", "05"]))  # the rows' order is the run's
        self.assertNotEqual(key(["06-io_uring-advanced"]), key(["06"]))  # another build is another server
        self.assertNotEqual(key(["-r", "3", "05:--threads=1"]), key(["-r", "3", "05"]))

    def test_list_groups_runs_by_command_with_citations_freshness_and_durations(self):
        self.cite_all()
        code, report = self.campaign("--list")
        self.assertEqual(code, 0, report)
        self.assertIn("3 run(s) cited in docs/ and README.md, 1 of them stale, made by 2 distinct command(s).",
                      report)
        first, second = report.split("\n[1] ")[1].split("\n[2] ")
        self.assertIn("./benchmark/benchmark.sh --tool wrk -r 3 5\n", "./benchmark/benchmark.sh " +
                      first.split("./benchmark/benchmark.sh ", 1)[1])
        self.assertIn("benchmark/results/2026-01-01_100000  took 5 min 30 s; stale: 03-select, 05-epoll", first)
        self.assertIn("cited: docs/page.md:3 (1)", first)  # its generated line is not a citation
        self.assertIn("benchmark/results/2026-01-02_100000  took 7 min 30 s; fresh", first)
        self.assertIn("throughput; estimate 7 min 30 s", first)  # the latest run of the command
        self.assertIn("./benchmark/benchmark.sh --mode idle -r 3 03 05", second)
        lines = [self.line_of("docs/page.md", text) for text in ("<!-- value:", "As [the", "rows=03 -->")]
        self.assertIn(f"cited: docs/page.md:{','.join(map(str, lines))} (3)", second)  # value, bare name, marker
        self.assertNotIn("2026-01-04_100000", report)  # no such folder: a date, not a run
        self.assertIn("Estimated time for the whole campaign: 28 min 00 s", report)

    def test_list_names_the_machines_and_each_page_that_mixes_them(self):
        self.cite_all()
        code, report = self.campaign("--list")
        self.assertIn("\nMachines: Test box, 2 CPUs (3 run(s))\n", report)
        self.write("benchmark/results/2026-01-03_100000/summary.md",
                   self.read("benchmark/results/2026-01-03_100000/summary.md").replace("Test box", "Other box"))
        code, report = self.campaign("--list")
        self.assertIn("\nMachines: Other box, 2 CPUs (1 run(s)); Test box, 2 CPUs (2 run(s))\n"
                      "  docs/page.md cites runs of 2 machines: Other box, 2 CPUs; Test box, 2 CPUs\n", report)

    # ------------------------------------------------------------------------------------------------ --run

    def test_a_dirty_tree_is_refused_and_a_dry_run_says_so(self):
        self.cite_all()
        self.write("05-epoll/main.cpp", "int main() { return 2; }\n")
        code, report = self.campaign("--run")
        self.assertEqual(code, 1, report)
        self.assertIn("the code differs from HEAD (05-epoll/main.cpp): a campaign measures one commit", report)
        self.assertEqual(self.called(), [])
        code, report = self.campaign("--run", "--dry-run")
        self.assertEqual(code, 0, report)
        self.assertIn("would run; replaces 2026-01-01_100000, 2026-01-02_100000", report)
        self.assertIn("a real run would refuse to start now", report)
        self.assertEqual(self.called(), [])
        self.assertFalse(os.path.exists(os.path.join(self.root, campaign.RECORD)))

    def test_changes_outside_the_measured_code_do_not_count(self):
        self.cite_all()
        self.git("add", "docs")
        self.git("commit", "-q", "-m", "docs")
        self.write("docs/README.md", "# Contents, edited\n")  # docs and results are not what a campaign measures
        self.assertEqual(campaign.dirty_paths(self.root), [])
        self.write("common/x.hpp", "inline int x() { return 2; }\n")
        self.git("add", "common/x.hpp")  # staged counts too
        self.assertEqual(campaign.dirty_paths(self.root), ["common/x.hpp"])

    def test_run_stops_at_the_first_failure_and_resume_goes_on(self):
        self.cite_all()
        os.environ["FAKE_FAIL"] = "--mode idle"
        code, report = self.campaign("--run", "--no-retarget")
        self.assertEqual(code, 1, report)
        self.assertIn("campaign: stopped: command 2 failed (exit status 1): ./benchmark/benchmark.sh --mode idle -r 3 "
                      "03 05", report)
        self.assertEqual(self.called(), ["--tool wrk -r 3 5", "--mode idle -r 3 03 05"])  # in order, built first
        record = json.loads(self.read(campaign.RECORD))
        self.assertEqual([(e["status"], e["new"]) for e in record["commands"]],
                         [("done", "benchmark/results/2027-01-01_000001"), ("failed", "")])
        self.assertEqual(record["commands"][0]["old"], ["benchmark/results/2026-01-01_100000",
                                                        "benchmark/results/2026-01-02_100000"])
        self.assertEqual(self.read("docs/page.md").count("2027-"), 0)  # --no-retarget

        del os.environ["FAKE_FAIL"]
        code, report = self.campaign("--run", "--resume", "--no-retarget", "--dry-run")
        self.assertIn("1 command(s) to run", report)
        self.assertIn("(done: benchmark/results/2027-01-01_000001;", report)
        code, report = self.campaign("--run", "--resume", "--no-retarget")
        self.assertEqual(code, 0, report)
        self.assertEqual(self.called()[2:], ["--mode idle -r 3 03 05"])  # only what was left
        record = json.loads(self.read(campaign.RECORD))
        self.assertEqual([e["status"] for e in record["commands"]], ["done", "done"])

    def test_resume_after_the_code_changed_starts_afresh(self):
        self.cite_all()
        self.assertEqual(self.campaign("--run", "--no-retarget", "--only", "wrk")[0], 0)
        self.write("05-epoll/main.cpp", "int main() { return 3; }\n")
        self.git("commit", "-q", "-am", "05 changed")
        code, report = self.campaign("--run", "--resume", "--no-retarget", "--only", "wrk")
        self.assertEqual(code, 0, report)
        self.assertIn("is of other code", report)
        self.assertEqual(len(self.called()), 2)

    # ------------------------------------------------------------------------------------------- --retarget

    def test_retarget_rewrites_citations_and_reports_a_row_the_new_run_lacks(self):
        self.cite_all()
        code, report = self.campaign("--run")  # the new runs have 05-epoll and nginx, no 03-select
        self.assertEqual(code, 1, report)
        page = self.read("docs/page.md")
        self.assertIn("<!-- results: benchmark/results/2027-01-01_000001/summary.md rows=05 -->", page)
        self.assertIn("](../benchmark/results/2027-01-01_000001/summary.md)", page)  # its provenance, regenerated
        self.assertIn("<!-- value: benchmark/results/2027-01-01_000002/summary.md rows=05 col=req/s -->1002<!--", page)
        self.assertIn("[the second run](../benchmark/results/2027-01-01_000001/summary.md) and 2027-01-01_000002 show",
                      page)
        self.assertNotIn("Measured on", page)  # the new run measured today's code
        self.assertIn("campaign: 1 citation(s) select what their new run does not have", report)
        marker = self.line_of("docs/page.md", "rows=03 -->")
        self.assertIn(f"docs/page.md:{marker}: results block: benchmark/results/2027-01-01_000002/summary.md has no "
                      f"row starting with 03", report)
        self.assertIn(f"read it again:\n  docs/page.md:{self.line_of('docs/page.md', 'As [the')}\n", report)
        # The block that could not be regenerated keeps its lines, which name the old run.
        self.assertIn(f"still naming an old run (a block sync.py could not regenerate keeps its old lines):\n"
                      f"  docs/page.md:{marker + 1}\n", report)
        self.assertNotIn("sync.py also reported", report)

        # Fixed by hand (the row is gone), the retarget finishes, and the docs check.
        self.write("docs/page.md", page.replace("2027-01-01_000002/summary.md rows=03", "2027-01-01_000002/summary.md "
                                                "rows=05"))
        code, report = self.campaign("--retarget")
        self.assertEqual(code, 0, report)
        self.assertIn("every citation now names its new run", report)
        sync_check = subprocess.run([sys.executable, os.path.join(campaign.HERE, "sync.py"), "--check", "--root",
                                     self.root], capture_output=True, text=True)
        self.assertEqual(sync_check.returncode, 0, sync_check.stdout + sync_check.stderr)
        page = self.read("docs/page.md")
        for old in ("2026-01-01_100000", "2026-01-02_100000", "2026-01-03_100000"):
            self.assertNotIn(old, page)


if __name__ == "__main__":
    if not shutil.which("git"):
        print("test_campaign.py: skipped, git is not installed")
        sys.exit(0)
    unittest.main()
