"""Unit tests of the benchmark driver (benchmark/driver/): python3 -m unittest -v test_driver, from benchmark/.

Cheap (a few seconds, no load tool, no real server): the options and every refusal, each mode's schema against the
columns the committed runs have, the CSV writing byte for byte, the clients' outputs recorded in testdata/, the
host's settings put back after a failure (against a fake /proc/sys), and a server that ignores SIGTERM stopped.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from driver import (analyse, connections, disturbance, environment, idle, latency, main, measure,  # noqa: E402
                    options, sample, scaling, servers, summary, sweep, tools)
from driver.host import Host, HostError  # noqa: E402
from driver.servers import Server, server_flags, variant_flags  # noqa: E402
from driver.session import CsvTable, Session, ratio  # noqa: E402

TESTDATA = os.path.join(HERE, "testdata")
USAGE = "usage: benchmark/benchmark.sh [options] [SERVER...]\n"
RESULTS = os.path.join(HERE, "results")


def no_target(build_dir: str, name: str) -> str:
    return ""


def parse(*argv: str, env: dict[str, str] | None = None, build_dir: str = "/nonexistent") -> options.Options:
    environ = {"PSP_BUILD_DIR": build_dir, **(env or {})}
    return options.parse(list(argv), environ, "/repo", "/repo/benchmark", no_target)


class OptionsTest(unittest.TestCase):
    def test_defaults_by_mode(self):
        o = parse()
        self.assertEqual((o.mode, o.tool, o.concurrencies, o.requests, o.delay_us, o.duration_s),
                         ("throughput", "ab", [1, 10, 100, 500], 10000, 1000, 10))
        self.assertEqual(o.servers, [*options.ALL_SERVERS, "nginx"])
        o = parse("--mode", "files")
        self.assertEqual((o.tool, o.concurrencies, o.delay_us, o.keepalive), ("wrk", [100, 1000], 0, True))
        self.assertEqual(o.servers, ["03-select", "05-epoll", "06-io_uring", "07-asio", "nginx"])
        o = parse("--mode", "idle", "--no-reference")
        self.assertEqual((o.concurrencies, o.idle_counts), ([10], [0, 1000, 5000, 10000]))
        self.assertEqual(len(o.servers), 6)
        o = parse("--mode", "latency", "05")
        self.assertEqual((o.concurrencies, o.duration_s, o.servers), ([100], 5, ["05-epoll", "nginx"]))

    def test_scaling_defaults_and_cores(self):
        with mock.patch("os.sched_getaffinity", return_value=set(range(2))):
            o = parse("--mode", "scaling")
            self.assertEqual((o.tool, o.concurrencies, o.duration_s, o.delays, o.cores, o.keepalive),
                             ("wrk", [256], 5, [0, 1000], [1], True))
            self.assertEqual(o.servers, ["02-thread-per-conn", "05-epoll", "06-io_uring", "07-asio", "floor", "nginx"])
            self.assertEqual(parse("--mode", "scaling", "--delay-us", "0", "05").delays, [0])
            with self.assertRaises(options.UsageError) as caught:
                parse("--mode", "scaling", "--cores", "2")
            self.assertEqual(str(caught.exception), "--cores 2 leaves no CPU for the client (2 CPUs here)")
        with mock.patch("os.sched_getaffinity", return_value=set(range(16))):
            self.assertEqual(parse("--mode", "scaling").cores, [1, 2, 4, 8])
            self.assertEqual(parse("--mode", "scaling", "--cores", "3,12").cores, [3, 12])
        with mock.patch("os.sched_getaffinity", return_value={0}), self.assertRaises(options.UsageError):
            parse("--mode", "scaling")

    def test_the_floor_joins_keep_alive_runs_without_a_handler(self):
        self.assertEqual(parse("-t", "wrk", "--delay-us", "0", "05").servers, ["05-epoll", "floor", "nginx"])
        self.assertEqual(parse("-t", "wrk", "05").servers, ["05-epoll", "nginx"])
        self.assertEqual(parse("-t", "wrk", "--delay-us", "0", "--no-reference", "05").servers, ["05-epoll"])

    def test_worker_processes_for_a_connection_count(self):
        # Under 20,000 descriptors a process is planned for 15,948 connections: a million needs 63 workers.
        self.assertEqual(connections.per_process(20000), 15948)
        self.assertEqual([connections.worker_processes("05-epoll", n, 20000) for n in (1000, 15948, 15949, 10**6)],
                         [1, 1, 2, 63])
        # Only the models that take --processes, and not when the spec sets it.
        self.assertEqual(connections.worker_processes("02-thread-per-conn", 10**6, 20000), 1)
        self.assertEqual(connections.worker_processes("07-asio:--processes=4", 10**6, 20000), 1)

    def test_scaling_cpus_and_flags(self):
        self.assertEqual((scaling.cpu_list(0, 0), scaling.cpu_list(0, 3), scaling.client_cpus(4, 16)),
                         ("0", "0-3", list(range(4, 16))))
        self.assertEqual(tools.wrk_command("URL", 256, 12, "3s", headers=["Connection: close"]),
                         ["wrk", "-t", "12", "-c", "256", "-d", "3s", "--latency", "-s", tools.WRK_DONE, "-H",
                          "Connection: close", "URL"])

    def test_environment_then_command_line(self):
        o = parse("-n", "300", env={"PSP_REQUESTS": "200", "PSP_CONCURRENCY": "2,3", "PSP_KEEPALIVE": "1",
                                    "PSP_REFERENCE": "0", "PSP_SERVERS": "05", "PSP_DURATION": "2m"})
        self.assertEqual((o.requests, o.concurrencies, o.keepalive, o.servers, o.duration_s),
                         (300, [2, 3], True, ["05-epoll"], 120))
        self.assertEqual(parse(env={"PSP_REQUESTS": ""}).requests, 10000)  # empty counts as unset
        # Servers and options in any order; the numbers are ints, --threads None when not given.
        o = parse("05", "-k", "-c", "1,10", "06", "-n", "2000", "--retry-disturbed", "--disturbed-pct", "25")
        self.assertEqual((o.servers, o.keepalive, o.concurrencies, o.requests, o.threads, o.retry_disturbed,
                          o.disturbed_pct), (["05-epoll", "06-io_uring", "nginx"], True, [1, 10], 2000, None, True, 25))

    def test_servers_and_variants(self):
        o = parse("--no-reference", "5", "06:--sqpoll=50:--fixed-files", "07-asio")
        self.assertEqual(o.servers, ["05-epoll", "06-io_uring:--sqpoll=50:--fixed-files", "07-asio"])
        self.assertEqual(variant_flags(o.servers[1]), ["--sqpoll", "50", "--fixed-files"])
        with tempfile.TemporaryDirectory() as build:
            os.makedirs(os.path.join(build, "07-asio-uring"))
            path = os.path.join(build, "07-asio-uring", "run_server")
            with open(path, "w", encoding="ascii") as file:
                file.write("#!/bin/sh\n")
            os.chmod(path, 0o755)
            self.assertEqual(parse("--no-reference", "07-asio-uring", build_dir=build).servers, ["07-asio-uring"])

    def test_every_refusal(self):
        refusals = {
            ("--bogus",): "unrecognized arguments: --bogus",
            ("--no-ref",): "unrecognized arguments: --no-ref",  # no abbreviations
            ("-c",): "argument -c/--concurrency: expected one argument",
            ("-c", ""): "argument -c/--concurrency: needs a value",
            ("--disturbed-pct", "x"): "bad --disturbed-pct 'x' (a whole percentage, 0 to 100)",
            ("--mode", "x"): "--mode must be throughput, connections, files, idle, latency or scaling",
            ("--mode", "scaling", "-t", "ab"): "--mode scaling uses wrk (one client thread per client CPU)",
            ("--mode", "scaling", "--cores", "0"): "bad core count '0'",
            ("--mode", "scaling", "--threads", "2"): "--mode scaling sets --threads to each core count itself",
            ("--mode", "scaling", "-c", "1 2"): "--mode scaling takes one connection count (-c N)",
            ("--cores", "1"): "--cores is for --mode scaling",
            ("--mode", "idle", "-t", "wrk"): "--mode idle uses ab (with and without -k, by itself)",
            ("--mode", "latency", "-t", "wrk"): "--mode latency uses openloop (and ab to measure capacity)",
            ("--mode", "latency", "-c", "1 2"): "--mode latency takes one connection count (-c N)",
            ("--mode", "files", "-t", "ab"): "--mode files always uses wrk (it checks the bytes read; ab cannot)",
            ("--idle", "x"): "bad idle connection count 'x'",
            ("--rates", "0"): "bad rate '0' (requests per second)",
            ("--p99-target", "1.5"): "bad --p99-target '1.5' (milliseconds)",
            ("-c", "0"): "bad concurrency '0'",
            ("--conns", "-1"): "bad connection count '-1'",
            ("-c", ","): "no concurrency level given",
            ("-n", "0"): "bad request count '0'",
            ("-r", "x"): "bad repetition count 'x'",
            ("--wrk-threads", "0"): "bad wrk thread count '0'",
            ("-w", "-1"): "bad warm-up count '-1'",
            ("--delay-us", "1.5"): "bad --delay-us '1.5'",
            ("--threads", "0"): "bad --threads '0'",
            ("--nginx-workers", "x"): "bad --nginx-workers 'x'",
            ("--handler", "busy"): "--handler must be wait, sleep or spin",
            ("-t", "curl"): "--tool must be ab or wrk",
            ("-d", "5h"): "bad --duration '5h' (e.g. 10s or 2m)",
            ("-n", "5", "-c", "10"): "concurrency 10 is above the request count 5 (ab refuses it)",
            ("05;rm",): "server '05;rm' has a character other than letters, digits and ._/=:+@%-",
            ("99",): "unknown server '99' (expected 01..07, or a folder of /nonexistent that holds a run_server)",
            ("05:threads=1",): "in server '05:threads=1', 'threads=1' is not a flag (each part after a colon starts "
                               "with -)",
            ("06:",): "in server '06:', '' is not a flag (each part after a colon starts with -)",
            ("05", "5"): "server '05-epoll' is named twice",
        }
        for argv, message in refusals.items():
            with self.subTest(argv=argv), self.assertRaises(options.UsageError) as caught:
                parse(*argv)
            self.assertEqual(str(caught.exception), message)

    def test_main_exit_status_and_usage(self):
        err, out = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            self.assertEqual(main.main(["--bogus"]), 2)
            self.assertEqual(main.main(["--help"]), 0)
        self.assertEqual(err.getvalue(), USAGE + "error: unrecognized arguments: --bogus\nrun benchmark/benchmark.sh "
                                         "--help for the options\n")
        self.assertTrue(out.getvalue().startswith("usage: benchmark/benchmark.sh [options] [SERVER...]\n"))
        self.assertIn("(--mode files: 03 05 06 07; idle: 02 03 04 05 06 07)", out.getvalue())
        self.assertIn("--p99-target MS", out.getvalue())


# The columns of raw.csv in each mode, as benchmark.sh wrote them before the driver (its RAW_* lines): the schemas
# must not drift from them, nor from the committed runs that analyse.py and the course read.
BEFORE = {
    "throughput": "server,concurrency,repetition,requests_per_s,mean_ms,p99_ms,complete,failed,non2xx,cpu_us_per_req,"
                  "io_uring_threads_cpu_us_per_req,ctxsw_per_req,syscalls_per_req,peak_rss_kib,peak_threads,check",
    "files": "server,file,connections,repetition,requests_per_s,mib_per_s,mean_ms,p99_ms,complete,failed,non2xx,"
             "bytes_per_req,cpu_us_per_req,io_uring_threads_cpu_us_per_req,ctxsw_per_req,syscalls_per_req,"
             "peak_rss_kib,peak_threads,check",
    "idle": "server,idle,keepalive,concurrency,repetition,requests_per_s,mean_ms,p99_ms,complete,failed,non2xx,"
            "cpu_us_per_req,io_uring_threads_cpu_us_per_req,ctxsw_per_req,syscalls_per_req,peak_rss_kib,"
            "peak_threads,check",
    "latency": "server,rate,repetition,requests_per_s,load_pct,p50_ms,p90_ms,p99_ms,p999_ms,max_ms,mean_ms,u_p99_ms,"
               "u_p999_ms,complete,failed,non2xx,cpu_us_per_req,gen_lag_p99_ms,check",
    "scaling": "server,cores,connection,delay_us,repetition,requests_per_s,p99_ms,complete,failed,non2xx,"
               "cpu_us_per_req,server_cpus,rps_per_cpu,client_busy_pct,check",
    "connections": "server,connections,held,refused,closed,blocked,untried,dropped,processes,setup_s,"
                   "rss_kib_per_conn,threads_per_conn,fds_per_conn,kernel_b,server_kernel_b,client_kernel_b,"
                   "server_charged_b,available_drop_b,idle_cpu_ms,probe_ok,probe_refused,probe_timeout,"
                   "probe_median_ms,probe_p99_ms,probe_max_ms,after_status,stopped_by,slabs,check",
}
# Since issue 37, every mode but connections has three more columns before `check`: the disturbance of each run
# (and --mode latency a fourth, `generator`). The committed runs made before keep the columns of BEFORE.
DISTURBANCE = ",other_cpu_pct,steal_pct,disturbed"
NOW = {mode: columns.replace(",check", DISTURBANCE + (",generator" if mode == "latency" else "") + ",check")
       if mode != "connections" else columns for mode, columns in BEFORE.items()}
SCHEMAS = {"throughput": sweep.THROUGHPUT, "files": sweep.FILES_SCHEMA, "idle": idle.SCHEMA,
           "latency": latency.SCHEMA, "connections": connections.SCHEMA, "scaling": scaling.SCHEMA}


class SchemaTest(unittest.TestCase):
    def test_each_mode_writes_its_columns(self):
        with tempfile.TemporaryDirectory() as scratch:
            for mode, fields in SCHEMAS.items():
                with self.subTest(mode=mode):
                    path = os.path.join(scratch, f"{mode}.csv")
                    CsvTable(path, fields)
                    with open(path, encoding="utf-8") as file:
                        self.assertEqual(file.read(), NOW[mode] + "\n")

    def test_a_row_must_give_every_field(self):
        with tempfile.TemporaryDirectory() as scratch:
            table = CsvTable(os.path.join(scratch, "raw.csv"), ("a", "b"))
            with self.assertRaises(ValueError):
                table.add({"a": 1})
            with self.assertRaises(ValueError):
                table.add({"a": 1, "b": 2, "c": 3})

    def test_committed_raw_csv_rewritten_byte_for_byte(self):
        """Every committed run whose columns are a schema's: its rows, written again through CsvTable, are the same
        bytes (no quoting, no \\r, nothing reformatted)."""
        checked = 0
        with tempfile.TemporaryDirectory() as scratch:
            for run in sorted(os.listdir(RESULTS)):
                raw = os.path.join(RESULTS, run, "raw.csv")
                if not os.path.isfile(raw):
                    continue
                with open(raw, encoding="utf-8", newline="") as file:
                    text = file.read()
                rows = analyse.parse_rows(text)
                if ",".join(rows[0]) not in BEFORE.values():
                    continue  # an older layout, from before a column was added
                copy = CsvTable(os.path.join(scratch, run + ".csv"), tuple(rows[0]))
                for row in rows[1:]:
                    copy.add(dict(zip(rows[0], row)))
                with open(copy.path, encoding="utf-8", newline="") as file:
                    self.assertEqual(file.read(), text, run)
                checked += 1
        self.assertGreater(checked, 10)

    def test_failed_rows_fill_every_column(self):
        with tempfile.TemporaryDirectory() as scratch:
            session = Session(parse("--no-reference", "-n", "10", "-c", "1", "05"), "/repo", HERE, tmp=scratch)
            runs = sweep.Sweep(session, os.path.join(scratch, "raw.csv"))
            runs.failed_row("05-epoll", sweep.Target(), 1, 1, "did not start, twice")
            with open(os.path.join(scratch, "raw.csv"), encoding="utf-8") as file:
                row = file.read().split("\n")[1]
            # The check keeps its comma: the cell is quoted, and the csv module reads it back whole.
            self.assertEqual(row, "05-epoll,1,1," + "n/a," * 15 + '"FAILED: did not start, twice"')
            self.assertEqual(analyse.read_rows(os.path.join(scratch, "raw.csv"))[1][-1],
                             "FAILED: did not start, twice")


def testdata(name: str) -> str:
    with open(os.path.join(TESTDATA, name), encoding="utf-8") as file:
        return file.read()


class ToolsTest(unittest.TestCase):
    def test_ab_and_wrk_records(self):
        ab = tools.parse("ab", testdata("ab-05-c10.out"), testdata("ab-05-c10.percentiles.csv"))
        self.assertEqual((ab["complete"], ab["failed"], ab["doc_length"]), (2000, 0, 1024))
        wrk = tools.parse("wrk", testdata("wrk-05-c10.out"))
        self.assertIsInstance(wrk["rps"], float)
        self.assertIsNone(tools.parse("wrk", testdata("wrk-without-lua.out"))["rps"])

    def test_commands(self):
        self.assertEqual(tools.ab_command("http://h/", 10, 200, True), ["ab", "-q", "-r", "-n", "200", "-c", "10",
                                                                       "-k", "http://h/"])
        wrk = tools.wrk_command("http://h/", 4, 8, "1s", "10s")
        self.assertEqual(wrk[:6], ["wrk", "-t", "4", "-c", "4", "-d"])  # never more threads than connections
        self.assertEqual(wrk[-3:], ["--timeout", "10s", "http://h/"])

    def test_openloop_and_idle_conns_lines(self):
        line = testdata("openloop-05.out").strip().split("\n")[-1]
        figures = tools.key_values(line)
        self.assertEqual((figures["scheduled"], figures["completed"], figures["fell_behind"]), (200, 200, 0))
        self.assertIsInstance(figures["p99_ms"], float)
        for key in latency.FROM_OPENLOOP.values():
            self.assertIn(key, figures)
        holding, final = testdata("idle_conns-hold.out").strip().split("\n")
        self.assertTrue(holding.startswith("holding "))
        self.assertEqual(tools.key_values(holding[len("holding "):])["held"], 50)
        final = tools.key_values(final)
        self.assertEqual(tools.key_values("a=000 b=n/a c=refused d=-3 e=1.50"),
                         {"a": 0, "b": None, "c": "refused", "d": -3, "e": 1.5})
        for key in (*connections.FROM_HOLDER, *connections.PROBES, "server_alive"):
            self.assertIn(key, final)

    def test_run_client_time_limit(self):
        with tempfile.TemporaryDirectory() as scratch:
            out = os.path.join(scratch, "out")
            self.assertEqual(tools.run_client(1, ["sh", "-c", "echo started; sleep 30"], out), 124)
            with open(out, encoding="ascii") as file:
                self.assertEqual(file.read(), "started\n")

    def test_run_client_stops_the_whole_process_group(self):
        # The client's children (perf's ab, taskset's wrk) go with it: a grandchild that ignores nothing but
        # outlives its parent's SIGTERM is in the same group, and is killed too.
        with tempfile.TemporaryDirectory() as scratch:
            out, pid_file = os.path.join(scratch, "out"), os.path.join(scratch, "pid")
            status = tools.run_client(1, ["sh", "-c", f"sleep 60 & echo $! > {pid_file}; wait"], out)
            self.assertEqual(status, tools.TIMED_OUT)
            with open(pid_file, encoding="ascii") as file:
                grandchild = int(file.read())
            time.sleep(0.2)
            try:  # gone, or a zombie that nobody has reaped yet (where PID 1 does not reap)
                with open(f"/proc/{grandchild}/stat", encoding="ascii") as file:
                    self.assertEqual(file.read().rsplit(") ", 1)[1][0], "Z")
            except FileNotFoundError:
                pass

    def test_ratio_typed(self):
        self.assertEqual(ratio(3, 2), 1.5)
        self.assertEqual(ratio(1000000, 3, 1), 333333.3)
        self.assertIsNone(ratio(None, 2))
        self.assertIsNone(ratio(5, None))
        self.assertIsNone(ratio(5, 0))


# Two readings of /proc/stat, 1 s apart on 2 CPUs (200 ticks): 150 busy, of which the server took 40 ticks and the
# driver with its waited-for client 0.3 s (30 ticks); 4 ticks of steal.
STAT_BEFORE = "cpu  1000 0 500 8000 100 0 50 10 0 0\ncpu0 500 0 250 4000 50 0 25 5 0 0\n"
STAT_AFTER = "cpu  1100 0 540 8044 102 0 60 14 0 0\ncpu0 550 0 270 4020 51 0 30 7 0 0\n"


class PerfCountTest(unittest.TestCase):
    def test_read_with_the_csv_module(self):
        with tempfile.TemporaryDirectory() as scratch:
            path = os.path.join(scratch, "perf.txt")
            with open(path, "w", encoding="ascii") as file:
                file.write("# started on Sun Nov 29\n\n1234.56,msec,task-clock,1234560,100.00,0.5,CPUs utilized\n"
                           "2600,,context-switches,1234560,100.00,2.106,K/sec\n"
                           "<not counted>,,raw_syscalls:sys_enter,0,0.00,,\n")
            self.assertEqual(sample.perf_count(path, "context-switches"), 2600)
            self.assertIsNone(sample.perf_count(path, "raw_syscalls:sys_enter"))
            self.assertIsNone(sample.perf_count(path, "cycles"))


class DisturbanceTest(unittest.TestCase):
    def test_machine_times_from_proc_stat(self):
        self.assertEqual(disturbance.machine_times(STAT_BEFORE), (1550, 9660, 10))
        self.assertEqual(disturbance.machine_times("intr 1 2\n"), (0, 0, 0))

    def snapshots(self, server_ticks, our_seconds):
        before = disturbance.Snapshot(*disturbance.machine_times(STAT_BEFORE), server=100, ours=1.0)
        after = disturbance.Snapshot(*disturbance.machine_times(STAT_AFTER), server=100 + server_ticks,
                                     ours=1.0 + our_seconds)
        return before, after

    def test_other_processes_share_and_the_mark(self):
        before, after = self.snapshots(40, 0.3)
        # busy 150 - 40 (server) - 30 (driver and client) = 80 of 200 ticks: 40 %; steal 4 of 200: 2 %.
        result = disturbance.between(before, after, 10, ticks_per_s=100)
        self.assertEqual((result.other_cpu_pct, result.steal_pct, result.disturbed), (40.0, 2.0, True))
        self.assertEqual(result.columns(), {"other_cpu_pct": 40.0, "steal_pct": 2.0, "disturbed": "yes"})
        quiet = disturbance.between(*self.snapshots(110, 0.4), 10, ticks_per_s=100)
        self.assertEqual((quiet.other_cpu_pct, quiet.disturbed), (0.0, False))  # never below 0
        self.assertEqual(disturbance.between(before, before, 10), disturbance.NOT_MEASURED)

    def test_a_real_window_reads_this_machine(self):
        with disturbance.Window([os.getpid()], 100) as window:
            time.sleep(0.05)
        self.assertIsNotNone(window.result.other_cpu_pct)  # (no figure asserted: the machine is shared)

    def test_retry_only_when_asked_and_at_most_twice(self):
        session = Session(parse("--no-reference", "05"), "/repo", HERE)
        with contextlib.redirect_stdout(io.StringIO()):
            self.assertFalse(measure.measured_again(session, {"disturbed": "yes"}, 0, True))
            session = Session(parse("--no-reference", "--retry-disturbed", "05"), "/repo", HERE)
            figures = {"disturbed": "yes"}
            self.assertTrue(measure.measured_again(session, figures, 0, True))
            self.assertEqual(figures["disturbed"], "measured again")
            self.assertFalse(measure.measured_again(session, {"disturbed": "yes"}, disturbance.RETRIES, True))
            self.assertFalse(measure.measured_again(session, {"disturbed": "no"}, 0, True))
            self.assertFalse(measure.measured_again(session, {"disturbed": "yes"}, 0, False))  # the server died

    def test_latency_measures_a_lagging_rate_again_without_being_asked(self):
        session = Session(parse("--mode", "latency", "--no-reference", "05"), "/repo", HERE)
        with tempfile.TemporaryDirectory() as scratch, contextlib.redirect_stdout(io.StringIO()):
            runs = latency.Latency(session, os.path.join(scratch, "raw.csv"))
            row = {"generator": "behind", "disturbed": "no"}
            self.assertTrue(runs.measure_again(row, 0, True))
            self.assertFalse(runs.measure_again({"generator": "behind", "disturbed": "no"}, 2, True))
            self.assertFalse(runs.measure_again({"generator": "ok", "disturbed": "yes"}, 0, True))  # not asked

    def test_latency_keeps_the_quietest_attempt(self):
        # The run recorded above at 300 req/s: ok but disturbed, ok but disturbed, then the generator lagged.
        attempts = [{"generator": "ok", "other_cpu_pct": 52.5, "steal_pct": 0, "disturbed": "yes"},
                    {"generator": "ok", "other_cpu_pct": 56.6, "steal_pct": 0, "disturbed": "yes"},
                    {"generator": "behind", "other_cpu_pct": 58.5, "steal_pct": 0, "disturbed": "yes"}]
        self.assertEqual([row["disturbed"] for row in latency.keep_quietest(attempts)],
                         ["yes", "measured again", "measured again"])
        lagging = [{"generator": "behind", "other_cpu_pct": 90.0, "steal_pct": 0.2, "disturbed": "yes"},
                   {"generator": "behind", "other_cpu_pct": 84.6, "steal_pct": 0, "disturbed": "yes"}]
        self.assertEqual([row["disturbed"] for row in latency.keep_quietest(lagging)], ["measured again", "yes"])
        one = [{"generator": "ok", "other_cpu_pct": 1.0, "steal_pct": 0, "disturbed": "no"}]
        self.assertEqual(latency.keep_quietest(one)[0]["disturbed"], "no")

    def test_summary_leaves_out_runs_measured_again_and_counts_the_disturbed(self):
        rows = analyse.parse_rows(
            "server,concurrency,repetition,requests_per_s,failed,non2xx,other_cpu_pct,steal_pct,disturbed,check\n"
            "05-epoll,10,1,100,0,0,55,0,measured again,ok\n"
            "05-epoll,10,1,1000,0,0,2,0,no,ok\n"
            "05-epoll,10,2,900,0,0,30,0,yes,ok\n"
            "05-epoll,10,3,1100,0,0,1,0,no,ok\n")
        summary = analyse.summarize(rows)
        self.assertEqual(summary[0][-2:], ["disturbed_runs", "check"])
        row = dict(zip(summary[0], summary[1]))
        self.assertEqual((row["runs"], row["requests_per_s"], row["rps_min"], row["disturbed_runs"]), (3, 1000, 900, 1))
        self.assertEqual(row["other_cpu_pct"], 2)  # the median of the kept runs
        table = analyse.markdown_table([analyse.Column("server", "server", "server"),
                                        analyse.Column(analyse.spread, "spread", "%s")], summary)
        self.assertEqual(table[2], "| 05-epoll | 20% (1 of 3 disturbed) |")
        passes = disturbance.passes_table(rows)
        self.assertEqual(passes[2:], ["| 05-epoll | 1 | 55, 2 | 0, 0 | concurrency=10 (measured again) |",
                                      "| 05-epoll | 2 | 30 | 0 | concurrency=10 |",
                                      "| 05-epoll | 3 | 1 | 0 | none |"])
        self.assertEqual(disturbance.passes_table([["server", "concurrency", "repetition", "check"]]), [])

    def test_the_knee_skips_a_rate_the_generator_could_not_offer(self):
        rows = analyse.parse_rows(
            "server,rate,runs,p99_ms,disturbed_runs,generator_behind_runs,check\n"
            "05-epoll,100,1,1.0,0,0,ok\n"
            "05-epoll,200,1,50.0,1,1,ok\n"      # one bad second of the machine: not the server's
            "05-epoll,300,1,2.0,0,0,ok\n"
            "05-epoll,400,1,15.0,0,0,ok\n")
        table = analyse.knees(rows, 10)
        self.assertTrue(table[0].endswith("| rates not measured (the generator fell behind) |"))
        self.assertEqual(table[2], "| 05-epoll | 300 | 2.0 | 400 | 15.0 | 200 |")
        lagging = analyse.parse_rows("server,rate,runs,p99_ms,generator_behind_runs,check\n05-epoll,100,1,1.0,1,ok\n")
        self.assertEqual(analyse.knees(lagging, 10)[2], "| 05-epoll | not measured |  | – | – | 100 |")


class CountersCostTest(unittest.TestCase):
    def note(self, *argv, perf_state="ok", counters=None):
        session = Session(parse("--no-reference", *argv), "/repo", HERE, perf_state=perf_state)
        with tempfile.TemporaryDirectory() as results:
            if counters is not None:
                with open(os.path.join(results, "counters.csv"), "w", encoding="utf-8") as file:
                    file.write(counters)
            return summary.counters_note(session, results)

    def test_the_difference_from_a_recorded_pair(self):
        pair = ("server,concurrency,counters,requests_per_s,cpu_us_per_req,other_cpu_pct,check\n"
                "05-epoll,1,perf stat,797.3,80,2.5,ok\n05-epoll,1,none,801.2,60,1,ok\n")
        note = self.note("05", counters=pair)
        self.assertTrue(note.startswith("- Counters cost: 05-epoll at c=1, the same run with perf stat -p"), note)
        self.assertIn("CPU 80 µs/req with perf stat counting, 60 without (+33 %); 797 and 801 req/s", note)
        self.assertNotIn("disturbed", note)
        busy = pair.replace(",1,ok", ",40,ok")
        self.assertIn("took 2.5 and 40 % of the CPUs during the two: disturbed", self.note("05", counters=busy))

    def test_why_there_is_nothing_to_state(self):
        self.assertIn("no per-request counters ran (n/a (--no-perf))", self.note("05", perf_state="n/a (--no-perf)"))
        self.assertIn("this mode runs no per-request counters", self.note("--mode", "latency", "05"))
        header_only = ",".join(measure.COUNTERS_SCHEMA) + "\n"
        self.assertIn("not measured in this run", self.note("05", counters=header_only))

    def test_no_probe_without_perf(self):
        session = Session(parse("--no-reference", "05"), "/repo", HERE, perf_state="n/a (perf missing)")
        with mock.patch.object(measure, "measure_run") as run:
            measure.counters_cost(session, None, "05-epoll", 1, measure.Target(), None,
                                  {"syscalls_per_req": "n/a (perf missing)"}, None)
        run.assert_not_called()


class HostTest(unittest.TestCase):
    def fake_proc_sys(self, scratch: str, values: dict[str, int]) -> None:
        for key, value in values.items():
            path = os.path.join(scratch, key.replace(".", "/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="ascii") as file:
                file.write(f"{value}\n")

    def read(self, scratch: str, key: str) -> str:
        with open(os.path.join(scratch, key.replace(".", "/")), encoding="ascii") as file:
            return file.read().strip()

    def test_settings_put_back_after_a_failure(self):
        said: list[str] = []
        with tempfile.TemporaryDirectory() as scratch:
            self.fake_proc_sys(scratch, {"fs.nr_open": 1000, "fs.file-max": 5000, "vm.max_map_count": 99999})
            with self.assertRaises(RuntimeError):
                with Host(said.append, sysctl_root=scratch, is_root=True) as host:
                    host.raise_sysctl("fs.nr_open", 2000, "2000 connections")
                    host.raise_sysctl("fs.file-max", 9000, "2000 connections")
                    host.raise_sysctl("vm.max_map_count", 100, "2000 connections")  # high enough: untouched
                    host.raise_sysctl("kernel.not_here", 100, "2000 connections")   # absent: untouched
                    self.assertEqual(self.read(scratch, "fs.nr_open"), "2000")
                    raise RuntimeError("a server failed")
            self.assertEqual([self.read(scratch, key) for key in ("fs.nr_open", "fs.file-max", "vm.max_map_count")],
                             ["1000", "5000", "99999"])
        self.assertEqual(said, ["  sysctl fs.nr_open: 1000 -> 2000 (put back after the run)",
                                "  sysctl fs.file-max: 5000 -> 9000 (put back after the run)",
                                "  sysctl fs.file-max: put back to 5000",
                                "  sysctl fs.nr_open: put back to 1000"])

    def test_put_back_when_the_console_is_gone(self):
        def say(text: str) -> None:
            raise BrokenPipeError()  # `benchmark.sh | head`, once head has left
        with tempfile.TemporaryDirectory() as scratch:
            self.fake_proc_sys(scratch, {"fs.nr_open": 1000, "fs.file-max": 5000})
            host = Host(lambda text: None, sysctl_root=scratch, is_root=True)
            host.raise_sysctl("fs.nr_open", 2000, "2000 connections")
            host.raise_sysctl("fs.file-max", 9000, "2000 connections")
            host.say = say
            host.restore()
            self.assertEqual([self.read(scratch, key) for key in ("fs.nr_open", "fs.file-max")], ["1000", "5000"])

    def test_put_back_on_ctrl_c(self):
        with tempfile.TemporaryDirectory() as scratch:
            self.fake_proc_sys(scratch, {"fs.nr_open": 1000})
            with self.assertRaises(KeyboardInterrupt):
                with Host(lambda text: None, sysctl_root=scratch, is_root=True) as host:
                    host.raise_sysctl("fs.nr_open", 2000, "2000 connections")
                    os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(1)
            self.assertEqual(self.read(scratch, "fs.nr_open"), "1000")

    def test_not_root_refused_and_nothing_changed(self):
        with tempfile.TemporaryDirectory() as scratch:
            self.fake_proc_sys(scratch, {"fs.nr_open": 1000})
            host = Host(lambda text: None, sysctl_root=scratch, is_root=False)
            with self.assertRaises(HostError) as caught:
                host.raise_sysctl("fs.nr_open", 2000, "2000 connections")
            self.assertEqual(str(caught.exception), "2000 connections need fs.nr_open raised from 1000 to 2000, "
                             "which only root can do: run it as root, or with smaller --conns")
            self.assertEqual(self.read(scratch, "fs.nr_open"), "1000")
            self.assertEqual(host.changed, [])


class ServerTest(unittest.TestCase):
    def session(self, scratch: str, script: str) -> Session:
        os.makedirs(os.path.join(scratch, "build", "05-epoll"))
        path = os.path.join(scratch, "build", "05-epoll", "run_server")
        with open(path, "w", encoding="ascii") as file:
            file.write(script)
        os.chmod(path, 0o755)
        o = parse("--no-reference", "-n", "10", "-c", "1", "05", build_dir=os.path.join(scratch, "build"))
        return Session(o, "/repo", HERE, tmp=scratch, cpus=2)

    def test_stops_a_server_that_ignores_sigterm(self):
        # A stand-in that prints the listening line, then ignores SIGTERM: only SIGKILL, after the grace, stops it.
        script = "#!/bin/sh\ntrap '' TERM\necho 'listening on http://127.0.0.1:4321/'\nwhile :; do sleep 1; done\n"
        with tempfile.TemporaryDirectory() as scratch:
            session = self.session(scratch, script)
            started = time.monotonic()
            with Server(session, "05-epoll", stop_grace_s=0.5) as server:
                self.assertTrue(server.started)
                self.assertEqual(server.port, 4321)
                self.assertEqual(server.command, "05-epoll/run_server --port 0 --delay-us 1000 --handler wait")
                pid = server.pid
            self.assertEqual(server.exit, 128 + signal.SIGKILL)
            self.assertLess(time.monotonic() - started, 5)
            with self.assertRaises(ProcessLookupError):
                os.kill(pid, 0)

    def test_stopped_when_the_block_fails(self):
        script = "#!/bin/sh\necho 'listening on http://127.0.0.1:4321/'\nexec sleep 30\n"
        with tempfile.TemporaryDirectory() as scratch:
            session = self.session(scratch, script)
            with self.assertRaises(RuntimeError):
                with Server(session, "05-epoll") as server:
                    pid = server.pid
                    raise RuntimeError("a load tool failed")
            self.assertEqual(server.exit, 128 + signal.SIGTERM)
            with self.assertRaises(ProcessLookupError):
                os.kill(pid, 0)

    def test_a_server_that_does_not_start_says_why(self):
        script = "#!/bin/sh\necho 'error: io_uring is not available' >&2\nexit 1\n"
        with tempfile.TemporaryDirectory() as scratch:
            session = self.session(scratch, script)
            err = io.StringIO()
            with contextlib.redirect_stderr(err), Server(session, "05-epoll") as server:
                self.assertFalse(server.started)
            self.assertEqual(server.problem, "did not start")
            self.assertEqual(err.getvalue(), "error: 05-epoll did not start (exit status 1): error: io_uring is not "
                                             "available\n")

    def test_flags(self):
        with tempfile.TemporaryDirectory() as scratch:
            session = self.session(scratch, "#!/bin/sh\n")
            session.options.threads = "2"
            self.assertEqual(server_flags(session, "05-epoll:--threads=1"),
                             ["--delay-us", "1000", "--handler", "wait", "--threads", "2", "--threads", "1"])
            self.assertEqual(server_flags(session, "03-select"), ["--delay-us", "1000", "--handler", "wait"])


class BuildTargetTest(unittest.TestCase):
    def test_from_cmakes_file_api_reply(self):
        """An optional folder's target comes from CMake's file API (codemodel-v2), not from generated Makefiles."""
        with tempfile.TemporaryDirectory() as build:
            reply = os.path.join(build, servers.REPLY)
            os.makedirs(reply)
            files = {"index-2026.json": {"reply": {"client-psp-benchmark": {"codemodel-v2": {
                         "jsonFile": "codemodel-v2-1.json"}}}},
                     "codemodel-v2-1.json": {"configurations": [{"targets": [{"jsonFile": "target-a.json"},
                                                                              {"jsonFile": "target-b.json"}]}]},
                     "target-a.json": {"name": "server_07_uring", "artifacts": [{"path": "07-asio-uring/run_server"}]},
                     "target-b.json": {"name": "common"}}
            for name, content in files.items():
                with open(os.path.join(reply, name), "w", encoding="utf-8") as file:
                    json.dump(content, file)
            self.assertEqual(servers.build_target(build, "07-asio-uring"), "server_07_uring")
            self.assertEqual(servers.build_target(build, "05-epoll"), "server_05")
            self.assertEqual(servers.build_target(build, "08-other"), "")
        self.assertEqual(servers.build_target("/nonexistent", "08-other"), "")  # no build: no target, no error


class FingerprintTest(unittest.TestCase):
    def test_written_when_the_script_exists_and_not_otherwise(self):
        with tempfile.TemporaryDirectory() as repo:
            results = os.path.join(repo, "results")
            os.makedirs(results)
            session = Session(parse("--no-reference", "05"), repo, HERE, tmp=repo)
            summary.write_fingerprints(session, results)
            self.assertFalse(os.path.exists(os.path.join(results, "fingerprints.json")))
            os.makedirs(os.path.join(repo, "docs", "tools"))
            with open(os.path.join(repo, summary.FINGERPRINT), "w", encoding="ascii") as file:
                file.write("import sys\nprint('{\"05-epoll\": \"abc\"}' if sys.argv[1:3] == ['--json', '--root'] "
                           "else 'bad')\n")
            summary.write_fingerprints(session, results)
            with open(os.path.join(results, "fingerprints.json"), encoding="ascii") as file:
                self.assertEqual(file.read(), '{"05-epoll": "abc"}\n')


class CommitTest(unittest.TestCase):
    def test_dirty_only_when_the_measured_code_differs(self):
        with tempfile.TemporaryDirectory() as repo:
            def git(*args):
                subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True)

            for path in ("05-epoll/main.cpp", "benchmark/results/campaign.json", "docs/05-epoll.md"):
                os.makedirs(os.path.join(repo, os.path.dirname(path)), exist_ok=True)
                with open(os.path.join(repo, path), "w", encoding="ascii") as file:
                    file.write("one\n")
            git("init", "-q")
            git("add", "-A")
            git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
            head = environment.measured_commit(repo)
            self.assertRegex(head, r"^[0-9a-f]{7,}$")
            for path in ("benchmark/results/campaign.json", "docs/05-epoll.md"):  # data and pages: not code
                with open(os.path.join(repo, path), "w", encoding="ascii") as file:
                    file.write("two\n")
            self.assertEqual(environment.measured_commit(repo), head)
            with open(os.path.join(repo, "05-epoll/main.cpp"), "w", encoding="ascii") as file:
                file.write("two\n")
            self.assertEqual(environment.measured_commit(repo), head + "-dirty")
        self.assertEqual(environment.measured_commit(repo), "no commit")  # the folder is gone: no git there


class LauncherTest(unittest.TestCase):
    def test_short_and_passes_everything_on(self):
        launcher = os.path.join(HERE, "benchmark.sh")
        with open(launcher, encoding="utf-8") as file:
            self.assertLess(len(file.read().split("\n")), 100)
        result = subprocess.run([launcher, "--no-build", "-c", "0"], capture_output=True, text=True, check=False)
        self.assertEqual((result.returncode, result.stderr), (2, USAGE + "error: bad concurrency '0'\nrun "
                                                                 "benchmark/benchmark.sh --help for the options\n"))


if __name__ == "__main__":
    unittest.main()
