"""The Python side of bench_py_vs_c.py: a worker of a test_benchmark job
(its scheduler and server are the C program) that does what
test_benchmark's mode 4 does — one push-pull round trip at a time of one
key — from Python, with a float32 numpy array, and prints the same figures
as a JSON line.

  bench_push_pull_worker.py LEN_BYTES ROUNDS
"""
import json
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
    vals = np.ones(max(nbytes // 4, 1), dtype=np.float32)
    out = np.zeros_like(vals)
    w.push(0, vals).wait()  # warm-up as test_benchmark's: the server sizes its store
    t0 = time.perf_counter_ns()
    for _ in range(rounds):
        w.push_pull(0, vals, out).wait()
    elapsed = time.perf_counter_ns() - t0
    assert np.array_equal(out, vals)
    print(json.dumps({"bench": "python_push_pull", "len": vals.nbytes, "rounds": rounds,
                      "gbps": 8.0 * vals.nbytes * rounds / elapsed,
                      "lat_us_mean": elapsed / rounds / 1000.0, "van": ps.van_name()}),
          flush=True)
    w.close()
    ps.barrier()
    ps.finalize()


if __name__ == "__main__":
    main()
