"""ps.KVWorker against a Python ps.KVServer, in jobs of separate processes."""
import pytest

import pyjob


def run(mode, van="tcp", workers=2, servers=1):
    job = pyjob.run(pyjob.node_cmd("kv_node.py", mode), workers, servers, van=van, deadline_s=90)
    job.check()
    for rank in range(workers):
        assert "PASS worker %s" % mode in job.output("worker", rank)
    return job


@pytest.mark.parametrize("van", ["tcp", "shm"])
def test_every_dtype_round_trips(van):
    job = run("dtypes", van, servers=2)
    for dtype in ("float32", "bfloat16", "uint64", "char"):
        assert "dtype %s ok" % dtype in job.output("worker", 0)
    assert "C round trips ok" in job.output("worker", 0)


@pytest.mark.parametrize("van", ["tcp", "shm"])
def test_zero_copy(van):
    run("zerocopy", van)


@pytest.mark.parametrize("van", ["tcp", "shm"])
def test_registered_receive_buffers(van):
    job = run("recvbuf", van)
    assert "recv buffer: 6 of 6 pushes landed" in job.output("server"), job.output("server")


@pytest.mark.parametrize("van", ["tcp", "shm"])
def test_pull_any_values_the_servers_size(van):
    job = run("anysize", van, servers=2)
    for rank in range(2):
        assert "pull_any ok" in job.output("worker", rank)


@pytest.mark.parametrize("van", ["tcp", "shm"])
def test_user_slicer(van):
    job = run("slicer", van, servers=2)
    for rank in range(2):
        assert "slicer ok" in job.output("worker", rank)
    checked = sum(int(line.split()[1]) for line in job.output("server").splitlines()
                  if line.startswith("slicer:"))
    assert checked == 2 * 2 * 6, job.output("server")


def test_errors_and_handler_exception():
    job = run("errors")
    server = job.output("server")
    # The handler's KeyError was reported (twice: a pull of each worker),
    # and so were the answers that did not fit the pulls (three of each
    # worker, both dtypes and sizes named); the server went on and left
    # cleanly.
    assert "the handler failed on a pull request" in server and "KeyError" in server
    for words in ("vals hold 256 bytes of float32, the worker pulls 256 bytes of float64",
                  "vals hold 256 bytes of float32, the worker pulls 128 bytes of float32",
                  "vals hold 256 bytes of float32, the worker pulls int32"):
        assert words in server, server
    assert "8 handler errors" in server, server


def test_gil_released_and_van_not_held_by_handler():
    job = run("gil", workers=1)
    assert "van not held up by the handler" in job.output("worker", 0)


def test_init_from_keywords():
    cmd = pyjob.node_cmd("init_node.py")
    job = pyjob.run(cmd, 1, 1, deadline_s=60, scheduler_cmd=cmd)
    job.check()
    assert "PASS worker" in job.output("worker", 0)
