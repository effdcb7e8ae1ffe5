#!/usr/bin/env python3
"""Unit tests of ps_sweep's pure functions."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ps_sweep as S  # noqa: E402

# Captured from a 2A2F job over tcp (BENCHMARK_WARMUP=2 BENCHMARK_ITER=5, batches 1..2).
AF_CAPTURE = """\
[worker 1] pushpull batch latency overall: mean=179.5us, min=116.4us, p50=193.5us, p90=212.0us, p99=234.5us, max=235.1us
[worker 1] AF_BENCH {"op":"push","batch":1,"hidden":7168,"workers":2,"servers":2,"rank":1,"samples":15,"mean_us":172.99,"min_us":48.21,"p50_us":179.20,"p90_us":224.26,"p99_us":242.69,"max_us":243.18,"worker_cpu_s":0.007,"verify":0}
[worker 1] AF_BENCH {"op":"pull","batch":1,"hidden":7168,"workers":2,"servers":2,"rank":1,"samples":15,"mean_us":176.69,"min_us":84.59,"p50_us":177.15,"p90_us":197.63,"p99_us":321.53,"max_us":321.53,"worker_cpu_s":0.007,"verify":0}
[worker 1] AF_BENCH {"op":"pushpull","batch":1,"hidden":7168,"workers":2,"servers":2,"rank":1,"samples":15,"mean_us":179.51,"min_us":116.41,"p50_us":193.54,"p90_us":211.97,"p99_us":234.50,"max_us":235.11,"worker_cpu_s":0.007,"verify":0}
[worker 0] pushpull batch latency overall: mean=170.6us, min=116.6us, p50=175.1us, p90=209.9us, p99=217.7us, max=217.7us
[worker 0] AF_BENCH {"op":"push","batch":1,"hidden":7168,"workers":2,"servers":2,"rank":0,"samples":15,"mean_us":181.78,"min_us":114.25,"p50_us":181.25,"p90_us":214.02,"p99_us":276.48,"max_us":277.75,"worker_cpu_s":0.009,"verify":0}
[worker 0] AF_BENCH {"op":"pull","batch":1,"hidden":7168,"workers":2,"servers":2,"rank":0,"samples":15,"mean_us":178.87,"min_us":73.10,"p50_us":185.34,"p90_us":238.59,"p99_us":246.75,"max_us":246.75,"worker_cpu_s":0.009,"verify":0}
[worker 0] AF_BENCH {"op":"pushpull","batch":1,"hidden":7168,"workers":2,"servers":2,"rank":0,"samples":15,"mean_us":170.60,"min_us":116.61,"p50_us":175.10,"p90_us":209.92,"p99_us":217.71,"max_us":217.71,"worker_cpu_s":0.009,"verify":0}
[worker 1] pushpull batch latency overall: mean=170.7us, min=147.4us, p50=162.8us, p90=205.8us, p99=218.0us, max=218.0us
[worker 1] AF_BENCH {"op":"push","batch":2,"hidden":7168,"workers":2,"servers":2,"rank":1,"samples":15,"mean_us":145.14,"min_us":123.68,"p50_us":142.34,"p90_us":166.91,"p99_us":170.59,"max_us":170.59,"worker_cpu_s":0.007,"verify":0}
[worker 1] AF_BENCH {"op":"pull","batch":2,"hidden":7168,"workers":2,"servers":2,"rank":1,"samples":15,"mean_us":159.98,"min_us":124.79,"p50_us":154.62,"p90_us":197.63,"p99_us":215.22,"max_us":215.22,"worker_cpu_s":0.007,"verify":0}
[worker 1] AF_BENCH {"op":"pushpull","batch":2,"hidden":7168,"workers":2,"servers":2,"rank":1,"samples":15,"mean_us":170.67,"min_us":147.36,"p50_us":162.82,"p90_us":205.82,"p99_us":218.02,"max_us":218.02,"worker_cpu_s":0.007,"verify":0}
[worker 0] pushpull batch latency overall: mean=155.0us, min=106.4us, p50=154.6us, p90=175.1us, p99=193.5us, max=194.4us
[worker 0] AF_BENCH {"op":"push","batch":2,"hidden":7168,"workers":2,"servers":2,"rank":0,"samples":15,"mean_us":170.04,"min_us":144.43,"p50_us":166.91,"p90_us":203.78,"p99_us":215.06,"max_us":215.06,"worker_cpu_s":0.009,"verify":0}
[worker 0] AF_BENCH {"op":"pull","batch":2,"hidden":7168,"workers":2,"servers":2,"rank":0,"samples":15,"mean_us":155.19,"min_us":126.89,"p50_us":146.43,"p90_us":171.01,"p99_us":271.40,"max_us":271.40,"worker_cpu_s":0.009,"verify":0}
[worker 0] AF_BENCH {"op":"pushpull","batch":2,"hidden":7168,"workers":2,"servers":2,"rank":0,"samples":15,"mean_us":154.97,"min_us":106.42,"p50_us":154.62,"p90_us":175.10,"p99_us":193.54,"max_us":194.42,"worker_cpu_s":0.009,"verify":0}
"""


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


class AfTest(unittest.TestCase):
    def test_af_shapes(self):
        self.assertEqual(S.parse_af_shapes("1A1F, 4a2f"), [(1, 1), (4, 2)])
        for bad in ("1x1", "0A1F", "1A0F", "AF", "1A1", "2A2Fx"):
            with self.assertRaises(ValueError, msg=bad):
                S.parse_af_shapes(bad)

    def test_af_batches(self):
        self.assertEqual(S.af_batches(1, 2, 1), [1, 2])
        self.assertEqual(S.af_batches(1, 128, 127), [1, 128])
        self.assertEqual(S.af_batches(1, 130, 64), [1, 65, 129])
        for bad in ((0, 2, 1), (2, 1, 1), (1, 2, 0)):
            with self.assertRaises(ValueError, msg=str(bad)):
                S.af_batches(*bad)

    def test_af_records(self):
        recs = S.parse_af_records(AF_CAPTURE + "[worker 0] AF_BENCH {broken\n")
        self.assertEqual(len(recs), 12)
        self.assertEqual({(r["op"], r["batch"], r["rank"]) for r in recs},
                         {(op, b, k) for op in S.AF_OPS for b in (1, 2) for k in (0, 1)})
        self.assertEqual(recs[0]["p99_us"], 242.69)

    def test_af_rows(self):
        rows = S.af_rows(S.parse_af_records(AF_CAPTURE), 2, 2, "tcp", [1, 2])
        self.assertEqual([(r["op"], r["batch"]) for r in rows],
                         [(op, b) for op in S.AF_OPS for b in (1, 2)])
        self.assertTrue(all(r["ok"] for r in rows))
        pp1 = rows[4]
        self.assertEqual((pp1["op"], pp1["batch"], pp1["van"]), ("pushpull", 1, "tcp"))
        self.assertAlmostEqual(pp1["p50_us"], (193.54 + 175.10) / 2)
        self.assertEqual(pp1["p99_us"], 234.50)
        self.assertEqual(pp1["p90_us"], 211.97)
        self.assertEqual(pp1["min_us"], 116.41)
        self.assertEqual(pp1["max_us"], 235.11)
        self.assertAlmostEqual(pp1["mean_us"], (179.51 + 170.60) / 2)
        self.assertEqual(pp1["samples"], 30)
        self.assertEqual(pp1["hidden"], 7168)
        self.assertAlmostEqual(rows[5]["p50_us"], (162.82 + 154.62) / 2)
        self.assertEqual(rows[5]["p99_us"], 218.02)

    def test_af_rows_missing_worker(self):
        one = [l for l in AF_CAPTURE.splitlines() if l.startswith("[worker 0]")]
        rows = S.af_rows(S.parse_af_records("\n".join(one)), 2, 2, "tcp", [1, 2])
        self.assertFalse(any(r["ok"] for r in rows))
        self.assertEqual(rows[4]["p99_us"], 217.71)
        rows = S.af_rows(S.parse_af_records(AF_CAPTURE), 2, 2, "tcp", [1, 2, 3])
        self.assertEqual([r["ok"] for r in rows if r["op"] == "pushpull"], [True, True, False])
        self.assertNotIn("p50_us", rows[-1])

    def test_af_gnuplot_script(self):
        gp = S.af_gnuplot_script("/o/af.png", [("1A1F tcp", "/o/a.dat"),
                                               ("2A2F shm", "/o/b.dat")], "t", [1, 65, 129])
        self.assertIn("set output '/o/af.png'", gp)
        self.assertIn("'/o/a.dat' using 1:2 with linespoints lw 2 title '1A1F tcp'", gp)
        self.assertIn("'/o/b.dat' using 1:3 with linespoints lw 2 title '2A2F shm'", gp)
        self.assertIn("set xrange [0.500000:129.500000]", gp)
        self.assertEqual(gp.count("\nplot "), 2)
        self.assertTrue(gp.rstrip().endswith("unset multiplot"))


if __name__ == "__main__":
    unittest.main()
