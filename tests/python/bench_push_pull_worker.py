"""The Python side of bench_py_vs_c.py: a worker of a test_benchmark job
(its scheduler and server are the C program) that does what
test_benchmark's mode 4 does — one push-pull round trip at a time of one
key — from Python, with a float32 numpy array, and prints the same figures
as a JSON line (cpu_s: the process's CPU time over the rounds, user and
system, as test_benchmark's).

  bench_push_pull_worker.py LEN_BYTES ROUNDS [page|numpy|numpy-push|numpy-pull] [PAIRS]

page (the default): the arrays are page-aligned (ps.empty), as
test_benchmark's buffers; numpy: numpy's own allocations (data 16 bytes
past a page); numpy-push / numpy-pull: only the pushed values / only the
pull destination numpy's, the other page-aligned.

With PAIRS, the worker measures what a Python call adds in the same
process instead: PAIRS pairs of blocks of ROUNDS round trips each, one
block made by the C API (KVWorker._c_round_trips: ps_kv_zpushpull and
ps_kv_wait in a C loop, without the GIL), the other by the Python loop
above, on the same arrays, connection and server, the order alternating
from pair to pair. One JSON line: each block's median round trip and the
median over pairs of the Python block's minus the C block's.
"""
import json
import statistics
import sys
import time

import numpy as np

import ps


def main():
    nbytes, rounds = int(sys.argv[1]), int(sys.argv[2])
    # As test_benchmark: join without the start barrier, then barrier with
    # everyone (the server registered its handler by then).
    ps.init(do_barrier=False)
    ps.barrier()
    w = ps.KVWorker(app_id=0, customer_id=0)
    alloc = sys.argv[3] if len(sys.argv) > 3 else "page"
    n = max(nbytes // 4, 1)
    numpy_vals = alloc in ("numpy", "numpy-push")
    numpy_out = alloc in ("numpy", "numpy-pull")
    vals = np.empty(n, dtype=np.float32) if numpy_vals else ps.empty(n, np.float32)
    out = np.empty(n, dtype=np.float32) if numpy_out else ps.empty(n, np.float32)
    vals[:], out[:] = 1.0, 0.0
    w.push(0, vals).wait()  # warm-up as test_benchmark's: the server sizes its store
    if len(sys.argv) > 4:
        in_process(w, vals, out, rounds, int(sys.argv[4]), alloc)
    else:
        timed_loop(w, vals, out, rounds, alloc)
    w.close()
    ps.barrier()
    ps.finalize()


def python_block(w, vals, out, rounds):
    """Per-call ns of `rounds` Python round trips (the loop timed below)."""
    each = [0] * rounds
    clock = time.perf_counter_ns
    for i in range(rounds):
        t = clock()
        w.push_pull(0, vals, out).wait()
        each[i] = clock() - t
    return each


def in_process(w, vals, out, rounds, pairs, alloc):
    c_p50, py_p50 = [], []
    for p in range(pairs):
        order = ("C", "Python") if p % 2 == 0 else ("Python", "C")
        for kind in order:
            out[:] = 0.0
            each = (w._c_round_trips(0, vals, out, rounds) if kind == "C"
                    else python_block(w, vals, out, rounds))
            assert np.array_equal(out, vals)
            (c_p50 if kind == "C" else py_p50).append(statistics.median(each) / 1000.0)
    diffs = [py - c for py, c in zip(py_p50, c_p50)]
    print(json.dumps({"bench": "python_vs_c_in_process", "len": vals.nbytes, "rounds": rounds,
                      "pairs": pairs, "van": ps.van_name(), "alloc": alloc,
                      "c_p50_us": c_p50, "py_p50_us": py_p50,
                      "c_us": statistics.median(c_p50), "py_us": statistics.median(py_p50),
                      "extra_us": statistics.median(diffs)}), flush=True)


def timed_loop(w, vals, out, rounds, alloc):
    each = [0] * rounds
    clock = time.perf_counter_ns
    t0, cpu0 = clock(), time.process_time()
    for i in range(rounds):
        t = clock()
        w.push_pull(0, vals, out).wait()
        each[i] = clock() - t
    elapsed, cpu = clock() - t0, time.process_time() - cpu0
    each.sort()
    assert np.array_equal(out, vals)
    print(json.dumps({"bench": "python_push_pull", "len": vals.nbytes, "rounds": rounds,
                      "gbps": 8.0 * vals.nbytes * rounds / elapsed,
                      "lat_us_mean": elapsed / rounds / 1000.0, "van": ps.van_name(),
                      "alloc": alloc, "addr_mod_4096": vals.ctypes.data % 4096, "cpu_s": cpu, "lat_us_p50": each[rounds // 2] / 1000.0}),
          flush=True)


if __name__ == "__main__":
    main()
