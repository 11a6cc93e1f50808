#!/usr/bin/env python3
"""Tests of sync.py on a scratch repository: `python3 docs/tools/test_sync.py` (CTest: docs_sync_tool)."""

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import tempfile
import textwrap
import sys
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import fingerprint  # noqa: E402
import sync  # noqa: E402
from scratch import ScratchFiles  # noqa: E402

SOURCE = """\
int main() {
  // [excerpt:loop]
  for (;;) {
    // [excerpt:inner]
    step();
    // [/excerpt:inner]
  }
  // [/excerpt:loop]
}
"""

SUMMARY = """\
# Benchmark: throughput, 2026-01-01 10:00:00 to 10:05:00 UTC

- Machine: Test box, 2 CPUs
- Kernel: 6.1.0
- Commit: abc1234; servers built in build (Release)
- Command: `benchmark/benchmark.sh -r 3`
- Repetitions: 3 per server and concurrency; medians

| server | c | req/s | spread |
|---|---:|---:|---:|
| 01-blocking-single | 1 | 800 | 2.0% |
| 01-blocking-single | 10 | 810 | 1.0% |
| 05-epoll | 10 | 7000 | 5.0% |
| nginx (reference) | 10 | 9000 | 9.0% |

Warnings:
- the CPUs are busy

Columns are explained in benchmark/README.md.
"""


# --mode latency writes two tables, the knee's right below the first (no blank line between them).
LATENCY = """\
# Benchmark: latency, 2026-01-01 11:00:00 to 11:09:00 UTC

- Machine: Test box, 2 CPUs
- Command: `benchmark/benchmark.sh --mode latency 05`

| server | offered req/s | p99 ms | check |
|---|---:|---:|---|
| 05-epoll | 1000 | 1.50 | ok |
| 05-epoll | 2000 | 40.00 | ok |
| server | knee: req/s with p99 under 10 ms | p99 there, ms | next rate | p99 there, ms |
|---|---:|---:|---:|---:|
| 05-epoll | 1000 | 1.50 | 2000 | 40.00 |
"""

LATENCY_WARNINGS = """\
# Benchmark: latency, 2026-01-01 11:00:00 to 11:09:00 UTC

- Machine: Test box, 2 CPUs
- Command: `benchmark/benchmark.sh --mode latency 01 05`

| server | offered req/s | p99 ms | check |
|---|---:|---:|---|
| 01-blocking-single | 800 | 3.00 | ok |
| 05-epoll | 1000 | 1.50 | ok |
| 05-epoll | 2000 | 40.00 | ok |
| nginx (reference) | 2000 | 2.00 | ok |

Warnings:
- the CPUs are 20 % busy with other work before the run: expect noisy, lower numbers
- 05-epoll at 2000 req/s: openloop fell behind its schedule
- nginx at 2000 req/s: openloop fell behind its schedule
"""

IDLE = """\
# Benchmark: idle, 2026-01-01 12:00:00 to 12:30:00 UTC

- Machine: Test box, 2 CPUs
- Command: `benchmark/benchmark.sh --mode idle 05 03`

| server | idle conns | keep-alive | c | req/s |
|---|---:|---|---:|---:|
| 05-epoll | 0 | no | 10 | 7000 |
| 05-epoll | 0 | yes | 10 | 20000 |
| 05-epoll | 1000 | no | 10 | 6900 |
| 05-epoll | 5000 | no | 10 | 6800 |
| 03-select | 0 | no | 10 | 6000 |
| 03-select | 1000 | no | 10 | 5000 |
"""


# raw.csv: every run. 01 at c = 10 is the one to check: runs of 900, 800 and 810 req/s.
RAW = """\
server,concurrency,repetition,requests_per_s,cpu_us_per_req,check
01-blocking-single,10,1,900.00,80.0,ok
01-blocking-single,100,1,830.00,90.0,ok
05-epoll,10,1,7000.00,60.0,ok
05-epoll,100,1,10000.00,50.0,ok
nginx,100,1,13000.00,40.0,ok
01-blocking-single,10,2,800.00,82.0,ok
01-blocking-single,100,2,840.00,91.0,ok
05-epoll,10,2,6500.00,61.0,ok
05-epoll,100,2,11000.00,52.0,ok
nginx,100,2,12000.00,41.0,ok
01-blocking-single,10,3,810.00,81.0,ok
01-blocking-single,100,3,835.00,95.0,ok
05-epoll,10,3,7200.00,62.0,ok
05-epoll,100,3,10500.00,51.0,ok
nginx,100,3,12500.00,n/a,ok
"""


class SyncTest(ScratchFiles, unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        self.write("05-epoll/main.cpp", SOURCE)
        self.write("benchmark/results/R1/summary.md", SUMMARY)
        self.write("benchmark/results/R1/plot.svg", "<svg/>")
        self.write("README.md", "# Top\n\n## Quick start\n\nSee [the course](docs/README.md).\n")
        self.write("docs/README.md", "# Contents\n\n[00](00-intro.md) [01](01-one.md) [02](02-two.md)\n")
        self.write("docs/00-intro.md", "# 00 · Intro\n\n<!-- nav -->\n")
        self.write("docs/01-one.md", "# 01 · One\n\n<!-- nav -->\n\n## A heading, with `code` & more\n")
        self.write("docs/02-two.md", "# 02 · Two\n\n<!-- nav -->\n")

    def tearDown(self):
        self.tmp.cleanup()

    def run_sync(self, *args, fresh=True):
        """sync.main on the scratch repository. fresh: first give every results folder without a fingerprints.json
        one of today's code, so that the blocks carry no note on older code (the scratch tree is no git clone)."""
        results = os.path.join(self.root, "benchmark", "results")
        for run in sorted(os.listdir(results)) if fresh and os.path.isdir(results) else []:
            recorded = os.path.join(results, run, "fingerprints.json")
            if os.path.isdir(os.path.dirname(recorded)) and not os.path.exists(recorded):
                self.write(f"benchmark/results/{run}/fingerprints.json",
                           json.dumps(fingerprint.fingerprints(self.root)))
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = sync.main(["--root", self.root, *args])
        return code, out.getvalue() + err.getvalue()

    def test_excerpt_is_generated_then_checked_then_goes_stale(self):
        self.write("docs/03-x.md", "# 03\n\n[02](02-two.md)\n\n<!-- excerpt: 05-epoll/main.cpp#loop -->\n")
        code, report = self.run_sync("--check")
        self.assertEqual(code, 1)
        self.assertIn("was never generated", report)
        code, report = self.run_sync()
        self.assertEqual(code, 0, report)
        text = self.read("docs/03-x.md")
        self.assertIn("```cpp\nfor (;;) {\n  step();\n}\n```", text)  # de-indented, nested markers dropped
        self.assertIn("<!-- /excerpt -->", text)
        self.assertEqual(self.run_sync("--check")[0], 0)
        self.write("05-epoll/main.cpp", SOURCE.replace("step();", "step(1);"))
        code, report = self.run_sync("--check")
        self.assertEqual(code, 1)
        self.assertIn("docs/03-x.md:5: stale block <!-- excerpt: 05-epoll/main.cpp#loop -->", report)
        self.assertEqual(self.run_sync()[0], 0)
        self.assertIn("step(1);", self.read("docs/03-x.md"))
        self.assertEqual(self.run_sync()[1].count("refreshed"), 0)  # idempotent

    def test_missing_marker_is_an_error(self):
        self.write("docs/README.md", "# C\n\n<!-- excerpt: 05-epoll/main.cpp#nope -->\n")
        code, report = self.run_sync("--check")
        self.assertEqual(code, 1)
        self.assertIn("no `[excerpt:nope]`", report)

    def test_results_rows_and_provenance(self):
        self.write("docs/README.md",
                   "# C\n\n<!-- results: benchmark/results/R1/summary.md rows=01,nginx c=10 -->\n<!-- /results -->\n")
        self.assertEqual(self.run_sync()[0], 0)
        text = self.read("docs/README.md")
        self.assertIn("- Command: `benchmark/benchmark.sh -r 3`", text)
        self.assertIn("| 01-blocking-single | 10 | 810 | 1.0% |", text)
        self.assertIn("| nginx (reference) | 10 | 9000 | 9.0% |", text)
        self.assertNotIn("| 01-blocking-single | 1 |", text)
        self.assertNotIn("05-epoll |", text)
        self.assertIn("- the CPUs are busy", text)

    def test_a_block_below_one_of_the_same_run_does_not_repeat_its_provenance(self):
        self.write("docs/README.md", "# C\n\n<!-- figure: benchmark/results/R1/plot.svg -->\n\n"
                   "<!-- results: benchmark/results/R1/summary.md rows=05 brief -->\n\nText.\n\n"
                   "<!-- results: benchmark/results/R1/summary.md rows=01 brief -->\n")
        self.assertEqual(self.run_sync()[0], 0)
        text = self.read("docs/README.md")
        self.assertIn("<!-- results: benchmark/results/R1/summary.md rows=05 brief -->\n"
                      "*The same run as the figure above.*", text)
        self.assertEqual(text.count("*Source: measured by"), 2, text)  # the figure's, and the block after the text

    def test_results_brief_columns_and_figure(self):
        self.write("docs/README.md",
                   "# C\n\n<!-- results: benchmark/results/R1/summary.md brief columns=\"server,req/s\" -->\n\n"
                   "<!-- figure: benchmark/results/R1/plot.svg -->\n")
        self.assertEqual(self.run_sync()[0], 0)
        text = self.read("docs/README.md")
        self.assertIn("| server | req/s |\n|---|---:|\n| 01-blocking-single | 800 |", text)
        self.assertIn("](../benchmark/results/R1/plot.svg)", text)
        self.assertIn("Linux 6.1.0", text)
        self.assertIn("3 repetitions", text)

    def test_unknown_row_prefix_is_an_error(self):
        self.write("docs/README.md", "# C\n\n<!-- results: benchmark/results/R1/summary.md rows=09 -->\n")
        code, report = self.run_sync("--check")
        self.assertEqual(code, 1)
        self.assertIn("no row starting with 09", report)

    def test_results_second_table(self):
        self.write("benchmark/results/R2/summary.md", LATENCY)
        self.write("docs/README.md", "# C\n\n<!-- results: benchmark/results/R2/summary.md brief -->\n\n"
                                     "<!-- results: benchmark/results/R2/summary.md brief table=2 -->\n")
        self.assertEqual(self.run_sync()[0], 0)
        first, second = self.read("docs/README.md").split("<!-- /results -->")[:2]
        self.assertIn("| 05-epoll | 2000 | 40.00 | ok |\n", first)
        self.assertNotIn("knee", first)
        self.assertIn("| server | knee: req/s with p99 under 10 ms | p99 there, ms | next rate | p99 there, ms |\n"
                      "|---|---:|---:|---:|---:|\n| 05-epoll | 1000 | 1.50 | 2000 | 40.00 |\n", second)
        self.assertNotIn("| ok |", second)
        # The same tables with a blank line between them.
        self.write("benchmark/results/R2/summary.md", LATENCY.replace("| server | knee", "\n| server | knee"))
        self.assertEqual(self.run_sync("--check")[0], 0)

    def test_results_warnings_about_a_row_follow_that_row(self):
        self.write("benchmark/results/R4/summary.md", LATENCY_WARNINGS)
        self.write("docs/README.md", "# C\n\n<!-- results: benchmark/results/R4/summary.md brief rows=01 -->\n\n"
                                     "<!-- results: benchmark/results/R4/summary.md brief rows=05,nginx -->\n")
        self.assertEqual(self.run_sync()[0], 0)
        first, second = self.read("docs/README.md").split("<!-- /results -->")[:2]
        self.assertIn("- the CPUs are 20 % busy", first)
        self.assertNotIn("fell behind", first)
        self.assertIn("- the CPUs are 20 % busy", second)
        self.assertIn("- 05-epoll: openloop fell behind its schedule at 2000 req/s (1 run)", second)
        self.assertIn("- nginx: openloop fell behind its schedule at 2000 req/s (1 run)", second)  # nginx (reference)

    def test_the_same_warning_at_several_rates_is_one_line(self):
        lines = sync.grouped_warnings([
            "05-epoll at 100 req/s: openloop fell behind its schedule (lag 2 ms): the latencies include it",
            "the CPUs are 20 % busy",
            "05-epoll at 300 req/s: openloop fell behind its schedule (lag 3 ms): the latencies include it",
            "05-epoll at 100 req/s: openloop fell behind its schedule (lag 1 ms): the latencies include it",
        ])
        self.assertEqual(lines, [
            "05-epoll: openloop fell behind its schedule at 100, 300 req/s (3 runs): the latencies include it",
            "the CPUs are 20 % busy",
        ])

    def test_results_table_that_is_not_there(self):
        self.write("benchmark/results/R2/summary.md", LATENCY)
        for option, message in (("table=3", "has 2 table(s), so no table 3"),
                                ("table=0", "expected the table's number")):
            self.write("docs/README.md", f"# C\n\n<!-- results: benchmark/results/R2/summary.md {option} -->\n")
            code, report = self.run_sync("--check")
            self.assertEqual(code, 1)
            self.assertIn(message, report)

    def test_results_where(self):
        self.write("benchmark/results/R3/summary.md", IDLE)
        self.write("docs/README.md", "# C\n\n<!-- results: benchmark/results/R3/summary.md rows=05 c=10 brief "
                                     "where=\"keep-alive=no; idle conns=0,1000\" columns=\"idle conns,req/s\" -->\n")
        self.assertEqual(self.run_sync()[0], 0)
        self.assertIn("| idle conns | req/s |\n|---:|---:|\n| 0 | 7000 |\n| 1000 | 6900 |\n<!-- /results -->",
                      self.read("docs/README.md"))

    def test_results_where_errors(self):
        self.write("benchmark/results/R3/summary.md", IDLE)
        for where, message in (("idle=0", "has no column idle (it has: server, idle conns,"),
                               ("idle conns=0,500", "has no row whose idle conns is 500"),
                               ("keep-alive", "`keep-alive` should be COLUMN=VALUE[,VALUE...]"),
                               ("keep-alive=yes;idle conns=1000", "no row of benchmark/results/R3/summary.md matches "
                                                                  "where=\"keep-alive=yes;idle conns=1000\"")):
            self.write("docs/README.md",
                       f"# C\n\n<!-- results: benchmark/results/R3/summary.md where=\"{where}\" -->\n")
            code, report = self.run_sync("--check")
            self.assertEqual(code, 1, where)
            self.assertIn(message, report)

    def chart(self, options, doc="docs/README.md"):
        """Writes a chart block into `doc`, runs the refresh, and returns (exit code, report)."""
        self.write("benchmark/results/R1/raw.csv", RAW)
        self.write(doc, f"# C\n\n<!-- chart: benchmark/results/R1/raw.csv {options} -->\n")
        return self.run_sync()

    def test_chart_median_min_max_and_groups(self):
        code, report = self.chart("y=requests_per_s rows=01,05 out=docs/charts/t.svg")
        self.assertEqual(code, 0, report)
        text, svg = self.read("docs/README.md"), self.read("docs/charts/t.svg")
        self.assertIn("![Bar chart, requests per second: 01-blocking-single, 05-epoll by concurrency; the median "
                      "of 3 runs, error bars from the lowest run to the highest](charts/t.svg)\n\n*Source: measured by "
                      "`benchmark/benchmark.sh -r 3`; 3 repetitions", text)
        self.assertIn("Linux 6.1.0", text)
        self.assertIn("<!-- /chart -->", text)
        # Each bar is the median of its runs, its error bar their min and max, grouped by the column that varies.
        self.assertIn("01-blocking-single at c = 10: median 810, min 800, max 900; "
                      "05-epoll at c = 10: median 7000, min 6500, max 7200; "
                      "01-blocking-single at c = 100: median 835, min 830, max 840;", svg)
        self.assertIn(">requests per second (median; error bars: min to max of 3 runs)</text>", svg)
        for label in (">c = 10</text>", ">c = 100</text>", ">01-blocking-single</text>", ">05-epoll</text>",
                      "<title>Bar chart, requests per second", 'fill="#ffffff"'):
            self.assertIn(label, svg)
        self.assertNotIn("nginx", svg)
        self.assertEqual(self.run_sync("--check")[0], 0)
        self.assertEqual(self.run_sync()[1].count("refreshed"), 0)  # idempotent

    def test_chart_leaves_out_a_run_measured_again(self):
        # A raw.csv with the disturbance columns: the run measured again (a disturbed 100 req/s) is not a bar's.
        raw = RAW.replace(",check\n", ",other_cpu_pct,steal_pct,disturbed,check\n", 1).replace(
            ",ok\n", ",1,0,no,ok\n") + "05-epoll,10,3,100.00,60.0,70,0,measured again,ok\n"
        self.write("benchmark/results/R1/raw.csv", raw)
        self.write("docs/README.md", "# C\n\n<!-- chart: benchmark/results/R1/raw.csv y=requests_per_s rows=05 "
                                     "out=docs/charts/t.svg -->\n")
        code, report = self.run_sync()
        self.assertEqual(code, 0, report)
        self.assertIn("05-epoll at c = 10: median 7000, min 6500, max 7200;", self.read("docs/charts/t.svg"))

    def test_median_of_an_even_count(self):
        self.assertEqual(sync.median([4.0, 1.0, 3.0, 2.0]), 2.5)
        self.assertEqual(sync.median([5.0]), 5.0)

    def test_chart_single_group_where_and_group(self):
        code, report = self.chart("y=requests_per_s where=\"concurrency=100\" out=docs/charts/t.svg alt=\"At c=100\"")
        self.assertEqual(code, 0, report)
        svg = self.read("docs/charts/t.svg")
        self.assertIn("<desc>01-blocking-single: median 835, min 830, max 840; 05-epoll: median 10500, min 10000, "
                      "max 11000; nginx: median 12500, min 12000, max 13000.</desc>", svg)
        self.assertNotIn("c = 100", svg)  # one bar per server, named under it
        self.assertIn("![At c=100](charts/t.svg)", self.read("docs/README.md"))
        code, report = self.chart("y=requests_per_s where=\"concurrency=100\" group=concurrency out=docs/charts/t.svg")
        self.assertEqual(code, 0, report)
        self.assertIn(">c = 100</text>", self.read("docs/charts/t.svg"))

    def test_chart_svg_is_checked_like_a_block(self):
        self.assertEqual(self.chart("y=cpu_us_per_req rows=01 out=docs/charts/t.svg")[0], 0)
        self.write("benchmark/results/R1/raw.csv", RAW.replace("810.00,81.0", "810.00,99.0"))
        code, report = self.run_sync("--check")
        self.assertEqual(code, 1)
        self.assertIn("docs/README.md:3: stale block <!-- chart: benchmark/results/R1/raw.csv y=cpu_us_per_req rows=01 "
                      "out=docs/charts/t.svg --> its chart docs/charts/t.svg differs from what its source gives now",
                      report)
        self.assertNotIn("median 82.0, min 80.0, max 99.0", self.read("docs/charts/t.svg"))  # --check wrote nothing
        self.assertEqual(self.run_sync()[0], 0)
        self.assertIn("median 82.0, min 80.0, max 99.0", self.read("docs/charts/t.svg"))
        os.remove(os.path.join(self.root, "docs/charts/t.svg"))
        code, report = self.run_sync("--check")
        self.assertEqual(code, 1)
        self.assertIn("its chart docs/charts/t.svg does not exist yet", report)

    def test_chart_under_a_table_of_its_run_does_not_repeat_the_provenance(self):
        self.write("benchmark/results/R1/raw.csv", RAW)
        table = "<!-- results: benchmark/results/R1/summary.md brief -->\n"
        chart = "<!-- chart: benchmark/results/R1/raw.csv y=requests_per_s out=docs/charts/t.svg -->\n"
        self.write("docs/README.md", "# C\n\n" + table + "\n" + chart)
        self.assertEqual(self.run_sync()[0], 0)
        text = self.read("docs/README.md")
        self.assertIn("*The same run as the table above.*", text)
        self.assertEqual(text.count("Everything about the run"), 1)
        self.write("docs/README.md", "# C\n\n" + table + "\nA sentence between them.\n\n" + chart)
        self.assertEqual(self.run_sync()[0], 0)
        self.assertEqual(self.read("docs/README.md").count("Everything about the run"), 2)

    def test_chart_is_the_same_bytes_every_time(self):
        self.assertEqual(self.chart("y=requests_per_s out=docs/charts/t.svg")[0], 0)
        first = self.read("docs/charts/t.svg")
        lines = sync.render_chart(self.root, "docs/README.md", "benchmark/results/R1/raw.csv y=requests_per_s "
                                                               "out=docs/charts/t.svg")
        self.assertEqual(lines.files, {"docs/charts/t.svg": first})
        self.assertTrue(first.startswith("<svg ") and first.endswith("</svg>\n"))
        numbers = re.findall(r'(?:x|y|width|height)="(-?[0-9.]+)"', first)
        self.assertTrue(numbers)
        self.assertTrue(all(re.fullmatch(r"-?\d+(\.\d)?", n) for n in numbers), numbers)

    def test_chart_marks_a_point_not_run(self):
        self.write("benchmark/results/R1/raw.csv", RAW + "nginx,10,1,n/a,n/a,not run: it held 3 of 10\n")
        self.write("docs/README.md", "# C\n\n<!-- chart: benchmark/results/R1/raw.csv y=requests_per_s rows=05,nginx "
                                     "out=docs/charts/t.svg -->\n")
        code, report = self.run_sync()
        self.assertEqual(code, 0, report)
        svg = self.read("docs/charts/t.svg")
        self.assertIn("05-epoll at c = 10: median 7000, min 6500, max 7200; nginx at c = 10: not run; ", svg)
        self.assertIn(">not run</text>", svg)
        self.write("docs/README.md", "# C\n\n<!-- chart: benchmark/results/R1/raw.csv y=requests_per_s rows=nginx "
                                     "where=\"concurrency=10\" out=docs/charts/t.svg -->\n")
        code, report = self.run_sync("--check")
        self.assertEqual(code, 1)
        self.assertIn("no selected row of benchmark/results/R1/raw.csv was run", report)

    def test_chart_errors(self):
        for options, message in (
                ("y=nope out=docs/charts/t.svg",
                 "benchmark/results/R1/raw.csv has no measured column nope (it has: requests_per_s, cpu_us_per_req, "
                 "check)"),
                ("y=requests_per_s", "chart: out=(nothing) should be a repository path ending in .svg"),
                ("y=requests_per_s out=../t.svg", "chart: out=../t.svg should be a repository path"),
                ("y=requests_per_s rows=09 out=docs/charts/t.svg", "has no row starting with 09"),
                ("y=requests_per_s where=\"concurrency=7\" out=docs/charts/t.svg", "has no row whose concurrency is 7"),
                ("y=requests_per_s rows=nginx where=\"concurrency=10\" out=docs/charts/t.svg",
                 "no row of benchmark/results/R1/raw.csv matches rows=nginx where=concurrency=10"),
                ("y=cpu_us_per_req rows=nginx out=docs/charts/t.svg",
                 "the cpu_us_per_req of nginx, 100, 3 is `n/a`, not a number"),
                ("y=requests_per_s group=check out=docs/charts/t.svg",
                 "group=check: benchmark/results/R1/raw.csv has no such column identifying a row")):
            code, report = self.chart(options)
            self.assertEqual(code, 1, options)
            self.assertIn(message, report)
        self.write("benchmark/results/R5/raw.csv", "server,file,connections,repetition,requests_per_s\n"
                                                   "05-epoll,a,1,1,5\n05-epoll,b,2,1,6\n")
        self.write("docs/README.md", "# C\n\n<!-- chart: benchmark/results/R5/raw.csv y=requests_per_s "
                                     "out=docs/charts/t.svg -->\n")
        code, report = self.run_sync("--check")
        self.assertEqual(code, 1)
        self.assertIn("vary in file, connections, and a chart groups its bars by one column: fix the others with "
                      "where= (e.g. where=\"connections=1\")", report)

    def test_markers_in_code_fences_are_text(self):
        self.write("docs/README.md", "# C\n\n```\n<!-- excerpt: nowhere/x.cpp#y -->\n```\n")
        code, report = self.run_sync("--check")
        self.assertEqual(self.run_sync()[0], 0, report)
        self.assertEqual(self.read("docs/README.md"), "# C\n\n```\n<!-- excerpt: nowhere/x.cpp#y -->\n```\n")

    def test_links_and_anchors(self):
        self.assertEqual(self.run_sync()[0], 0)
        self.write("docs/README.md", textwrap.dedent("""\
            # C

            [ok](01-one.md#a-heading-with-code--more) [ok](../README.md#quick-start) [ok](#c)
            [dir](../05-epoll/) [line](../05-epoll/main.cpp#L2-L4) [web](https://example.com/x#y)
            [bad file](04-none.md) [bad anchor](01-one.md#nope) `[in code](nowhere.md)`
            """))
        code, report = self.run_sync("--check")
        self.assertEqual(code, 1)
        self.assertIn("broken link `04-none.md`", report)
        self.assertIn("#nope in docs/01-one.md", report)
        self.assertEqual(report.count("docs/README.md:"), 2, report)

    def test_chapters_link_to_previous_and_next(self):
        self.assertEqual(self.run_sync()[0], 0)
        self.assertIn("[← 00 · Intro](00-intro.md) · [Contents](README.md) · [02 · Two →](02-two.md)",
                      self.read("docs/01-one.md"))
        self.write("docs/02-two.md", "# 02 · Two\n\nNo links.\n")
        code, report = self.run_sync("--check")
        self.assertEqual(code, 1)
        self.assertIn("docs/02-two.md: does not link to the previous chapter, docs/01-one.md", report)


    # ---------------------------------------------------------------------------------------- freshness of runs

    def test_a_run_of_older_code_needs_its_note(self):
        self.write("docs/README.md", "# C\n\n<!-- results: benchmark/results/R1/summary.md rows=05,nginx -->\n")
        self.assertEqual(self.run_sync()[0], 0)
        self.assertNotIn("Measured on", self.read("docs/README.md"))
        # The run measured other code: the check fails until the block says so, and passes once it does.
        self.write("benchmark/results/R1/fingerprints.json", '{"05-epoll": "0123456789abcdef"}')
        code, report = self.run_sync("--check")
        self.assertEqual(code, 1, report)
        self.assertIn("docs/README.md:3: stale block", report)
        self.assertIn("its run measured older code than today's, and the block does not say so yet", report)
        self.assertEqual(self.run_sync()[0], 0)
        note = ("> Measured on an earlier version of 05-epoll than the code in this repository; re-measure: "
                "`./benchmark/benchmark.sh -r 3`.")
        self.assertIn("- Repetitions: 3 per server and concurrency; medians\n\n" + note + "\n\n| server |",
                      self.read("docs/README.md"))
        self.assertEqual(self.run_sync("--check")[0], 0)
        code, report = self.run_sync("--stale")
        self.assertEqual(code, 0)
        self.assertIn("benchmark/results/R1: 05-epoll\n  re-measure: ./benchmark/benchmark.sh -r 3\n"
                      "  docs/README.md:3 (05-epoll)", report)
        # A note that no longer holds (the run was re-measured, or the code went back) fails the check too.
        os.remove(os.path.join(self.root, "benchmark/results/R1/fingerprints.json"))
        code, report = self.run_sync("--check")
        self.assertEqual(code, 1, report)
        self.assertIn("today's code is what the run measured", report)
        self.assertEqual(self.run_sync()[0], 0)
        self.assertNotIn("Measured on", self.read("docs/README.md"))
        self.assertIn("No stale citations", self.run_sync("--stale")[1])

    def test_only_the_servers_a_block_shows_count(self):
        self.write("03-select/main.cpp", "int main() { return 3; }\n")
        self.write("docs/README.md", "# C\n\n<!-- results: benchmark/results/R1/summary.md rows=05 brief -->\n\n"
                   "<!-- figure: benchmark/results/R1/plot.svg -->\n")
        self.write("benchmark/results/R1/fingerprints.json",
                   json.dumps(dict(fingerprint.fingerprints(self.root), **{"01-blocking-single": "old"})))
        self.assertEqual(self.run_sync()[0], 0)
        text = self.read("docs/README.md")
        self.assertEqual(text.count("Measured on"), 1, text)  # the figure shows 01, which is no longer here
        self.assertIn("*\n\n> Measured on an earlier version of 01-blocking-single than", text)

    def test_a_run_without_a_usable_commit_counts_as_stale(self):
        self.write("benchmark/results/R1/summary.md", SUMMARY.replace("abc1234;", "abc1234-dirty;"))
        self.write("docs/README.md", "# C\n\n<!-- results: benchmark/results/R1/summary.md rows=05 brief -->\n")
        self.assertEqual(self.run_sync(fresh=False)[0], 0)
        self.assertIn("> Measured on code this repository cannot identify (commit abc1234-dirty: the run measured "
                      "uncommitted changes), not necessarily today's 05-epoll; re-measure:",
                      self.read("docs/README.md"))

    @unittest.skipUnless(shutil.which("git"), "needs git")
    def test_a_run_that_records_only_its_commit_is_read_with_git(self):
        def git(*args):
            return subprocess.run(["git", "-C", self.root, "-c", "user.name=t", "-c", "user.email=t@t", *args],
                                  check=True, capture_output=True, text=True).stdout.strip()
        git("init", "-q")
        git("add", "05-epoll")
        git("commit", "-q", "-m", "x")
        self.write("benchmark/results/R1/summary.md", SUMMARY.replace("abc1234", git("rev-parse", "--short", "HEAD")))
        self.write("docs/README.md", "# C\n\n<!-- results: benchmark/results/R1/summary.md rows=05 brief -->\n")
        self.assertEqual(self.run_sync(fresh=False)[0], 0)
        self.assertNotIn("Measured on", self.read("docs/README.md"))
        self.write("05-epoll/main.cpp", SOURCE.replace("{\n", "{  // a comment, and more spaces\n", 1))
        self.assertEqual(self.run_sync("--check", fresh=False)[0], 0)  # a comment changes no code
        self.write("05-epoll/main.cpp", SOURCE.replace("step();", "step(1);"))
        self.assertEqual(self.run_sync("--check", fresh=False)[0], 1)
        self.assertEqual(self.run_sync(fresh=False)[0], 0)
        self.assertIn("> Measured on an earlier version of 05-epoll", self.read("docs/README.md"))
        self.write("benchmark/results/R1/summary.md", SUMMARY.replace("abc1234", "0" * 40))
        code, report = self.run_sync("--check", fresh=False)
        self.assertEqual(code, 1)
        self.assertIn("is not in this repository", report)

    def test_without_git_the_check_says_so_in_one_sentence(self):
        self.write("docs/README.md", "# C\n\n<!-- results: benchmark/results/R1/summary.md rows=05 brief -->\n")
        path = os.environ.get("PATH", "")
        os.environ["PATH"] = os.path.join(self.root, "no-such-folder")
        try:
            code, report = self.run_sync("--check", fresh=False)
        finally:
            os.environ["PATH"] = path
        self.assertEqual(code, 1)
        self.assertEqual(report.strip().count("\n"), 0, report)
        self.assertIn("git is not installed", report)

    def test_an_inline_value_reads_its_run_and_says_when_the_code_changed(self):
        marker = "<!-- value: benchmark/results/R1/summary.md rows=05 c=10 col=req/s -->"
        self.write("docs/README.md", f"# C\n\n05 makes {marker}6000<!-- /value --> req/s at c = 10.\n")
        code, report = self.run_sync("--check")
        self.assertEqual(code, 1)
        self.assertIn("docs/README.md:3: stale block <!-- value: benchmark/results/R1/summary.md rows=05 c=10 "
                      "col=req/s --> shows `6000` where its run now gives `7000`", report)
        self.assertEqual(self.run_sync()[0], 0)
        self.assertIn(f"05 makes {marker}7000<!-- /value --> req/s", self.read("docs/README.md"))
        self.assertEqual(self.run_sync("--check")[0], 0)
        self.write("benchmark/results/R1/fingerprints.json", '{"05-epoll": "0123456789abcdef"}')
        self.assertEqual(self.run_sync("--check")[0], 1)
        self.assertEqual(self.run_sync()[0], 0)
        self.assertIn(f"{marker}7000 <sup>(measured on older 05 code)</sup><!-- /value -->",
                      self.read("docs/README.md"))
        self.assertIn("docs/README.md:3 (05-epoll)", self.run_sync("--stale")[1])
        self.write("docs/README.md", "# C\n\n<!-- value: benchmark/results/R1/summary.md c=10 col=req/s -->"
                                     "<!-- /value -->\n\nIn code: `<!-- value: nowhere.md col=x --><!-- /value -->`.\n")
        code, report = self.run_sync("--check")
        self.assertEqual(code, 1)
        self.assertIn("3 rows of benchmark/results/R1/summary.md match c=10: a value needs exactly one", report)
        self.assertIn("docs/README.md:3: a line that starts with a value marker starts an HTML block", report)
        self.assertNotIn("nowhere.md", report)

    def test_a_trimmed_excerpt_is_checked_line_by_line_against_its_file(self):
        block = "```cpp\nint main() {\n  ...\n    step();\n}\n```\n"
        self.write("docs/README.md", f"# C\n\n<!-- excerpt: 05-epoll/main.cpp trimmed -->\n{block}<!-- /excerpt -->\n")
        self.assertEqual(self.run_sync()[0], 0)
        self.assertIn("Trimmed from [`05-epoll/main.cpp`]", self.read("docs/README.md"))
        self.assertEqual(self.run_sync("--check")[0], 0)
        self.write("05-epoll/main.cpp", SOURCE.replace("step();", "step(1);"))
        code, report = self.run_sync("--check")
        self.assertEqual(code, 1)
        self.assertIn("the trimmed excerpt's line `step();` is not in 05-epoll/main.cpp", report)

    def test_an_inline_value_reads_a_csv_file_of_its_run(self):
        self.write("benchmark/results/R1/counters.csv", "server,concurrency,counters,cpu_us_per_req\n"
                                                        "05-epoll,10,perf stat,7.5\n05-epoll,10,none,7.4\n")
        marker = '<!-- value: benchmark/results/R1/counters.csv where="counters=none" col=cpu_us_per_req -->'
        self.write("docs/README.md", f"# C\n\nWithout counters, {marker}<!-- /value --> µs.\n")
        self.assertEqual(self.run_sync()[0], 0)
        self.assertIn(f"{marker}7.4<!-- /value --> µs", self.read("docs/README.md"))
        self.write("docs/README.md", "# C\n\n<!-- value: benchmark/results/R1/counters.csv col=cpu_us_per_req -->"
                                     "<!-- /value -->\n")
        code, report = self.run_sync("--check")
        self.assertEqual(code, 1)
        self.assertIn("2 rows of benchmark/results/R1/counters.csv match", report)

    def test_fingerprints_ignore_comments_and_whitespace_only(self):
        before = fingerprint.fingerprints(self.root)["05-epoll"]
        self.write("05-epoll/main.cpp", "/* a new header */\n" + SOURCE.replace("step();", "step( ) ;  // why"))
        self.assertEqual(fingerprint.fingerprints(self.root)["05-epoll"], before)
        self.write("common/net.hpp", "// only a comment\n")
        changed = fingerprint.fingerprints(self.root)["05-epoll"]
        self.assertNotEqual(changed, before)  # a new file of common/ is new code for every server
        self.write("05-epoll/main.cpp", SOURCE.replace("step();", "step(2);"))
        self.assertNotEqual(fingerprint.fingerprints(self.root)["05-epoll"], changed)

    def test_the_tokenizer_keeps_string_and_character_literals(self):
        tokens = fingerprint.code_tokens
        self.assertEqual(tokens('f("http://x y"); // z\nchar c = \'/\'; /* w */ a / b;'),
                         'f("http://x y");charc=\'/\';a/b;')
        self.assertNotEqual(tokens('s = "a // b";'), tokens('s = "a";'))
        self.assertEqual(tokens('s = R"d(x // "y")d"; // z'), 's=R"d(x // "y")d";')
        self.assertEqual(tokens("n = 1'000'000; // it's"), "n=1'000'000;")
        self.assertEqual(tokens('c = \'"\'; // "'), "c='\"';")

if __name__ == "__main__":
    unittest.main()
