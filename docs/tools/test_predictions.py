#!/usr/bin/env python3
"""Tests of predictions.py on a scratch repository: `python3 docs/tools/test_predictions.py` (CTest:
docs_predictions_tool)."""

import contextlib
import io
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import predictions  # noqa: E402
from scratch import ScratchFiles  # noqa: E402

CHAPTER = """\
# 01 · One thread

## The numbers

## Labs

### Lab 1.2: the second

The [numbers](#the-numbers) have no wait. *Predict* them with
the wait back. *Measure*:

```sh
### Lab 9.9: not a heading, inside code
```

### Lab 1.1: the first

*Predict* the rate at c = 1 <!-- value: x.md col=a -->879<!-- /value --> and the mean.
*Expect* nothing.
"""

APPENDIX = """\
# Serving files

### Lab S.1: slow

Build it first with `make`. *Predict* the memory.
"""


class PredictionsTest(ScratchFiles, unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        self.write("docs/01-one.md", CHAPTER)
        self.write("docs/files.md", APPENDIX)
        self.write("docs/00-intro.md", "# 00 · Intro\n\n### Lab 0.1: first\n\n1. *Predict* it.\n2. *Measure* it.\n")

    def tearDown(self):
        self.tmp.cleanup()

    def run_tool(self, *args):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = predictions.main(["--root", self.root, *args])
        return code, out.getvalue() + err.getvalue()

    def test_the_sheet_lists_every_lab_in_the_course_order(self):
        self.assertEqual(self.run_tool("--check")[0], 1)  # no sheet yet
        self.assertEqual(self.run_tool()[0], 0)
        sheet = self.read("docs/predictions.md")
        order = [sheet.index(s) for s in ("[00 · Intro](00-intro.md)", "Lab 0.1", "[01 · One thread](01-one.md)",
                                          "Lab 1.2", "Lab 1.1", "[Serving files](files.md)", "Lab S.1")]
        self.assertEqual(order, sorted(order))
        self.assertNotIn("9.9", sheet)  # a heading inside a code block is code
        self.assertEqual(sheet.count("| <br><br><br> | |"), 4)
        self.assertEqual(self.run_tool("--check")[0], 0)

    def test_what_is_taken_of_a_lab(self):
        self.run_tool()
        sheet = self.read("docs/predictions.md")
        # The link to the lab's heading; the short lead-in the question refers to, with its link pointed at the page.
        self.assertIn("### [Lab 1.2: the second](01-one.md#lab-12-the-second)\n\nThe [numbers](01-one.md#the-numbers) "
                      "have no wait. *Predict* them with the wait back.\n", sheet)
        # A generated value is kept whole (sync.py checks it on the sheet), and the text stops at *Expect*.
        self.assertIn("\n*Predict* the rate at c = 1 <!-- value: x.md col=a -->879<!-- /value --> and the mean.\n",
                      sheet)
        # A list item's number and a code lab's build step are not part of the question.
        self.assertIn("\n*Predict* it.\n", sheet)
        self.assertIn("\n*Predict* the memory.\n", sheet)

    def test_a_changed_lab_fails_the_check(self):
        self.run_tool()
        self.write("docs/01-one.md", CHAPTER.replace("the rate at c = 1", "the rate at c = 10"))
        code, report = self.run_tool("--check")
        self.assertEqual(code, 1)
        self.assertIn("docs/predictions.md is not what the labs say", report)
        self.assertEqual(self.run_tool()[0], 0)
        self.assertIn("the rate at c = 10", self.read("docs/predictions.md"))

    def test_a_lab_without_a_prediction_fails(self):
        self.write("docs/01-one.md", CHAPTER + "\n### Lab 1.3: no question\n\n*Measure* only.\n")
        code, report = self.run_tool()
        self.assertEqual(code, 1)
        self.assertIn("docs/01-one.md:21: `Lab 1.3: no question` has no `*Predict*`", report)


if __name__ == "__main__":
    unittest.main()
