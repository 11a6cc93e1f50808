#!/usr/bin/env python3
"""Keeps the course in docs/ in step with the code and the benchmark results.

    python3 docs/tools/sync.py            refresh every generated block in place, then check links
    python3 docs/tools/sync.py --check    change nothing; exit 1 and list every problem (the CTest test docs_in_sync)
    python3 docs/tools/sync.py --stale    change nothing; list every block that quotes a run of older code than
                                          today's, with the command that measures it again

Generated blocks live between an opening and a closing HTML comment, each alone on its line. Write the opening
comment, run the script, and it fills in the block (adding the closing comment the first time). Paths are relative
to the repository root, whichever file the block is in.

  <!-- excerpt: 05-epoll/main.cpp#loop -->              the lines between `// [excerpt:loop]` and
  <!-- /excerpt -->                                     `// [/excerpt:loop]` in that file, de-indented, fenced
  <!-- excerpt: 07-asio/main.cpp trimmed -->            a fenced block written by hand, cut down with `...` lines:
  <!-- /excerpt -->                                     the check fails when a line is not the file's, in order

  <!-- results: benchmark/results/RUN/summary.md rows=05-epoll,nginx c=100,500 -->
  <!-- /results -->                                     the run's provenance list, its table (only the rows whose
                                                        first cell starts with one of `rows=`, and whose c column
                                                        is one of `c=`; both optional), and the run's warnings.
                                                        `brief` gives one provenance sentence instead of the list;
                                                        columns="server,c,req/s,p99 ms" keeps those columns only;
                                                        where="keep-alive=no;idle conns=0,1000" keeps the rows whose
                                                        cell in each named column is one of the listed values;
                                                        table=2 quotes the file's second table (default: the first).
                                                        A warning about one server at one rate (`NAME at R req/s:`)
                                                        is quoted only with a row of that server that holds R

  <!-- figure: benchmark/results/RUN/plot.svg -->      the plot as an image, with the run's provenance sentence
  <!-- /figure -->                                      (alt="..." sets the image's alternative text)

  <!-- chart: benchmark/results/RUN/raw.csv y=requests_per_s rows=02,03 where="concurrency=10,500"
       out=docs/charts/03-select-throughput.svg alt="..." -->      (the opening comment on one line)
  <!-- /chart -->                                       a bar chart of the raw.csv column `y=`, written to the SVG
                                                        `out=` (a repository path), shown as an image with the run's
                                                        provenance sentence. Each bar is the median of the runs of
                                                        one server at one point (the columns before `repetition`);
                                                        its error bar goes from the lowest run to the highest.
                                                        `rows=` keeps the servers that start with a prefix, `where=`
                                                        filters on raw.csv's columns, as in results blocks. The bars
                                                        are grouped by the one identifying column that still varies
                                                        (a group per concurrency, a colour per server), or by
                                                        group=COLUMN; with none, one bar per server. The check
                                                        regenerates the SVG and reports it stale when it differs.
                                                        y=requests_per_s, cpu_us_per_req... (any column after
                                                        `repetition`); alt="..." sets the alternative text. A point
                                                        the benchmark did not run (`not run` in its check column)
                                                        is marked so where its bar would be

  <!-- nav -->                                          previous / contents / next links, from the chapter files
  <!-- /nav -->                                         (docs/NN-*.md) and their first heading

  Inline, in a sentence:
  ... makes <!-- value: benchmark/results/RUN/summary.md rows=01 c=10 col=syscalls/req --><!-- /value --> calls
                                                        one cell of a run's table (rows=, c=, where=, table= as in
                                                        results blocks, and they must leave exactly one row), so that
                                                        a number in the prose is checked like a table
  ... costs <!-- value: benchmark/results/RUN/counters.csv where="counters=none" col=cpu_us_per_req --><!-- /value -->
                                                        one cell of another CSV file of a run, as it is (rows=,
                                                        where=; no median): counters.csv, the counters' cost

Runs of older code. Every results, figure, chart and value names a run, and the run measured the code of its day.
fingerprint.py hashes each server's code (its folder and common/, comments and whitespace ignored); a run's
fingerprints.json records what it measured, and a run without one is fingerprinted from the commit its summary.md
names (git reads that commit; a `-dirty` commit or none at all is code nobody can identify). When a server that a
block shows has other code today, the block says so in a generated line after its provenance,
`> Measured on an earlier version of 05-epoll than the code in this repository; re-measure: `COMMAND``, and a value
gets a short <sup>(measured on older 05 code)</sup>. The check fails when such a line is missing, wrong,
or left after a re-measure; --stale lists them all. nginx and other programs that are not ours never go stale.

Markers inside fenced code blocks are text, not markers, so a page can show the syntax.

Besides stale blocks, the check reports, for docs/**/*.md and README.md: relative links to files that do not exist,
`#anchors` that no heading (GitHub's slugs) or <a id> in the target defines, and chapters NN-*.md that do not link to
the previous chapter and the next one (when those files exist). It also notes (without failing) results files and
charts the docs cite that git does not track yet, so that a new results folder is not left out of the commit.

Standard library only; Python 3.8+.
"""

import argparse
import csv
import html
import math
import os
import posixpath
import re
import shlex
import sys
import textwrap
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import fingerprint  # noqa: E402  (docs/tools/fingerprint.py)

KINDS = ("excerpt", "results", "figure", "chart", "nav")
OPEN_RE = re.compile(r"^<!--\s*(excerpt|results|figure|chart|nav)\b\s*:?\s*(.*?)\s*-->$")
CLOSE_RE = re.compile(r"^<!--\s*/(excerpt|results|figure|chart|nav)\s*-->$")
LOOKS_LIKE_MARKER_RE = re.compile(r"^<!--\s*/?\s*(excerpt|results|figure|chart|nav)s?\b")
FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
CHAPTER_RE = re.compile(r"^(\d\d)-[^/]*\.md$")
SOURCE_LANGUAGES = {".cpp": "cpp", ".hpp": "cpp", ".cc": "cpp", ".h": "cpp", ".c": "c", ".sh": "sh",
                    ".py": "python", ".cmake": "cmake", ".txt": "cmake", ".conf": "nginx"}


class BlockError(Exception):
    """A block that cannot be generated: the message says why, in one sentence."""


def rel_link(from_file, target, root):
    """The relative link from the folder of `from_file` (a repo path) to `target` (a repo path), '/' separated."""
    start = os.path.dirname(os.path.join(root, from_file))
    return os.path.relpath(os.path.join(root, target), start).replace(os.sep, "/")


def read_text(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


# ----------------------------------------------------------------------------------------------- block arguments

def parse_args(kind, text):
    """`PATH key=value key="a value" flag` -> (PATH or None, {key: value})."""
    try:
        words = shlex.split(text)
    except ValueError as e:
        raise BlockError(f"cannot parse the {kind} marker's arguments ({e})")
    path, options = None, {}
    for word in words:
        if "=" in word:
            key, value = word.split("=", 1)
            options[key] = value
        elif path is None and kind != "nav" and ("/" in word or "." in word):
            path = word
        else:
            options[word] = ""
    return path, options


def check_options(kind, options, allowed):
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise BlockError(f"{kind}: unknown option {', '.join(unknown)} (allowed: {', '.join(allowed) or 'none'})")


# ------------------------------------------------------------------------------------------------------ excerpts

def excerpt_lines(root, spec):
    """The de-indented lines between `// [excerpt:NAME]` and `// [/excerpt:NAME]` (or `#` comments)."""
    if "#" not in spec:
        raise BlockError(f"excerpt '{spec}' should be PATH#NAME, e.g. 05-epoll/main.cpp#loop")
    path, name = spec.rsplit("#", 1)
    full = os.path.join(root, path)
    if not os.path.isfile(full):
        raise BlockError(f"excerpt source {path} does not exist")
    lines = read_text(full).split("\n")
    begin_re = re.compile(r"^\s*(//|#)\s*\[excerpt:" + re.escape(name) + r"\]\s*$")
    end_re = re.compile(r"^\s*(//|#)\s*\[/excerpt:" + re.escape(name) + r"\]\s*$")
    begins = [i for i, line in enumerate(lines) if begin_re.match(line)]
    ends = [i for i, line in enumerate(lines) if end_re.match(line)]
    if not begins or not ends:
        raise BlockError(f"{path} has no `[excerpt:{name}]` ... `[/excerpt:{name}]` markers")
    if len(begins) > 1 or len(ends) > 1:
        raise BlockError(f"{path} has the markers of excerpt `{name}` more than once")
    if ends[0] < begins[0]:
        raise BlockError(f"{path}: `[/excerpt:{name}]` comes before `[excerpt:{name}]`")
    any_marker = re.compile(r"^\s*(//|#)\s*\[/?excerpt:[\w.-]+\]\s*$")
    body = [line.rstrip() for line in lines[begins[0] + 1:ends[0]] if not any_marker.match(line)]
    text = textwrap.dedent("\n".join(body)).strip("\n")
    if not text.strip():
        raise BlockError(f"{path}: excerpt `{name}` is empty")
    return path, name, text.split("\n")


def trimmed_excerpt(root, doc, path, old):
    """A trimmed excerpt is written by hand, since no pair of markers can cut a function down to its chain: a fenced
    block whose lines are all the file's lines, in the file's order, except `...` lines (what is left out) and
    blank lines. A line may leave out the file line's trailing `//` comment. The check keeps it true of the code."""
    full = os.path.join(root, path)
    if not os.path.isfile(full):
        raise BlockError(f"excerpt source {path} does not exist")
    fence = [i for i, line in enumerate(old or []) if re.match(r"^(`{3,}|~{3,})", line)]
    if len(fence) < 2:
        raise BlockError("a trimmed excerpt is written by hand: put a fenced code block between its markers")
    source = [line.strip() for line in read_text(full).split("\n")]
    at = 0
    for line in old[fence[0] + 1:fence[1]]:
        wanted = line.strip()
        if not wanted or wanted == "...":
            continue
        found = next((j for j in range(at, len(source))
                      if wanted in (source[j], re.sub(r"\s*//.*$", "", source[j]))), None)
        if found is None:
            raise BlockError(f"the trimmed excerpt's line `{wanted}` is not in {path} after the lines before it "
                             f"(the code changed: trim it again from the file)")
        at = found + 1
    caption = (f"<sub>Trimmed from [`{path}`]({rel_link(doc, path, root)}): every line is the file's, in its "
               f"order; `...` marks what is left out.</sub>")
    return old[:fence[1] + 1] + [caption]


def render_excerpt(root, doc, args, old=None):
    spec, options = parse_args("excerpt", args)
    check_options("excerpt", options, ["trimmed"])
    if spec is None:
        raise BlockError("excerpt needs PATH#NAME, e.g. <!-- excerpt: 05-epoll/main.cpp#loop -->")
    if "trimmed" in options:
        return trimmed_excerpt(root, doc, spec, old)
    path, name, lines = excerpt_lines(root, spec)
    language = SOURCE_LANGUAGES.get(os.path.splitext(path)[1], "")
    longest = max((len(m) for m in re.findall(r"`+", "\n".join(lines))), default=0)
    fence = "`" * max(3, longest + 1)
    caption = (f"<sub>From [`{path}`]({rel_link(doc, path, root)}), "
               f"between the `[excerpt:{name}]` markers.</sub>")
    return [fence + language] + lines + [fence, caption]


# ------------------------------------------------------------------------------------------------------- results

class Table:
    """One Markdown table: its header's cells, its delimiter row's cells (|---|---:|) and its rows' cells."""

    def __init__(self, header, align):
        self.header, self.align, self.rows = header, align, []


def is_delimiter(cells):
    return all(re.fullmatch(r":?-+:?", c) for c in cells)


def tables_of(block):
    """The tables in a run of consecutive `|` lines (each as its cells). A table starts at each line followed by a
    delimiter row, so two tables with no blank line between them stay apart."""
    tables = []
    for i, cells in enumerate(block):
        if is_delimiter(cells):
            continue
        if i + 1 < len(block) and is_delimiter(block[i + 1]):
            tables.append(Table(cells, block[i + 1]))
        elif tables:
            tables[-1].rows.append(cells)
        else:
            tables.append(Table(cells, ["---"] * len(cells)))  # no delimiter row: the first line is the header
    return tables


class Summary:
    """A benchmark summary.md: title, provenance bullets, tables (--mode latency writes two), warnings."""

    def __init__(self, root, path):
        full = os.path.join(root, path)
        if not os.path.isfile(full):
            raise BlockError(f"results file {path} does not exist (is the results folder committed?)")
        self.path = path
        self.title = ""
        self.bullets, self.tables, self.warnings = [], [], []
        section, block = "top", []  # block: the cells of the `|` lines since the last other line
        for line in read_text(full).split("\n") + [""]:
            stripped = line.strip()
            if stripped.startswith("|"):
                block.append([c.strip() for c in stripped.strip("|").split("|")])
                section = "table"
                continue
            self.tables += tables_of(block)
            block = []
            if stripped.startswith("# ") and not self.title:
                self.title = stripped[2:].strip()
            elif stripped.lower().startswith("warnings"):
                section = "warnings"
            elif stripped.startswith("- "):
                (self.warnings if section == "warnings" else self.bullets).append(stripped[2:].strip())
        if not any(table.rows for table in self.tables):
            raise BlockError(f"{path} has no results table")
        if not self.bullets:
            raise BlockError(f"{path} has no provenance list (machine, kernel, command...)")

    def field(self, name):
        for bullet in self.bullets:
            if bullet.lower().startswith(name.lower() + ":"):
                return bullet.split(":", 1)[1].strip()
        return ""

    def sentence(self, doc, root):
        """One sentence with what a reader needs to trust a figure, and a link to the rest."""
        parts = []
        command = self.field("Command")
        if command:
            parts.append(f"measured by {command}")
        reps = self.field("Repetitions")
        if reps:
            n = re.match(r"\s*(\d+)", reps)
            what = "median and spread of req/s" if "spread" in reps else "median of each column"
            parts.append(f"{n.group(1)} repetitions, {what}" if n else reps.split(";")[0])
        else:
            parts.append("one run per point")
        load = self.field("Load")
        if load:
            parts.append(load)
        machine, kernel = self.field("Machine"), self.field("Kernel")
        if machine:
            parts.append(machine.split(";")[0])
        if kernel:
            parts.append(f"Linux {kernel}")
        commit = self.field("Commit")
        if commit:
            parts.append(f"commit {commit.split(';')[0].split()[0]}")
        when = self.title.split(",", 1)[1].strip() if "," in self.title else ""
        if when:
            parts.append(when)
        link = f"[{self.path}]({rel_link(doc, self.path, root)})"
        return "Source: " + "; ".join(parts) + f". Everything about the run: {link}."


# ----------------------------------------------------------------------------------------------------- freshness
# A run is fresh for a server when the code it measured has today's fingerprint (docs/tools/fingerprint.py: the
# server's folder and common/, comments and whitespace aside). The run's fingerprints.json says what it measured;
# a run without one is fingerprinted from the commit its summary.md records (with git). A run with neither (no
# commit, or a `-dirty` one: uncommitted changes nobody can read back) measured unknown code, so it counts as stale.

STALE_PREFIX = "> Measured on "
FRESHNESS = {}  # (root, what) -> fingerprints; emptied by main(), so that one call sees one state of the tree


class Stale:
    """A block that quotes a run of other code than today's: what --stale lists."""

    def __init__(self, run, servers, command, line):
        self.run, self.servers, self.command, self.line = run, servers, command, line


def today_fingerprints(root):
    key = (root, None)
    if key not in FRESHNESS:
        FRESHNESS[key] = fingerprint.fingerprints(root)
    return FRESHNESS[key]


def run_fingerprints(root, run, summary):
    """(the run's {server folder: fingerprint}, None) or (None, why the code it measured is unknown)."""
    key = (root, run)
    if key not in FRESHNESS:
        recorded = os.path.join(root, run, "fingerprints.json")
        commit = summary.field("Commit").split(";")[0].strip().split(" ")[0] if summary.field("Commit") else ""
        if os.path.isfile(recorded):
            import json
            try:
                with open(recorded, encoding="utf-8") as f:
                    found = json.load(f)
            except ValueError as e:
                raise BlockError(f"{run}/fingerprints.json is not JSON ({e})")
            if not isinstance(found, dict):
                raise BlockError(f"{run}/fingerprints.json should be one object, {{\"05-epoll\": \"hex\", ...}}")
            FRESHNESS[key] = ({k: v for k, v in found.items() if isinstance(v, str)}, None)
        elif not commit:
            FRESHNESS[key] = (None, "the run recorded neither fingerprints.json nor its commit")
        elif commit.endswith("-dirty"):
            FRESHNESS[key] = (None, f"commit {commit}: the run measured uncommitted changes")
        else:
            FRESHNESS[key] = (fingerprint.fingerprints(root, commit), None)
    return FRESHNESS[key]


def server_folder_of(name):
    """The server folder a results row or raw.csv server measured: `05-epoll:--threads=1` and `05-epoll (...)`
    -> 05-epoll, `06-io_uring-advanced` -> 06-io_uring (its advanced.cpp), `07-asio-uring` -> 07-asio; None for
    nginx and anything else that is not a chapter's server."""
    m = re.match(r"(0[1-9])-", name)
    return m.group(1) if m else None


def refresh_command(summary):
    """The command that measures the run again on today's code: the one it recorded, building first."""
    command = summary.field("Command").strip().strip("`").strip()
    if not command:
        return ""
    command = re.sub(r"\s--no-build\b", "", command)
    command = re.sub(r"\s--(results-dir|log)(=|\s+)\S+", "", command)  # where that run wrote, not where to write
    return ("./" + command) if command.startswith("benchmark/") else command


def and_list(names):
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def by_number(prints):
    """{"05": ("05-epoll", fingerprint)}: a fingerprints object by chapter number, so that a renamed folder is still
    its chapter's server; where a file also names variants (06-io_uring-advanced), the folder's shorter name wins."""
    found = {}
    for key in sorted(prints, key=len, reverse=True):
        if re.match(r"0[1-9]-", key):
            found[key[:2]] = (key, prints[key])
    return found


def stale_servers(root, summary, names):
    """(the server folders among `names` whose code differs from what the run of `summary` measured, and why the
    run's code is unknown, or None when it is known)."""
    run = posixpath.dirname(summary.path)
    numbers = []
    for name in names:
        number = server_folder_of(name)
        if number and number not in numbers:
            numbers.append(number)
    if not numbers:
        return [], None
    today = today_fingerprints(root)
    measured, unknown = run_fingerprints(root, run, summary)
    now, then = by_number(today), by_number(measured or {})
    stale = []
    for number in numbers:
        folder = (now.get(number) or then.get(number) or (None, None))[0]
        if folder is None:
            continue  # no such server here, then or now: not ours to judge
        if unknown or now.get(number) != then.get(number):
            stale.append(folder)
    return stale, unknown


def stale_note(root, summary, names):
    """([the note's lines], Stale or None) for a block that shows the servers `names` of the run of `summary`."""
    stale, unknown = stale_servers(root, summary, names)
    if not stale:
        return [], None
    run = posixpath.dirname(summary.path)
    command = refresh_command(summary)
    again = f"; re-measure: `{command}`" if command else ""
    if unknown:
        line = (f"{STALE_PREFIX}code this repository cannot identify ({unknown}), not necessarily today's "
                f"{and_list(stale)}{again}.")
    else:
        line = f"{STALE_PREFIX}an earlier version of {and_list(stale)} than the code in this repository{again}."
    return [line], Stale(run, stale, command, line)


def where_conditions(path, header, text):
    """where="COLUMN=V1,V2;COLUMN=V3" -> [(the column's index, [V1, V2]), ...]."""
    conditions = []
    for part in (p.strip() for p in text.split(";")):
        name, _, values = (s.strip() for s in part.partition("="))
        if not name or not values:
            raise BlockError(f"where: `{part}` should be COLUMN=VALUE[,VALUE...], e.g. where=\"keep-alive=no\"")
        if name not in header:
            raise BlockError(f"{path} has no column {name} (it has: {', '.join(header)})")
        conditions.append((header.index(name), [v.strip() for v in values.split(",")]))
    return conditions


def cell_of(row, i):
    return row[i] if i < len(row) else ""


def rows_starting_with(path, rows, text):
    """rows=01,nginx: the rows whose first cell starts with one of the prefixes; each prefix must match a row."""
    prefixes = [p.strip() for p in text.split(",") if p.strip()]
    missing = [p for p in prefixes if not any(r[0].startswith(p) for r in rows)]
    if missing:
        raise BlockError(f"{path} has no row starting with {', '.join(missing)}")
    return [r for r in rows if any(r[0].startswith(p) for p in prefixes)]


def rows_where(path, header, all_rows, rows, text):
    """where="COLUMN=V1,V2;...": the rows whose cell in each named column is one of its values; each value must
    be in some row of `all_rows` (the whole table), so that a typo is an error rather than an empty block."""
    for column, wanted in where_conditions(path, header, text):
        missing = [v for v in wanted if not any(cell_of(r, column) == v for r in all_rows)]
        if missing:
            raise BlockError(f"{path} has no row whose {header[column]} is {', '.join(missing)}")
        rows = [r for r in rows if cell_of(r, column) in wanted]
    return rows


def filters_text(options, keys):
    """The filter options as they were written, for an error message: `rows=02 where="c=1,2"`."""
    return " ".join(f'{k}="{options[k]}"' if " " in options[k] else f"{k}={options[k]}"
                    for k in keys if options.get(k))


def render_results(root, doc, args, run_above=None):
    path, options = parse_args("results", args)
    check_options("results", options, ["table", "rows", "c", "where", "columns", "brief"])
    if path is None:
        raise BlockError("results needs the path of a summary.md, e.g. "
                         "<!-- results: benchmark/results/RUN/summary.md rows=01,nginx -->")
    summary = Summary(root, path)
    number = options.get("table") or "1"
    if not re.fullmatch(r"[1-9][0-9]*", number):
        raise BlockError(f"table={number}: expected the table's number, 1 for the first")
    if int(number) > len(summary.tables):
        raise BlockError(f"{path} has {len(summary.tables)} table(s), so no table {number}")
    table = summary.tables[int(number) - 1]
    header, rows = table.header, table.rows
    if not rows:
        raise BlockError(f"table {number} of {path} has no rows")
    if options.get("rows"):
        rows = rows_starting_with(path, rows, options["rows"])
    if options.get("c"):
        column = next((i for i, h in enumerate(header) if h in ("c", "connections")), None)
        if column is None:
            raise BlockError(f"{path} has no `c` or `connections` column to filter on")
        wanted = [v.strip() for v in options["c"].split(",")]
        rows = [r for r in rows if cell_of(r, column) in wanted]
    if options.get("where"):
        rows = rows_where(path, header, table.rows, rows, options["where"])
    if not rows:
        raise BlockError(f"no row of {path} matches {filters_text(options, ('rows', 'c', 'where'))}")
    keep = list(range(len(header)))
    if options.get("columns"):
        names = [n.strip() for n in options["columns"].split(",")]
        unknown = [n for n in names if n not in header]
        if unknown:
            raise BlockError(f"{path} has no column {', '.join(unknown)} (it has: {', '.join(header)})")
        keep = [header.index(n) for n in names]
    align_cells = table.align
    if len(align_cells) != len(header):
        align_cells = ["---"] * len(header)
    note, stale = stale_note(root, summary, [r[0] for r in rows])
    out = []
    if "brief" in options:
        out += ["*" + (same_run_sentence(path, run_above) or summary.sentence(doc, root)) + "*", ""]
    else:
        link = f"[`{path}`]({rel_link(doc, path, root)})"
        out += [f"*{summary.title}, from {link}:*", ""]
        out += ["- " + b for b in summary.bullets]
        if not summary.field("Repetitions"):
            out.append("- Repetitions: none stated, so one run per row: no median, no spread")
        out.append("")
    if note:
        out += note + [""]
    out.append("| " + " | ".join(header[i] for i in keep) + " |")
    out.append("|" + "|".join(align_cells[i] for i in keep) + "|")
    out += ["| " + " | ".join(cell_of(r, i) for i in keep) + " |" for r in rows]
    warnings = grouped_warnings([w for w in summary.warnings if warning_concerns(w, rows)])
    if warnings:
        out += ["", "Warnings the benchmark printed for this run:", ""] + ["- " + w for w in warnings]
    return GeneratedLines(out, stale=stale)


def render_value(root, doc, args):
    """An inline value: one cell of a run's table, and a short note beside it when the run measured older code."""
    path, options = parse_args("value", args)
    check_options("value", options, ["table", "rows", "c", "where", "col"])
    if path is None or not options.get("col"):
        raise BlockError("value needs a summary.md and col=COLUMN, e.g. <!-- value: benchmark/results/RUN/summary.md "
                         "rows=01 c=10 col=syscalls/req --><!-- /value -->")
    if path.endswith(".csv"):  # another file of the run (counters.csv): its rows as they are, no median
        summary = run_summary(root, path)
        header, rows = read_csv_table(path, os.path.join(root, path))
        all_rows = rows
    else:
        summary = Summary(root, path)
        number = options.get("table") or "1"
        if not re.fullmatch(r"[1-9][0-9]*", number) or int(number) > len(summary.tables):
            raise BlockError(f"table={number}: {path} has {len(summary.tables)} table(s)")
        table = summary.tables[int(number) - 1]
        header, rows = table.header, table.rows
        all_rows = table.rows
    if options["col"] not in header:
        raise BlockError(f"{path} has no column {options['col']} (it has: {', '.join(header)})")
    if options.get("rows"):
        rows = rows_starting_with(path, rows, options["rows"])
    if options.get("c"):
        column = next((i for i, h in enumerate(header) if h in ("c", "connections")), None)
        if column is None:
            raise BlockError(f"{path} has no `c` or `connections` column to filter on")
        rows = [r for r in rows if cell_of(r, column) in [v.strip() for v in options["c"].split(",")]]
    if options.get("where"):
        rows = rows_where(path, header, all_rows, rows, options["where"])
    if len(rows) != 1:
        raise BlockError(f"{len(rows)} rows of {path} match {filters_text(options, ('rows', 'c', 'where'))}: "
                         f"a value needs exactly one (narrow it with rows=, c= or where=)")
    text = cell_of(rows[0], header.index(options["col"]))
    stale, unknown = stale_servers(root, summary, [rows[0][0]])
    if stale:
        text += (" <sup>(measured on unidentified code)</sup>" if unknown else
                 f" <sup>(measured on older {and_list([name[:2] for name in stale])} code)</sup>")
        command = refresh_command(summary)
        return GeneratedLines([text], stale=Stale(posixpath.dirname(path), stale, command, text))
    return GeneratedLines([text])


ROW_WARNING_RE = re.compile(r"^(.+?) at (\d+) req/s: ")


def warning_concerns(warning, rows):
    """A warning about one server at one rate (`05-epoll at 13800 req/s: ...`, --mode latency) concerns a block
    only when it quotes that row; any other warning (a busy machine, a low limit) concerns every block."""
    match = ROW_WARNING_RE.match(warning)
    if not match:
        return True
    name, rate = match.groups()
    return any((row[0] == name or row[0].startswith(name + " (")) and rate in row[1:] for row in rows)


def grouped_warnings(warnings):
    """The same warning about one server at several rates and repetitions (a latency run prints one per run)
    becomes one line that lists the rates: `05-epoll: openloop fell behind its schedule at 13800, 15770 req/s
    (3 runs): the latencies there include ...`. Any other warning is kept as it is, in its place."""
    lines, rates = [], {}
    for warning in warnings:
        match = ROW_WARNING_RE.match(warning)
        if not match:
            lines.append(warning)
            continue
        rest = warning[match.end():]
        what, _, why = rest.partition(" (")  # "openloop fell behind its schedule", "its own lag ...): the ..."
        key = (match.group(1), what, why.partition("): ")[2])
        if key not in rates:
            rates[key] = []
            lines.append(key)
        rates[key].append(match.group(2))
    out = []
    for line in lines:
        if isinstance(line, str):
            out.append(line)
            continue
        name, what, tail = line
        listed = ", ".join(sorted(set(rates[line]), key=int))
        runs = len(rates[line])
        out.append(f"{name}: {what} at {listed} req/s ({runs} run{'s' if runs > 1 else ''})" +
                   (f": {tail}" if tail else ""))
    return out


def read_csv_table(path, full):
    """A run's CSV file (counters.csv, raw.csv) as a header and rows of stripped cells."""
    if not os.path.isfile(full):
        raise BlockError(f"{path} does not exist (is the results folder committed?)")
    with open(full, encoding="utf-8", newline="") as f:
        table = [[cell.strip() for cell in row] for row in csv.reader(f) if any(c.strip() for c in row)]
    if len(table) < 2:
        raise BlockError(f"{path} has no rows")
    return table[0], table[1:]


def run_summary(root, path):
    """The Summary of the run whose folder holds `path` (a plot.svg, a raw.csv): for its provenance sentence."""
    return Summary(root, os.path.join(os.path.dirname(path), "summary.md").replace(os.sep, "/"))


def render_figure(root, doc, args, run_above=None):
    path, options = parse_args("figure", args)
    check_options("figure", options, ["alt"])
    if path is None:
        raise BlockError("figure needs the path of a plot, e.g. <!-- figure: benchmark/results/RUN/plot.svg -->")
    if not os.path.isfile(os.path.join(root, path)):
        raise BlockError(f"figure {path} does not exist (is the results folder committed?)")
    summary = run_summary(root, path)
    alt = options.get("alt") or f"{summary.title}: requests per second and p99 latency against concurrency"
    note, stale = stale_note(root, summary, [r[0] for table in summary.tables for r in table.rows])
    provenance = same_run_sentence(path, run_above) or summary.sentence(doc, root)
    return GeneratedLines([f"![{alt}]({rel_link(doc, path, root)})", "", "*" + provenance + "*"] +
                          ([""] + note if note else []), stale=stale)


# -------------------------------------------------------------------------------------------------------- charts

class GeneratedLines(list):
    """A block's lines, the files the block writes beside the Markdown ({repository path: text}), and its citation
    of a run when that run measured other code than today's (a Stale, for --stale)."""

    def __init__(self, lines, files=None, stale=None):
        super().__init__(lines)
        self.files = files or {}
        self.stale = stale


CHART_WIDTH = 640
CHART_FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"
# Okabe-Ito's colour-blind-safe colours, chapter 01's server to 07's, one spare; then grey for nginx, the reference.
PALETTE = ("#CC79A7", "#E69F00", "#0072B2", "#009E73", "#D55E00", "#56B4E9", "#000000", "#F0E442", "#999999")
MEASURES = {  # raw.csv column -> what the y axis says
    "requests_per_s": "requests per second",
    "mib_per_s": "MiB per second",
    "cpu_us_per_req": "server CPU per request, µs",
    "io_uring_threads_cpu_us_per_req": "io_uring kernel threads' CPU per request, µs",
    "ctxsw_per_req": "context switches per request",
    "syscalls_per_req": "system calls per request",
    "mean_ms": "mean latency, ms",
    "p50_ms": "median latency (p50), ms",
    "p99_ms": "p99 latency, ms",
    "peak_rss_kib": "peak resident memory, KiB",
    "peak_threads": "peak threads",
}
GROUP_NAMES = {"concurrency": "c = {}", "connections": "{} connections", "idle": "{} idle conns",
               "keepalive": "keep-alive: {}", "rate": "{} req/s offered", "file": "{}"}


class RawRuns:
    """A benchmark raw.csv: one row per run. The columns between `server` and `repetition` identify a point; the
    ones after `repetition` are what the run measured."""

    def __init__(self, root, path):
        self.header, self.rows = read_csv_table(path, os.path.join(root, path))
        if self.header[0] != "server":
            raise BlockError(f"{path} is not a benchmark raw.csv (its first column should be `server`)")
        self.path = path
        # A run the benchmark measured again because it was disturbed (--retry-disturbed; --mode latency) stays in
        # raw.csv marked `measured again`, and counts no more than it does in the summary.
        if "disturbed" in self.header:
            marked = self.header.index("disturbed")
            self.rows = [row for row in self.rows if cell_of(row, marked) != "measured again"]
        if "repetition" not in self.header:
            raise BlockError(f"{path} has no repetition column, so there are no repeated runs to chart "
                             f"(a --mode connections run has one row per point)")
        self.repetition = self.header.index("repetition")

    def number(self, row, column):
        cell = cell_of(row, column)
        try:
            value = float(cell)
        except ValueError:
            value = float("nan")
        if value != value or value in (float("inf"), float("-inf")):
            raise BlockError(f"{self.path}: the {self.header[column]} of {', '.join(row[:self.repetition + 1])} "
                             f"is `{cell}`, not a number")
        return value


def server_colours(servers):
    """A colour per server, the same in every chart: chapter NN's server takes the NNth colour and nginx grey. A
    second program of one chapter, or a server with flags (`05-epoll:--threads=1`), takes the next free colour."""
    colours = {}
    for server in sorted(servers, key=lambda name: (":" in name, servers.index(name))):
        number = re.match(r"0([1-7])-", server)
        start = int(number.group(1)) - 1 if number else (len(PALETTE) - 1 if server.startswith("nginx") else 7)
        free = [PALETTE[(start + k) % len(PALETTE)] for k in range(len(PALETTE))]
        colours[server] = next(c for c in free if c not in colours.values())
    return colours


def median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def value_text(value):
    """A bar's value: whole numbers from 100 up, like the summaries' req/s; otherwise 3 significant digits."""
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def axis_ticks(top_value):
    """Ticks from 0 at a step of 1, 2, 2.5 or 5 times a power of ten: the lowest last tick >= top_value that takes
    3 to 8 steps (the count nearer 5 when two tie). Returns the ticks and the decimals they need."""
    if top_value <= 0:
        return [0.0, 1.0], 0
    power = 10.0 ** math.floor(math.log10(top_value / 8))
    candidates = []
    for scale in (power, power * 10):
        for m in (1, 2, 2.5, 5):
            step = m * scale
            count = max(3, math.ceil(top_value / step - 1e-9))
            if count <= 8:
                candidates.append((count * step, abs(count - 5), step, count))
    _, _, step, count = min(candidates)
    decimals = next((d for d in range(4) if abs(round(step, d) - step) < step * 1e-6), 3)
    return [i * step for i in range(count + 1)], decimals


def text_width(text, size):
    """An estimate of a text's width in a sans-serif font (no font metrics here): about 0.58 em a character."""
    return len(text) * size * 0.58


def wrapped(text, size, width):
    """The text cut at spaces into lines that fit `width` (by the estimate of text_width)."""
    lines = []
    for word in text.split(" "):
        if lines and text_width(lines[-1] + " " + word, size) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def xml_text(text):
    """Text for an SVG element's content: `&`, `<` and `>` escaped, quotes left readable."""
    return html.escape(text, quote=False)


def px(value):
    return f"{value:.1f}"


def chart_svg(title, heading, caption, servers, groups, group_name, bars, description, not_run=()):
    """The SVG of a grouped bar chart. bars: {(server, group): (median, min, max)}; group None: a single group,
    with the servers' names under their bars instead of a legend. not_run: the (server, group) points the benchmark
    did not run, marked `not run` where their bar would be."""
    width, left, right = CHART_WIDTH, 64, 16
    colour = server_colours(servers)
    out = []
    # The heading names the y axis; a legend below it, when there are groups.
    y = 40
    legend = []
    if groups != [None]:
        x = 12
        for server in servers:
            item = 16 + text_width(server, 12) + 18
            if x + item > width - right and x > 12:
                x, y = 12, y + 18
            legend.append(f'<rect x="{px(x)}" y="{px(y - 10)}" width="12" height="12" fill="{colour[server]}"/>')
            legend.append(f'<text x="{px(x + 16)}" y="{px(y)}" font-size="12" fill="#222222">'
                          f'{xml_text(server)}</text>')
            x += item
        y += 8
    else:
        y -= 6
    plot_w = width - left - right
    slot = plot_w / len(groups)
    pitch = min(56.0, slot * 0.84 / len(servers))
    bar_w = pitch * 0.86
    labels = {key: value_text(value[0]) for key, value in bars.items()}
    label_w = max(text_width(t, 10.5) for t in labels.values())
    rotated = label_w > pitch - 1
    plot_top = y + (label_w + 12 if rotated else 20)
    plot_h = 230.0
    bottom = plot_top + plot_h
    ticks, decimals = axis_ticks(max(value[2] for value in bars.values()))

    def y_of(value):
        return bottom - value / ticks[-1] * plot_h

    for tick in ticks:
        out.append(f'<line x1="{left}" y1="{px(y_of(tick))}" x2="{width - right}" y2="{px(y_of(tick))}" '
                   f'stroke="#e3e3e3" stroke-width="1"/>')
        out.append(f'<text x="{left - 6}" y="{px(y_of(tick) + 4)}" font-size="11" fill="#555555" '
                   f'text-anchor="end">{tick:.{decimals}f}</text>')
    out.append(f'<line x1="{left}" y1="{px(bottom)}" x2="{width - right}" y2="{px(bottom)}" stroke="#888888" '
               f'stroke-width="1"/>')
    under = bottom + 24
    name_w = max(text_width(s, 11) for s in servers)
    for g, group in enumerate(groups):
        start = left + g * slot + (slot - pitch * len(servers)) / 2
        for s, server in enumerate(servers):
            centre = start + s * pitch + pitch / 2
            if (server, group) in not_run:
                if text_width("not run", 10) <= pitch - 1:
                    out.append(f'<text x="{px(centre)}" y="{px(bottom - 4)}" font-size="10" fill="#555555" '
                               f'text-anchor="middle">not run</text>')
                else:
                    out.append(f'<text x="{px(centre + 3.5)}" y="{px(bottom - 4)}" font-size="10" fill="#555555" '
                               f'transform="rotate(-90 {px(centre + 3.5)} {px(bottom - 4)})">not run</text>')
            if (server, group) not in bars:
                continue
            middle, low, high = bars[(server, group)]
            out.append(f'<rect x="{px(centre - bar_w / 2)}" y="{px(y_of(middle))}" width="{px(bar_w)}" '
                       f'height="{px(bottom - y_of(middle))}" fill="{colour[server]}"/>')
            cap = min(bar_w * 0.5, 10.0) / 2
            whisker = (f'M{px(centre)} {px(y_of(low))}V{px(y_of(high))}'
                       f'M{px(centre - cap)} {px(y_of(low))}H{px(centre + cap)}'
                       f'M{px(centre - cap)} {px(y_of(high))}H{px(centre + cap)}')
            out.append(f'<path d="{whisker}" stroke="#ffffff" stroke-width="3.5" fill="none"/>')
            out.append(f'<path d="{whisker}" stroke="#222222" stroke-width="1.3" fill="none"/>')
            top = y_of(high) - 5
            if rotated:
                out.append(f'<text x="{px(centre + 3.5)}" y="{px(top)}" font-size="10.5" fill="#222222" '
                           f'transform="rotate(-90 {px(centre + 3.5)} {px(top)})">{labels[(server, group)]}</text>')
            else:
                out.append(f'<text x="{px(centre)}" y="{px(top)}" font-size="10.5" fill="#222222" '
                           f'text-anchor="middle">{labels[(server, group)]}</text>')
            if group is None:
                name = xml_text(server)
                if name_w <= pitch - 2:
                    out.append(f'<text x="{px(centre)}" y="{px(bottom + 16)}" font-size="11" fill="#222222" '
                               f'text-anchor="middle">{name}</text>')
                else:
                    out.append(f'<text x="{px(centre + 4)}" y="{px(bottom + 12)}" font-size="11" fill="#222222" '
                               f'text-anchor="end" transform="rotate(-35 {px(centre + 4)} {px(bottom + 12)})">'
                               f'{name}</text>')
                    under = max(under, bottom + 12 + name_w * math.sin(math.radians(35)) + 4)
        if group is not None:
            label = GROUP_NAMES.get(group_name, group_name + " = {}").format(group)
            out.append(f'<text x="{px(left + g * slot + slot / 2)}" y="{px(bottom + 18)}" font-size="12" '
                       f'fill="#222222" text-anchor="middle">{xml_text(label)}</text>')
    caption_lines = wrapped(caption, 11, width - 24)
    height = math.ceil(under + 16 + 14 * (len(caption_lines) - 1))
    head = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="{html.escape(CHART_FONT)}" role="img">',
            f'<title>{xml_text(title)}</title>',
            f'<desc>{xml_text(description)}</desc>',
            f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
            f'<text x="12" y="22" font-size="13" font-weight="600" fill="#222222">{xml_text(heading)}</text>']
    foot = [f'<text x="12" y="{px(under + 6 + 14 * i)}" font-size="11" fill="#555555">{xml_text(line)}</text>'
            for i, line in enumerate(caption_lines)] + ["</svg>"]
    return "\n".join(head + legend + out + foot) + "\n"


def repo_output_path(kind, text):
    """out=PATH: a normalized repository path (no absolute path, no `..`), ending in .svg."""
    path = text.replace("\\", "/")
    if (not path.endswith(".svg") or path.startswith("/") or os.path.isabs(path)
            or posixpath.normpath(path) != path or path.startswith("../")):
        raise BlockError(f"{kind}: out={text or '(nothing)'} should be a repository path ending in .svg, "
                         f"e.g. out=docs/charts/03-select-throughput.svg")
    return path


def same_run_sentence(path, run_above):
    """run_above: (results folder, "table" / "figure" / "chart") of the block directly above, or None. A block of
    the same run says so in a few words instead of repeating the provenance sentence the reader has just read."""
    if run_above and run_above[0] == posixpath.dirname(path):
        return f"The same run as the {run_above[1]} above."
    return ""


def render_chart(root, doc, args, run_above=None):
    """run_above: see same_run_sentence."""
    path, options = parse_args("chart", args)
    check_options("chart", options, ["y", "rows", "where", "group", "out", "alt"])
    if path is None:
        raise BlockError("chart needs the path of a run's raw.csv, e.g. <!-- chart: benchmark/results/RUN/raw.csv "
                         "y=requests_per_s out=docs/charts/NN-topic.svg -->")
    out_path = repo_output_path("chart", options.get("out", ""))
    runs = RawRuns(root, path)
    header, rep = runs.header, runs.repetition
    measured = header[rep + 1:]
    y = options.get("y", "")
    if not y:
        raise BlockError(f"chart needs y=COLUMN, the column of {path} to plot (one of: {', '.join(measured)})")
    if y not in measured:
        raise BlockError(f"{path} has no measured column {y} (it has: {', '.join(measured)})")
    rows = runs.rows
    if options.get("rows"):
        rows = rows_starting_with(path, rows, options["rows"])
    if options.get("where"):
        rows = rows_where(path, header, runs.rows, rows, options["where"])
    if not rows:
        filters = filters_text(options, ("rows", "where"))
        raise BlockError(f"no row of {path} matches {filters}" if filters else f"{path} has no rows")
    identity = list(range(1, rep))
    varying = [i for i in identity if len({cell_of(r, i) for r in rows}) > 1]
    if options.get("group"):
        name = options["group"]
        if name not in header[1:rep]:
            raise BlockError(f"group={name}: {path} has no such column identifying a row "
                             f"(it has: {', '.join(header[1:rep]) or 'none'})")
        group_column = header.index(name)
    else:
        group_column = varying[0] if len(varying) == 1 else None
    others = [i for i in varying if i != group_column]
    if others:
        example = f"{header[others[-1]]}={cell_of(rows[0], others[-1])}"
        raise BlockError(f"the selected rows of {path} vary in {', '.join(header[i] for i in varying)}, and a chart "
                         f"groups its bars by one column: fix the others with where= (e.g. where=\"{example}\")")
    check = header.index("check") if "check" in header else None
    servers, groups, values, skipped = [], [], {}, set()
    for row in rows:
        group = cell_of(row, group_column) if group_column is not None else None
        if row[0] not in servers:
            servers.append(row[0])
        if group not in groups:
            groups.append(group)
        if check is not None and cell_of(row, check).startswith("not run"):
            skipped.add((row[0], group))  # a point the benchmark skipped (03 beside 5000 idle connections)
            continue
        values.setdefault((row[0], group), []).append(runs.number(row, header.index(y)))
    if not values:
        raise BlockError(f"no selected row of {path} was run (their check column says `not run`)")
    not_run = skipped - set(values)
    if len(servers) > len(PALETTE):
        raise BlockError(f"{len(servers)} servers are more than a chart's {len(PALETTE)} colours: narrow rows=")
    if group_column is not None and all(re.fullmatch(r"-?\d+(\.\d+)?", g) for g in groups):
        groups.sort(key=float)
    bars = {key: (median(v), min(v), max(v)) for key, v in values.items()}
    counts = sorted({len(v) for v in values.values()})
    runs_text = f"{counts[0]} run{'s' if counts[0] > 1 else ''}" if len(counts) == 1 else \
        f"{counts[0]} to {counts[-1]} runs"
    measure = MEASURES.get(y, y)
    heading = f"{measure} (median; error bars: min to max of {runs_text})"
    by = f" by {header[group_column]}" if group_column is not None else ""
    title = options.get("alt") or (f"Bar chart, {measure}: {', '.join(servers)}{by}; the median of {runs_text}, "
                                   f"error bars from the lowest run to the highest")
    caption = (f"Each bar: the median of {runs_text}; its error bar: from the lowest run to the highest. "
               f"Data: {path}")
    group_label = GROUP_NAMES.get(header[group_column], header[group_column] + " = {}") \
        if group_column is not None else ""
    points = []
    for group in groups:
        for server in servers:
            where = f"{server} at {group_label.format(group)}" if group is not None else server
            if (server, group) in bars:
                middle, low, high = bars[(server, group)]
                points.append(f"{where}: median {value_text(middle)}, min {value_text(low)}, max {value_text(high)}")
            elif (server, group) in not_run:
                points.append(f"{where}: not run")
    svg = chart_svg(title, heading, caption, servers, groups,
                    header[group_column] if group_column is not None else None, bars, "; ".join(points) + ".",
                    not_run)
    summary = run_summary(root, path)
    provenance = same_run_sentence(path, run_above) or summary.sentence(doc, root)
    note, stale = stale_note(root, summary, servers)
    lines = [f"![{title}]({rel_link(doc, out_path, root)})", "", "*" + provenance + "*"] + ([""] + note if note else [])
    return GeneratedLines(lines, {out_path: svg}, stale=stale)


# ---------------------------------------------------------------------------------------------------- navigation

def chapters(root):
    """{number: repo path} of docs/NN-*.md."""
    found = {}
    docs = os.path.join(root, "docs")
    if os.path.isdir(docs):
        for name in sorted(os.listdir(docs)):
            m = CHAPTER_RE.match(name)
            if m:
                found.setdefault(int(m.group(1)), "docs/" + name)
    return found


def first_heading(root, path):
    in_fence = None
    for line in read_text(os.path.join(root, path)).split("\n"):
        in_fence = fence_state(line, in_fence)
        if in_fence is None and line.startswith("# "):
            return line[2:].strip()
    return os.path.basename(path)


def render_nav(root, doc, args):
    _, options = parse_args("nav", args)
    check_options("nav", options, [])
    found = chapters(root)
    m = CHAPTER_RE.match(os.path.basename(doc))
    if not m or not doc.startswith("docs/") or doc.count("/") != 1:
        raise BlockError("nav blocks belong in chapters, docs/NN-name.md")
    n = int(m.group(1))
    parts = []
    if n - 1 in found:
        parts.append(f"[← {first_heading(root, found[n - 1])}]({rel_link(doc, found[n - 1], root)})")
    contents = "docs/README.md"
    if os.path.isfile(os.path.join(root, contents)):
        parts.append(f"[Contents]({rel_link(doc, contents, root)})")
    if n + 1 in found:
        parts.append(f"[{first_heading(root, found[n + 1])} →]({rel_link(doc, found[n + 1], root)})")
    return [" · ".join(parts)]


RENDERERS = {"excerpt": render_excerpt, "results": render_results, "figure": render_figure, "chart": render_chart,
             "nav": render_nav}


# ------------------------------------------------------------------------------------------------ block rewriting

def fence_state(line, in_fence):
    """Tracks fenced code blocks: returns the open fence string, or None outside one."""
    m = FENCE_RE.match(line)
    if in_fence is None:
        return m.group(1) if m else None
    closes = m and m.group(1)[0] == in_fence[0] and len(m.group(1)) >= len(in_fence)
    if closes and not line.strip().strip(m.group(1)[0]):
        return None
    return in_fence


def read_bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


VALUE_RE = re.compile(r"<!--\s*value\s*:\s*(.*?)\s*-->(.*?)<!--\s*/value\s*-->")


def refresh_values(root, doc, line, number, blocks, errors, citations):
    """The line with each inline value, <!-- value: ... -->TEXT<!-- /value -->, regenerated; each is recorded in
    `blocks` like a block."""
    def one(m):
        args, old = m.group(1), m.group(2)
        try:
            new = render_value(root, doc, args)
        except BlockError as e:
            errors.append(f"{doc}:{number}: value: {e}")
            return m.group(0)
        status = "ok" if old == new[0] else "stale"
        why = "" if status == "ok" else f"shows `{old}` where its run now gives `{new[0]}`"
        blocks.append((number, "value", args, status, why))
        if new.stale is not None and citations is not None:
            citations.append((doc, number, new.stale))
        return m.group(0)[:m.start(2) - m.start(0)] + new[0] + m.group(0)[m.end(2) - m.start(0):]
    code = [m.span() for m in re.finditer(r"(`+)(?:(?!\1).)+?\1", line)]  # `<!-- value: -->` in code is text
    return VALUE_RE.sub(lambda m: m.group(0) if any(a <= m.start() < b for a, b in code) else one(m), line)


def without_note(lines):
    """A block's lines without its note on the run's older code (and the blank line that sets the note apart)."""
    out = []
    for line in lines:
        if line.startswith(STALE_PREFIX) or (not line.strip() and out and not out[-1].strip()):
            continue
        out.append(line)
    while out and not out[-1].strip():
        out.pop()
    return out


def refresh(root, doc, text, files=None, citations=None):
    """Returns (new text, [(line, kind, args, status, why)], [errors]); status is 'ok', 'stale' or 'new', and why
    says what is stale when it is a file the block writes (a chart's SVG) or the note on a run's freshness. The
    files that blocks write are added to `files` ({repository path: text}) for the caller to write, and the blocks
    that quote a run of older code to `citations` ([(doc, line, Stale)])."""
    lines = text.split("\n")
    out, blocks, errors = [], [], []
    i, in_fence = 0, None
    run_above = None  # (results folder, what) of the block just above, while only blank lines follow it
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped and not OPEN_RE.match(stripped):
            run_above = None
        if in_fence is not None:
            in_fence = fence_state(line, in_fence)
            out.append(line)
            i += 1
            continue
        m = OPEN_RE.match(stripped)
        if not m and re.match(r"^ {0,3}<!--\s*value\s*:", line):
            errors.append(f"{doc}:{i + 1}: a line that starts with a value marker starts an HTML block in Markdown, "
                          f"which hides the rest of the line's formatting: put a word before it")
        if not m and VALUE_RE.search(line):
            line = refresh_values(root, doc, line, i + 1, blocks, errors, citations)
        if not m:
            if LOOKS_LIKE_MARKER_RE.match(stripped) and not CLOSE_RE.match(stripped):
                errors.append(f"{doc}:{i + 1}: malformed marker `{stripped}`")
            elif CLOSE_RE.match(stripped):
                errors.append(f"{doc}:{i + 1}: `{stripped}` closes no block")
            in_fence = fence_state(line, in_fence)
            out.append(line)
            i += 1
            continue
        kind, args = m.group(1), m.group(2)
        close = f"<!-- /{kind} -->"
        # The block runs to its closing marker, unless another opening marker comes first: then it is new.
        end = None
        for j in range(i + 1, len(lines)):
            s = lines[j].strip()
            if CLOSE_RE.match(s):
                if CLOSE_RE.match(s).group(1) == kind:
                    end = j
                break
            if OPEN_RE.match(s):
                break
        old = lines[i + 1:end] if end is not None else None
        try:
            new = RENDERERS[kind](root, doc, args, run_above) if kind in ("results", "figure", "chart") else \
                RENDERERS[kind](root, doc, args, old) if kind == "excerpt" else RENDERERS[kind](root, doc, args)
        except BlockError as e:
            errors.append(f"{doc}:{i + 1}: {kind} block: {e}")
            new = old if old is not None else []
        status = "new" if old is None else ("ok" if old == new else "stale")
        why = ""
        if status == "stale" and without_note(old) == without_note(new):
            stale_now = getattr(new, "stale", None)
            why = ("its run measured older code than today's, and the block does not say so yet" if stale_now else
                   "it says its run measured older code, and today's code is what the run measured")
            if stale_now and any(x.startswith(STALE_PREFIX) for x in old):
                why = "its note on the run's older code is out of date"
        if getattr(new, "stale", None) is not None and citations is not None:
            citations.append((doc, i + 1, new.stale))
        for path, content in sorted(getattr(new, "files", {}).items()):
            current = read_bytes(os.path.join(root, path))
            if current != content.encode("utf-8"):
                status = "stale" if status == "ok" else status
                why = (f"its chart {path} does not exist yet" if current is None else
                       f"its chart {path} differs from what its source gives now")
            if files is not None:
                if files.get(path, content) != content:
                    errors.append(f"{doc}:{i + 1}: {kind} block: another block writes {path} differently")
                files[path] = content
        blocks.append((i + 1, kind, args, status, why))
        try:
            source = parse_args(kind, args)[0] if kind in ("results", "figure", "chart") else None
        except BlockError:
            source = None  # already reported by the renderer
        run_above = (posixpath.dirname(source), {"results": "table"}.get(kind, kind)) if source else None
        out.append(line)
        out.extend(new)
        out.append(close)
        i = (end + 1) if end is not None else (i + 1)
    return "\n".join(out), blocks, errors


# ---------------------------------------------------------------------------------------------- links and anchors

def github_slug(heading):
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)                          # inline HTML
    text = text.replace("`", "").replace("*", "")
    text = unicodedata.normalize("NFC", text.strip().lower())
    text = "".join(ch for ch in text if ch.isalnum() or ch in "-_ " or unicodedata.category(ch) == "Mn")
    return text.replace(" ", "-")


def anchors_of(root, path, cache):
    if path not in cache:
        names, seen, in_fence = set(), {}, None
        for line in read_text(os.path.join(root, path)).split("\n"):
            was_in_fence = in_fence
            in_fence = fence_state(line, in_fence)
            if was_in_fence is not None or in_fence is not None:
                continue
            m = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m:
                slug = github_slug(m.group(1))
                n = seen.get(slug, 0)
                names.add(slug if n == 0 else f"{slug}-{n}")
                seen[slug] = n + 1
            for a in re.findall(r"<a\s+[^>]*(?:id|name)\s*=\s*\"([^\"]+)\"", line):
                names.add(a)
        cache[path] = names
    return cache[path]


def prose(text):
    """The text with fenced code, inline code and HTML comments blanked out (line numbers kept)."""
    lines, in_fence, out = text.split("\n"), None, []
    for line in lines:
        was = in_fence
        in_fence = fence_state(line, in_fence)
        out.append("" if was is not None or in_fence is not None else line)
    text = "\n".join(out)
    text = re.sub(r"<!--.*?-->", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r"(`+)(?:(?!\1).)+?\1", lambda m: " " * len(m.group(0)), text)
    return text


LINK_RES = [
    re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+[\"'][^)]*[\"'])?\s*\)"),
    re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M),
    re.compile(r"<(?:a|img)\s[^>]*(?:href|src)\s*=\s*\"([^\"]*)\"", re.I),
]


def links_of(text):
    """[(line number, target)] of every link and image in the prose."""
    body = prose(text)
    found = []
    for regex in LINK_RES:
        for m in regex.finditer(body):
            found.append((body.count("\n", 0, m.start(1)) + 1, m.group(1)))
    return sorted(found)


def check_links(root, doc, text, cache):
    problems = []
    for line, target in links_of(text):
        if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("//"):
            continue  # external (https:, mailto:), checked by nobody here
        path_part, _, anchor = target.partition("#")
        if path_part:
            if path_part.startswith("/"):
                problems.append(f"{doc}:{line}: link `{target}` is absolute; use a relative path")
                continue
            resolved = os.path.normpath(os.path.join(os.path.dirname(doc), path_part)).replace(os.sep, "/")
            if resolved.startswith("../") or not os.path.exists(os.path.join(root, resolved)):
                problems.append(f"{doc}:{line}: broken link `{target}` ({resolved} does not exist)")
                continue
        else:
            resolved = doc
        if anchor:
            if resolved.endswith(".md") and os.path.isfile(os.path.join(root, resolved)):
                if anchor not in anchors_of(root, resolved, cache):
                    problems.append(f"{doc}:{line}: link `{target}`: no heading or <a id> makes "
                                    f"#{anchor} in {resolved}")
            elif not re.fullmatch(r"L\d+(-L\d+)?", anchor):
                problems.append(f"{doc}:{line}: link `{target}`: only #L10 or #L10-L20 anchors work in a "
                                f"non-Markdown file")
    return problems


def check_chapter_links(root, doc, text):
    found = chapters(root)
    m = CHAPTER_RE.match(os.path.basename(doc))
    if not m or doc.count("/") != 1 or not doc.startswith("docs/"):
        return []
    n = int(m.group(1))
    targets = set()
    for _, target in links_of(text):
        path_part = target.partition("#")[0]
        if path_part:
            targets.add(os.path.normpath(os.path.join("docs", path_part)).replace(os.sep, "/"))
    problems = []
    for other, word in ((n - 1, "previous"), (n + 1, "next")):
        if other in found and found[other] not in targets:
            problems.append(f"{doc}: does not link to the {word} chapter, {found[other]} "
                            f"(add a <!-- nav --> block, or a link)")
    return problems


# ----------------------------------------------------------------------------------------------------------- main

def untracked_sources(root, cited):
    """Files that results/figure blocks cite and git does not track (a note, not an error: the check must also
    pass in a tarball without .git, and before the lead commits a new results folder)."""
    if not cited or not os.path.isdir(os.path.join(root, ".git")):
        return []
    try:
        import subprocess
        tracked = subprocess.run(["git", "-C", root, "ls-files", "--", *sorted(cited)], capture_output=True,
                                 text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    if tracked.returncode != 0:
        return []
    known = set(tracked.stdout.split())
    return sorted(c for c in cited if c not in known)


def doc_files(root):
    files = []
    docs = os.path.join(root, "docs")
    for folder, subfolders, names in os.walk(docs):
        subfolders[:] = sorted(d for d in subfolders if not d.startswith(".") and d != "tools")
        for name in sorted(names):
            if name.endswith(".md"):
                files.append(os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/"))
    if os.path.isfile(os.path.join(root, "README.md")):
        files.insert(0, "README.md")
    return files


def report_stale(citations):
    """--stale: every block that quotes a run of older code, by run, with the command that measures it again."""
    if not citations:
        print("No stale citations: every block quotes a run of today's code.")
        return 0
    runs = {}
    for doc, line, stale in citations:
        runs.setdefault(stale.run, []).append((doc, line, stale))
    print(f"{len(citations)} block(s) quote {len(runs)} run(s) of older code than today's:")
    for run, found in sorted(runs.items()):
        servers = []
        for _, _, stale in found:
            servers += [s for s in stale.servers if s not in servers]
        print(f"\n{run}: {', '.join(sorted(servers))}")
        print(f"  re-measure: {found[0][2].command or '(the run recorded no command)'}")
        for doc, line, stale in found:
            print(f"  {doc}:{line} ({', '.join(stale.servers)})")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Refresh the generated blocks (excerpts, results, figures, charts, navigation) in docs/*.md "
                    "and check links, anchors and chapter navigation.",
        epilog="Block syntax: see the top of this file, or docs/README.md.")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if anything is stale or broken")
    parser.add_argument("--stale", action="store_true",
                        help="change nothing; list every block that quotes a run of older code than today's, with "
                             "the command that measures it again (exit 0)")
    parser.add_argument("--root", default=os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                        "..", "..")),
                        help="the repository root (default: two folders above this script)")
    parser.add_argument("files", nargs="*", help="only these Markdown files (repository paths); default: all")
    options = parser.parse_args(argv)
    root = os.path.abspath(options.root)
    files = options.files or doc_files(root)
    files = [os.path.relpath(os.path.abspath(f), root).replace(os.sep, "/") if os.path.isabs(f) else f
             for f in files]

    if options.stale:
        options.check = True  # --stale writes nothing either
    FRESHNESS.clear()
    problems, updated, total, cited = [], [], 0, set()
    texts, outputs, citations = {}, {}, []
    for doc in files:
        full = os.path.join(root, doc)
        if not os.path.isfile(full):
            problems.append(f"{doc}: no such file")
            continue
        text = read_text(full)
        try:
            new_text, blocks, errors = refresh(root, doc, text, outputs, citations)
        except fingerprint.GitError as e:
            print(f"sync.py: {e}.", file=sys.stderr)
            return 1
        problems += errors
        total += len(blocks)
        for _, kind, args, _, _ in blocks:
            if kind in ("results", "figure", "chart", "value"):
                try:
                    path, block_options = parse_args(kind, args)
                except BlockError:
                    continue
                if path:
                    cited.add(path)
                    if kind in ("figure", "chart"):
                        cited.add(os.path.join(os.path.dirname(path), "summary.md").replace(os.sep, "/"))
                    if kind == "chart" and block_options.get("out"):
                        cited.add(block_options["out"])
        changed = [b for b in blocks if b[3] != "ok"]
        for line, kind, args, status, why in changed:
            what = f"{kind}: {args}" if args else kind
            if options.check:
                reason = ("was never generated" if status == "new" else
                          why or "differs from what its source gives now")
                problems.append(f"{doc}:{line}: stale block <!-- {what} --> {reason}")
            else:
                updated.append(f"{doc}:{line}: refreshed <!-- {what} -->")
        if new_text != text and not options.check:
            with open(full, "w", encoding="utf-8") as f:
                f.write(new_text)
            text = new_text
        texts[doc] = text
    if not options.check:
        for path, content in sorted(outputs.items()):
            full = os.path.join(root, path)
            if read_bytes(full) != content.encode("utf-8"):
                os.makedirs(os.path.dirname(full), exist_ok=True)
                with open(full, "wb") as f:
                    f.write(content.encode("utf-8"))

    if options.stale:
        return report_stale(citations)

    cache = {}
    for doc, text in texts.items():
        problems += check_links(root, doc, text, cache)
        problems += check_chapter_links(root, doc, text)
    for path in untracked_sources(root, cited):
        print(f"note: {path} is cited by the docs but not tracked by git yet: commit it with the docs",
              file=sys.stderr)

    for line in updated:
        print(line)
    if problems:
        print(f"{len(problems)} problem(s) in the docs:", file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        if options.check and any("stale block" in p for p in problems):
            print("Stale blocks: run `python3 docs/tools/sync.py` and commit the result.", file=sys.stderr)
        return 1
    verb = "checked" if options.check else "in sync"
    print(f"docs {verb}: {len(texts)} files, {total} generated blocks, all links and anchors resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
