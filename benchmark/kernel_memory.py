#!/usr/bin/env python3
"""kernel_memory.py: what the kernel spends on N held connections, and whose connections it spends it on.

--mode connections takes a snapshot before the connections are opened and one while they are held:

  kernel_memory.py snapshot OUT.json [--cgroup NAME=DIR ...]   /proc/meminfo, /proc/slabinfo, the cgroups' charges,
                                                               after dropping unused dentries and inodes
  kernel_memory.py diff BEFORE.json AFTER.json --held N        the growth per held connection, one key=value line

What grows, read from /proc (root only for slabinfo):
  kernel     Slab + KernelStack + PageTables + Percpu from /proc/meminfo, and the pages of TCP socket buffers
             from /proc/net/sockstat: what the kernel allocated, for both ends of every connection (the client's
             sockets live in the same kernel as the server's). Not VmallocUsed: kernel stacks are vmalloc'ed and
             would count twice;
  slabs      the caches of /proc/slabinfo that grew most (active objects x object size): TCP, sock_inode_cache,
             dentry, filp, eventpoll_epi, ...

Whose it is. The client runs in a memory cgroup of its own, so every allocation its system calls make (its
sockets, their inodes and files, its epoll entries) is charged to that cgroup: that is `client_kernel`. The
server's accepted sockets are different: the kernel creates them in softirq context when the handshake completes,
not in a system call of the server's, and charges them to nobody. So the server's share is the rest:

  server_kernel = kernel - client_kernel

`server_charged` is the part of it that the server's own system calls allocated (accept's file, inode and dentry,
epoll_ctl's entry, thread stacks), charged to the server's cgroup: a check that the split is sensible.
cgroup v1 (memory.kmem.usage_in_bytes) and v2 (memory.stat's `kernel`) are both read.

Python 3 standard library only; tested by test_kernel_memory.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

MEMINFO_KEYS = ("MemAvailable", "Slab", "KernelStack", "PageTables", "Percpu")
KERNEL_KEYS = ("Slab", "KernelStack", "PageTables", "Percpu")
TOP_SLABS = 6


def parse_meminfo(text: str) -> dict[str, int]:
    """The fields of /proc/meminfo we use, in bytes."""
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in MEMINFO_KEYS:
            values[key] = int(rest.split()[0]) * 1024
    return values


def parse_slabinfo(text: str) -> dict[str, int]:
    """Bytes in use per slab cache: active objects times object size (slabinfo version 2.1)."""
    caches = {}
    for line in text.splitlines():
        if line.startswith(("slabinfo", "#")):
            continue
        fields = line.split()
        if len(fields) >= 4:
            caches[fields[0]] = caches.get(fields[0], 0) + int(fields[1]) * int(fields[3])
    return caches


def parse_sockstat(text: str) -> int:
    """The pages of TCP socket buffers (`TCP: ... mem M`), in bytes."""
    for line in text.splitlines():
        fields = line.split()
        if fields[:1] == ["TCP:"] and "mem" in fields:
            return int(fields[fields.index("mem") + 1]) * os.sysconf("SC_PAGE_SIZE")
    return 0


def cgroup_kernel(directory: str) -> int | None:
    """The kernel memory charged to a memory cgroup, v1 or v2; None when it cannot be read."""
    try:
        with open(os.path.join(directory, "memory.kmem.usage_in_bytes"), encoding="ascii") as file:
            return int(file.read())
    except OSError:
        pass
    try:
        with open(os.path.join(directory, "memory.stat"), encoding="ascii") as file:
            for line in file:
                key, _, value = line.partition(" ")
                if key == "kernel":
                    return int(value)
    except OSError:
        pass
    return None


def read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except OSError:
        return ""


def drop_caches() -> None:
    """Frees the dentries and inodes nobody uses (root only; otherwise nothing happens). Listing /proc/PID/fd,
    as idle_conns and benchmark.sh do to count descriptors, leaves an inode and a dentry behind per descriptor:
    without this they would count as the connections' cost. A socket's own inode and dentry are in use and stay."""
    try:
        with open("/proc/sys/vm/drop_caches", "w", encoding="ascii") as file:
            file.write("2\n")
    except OSError:
        pass


def tcp_counts() -> list[str]:
    """`TCP: inuse I orphan O tw T alloc A mem M` of /proc/net/sockstat, as its fields."""
    return next((line.split() for line in read("/proc/net/sockstat").splitlines() if line.startswith("TCP:")), [])


def settle(limit_s: float = 70) -> None:
    """Waits until the kernel has finished with earlier connections: at most a few sockets in TIME_WAIT (a refused
    connection leaves one for 60 s; a few strays, such as a script's check that a port is open, weigh nothing) and
    the TCP counts steady for half a second."""
    deadline, last, steady_since = time.monotonic() + limit_s, None, time.monotonic()
    while time.monotonic() < deadline:
        counts = tcp_counts()
        if counts != last:
            last, steady_since = counts, time.monotonic()
        tw = int(counts[counts.index("tw") + 1]) if "tw" in counts else 0
        if tw <= 10 and time.monotonic() - steady_since >= 0.5:
            return
        time.sleep(0.1)


def snapshot(cgroups: dict[str, str], wait: bool) -> dict:
    if wait:
        settle()
    drop_caches()
    return {
        "meminfo": parse_meminfo(read("/proc/meminfo")),
        "slabs": parse_slabinfo(read("/proc/slabinfo")),
        "tcp_buffers": parse_sockstat(read("/proc/net/sockstat")),
        "cgroups": {name: cgroup_kernel(directory) for name, directory in cgroups.items()},
    }


def diff(before: dict, after: dict, held: int) -> dict[str, str]:
    """Growth per held connection, in bytes, as text: n/a where a figure is missing or nothing is held."""
    def per_conn(delta: float | None) -> str:
        return "n/a" if delta is None or held <= 0 else f"{delta / held:.0f}"

    def grown(key: str) -> int:
        return after["meminfo"].get(key, 0) - before["meminfo"].get(key, 0)

    kernel = sum(grown(key) for key in KERNEL_KEYS) + after["tcp_buffers"] - before["tcp_buffers"]

    def charged(name: str) -> int | None:
        start, end = before["cgroups"].get(name), after["cgroups"].get(name)
        return None if start is None or end is None else end - start

    client = charged("client")
    slabs = sorted(((after["slabs"].get(name, 0) - before["slabs"].get(name, 0), name) for name in after["slabs"]),
                   reverse=True)
    top = [f"{name}:{delta / held:.0f}" for delta, name in slabs[:TOP_SLABS] if delta > 0 and held > 0]
    return {
        "kernel_b": per_conn(kernel),
        "server_kernel_b": per_conn(None if client is None else kernel - client),
        "client_kernel_b": per_conn(client),
        "server_charged_b": per_conn(charged("server")),
        "available_drop_b": per_conn(before["meminfo"].get("MemAvailable", 0)
                                     - after["meminfo"].get("MemAvailable", 0)),
        "slabs": ";".join(top) if top else "n/a",
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="kernel_memory.py", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    take = commands.add_parser("snapshot", help="write a snapshot as JSON")
    take.add_argument("out")
    take.add_argument("--cgroup", action="append", default=[], help="NAME=DIR: a memory cgroup to read")
    take.add_argument("--settle", action="store_true", help="first wait for TIME_WAIT sockets to go (up to 70 s)")
    compare = commands.add_parser("diff", help="two snapshots -> growth per held connection, key=value")
    compare.add_argument("before")
    compare.add_argument("after")
    compare.add_argument("--held", type=int, required=True)
    args = parser.parse_args(argv)
    if args.command == "snapshot":
        cgroups = dict(spec.split("=", 1) for spec in args.cgroup)
        with open(args.out, "w", encoding="utf-8") as file:
            json.dump(snapshot(cgroups, args.settle), file)
    else:
        with open(args.before, encoding="utf-8") as first, open(args.after, encoding="utf-8") as second:
            figures = diff(json.load(first), json.load(second), args.held)
        print(" ".join(f"{key}={value}" for key, value in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
