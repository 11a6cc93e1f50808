#!/usr/bin/env python3
"""Tests of corepath.py on a scratch repository: `python3 docs/tools/test_corepath.py` (CTest: docs_core_path_tool)."""

import contextlib
import io
import os
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import corepath  # noqa: E402
from scratch import ScratchFiles  # noqa: E402

# A chapter whose core is its introduction (6 words, the title's 3 included), The code (2 + 5), and Labs (1, then
# the lab's 4 and its answer's 3, "Answer" included). The box, the nav, the code and the comments do not count: 21.
CHAPTER = """\
# 01 · One thread

<!-- nav -->
[Contents](README.md) · [02 · Two →](02-two.md)
<!-- /nav -->

> **Core path**, about 0 words: this introduction, then [The code](#the-code) · [Labs](#labs). A section that
> opens with **Depth** can wait for a second reading.

One [linked](https://example.com/a/long/url) introduction. <!-- a comment -->

## The code

Five words, in a sentence.

```cpp
int main() { return 0; }  // not counted: code
```

## The numbers

> **Depth**: skip on a first reading; the core path goes on at [Labs](#labs).

Many words here that a first reading skips, however many there are.

### A table

| a | b |
|---|--:|
| 1 | 2 |

## Labs

### Lab 1.1: try it

<details><summary>Answer</summary>

It works.

</details>
"""


class CorePathTest(ScratchFiles, unittest.TestCase):
    def test_stale_notes_do_not_count(self):
        # sync.py's notes beside numbers and blocks of older runs go when the run is made again: not core words.
        self.assertEqual(corepath.word_count("took 7.2 <sup>(measured on older 05 code)</sup> µs"), 3)
        self.assertEqual(corepath.word_count("> Measured on an earlier version of 05-epoll than the code in this "
                                             "repository; re-measure: `x`.\nplain words"), 2)

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        self.write("docs/01-one.md", CHAPTER)
        self.write("docs/README.md", "# Contents\n")  # not a chapter: only its length is checked

    def tearDown(self):
        self.tmp.cleanup()

    def run_tool(self, *args):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = corepath.main(["--root", self.root, *args])
        return code, out.getvalue() + err.getvalue()

    def test_what_counts_as_a_word(self):
        box, sections, top, problems = corepath.analyse(CHAPTER)
        self.assertEqual(problems, [])
        self.assertEqual(top, 6)  # "01 · One thread" (3) and "One linked introduction." (3)
        self.assertEqual([(s.title, s.depth) for s in sections],
                         [("The code", False), ("The numbers", True), ("A table", True), ("Labs", False),
                          ("Lab 1.1: try it", False)])
        self.assertEqual(corepath.core_words(sections, top), 6 + 7 + 1 + 7)
        self.assertEqual(box[2], ["the-code", "labs"])

    def test_the_count_is_written_then_checked(self):
        self.write("docs/01-one.md", CHAPTER.replace("about 0 words", "about 1,000 words"))
        code, report = self.run_tool("--check")
        self.assertEqual(code, 1)
        self.assertIn("the core path box says about 1,000 words, the core has 21", report)
        self.assertIn("about 1,000 words", self.read("docs/01-one.md"))  # --check changes nothing
        code, report = self.run_tool()
        self.assertEqual(code, 0, report)
        self.assertIn("about 0 words", self.read("docs/01-one.md"))  # 21, to the nearest hundred
        self.assertEqual(self.run_tool("--check")[0], 0)
        self.write("docs/01-one.md", CHAPTER.replace("## The code\n", "## The code\n\n" + "word " * 140 + "\n"))
        self.assertEqual(self.run_tool("--check")[0], 1)
        self.assertEqual(self.run_tool()[0], 0)
        self.assertIn("about 200 words", self.read("docs/01-one.md"))
        self.assertEqual(self.run_tool("--check")[0], 0)

    def test_a_small_edit_stays_within_the_tolerance(self):
        self.write("docs/01-one.md", CHAPTER.replace("about 0 words", "about 100 words"))
        self.assertEqual(self.run_tool("--check")[0], 0)  # 21 words: within 100 of the box
        self.write("docs/01-one.md", CHAPTER.replace("about 0 words", "about 200 words"))
        self.assertEqual(self.run_tool("--check")[0], 1)

    def test_a_chapter_without_a_box_fails(self):
        self.write("docs/02-two.md", "# 02 · Two\n\nText.\n\n## Labs\n")
        code, report = self.run_tool("--check")
        self.assertEqual(code, 1)
        self.assertIn("docs/02-two.md: no core path box", report)
        self.assertNotIn("docs/01-one.md:", report.split("problem(s)")[1])

    def test_the_box_lists_every_core_section_in_order_and_nothing_else(self):
        cases = {
            "[The code](#the-code) · [Labs](#labs)": None,
            "[Labs](#labs)": "core sections it does not link: #the-code",
            "[The code](#the-code) · [The numbers](#the-numbers) · [Labs](#labs)":
                "links to no core `##` section: #the-numbers",
            "[Labs](#labs) · [The code](#the-code)": "not in the chapter's order",
            "[The code](#the-code) · [Labs](#labs) · [Labs](#labs)": "it links a section twice",
        }
        for links, problem in cases.items():
            text = CHAPTER.replace("[The code](#the-code) · [Labs](#labs)", links).replace("about 0", "about 100")
            self.write("docs/01-one.md", text)
            code, report = self.run_tool("--check")
            if problem is None:
                self.assertEqual(code, 0, report)
            else:
                self.assertEqual(code, 1, links)
                self.assertIn(problem, report)

    def test_the_depth_note_says_where_the_core_path_goes_on(self):
        text = CHAPTER.replace("goes on at [Labs](#labs)", "goes on at [The code](#the-code)")
        self.write("docs/01-one.md", text.replace("about 0", "about 100"))
        code, report = self.run_tool("--check")
        self.assertEqual(code, 1)
        self.assertIn("the depth note of `The numbers` must end by linking where the core path goes on, "
                      "[Labs](#labs)", report)

    def test_a_subsection_can_be_depth_on_its_own(self):
        text = CHAPTER.replace("Five words, in a sentence.\n",
                               "Five words, in a sentence.\n\n### Aside\n\n> **Depth**: skip on a first reading; "
                               "the core path goes on at [Labs](#labs).\n\nSkipped words.\n")
        box, sections, top, _ = corepath.analyse(text)
        self.assertEqual([(s.title, s.depth) for s in sections][:2], [("The code", False), ("Aside", True)])
        self.assertEqual(corepath.core_words(sections, top), 21)
        self.write("docs/01-one.md", text.replace("about 0", "about 100"))
        self.assertEqual(self.run_tool("--check")[0], 0)

    def test_a_lab_is_never_depth(self):
        text = CHAPTER.replace("### Lab 1.1: try it\n",
                               "### Lab 1.1: try it\n\n> **Depth**: skip on a first reading.\n")
        self.write("docs/01-one.md", text.replace("about 0", "about 100"))
        code, report = self.run_tool("--check")
        self.assertEqual(code, 1)
        self.assertIn("`Lab 1.1: try it` is marked depth: every lab is on the core path", report)

    def test_a_long_core_fails(self):
        long_text = CHAPTER.replace("Five words, in a sentence.\n", "word " * 3600 + "\n")
        self.write("docs/01-one.md", long_text)
        self.assertEqual(self.run_tool()[0], 1)  # writes the count, and still fails on the length
        code, report = self.run_tool("--check")
        self.assertEqual(code, 1)
        self.assertIn("the core path has 3,616 words, over 3,000", report)
        self.assertIn("about 3,600 words", self.read("docs/01-one.md"))
        # The same words in a depth section are fine.
        self.write("docs/01-one.md", CHAPTER.replace("Many words here", "word " * 3600 + "\nMany words here"))
        self.assertEqual(self.run_tool("--check")[0], 0)

    def test_the_limits(self):
        # GUIDE.md section 3: a core path read in one sitting, a chapter that a student finishes.
        self.assertEqual((corepath.MAX_CORE_WORDS, corepath.MAX_CHAPTER_WORDS), (3000, 5000))

    def test_a_core_just_over_the_limit_fails(self):
        self.write("docs/01-one.md", CHAPTER.replace("Five words, in a sentence.\n", "word " * 2985 + "\n"))
        self.assertEqual(self.run_tool()[0], 1)  # 2,985 + the 16 other core words: 3,001
        self.assertIn("the core path has 3,001 words, over 3,000", self.run_tool("--check")[1])
        # 3,000: at the limit, not over it.
        self.write("docs/01-one.md", CHAPTER.replace("Five words, in a sentence.\n", "word " * 2984 + "\n"))
        self.assertEqual(self.run_tool()[0], 0)

    def test_a_long_chapter_fails_even_when_its_core_is_short(self):
        # 5,100 words of depth: the core is still 21 words, the chapter is not one sitting's reading any more.
        self.write("docs/01-one.md", CHAPTER.replace("Many words here", "word " * 5100 + "\nMany words here"))
        code, report = self.run_tool("--check")
        self.assertEqual(code, 1)
        self.assertIn("docs/01-one.md: the page has 5,154 words in all, over 5,000: split it into two pages", report)
        self.assertNotIn("the core path has", report)
        self.write("docs/01-one.md", CHAPTER.replace("Many words here", "word " * 4900 + "\nMany words here"))
        self.assertEqual(self.run_tool("--check")[0], 0)

    def test_every_page_of_docs_is_held_to_the_chapter_length(self):
        # Not a chapter (no NN- prefix): no box is needed, but the same counting and the same 5,000 words apply.
        self.write("docs/static-files.md", "# Serving files\n\n" + "word " * 4990 + "\n\n```sh\n" + "code " * 900
                   + "\n```\n")
        code, report = self.run_tool("--check")
        self.assertEqual(code, 0, report)
        self.assertIn("docs/static-files.md: 4,992 words (not a chapter: no core path)", report)
        self.write("docs/static-files.md", "# Serving files\n\n" + "word " * 5000 + "\n")
        code, report = self.run_tool("--check")
        self.assertEqual(code, 1)
        self.assertIn("docs/static-files.md: the page has 5,002 words in all, over 5,000", report)
        self.assertNotIn("no core path box", report)

    def test_a_page_with_a_box_is_checked_as_a_chapter(self):
        # static-files.md is read as a chapter: its box opts it in to every rule of one.
        page = CHAPTER.replace("# 01 · One thread", "# Serving files").replace("about 0 words", "about 100 words")
        self.write("docs/static-files.md", page)
        code, report = self.run_tool("--check")
        self.assertEqual(code, 0, report)
        self.assertIn("docs/static-files.md: core 20 words of 53", report)
        self.write("docs/static-files.md", page.replace("## The numbers\n\n> **Depth**: skip on a first reading; "
                                                        "the core path goes on at [Labs](#labs).\n", "## The numbers\n"))
        code, report = self.run_tool("--check")
        self.assertEqual(code, 1)
        self.assertIn("docs/static-files.md:7: the core path box does not list the core sections in order", report)

    def test_a_chapter_over_both_lengths_fails_with_both(self):
        long_core = CHAPTER.replace("Five words, in a sentence.\n", "word " * 3100 + "\n").replace(
            "Many words here", "word " * 2000 + "\nMany words here")
        self.write("docs/09-made-up.md", long_core.replace("about 0 words", "about 3,100 words"))
        code, report = self.run_tool("--check")
        self.assertEqual(code, 1, report)
        self.assertIn("docs/09-made-up.md: the core path has 3,116 words, over 3,000", report)
        self.assertIn("docs/09-made-up.md: the page has 5,149 words in all, over 5,000", report)

if __name__ == "__main__":
    unittest.main()
