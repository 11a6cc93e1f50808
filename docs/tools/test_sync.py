#!/usr/bin/env python3
"""Tests of sync.py on a scratch repository: `python3 docs/tools/test_sync.py` (CTest: docs_sync_tool)."""

import contextlib
import io
import os
import tempfile
import textwrap
import sys
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import sync  # noqa: E402

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


class SyncTest(unittest.TestCase):
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

    def write(self, path, text):
        full = os.path.join(self.root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(text)

    def read(self, path):
        with open(os.path.join(self.root, path), encoding="utf-8") as f:
            return f.read()

    def run_sync(self, *args):
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


if __name__ == "__main__":
    unittest.main()
