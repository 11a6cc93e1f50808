"""Tests of kernel_memory.py: reading /proc's formats, and the growth per connection and whose it is."""

import unittest

import kernel_memory

SLABINFO = """slabinfo - version: 2.1
# name            <active_objs> <num_objs> <objsize> <objperslab> <pagesperslab> : tunables <limit> <batchcount> <sharedfactor> : slabdata <active_slabs> <num_slabs> <sharedavail>
TCP                 1000   1020   2432   13    8 : tunables    0    0    0 : slabdata     78     78      0
sock_inode_cache    2000   2040    832   39    8 : tunables    0    0    0 : slabdata     52     52      0
"""

MEMINFO = """MemTotal:       24684132 kB
MemAvailable:   23000000 kB
Slab:             100000 kB
KernelStack:        4000 kB
PageTables:         2000 kB
Percpu:             1000 kB
VmallocUsed:       10000 kB
"""


def state(slab_kib, tcp_objects, client, server, available_kib=23000000, tcp_buffers=0):
    return {
        "meminfo": {"MemAvailable": available_kib * 1024, "Slab": slab_kib * 1024, "KernelStack": 0,
                    "PageTables": 0, "Percpu": 0},
        "slabs": {"TCP": tcp_objects * 2432, "filp": 1000},
        "tcp_buffers": tcp_buffers,
        "cgroups": {"client": client, "server": server},
    }


class ParseTest(unittest.TestCase):
    def test_slabinfo_is_bytes_in_use(self):
        self.assertEqual(kernel_memory.parse_slabinfo(SLABINFO), {"TCP": 1000 * 2432, "sock_inode_cache": 2000 * 832})

    def test_meminfo_in_bytes(self):
        values = kernel_memory.parse_meminfo(MEMINFO)
        self.assertEqual(values["Slab"], 100000 * 1024)
        self.assertEqual(values["MemAvailable"], 23000000 * 1024)
        self.assertNotIn("MemTotal", values)

    def test_sockstat_pages(self):
        text = "sockets: used 120\nTCP: inuse 10 orphan 0 tw 2 alloc 12 mem 3\nUDP: inuse 1 mem 0\n"
        self.assertEqual(kernel_memory.parse_sockstat(text), 3 * kernel_memory.os.sysconf("SC_PAGE_SIZE"))


class DiffTest(unittest.TestCase):
    def test_the_server_gets_what_the_client_was_not_charged(self):
        # 1,000 connections: 10,000 KiB more slab, 2,000 more TCP sockets (both ends); the client's cgroup was
        # charged 4,000 KiB, the server's 1,500 KiB.
        before = state(100000, 0, client=0, server=0)
        after = state(110000, 2000, client=4000 * 1024, server=1500 * 1024, available_kib=23000000 - 12000)
        figures = kernel_memory.diff(before, after, 1000)
        self.assertEqual(figures["kernel_b"], "10240")
        self.assertEqual(figures["client_kernel_b"], "4096")
        self.assertEqual(figures["server_kernel_b"], "6144")
        self.assertEqual(figures["server_charged_b"], "1536")
        self.assertEqual(figures["available_drop_b"], "12288")
        self.assertEqual(figures["slabs"], "TCP:4864")  # filp did not grow: not listed

    def test_socket_buffers_count_as_kernel_memory(self):
        figures = kernel_memory.diff(state(0, 0, 0, 0), state(0, 0, 0, 0, tcp_buffers=409600), 100)
        self.assertEqual(figures["kernel_b"], "4096")

    def test_without_cgroups_the_split_is_unknown(self):
        figures = kernel_memory.diff(state(0, 0, None, None), state(1000, 10, None, None), 10)
        self.assertEqual(figures["kernel_b"], "102400")
        self.assertEqual(figures["client_kernel_b"], "n/a")
        self.assertEqual(figures["server_kernel_b"], "n/a")

    def test_nothing_held(self):
        figures = kernel_memory.diff(state(0, 0, 0, 0), state(1000, 10, 0, 0), 0)
        self.assertEqual(figures["kernel_b"], "n/a")
        self.assertEqual(figures["slabs"], "n/a")


if __name__ == "__main__":
    unittest.main()
