#!/usr/bin/env python3
"""A fingerprint of each server's code, so that a benchmark run can say which code it measured.

    python3 docs/tools/fingerprint.py --json               today's working tree
    python3 docs/tools/fingerprint.py --commit c04d2d0 --json   the code of a commit (needs git)

prints {"01-blocking-single": "5d41402abc4b2a76", ...}: one entry per server folder NN-name. A server's fingerprint
is a hash over its folder's C++ sources (*.cpp and *.hpp directly in NN-name/, so 06's advanced.cpp counts for 06
and its variants, 01's bare.cpp for 01) and common/*.hpp, each reduced to its tokens: comments and whitespace are
dropped, string and character literals kept as written. A comment fix or a re-indent leaves the fingerprint as it
was; any change to a code line changes it. The benchmark writes these into a run's fingerprints.json, and
docs/tools/sync.py compares them with today's to mark the results measured on older code.

Standard library only (and git for --commit); Python 3.8+.
"""

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys

SERVER_FOLDER_RE = re.compile(r"^(0[1-9])-[A-Za-z0-9_.-]+$")
SOURCE_SUFFIXES = (".cpp", ".hpp")


class GitError(Exception):
    """git is missing, or cannot answer about a commit: the message says so in one sentence."""


def number_before(text, i):
    """Whether text[i] (a quote) follows the digits of a number, so that it is a digit separator: 1'000."""
    j = i
    while j > 0 and (text[j - 1].isalnum() or text[j - 1] in "_.'"):
        j -= 1
    return j < i and text[j].isdigit()


def code_tokens(text):
    """The text without its comments and whitespace, its string and character literals kept as they are (so that
    "http://x" is not cut at `//`). Knows raw strings R"d(...)d", escapes, and digit separators (1'000)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":  # a line comment; a backslash before the newline would continue it,
                i += 1                        # which no source here does
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif c == '"' and re.search(r"(?:^|[^A-Za-z0-9_])(?:u8|u|U|L)?R$", text[max(0, i - 4):i]):
            m = re.match(r'"([^()\\\s]{0,16})\(', text[i:])  # raw string: R"delim( ... )delim"
            if not m:
                out.append(c)
                i += 1
                continue
            close = ")" + m.group(1) + '"'
            end = text.find(close, i + m.end())
            end = n if end < 0 else end + len(close)
            out.append(text[i:end])
            i = end
        elif c in "\"'":
            if c == "'" and number_before(text, i):
                out.append(c)  # a digit separator: 1'000'000
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in "\"'/":
                j += 1
            if j == i:  # a lone '/', a division
                j = i + 1
            out.append(text[i:j])
            i = j
    return "".join(out)


def server_folders(names):
    """The server folders (01-blocking-single ...) among the top-level names of the repository."""
    return sorted(name for name in names if SERVER_FOLDER_RE.match(name))


def digest(files):
    """files: {repository path: text} of one server (its folder and common/). The hash of their tokens."""
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(path.encode("utf-8") + b"\0" + code_tokens(files[path]).encode("utf-8") + b"\0")
    return h.hexdigest()[:16]


def fingerprints_of(sources):
    """sources: {repository path: text} of every *.cpp/*.hpp in the server folders and common/."""
    common = {p: t for p, t in sources.items() if p.startswith("common/")}
    folders = server_folders({p.split("/", 1)[0] for p in sources if "/" in p})
    result = {}
    for folder in folders:
        own = {p: t for p, t in sources.items() if p.startswith(folder + "/")}
        result[folder] = digest({**own, **common})
    return result


def is_source(path):
    parts = path.split("/")
    return len(parts) == 2 and parts[1].endswith(SOURCE_SUFFIXES) and \
        (parts[0] == "common" or SERVER_FOLDER_RE.match(parts[0]) is not None)


def working_tree_sources(root):
    sources = {}
    for folder in sorted(os.listdir(root)):
        if folder != "common" and not SERVER_FOLDER_RE.match(folder):
            continue
        full = os.path.join(root, folder)
        if not os.path.isdir(full):
            continue
        for name in sorted(os.listdir(full)):
            path = folder + "/" + name
            if is_source(path) and os.path.isfile(os.path.join(full, name)):
                with open(os.path.join(full, name), encoding="utf-8", errors="replace") as f:
                    sources[path] = f.read()
    return sources


def git(root, args, stdin=None):
    try:
        done = subprocess.run(["git", "-C", root] + args, input=stdin, capture_output=True, timeout=60)
    except FileNotFoundError:
        raise GitError("git is not installed, and it is needed to fingerprint the code a benchmark run measured "
                       "(apt-get install git)")
    except subprocess.SubprocessError as e:
        raise GitError(f"git {' '.join(args)} failed: {e}")
    return done


def commit_sources(root, commit):
    """{path: text} of the sources at `commit`, read with one `git ls-tree` and one `git cat-file --batch`."""
    listing = git(root, ["ls-tree", "-r", "--full-tree", commit])
    if listing.returncode != 0:
        why = listing.stderr.decode("utf-8", "replace").strip().split("\n")[0]
        if not os.path.exists(os.path.join(root, ".git")) and "not a git repository" in why:
            raise GitError(f"{root} is not a git clone, and git is needed to read the code of commit {commit}")
        raise GitError(f"commit {commit} is not in this repository ({why}); a shallow clone? "
                       f"`git fetch --unshallow` brings the history")
    blobs = {}
    for line in listing.stdout.decode("utf-8", "replace").split("\n"):
        meta, _, path = line.partition("\t")
        fields = meta.split()
        if len(fields) == 3 and fields[1] == "blob" and is_source(path):
            blobs[path] = fields[2]
    if not blobs:
        return {}
    paths = sorted(blobs)
    batch = git(root, ["cat-file", "--batch"], "".join(blobs[p] + "\n" for p in paths).encode())
    if batch.returncode != 0:
        raise GitError(f"git cat-file could not read the sources of commit {commit}")
    data, sources, at = batch.stdout, {}, 0
    for path in paths:
        header_end = data.index(b"\n", at)
        size = int(data[at:header_end].split()[2])
        sources[path] = data[header_end + 1:header_end + 1 + size].decode("utf-8", "replace")
        at = header_end + 1 + size + 1
    return sources


def fingerprints(root, commit=None):
    """{server folder: fingerprint} of the working tree under `root`, or of `commit`."""
    return fingerprints_of(commit_sources(root, commit) if commit else working_tree_sources(root))


def main(argv=None):
    parser = argparse.ArgumentParser(description="Print a fingerprint of each server's code (comments and "
                                                 "whitespace ignored).")
    parser.add_argument("--commit", help="fingerprint this commit's code instead of the working tree (needs git)")
    parser.add_argument("--json", action="store_true", help="print one JSON object (the default prints lines)")
    parser.add_argument("--root", default=os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                        "..", "..")),
                        help="the repository root (default: two folders above this script)")
    options = parser.parse_args(argv)
    try:
        result = fingerprints(os.path.abspath(options.root), options.commit)
    except GitError as e:
        print(f"fingerprint.py: {e}", file=sys.stderr)
        return 1
    if options.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        for folder, value in sorted(result.items()):
            print(f"{value}  {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
