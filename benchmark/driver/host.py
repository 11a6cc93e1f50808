"""Every change the benchmark makes to the machine: sysctls, the descriptor limit, memory cgroups. Each change is
made explicitly, printed, recorded, and put back by restore() (or on leaving the `with` block), on every exit path:
an error, a failed check, Ctrl-C or SIGTERM (main turns SIGTERM into an exception, so that finally blocks run).

    with Host(say) as host:
        host.raise_sysctl("fs.nr_open", 1000064, why="1000000 connections")
        ...
    # every sysctl back to its old value, the cgroups removed

The sysctl root is a parameter, so that the tests can run it against a fake /proc/sys folder.
"""

from __future__ import annotations

import os
import re
import resource
from typing import Callable


class HostError(Exception):
    """A change the run needs and cannot make (not root): the run stops, exit status 1, after restore()."""


class Host:
    def __init__(self, say: Callable[[str], None], sysctl_root: str = "/proc/sys", is_root: bool | None = None):
        self.say, self.sysctl_root = say, sysctl_root
        self.is_root = os.geteuid() == 0 if is_root is None else is_root
        self.changed: list[tuple[str, str]] = []   # (key, old value), in the order they were made
        self.cgroups: list[str] = []               # the folders made, removed on restore

    def sysctl_path(self, key: str) -> str:
        return os.path.join(self.sysctl_root, key.replace(".", "/"))

    def sysctl(self, key: str) -> str | None:
        try:
            with open(self.sysctl_path(key), encoding="ascii") as file:
                return file.read().strip()
        except OSError:
            return None

    def raise_sysctl(self, key: str, need: int, why: str) -> None:
        """Raises KEY to NEED when it is below (a key this kernel lacks is left alone)."""
        old = self.sysctl(key)
        if old is None or int(old) >= need:
            return
        if not self.is_root:
            raise HostError(f"{why} need {key} raised from {old} to {need}, which only root can do: run it as "
                            "root, or with smaller --conns")
        self.say(f"  sysctl {key}: {old} -> {need} (put back after the run)")
        with open(self.sysctl_path(key), "w", encoding="ascii") as file:
            file.write(f"{need}\n")
        self.changed.append((key, old))

    def restore(self) -> None:
        """Puts back every sysctl changed (the last first), and removes the cgroups made. Safe to call twice."""
        # Nothing may stop this loop half-way: not a setting that cannot be written, nor a console that is gone
        # (a closed pipe, `| head`), so saying what was done is the last step of each, and may fail.
        while self.changed:
            key, old = self.changed.pop()
            try:
                with open(self.sysctl_path(key), "w", encoding="ascii") as file:
                    file.write(f"{old}\n")
                message = f"  sysctl {key}: put back to {old}"
            except OSError as error:
                message = f"  sysctl {key}: could not be put back to {old}: {error}"
            try:
                self.say(message)
            except (OSError, ValueError):
                pass
        while self.cgroups:
            try:
                os.rmdir(self.cgroups.pop())
            except OSError:
                pass

    def __enter__(self) -> "Host":
        return self

    def __exit__(self, *exc) -> None:
        self.restore()

    # ---- The descriptor limit of this process (and so of the servers and clients it starts) ----

    @staticmethod
    def nofile() -> tuple[int, int]:
        return resource.getrlimit(resource.RLIMIT_NOFILE)

    def raise_nofile(self, need: int, hard_too: bool) -> tuple[int, int]:
        """Raises the soft limit to NEED (and the hard one first, when HARD_TOO and allowed); the old limits. A
        limit is this process's own: it ends with the run, nothing to put back on the machine."""
        old = soft, hard = self.nofile()
        if hard_too and hard != resource.RLIM_INFINITY and hard < need:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, need), need))
                hard = need
            except (OSError, ValueError):
                pass
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (need if hard == resource.RLIM_INFINITY else min(need, hard),
                                                        hard))
        except (OSError, ValueError):
            pass
        return old

    # ---- Memory cgroups (--mode connections): the kernel memory each side's system calls allocate ----

    @staticmethod
    def memory_cgroup(proc_self_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> str:
        """The folder of this process's memory cgroup (v1, or v2 with the memory controller on for its children),
        where it may make others; "" when there is none."""
        try:
            with open(proc_self_cgroup, encoding="ascii") as file:
                lines = file.read().split("\n")
        except OSError:
            return ""
        for line in lines:
            match = re.fullmatch(r"[0-9]*:memory:(.*)", line)
            if match and match.group(1) and os.access(f"{root}/memory{match.group(1)}", os.W_OK):
                return f"{root}/memory{match.group(1)}"
        for line in lines:
            if line.startswith("0::") and line[3:]:
                directory = root + line[3:]
                try:
                    with open(os.path.join(directory, "cgroup.subtree_control"), encoding="ascii") as file:
                        controllers = file.read().split()
                except OSError:
                    continue
                if "memory" in controllers and os.access(directory, os.W_OK):
                    return directory
        return ""

    def make_cgroup(self, parent: str, name: str) -> str:
        path = os.path.join(parent, name)
        os.mkdir(path)
        self.cgroups.append(path)
        return path
