"""Unit tests of driver/analyse.py: python3 -m unittest -v test_analyse (from benchmark/; CTest: benchmark_analyser).

The parsing tests read real ab and wrk outputs from testdata/ (its README.md says where each comes from). The
last tests run the analyser over the committed folders of benchmark/results/: their raw.csv must summarize to the
figures of their summary.csv (written today in plainer numbers: 1 where the old awk wrote 1.00), and their
summary.csv must give the very table rows of their summary.md and their plot.dat. Old summaries are not rewritten.
"""

import os
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

from driver import analyse

HERE = os.path.dirname(os.path.abspath(__file__))
TESTDATA = os.path.join(HERE, "testdata")
RESULTS = os.path.join(HERE, "results")


def sample(name):
    return analyse.read_text(os.path.join(TESTDATA, name))


def csv_lines(text):
    """A CSV written in a test as an indented block -> its rows."""
    return analyse.parse_rows("\n".join(line.strip() for line in text.strip().split("\n")))


def text_lines(rows):
    """Rows -> the lines of their CSV text (as summary.csv holds them)."""
    return analyse.csv_text(rows).rstrip("\n").split("\n")


# ---- Numbers ---------------------------------------------------------------------------------------------------


class NumbersTest(unittest.TestCase):
    def test_a_cell_is_a_figure_or_none(self):
        self.assertEqual(analyse.number("1.293"), 1.293)
        self.assertEqual(analyse.number(12), 12.0)
        for text in ("12 ms", "n/a", "n/a (perf missing)", "", None, "nan"):
            self.assertIsNone(analyse.number(text), text)

    def test_a_number_is_written_plainly(self):
        self.assertEqual(analyse.number_text(3112.0), "3112")          # whole: no decimals
        self.assertEqual(analyse.number_text(1.294), "1.294")
        self.assertEqual(analyse.number_text(1048900.0), "1048900")    # never 1.0489e+06
        self.assertEqual(analyse.number_text(1048900.5), "1048900.5")
        self.assertEqual(analyse.number_text(1 / 3), "0.333333")       # 6 decimals at most
        self.assertEqual(analyse.cell_text(None), "n/a")
        self.assertEqual(analyse.cell_text("n/a (perf missing)"), "n/a (perf missing)")

    def test_ratio(self):
        self.assertEqual(analyse.ratio(3, 2), 1.5)
        self.assertEqual(analyse.ratio(1000000, "3", 1), 333333.3)
        self.assertIsNone(analyse.ratio(None, 2))
        self.assertIsNone(analyse.ratio(5, "n/a"))
        self.assertIsNone(analyse.ratio(5, 0))
        self.assertIsNone(analyse.ratio("", 4))

    def test_csv_both_ways_with_ordinary_quoting(self):
        rows = [["server", "check"], ["05-epoll", "FAILED: Failed requests: 2, Non-2xx: 1"], ["nginx", 'a "b"']]
        text = analyse.csv_text(rows)
        self.assertEqual(text, 'server,check\n05-epoll,"FAILED: Failed requests: 2, Non-2xx: 1"\nnginx,"a ""b"""\n')
        self.assertEqual(analyse.parse_rows(text), rows)


# ---- parse -----------------------------------------------------------------------------------------------------


class ParseAbTest(unittest.TestCase):
    """The values are those benchmark.sh's awk (parse_output, ab_field) read from the same files."""

    def test_without_keepalive(self):
        self.assertEqual(analyse.parse_ab(sample("ab-nginx-c10.out")), {
            "complete": 10000, "failed": 0, "non2xx": 0, "rps": 11862.96, "mean_ms": 0.843,
            "p99_ms": None, "doc_length": 1024, "bytes_read": None, "mib_per_s": None})  # no -e file

    def test_with_keepalive(self):
        figures = analyse.parse_ab(sample("ab-keepalive-warmup.out"))
        self.assertEqual((figures["complete"], figures["failed"], figures["rps"], figures["mean_ms"]),
                         (1000, 0, 51912.99, 0.019))  # "Keep-Alive requests:" is not "Complete requests:"

    def test_p99_comes_from_the_percentile_file(self):
        figures = analyse.parse_ab(sample("ab-05-c10.out"), sample("ab-05-c10.percentiles.csv"))
        self.assertEqual(figures["p99_ms"], 1.337)  # where ab's own table says "99%      1"
        self.assertEqual((figures["complete"], figures["rps"], figures["mean_ms"]), (2000, 13973.21, 0.716))

    def test_a_failed_run(self):
        figures = analyse.parse_ab(sample("ab-failed.out"), sample("ab-failed.percentiles.csv"))
        self.assertEqual(figures, {
            "complete": 300, "failed": 60, "non2xx": 100, "rps": 2101.55, "mean_ms": 1.428,
            "p99_ms": 3.672, "doc_length": 1024, "bytes_read": None, "mib_per_s": None})

    def test_no_output(self):
        # ab did not run: nothing complete, failed unknown (the check fails), no Document Length at all.
        self.assertEqual(analyse.parse_ab("apr_socket_connect(): Connection refused (111)\n"), {
            "complete": 0, "failed": None, "non2xx": 0, "rps": None, "mean_ms": None, "p99_ms": None,
            "doc_length": None, "bytes_read": None, "mib_per_s": None})


class ParseWrkTest(unittest.TestCase):
    def test_the_lua_line(self):
        self.assertEqual(analyse.parse_wrk(sample("wrk-05-c10.out")), {
            "complete": 89489, "failed": 0, "non2xx": 0, "rps": 89442.58, "mean_ms": 0.122,
            "p99_ms": 1.129, "doc_length": None, "bytes_read": 104254685, "mib_per_s": 99.4})

    def test_socket_errors_and_non2xx(self):
        figures = analyse.parse_wrk(sample("wrk-errors.out"))
        self.assertEqual((figures["complete"], figures["failed"], figures["non2xx"]), (126, 21, 41))
        self.assertEqual((figures["mean_ms"], figures["p99_ms"]), (87.925, 344.041))

    def test_the_lua_line_agrees_with_wrks_own_summary(self):
        # The same numbers as wrk's human summary, to its rounding: req/s exactly, latencies to 0.01 of a unit.
        for name, human in (("wrk-05-c10.out", (89489, 89442.58, "0.12201", "1.13", 0, 0)),
                            ("wrk-errors.out", (126, 62.94, "87.93", "344.04", 21, 41))):
            figures = analyse.parse_wrk(sample(name))
            complete, rps, mean_ms, p99_ms, failed, non2xx = human
            self.assertEqual((figures["complete"], figures["rps"]), (complete, rps), name)
            self.assertAlmostEqual(float(figures["mean_ms"]), float(mean_ms), delta=0.006, msg=name)
            self.assertAlmostEqual(float(figures["p99_ms"]), float(p99_ms), delta=0.006, msg=name)
            self.assertEqual((figures["failed"], figures["non2xx"]), (failed, non2xx), name)

    def test_without_the_lua_line_nothing_is_read_from_the_rounded_text(self):
        self.assertEqual(analyse.parse_wrk(sample("wrk-without-lua.out")), analyse.DEFAULTS)

    def test_an_incomplete_lua_line_counts_as_none(self):
        self.assertIsNone(analyse.wrk_totals("psp-wrk: requests=10 bytes=100\n"))

    def test_a_zero_duration_gives_no_rate(self):
        line = ("psp-wrk: requests=0 bytes=0 duration_us=0 connect_errors=3 read_errors=0 write_errors=0"
                " timeout_errors=0 status_errors=0 latency_mean_us=0.000 latency_p99_us=0\n")
        figures = analyse.parse_wrk(line)
        self.assertEqual((figures["complete"], figures["failed"], figures["rps"], figures["mib_per_s"]),
                         (0, 3, None, None))


class ParseCommandTest(unittest.TestCase):
    def run_analyser(self, *args):
        return subprocess.run([sys.executable, "-m", "driver.analyse", *args], capture_output=True, cwd=HERE,
                              text=True, check=True).stdout

    def test_one_line_of_key_value_in_a_fixed_order(self):
        out = self.run_analyser("parse", "ab", os.path.join(TESTDATA, "ab-failed.out"),
                                "--percentiles", os.path.join(TESTDATA, "ab-failed.percentiles.csv"))
        self.assertEqual(out, "complete=300 failed=60 non2xx=100 rps=2101.55 mean_ms=1.428 p99_ms=3.672"
                              " doc_length=1024 bytes_read=n/a mib_per_s=n/a\n")

    def test_a_missing_percentile_file_is_no_error(self):
        out = self.run_analyser("parse", "ab", os.path.join(TESTDATA, "ab-nginx-c10.out"),
                                "--percentiles", os.path.join(TESTDATA, "no-such-file.csv"))
        self.assertIn(" p99_ms=n/a ", out)


# ---- summarize -----------------------------------------------------------------------------------------------


class MedianTest(unittest.TestCase):
    def test_odd_count_the_middle_value(self):
        self.assertEqual(analyse.median(["3.00", "1.00", "2.00"]), 2.0)
        self.assertEqual(analyse.median(["10", "9", "100"]), 10.0)  # sorted as numbers, not as text
        self.assertEqual(analyse.median(["7.5"]), 7.5)

    def test_even_count_the_mean_of_the_middle_two(self):
        self.assertEqual(analyse.number_text(analyse.median(["1.295", "1.293"])), "1.294")
        self.assertEqual(analyse.number_text(analyse.median(["4", "1", "3", "2"])), "2.5")
        self.assertEqual(analyse.number_text(analyse.median(["3112", "3112"])), "3112")
        self.assertEqual(analyse.number_text(analyse.median(["1048576", "1049224"])), "1048900")

    def test_not_a_figure(self):
        self.assertIsNone(analyse.median(["n/a", "n/a", "n/a"]))
        self.assertEqual(analyse.median(["n/a (perf missing)", "n/a (perf missing)"]), "n/a (perf missing)")
        self.assertIsNone(analyse.median([""]))
        # The median of the figures there are: a run without one does not count as 0.
        self.assertEqual(analyse.median(["5", "n/a", "7"]), 6.0)


THROUGHPUT_RAW = """
    server,concurrency,repetition,requests_per_s,mean_ms,p99_ms,complete,failed,non2xx,syscalls_per_req,check
    05-epoll,10,1,1000.5,1.0,2.0,100,0,0,n/a (perf missing),ok
    05-epoll,100,1,n/a,n/a,n/a,n/a,n/a,n/a,n/a,FAILED: 05-epoll did not start
    nginx,10,1,2000,0.5,1.0,100,0,0,n/a (perf missing),ok
    05-epoll,10,2,1200,1.2,2.5,100,2,1,n/a (perf missing),FAILED: Failed requests: 2;Non-2xx responses: 1
    05-epoll,100,2,n/a,n/a,n/a,n/a,n/a,n/a,n/a,FAILED: 05-epoll did not start
    nginx,10,2,3000,0.7,1.5,100,0,0,n/a (perf missing),ok
    05-epoll,10,3,900,0.9,2.2,100,0,0,n/a (perf missing),ok
    05-epoll,100,3,n/a,n/a,n/a,n/a,n/a,n/a,n/a,FAILED: 05-epoll did not start
    nginx,10,3,2500,0.6,1.2,100,0,0,n/a (perf missing),ok
"""


class SummarizeTest(unittest.TestCase):
    def summary(self, raw):
        return text_lines(analyse.summarize(csv_lines(raw)))

    def test_header(self):
        # The key columns, runs, the req/s group, failures in place of failed (non2xx and complete dropped).
        self.assertEqual(self.summary(THROUGHPUT_RAW)[0],
                         "server,concurrency,runs,requests_per_s,rps_min,rps_max,spread_pct,vs_nginx,mean_ms,p99_ms,"
                         "failures,syscalls_per_req,check")

    def test_rows_in_the_order_of_their_first_run(self):
        self.assertEqual([row.split(",")[:2] for row in self.summary(THROUGHPUT_RAW)[1:]],
                         [["05-epoll", "10"], ["05-epoll", "100"], ["nginx", "10"]])

    def test_spread_vs_nginx_failures_and_check(self):
        # 1000.5 is the median of 1000.5, 1200, 900; the spread (1200 - 900) / 1000.5 = 29.99 %; nginx's
        # median at c = 10 is 2500; failures: 2 failed + 1 non-2xx; one run of three failed its check.
        self.assertEqual(self.summary(THROUGHPUT_RAW)[1],
                         "05-epoll,10,3,1000.5,900,1200,30,0.4,1,2.2,3,n/a (perf missing),"
                         "FAILED: Failed requests: 2;Non-2xx responses: 1 (1 of 3 runs)")

    def test_a_row_that_never_ran(self):
        # Every run failed: the check without "(k of n runs)", and no figure (n/a adds no failure).
        self.assertEqual(self.summary(THROUGHPUT_RAW)[2],
                         "05-epoll,100,3,n/a,n/a,n/a,n/a,n/a,n/a,n/a,0,n/a,FAILED: 05-epoll did not start")

    def test_the_reference_row(self):
        self.assertEqual(self.summary(THROUGHPUT_RAW)[3],
                         "nginx,10,3,2500,2000,3000,40,1,0.6,1.2,0,n/a (perf missing),ok")

    def test_one_run_has_no_spread_and_no_nginx_no_ratio(self):
        summary = self.summary("""
            server,concurrency,repetition,requests_per_s,failed,non2xx,check
            05-epoll,10,1,1000,0,0,ok
        """)
        self.assertEqual(summary, ["server,concurrency,runs,requests_per_s,rps_min,rps_max,spread_pct,vs_nginx,"
                                   "failures,check", "05-epoll,10,1,1000,1000,1000,n/a,n/a,0,ok"])

    def test_an_even_count_of_runs(self):
        summary = self.summary("""
            server,concurrency,repetition,requests_per_s,mean_ms,peak_rss_kib,check
            05-epoll,10,1,1000.25,1.293,3112,ok
            05-epoll,10,2,1001.75,1.295,3112,ok
        """)
        self.assertEqual(summary[1], "05-epoll,10,2,1001,1000.25,1001.75,0.1,n/a,1.294,3112,ok")

    def test_any_key_columns_before_repetition(self):
        # A mode with more key columns: nginx's row must match every one of them for vs_nginx.
        summary = self.summary("""
            server,idle,keepalive,concurrency,repetition,requests_per_s,complete,failed,non2xx,check
            05-epoll,1000,no,10,1,800,10,0,0,ok
            05-epoll,1000,yes,10,1,3000,10,0,0,ok
            nginx,1000,no,10,1,1600,10,0,0,ok
            nginx,1000,yes,10,1,2000,10,0,0,ok
            nginx,0,yes,10,1,4000,10,0,0,ok
        """)
        self.assertEqual(summary, [
            "server,idle,keepalive,concurrency,runs,requests_per_s,rps_min,rps_max,spread_pct,vs_nginx,failures,check",
            "05-epoll,1000,no,10,1,800,800,800,n/a,0.5,0,ok",
            "05-epoll,1000,yes,10,1,3000,3000,3000,n/a,1.5,0,ok",
            "nginx,1000,no,10,1,1600,1600,1600,n/a,1,0,ok",
            "nginx,1000,yes,10,1,2000,2000,2000,n/a,1,0,ok",
            "nginx,0,yes,10,1,4000,4000,4000,n/a,1,0,ok",
        ])

    def test_no_repetition_column_is_an_error(self):
        with self.assertRaises(ValueError):
            analyse.summarize(csv_lines("server,connections,held,check\n05-epoll,1000,1000,ok"))


# ---- table -------------------------------------------------------------------------------------------------------


class CellTest(unittest.TestCase):
    def test_formats(self):
        cell = analyse.cell
        self.assertEqual(cell("nginx", "server"), "nginx (reference)")
        self.assertEqual(cell("05-epoll", "server"), "05-epoll")
        self.assertEqual(cell("12.5", "pct"), "12.5%")
        self.assertEqual(cell("n/a", "pct"), "–")
        self.assertEqual(cell("1.5", "ratio"), "1.50")
        self.assertEqual(cell("n/a", "ratio"), "–")
        self.assertEqual(cell("3380", "mib"), "3.3")
        self.assertEqual(cell("FAILED: Failed requests: 2", "text"), "FAILED: Failed requests: 2")
        self.assertEqual(cell("773.43", "%.0f"), "773")
        self.assertEqual(cell("0.48589", "%.3f"), "0.486")
        self.assertEqual(cell("8985.3", "%s"), "8985.3")
        self.assertEqual(cell("n/a (perf missing)", "%.1f"), "n/a (perf missing)")  # n/a is shown as it is
        self.assertEqual(cell("", "%.1f"), "")


class MarkdownTableTest(unittest.TestCase):
    SUMMARY = csv_lines("""
        server,concurrency,runs,requests_per_s,rps_min,rps_max,spread_pct,vs_nginx,mean_ms,p99_ms,failures,cpu_us_per_req,io_uring_threads_cpu_us_per_req,ctxsw_per_req,syscalls_per_req,peak_rss_kib,peak_threads,check
        05-epoll,100,3,106354.11,98321.45,110643.96,11.6,1.57,0.71361,4.44,0,8.2,0.0,0.09,2.3,3380,3,ok
        nginx,100,3,67744.05,62211.68,69733.35,11.1,1.00,1.23,6.89,0,15.6,0.0,0.56,n/a (perf missing),17596,3,ok
    """)

    def test_throughput_with_ab(self):
        self.assertEqual(analyse.markdown_table(analyse.table_columns("throughput"), self.SUMMARY), [
            "| server | c | req/s | vs nginx | spread | mean ms | p99 ms | failures | CPU µs/req | ctx sw/req "
            "| syscalls/req | peak RSS MiB | peak threads | check |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
            "| 05-epoll | 100 | 106354 | 1.57 | 11.6% | 0.714 | 4.44 | 0 | 8.2 | 0.09 | 2.3 | 3.3 | 3 | ok |",
            "| nginx (reference) | 100 | 67744 | 1.00 | 11.1% | 1.230 | 6.89 | 0 | 15.6 | 0.56 "
            "| n/a (perf missing) | 17.2 | 3 | ok |",
        ])

    def test_wrk_counts_connections(self):
        header = analyse.markdown_table(analyse.table_columns("throughput", "wrk"), self.SUMMARY)[0]
        self.assertTrue(header.startswith("| server | connections | req/s |"), header)

    def test_a_spec_as_markdown_table_took_it(self):
        columns = analyse.parse_column_spec("server:server:server requests_per_s:req/s:%.0f\n"
                                            "    cpu_us_per_req:CPU_µs/req:%.1f check:check:text")
        self.assertEqual(analyse.markdown_table(columns, self.SUMMARY), [
            "| server | req/s | CPU µs/req | check |", "|---|---:|---:|---|",
            "| 05-epoll | 106354 | 8.2 | ok |", "| nginx (reference) | 67744 | 15.6 | ok |"])

    def test_a_missing_column_is_an_error(self):
        with self.assertRaisesRegex(ValueError, "no column file"):
            analyse.markdown_table(analyse.table_columns("files"), self.SUMMARY)

    def test_connections_from_raw_csv(self):
        raw = csv_lines("""
            server,connections,held,refused,closed,blocked,dropped,rss_kib_per_conn,threads_per_conn,fds_per_conn,probe_ok,probe_refused,probe_timeout,probe_median_ms,probe_max_ms,after_status,check
            01-blocking-single,1000,1,0,0,999,0,200.00,0.00,1.00,0,0,5,n/a,n/a,200,ok
            03-select,5000,1017,3983,0,0,0,0.31,0.00,1.00,0,5,0,n/a,n/a,200,ok
            nginx,1000,1000,2,3,0,0,0.51,0.00,1.00,5,0,0,0.21,0.35,000,FAILED: no answer
            05-epoll,1000,,,,,,,,,,,,,,,FAILED: did not start
        """)
        self.assertEqual(analyse.markdown_table(analyse.table_columns("connections-user"), raw), [
            "| server | connections | held | refused | blocked | dropped | RSS KiB/conn | threads/conn | fds/conn "
            "| new client ms (median / max) | after release | check |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
            "| 01-blocking-single | 1000 | 1 | 0 | 999 | 0 | 200.00 | 0.00 | 1.00 | no answer | served | ok |",
            "| 03-select | 5000 | 1017 | 3983 | 0 | 0 | 0.31 | 0.00 | 1.00 | refused | served | ok |",
            "| nginx (reference) | 1000 | 1000 | 5 | 0 | 0 | 0.51 | 0.00 | 1.00 | 0.21 / 0.35 | NOT served "
            "| FAILED: no answer |",
            "| 05-epoll | 1000 |  |  |  |  |  |  |  |  /  |  | FAILED: did not start |",
        ])

    RAW_KERNEL = csv_lines("""
        server,connections,held,refused,closed,blocked,untried,dropped,processes,setup_s,rss_kib_per_conn,threads_per_conn,fds_per_conn,kernel_b,server_kernel_b,client_kernel_b,server_charged_b,available_drop_b,idle_cpu_ms,probe_ok,probe_refused,probe_timeout,probe_median_ms,probe_p99_ms,probe_max_ms,after_status,stopped_by,slabs,check
        05-epoll,10000,10000,0,0,0,0,0,1,0.52,1.50,0.00,1.00,10240,6144,4096,1536,16384,0.0,100,0,0,1.20,1.60,1.70,200,,TCP:4700;sock_inode_cache:1600,ok
        05-epoll,100000,19989,0,1000,0,79011,0,6,40.1,1.50,0.00,1.00,n/a,n/a,n/a,n/a,n/a,0.0,0,3,0,n/a,n/a,n/a,200,descriptors: a process at 20000 of its 20000 (ulimit -n),n/a,ok
        05-epoll,1000000,,,,,,,,,,,,,,,,,,,,,,,,,descriptors: a process at 20000 of its 20000 (ulimit -n),,not run
    """)

    def test_connections_with_the_kernel(self):
        self.assertEqual(analyse.markdown_table(analyse.table_columns("connections"), self.RAW_KERNEL)[2:], [
            "| 05-epoll | 10000 | 10000 | 0 | 0 | 0 | 0.52 | 1.50 | 6.00 | 4.00 | 0.00 | 0.0 | 1.20 / 1.60 |  | ok |",
            "| 05-epoll | 100000 | 19989 | 1000 | 0 | 79011 | 40.1 | 1.50 | n/a | n/a | 0.00 | 0.0 | refused "
            "| descriptors: a process at 20000 of its 20000 (ulimit -n) | ok |",
            "| 05-epoll | 1000000 |  |  |  |  |  |  |  |  |  |  |  "
            "| descriptors: a process at 20000 of its 20000 (ulimit -n) | not run |",
        ])
        # The stacked bars of the plot: each server's largest measured row, user and kernel KiB per connection.
        self.assertEqual(analyse.memory_bars(self.RAW_KERNEL), [("05-epoll (10,000)", "1.50", "6.00")])
        self.assertEqual(analyse.markdown_table(analyse.table_columns("slabs"), self.RAW_KERNEL)[2:], [
            "| 05-epoll | 10000 | 10.00 | TCP 4,700 · sock_inode_cache 1,600 |",
            "| 05-epoll | 19989 | n/a | n/a |",
            "| 05-epoll |  |  |  |",
        ])


# ---- plot --------------------------------------------------------------------------------------------------------


class PlotTest(unittest.TestCase):
    SUMMARY = csv_lines("""
        server,concurrency,runs,requests_per_s,p99_ms,check
        05-epoll,1,1,800.5,2.1,ok
        05-epoll,10,1,7000,3.0,ok
        01-blocking-single,1,1,n/a,n/a,FAILED: did not start
        nginx,1,1,5000,0.4,ok
        nginx,10,1,n/a,n/a,FAILED: the server died
    """)

    def test_one_series_per_server_with_points(self):
        series = analyse.plot_series(self.SUMMARY)
        self.assertEqual(series, [("05-epoll", ["1 800.5 2.1", "10 7000 3.0"]), ("nginx", ["1 5000 0.4"])])
        self.assertEqual(analyse.plot_data(series), "1 800.5 2.1\n10 7000 3.0\n\n\n1 5000 0.4\n\n\n")

    def test_the_gnuplot_script(self):
        script = analyse.gnuplot_script("svg size 1200,500 dynamic", "/r/plot.svg", "/r/plot.dat",
                                        analyse.plot_series(self.SUMMARY), "ab, 2 CPUs", "concurrency")
        self.assertIn("set output '/r/plot.svg'\n", script)
        self.assertIn('set multiplot layout 1,2 title "ab, 2 CPUs"\n', script)
        self.assertIn("plot '/r/plot.dat' index 0 using 1:2 with linespoints title '05-epoll',"
                      "'/r/plot.dat' index 1 using 1:2 with linespoints title 'nginx (reference)'\n", script)
        self.assertIn("index 1 using 1:3 with linespoints title 'nginx (reference)'\n", script)

    def test_without_gnuplot_nothing_is_written(self):
        with tempfile.TemporaryDirectory() as folder, mock.patch("driver.analyse.shutil.which", return_value=None):
            summary = os.path.join(folder, "summary.csv")
            analyse.write_text(summary, analyse.csv_text(self.SUMMARY))
            self.assertEqual(analyse.plot(summary, folder, "title", "concurrency"), [])
            self.assertEqual(sorted(os.listdir(folder)), ["summary.csv"])


class PanelPlotTest(unittest.TestCase):
    IDLE = csv_lines("""
        server,idle,keepalive,concurrency,runs,requests_per_s,cpu_us_per_req,check
        03-select,0,no,10,3,7000,60,ok
        03-select,0,yes,10,3,8000,13,ok
        03-select,5000,no,10,3,n/a,n/a,not run: it held 1016 of 5000 idle connections
        05-epoll,0,no,10,3,7300,66,ok
        05-epoll,5000,no,10,3,7200,70,ok
    """)

    def test_a_panel_takes_its_rows_and_keeps_only_points(self):
        cpu_new = analyse.PANELS["idle"][1][2]  # CPU per request, a new connection per request
        self.assertEqual(analyse.panel_series(self.IDLE, cpu_new),
                         [("03-select", ["0 60"]), ("05-epoll", ["0 66", "5000 70"])])

    def test_a_server_keeps_its_colour_in_every_panel(self):
        with tempfile.TemporaryDirectory() as folder, mock.patch("driver.analyse.shutil.which", return_value="gnuplot"), \
                mock.patch("driver.analyse.subprocess.run") as run:
            run.return_value = subprocess.CompletedProcess([], 0, "", "")
            summary = os.path.join(folder, "summary.csv")
            analyse.write_text(summary, analyse.csv_text(self.IDLE))
            self.assertEqual(analyse.plot_panels(summary, folder, "idle", "title", 10), [])
            script = run.call_args_list[0].kwargs["input"]
        self.assertIn("set multiplot layout 2,2", script)
        # 05-epoll is the second server of the run: line type 2 wherever it appears, whatever its index.
        self.assertIn("index 1 using 1:2 with linespoints linetype 2 title '05-epoll'", script)
        self.assertIn("index 4 using 1:2 with linespoints linetype 2 title '05-epoll'", script)


class ScalingTest(unittest.TestCase):
    SUMMARY = csv_lines("""
        server,cores,connection,delay_us,runs,requests_per_s,rps_per_cpu,client_busy_pct,check
        05-epoll,1,keep-alive,0,1,75000,160000,90,ok
        05-epoll,1,close,0,1,10000,35000,90.5,ok
        05-epoll,1,keep-alive,1000,1,73000,140000,n/a,ok
        floor,1,keep-alive,0,1,74000,200000,99,ok
        floor,1,close,0,1,13000,n/a,98,ok
    """)

    def test_vs_floor_and_the_client_bound_mark(self):
        # vs_floor: per server CPU, against the floor's row with the same cores, load and handler (none at 1 ms;
        # n/a where the floor has no figure). Client-bound: the client's CPUs more than 90 % busy, not 90 itself.
        self.assertEqual(text_lines(analyse.scaling_columns(self.SUMMARY)), [
            "server,cores,connection,delay_us,runs,requests_per_s,rps_per_cpu,client_busy_pct,vs_floor,"
            "client_bound,check",
            "05-epoll,1,keep-alive,0,1,75000,160000,90,0.8,no,ok",
            "05-epoll,1,close,0,1,10000,35000,90.5,n/a,yes,ok",
            "05-epoll,1,keep-alive,1000,1,73000,140000,n/a,n/a,n/a,ok",
            "floor,1,keep-alive,0,1,74000,200000,99,1,yes,ok",
            "floor,1,close,0,1,13000,n/a,98,n/a,yes,ok",
        ])


class KneeTest(unittest.TestCase):
    SUMMARY = csv_lines("""
        server,rate,runs,requests_per_s,p99_ms,check
        01-blocking-single,400,1,400,1.4,ok
        01-blocking-single,800,1,800,6.3,ok
        01-blocking-single,900,1,850,90.5,ok
        01-blocking-single,1000,1,840,8,ok
        05-epoll,2000,1,2000,12,ok
        nginx,2000,1,2000,n/a,FAILED: the server died
    """)

    def test_the_last_rate_before_the_first_one_over_the_target(self):
        rows = analyse.knees(self.SUMMARY, 10)
        self.assertEqual(rows[0], "| server | knee: req/s with p99 under 10 ms | p99 there, ms | next rate | "
                                  "p99 there, ms |")
        # 1000 req/s is under the target again, but past a rate that was not: the queue had already grown.
        self.assertEqual(rows[2], "| 01-blocking-single | 800 | 6.3 | 900 | 90.5 |")
        self.assertEqual(rows[3], "| 05-epoll | below the lowest rate |  | 2000 | 12 |")
        self.assertEqual(rows[4], "| nginx (reference) | below the lowest rate |  | 2000 | n/a |")


# ---- The committed results still read ----------------------------------------------------------------------------

# The committed folders of benchmark/results/, by what is compared. (The folder also holds a learner's own runs,
# which git ignores: only these are compared.) Each was first checked against the awk that analyse.py replaced,
# run on the folder's raw.csv: it reproduced every file compared here.
SUMMARIZED = [  # summary.csv from raw.csv; the table of summary.md; plot.dat when there is one
    "2026-11-21_094524",  # files
    "2026-11-21_095833",
    "2026-11-21_100715",
    "2026-11-21_100903",
    "2026-11-21_112306",
    "2026-11-21_113128",  # files
    "2026-11-21_114424",
    "2026-11-21_115255",
    "2026-11-21_115419",
    "2026-11-21_120412",
    "2026-11-21_121543",  # files
    "2026-11-21_154158",
    "2026-11-24_004506",
    "2026-11-24_022343",
]
# The connection mode: summary.csv is a copy of raw.csv (no repetitions to summarize); the table from raw.csv.
CONNECTIONS = ["2026-11-21_071532", "2026-11-21_115835"]
# Made by an older benchmark.sh, whose summary.csv had no vs_nginx and no io_uring_threads_cpu_us_per_req column
# and whose table had no vs nginx column: the current script's awk did not reproduce them either. Their plot.dat,
# drawn from their own summary.csv, is compared.
OLDER = ["2026-11-21_070302", "2026-11-21_071117"]


def folder_file(folder, name):
    return os.path.join(RESULTS, folder, name)


def table_kind(header_row):
    """The kind of table (and tool) whose heading row summary.md has."""
    for kind in analyse.TABLES:
        for tool in ("ab", "wrk"):
            headings = [column.heading for column in analyse.table_columns(kind, tool)]
            if "| " + " | ".join(headings) + " |" == header_row:
                return kind, tool
    raise AssertionError("no table of analyse.TABLES has the heading " + header_row)


def same_figures(testcase, got, committed, where):
    """Two summary.csv texts hold the same rows: the same header and keys, and each cell the same text or the same
    number (the summary now writes 1 where the awk wrote 1.00)."""
    got, committed = analyse.parse_rows(got), analyse.parse_rows(committed)
    testcase.assertEqual(got[0], committed[0], where)
    testcase.assertEqual(len(got), len(committed), where)
    for new, old in zip(got[1:], committed[1:]):
        for name, a, b in zip(got[0], new, old):
            if a != b:
                testcase.assertIsNotNone(analyse.number(a), f"{where} {name}: {a!r} vs {b!r}")
                testcase.assertAlmostEqual(analyse.number(a), analyse.number(b), places=6,
                                           msg=f"{where} {name}: {a!r} vs {b!r}")


class CommittedResultsTest(unittest.TestCase):
    """The committed folders still read: their raw.csv summarizes to the figures of their summary.csv (in today's
    number format, which summaries are not rewritten to), and their summary.csv gives their summary.md's table."""

    def test_summary_csv(self):
        for folder in SUMMARIZED:
            with self.subTest(folder=folder):
                summary = analyse.csv_text(analyse.summarize(analyse.read_rows(folder_file(folder, "raw.csv"))))
                same_figures(self, summary, analyse.read_text(folder_file(folder, "summary.csv")), folder)

    def test_summary_md_table(self):
        for folder in SUMMARIZED + CONNECTIONS:
            with self.subTest(folder=folder):
                rows = [line for line in analyse.read_text(folder_file(folder, "summary.md")).split("\n")
                        if line.startswith("| ")]  # the heading and the rows (not the |---| line)
                kind, tool = table_kind(rows[0])
                source = "raw.csv" if kind.startswith("connections") else "summary.csv"
                table = analyse.markdown_table(analyse.table_columns(kind, tool),
                                               analyse.read_rows(folder_file(folder, source)))
                self.assertEqual([line for line in table if line.startswith("| ")], rows)

    def test_plot_dat(self):
        folders = [folder for folder in SUMMARIZED + OLDER if os.path.isfile(folder_file(folder, "plot.dat"))]
        self.assertEqual(len(folders), 13)  # every throughput folder: the other modes draw no plot
        for folder in folders:
            with self.subTest(folder=folder):
                series = analyse.plot_series(analyse.read_rows(folder_file(folder, "summary.csv")))
                self.assertEqual(analyse.plot_data(series), analyse.read_text(folder_file(folder, "plot.dat")))

    def test_through_the_command_line(self):
        # python3 -m driver.analyse: summarize and table of one folder.
        analyser = [sys.executable, "-m", "driver.analyse"]
        folder = "2026-11-24_022343"
        summary = subprocess.run([*analyser, "summarize", folder_file(folder, "raw.csv")], capture_output=True,
                                 check=True, cwd=HERE, text=True).stdout
        same_figures(self, summary, analyse.read_text(folder_file(folder, "summary.csv")), folder)
        table = subprocess.run([*analyser, "table", "throughput", folder_file(folder, "summary.csv"), "--tool", "wrk"],
                               capture_output=True, check=True, cwd=HERE).stdout
        with open(folder_file(folder, "summary.md"), "rb") as file:
            rows = [line for line in file.read().split(b"\n") if line.startswith(b"|")]
        self.assertEqual(table, b"".join(row + b"\n" for row in rows))


if __name__ == "__main__":
    unittest.main()
