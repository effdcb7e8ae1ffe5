"""Device memory from Python: ps.DeviceArray and __cuda_array_interface__
objects through KVWorker and ps.af, without a copy on the Python side
(kv_node.py device, af_node.py sum with PS_TEST_DEVICE_KIND). Run on the
emulated kind here; tools/gpu_check.sh runs the same nodes with cuda."""
import pytest

import pyjob

ENV = {"PS_TEST_DEVICE_KIND": "emu"}


@pytest.mark.parametrize("van", ["tcp", "shm"])
def test_kv_device_values(van):
    job = pyjob.run(pyjob.node_cmd("kv_node.py", "device"), 2, 1, van=van, deadline_s=90,
                    env=ENV)
    job.check()
    for rank in range(2):
        out = job.output("worker", rank)
        assert "device (emu) round trips ok" in out and "PASS worker device" in out, out
        assert "device (emu) sum ok" in out, out


def test_kv_device_store():
    """Pushes as IPC handles (shm) into the server's registered device
    buffers: the Python handler finds the values there."""
    job = pyjob.run(pyjob.node_cmd("kv_node.py", "devicestore"), 2, 1, van="shm",
                    deadline_s=90, env=dict(ENV, PS_DEVICE_IPC="1"))
    job.check()
    for rank in range(2):
        assert "device store pushes ok" in job.output("worker", rank)
    out = job.output("server", 0)
    assert "device store: 6 of 6 pushes landed in their registered device buffer" in out, out


@pytest.mark.parametrize("van", ["tcp", "shm"])
def test_af_device_tensors(van):
    cmd = pyjob.node_cmd("af_node.py", "sum")
    job = pyjob.run(cmd, 2, 2, van=van, deadline_s=90, scheduler_cmd=cmd, env=ENV)
    job.check()
    for rank in range(2):
        assert "PASS server sum" in job.output("server", rank)
        assert "PASS worker sum on emu memory" in job.output("worker", rank)


def test_device_array():
    import numpy as np

    import ps

    d = ps.DeviceArray((3, 4), "float32", kind="emu")
    cai = d.__cuda_array_interface__
    assert cai["shape"] == (3, 4) and cai["typestr"] == "<f4" and cai["version"] == 3
    assert d.nbytes == 48 and d.kind == "emu"
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    d.upload(a)
    b = np.zeros_like(a)
    d.download(b)
    assert np.array_equal(a, b)
    with pytest.raises(ValueError):
        d.upload(np.zeros(5, np.float32))
    with pytest.raises(ValueError):
        ps.DeviceArray(4, "bfloat16", kind="emu")
    with pytest.raises(ValueError):
        ps.DeviceArray(4, kind="nosuchkind")
