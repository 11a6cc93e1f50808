#!/usr/bin/env python3
"""Checks the shell commands the course asks a learner to type, in docs/*.md and README.md.

    python3 docs/tools/commands.py [--root DIR] [--build DIR]     (the CTest test docs_commands)

- Every ```sh and ```bash block parses (`bash -n`).
- Every script of the repository that a block runs (tools/serve.sh, tests/grade.sh, docs/tools/timeline.py, ...)
  exists.
- Every server command line in a block (`./build/NN-name/run_server FLAGS`) starts with exactly those flags: the
  server prints its `listening on` line (on port 0: one a test picks, not the one a chapter may name) and exits 0
  on SIGTERM. A shell variable set by a `for VAR in A B` of the same block is tried with each value; a folder the
  course makes in a lab (`--root /tmp/www`, from the static-files page) is replaced by an empty one when missing.
  `./build/` is read as --build (default: build/ in the repository).

This is what can be run without a person at the keyboard: the blocks themselves, with their curl, ab, strace and
second terminals, are run by hand. Standard library only; Python 3.8+.
"""

import argparse
import glob
import os
import re
import select
import shlex
import signal
import subprocess
import sys
import tempfile
import time

BLOCK_RE = re.compile(r"^ {0,3}```(sh|bash)[ \t]*\n(.*?)^ {0,3}```", re.S | re.M)
SERVER_RE = re.compile(r"\./build/([\w.-]+)/run_server((?:[ \t]+[^;&|#<>\n]*)?)")
SCRIPT_RE = re.compile(r"(?<![\w/.])(?:\./)?((?:tools|tests|benchmark|docs)/[\w./-]+\.(?:sh|py))\b")
FOR_RE = re.compile(r"\bfor\s+(\w+)\s+in\s+([^;\n]+);")
START_TIMEOUT_S = 10
STOP_TIMEOUT_S = 5


def blocks(root):
    """[(file, line, language, text)] of every sh or bash block of the course."""
    found = []
    for path in sorted(glob.glob(os.path.join(root, "docs", "*.md"))) + [os.path.join(root, "README.md")]:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for m in BLOCK_RE.finditer(text):
            found.append((os.path.relpath(path, root), text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2)))
    return found


def server_commands(text):
    """[(folder, [argument lists])] of the server command lines in a block, one list per value of its variables."""
    loops = {name: shlex.split(values) for name, values in FOR_RE.findall(text)}
    commands = []
    for m in SERVER_RE.finditer(text):
        words = m.group(2).strip()
        variants = [words]
        for name, values in loops.items():
            if "$" + name in words or "${" + name + "}" in words:
                variants = [v.replace("${" + name + "}", value).replace("$" + name, value)
                            for v in variants for value in values]
        commands.append((m.group(1), [shlex.split(v) for v in variants]))
    return commands


def with_port_zero(args):
    """The arguments with --port 0: the one given is replaced (a chapter may name 8080), or --port 0 appended."""
    out, i = [], 0
    while i < len(args):
        if args[i] == "--port" and i + 1 < len(args):
            i += 2
            continue
        out.append(args[i])
        i += 1
    return out + ["--port", "0"]


def try_server(binary, args, spare_root):
    """None if the server starts on those flags and stops cleanly on SIGTERM, else one sentence saying why not."""
    args = [spare_root if a == "/tmp/www" and not os.path.isdir(a) else a for a in args]
    process = subprocess.Popen([binary] + with_port_zero(args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, start_new_session=True)
    output, listening = b"", False
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while not listening and time.monotonic() < deadline:
            ready, _, _ = select.select([process.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            chunk = os.read(process.stdout.fileno(), 4096)
            if not chunk:
                break
            output += chunk
            listening = b"listening on http://" in output
        if not listening:
            status = process.poll()
            said = output.decode(errors="replace").strip().splitlines()
            why = f"exited with {status}" if status is not None else f"printed no listening line in {START_TIMEOUT_S} s"
            return f"{why}: {said[0] if said else 'no output'}"
        process.send_signal(signal.SIGTERM)
        try:
            status = process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return f"still running {STOP_TIMEOUT_S} s after SIGTERM"
        return None if status == 0 else f"exited with {status} after SIGTERM"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)  # its own session: the server and nothing else
            process.wait()
        process.stdout.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(here)), help="the repository")
    parser.add_argument("--build", help="the build folder the course calls ./build (default: ROOT/build)")
    options = parser.parse_args()
    root = options.root
    build = options.build or os.path.join(root, "build")
    problems, servers_tried = [], 0
    found = blocks(root)
    with tempfile.TemporaryDirectory(prefix="psp-commands-") as spare_root:
        for doc, line, language, text in found:
            where = f"{doc}:{line}"
            parsed = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
            if parsed.returncode != 0:
                problems.append(f"{where}: the {language} block does not parse: {parsed.stderr.strip()}")
            for script in sorted(set(SCRIPT_RE.findall(text))):
                if not os.path.exists(os.path.join(root, script)):
                    problems.append(f"{where}: runs {script}, which does not exist")
            for folder, variants in server_commands(text):
                binary = os.path.join(build, folder, "run_server")
                if not os.access(binary, os.X_OK):
                    problems.append(f"{where}: ./build/{folder}/run_server is not built in {build}")
                    continue
                for args in variants:
                    servers_tried += 1
                    why = try_server(binary, args, spare_root)
                    if why:
                        problems.append(f"{where}: ./build/{folder}/run_server {shlex.join(args)}: {why}")
    for problem in problems:
        print(problem)
    print(f"{len(found)} shell blocks, {servers_tried} server command lines: "
          + (f"{len(problems)} problems" if problems else "every block parses and every server starts as written"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
