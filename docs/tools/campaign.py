#!/usr/bin/env python3
"""One command that measures again every run the course cites, at one commit, and points the course at the new runs.

    python3 docs/tools/campaign.py --list          every run cited in docs/ and README.md, grouped by the benchmark
                                                   command that made it: where each is cited, whether it measured
                                                   older code than today's, how long it took; the total
    python3 docs/tools/campaign.py --run           run each distinct command in turn, on today's code, then retarget
           [--only REGEX] [--resume] [--dry-run] [--no-retarget]
    python3 docs/tools/campaign.py --retarget      rewrite every citation of each old run to its new run, then run
                                                   docs/tools/sync.py to regenerate the blocks, charts and values

What counts as a citation: a results, figure, chart or value marker that names benchmark/results/RUN/, a plain link
or path in the prose (benchmark/results/RUN/summary.md, ../benchmark/results/RUN/), and the bare name of an existing
results folder (2026-11-21_112306). The lines sync.py generates inside a block are not counted: they follow their
marker, and sync.py rewrites them.

Commands. Each run's summary.md records the command that made it (`- Command:`). Two runs whose commands differ only
in what does not change the measurement (--no-build, --results-dir, --log, an option's long or short name, options
in another order, an option given its default value, 5 for 05) are made by one command, run once. The command run
is the one sync.py's stale lines print (docs/tools/sync.py: refresh_command): the recorded one, building first.

A campaign measures one commit. --run refuses to start when tracked files in the servers' folders (0*/), common/ or
benchmark/ (its results aside) differ from HEAD, and stops when that code changes during the campaign. Commands run
in a fixed order (throughput, files, idle, latency, scaling, connections; then by command), from the repository
root, each while nothing else should use the CPUs. The first command that fails (exit status other than 0) stops the
campaign with exit status 1. What was done is recorded as it goes in benchmark/results/campaign.json, beside the
runs it made: the commit, a hash of the code measured, and for each command its old runs and its new one. --resume
skips the commands that record says are done at this code, so an interrupted campaign goes on where it stopped.

Retargeting reads that record. A marker whose selection the new run cannot satisfy (a row, column or value it no
longer has) is reported with its file and line, and the command exits 1; sync.py leaves such a block as it was, so
that `sync.py --check` fails on it too. Plain citations in the prose are rewritten and listed: the sentence around
them may quote the old run's numbers, and a person must read it again.

Standard library only; Python 3.8+.
"""

import argparse
import calendar
import hashlib
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import fingerprint  # noqa: E402  (docs/tools/fingerprint.py)
import sync  # noqa: E402  (docs/tools/sync.py: the markers, the summaries, the freshness of a run)

RESULTS = "benchmark/results"
RECORD = RESULTS + "/campaign.json"
RUN_NAME_RE = re.compile(r"(?<![\w-])(\d{4}-\d\d-\d\d_\d{6}_*)(?![\w-])")
TITLE_TIMES_RE = re.compile(r"(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d) to (?:(\d{4}-\d\d-\d\d) )?(\d\d:\d\d:\d\d)")
MODE_ORDER = ("throughput", "files", "idle", "latency", "scaling", "connections")
# Options that say where a run wrote and whether it built first, not what it measured.
NOT_MEASURED = ("no_build", "results_root", "log_file")
LIST_OPTIONS = ("concurrency_list", "conn_list", "idle_list", "rate_list", "core_list")
# Outside benchmark/results/, cited results that benchmark.sh does not make: named, so that nobody thinks them fresh.
OTHER_RESULTS_RE = re.compile(r"tests/soak/results/[\w.-]+")


class CampaignError(Exception):
    """What stops the campaign, in one sentence."""


def read_text(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def duration_text(seconds):
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds} s"


# ------------------------------------------------------------------------------------------------------ citations

def generated_lines(lines):
    """The indexes of the lines sync.py generates (between a block's opening marker and its closing one), found as
    sync.refresh finds them: a block runs to its closing marker unless another opening marker comes first, and
    markers inside fenced code are text."""
    inside, in_fence = set(), None
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        if in_fence is None and sync.OPEN_RE.match(stripped):
            for j in range(i + 1, len(lines)):
                s = lines[j].strip()
                if sync.CLOSE_RE.match(s):
                    if sync.CLOSE_RE.match(s).group(1) == sync.OPEN_RE.match(stripped).group(1):
                        inside.update(range(i + 1, j))
                        i = j
                    break
                if sync.OPEN_RE.match(s):
                    break
        else:
            in_fence = sync.fence_state(lines[i], in_fence)
        i += 1
    return inside


def run_names_in(root, line):
    """[(start, end, run name)] of the runs a line cites: after benchmark/results/, or bare when such a folder
    exists (a date alone is not a run)."""
    found = []
    for m in RUN_NAME_RE.finditer(line):
        if line[:m.start()].endswith(RESULTS + "/") or os.path.isdir(os.path.join(root, RESULTS, m.group(1))):
            found.append((m.start(), m.end(), m.group(1)))
    return found


class Citation:
    def __init__(self, doc, line, run, kind):
        self.doc, self.line, self.run, self.kind = doc, line, run, kind  # kind: "marker" or "text"


def is_marker_line(line):
    return bool(sync.OPEN_RE.match(line.strip()) or sync.VALUE_RE.search(line))


def citations(root):
    """Every citation of a run in the files sync.py covers (README.md, docs/**/*.md), outside generated lines."""
    found = []
    for doc in sync.doc_files(root):
        lines = read_text(os.path.join(root, doc)).split("\n")
        skip = generated_lines(lines)
        for i, line in enumerate(lines):
            if i in skip:
                continue
            kind = "marker" if is_marker_line(line) else "text"
            for name in dict.fromkeys(run for _, _, run in run_names_in(root, line)):
                found.append(Citation(doc, i + 1, name, kind))
    return found


def other_results(root):
    """{path: [(doc, line)]}: cited results that no benchmark.sh command makes (the soak's)."""
    found = {}
    for doc in sync.doc_files(root):
        for i, line in enumerate(read_text(os.path.join(root, doc)).split("\n")):
            for path in OTHER_RESULTS_RE.findall(line):
                found.setdefault(path, []).append((doc, i + 1))
    return found


def where_text(cites):
    """`docs/a.md:3,40; README.md:7 (3)`: the places, by file, and how many."""
    by_doc = {}
    for c in cites:
        by_doc.setdefault(c.doc, []).append(str(c.line))
    return "; ".join(f"{doc}:{','.join(lines)}" for doc, lines in by_doc.items()) + f" ({len(cites)})"


# --------------------------------------------------------------------------------------------------------- runs

def benchmark_options():
    """benchmark/driver/options.py, the benchmark's own table of options (which take a value, their long and short
    names, their defaults), loaded from this script's repository: the campaign reads commands as the driver does."""
    path = os.path.join(HERE, "..", "..", "benchmark", "driver", "options.py")
    spec = importlib.util.spec_from_file_location("benchmark_driver_options", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses looks its module up while it builds Options)
    spec.loader.exec_module(module)
    return module


OPTIONS = None


def command_key(words):
    """What a benchmark command measures, the same for two commands that differ only in spelling: ((option, value)
    sorted, servers in their order), with options named by the driver's field, lists spaced one way, options at
    their default and the ones in NOT_MEASURED left out, and a bare chapter number or folder name as `05`."""
    global OPTIONS
    if OPTIONS is None:
        OPTIONS = benchmark_options()
    defaults = OPTIONS.Options()
    settings, servers, i = {}, [], 0
    while i < len(words):
        word = words[i]
        if word in OPTIONS.VALUED and i + 1 < len(words):
            name, value = OPTIONS.VALUED[word], words[i + 1]
            i += 2
        elif word in OPTIONS.SWITCHES:
            name, value = OPTIONS.SWITCHES[word]
            i += 1
        else:
            spec, _, flags = word.partition(":")
            if re.fullmatch(r"[1-9]", spec):
                spec = "0" + spec
            if spec in OPTIONS.ALL_SERVERS:
                spec = spec[:2]
            servers.append(spec + (":" + flags if flags else ""))
            i += 1
            continue
        if name in LIST_OPTIONS:
            value = " ".join(value.replace(",", " ").split())
        settings[name] = value
    for name in list(settings):
        default = getattr(defaults, name, None)  # (the driver's numbers are ints: compared as the text given)
        if name in NOT_MEASURED or settings[name] == default or (
                not isinstance(default, bool) and default is not None and settings[name] == str(default)):
            del settings[name]
    return tuple(sorted(settings.items())), tuple(servers)


class Run:
    """A cited results folder: its summary (or why there is none), command, mode, duration and freshness."""

    def __init__(self, root, name):
        self.name, self.path = name, f"{RESULTS}/{name}"
        self.cites, self.summary, self.problem = [], None, ""
        self.command, self.key, self.mode, self.seconds = "", None, "", None
        self.stale, self.unknown = [], None
        try:
            self.summary = sync.Summary(root, self.path + "/summary.md")
        except sync.BlockError as e:
            self.problem = str(e)
            return
        self.command = sync.refresh_command(self.summary)
        if not self.command:
            self.problem = f"{self.path}/summary.md records no `- Command:`"
            return
        try:
            words = shlex.split(self.command)
        except ValueError as e:
            self.problem = f"cannot read its command ({e})"
            return
        if not words or words[0] not in ("./benchmark/benchmark.sh", "benchmark/benchmark.sh"):
            self.problem = f"its command is not benchmark/benchmark.sh: {self.command}"
            return
        self.key = command_key(words[1:])
        self.mode = dict(self.key[0]).get("mode", "throughput")
        self.seconds = run_seconds(self.summary.title)
        names = [row[0] for table in self.summary.tables for row in table.rows]
        try:
            self.stale, self.unknown = sync.stale_servers(root, self.summary, names)
        except (fingerprint.GitError, sync.BlockError) as e:
            self.stale, self.unknown = ["?"], str(e)

    def freshness(self):
        if not self.stale:
            return "fresh"
        if self.unknown:
            return f"stale (unknown code: {self.unknown})"
        return "stale: " + ", ".join(self.stale)


def run_seconds(title):
    """The run's own duration, from its summary.md title (`Benchmark: MODE, 2026-11-21 07:03:00 to 07:11:15 UTC`;
    the start is taken before the build, so a run that built counts its build); None when the title has no times."""
    m = TITLE_TIMES_RE.search(title)
    if not m:
        return None
    start = calendar.timegm(time.strptime(f"{m.group(1)} {m.group(2)}", "%Y-%m-%d %H:%M:%S"))  # UTC: no DST
    end = calendar.timegm(time.strptime(f"{m.group(3) or m.group(1)} {m.group(4)}", "%Y-%m-%d %H:%M:%S"))
    if end < start:
        end += 24 * 3600  # past midnight
    return end - start


class Command:
    """One distinct benchmark command and the cited runs it made (oldest first)."""

    def __init__(self, key, runs):
        self.key, self.runs = key, sorted(runs, key=lambda r: r.name)
        latest = self.runs[-1]
        self.text, self.mode = latest.command, latest.mode
        self.seconds = latest.seconds  # the latest run: the code most like today's

    def order(self):
        rank = MODE_ORDER.index(self.mode) if self.mode in MODE_ORDER else len(MODE_ORDER)
        return rank, self.text


def survey(root):
    """(every cited Run by name, the distinct Commands in campaign order, the runs no command can make again)."""
    sync.FRESHNESS.clear()
    runs = {}
    for c in citations(root):
        if c.run not in runs:
            runs[c.run] = Run(root, c.run)
        runs[c.run].cites.append(c)
    groups = {}
    for run in runs.values():
        if run.key is not None:
            groups.setdefault(run.key, []).append(run)
    commands = sorted((Command(key, group) for key, group in groups.items()), key=Command.order)
    orphans = [run for run in runs.values() if run.key is None]
    return runs, commands, orphans


def list_campaign(root):
    runs, commands, orphans = survey(root)
    known = [c.seconds for c in commands if c.seconds is not None]
    unknown = [c for c in commands if c.seconds is None]
    total = sum(known)
    stale = sum(1 for r in runs.values() if r.stale)
    print(f"{len(runs)} run(s) cited in docs/ and README.md, {stale} of them stale, made by {len(commands)} distinct "
          f"command(s).")
    for n, command in enumerate(commands, 1):
        estimate = duration_text(command.seconds) if command.seconds is not None else "unknown (no times in its title)"
        print(f"\n[{n}] {command.text}")
        print(f"    {command.mode}; estimate {estimate}, from its latest cited run's own duration")
        for run in command.runs:
            took = duration_text(run.seconds) if run.seconds is not None else "?"
            print(f"    {run.path}  took {took}; {run.freshness()}")
            print(f"      cited: {where_text(run.cites)}")
    for run in orphans:
        print(f"\nnot measurable again: {run.path}: {run.problem}")
        print(f"  cited: {where_text(run.cites)}")
    for path, places in sorted(other_results(root).items()):
        where = "; ".join(f"{doc}:{line}" for doc, line in places)
        print(f"\nalso cited, not made by benchmark.sh, so not part of the campaign: {path} ({where})")
    machines = {}
    for run in runs.values():
        if run.summary is not None:
            machines.setdefault(run.summary.field("Machine").split(";")[0].strip() or "(no machine named)",
                                []).append(run)
    print("\nMachines: " + "; ".join(f"{name} ({len(found)} run(s))" for name, found in sorted(machines.items())))
    if len(machines) > 1:  # runs of two machines on one page compare the machines too (nginx: 14.8k and 33.1k req/s)
        for doc in dict.fromkeys(c.doc for run in runs.values() for c in run.cites):
            named = {name for name, found in machines.items() for run in found if any(c.doc == doc for c in run.cites)}
            if len(named) > 1:
                print(f"  {doc} cites runs of {len(named)} machines: {'; '.join(sorted(named))}")
    print(f"\nEstimated time for the whole campaign: {duration_text(total)}, the sum of each command's latest cited "
          f"run's own duration (start to end in its summary.md)" +
          (f"; {len(unknown)} command(s) of unknown duration not counted" if unknown else "") + ".")
    return 0


# ---------------------------------------------------------------------------------------------------------- git

def git(root, *args):
    try:
        done = subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        raise CampaignError(f"git {' '.join(args)} failed ({e})")
    if done.returncode != 0:
        raise CampaignError(f"git {' '.join(args)} failed: {done.stderr.strip() or done.returncode}")
    return done.stdout


def is_measured_path(path):
    """Whether a tracked path is code a campaign measures: a server's folder (0*/), common/, benchmark/ (whose
    results are what the campaign writes, not what it measures)."""
    top = path.split("/", 1)[0]
    if path.startswith(RESULTS + "/"):
        return False
    return "/" in path and (top.startswith("0") or top in ("common", "benchmark"))


def dirty_paths(root):
    """The tracked files of measured code that differ from HEAD (staged or not)."""
    out = git(root, "status", "--porcelain=v1", "-z", "--untracked-files=no")
    paths, entries, i = [], out.split("\0"), 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if len(entry) < 4:
            continue
        if entry[0] in "RC":
            i += 1  # a rename's second entry is its old name
        if is_measured_path(entry[3:]):
            paths.append(entry[3:])
    return paths


def code_id(root):
    """A hash of HEAD's measured code (git's object ids of its files): the same after a commit elsewhere."""
    listing = [line for line in git(root, "ls-tree", "-r", "HEAD").split("\n")
               if line and is_measured_path(line.split("\t", 1)[1])]
    return hashlib.sha256("\n".join(listing).encode()).hexdigest()[:16]


def code_state(root, allow_dirty=False):
    """(HEAD's commit, its code id, why the working tree is not that code or ""); CampaignError instead of the
    last one unless allow_dirty."""
    dirty, refusal = dirty_paths(root), ""
    if dirty:
        shown = ", ".join(dirty[:5]) + (f" and {len(dirty) - 5} more" if len(dirty) > 5 else "")
        refusal = (f"the code differs from HEAD ({shown}): a campaign measures one commit; commit or set aside "
                   f"those changes first")
        if not allow_dirty:
            raise CampaignError(refusal)
    return git(root, "rev-parse", "HEAD").strip(), code_id(root), refusal


# -------------------------------------------------------------------------------------------------------- record

def load_record(root):
    path = os.path.join(root, RECORD)
    if not os.path.isfile(path):
        return None
    try:
        record = json.loads(read_text(path))
    except ValueError as e:
        raise CampaignError(f"{RECORD} is not JSON ({e})")
    if not isinstance(record, dict) or not isinstance(record.get("commands"), list):
        raise CampaignError(f"{RECORD} should be an object with a `commands` list")
    return record


def save_record(root, record):
    path = os.path.join(root, RECORD)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(json.dumps(record, indent=2) + "\n")
    os.replace(path + ".tmp", path)  # an interrupted campaign never leaves half a record


def now():
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())


# ----------------------------------------------------------------------------------------------------------- run

def run_one(root, text):
    """Runs one benchmark command from the repository root, its output passed through; returns (exit status, the
    results folder it wrote as a repository path, or "" when it named none inside the repository)."""
    words = shlex.split(text)
    words[0] = os.path.join(root, words[0])
    folder = ""
    with subprocess.Popen(words, cwd=root, stdout=subprocess.PIPE, text=True, bufsize=1) as process:
        try:
            for line in process.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                m = re.match(r"results: (.+?) \(summary\.md", line)  # the driver's `results: DIR (summary.md, ...)`
                if m:
                    folder = m.group(1)
            status = process.wait()
        except KeyboardInterrupt:
            process.wait()  # the driver got the Ctrl-C too, and stops what it started before it leaves
            raise
    if folder:
        full = os.path.abspath(os.path.join(root, folder))
        folder = os.path.relpath(full, root).replace(os.sep, "/")
        if folder.startswith("../") or not os.path.isdir(full):
            folder = ""
    return status, folder


def run_campaign(root, only, resume, dry_run, retarget_after):
    _, commands, orphans = survey(root)
    if only:
        try:
            pattern = re.compile(only)
        except re.error as e:
            raise CampaignError(f"--only {only}: not a regular expression ({e})")
        commands = [c for c in commands if pattern.search(" ".join([c.text] + [r.name for r in c.runs]))]
        if not commands:
            raise CampaignError(f"--only {only} matches no command (see --list)")
    for run in orphans:
        print(f"campaign: {run.path} is cited but cannot be measured again ({run.problem}); left as it is")
    commit, code, refusal = code_state(root, allow_dirty=dry_run)
    record = load_record(root)
    if record is not None and record.get("code") != code:
        if resume and not dry_run:
            print(f"campaign: {RECORD} is of other code ({record.get('commit', '?')[:12]}): nothing to resume, "
                  f"starting afresh")
        record = None
    if record is None:
        record = {"commit": commit, "code": code, "started": now(), "commands": []}
    entries = {e.get("command"): e for e in record["commands"] if isinstance(e, dict)}

    plan = []
    for command in commands:
        entry = entries.get(command.text)
        done = (entry is not None and entry.get("status") == "done" and entry.get("new")
                and os.path.isdir(os.path.join(root, entry["new"])))
        plan.append((command, entry if resume and done else None))
    todo = [c for c, skipped in plan if skipped is None]
    estimate = sum(c.seconds or 0 for c in todo)
    print(f"campaign: {len(todo)} command(s) to run, estimated {duration_text(estimate)}"
          + (f", {len(plan) - len(todo)} already done at this code" if len(todo) < len(plan) else ""))
    for n, (command, skipped) in enumerate(plan, 1):
        what = f"done: {skipped['new']}" if skipped else ("would run" if dry_run else "to run")
        print(f"  [{n}] {command.text}  ({what}; replaces {', '.join(r.name for r in command.runs)})")
    if dry_run:
        if refusal:
            print(f"campaign: a real run would refuse to start now: {refusal}")
        return 0

    for n, (command, skipped) in enumerate(plan, 1):
        if skipped:
            continue
        now_commit, now_code, _ = code_state(root)  # the code may not change between two commands either
        if now_code != code:
            raise CampaignError(f"the code changed during the campaign (HEAD is now {now_commit[:12]}, the campaign "
                                f"measures {commit[:12]}): finish it on one commit, or start again")
        entry = {"command": command.text, "old": [r.path for r in command.runs], "new": "", "status": "running",
                 "commit": now_commit, "started": now()}
        entries[command.text] = entry
        record["commands"] = [e for e in record["commands"] if e.get("command") != command.text] + [entry]
        save_record(root, record)
        print(f"\ncampaign [{n}/{len(plan)}]: {command.text}", flush=True)
        began = time.monotonic()
        status, folder = run_one(root, command.text)
        entry.update(new=folder, seconds=round(time.monotonic() - began), finished=now())
        if status != 0 or not folder:
            entry["status"] = "failed"
            save_record(root, record)
            why = f"exit status {status}" if status != 0 else "it named no results folder in this repository"
            print(f"campaign: stopped: command {n} failed ({why}): {command.text}", file=sys.stderr)
            print(f"campaign: fix the cause, then `python3 docs/tools/campaign.py --run --resume` goes on from "
                  f"there", file=sys.stderr)
            return 1
        entry["status"] = "done"
        save_record(root, record)
    made = " ".join(e["new"] for e in record["commands"] if e.get("status") == "done" and e.get("new"))
    print(f"\ncampaign: every command done; the record is {RECORD}. Results folders are ignored by git until "
          f"added by force: git add -f {made} {RECORD}")
    return retarget(root) if retarget_after else 0


# ------------------------------------------------------------------------------------------------------ retarget

SYNC_PROBLEM_RE = re.compile(r"^\s+([^\s:]+):(\d+): (.*)$")


def retarget(root):
    """Rewrites each citation of an old run the record names to its new run, then regenerates with sync.py.
    Returns 1 when a marker's selection does not hold in its new run, or sync.py reports another problem."""
    record = load_record(root)
    if record is None:
        raise CampaignError(f"no {RECORD}: run the campaign first (--run)")
    mapping = {}
    for entry in record["commands"]:
        if entry.get("status") == "done" and entry.get("new"):
            for old in entry.get("old", []):
                mapping[posixpath_name(old)] = posixpath_name(entry["new"])
    mapping = {old: new for old, new in mapping.items() if old != new}
    undone = [e.get("command", "?") for e in record["commands"] if e.get("status") != "done"]
    if undone:
        print(f"campaign: {len(undone)} command(s) of {RECORD} are not done, so their runs stay cited as they are: "
              + "; ".join(undone))
    if not mapping:
        print(f"campaign: {RECORD} maps no old run to a new one: nothing to retarget")
        return 0
    rewritten = []  # (doc, the line as rewritten, "marker" or "text")
    for doc in sync.doc_files(root):
        full = os.path.join(root, doc)
        lines = read_text(full).split("\n")
        skip = generated_lines(lines)
        changed = False
        for i, line in enumerate(lines):
            if i in skip:
                continue  # sync.py regenerates it from its marker
            spans = [s for s in run_names_in(root, line) if s[2] in mapping]
            if not spans:
                continue
            for start, end, name in reversed(spans):
                line = line[:start] + mapping[name] + line[end:]
            rewritten.append((doc, line, "marker" if is_marker_line(lines[i]) else "text"))
            lines[i] = line
            changed = True
        if changed:
            with open(full, "w", encoding="utf-8") as f:
                f.write("\n".join(lines))
    print(f"campaign: {len(rewritten)} line(s) retargeted to the new runs; regenerating with sync.py")
    sync_py = [sys.executable, os.path.join(HERE, "sync.py"), "--root", root]
    done = subprocess.run(sync_py, capture_output=True, text=True)
    refreshed = sum(1 for line in done.stdout.split("\n") if re.match(r"^\S+:\d+: refreshed ", line))
    print(f"campaign: sync.py regenerated {refreshed} block(s) and value(s)")
    for line in done.stderr.split("\n"):
        if line.startswith("note: "):
            print(f"campaign: sync.py {line}")  # a new results folder that git does not track yet
    # The problems, read again from the files as sync.py left them, so that every line number is today's.
    check = subprocess.run(sync_py + ["--check"], capture_output=True, text=True)
    new_runs = set(mapping.values())
    unmatched, other, listing = [], [], False
    for line in check.stderr.split("\n"):
        m = SYNC_PROBLEM_RE.match(line)
        if re.match(r"^\d+ problem\(s\)", line):
            listing = True
        elif listing and m and cites_one_of(root, m.group(1), int(m.group(2)), new_runs, markers=True):
            unmatched.append(f"{m.group(1)}:{m.group(2)}: {m.group(3)}")
        elif listing and line.startswith("  "):
            other.append(line.strip())
    if check.returncode != 0 and not unmatched and not other:
        other.append((check.stderr or check.stdout).strip() or f"sync.py --check exited with status "
                                                                f"{check.returncode}")
    plain = []  # the rewritten prose lines, found again by their text (sync.py moves lines, never prose)
    for doc in dict.fromkeys(doc for doc, _, kind in rewritten if kind == "text"):
        texts = {line for d, line, kind in rewritten if d == doc and kind == "text"}
        plain += [f"{doc}:{i + 1}" for i, line in enumerate(read_text(os.path.join(root, doc)).split("\n"))
                  if line in texts]
    if plain:
        print("campaign: plain citations rewritten; the sentence around each may quote the old run's numbers, so "
              "read it again:")
        for place in plain:
            print(f"  {place}")
    left = leftovers(root, mapping)
    if left:
        print("campaign: still naming an old run (a block sync.py could not regenerate keeps its old lines):")
        for place in left:
            print(f"  {place}")
    if unmatched:
        print(f"campaign: {len(unmatched)} citation(s) select what their new run does not have; each block keeps "
              f"its old lines until its marker is fixed:", file=sys.stderr)
        for problem in unmatched:
            print(f"  {problem}", file=sys.stderr)
    if other:
        print("campaign: sync.py --check also reports:", file=sys.stderr)
        for line in other:
            print(f"  {line}", file=sys.stderr)
    record["retargeted"] = now()
    save_record(root, record)
    if unmatched or other or done.returncode != 0:
        return 1
    print("campaign: every citation now names its new run, and sync.py regenerated the blocks")
    return 0


def cites_one_of(root, doc, number, runs, markers):
    """Whether line `number` of `doc` names one of `runs` (in a marker, with markers=True)."""
    full = os.path.join(root, doc)
    if not os.path.isfile(full):
        return False
    lines = read_text(full).split("\n")
    if not 0 < number <= len(lines) or (markers and not is_marker_line(lines[number - 1])):
        return False
    return any(name in runs for _, _, name in run_names_in(root, lines[number - 1]))


def posixpath_name(path):
    """A run's folder name, from `benchmark/results/NAME` or `NAME`."""
    return path.rstrip("/").split("/")[-1]


def leftovers(root, mapping):
    """`doc:line` of every mention of an old run left in the files sync.py covers, generated lines included."""
    found = []
    for doc in sync.doc_files(root):
        for i, line in enumerate(read_text(os.path.join(root, doc)).split("\n")):
            if any(name in mapping for _, _, name in run_names_in(root, line)):
                found.append(f"{doc}:{i + 1}")
    return found


# ----------------------------------------------------------------------------------------------------------- main

def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Measure again every run the course cites, at one commit, and point the course at the new runs.",
        epilog="See the top of this file, and docs/reading-benchmarks.md (Refreshing every number: the campaign).")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--list", action="store_true", help="the cited runs by command, their freshness and durations")
    what.add_argument("--run", action="store_true", help="run each distinct command, then --retarget")
    what.add_argument("--retarget", action="store_true", help="point every citation of an old run at its new run")
    parser.add_argument("--only", metavar="REGEX", help="--run: only the commands whose text or runs match")
    parser.add_argument("--resume", action="store_true", help="--run: skip the commands done at this code")
    parser.add_argument("--dry-run", action="store_true", help="--run: say what would run, run nothing")
    parser.add_argument("--no-retarget", action="store_true", help="--run: leave the docs as they are")
    parser.add_argument("--root", default=os.path.normpath(os.path.join(HERE, "..", "..")),
                        help="the repository root (default: two folders above this script)")
    options = parser.parse_args(argv)
    if not options.run and (options.only or options.resume or options.dry_run or options.no_retarget):
        parser.error("--only, --resume, --dry-run and --no-retarget go with --run")
    root = os.path.abspath(options.root)
    try:
        if options.list:
            return list_campaign(root)
        if options.run:
            return run_campaign(root, options.only, options.resume, options.dry_run, not options.no_retarget)
        return retarget(root)
    except (CampaignError, fingerprint.GitError) as e:
        print(f"campaign: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"campaign: interrupted; {RECORD} says what is done, and `python3 docs/tools/campaign.py --run "
              f"--resume` goes on from there", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
