"""ps.torch through the summation servers: sums of every dtype, and the
end-to-end proof: a PyTorch MLP trained data-parallel by 2 workers ends with
the parameters of a single-process run on the concatenated batches."""
import pytest

import pyjob

STEPS = 20


@pytest.mark.parametrize("van,servers,partition", [
    ("tcp", 1, None),
    ("shm", 2, "1024"),  # small parts: every weight matrix spans several keys and both servers
    ("tcp", 2, "1024"),
])
def test_two_workers_match_single_process(van, servers, partition):
    env = {"BYTEPS_PARTITION_BYTES": partition} if partition else {}
    job = pyjob.run(pyjob.node_cmd("train_node.py", STEPS), 2, servers, van=van,
                    deadline_s=120, server_cmd=pyjob.sum_server_cmd(), env=env)
    job.check()
    for rank in range(2):
        out = job.output("worker", rank)
        assert "PASS worker %d" % rank in out
        assert "step %d loss" % (STEPS - 1) in out
    assert "served" in job.output("server", 0)


@pytest.mark.parametrize("van,servers", [("tcp", 2), ("shm", 1)])
def test_push_pull_sums_every_dtype(van, servers):
    job = pyjob.run(pyjob.node_cmd("torch_sum_node.py"), 2, servers, van=van, deadline_s=90,
                    server_cmd=pyjob.sum_server_cmd(),
                    env={"BYTEPS_PARTITION_BYTES": "262144"})
    job.check()
    for rank in range(2):
        out = job.output("worker", rank)
        assert "PASS worker %d" % rank in out
        assert "sum torch.bfloat16 ok" in out and "refusals ok" in out
