#!/usr/bin/env python3
"""Unit tests of ps_sweep's pure functions."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ps_sweep as S  # noqa: E402


def summary(gbps, p50, p99, rank=0, **kw):
    r = {"bench": "test_benchmark", "event": "summary", "phase": "", "keys": 40, "rounds": 10,
         "gbps": gbps, "lat_us_mean": 100.0, "lat_us_p50": p50, "lat_us_p99": p99,
         "cpu_s_per_gb": 1.0, "elapsed_s": 2.0 + rank, "worker_rank": rank, "requests": 400}
    r.update(kw)
    return r


class ParseTest(unittest.TestCase):
    def test_sizes(self):
        self.assertEqual(S.parse_size("4K"), 4096)
        self.assertEqual(S.parse_size("16m"), 16 << 20)
        self.assertEqual(S.parse_size("1000"), 1000)
        self.assertEqual(S.parse_size("1GB"), 1 << 30)
        self.assertEqual(S.parse_size("0.5K"), 512)
        for bad in ("0", "-1", "x", ""):
            with self.assertRaises(ValueError, msg=bad):
                S.parse_size(bad)

    def test_shapes(self):
        self.assertEqual(S.parse_shapes("1x1, 8x2"), [(1, 1), (8, 2)])
        for bad in ("1", "0x1", "1x0", "axb"):
            with self.assertRaises(ValueError, msg=bad):
                S.parse_shapes(bad)

    def test_human_size(self):
        self.assertEqual(S.human_size(4096), "4K")
        self.assertEqual(S.human_size(16 << 20), "16M")
        self.assertEqual(S.human_size(1000), "1000B")

    def test_rounds(self):
        self.assertEqual(S.rounds_for(4096, 40, 1 << 30, 3, 500), 500)
        self.assertEqual(S.rounds_for(1 << 20, 40, 1 << 30, 3, 500), 25)
        self.assertEqual(S.rounds_for(16 << 20, 40, 1 << 30, 3, 500), 3)

    def test_records(self):
        text = ('[worker 0] {"bench":"test_benchmark","event":"summary","gbps":1.5}\n'
                'noise\n[worker 0] {"bench": broken\n'
                '{"bench":"tcp_pingpong","lat_us_p50":3.0}\n')
        recs = S.parse_records(text)
        self.assertEqual(len(recs), 2)
        self.assertEqual(recs[0]["gbps"], 1.5)
        self.assertEqual(recs[1]["bench"], "tcp_pingpong")


class SummarizeTest(unittest.TestCase):
    def test_two_workers(self):
        recs = [summary(2.0, 10.0, 50.0, 0), summary(4.0, 20.0, 30.0, 1),
                {"bench": "test_benchmark", "event": "cpu", "role": "worker", "cpu_s": 1.0,
                 "gb_moved": 2.0},
                {"bench": "test_benchmark", "event": "cpu", "role": "worker", "cpu_s": 1.0,
                 "gb_moved": 2.0},
                {"bench": "test_benchmark", "event": "cpu", "role": "server", "cpu_s": 2.0,
                 "gb_moved": 4.0},
                {"bench": "test_benchmark", "event": "cpu", "role": "scheduler", "cpu_s": 0.0,
                 "gb_moved": 0.0}]
        row = S.summarize(recs, 2, 1, 1, 4096)
        self.assertTrue(row["ok"])
        self.assertEqual(row["gbps"], 6.0)
        self.assertEqual(row["gbps_per_worker"], 3.0)
        threads = [summary(2.0, 1, 1, 0), summary(2.0, 1, 1, 0, tid=1)]
        self.assertEqual(S.summarize(threads, 1, 1, 1, 8)["gbps_per_worker"], 4.0)
        self.assertEqual(row["lat_us_p50"], 15.0)
        self.assertEqual(row["lat_us_p99"], 50.0)
        self.assertEqual(row["job_cpu_s_per_gb"], 1.0)  # 4 s over the workers' 4 GB
        self.assertEqual(row["elapsed_s"], 3.0)
        self.assertEqual(row["mode_name"], "push_pull")

    def test_missing(self):
        row = S.summarize([{"bench": "test_benchmark", "event": "window"}], 1, 1, 2, 8)
        self.assertFalse(row["ok"])

    def test_mode0_uses_push_phase(self):
        recs = [summary(1.0, 1, 1, phase="push"), summary(9.0, 1, 1, phase="pull")]
        self.assertEqual(S.summarize(recs, 1, 1, 0, 8)["gbps"], 1.0)


class OutputTest(unittest.TestCase):
    def test_table(self):
        text = S.format_table([{"a": 1, "b": 2.5, "c": True}, {"a": 10, "c": False}],
                              ["a", "b", "c"], ["A", "B", "ok"])
        lines = text.splitlines()
        self.assertEqual(len(lines), 3)
        self.assertEqual(lines[0].split(), ["A", "B", "ok"])
        self.assertEqual(lines[1].split(), ["1", "2.500", "ok"])
        self.assertEqual(lines[2].split(), ["10", "-", "FAIL"])

    def test_gnuplot_script(self):
        gp = S.gnuplot_script("/o/it's.png", [("1w x 1s push_pull", "/o/a.dat")],
                              [("iperf3", 20.5)], "title", [4096, 1 << 20])
        self.assertIn("set terminal pngcairo", gp)
        self.assertIn("set output '/o/it''s.png'", gp)
        self.assertIn('"4K" 4096', gp)
        self.assertIn('"1M" 1048576', gp)
        self.assertIn("'/o/a.dat' using 1:2", gp)
        self.assertIn("'/o/a.dat' using 1:3", gp)
        self.assertIn("20.500000 with lines", gp)
        self.assertTrue(gp.rstrip().endswith("unset multiplot"))


if __name__ == "__main__":
    unittest.main()
