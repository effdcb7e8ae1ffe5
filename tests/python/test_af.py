"""ps.af: attention workers against Python FFN servers, in jobs of separate
processes (af_node.py)."""
import pytest

import pyjob


def run(mode, van="tcp", workers=1, servers=1, env=None, group_size=1):
    cmd = pyjob.node_cmd("af_node.py", mode)
    job = pyjob.run(cmd, workers, servers, van=van, deadline_s=90, scheduler_cmd=cmd, env=env,
                    group_size=group_size)
    job.check()
    for rank in range(servers * group_size):
        assert "PASS server %s" % mode in job.output("server", rank)
    for rank in range(workers * group_size):
        assert "PASS worker %s" % mode in job.output("worker", rank)
    return job


@pytest.mark.parametrize("van", ["tcp", "shm"])
@pytest.mark.parametrize("size", [1, 2])
def test_ffn_sums_bf16_pushes(van, size):
    run("sum", van, workers=size, servers=size)


def test_instance_groups():
    """StepMesh's multi-GPU layout: 2 attention x 2 FFN groups of 2
    instances, a process each; every instance's FFN servers get their
    attention instances' batches by group rank."""
    run("sum", "shm", workers=2, servers=2, group_size=2)


def test_traces():
    job = run("sum", "tcp", env={"STEPMESH_ENABLE_TRACE": "1"})
    assert "PASS worker sum traced" in job.output("worker", 0)


def test_errors():
    job = run("errors")
    server, worker = job.output("server"), job.output("worker")
    for line in ("get_batch timed out", "another thread ran during get_batch", "respond refused a wrong size",
                 "respond refused a wrong dtype", "respond refused a wrong key", "respond refused a non-contiguous result",
                 "respond refused a second answer"):
        assert line in server, server
    for line in ("refused a non-contiguous tensor", "refused a uint16 tensor",
                 "refused a read-only destination"):
        assert line in worker, worker
