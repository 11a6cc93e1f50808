#!/usr/bin/env python3
"""grade.py's logic, and the rubric against the suite: test_grade.py PATH/TO/integration_tests (run by CTest)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grade  # noqa: E402

SUITE = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(grade.REPO, "build", "integration_tests")
RUBRIC = os.path.join(grade.HERE, "rubric.ini")


def suite_tests(chapter, command="server"):
    env = dict(os.environ, PSP_GRADE_COMMAND=command, PSP_GRADE_CHAPTER=str(chapter))
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
    def test_from_the_folder_in_the_path(self):
        self.assertEqual(grade.chapter_from_path("./build/01-blocking-single/run_server"), 1)
        self.assertEqual(grade.chapter_from_path("build/06-io_uring-advanced/run_server"), 6)
        self.assertEqual(grade.chapter_from_path("/tmp/lab/run_server"), 0)
        self.assertEqual(grade.chapter_from_path("python3"), 0)


class Scoring(unittest.TestCase):
    def test_skipped_checks_count_for_nothing_and_a_category_of_skips_is_left_out(self):
        a = grade.Category("a", 10, ["A.*"], [])
        b = grade.Category("b", 20, ["B.*"], [])
        chosen = [("t1", "A.x", a), ("t2", "A.y", a), ("t3", "A.z", a), ("t4", "B.x", b)]
        results = {"t1": ("passed", 1), "t2": ("failed", 1), "t3": ("skipped", 1), "t4": ("skipped", 1)}
        rows, total, possible = grade.score(chosen, results, [a, b])
        self.assertEqual((rows[0]["score"], rows[1]["score"]), (5.0, None))
        self.assertEqual((total, possible), (5.0, 10))

    def test_a_check_not_run_is_lost(self):
        a = grade.Category("a", 10, ["A.*"], [])
        rows, total, _ = grade.score([("t1", "A.x", a), ("t2", "A.y", a)], {"t1": ("passed", 1)}, [a])
        self.assertEqual((rows[0]["not run"], total), (1, 5.0))


class Rubric(unittest.TestCase):
    def test_every_check_of_the_suite_has_a_course_category_for_every_chapter(self):
        categories, _ = grade.load_rubric(RUBRIC, "course")
        for chapter in range(8):
            tests = suite_tests(chapter)
            chosen = {t for t, _, _ in grade.choose(tests, categories, quick=False)}
            self.assertEqual(sorted(set(tests) - chosen), [], f"chapter {chapter}: checks in no category")

    def test_every_pattern_names_a_check(self):
        names = set()
        for chapter in range(8):
            names |= {grade.check_name(t).split("[")[0] for t in suite_tests(chapter)}
        for profile in ("course", "static"):
            categories, rfc = grade.load_rubric(RUBRIC, profile)
            patterns = [p for c in categories for p in c.checks + c.quick] + [p for p, _ in rfc]
            for p in patterns:
                self.assertTrue(any(grade.glob(n, p) for n in names), f"{profile}: '{p}' names no check")

    def test_quick_checks_are_checks_of_their_category(self):
        for profile in ("course", "static"):
            categories, _ = grade.load_rubric(RUBRIC, profile)
            for c in categories:
                self.assertTrue(c.quick, f"{profile}/{c.name} has no quick check")


if __name__ == "__main__":
    unittest.main()
