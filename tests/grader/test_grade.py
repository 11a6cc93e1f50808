#!/usr/bin/env python3
"""grade.py's logic, and the rubric against the suite: test_grade.py PATH/TO/integration_tests (run by CTest)."""

import csv
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grade  # noqa: E402

SUITE = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(grade.REPO, "build", "integration_tests")
RUBRIC = os.path.join(grade.HERE, "rubric.ini")


def suite_tests(chapter, command="server", profile="course"):
    env = dict(os.environ, PSP_GRADE_COMMAND=command, PSP_GRADE_CHAPTER=str(chapter), PSP_GRADE_PROFILE=profile)
    return grade.list_tests(SUITE, env)


class CheckNames(unittest.TestCase):
    def test_names(self):
        self.assertEqual(grade.check_name("AllServers/Http.TenPipelinedRequestsAnsweredInOrder/graded"),
                         "Http.TenPipelinedRequestsAnsweredInOrder")
        self.assertEqual(grade.check_name("AllServers/Refused.ErrorStatusThenClosed/graded_request_line_tabs"),
                         "Refused.ErrorStatusThenClosed[request_line_tabs]")

    def test_result_lines(self):
        line = "[       OK ] AllServers/Http.GetAndHeadHaveExactHeadersAndBody/graded (6 ms)"
        self.assertEqual(grade.RESULT_LINE.match(line).groups(),
                         ("OK", "AllServers/Http.GetAndHeadHaveExactHeadersAndBody/graded", "6"))
        line = ("[  FAILED  ] AllServers/Refused.ErrorStatusThenClosed/graded_post, where GetParam() = "
                "(graded, post) (5 ms)")
        self.assertEqual(grade.RESULT_LINE.match(line).group(1, 2),
                         ("FAILED", "AllServers/Refused.ErrorStatusThenClosed/graded_post"))
        self.assertIsNone(grade.RESULT_LINE.match("[  FAILED  ] 1 test, listed below:"))


class Glob(unittest.TestCase):
    def test_only_star_and_question_mark_are_special(self):
        self.assertTrue(grade.glob("Accepted.X[leading_empty_line]", "Accepted.X[leading_*]"))
        self.assertFalse(grade.glob("Accepted.X[http_1_2]", "Accepted.X[leading_*]"))
        self.assertTrue(grade.glob("Http.Http10WithKeepAlive", "Http.Http1?With*"))


class Chapter(unittest.TestCase):
    def test_a_folder_only_suggests_its_chapter(self):
        args = grade.parse_args(["--", "./build/01-blocking-single/run_server"])
        self.assertEqual(args.chapter, 0)
        self.assertIn("--chapter 1", args.suggestion)
        args = grade.parse_args(["--chapter", "1", "--", "./build/01-blocking-single/run_server"])
        self.assertEqual((args.chapter, args.suggestion), (1, ""))

    def test_from_the_folder_in_the_path(self):
        self.assertEqual(grade.chapter_from_path("./build/01-blocking-single/run_server"), 1)
        self.assertEqual(grade.chapter_from_path("build/06-io_uring-advanced/run_server"), 6)
        self.assertEqual(grade.chapter_from_path("/tmp/lab/run_server"), 0)
        self.assertEqual(grade.chapter_from_path("python3"), 0)


class Scoring(unittest.TestCase):
    def test_the_total_is_out_of_every_category_whatever_was_skipped(self):
        a = grade.Category("a", 10, ["A.*"], [])
        b = grade.Category("b", 20, ["B.*"], [])
        chosen = [("t1", "A.x", a), ("t2", "A.y", a), ("t3", "A.z", a), ("t4", "B.x", b)]
        results = {"t1": ("passed", 1), "t2": ("failed", 1), "t3": ("skipped", 1), "t4": ("skipped", 1)}
        rows, total, possible = grade.score(chosen, results, [a, b])
        self.assertEqual((rows[0]["score"], rows[1]["score"]), (5.0, 0.0))
        self.assertEqual((total, possible), (5.0, 30))

    def test_a_check_the_command_lacks_is_lost(self):
        a = grade.Category("a", 10, ["A.*"], [])
        rows, total, possible = grade.score([("t1", "A.x", a), ("t2", "A.y", a)],
                                            {"t1": ("passed", 1), "t2": ("lacking", 1)}, [a])
        self.assertEqual((rows[0]["lacking"], total, possible), (1, 5.0, 10))

    def test_skips_for_what_the_command_lacks_are_told_apart(self):
        self.assertEqual(grade.classify("skipped", "needs `--idle-timeout 1`, a flag of this repository's servers"),
                         "lacking")
        self.assertEqual(grade.classify("skipped", "serves files: put {root} in the command where the folder..."),
                         "lacking")
        self.assertEqual(grade.classify("skipped", "io_uring unavailable: ..."), "skipped")
        self.assertEqual(grade.classify("failed", "a flag of this repository's servers"), "failed")

    def test_a_check_not_run_is_lost(self):
        a = grade.Category("a", 10, ["A.*"], [])
        rows, total, _ = grade.score([("t1", "A.x", a), ("t2", "A.y", a)], {"t1": ("passed", 1)}, [a])
        self.assertEqual((rows[0]["not run"], total), (1, 5.0))


class RootCauses(unittest.TestCase):
    def test_checks_that_got_no_valid_response_after_the_plain_get_did_are_not_run_and_counted_once(self):
        a = grade.Category("a", 10, ["*"], [])
        get = "Http.GetAndHeadHaveExactHeadersAndBody"
        chosen = [("t1", get, a), ("t2", "B.x", a), ("t3", "C.x", a), ("t4", "D.x", a)]
        results = {"t1": ("failed", 1, ""), "t2": ("failed", 1, ""), "t3": ("failed", 1, ""), "t4": ("passed", 1, "")}
        closed = "server closed the connection before a whole response arrived; received: 4 bytes 'HTTP'"
        details = {"t1": {"message": closed}, "t2": {"message": "response 3: " + closed},
                   "t3": {"message": "the file outside the root leaked: root:x:0:0"}}
        self.assertEqual(grade.mark_dependents(chosen, results, details, "course"), get)
        self.assertEqual([results[t][0] for t in ("t1", "t2", "t3", "t4")], ["failed", "not run", "failed", "passed"])
        self.assertTrue(results["t2"][2].startswith(f"not run: GET / did not get a valid response (see {get})"))
        rows, total, _ = grade.score(chosen, results, [a])
        self.assertEqual((rows[0]["not run"], total), (1, 2.5))  # still lost: the total is fixed
        checks = [{"check": get, "result": "failed", "message": closed},
                  {"check": "B.x", "result": "not run", "message": results["t2"][2]},
                  {"check": "C.x", "result": "failed", "message": details["t3"]["message"]}]
        causes = grade.root_causes(checks)
        self.assertEqual(causes[0], ("server closed the connection before a whole response arrived", [get, "B.x"]))

    def test_a_plain_get_with_a_valid_but_wrong_answer_leaves_the_others_alone(self):
        a = grade.Category("a", 10, ["*"], [])
        chosen = [("t1", "Http.GetAndHeadHaveExactHeadersAndBody", a), ("t2", "B.x", a)]
        results = {"t1": ("failed", 1, ""), "t2": ("failed", 1, "")}
        details = {"t1": {"message": "Content-Length: 12, want 1024"},
                   "t2": {"message": "timed out waiting for a response"}}
        self.assertEqual(grade.mark_dependents(chosen, results, details, "course"), "")
        self.assertEqual(results["t2"][0], "failed")


FAKE_SUITE = r"""#!/usr/bin/env python3
import sys, time
tests = sys.argv[1].split("=", 1)[1].split(":")
for t in tests:
    print(f"[ RUN      ] {t}", flush=True)
    if "Hangs" in t:
        time.sleep(60)
    if "Fails" in t:
        print("x_test.cpp:12: Failure\nValue of: r\n  Actual: false (GET /a.txt: got 404, want 200)\nExpected: true")
        print(f"[  FAILED  ] {t} (3 ms)", flush=True)
    else:
        print(f"[       OK ] {t} (1 ms)", flush=True)
"""


class Running(unittest.TestCase):
    """run_checks() with a fake suite: a check past its limit is stopped and failed, and the rest go on."""

    def test_a_check_past_its_limit_is_stopped_and_the_others_run(self):
        a = grade.Category("a", 10, ["*"], [])
        chosen = [(f"S/{n}/graded", n, a) for n in ("A.First", "B.Hangs", "C.Fails", "D.Last")]
        with tempfile.TemporaryDirectory(prefix="psp-run-") as top:
            suite = os.path.join(top, "suite")
            with open(suite, "w") as f:
                f.write(FAKE_SUITE.replace("/usr/bin/env python3", sys.executable))
            os.chmod(suite, 0o755)
            results, details, end = grade.run_checks(suite, dict(os.environ), chosen, top, 30, 1)
        self.assertEqual(end, "")
        self.assertEqual({t.split("/")[1]: r[0] for t, r in results.items()},
                         {"A.First": "passed", "B.Hangs": "failed", "C.Fails": "failed", "D.Last": "passed"})
        self.assertIn("stopped by the grader after its time limit of 1 s", details["S/B.Hangs/graded"]["message"])
        self.assertEqual(details["S/C.Fails/graded"]["message"], "GET /a.txt: got 404, want 200")

    def test_messages_lose_the_test_framework_frame(self):
        self.assertEqual(grade.clean("a.cpp:3\nValue of: r\n  Actual: false\nExpected: true\nconnection 8: timed out"),
                         "connection 8: timed out")
        self.assertEqual(grade.clean("a.cpp:3\nExpected equality of these values:\n  r->status\n    Which is: 404\n"
                                     "  200"), "r->status is 404, expected 200")
        self.assertEqual(grade.short("crashed (SIGSEGV) during X; the last lines of its stderr: (a)", 200),
                         "crashed (SIGSEGV) during X")
        self.assertNotIn("(", grade.short("x " * 50 + "(a b c d e f)", 105))


class QuietPasses(unittest.TestCase):
    def test_a_check_passed_by_doing_nothing_counts_only_where_the_category_got_an_answer(self):
        a = grade.Category("a", 10, ["*"], [], quiet=["Idle.*"])
        b = grade.Category("b", 10, ["*"], [], quiet=["Idle.*"])
        chosen = [("t1", "Idle.Cpu", a), ("t2", "Get.File", a), ("t3", "Idle.Cpu2", b), ("t4", "Get.Other", b)]
        results = {"t1": ("passed", 1, ""), "t2": ("failed", 1, ""), "t3": ("passed", 1, ""),
                   "t4": ("passed", 1, "")}
        details = {"t2": {"message": "server closed the connection before a whole response arrived"}}
        self.assertEqual(grade.void_quiet_passes(chosen, results, details), ["Idle.Cpu"])
        self.assertEqual((results["t1"][0], results["t3"][0]), ("failed", "passed"))
        self.assertIn("passed only by doing nothing", details["t1"]["message"])

    def test_where_the_category_has_no_answer_to_judge_the_whole_run_decides(self):
        a = grade.Category("a", 10, ["*"], [], quiet=["Idle.*"])
        b = grade.Category("b", 10, ["*"], [], quiet=[])
        chosen = [("t1", "Idle.Cpu", a), ("t2", "Leak.Fifo", a), ("t3", "Get.File", b)]
        results = {"t1": ("passed", 1, ""), "t2": ("skipped", 1, "cannot measure"), "t3": ("passed", 1, "")}
        self.assertEqual(grade.void_quiet_passes(chosen, results, {}), [])
        results["t3"] = ("failed", 1, "")
        no_answer = {"t3": {"message": "malformed status line: 'aaaa'"}}
        self.assertEqual(grade.void_quiet_passes(chosen, results, no_answer), ["Idle.Cpu"])

    def test_a_valid_but_wrong_answer_is_an_answer(self):
        a = grade.Category("a", 10, ["*"], [], quiet=["Idle.*"])
        chosen = [("t1", "Idle.Cpu", a), ("t2", "Leak.Fds", a)]
        results = {"t1": ("passed", 1, ""), "t2": ("failed", 1, "")}
        details = {"t2": {"message": "descriptors did not come back to the baseline of 17"}}
        self.assertEqual(grade.void_quiet_passes(chosen, results, details), [])

    def test_a_list_keeps_its_first_item_in_the_cause(self):
        self.assertEqual(grade.cause_of("2 of 6 failed:\n  no Host: answered 200\n  two Host: answered 200"),
                         "2 of 6 failed: no Host: answered 200")


class Usage(unittest.TestCase):
    def usage_error(self, argv):
        args = grade.parse_args(argv)
        with self.assertRaises(grade.UsageError) as e:
            grade.check_command(args)
        return str(e.exception)

    def test_a_command_that_cannot_run_is_a_usage_error(self):
        self.assertIn("does not exist", self.usage_error(["--", "./no/such/server"]))
        self.assertIn("not an executable", self.usage_error(["--", grade.HERE]))
        self.assertIn("not found in PATH", self.usage_error(["--", "no-such-server-psp"]))

    def test_url_goes_alone_and_names_the_loopback(self):
        for argv, words in ((["--url", "http://127.0.0.1:8080/", "--", "./server"], "without a command"),
                            (["--url", "http://example.com:8080/"], "loopback only"),
                            (["--url", "http://127.0.0.1:0/"], "loopback only"),
                            (["--pid", "1", "--", "./server"], "--pid goes with --url")):
            with self.assertRaises(grade.UsageError) as e:
                grade.parse_args(argv)
            self.assertIn(words, str(e.exception))
        self.assertEqual(grade.parse_args(["--url", "http://localhost:8080"]).url_port, 8080)

    def test_url_must_accept_now(self):
        port = grade.free_port()
        self.assertIn("nothing accepts connections there", self.usage_error(["--url", f"http://127.0.0.1:{port}/"]))

    def test_the_static_profile_needs_root(self):
        self.assertIn("put {root} in the command",
                      self.usage_error(["--profile", "static", "--", "python3", "-m", "http.server", "{port}"]))
        grade.check_command(grade.parse_args(["--profile", "static", "--", "python3", "s.py", "{port}", "{root}"]))

    def test_the_listening_line_may_say_localhost(self):
        self.assertEqual(grade.LISTENING.fullmatch("listening on http://localhost:8080/").group(1), "8080")
        self.assertIsNone(grade.LISTENING.fullmatch("listening on http://example.com:8080/"))

    def test_a_server_runs_under_the_memory_cap(self):
        os.environ["PSP_GRADE_MEMORY_MB"] = "300"
        try:
            script = "import resource, sys; sys.exit(str(resource.getrlimit(resource.RLIMIT_AS)))"
            _, _, why = grade.start([sys.executable, "-c", script, "{port}"], "/tmp")
        finally:
            del os.environ["PSP_GRADE_MEMORY_MB"]
        self.assertIn(f"({300 << 20}, {300 << 20})", why)

    def test_a_server_that_rejects_port_gets_a_hint(self):
        script = "import sys; sys.exit('error: unrecognized arguments: --port 0')"
        _, _, why = grade.start([sys.executable, "-c", script], "/tmp")
        self.assertIn("put {port} in the command", why)

    def test_each_passes_the_options_on_but_not_each_or_report(self):
        self.assertEqual(grade.each_options(["--quick", "--each", "s/*/run.sh", "--report", "r", "--chapter", "1",
                                             "--jobs", "2"]),
                         ["--quick", "--chapter", "1"])
        self.assertEqual(grade.submission_name("submissions/alice/run.sh"), "alice")
        self.assertEqual(grade.submission_name("submissions/bob.py"), "bob.py")


# The interpreter of the servers these tests start: as root they run as nobody (--user), who cannot reach a Python
# under /root (pyenv's), so the system's when there is one.
FIXTURE_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def nobody_can_reach(*paths):
    """As root: can the user nobody read each of `paths` (every folder above it searchable)? The grader refuses a
    server nobody cannot reach, and a checkout inside a private folder (a temporary one, /root) is such a place; the
    CMake tests then grade as root (tests/grader/CMakeLists.txt), and so do these."""
    if os.geteuid() != 0:
        return True
    if not os.path.exists("/usr/bin/setpriv"):
        return False
    return all(subprocess.run(["/usr/bin/setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--",
                               "test", "-r", path]).returncode == 0 for path in paths)


NOBODY_REACHES_THE_TREE = nobody_can_reach(os.path.join(grade.HERE, "static_server.py"), FIXTURE_PYTHON, SUITE)
AS_USER = [] if NOBODY_REACHES_THE_TREE else ["--user", "root"]


class EachFolder(unittest.TestCase):
    def test_a_line_per_submission_with_its_own_exit_status_and_the_same_with_jobs(self):
        """Three submissions: one that gets full marks, one whose run.sh is not executable (a usage error, 2), one
        that never answers. Graded one at a time and two at a time: the same verdicts, and a table of the class."""
        with tempfile.TemporaryDirectory(prefix="psp-each-") as top:
            os.chmod(top, 0o755)  # as root, the servers run as nobody
            servers = {"alice": ("static_server.py", 0o755), "bob": ("static_server.py", 0o644),
                       "carol": ("silent_server.py", 0o755)}
            for name, (server, mode) in servers.items():
                os.makedirs(os.path.join(top, "submissions", name))
                run = os.path.join(top, "submissions", name, "run.sh")
                with open(run, "w") as f:
                    f.write(f'#!/bin/sh\nexec {FIXTURE_PYTHON} {os.path.join(grade.HERE, server)} "$1" "$2"\n')
                os.chmod(run, mode)
                os.chmod(os.path.dirname(run), 0o755)
            os.chmod(os.path.join(top, "submissions"), 0o755)
            verdicts = []
            for jobs in ("1", "2"):
                reports = os.path.join(top, "reports-" + jobs)
                out = subprocess.run([sys.executable, os.path.join(grade.HERE, "grade.py"), "--suite", SUITE,
                                      "--profile", "static", "--rubric", os.path.join(grade.HERE, "conventions.ini"),
                                      "--quick", "--jobs", jobs, "--report", reports, *AS_USER, "--each",
                                      os.path.join(top, "submissions", "*", "run.sh"), "--", "{submission}",
                                      "{port}", "{root}"], capture_output=True, text=True)
                self.assertEqual(out.returncode, 1, out.stdout + out.stderr)
                with open(os.path.join(reports, "grades.csv")) as f:
                    rows = {r["name"]: r for r in csv.DictReader(f)}
                self.assertEqual((rows["alice"]["score"], rows["alice"]["exit"]), ("100.0", "0"))
                self.assertEqual(rows["bob"]["exit"], "2")
                self.assertIn("not an executable file", rows["bob"]["first_cause"])
                self.assertEqual((rows["carol"]["score"], rows["carol"]["exit"]), ("0.0", "1"))
                self.assertIn("never answered a request", rows["carol"]["first_cause"])
                with open(os.path.join(reports, "grades.jsonl")) as f:
                    self.assertEqual(sorted(json.loads(line)["name"] for line in f), ["alice", "bob", "carol"])
                with open(os.path.join(reports, "grades.md")) as f:
                    table = f.read()
                self.assertIn("| alice | 100 / 100 | 0 |", table)
                self.assertIn("| carol | 0 / 100 | 1 |", table)
                verdicts.append({n: (r["score"], r["exit"]) for n, r in rows.items()})
            self.assertEqual(verdicts[0], verdicts[1])


@unittest.skipUnless(os.geteuid() == 0 and os.path.exists("/usr/bin/python3"), "needs root and /usr/bin/python3")
class AsAnotherUser(unittest.TestCase):
    def test_as_root_the_server_runs_as_nobody_and_leaves_no_temporary_file(self):
        args = grade.parse_args(["--", "/usr/bin/python3", "-c", "x", "{port}"])
        prefix, user = grade.run_as(args)
        self.assertEqual(user.pw_name, "nobody")
        script = "import os, sys, tempfile; sys.exit(f'uid {os.getuid()} tmp {tempfile.gettempdir()}')"
        _, _, why = grade.start(prefix + ["/usr/bin/python3", "-c", script, "{port}"], "/tmp")
        self.assertIn(f"uid {user.pw_uid} ", why)
        self.assertEqual(grade.run_as(grade.parse_args(["--user", "root", "--", "/usr/bin/python3"]))[0], [])

    def test_a_command_the_user_cannot_read_is_refused_before_anything_runs(self):
        with tempfile.TemporaryDirectory(prefix="psp-user-") as top:  # 0700: nobody cannot enter it
            server = os.path.join(top, "server.py")
            open(server, "w").close()
            with self.assertRaises(grade.UsageError) as e:
                grade.run_as(grade.parse_args(["--", "/usr/bin/python3", server, "{port}"]))
            self.assertIn("cannot read", str(e.exception))
            self.assertIn("--user root", str(e.exception))

    @unittest.skipUnless(NOBODY_REACHES_THE_TREE, "nobody cannot reach this checkout: its servers would run as root")
    def test_grading_leaves_nothing_in_tmp(self):
        """The grader's TMPDIR (a fresh folder here, so that other graders running at the same time do not count)
        is empty afterwards, and no folder of the checks (psp-static-PID-...) of a finished process is left."""
        def static_roots():
            return {(base, n) for base in ("/tmp", "/dev/shm") if os.path.isdir(base)
                    for n in os.listdir(base) if n.startswith("psp-static-")}

        def finished(name):
            try:
                os.kill(int(name.split("-")[2]), 0)
                return False
            except ProcessLookupError:
                return True
            except (ValueError, PermissionError):
                return False

        before = static_roots()
        with tempfile.TemporaryDirectory(prefix="psp-user-report-") as top:
            tmp = os.path.join(top, "tmp")
            os.mkdir(tmp)
            os.chmod(top, 0o755)
            os.chmod(tmp, 0o1777)  # as /tmp
            out = subprocess.run([sys.executable, os.path.join(grade.HERE, "grade.py"), "--suite", SUITE, "--profile",
                                  "static", "--rubric", os.path.join(grade.HERE, "conventions.ini"), "--quick",
                                  "--report", os.path.join(top, "report"), "--", FIXTURE_PYTHON,
                                  os.path.join(grade.HERE, "static_server.py"), "{port}", "{root}"],
                                 capture_output=True, text=True, env=dict(os.environ, TMPDIR=tmp))
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
            self.assertIn("the server runs as nobody", out.stdout)
            self.assertEqual(os.listdir(tmp), [])
        left = {n for base, n in static_roots() - before if finished(n)}
        self.assertEqual(left, set())

if __name__ == "__main__":
    unittest.main()
