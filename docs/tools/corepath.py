#!/usr/bin/env python3
"""Keeps each chapter's core path marked, and short.

    python3 docs/tools/corepath.py            write each chapter's core word count into its box, then check
    python3 docs/tools/corepath.py --check    change nothing; exit 1 and list every problem (CTest: docs_core_path)

Every chapter (docs/NN-*.md) has a core path a student can read in one sitting, at most MAX_CORE_WORDS (3,000): the
take-aways of its first screen, the code highlights, the one run, the labs. The rest, the depth, stays in the chapter
below a visible note. And every page of docs/, chapter or not (static-files.md, the appendices, the contents), is
at most MAX_CHAPTER_WORDS (5,000) in all, counted the same way: a page that grows past that is two pages
(GUIDE.md section 3). A page that is not a chapter but is read as one (static-files.md) opts in with a box of its
own, and is then checked as a chapter is. Two conventions, both seen on the rendered page:

  > **Core path**, about 2,900 words: this first screen, then [The code](#the-code) · [Running it](#running-it) ·
  > [Labs](#labs). A section that opens with **Depth** can wait for a second reading.

    The box, a block quote on the first screen (before the first `##` heading). It links every core `##` section
    of the chapter, in the chapter's order, and no other; "about N words" is the core's count (below), rounded to
    the nearest hundred by this script; the check accepts a box that is within 100 words of the count, so that a
    small edit does not fail it, and the script's default mode rewrites it.

  ## The numbers

  > **Depth**: skip on a first reading; the core path goes on at [Labs](#labs).

    A depth section: its first line is a block quote that starts with **Depth** and links the next core heading
    after the section (when there is one), so a reader who skips knows where to go. Every subsection of a depth
    section is depth too; a `###` of a core section can be depth on its own. Labs are never depth: every lab is on
    the core path, and `## Labs` is a core section.

What counts as a word: a token with a letter or a digit, in the chapter's text outside fenced code blocks, HTML
comments (the generated blocks' markers), the navigation block and the box itself; link targets and HTML tags do
not count, their text does. Code is left out because the code highlights are read as code, not as prose, and their
length is the sources' (GUIDE.md budgets it in lines); tables, the runs' provenance sentences and the labs' answers
(<details>) count, since the core-path reader reads them. The whole text before the first `##` heading is core.
A core over MAX_CORE_WORDS words fails the check, and so does a page over MAX_CHAPTER_WORDS; so does a chapter
without a box, a box that does not match the chapter's core sections, a depth note that points to the wrong place,
and a lab marked depth.

Standard library only; Python 3.8+.
"""

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import sync  # noqa: E402  (docs/tools/sync.py: GitHub's slugs, fenced code)

MAX_CORE_WORDS = 3000      # a chapter's core path: about 15 minutes of reading
MAX_CHAPTER_WORDS = 5000   # any page of docs/, chapter or not, depth included

TOLERANCE = 100  # the box's "about N words" may be this far from the count
HEADING_RE = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
BOX_RE = re.compile(r"^> \*\*Core path\*\*")
BOX_WORDS_RE = re.compile(r"about ([\d,]+) words")
DEPTH_RE = re.compile(r"^> \*\*Depth\*\*")
ANCHOR_LINK_RE = re.compile(r"\[((?:[^\[\]]|\[[^\]]*\])*)\]\(#([^)\s]+)\)")
LAB_RE = re.compile(r"^Lab \d+\.\d+")


class Section:
    """One heading and the lines up to the next heading of any level."""

    def __init__(self, level, title, anchor, line):
        self.level, self.title, self.anchor, self.line = level, title, anchor, line
        self.depth = False   # marked depth, on its own or through its parent
        self.note = None     # (line number, text) of its depth note
        self.words = 0
        self.end = None      # index in the section list of the first heading after it of the same or a higher level


# What sync.py writes beside a number or block whose run measured older code: it goes when the run is made again,
# so it does not count against the core (else every re-measurement would move the counts).
STALE_NOTES = re.compile(r"<sup>\(measured on older [^<]*\)</sup>|^> Measured on an earlier version of .*$", re.M)


def word_count(text):
    text = STALE_NOTES.sub(" ", text)
    text = re.sub(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\([^)]*\)", r"\1", text)  # links and images: their text
    text = re.sub(r"<[^>]+>", " ", text)                                    # HTML tags
    return sum(1 for token in text.split() if re.search(r"\w", token))


def visible_lines(text):
    """The chapter's lines with fenced code, HTML comments and the nav block blanked out (line numbers kept)."""
    out, in_fence, in_nav = [], None, False
    for line in text.split("\n"):
        was = in_fence
        in_fence = sync.fence_state(line, in_fence)
        stripped = line.strip()
        if stripped == "<!-- nav -->":
            in_nav = True
        blank = was is not None or in_fence is not None or in_nav
        if stripped == "<!-- /nav -->":
            in_nav = False
        out.append("" if blank else line)
    joined = re.sub(r"<!--.*?-->", lambda m: "\n" * m.group(0).count("\n"), "\n".join(out), flags=re.S)
    return joined.split("\n")


def paragraph_at(lines, i):
    """The indices of the block-quote paragraph that starts at line i."""
    j = i
    while j < len(lines) and lines[j].startswith(">"):
        j += 1
    return range(i, j)


def analyse(text):
    """Returns (box, sections, top_words, problems): box is None or (line, stated words or None, [anchors]); the
    top's words are those before the first `##`, the title's own line included."""
    lines = visible_lines(text)
    sections, problems, box, seen = [], [], None, {}
    skip = set()
    current = None  # None: the top of the chapter
    top_words = 0
    for i, line in enumerate(lines):
        m = HEADING_RE.match(line)
        if m and len(m.group(1)) >= 2:
            slug = sync.github_slug(m.group(2))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            current = Section(len(m.group(1)), m.group(2), slug if n == 0 else f"{slug}-{n}", i + 1)
            sections.append(current)
            following = next((j for j in range(i + 1, len(lines)) if lines[j].strip()), None)
            if following is not None and DEPTH_RE.match(lines[following]):
                para = paragraph_at(lines, following)
                current.note = (following + 1, " ".join(lines[k] for k in para))
            current.words += word_count(m.group(2))
            continue
        if m and current is None:
            slug = sync.github_slug(m.group(2))  # the title: GitHub gives it an anchor too
            seen[slug] = seen.get(slug, 0) + 1
        if i in skip:
            continue
        if current is None and BOX_RE.match(line):
            para = paragraph_at(lines, i)
            skip.update(para)
            box_text = " ".join(lines[k] for k in para)
            if box is not None:
                problems.append(f"line {i + 1}: a second Core path box")
                continue
            stated = BOX_WORDS_RE.search(box_text)
            box = (i + 1, int(stated.group(1).replace(",", "")) if stated else None,
                   [a for _, a in ANCHOR_LINK_RE.findall(box_text)])
            continue
        words = word_count(line)
        if current is None:
            top_words += words
        else:
            current.words += words
    # Where each section ends, and which are depth.
    for k, s in enumerate(sections):
        s.end = next((j for j in range(k + 1, len(sections)) if sections[j].level <= s.level), len(sections))
    for k, s in enumerate(sections):
        if s.note:
            s.depth = True
            for j in range(k + 1, s.end):
                sections[j].depth = True
    return box, sections, top_words, problems


def core_words(sections, top_words):
    return top_words + sum(s.words for s in sections if not s.depth)


def rounded(n):
    return int(round(n / 100.0)) * 100


def page_words(text):
    """Every word of a page, depth included, counted as the core is (code, comments and the nav block left out)."""
    _, sections, top_words, _ = analyse(text)
    return top_words + sum(s.words for s in sections)


def length_problems(doc, core, total):
    """The length rules: [problems]."""
    over = []
    if core is not None and core > MAX_CORE_WORDS:
        over.append(f"the core path has {core:,} words, over {MAX_CORE_WORDS:,}")
    if total > MAX_CHAPTER_WORDS:
        over.append(f"the page has {total:,} words in all, over {MAX_CHAPTER_WORDS:,}")
    fixes = {True: "mark a section depth (a `> **Depth**` note under its heading) or move it to an appendix",
             False: "split it into two pages (keep a short section under each heading other pages link to)"}
    return [f"{doc}: {what}: {fixes[what.startswith('the core')]}" for what in over]


def check_chapter(doc, text):
    """[problems] of one chapter, each 'doc:line: what'; and the core's word count."""
    box, sections, top_words, found = analyse(text)
    problems = [f"{doc}:{p}" for p in found]
    count = core_words(sections, top_words)
    problems += length_problems(doc, count, top_words + sum(s.words for s in sections))
    if box is None:
        problems.append(f"{doc}: no core path box: the first screen (before the first `##`) needs a block quote "
                        f"that starts with `> **Core path**` (see docs/tools/corepath.py)")
        return problems, count
    line, stated, anchors = box
    core_h2 = [s.anchor for s in sections if s.level == 2 and not s.depth]
    if anchors != core_h2:
        listed, missing = set(anchors), [a for a in core_h2 if a not in anchors]
        wrong = [a for a in anchors if a not in core_h2]
        why = []
        if missing:
            why.append("core sections it does not link: " + ", ".join("#" + a for a in missing))
        if wrong:
            why.append("links to no core `##` section: " + ", ".join("#" + a for a in wrong))
        if not why and len(listed) < len(anchors):
            why.append("it links a section twice")
        if not why:
            why.append("its links are not in the chapter's order")
        problems.append(f"{doc}:{line}: the core path box does not list the core sections in order ({'; '.join(why)})"
                        f"; a section that is not core opens with a `> **Depth**` note")
    if stated is None:
        problems.append(f"{doc}:{line}: the core path box says no 'about N words' (the core has {count:,})")
    elif abs(stated - count) > TOLERANCE:
        problems.append(f"{doc}:{line}: the core path box says about {stated:,} words, the core has {count:,}: run "
                        f"`python3 docs/tools/corepath.py` to write the count")
    for k, s in enumerate(sections):
        if s.depth and (LAB_RE.match(s.title) or s.title == "Labs"):
            problems.append(f"{doc}:{s.line}: `{s.title}` is marked depth: every lab is on the core path")
        if not s.note:
            continue
        after = next((sections[j] for j in range(s.end, len(sections)) if not sections[j].depth), None)
        links = [a for _, a in ANCHOR_LINK_RE.findall(s.note[1])]
        if after is not None and links[-1:] != [after.anchor]:
            problems.append(f"{doc}:{s.note[0]}: the depth note of `{s.title}` must end by linking where the core "
                            f"path goes on, [{after.title}](#{after.anchor})")
    return problems, count


def write_count(text, count):
    """The chapter with its box's 'about N words' set to the rounded count."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if BOX_RE.match(line):
            for k in paragraph_at(lines, i):
                if BOX_WORDS_RE.search(lines[k]):
                    lines[k] = BOX_WORDS_RE.sub(f"about {rounded(count):,} words", lines[k], count=1)
                    return "\n".join(lines)
    return text


def chapter_files(root):
    docs = os.path.join(root, "docs")
    return sorted(f"docs/{name}" for name in os.listdir(docs) if sync.CHAPTER_RE.match(name))


def other_pages(root):
    """The pages of docs/ that are not chapters: held to MAX_CHAPTER_WORDS only, unless a page has a box of its own
    (static-files.md): then it is checked as a chapter is."""
    docs = os.path.join(root, "docs")
    return sorted(f"docs/{name}" for name in os.listdir(docs)
                  if name.endswith(".md") and not sync.CHAPTER_RE.match(name))


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Check (or write) each chapter's core path: the box, the depth notes, the core's word count.")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if anything is wrong")
    parser.add_argument("--root", default=os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                        "..", "..")),
                        help="the repository root (default: two folders above this script)")
    parser.add_argument("files", nargs="*",
                        help="only these pages (repository paths); default: every docs/*.md, chapters first")
    options = parser.parse_args(argv)
    root = os.path.abspath(options.root)
    problems, total_core, total = [], 0, 0
    files = options.files or chapter_files(root) + other_pages(root)
    for doc in files:
        full = os.path.join(root, doc)
        text = sync.read_text(full)
        if not sync.CHAPTER_RE.match(os.path.basename(doc)) and analyse(text)[0] is None:
            words = page_words(text)
            problems += length_problems(doc, None, words)
            print(f"{doc}: {words:,} words (not a chapter: no core path)")
            continue
        found, count = check_chapter(doc, text)
        if not options.check:
            new_text = write_count(text, count)
            if new_text != text:
                with open(full, "w", encoding="utf-8") as f:
                    f.write(new_text)
                print(f"{doc}: wrote the core's count, about {rounded(count):,} words")
                found, count = check_chapter(doc, new_text)
        problems += found
        all_words = page_words(text)
        total_core += count
        total += all_words
        print(f"{doc}: core {count:,} words of {all_words:,}")
    if problems:
        print(f"{len(problems)} problem(s) in the core paths:", file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        return 1
    print(f"core paths checked: {total_core:,} words of {total:,} in the chapters; every core at most "
          f"{MAX_CORE_WORDS:,} and every page at most {MAX_CHAPTER_WORDS:,} words")
    return 0


if __name__ == "__main__":
    sys.exit(main())
