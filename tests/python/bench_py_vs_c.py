"""Python's push_pull against the C API's in the same run.

  bench_py_vs_c.py TEST_BENCHMARK [--van tcp] [--repeats 3]

For each size (4 MiB: goodput; 8 bytes: per-call latency) it runs, in
turns, a job whose worker is test_benchmark mode 4 (ps_kv_zpushpull, one
round trip at a time) and one whose worker is bench_push_pull_worker.py
(ps.KVWorker.push_pull(...).wait() on a float32 numpy array); the scheduler
and the server are test_benchmark in both. Prints every run and the
medians: Python's goodput as a share of C's, and the extra microseconds a
Python round trip costs.
"""
import argparse
import json
import os
import statistics
import sys

import pyjob

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = [(4 << 20, 400), (8, 20000)]


def figures(output):
    for line in output.splitlines():
        line = line.strip()
        if line.startswith("{") and '"gbps"' in line:
            rec = json.loads(line)
            if rec.get("event", "summary") == "summary":
                return rec["gbps"], rec["lat_us_mean"]
    raise RuntimeError("no figures in:\n" + output)


def run(kind, c_bench, nbytes, rounds, van):
    env = {"NUM_KEY_PER_SERVER": "1", "LOG_DURATION": str(rounds),
           "TOTAL_DURATION": str(rounds), "PS_BENCH_JSON": "1"}
    c_cmd = [c_bench, str(nbytes), "1", "4"]
    worker = c_cmd if kind == "C" else [pyjob.PYTHON, os.path.join(HERE,
                                        "bench_push_pull_worker.py"), str(nbytes), str(rounds)]
    job = pyjob.run(worker, 1, 1, van=van, deadline_s=300, server_cmd=c_cmd,
                    scheduler_cmd=c_cmd, env=env).check()
    return figures(job.output("worker", 0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("test_benchmark")
    ap.add_argument("--van", default="tcp")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    c_bench = os.path.abspath(args.test_benchmark)
    for nbytes, rounds in SIZES:
        res = {"C": [], "Python": []}
        for rep in range(args.repeats):
            for kind in ("C", "Python"):
                gbps, lat = run(kind, c_bench, nbytes, rounds, args.van)
                res[kind].append((gbps, lat))
                print("%-6s %8d B x %6d  run %d: %9.3f Gbps  %9.2f us per round trip"
                      % (kind, nbytes, rounds, rep, gbps, lat), flush=True)
        c_gbps = statistics.median(g for g, _ in res["C"])
        p_gbps = statistics.median(g for g, _ in res["Python"])
        c_lat = statistics.median(t for _, t in res["C"])
        p_lat = statistics.median(t for _, t in res["Python"])
        print("median %d B over %s: C %.3f Gbps %.2f us, Python %.3f Gbps %.2f us: "
              "goodput %.1f %% of C, %+.2f us per call"
              % (nbytes, args.van, c_gbps, c_lat, p_gbps, p_lat, 100.0 * p_gbps / c_gbps,
                 p_lat - c_lat), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
