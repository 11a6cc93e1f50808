"""analyse.py, a module of the driver: what the benchmark does with the numbers once a load tool has run.

The driver (benchmark/driver/) builds, starts and stops the servers and runs the load tools; this module does the
arithmetic and the formatting, and keeps a command line for use by hand (`python3 -m driver.analyse`, with
benchmark/ as the working directory or on PYTHONPATH):

  parse ab RUN_OUT [--percentiles CSV]   one run's figures, on one line of key=value ("n/a" for a missing one)
  parse wrk RUN_OUT                       the same from wrk, read from the line of wrk_done.lua
  summarize RAW_CSV                       raw.csv -> summary.csv, the median of the repetitions
  table KIND CSV [--tool wrk]             summary.csv (connections: raw.csv) -> a Markdown table
  table custom CSV --columns SPEC         a table with ad-hoc columns (markdown_table's SPEC)
  plot SUMMARY_CSV DIR --title T [--tool wrk]   DIR/plot.dat, and plot.svg and plot.png by gnuplot
  plot SUMMARY_CSV DIR --mode idle|latency|scaling [--target MS]   the same, from the PANELS of that mode
  plot RAW_CSV DIR --mode connections     one stacked bar per server: user and kernel KiB/connection
  knee SUMMARY_CSV [--target MS]          the latency mode: each server's knee, a Markdown table

CSV files are read and written with the csv module (ordinary quoting: a cell with a comma or a quote is quoted).
A figure is a number, or None when it is missing: a cell that is not a plain number ("n/a", "n/a (perf missing)",
"") stands for None, and None is written "n/a". Python 3 standard library only; unit tests in test_analyse.py.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import re
import shutil
import statistics
import subprocess
import sys
from typing import Callable, NamedTuple, Optional, Union

# ---- Text in, text out -------------------------------------------------------------------------------------
# Files are read and written as UTF-8, any byte that is not UTF-8 carried through unchanged (surrogateescape)
# rather than refused, whatever the locale says.

Rows = list  # a CSV's rows, each a list of cells; the first row is the header
MISSING = "n/a"  # how a missing figure (None) is written in a CSV cell and a table


def read_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="surrogateescape", newline="") as file:
        return file.read()


def parse_rows(text: str) -> Rows:
    """A CSV's text -> its rows (csv.reader); blank lines are left out."""
    return [row for row in csv.reader(io.StringIO(text)) if row]


def read_rows(path: str) -> Rows:
    """The rows of a CSV file. A file without even a header is an error."""
    rows = parse_rows(read_text(path))
    if not rows:
        raise ValueError(f"{path} is empty")
    return rows


def csv_text(rows: Rows) -> str:
    """Rows -> CSV text: the csv module's ordinary quoting, \n line ends, each cell through cell_text."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in rows:
        writer.writerow([cell_text(value) for value in row])
    return out.getvalue()


def write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8", errors="surrogateescape", newline="") as file:
        file.write(text)


def print_text(text: str) -> None:
    sys.stdout.buffer.write(text.encode("utf-8", "surrogateescape"))
    sys.stdout.flush()


def print_lines(lines: list[str]) -> None:
    print_text("".join(line + "\n" for line in lines))


# ---- Numbers -----------------------------------------------------------------------------------------------

Figure = Optional[float]  # a measured figure, or None when it is missing
PLAIN_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", re.ASCII)


def number(value) -> Figure:
    """A cell (or a value) as a figure: a plain number ("12.5", 12) as a float, anything else ("n/a",
    "n/a (perf missing)", "12 ms", "", None) as None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return None if math.isnan(value) else float(value)
    text = value.strip()
    return float(text) if PLAIN_NUMBER.fullmatch(text) else None


def count(value) -> Optional[int]:
    """A whole count (requests, failures), or None."""
    figure = number(value)
    return int(figure) if figure is not None else None


def number_text(value: float) -> str:
    """A number as a CSV cell: a whole number without a decimal point (3112), any other rounded to 6 decimals and
    written without trailing zeros (1.294, 8985.3, 1048900.5)."""
    if float(value).is_integer():
        return "%d" % value
    return repr(round(float(value), 6))


def cell_text(value) -> str:
    """Any value as a CSV cell: None as n/a, a number through number_text, text as it is."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return number_text(value)
    return str(value)


def ratio(a, b, digits: int = 2) -> Figure:
    """a / b rounded to DIGITS decimals; None when either is missing or b is zero."""
    a, b = number(a), number(b)
    if a is None or b is None or b == 0:
        return None
    return round(a / b, digits)


# ---- parse: one run's output -> its figures ------------------------------------------------------------------

# The fields every parse gives, in this order (the `parse` command prints them so).
PARSED_FIELDS = ("complete", "failed", "non2xx", "rps", "mean_ms", "p99_ms", "doc_length", "bytes_read", "mib_per_s")

# What a field is when the output does not give it: no complete request, no non-2xx answer, and everything else
# unknown (an unknown count of failed requests fails the run's check, as it should).
DEFAULTS = {"complete": 0, "failed": None, "non2xx": 0, "rps": None, "mean_ms": None, "p99_ms": None,
            "doc_length": None, "bytes_read": None, "mib_per_s": None}
COUNTS = ("complete", "failed", "non2xx", "doc_length", "bytes_read")  # whole numbers: ints

# ab prints its results for people, one per line: `Requests per second:    13973.21 [#/sec] (mean)`. Each field:
# the line's label, and which word of that line holds the value (1 = the first word of the label).
AB_FIELDS = {
    "complete": ("Complete requests:", 3),
    "failed": ("Failed requests:", 3),       # connect, receive, length and exception failures together
    "non2xx": ("Non-2xx responses:", 3),     # only printed when there were some
    "rps": ("Requests per second:", 4),
    "mean_ms": ("Time per request:", 4),     # the first of the two such lines: the mean time a client waited
    "doc_length": ("Document Length:", 3),   # the body length of the first answer, in bytes
}


def ab_field(output: str, label: str, word: int) -> str:
    """The WORD-th word of the first line of ab's output that starts with LABEL ("" when there is none)."""
    for line in output.split("\n"):
        if line.startswith(label):
            words = line.split()
            return words[word - 1] if len(words) >= word else ""
    return ""


def percentile_99(percentiles_csv: str) -> Figure:
    """The 99 % row of ab's -e file (`99,1.337`: ms, with decimals, where ab's own table prints whole ms)."""
    for row in parse_rows(percentiles_csv):
        if len(row) >= 2 and number(row[0]) == 99:
            return number(row[1])
    return None


def typed(key: str, value) -> Union[int, float, None]:
    figure = number(value)
    if figure is None:
        return None
    return int(figure) if key in COUNTS else figure


def parse_ab(output: str, percentiles_csv: str = "") -> dict:
    """ab's output (and its -e percentile file, when there is one) -> the PARSED_FIELDS: ints for the counts,
    floats for the rest, the DEFAULTS for what it does not say."""
    found = {key: typed(key, ab_field(output, label, word)) for key, (label, word) in AB_FIELDS.items()}
    found["p99_ms"] = percentile_99(percentiles_csv)
    return {key: DEFAULTS[key] if found.get(key) is None else found[key] for key in PARSED_FIELDS}


# wrk_done.lua's line: `psp-wrk: requests=89489 bytes=104254685 duration_us=1000519 ... latency_p99_us=1129`.
WRK_LINE = "psp-wrk:"
WRK_KEYS = ("requests", "bytes", "duration_us", "connect_errors", "read_errors", "write_errors", "timeout_errors",
            "status_errors", "latency_mean_us", "latency_p99_us")


def wrk_totals(output: str) -> dict[str, float] | None:
    """The numbers of wrk_done.lua's line in wrk's output; None when the line is missing or incomplete."""
    line = next((line for line in reversed(output.split("\n")) if line.startswith(WRK_LINE)), None)
    if line is None:
        return None
    totals = {}
    for pair in line[len(WRK_LINE):].split():
        key, _, value = pair.partition("=")
        if number(value) is not None:
            totals[key] = number(value)
    return totals if all(key in totals for key in WRK_KEYS) else None


def parse_wrk(output: str) -> dict:
    """wrk's output, with the line of wrk_done.lua -> the PARSED_FIELDS.

    wrk does not report the body length (doc_length is None: the driver relies on the ab warm-up, and in files
    mode on curl, to check it). Without wrk_done.lua's line every field takes its default: nothing is read back
    from wrk's rounded human summary."""
    figures = dict(DEFAULTS)
    totals = wrk_totals(output)
    if totals is None:
        return figures
    seconds = totals["duration_us"] / 1e6
    figures["complete"] = int(totals["requests"])
    # The socket errors, as wrk's "Socket errors: connect 0, read 0, write 0, timeout 0" line adds them up.
    figures["failed"] = int(sum(totals[kind + "_errors"] for kind in ("connect", "read", "write", "timeout")))
    figures["non2xx"] = int(totals["status_errors"])  # wrk's "Non-2xx or 3xx responses"
    # Milliseconds to a microsecond, like ab's figures.
    figures["mean_ms"] = round(totals["latency_mean_us"] / 1000, 3)
    figures["p99_ms"] = round(totals["latency_p99_us"] / 1000, 3)
    figures["bytes_read"] = int(totals["bytes"])  # exact, where wrk's own summary says "1.02GB read"
    if seconds > 0:
        figures["rps"] = round(totals["requests"] / seconds, 2)  # as wrk computes its Requests/sec
        figures["mib_per_s"] = round(totals["bytes"] / seconds / 1048576, 1)  # MiB = 2^20 bytes
    return figures


# ---- summarize: raw.csv (one row per run) -> summary.csv (one row per key) -------------------------------------


def median(values: list) -> Union[float, str, None]:
    """The median of one column over a row's repetitions (statistics.median) of the values that are figures.
    When none is, the first value's text stands ("n/a (perf missing)" says why), or None."""
    figures = [figure for figure in map(number, values) if figure is not None]
    if figures:
        return statistics.median(figures)
    first = values[0] if values else None
    return first if isinstance(first, str) and first not in ("", MISSING) else None


# Columns of raw.csv that are neither the key, nor figures, nor the check: they say something about the run.
# `disturbed`: "yes" when other processes took more of the machine than the threshold during the run (see
# driver/disturbance.py); "measured again" when --retry-disturbed measured the run once more (the row that
# replaced it follows), and then the summary leaves it out. `generator` (--mode latency): "behind" when the load
# generator itself fell behind its schedule: that rate says nothing about the server (see knees).
NOTES = ("disturbed", "generator")
SUPERSEDED = "measured again"


class Group:
    """The runs of one summary row: the same server and the same key levels (concurrency; file; ...)."""

    def __init__(self, server: str, levels: tuple[str, ...]):
        self.server = server
        self.levels = levels            # the key columns after `server`: what nginx's row must match
        self.runs = 0
        self.values: dict[int, list[str]] = {}  # column index -> its values, one per run
        self.failures = 0               # failed + non2xx over all runs
        self.bad = 0                    # runs whose check is not "ok"
        self.why = ""                   # the first of those checks
        self.disturbed = 0              # runs marked disturbed (and kept)
        self.superseded = 0             # runs measured again (left out)
        self.behind = 0                 # runs at which the load generator fell behind (and kept)


def summarize(rows: Rows) -> Rows:
    """raw.csv's rows -> summary.csv's rows.

    The columns before `repetition` are the row's key (server, concurrency; or server, file, connections; any
    others a mode adds), the last column is the run's check, and the ones between are figures (but the NOTES).
    For each key: `runs`, the median of each figure over the runs; for requests_per_s also rps_min, rps_max,
    spread_pct ((max - min) / median, None for one run) and vs_nginx (the ratio to the median of nginx's row with
    the same key levels); `failures`, failed + non2xx summed over the runs, in place of both (complete is left
    out: the checks compare it); with a `disturbed` column, `disturbed_runs`: how many of the runs in the medians
    (and in the spread) were disturbed; and `check`: ok, or the first failed check, with "(k of n runs)" when
    only some failed. A run marked "measured again" is left out of everything but `check`'s count."""
    names = rows[0]
    if "repetition" not in names:
        raise ValueError("raw.csv has no repetition column: " + ",".join(names))
    key_count = names.index("repetition")  # the key columns: those before `repetition`
    check = len(names) - 1                  # the last column: the run's check
    rps = names.index("requests_per_s") if "requests_per_s" in names else None
    failed = names.index("failed") if "failed" in names else None
    non2xx = names.index("non2xx") if "non2xx" in names else None
    disturbed = names.index("disturbed") if "disturbed" in names else None
    generator = names.index("generator") if "generator" in names else None
    figures = [index for index in range(key_count + 1, check) if names[index] not in NOTES]
    dropped = {index for index in figures if names[index] == "complete" or index == non2xx}

    header = names[:key_count] + ["runs"]
    for index in figures:
        if index == rps:
            header += ["requests_per_s", "rps_min", "rps_max", "spread_pct", "vs_nginx"]
        elif index == failed:
            header.append("failures")
        elif index not in dropped:
            header.append(names[index])
    if disturbed is not None:
        header.append("disturbed_runs")
    if generator is not None:
        header.append("generator_behind_runs")
    header.append("check")

    groups: dict[tuple, Group] = {}  # by key, in the order of the first run of each (dicts keep that order)
    for cells in rows[1:]:
        cells = cells + [""] * (len(names) - len(cells))  # a short row: its missing cells are empty
        key = tuple(cells[:key_count])
        group = groups.setdefault(key, Group(cells[0], tuple(cells[1:key_count])))
        if disturbed is not None and cells[disturbed] == SUPERSEDED:
            group.superseded += 1
            continue
        group.runs += 1
        if disturbed is not None and cells[disturbed] == "yes":
            group.disturbed += 1
        if generator is not None and cells[generator] == "behind":
            group.behind += 1
        for index in figures:
            group.values.setdefault(index, []).append(cells[index])
        for index in (failed, non2xx):
            if index is not None and count(cells[index]) is not None:  # a count: n/a adds nothing
                group.failures += count(cells[index])
        if cells[check] != "ok":
            group.bad += 1
            if group.bad == 1:
                group.why = cells[check]

    # The median req/s of each row, and nginx's for each set of key levels: what vs_nginx divides by.
    rps_median = {key: median(group.values.get(rps, [])) for key, group in groups.items() if rps is not None}
    reference = {group.levels: rps_median[key] for key, group in groups.items()
                 if rps is not None and group.server == "nginx"}

    out = [header]
    for key, group in groups.items():
        row = [*key, group.runs]
        for index in figures:
            if index == rps:
                row += rps_columns(group, group.values.get(rps, []), rps_median[key], reference.get(group.levels))
            elif index == failed:
                row.append(group.failures)
            elif index not in dropped:
                row.append(median(group.values.get(index, [])))
        if disturbed is not None:
            row.append(group.disturbed)
        if generator is not None:
            row.append(group.behind)
        if group.bad == 0:
            row.append("ok")
        elif group.bad == group.runs:
            row.append(group.why)
        else:
            row.append(f"{group.why} ({group.bad} of {group.runs} runs)")
        out.append(row)
    return out


def rps_columns(group: Group, values: list[str], middle, nginx) -> list:
    """requests_per_s, rps_min, rps_max, spread_pct and vs_nginx of one summary row, given its median req/s
    and nginx's at the same key levels (None without an nginx row)."""
    figures = [figure for figure in map(number, values) if figure is not None]
    low, high = (min(figures), max(figures)) if figures else (None, None)
    middle = number(middle)
    spread = None  # the spread needs two runs and a median above 0
    if middle is not None and middle > 0 and group.runs > 1:
        spread = round((high - low) * 100 / middle, 1)
    return [middle, low, high, spread, ratio(middle, nginx)]


# ---- table: a CSV -> a Markdown table --------------------------------------------------------------------------


class Column(NamedTuple):
    """One column of a Markdown table.

    source: the CSV column shown, or a function that makes the cell's value from the row (a dict by column name).
    format: a printf format ("%.1f"; "%s" shows the value as it is, right-aligned), or one of:
      text    as it is, left-aligned          server  as it is, left-aligned; nginx gets "(reference)"
      pct     the spread: "12.5%"; – for n/a   ratio   vs nginx: "1.57"; – for n/a
      mib     KiB shown in MiB, "3.3"
    A value that is empty or n/a ("n/a (perf missing)") is shown as it is, whatever the format."""

    source: Union[str, Callable[[dict[str, str]], str]]
    heading: str
    format: str


def row_value(row: dict[str, str], name: str) -> str:
    """One cell of a CSV row (a dict by column name); empty when the row is short of it."""
    return row.get(name, "")


# The connection mode's table is made from raw.csv; some of its cells combine columns.
def refused_or_closed(row: dict[str, str]) -> str:
    """Connections the server did not keep: answered another status (refused) or closed without an answer."""
    if row_value(row, "refused") == "":
        return ""  # idle_conns did not run
    return number_text((number(row_value(row, "refused")) or 0) + (number(row_value(row, "closed")) or 0))


def is_zero(value: str) -> bool:
    return number(value) == 0


def above_zero(value: str) -> bool:
    return (number(value) or 0) > 0


def new_client(row: dict[str, str]) -> str:
    """How the 5 new clients timed while the connections were held: "median / max" ms, or what went wrong."""
    refused, timed_out = (number(row_value(row, name)) or 0 for name in ("probe_refused", "probe_timeout"))
    if refused + timed_out > 0 and is_zero(row_value(row, "probe_ok")):
        return "no answer" if above_zero(row_value(row, "probe_timeout")) else "refused"
    return row_value(row, "probe_median_ms") + " / " + row_value(row, "probe_max_ms")


def probe_times(row: dict[str, str]) -> str:
    """The new clients timed while the connections were held: "median / p99" ms, or what went wrong."""
    if row_value(row, "probe_ok") == "":
        return ""  # not run
    if is_zero(row_value(row, "probe_ok")):
        return "no answer" if above_zero(row_value(row, "probe_timeout")) else "refused"
    return row_value(row, "probe_median_ms") + " / " + row_value(row, "probe_p99_ms")


def slab_list(row: dict[str, str]) -> str:
    """The slabs that grew, "TCP 2,432 · sock_inode_cache 1,344 ..." from `TCP:2432;sock_inode_cache:1344`."""
    if row_value(row, "slabs") in ("", "n/a"):
        return row_value(row, "slabs")
    return " · ".join(f"{name} {int(size):,}" for name, _, size in
                      (entry.rpartition(":") for entry in row_value(row, "slabs").split(";")))


def after_release(row: dict[str, str]) -> str:
    """Whether a new client was served once the held connections were released."""
    status = row_value(row, "after_status")
    if status == "":
        return ""
    return "served" if number(status) == 200 else "NOT served"


def spread(row: dict[str, str]) -> str:
    """The spread of req/s, "12.5%" (– for n/a), and when some of the runs in it were disturbed, how many:
    "12.5% (1 of 3 disturbed)"."""
    value = row_value(row, "spread_pct")
    text = "–" if value.startswith("n/a") else (value + "%" if value else "")
    marked = number(row_value(row, "disturbed_runs"))
    if marked:
        text += f" ({int(marked)} of {row_value(row, 'runs')} disturbed)"
    return text


def disturbed_runs(row: dict[str, str]) -> str:
    """How many of a row's runs were disturbed, or at which the load generator fell behind: "1 of 3", "0", or
    "" for a summary made before this was measured."""
    marked, behind = number(row_value(row, "disturbed_runs")), number(row_value(row, "generator_behind_runs"))
    if marked is None:
        return ""
    text = f"{int(marked)} of {row_value(row, 'runs')}" if marked else "0"
    return text + (f"; generator behind in {int(behind)}" if behind else "")


# The tables of summary.md, one entry per mode. A new mode adds its entry here, and benchmark.sh a function that
# calls `analyse.py table MODE summary.csv`.
TABLES: dict[str, list[Column]] = {
    "throughput": [
        Column("server", "server", "server"),
        Column("concurrency", "c", "%s"),  # "connections" with --tool wrk: see table_columns
        Column("requests_per_s", "req/s", "%.0f"),
        Column("vs_nginx", "vs nginx", "ratio"),
        Column(spread, "spread", "%s"),
        Column("mean_ms", "mean ms", "%.3f"),
        Column("p99_ms", "p99 ms", "%.2f"),
        Column("failures", "failures", "%s"),
        Column("cpu_us_per_req", "CPU µs/req", "%.1f"),
        Column("ctxsw_per_req", "ctx sw/req", "%.2f"),
        Column("syscalls_per_req", "syscalls/req", "%.1f"),
        Column("peak_rss_kib", "peak RSS MiB", "mib"),
        Column("peak_threads", "peak threads", "%.0f"),
        Column("check", "check", "text"),
    ],
    "files": [
        Column("server", "server", "server"),
        Column("file", "file", "text"),
        Column("connections", "connections", "%s"),
        Column("requests_per_s", "req/s", "%.0f"),
        Column("mib_per_s", "MiB/s", "%.0f"),
        Column("vs_nginx", "vs nginx", "ratio"),
        Column(spread, "spread", "%s"),
        Column("mean_ms", "mean ms", "%.3f"),
        Column("p99_ms", "p99 ms", "%.2f"),
        Column("failures", "failures", "%s"),
        Column("cpu_us_per_req", "CPU µs/req", "%.1f"),
        Column("ctxsw_per_req", "ctx sw/req", "%.2f"),
        Column("syscalls_per_req", "syscalls/req", "%.1f"),
        Column("peak_rss_kib", "peak RSS MiB", "mib"),
        Column("check", "check", "text"),
    ],
    "connections": [  # from raw.csv: one row per server and connection count, no repetitions
        Column("server", "server", "server"),
        Column("connections", "connections", "%s"),
        Column("held", "held", "%s"),
        Column(refused_or_closed, "refused", "%s"),
        Column("blocked", "blocked", "%s"),
        Column("untried", "not tried", "%s"),
        Column("setup_s", "set-up s", "%s"),
        Column("rss_kib_per_conn", "user KiB/conn", "%s"),
        Column("server_kernel_b", "kernel KiB/conn", "kib"),
        Column("client_kernel_b", "client's kernel KiB/conn", "kib"),
        Column("threads_per_conn", "threads/conn", "%s"),
        Column("idle_cpu_ms", "idle CPU ms", "%s"),
        Column(probe_times, "new client ms (median / p99)", "%s"),
        Column("stopped_by", "stopped by", "text"),
        Column("check", "check", "text"),
    ],
    "slabs": [  # from raw.csv of --mode connections: where the kernel's share goes
        Column("server", "server", "server"),
        Column("held", "held", "%s"),
        Column("kernel_b", "kernel KiB/conn, both ends", "kib"),
        Column(slab_list, "slab caches that grew, bytes per connection (both ends)", "text"),
    ],
    # The table of connection runs made before the kernel's memory was measured: their summary.md still
    # regenerates from their raw.csv with it (test_analyse.py).
    "connections-user": [
        Column("server", "server", "server"),
        Column("connections", "connections", "%s"),
        Column("held", "held", "%s"),
        Column(refused_or_closed, "refused", "%s"),
        Column("blocked", "blocked", "%s"),
        Column("dropped", "dropped", "%s"),
        Column("rss_kib_per_conn", "RSS KiB/conn", "%s"),
        Column("threads_per_conn", "threads/conn", "%s"),
        Column("fds_per_conn", "fds/conn", "%s"),
        Column(new_client, "new client ms (median / max)", "%s"),
        Column(after_release, "after release", "text"),
        Column("check", "check", "text"),
    ],
    "idle": [  # busy clients beside N idle connections: what the idle ones cost the busy ones
        Column("server", "server", "server"),
        Column("idle", "idle conns", "%s"),
        Column("keepalive", "keep-alive", "text"),
        Column("concurrency", "c", "%s"),
        Column("requests_per_s", "req/s", "%.0f"),
        Column("vs_nginx", "vs nginx", "ratio"),
        Column(spread, "spread", "%s"),
        Column("p99_ms", "p99 ms", "%.2f"),
        Column("failures", "failures", "%s"),
        Column("cpu_us_per_req", "CPU µs/req", "%.1f"),
        Column("syscalls_per_req", "syscalls/req", "%.1f"),
        Column("peak_rss_kib", "peak RSS MiB", "mib"),
        Column("peak_threads", "peak threads", "%.0f"),
        Column("check", "check", "text"),
    ],
    "scaling": [  # the server on K CPUs, wrk on the others (driver/scaling.py)
        Column("server", "server", "server"),
        Column("cores", "K", "%s"),
        Column("connection", "connection", "text"),
        Column("delay_us", "delay µs", "%s"),
        Column("requests_per_s", "req/s", "%.0f"),
        Column(spread, "spread", "%s"),
        Column("vs_nginx", "vs nginx", "ratio"),
        Column("cpu_us_per_req", "CPU µs/req", "%.2f"),
        Column("server_cpus", "server CPUs busy", "%.2f"),
        Column("rps_per_cpu", "req/s per server CPU", "%.0f"),
        Column("vs_floor", "vs floor (per CPU)", "ratio"),
        Column("client_busy_pct", "client CPUs busy %", "%s"),
        Column("client_bound", "client-bound", "text"),
        Column("failures", "failures", "%s"),
        Column("check", "check", "text"),
    ],
    "latency": [  # an offered load, open loop: latency from each request's intended send time
        Column("server", "server", "server"),
        Column("rate", "offered req/s", "%s"),
        Column("load_pct", "% of capacity", "%s"),
        Column("requests_per_s", "achieved req/s", "%.0f"),
        Column("p50_ms", "p50 ms", "%.2f"),
        Column("p99_ms", "p99 ms", "%.2f"),
        Column("p999_ms", "p99.9 ms", "%.2f"),
        Column("max_ms", "max ms", "%.2f"),
        Column("u_p99_ms", "p99 ms, closed-loop view", "%.2f"),
        Column("failures", "failures", "%s"),
        Column("cpu_us_per_req", "CPU µs/req", "%.1f"),
        Column("gen_lag_p99_ms", "generator lag p99 ms", "%.2f"),
        Column(disturbed_runs, "disturbed runs", "%s"),
        Column("check", "check", "text"),
    ],
}


CLIENT_BOUND_PCT = 90  # --mode scaling: a row whose client CPUs were busier than this measured the client


def scaling_columns(rows: Rows, floor: str = "floor") -> Rows:
    """summary.csv of the scaling mode, with two columns added before `check`: vs_floor, the row's requests per
    server CPU second divided by the floor's at the same cores, connection and handler; and client_bound, "yes"
    when the client's CPUs were more than CLIENT_BOUND_PCT % busy (wrk was the limit, not the server), else "no"."""
    names = rows[0]
    key = [names.index(name) for name in ("cores", "connection", "delay_us")]
    per_cpu, busy, check = names.index("rps_per_cpu"), names.index("client_busy_pct"), names.index("check")
    reference = {tuple(row[i] for i in key): row[per_cpu] for row in rows[1:] if row[0] == floor}
    out = [names[:check] + ["vs_floor", "client_bound"] + names[check:]]
    for row in rows[1:]:
        versus = ratio(row[per_cpu], reference.get(tuple(row[i] for i in key)))
        client = number(row[busy])
        bound = None if client is None else ("yes" if client > CLIENT_BOUND_PCT else "no")
        out.append(list(row[:check]) + [versus, bound] + list(row[check:]))
    return out


def knees(rows: Rows, target_ms: float) -> list[str]:
    """summary.csv of the latency mode -> a Markdown table of each server's knee: the highest offered rate at which
    the p99 (from the intended send time) is still under TARGET_MS, every lower rate being under it too. Past the
    knee, requests arrive faster than they are served, and the queue (and the latency) grows for as long as the
    load lasts. A rate at which the load generator itself fell behind in every run kept (generator_behind_runs)
    says nothing about the server: it counts neither way, and the table lists it as not measured."""
    found: dict[str, list] = {}  # server -> [knee rate, its p99, the first rate over the target, its p99, skipped]
    generator_column = "generator_behind_runs" in rows[0]
    for row in records(rows):
        entry = found.setdefault(row["server"], ["", "", "", "", []])
        if entry[2]:
            continue  # already over the target at a lower rate
        runs, behind = number(row.get("runs")), number(row.get("generator_behind_runs"))
        if generator_column and behind and runs and behind >= runs:
            entry[4].append(row["rate"])
            continue
        p99 = number(row["p99_ms"])
        if p99 is not None and p99 < target_ms:
            entry[0], entry[1] = row["rate"], row["p99_ms"]
        else:
            entry[2], entry[3] = row["rate"], row["p99_ms"]
    extra = " rates not measured (the generator fell behind) |" if generator_column else ""
    out = [f"| server | knee: req/s with p99 under {target_ms:g} ms | p99 there, ms | next rate | p99 there, ms |"
           + extra, "|---|---:|---:|---:|---:|" + ("---|" if generator_column else "")]
    for server, (rate, p99, over, over_p99, skipped) in found.items():
        lowest = "not measured" if skipped and not over else "below the lowest rate"  # (every rate skipped)
        line = (f"| {cell(server, 'server')} | {rate or lowest} | {p99} | {over or '–'} | "
                f"{over_p99 or '–'} |")
        out.append(line + (f" {', '.join(skipped) or 'none'} |" if generator_column else ""))
    return out


def table_columns(kind: str, tool: str = "ab") -> list[Column]:
    """The columns of a kind of table. wrk's -c counts connections, so its throughput table says so."""
    columns = TABLES[kind]
    if tool == "wrk":
        columns = [column._replace(heading="connections") if column.heading == "c" else column
                   for column in columns]
    return columns


def parse_column_spec(spec: str) -> list[Column]:
    """Columns written the way markdown_table took them: `csv_column:heading:format ...`, separated by blanks,
    with _ for a space in a heading (`cpu_us_per_req:CPU_µs/req:%.1f`)."""
    columns = []
    for item in spec.split():
        parts = item.split(":", 2)
        if len(parts) != 3:
            raise ValueError(f"bad column {item!r}: expected csv_column:heading:format")
        source, heading, form = parts
        columns.append(Column(source, heading.replace("_", " "), form))
    return columns


def cell(value: str, form: str) -> str:
    """One value of a CSV, shown in the given format (see Column)."""
    if form == "server":
        return "nginx (reference)" if value == "nginx" else value
    if form in ("pct", "ratio") and value.startswith("n/a"):
        return "–"
    if form == "text" or value == "" or value.startswith("n/a"):
        return value
    if form == "pct":
        return value + "%"
    if form == "ratio":
        return "%.2f" % (number(value) or 0)
    if form == "mib":
        return "%.1f" % ((number(value) or 0) / 1024)
    if form == "kib":  # bytes, shown in KiB
        return "%.2f" % ((number(value) or 0) / 1024)
    if form == "%s" or number(value) is None:
        return value
    return form % number(value)


def records(rows: Rows) -> list[dict[str, str]]:
    """A CSV's rows (a header, then rows) -> one dict per row, by column name, each cell as text (cell_text)."""
    names = rows[0]
    return [{name: cell_text(value) for name, value in zip(names, row)} for row in rows[1:]]


def markdown_table(columns: list[Column], rows: Rows) -> list[str]:
    """A CSV's rows (a header, then rows) -> a Markdown table of the given columns, one row per CSV row."""
    names = rows[0]
    for column in columns:
        if isinstance(column.source, str) and column.source not in names:
            raise ValueError("no column " + column.source)
    out = ["| " + " | ".join(column.heading for column in columns) + " |",
           "|" + "".join("---|" if column.format in ("text", "server") else "---:|" for column in columns)]
    for row in records(rows):
        cells = []
        for column in columns:
            if isinstance(column.source, str):
                cells.append(cell(row_value(row, column.source), column.format))
            else:
                cells.append(cell(column.source(row), column.format))
        out.append("| " + " | ".join(cells) + " |")
    return out


# ---- plot: summary.csv -> plot.dat, plot.svg, plot.png --------------------------------------------------------


def plot_series(rows: Rows) -> list[tuple[str, list[str]]]:
    """summary.csv's lines -> one series per server, in the order of the rows: (server, its points), each point
    `concurrency req/s p99_ms` as written in summary.csv. Rows without req/s (a server that did not start, a
    failed run) are left out, and a server without any point too."""
    series: dict[str, list[str]] = {}
    for row in records(rows):
        points = series.setdefault(row["server"], [])
        if number(row.get("requests_per_s")) is not None:
            points.append(f"{row.get('concurrency', '')} {row['requests_per_s']} {row.get('p99_ms', '')}")
    return [(server, points) for server, points in series.items() if points]


def plot_data(series: list[tuple[str, list[str]]]) -> str:
    """plot.dat: one block of points per server, blocks separated by two blank lines (gnuplot's `index`)."""
    return "".join("".join(point + "\n" for point in points) + "\n\n" for _, points in series)


def gnuplot_quote(text: str) -> str:
    """TEXT as a single-quoted gnuplot string, in which only the quote itself is special (written twice)."""
    return "'" + text.replace("'", "''") + "'"


def gnuplot_script(terminal: str, output: str, data: str, series: list[tuple[str, list[str]]], title: str,
                   x_label: str) -> str:
    """The gnuplot commands for one image: two panels, req/s and p99 latency against concurrency (log scale),
    one line per server."""
    labels = ["nginx (reference)" if server == "nginx" else server for server, _ in series]
    rps_lines = [f"{gnuplot_quote(data)} index {index} using 1:2 with linespoints title {gnuplot_quote(label)}"
                 for index, label in enumerate(labels)]
    p99_lines = [f"{gnuplot_quote(data)} index {index} using 1:3 with linespoints title {gnuplot_quote(label)}"
                 for index, label in enumerate(labels)]
    quoted_title = '"' + title.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return "\n".join([
        f"set terminal {terminal} noenhanced",  # noenhanced: a _ in a server's name is not a subscript
        "set colorsequence podo",                # colours that colour-blind readers tell apart (Wong 2011)
        f"set output {gnuplot_quote(output)}",
        f"set multiplot layout 1,2 title {quoted_title}",
        "set logscale x",
        "set xrange [0.8:*]",
        f"set xlabel {gnuplot_quote(x_label)}",
        "set bmargin 8",
        "set key below maxrows 3",
        "set grid",
        "set ylabel 'requests per second'",
        "set yrange [0:*]",
        "plot " + ",".join(rps_lines),
        "set ylabel 'p99 latency (ms)'",
        "set logscale y",
        "set yrange [*:*]",
        "unset key",
        "plot " + ",".join(p99_lines),
        "unset multiplot",
    ]) + "\n"


# The two images: gnuplot's terminal for each, by file extension.
PLOT_TERMINALS = {"svg": "svg size 1200,500 dynamic", "png": "pngcairo size 1200,500"}


def plot(summary_csv: str, results_dir: str, title: str, x_label: str) -> list[str]:
    """Writes RESULTS_DIR/plot.dat and draws plot.svg and plot.png with gnuplot. Returns the problems met, one
    sentence each (benchmark.sh turns them into warnings). Without gnuplot, does nothing: no plot is no error."""
    if shutil.which("gnuplot") is None:
        return []
    series = plot_series(read_rows(summary_csv))
    data = results_dir + "/plot.dat"
    write_text(data, plot_data(series))
    if not series:
        return []  # nothing to draw: every server failed
    problems = []
    for extension, terminal in PLOT_TERMINALS.items():
        script = gnuplot_script(terminal, f"{results_dir}/plot.{extension}", data, series, title, x_label)
        result = subprocess.run(["gnuplot"], input=script, capture_output=True, text=True)
        if result.returncode != 0:
            first_line = result.stderr.strip().split("\n")[0]
            problems.append(f"gnuplot could not draw the {extension} plot: {first_line}")
    return problems


# ---- plot for the idle and latency modes: panels of one column against another, one line per server ----------


class Panel(NamedTuple):
    """One panel of a plot: column y of summary.csv against column x, one line per server, from the rows where
    column `only[0]` is `only[1]`, and `only[2]` is `only[3]`, and so on (all rows when `only` is empty)."""

    x: str
    y: str
    x_label: str
    y_label: str
    log_x: bool = False
    log_y: bool = False
    only: tuple[str, ...] = ()


PANELS: dict[str, tuple[str, list[Panel]]] = {  # mode -> (gnuplot's layout, its panels)
    "idle": ("2,2", [
        Panel("idle", "requests_per_s", "idle connections", "req/s, a new connection per request",
              only=("keepalive", "no")),
        Panel("idle", "requests_per_s", "idle connections", "req/s, keep-alive", only=("keepalive", "yes")),
        Panel("idle", "cpu_us_per_req", "idle connections", "server CPU µs/req, a new connection per request",
              only=("keepalive", "no")),
        Panel("idle", "cpu_us_per_req", "idle connections", "server CPU µs/req, keep-alive",
              only=("keepalive", "yes")),
    ]),
    "scaling": ("2,2", [  # req/s against the server's cores: the curve, one line per server (the floor among them)
        Panel("cores", "requests_per_s", "server CPUs (K)", "req/s, keep-alive, --delay-us 0", True,
              only=("connection", "keep-alive", "delay_us", "0")),
        Panel("cores", "requests_per_s", "server CPUs (K)", "req/s, a new connection per request, --delay-us 0",
              True, only=("connection", "close", "delay_us", "0")),
        Panel("cores", "rps_per_cpu", "server CPUs (K)", "req per server CPU second, keep-alive, --delay-us 0",
              True, only=("connection", "keep-alive", "delay_us", "0")),
        Panel("cores", "requests_per_s", "server CPUs (K)", "req/s, keep-alive, 1 ms handler", True,
              only=("connection", "keep-alive", "delay_us", "1000")),
    ]),
    "latency": ("1,2", [
        Panel("rate", "p99_ms", "offered load (req/s)", "p99 latency from the intended send (ms)", True, True),
        Panel("load_pct", "p99_ms", "offered load (% of the capacity ab measured)",
              "p99 latency from the intended send (ms)", False, True),
    ]),
}


def panel_series(rows: Rows, panel: Panel) -> list[tuple[str, list[str]]]:
    """One series per server for a panel: the points `x y` of its rows that have a number for both."""
    series: dict[str, list[str]] = {}
    for row in records(rows):
        pairs = zip(panel.only[::2], panel.only[1::2])
        if any(row.get(name) != value for name, value in pairs):
            continue
        points = series.setdefault(row["server"], [])
        if number(row.get(panel.x)) is not None and number(row.get(panel.y)) is not None:
            points.append(f"{row[panel.x]} {row[panel.y]}")
    return [(server, points) for server, points in series.items() if points]


def panels_script(terminal: str, output: str, data: str, layout: str,
                  panels: list[tuple[Panel, list[tuple[str, int]], int]],
                  title: str, target_ms: float) -> str:
    """The gnuplot commands for a plot of panels; each panel comes with its series (label, line type) and the
    index of its first block in the data file. A server keeps its line type, so its colour, in every panel. A
    panel of p99 also draws the target as a dashed line."""
    quoted_title = '"' + title.replace("\\", "\\\\").replace('"', '\\"') + '"'
    commands = [f"set terminal {terminal} noenhanced", "set colorsequence podo", f"set output {gnuplot_quote(output)}",
                f"set multiplot layout {layout} title {quoted_title}", "set grid", "set key below maxrows 3"]
    for panel, labels, first in panels:
        commands += ["set logscale x" if panel.log_x else "unset logscale x",
                     "set logscale y" if panel.log_y else "unset logscale y",
                     "set yrange [*:*]" if panel.log_y else "set yrange [0:*]",
                     f"set xlabel {gnuplot_quote(panel.x_label)}", f"set ylabel {gnuplot_quote(panel.y_label)}"]
        lines = [f"{gnuplot_quote(data)} index {first + i} using 1:2 with linespoints linetype {kind} "
                 f"title {gnuplot_quote(label)}" for i, (label, kind) in enumerate(labels)]
        if not lines:  # nothing measured for this panel (--mode scaling with --delay-us 0 alone): leave it out
            continue
        if panel.y == "p99_ms":
            lines.append(f"{target_ms:g} with lines dashtype 2 linecolor 'black' title 'target'")
        commands.append("plot " + ", ".join(lines))
    return "\n".join(commands + ["unset multiplot"]) + "\n"


def plot_panels(summary_csv: str, results_dir: str, mode: str, title: str, target_ms: float) -> list[str]:
    """plot() for the modes in PANELS: writes plot.dat (the blocks of every panel in turn) and draws plot.svg
    and plot.png. Returns the problems met, one sentence each; without gnuplot, does nothing."""
    if shutil.which("gnuplot") is None:
        return []
    lines = read_rows(summary_csv)
    layout, panels = PANELS[mode]
    servers = list(dict.fromkeys(row[0] for row in lines[1:]))  # in the order of the run
    blocks, drawn, first = [], [], 0
    for panel in panels:
        series = panel_series(lines, panel)
        blocks += series
        drawn.append((panel, [("nginx (reference)" if server == "nginx" else server, servers.index(server) + 1)
                              for server, _ in series], first))
        first += len(series)
    data = results_dir + "/plot.dat"
    write_text(data, plot_data(blocks))
    if not blocks:
        return []
    problems = []
    width, height = (1200, 1000) if layout == "2,2" else (1200, 550)
    for extension, terminal in PLOT_TERMINALS.items():
        terminal = terminal.replace("1200,500", f"{width},{height}")
        script = panels_script(terminal, f"{results_dir}/plot.{extension}", data, layout, drawn, title, target_ms)
        result = subprocess.run(["gnuplot"], input=script, capture_output=True, text=True)
        if result.returncode != 0:
            first_line = result.stderr.strip().split("\n")[0]
            problems.append(f"gnuplot could not draw the {extension} plot: {first_line}")
    return problems


# ---- plot --mode connections: what one idle connection costs each server, user space and kernel ----------


def memory_bars(rows: Rows) -> list[tuple[str, str, str]]:
    """raw.csv of --mode connections -> for each server, in the order of the run, its bar: the row with the most
    connections whose kernel share was measured, as (label, user KiB, kernel KiB) per connection."""
    best: dict[str, dict[str, str]] = {}
    for row in records(rows):
        if number(row_value(row, "server_kernel_b")) is None or number(row_value(row, "rss_kib_per_conn")) is None:
            continue
        server = row["server"]
        if server not in best or (number(row["held"]) or 0) > (number(best[server]["held"]) or 0):
            best[server] = row
    return [(f"{server} ({int(number(row['held']) or 0):,})", row["rss_kib_per_conn"],
             "%.2f" % (number(row["server_kernel_b"]) / 1024)) for server, row in best.items()]


def plot_memory(raw_csv: str, results_dir: str, title: str) -> list[str]:
    """Writes plot.dat (label, user KiB, kernel KiB per connection) and draws plot.svg and plot.png: one stacked
    bar per server. Returns the problems met, one sentence each; without gnuplot, only plot.dat."""
    bars = memory_bars(read_rows(raw_csv))
    data = results_dir + "/plot.dat"
    write_text(data, "".join(f'"{label}" {user} {kernel}\n' for label, user, kernel in bars))
    if not bars or shutil.which("gnuplot") is None:
        return []
    problems = []
    for extension, terminal in PLOT_TERMINALS.items():
        script = "\n".join([
            f"set terminal {terminal.replace('1200,500', '1000,520')} noenhanced", "set colorsequence podo",
            f"set output {gnuplot_quote(f'{results_dir}/plot.{extension}')}",
            f"set title {gnuplot_quote(title)}", "set style data histograms", "set style histogram rowstacked",
            "set style fill solid 0.85 border -1", "set boxwidth 0.6", "set grid ytics", "set yrange [0:*]",
            "set key below", "set xtics rotate by -20",
            "set ylabel " + gnuplot_quote("KiB per idle connection, the server's side"),
            f"plot {gnuplot_quote(data)} using 2:xtic(1) title 'user space (RSS)', "
            "'' using 3 title 'kernel: the socket, its file, epoll or io_uring entries, thread stacks'",
        ]) + "\n"
        result = subprocess.run(["gnuplot"], input=script, capture_output=True, text=True)
        if result.returncode != 0:
            problems.append(f"gnuplot could not draw the {extension} plot: {result.stderr.strip().splitlines()[0]}")
    return problems


# ---- The command line ---------------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m driver.analyse", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    parse = commands.add_parser("parse", help="one run's output -> one line of key=value")
    parse.add_argument("tool", choices=("ab", "wrk"))
    parse.add_argument("run_out", help="the tool's output")
    parse.add_argument("--percentiles", help="ab's -e file (ignored for wrk); a missing file gives p99 n/a")

    summary = commands.add_parser("summarize", help="raw.csv -> summary.csv, on stdout")
    summary.add_argument("raw_csv")

    table = commands.add_parser("table", help="a CSV -> a Markdown table, on stdout")
    table.add_argument("kind", choices=(*TABLES, "custom"), help="custom: the columns given by --columns")
    table.add_argument("csv", help="summary.csv (connections: raw.csv)")
    table.add_argument("--tool", default="ab", choices=("ab", "wrk"))
    table.add_argument("--columns", help="with custom: `csv_column:heading:format ...` (see parse_column_spec)")

    drawing = commands.add_parser("plot", help="summary.csv -> DIR/plot.dat, plot.svg, plot.png")
    drawing.add_argument("summary_csv")
    drawing.add_argument("results_dir")
    drawing.add_argument("--title", default="")
    drawing.add_argument("--tool", default="ab", choices=("ab", "wrk"))
    drawing.add_argument("--mode", default="throughput", choices=("throughput", "connections", *PANELS))
    drawing.add_argument("--target", type=float, default=10, help="latency: the p99 target, in ms")

    knee = commands.add_parser("knee", help="summary.csv of the latency mode -> each server's knee, in Markdown")
    knee.add_argument("summary_csv")
    knee.add_argument("--target", type=float, default=10, help="the p99 target, in ms")

    args = parser.parse_args(argv)
    try:
        if args.command == "parse":
            output = read_text(args.run_out)
            if args.tool == "ab":
                try:
                    percentiles = read_text(args.percentiles) if args.percentiles else ""
                except FileNotFoundError:
                    percentiles = ""  # ab did not get that far
                figures = parse_ab(output, percentiles)
            else:
                figures = parse_wrk(output)
            print_lines([" ".join(f"{key}={cell_text(figures[key])}" for key in PARSED_FIELDS)])
        elif args.command == "summarize":
            print_text(csv_text(summarize(read_rows(args.raw_csv))))
        elif args.command == "table":
            if args.kind == "custom":
                if not args.columns:
                    parser.error("table custom needs --columns")
                columns = parse_column_spec(args.columns)
            else:
                columns = table_columns(args.kind, args.tool)
            print_lines(markdown_table(columns, read_rows(args.csv)))
        elif args.command == "knee":
            print_lines(knees(read_rows(args.summary_csv), args.target))
        elif args.mode == "connections":  # from raw.csv, given as SUMMARY_CSV
            print_lines(plot_memory(args.summary_csv, args.results_dir, args.title))
        elif args.mode in PANELS:
            print_lines(plot_panels(args.summary_csv, args.results_dir, args.mode, args.title, args.target))
        else:
            x_label = "connections" if args.tool == "wrk" else "concurrency"
            print_lines(plot(args.summary_csv, args.results_dir, args.title, x_label))
    except (OSError, ValueError) as error:
        print(f"analyse.py {args.command}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
