"""A node of test_kv.py's keyword job: it moves the job's DMLC_* settings
from its environment into ps.init() keywords (removing the variables first),
so the job starts only if the keywords work. The server answers pulls with
0, 1, 2, 3; the worker pulls into a torch tensor and checks what a second
init() raises. Prints PASS."""
import os
import sys

import numpy as np

import ps

KEYWORDS = {"DMLC_ROLE": "role", "DMLC_NUM_WORKER": "num_workers",
            "DMLC_NUM_SERVER": "num_servers", "DMLC_PS_ROOT_URI": "scheduler_host",
            "DMLC_PS_ROOT_PORT": "scheduler_port", "DMLC_NODE_HOST": "node_host",
            "DMLC_RANK": "rank"}


def main():
    settings = {kw: os.environ.pop(var) for var, kw in KEYWORDS.items() if var in os.environ}
    leftover = [k for k in os.environ if k.startswith("DMLC_")]
    ps.init(**settings)
    if ps.is_scheduler():
        ps.wait_job_end(timeout=60)
        return
    if ps.is_server():
        ps.KVServer(lambda req: np.arange(4, dtype=np.float32) if req.pull else None)
        ps.wait_job_end(timeout=60)
        return
    assert (ps.role(), ps.num_workers(), ps.num_servers()) == ("worker", 1, 1)
    import torch
    t = torch.zeros(4)
    assert ps.KVWorker().pull(5, t).wait(timeout=10) is t
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0], t
    try:
        ps.init(**settings)
    except ps.BadState:
        pass
    else:
        raise AssertionError("a second init() did not raise ps.BadState")
    try:
        ps.init(colour="blue")
    except TypeError as exc:
        assert "colour" in str(exc)
    else:
        raise AssertionError("an unknown setting was accepted")
    print("PASS worker (settings %s, other DMLC_* left: %s)" % (sorted(settings), leftover))
    ps.finalize()


if __name__ == "__main__":
    sys.exit(main())
