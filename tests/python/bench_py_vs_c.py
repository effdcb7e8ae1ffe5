"""Python's push_pull against the C API's in the same run.

  bench_py_vs_c.py TEST_BENCHMARK [--van tcp|shm] [--busy-poll] [--repeats 3] [--sizes 4194304,8]
                   [--kinds C,Python,Py-numpy]

For each size (4 MiB: goodput; 8 bytes: per-call latency) it runs, in
turns, a job whose worker is test_benchmark mode 4 (ps_kv_zpushpull, one
round trip at a time, page-aligned buffers) and jobs whose worker is
bench_push_pull_worker.py (ps.KVWorker.push_pull(...).wait() on float32
numpy arrays: page-aligned ones from ps.empty, "Python", and numpy's own,
"Py-numpy"); the scheduler and the server are test_benchmark in all. The latency is
the median round trip of a run (test_benchmark's p50; the Python worker
times each call); CPU is the worker process's user + system time per round
trip. Prints every run and the medians: each Python variant's goodput as a share of C's,
and the extra microseconds a Python round trip costs. --kinds also takes
Py-numpy-push and Py-numpy-pull (numpy's own array for the pushed values
only, or for the pull destination only).

--in-process PAIRS measures the same thing inside one worker process
instead: each run is one job whose Python worker alternates PAIRS pairs of
blocks, C API round trips (a C loop in the extension) and Python ones, on
the same arrays and connection (bench_push_pull_worker.py's PAIRS), for
each of --kinds after C (their arrays); it prints each run's median over
pairs of what a Python round trip adds. Both are timed to the return of
the wait, while test_benchmark's latency ends at the request's completion
callback, before the waiting thread has woken.
"""
import argparse
import json
import os
import statistics
import sys

import pyjob

HERE = os.path.dirname(os.path.abspath(__file__))
# Worker variants: the C program, or bench_push_pull_worker.py with its arrays
# from ps.empty (page-aligned) or numpy (both, or only the pushed / pulled).
KINDS = {"C": None, "Python": "page", "Py-numpy": "numpy", "Py-numpy-push": "numpy-push",
         "Py-numpy-pull": "numpy-pull"}
SIZES = [(4 << 20, 400), (8, 20000)]


def figures(output):
    for line in output.splitlines():
        line = line.strip()
        if line.startswith("{") and '"gbps"' in line:
            rec = json.loads(line)
            if rec.get("event", "summary") == "summary":
                return rec["gbps"], rec["lat_us_p50"], rec["cpu_s"]
    raise RuntimeError("no figures in:\n" + output)


def run(kind, c_bench, nbytes, rounds, van, busy_poll=False, cpu=None, pairs=None):
    env = {"NUM_KEY_PER_SERVER": "1", "LOG_DURATION": str(rounds),
           "TOTAL_DURATION": str(rounds), "PS_BENCH_JSON": "1",
           "PS_BUSY_POLL": "1" if busy_poll else "0"}
    c_cmd = [c_bench, str(nbytes), "1", "4"]
    alloc = KINDS[kind]
    worker = c_cmd if kind == "C" else [pyjob.PYTHON, os.path.join(HERE,
                                        "bench_push_pull_worker.py"), str(nbytes), str(rounds),
                                        alloc] + ([str(pairs)] if pairs else [])
    pin = ["taskset", "-c", cpu] if cpu is not None else []
    job = pyjob.run(pin + worker, 1, 1, van=van, deadline_s=300, server_cmd=pin + c_cmd,
                    scheduler_cmd=pin + c_cmd, env=env).check()
    if pairs:
        return in_process_figures(job.output("worker", 0))
    gbps, lat, cpu_s = figures(job.output("worker", 0))
    return gbps, lat, cpu_s * 1e6 / rounds


def in_process_figures(output):
    for line in output.splitlines():
        line = line.strip()
        if line.startswith("{") and '"python_vs_c_in_process"' in line:
            return json.loads(line)
    raise RuntimeError("no in-process figures in:\n" + output)


def main_in_process(args, c_bench, wanted, kinds):
    # Blocks short enough that a pair sees the same machine state.
    block = {8: 2000, 4 << 20: 40}
    for nbytes in wanted:
        rounds = block.get(nbytes, 200)
        for kind in kinds:
            extra, c_us, py_us = [], [], []
            for rep in range(args.repeats):
                rec = run(kind, c_bench, nbytes, rounds, args.van, args.busy_poll, args.cpu,
                          args.in_process)
                extra.append(rec["extra_us"])
                c_us.append(rec["c_us"])
                py_us.append(rec["py_us"])
                print("in-process %-8s %8d B, %d pairs of %d round trips, run %d: C %.2f us, "
                      "Python %.2f us (p50 over blocks); Python adds %+.2f us (median over pairs)"
                      % (kind, nbytes, args.in_process, rounds, rep, rec["c_us"], rec["py_us"],
                         rec["extra_us"]), flush=True)
            print("median in-process %s %d B over %s%s%s: C %.2f us, Python %.2f us (%.1f %% of "
                  "C's rate), a Python round trip adds %+.2f us (runs %s)"
                  % (kind, nbytes, args.van, " busy-poll" if args.busy_poll else "",
                     " on cpu %s" % args.cpu if args.cpu is not None else "",
                     statistics.median(c_us), statistics.median(py_us),
                     100.0 * statistics.median(c_us) / statistics.median(py_us),
                     statistics.median(extra), ", ".join("%+.2f" % e for e in extra)), flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("test_benchmark")
    ap.add_argument("--van", default="tcp")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--busy-poll", action="store_true", help="PS_BUSY_POLL=1 in every process")
    ap.add_argument("--cpu", default=None,
                    help="run every process on this CPU (taskset -c): no cross-CPU wake-ups")
    ap.add_argument("--sizes", default=",".join(str(n) for n, _ in SIZES))
    ap.add_argument("--in-process", type=int, default=None, metavar="PAIRS",
                    help="C and Python round trips alternating in one worker process")
    ap.add_argument("--kinds", default="C,Python,Py-numpy",
                    help="worker variants, C first: " + ", ".join(KINDS))
    args = ap.parse_args()
    kinds = args.kinds.split(",")
    if kinds[0] != "C" or any(k not in KINDS for k in kinds):
        ap.error("--kinds: C first, then any of " + ", ".join(KINDS))
    c_bench = os.path.abspath(args.test_benchmark)
    wanted = [int(x) for x in args.sizes.split(",")]
    if args.in_process:
        return main_in_process(args, c_bench, wanted, kinds[1:])
    for nbytes, rounds in [(n, r) for n, r in SIZES if n in wanted]:
        res = {k: [] for k in kinds}
        for rep in range(args.repeats):
            for kind in kinds:
                gbps, lat, cpu = run(kind, c_bench, nbytes, rounds, args.van, args.busy_poll, args.cpu)
                res[kind].append((gbps, lat, cpu))
                print("%-13s %8d B x %6d  run %d: %9.3f Gbps  %9.2f us per round trip (p50)  "
                      "%8.2f us CPU per round trip" % (kind, nbytes, rounds, rep, gbps, lat, cpu),
                      flush=True)
        c = [statistics.median(r[i] for r in res["C"]) for i in range(3)]
        for kind in kinds[1:]:
            p = [statistics.median(r[i] for r in res[kind]) for i in range(3)]
            print("median %d B over %s%s%s: C %.3f Gbps %.2f us (CPU %.2f us), %s %.3f Gbps "
                  "%.2f us (CPU %.2f us): goodput %.1f %% of C, %+.2f us per call (p50), CPU %+.2f us"
                  % (nbytes, args.van, " busy-poll" if args.busy_poll else "",
                     " on cpu %s" % args.cpu if args.cpu is not None else "", c[0], c[1], c[2],
                     kind, p[0], p[1], p[2], 100.0 * p[0] / c[0], p[1] - c[1], p[2] - c[2]),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
