"""One process of the AF jobs of test_af.py: DMLC_ROLE says which.

  af_node.py MODE      MODE: sum | errors

sum: every worker sends ROUNDS batches of two random bfloat16 tensors
(seeded by worker rank and round, so every node knows them all) and one
pull slot per server; server s answers each slot with (s + 1) times the sum
of both tensors of every worker's batch of that round, and the worker
checks its pulls against that to bfloat16 tolerance (odd rounds push slices
of a tensor the worker registered). The servers register
receive tensors for the pushes and check that they landed there. With
STEPMESH_ENABLE_TRACE=1 the worker also checks the slots' stamps.

errors (1 worker, 1 server): get_batch timing out (without holding the
GIL), respond refusing a result of the wrong size or dtype (ValueError),
an unknown key and a second answer, and the worker refusing buffers it
cannot send.

With PS_TEST_DEVICE_KIND set (emu, or cuda on a GPU host) the sum
workers push from and pull into device memory of that kind (ps.DeviceArray;
CUDA torch tensors for cuda).

Each node prints "PASS <role> MODE" and leaves; a failed check raises.
"""
import os
import sys
import threading
import time

import numpy as np
import torch

import ps
import ps.af

ROUNDS = 6
SHAPE = (4, 96)
PUSH_KEYS = (1, 2)
PULL_KEY = 100
DEVICE = os.environ.get("PS_TEST_DEVICE_KIND")


def to_device(t):
    """A bfloat16 CPU tensor's copy in device memory: (object, dtype)."""
    if DEVICE == "cuda":
        return t.cuda(), None
    d = ps.DeviceArray(tuple(t.shape), "uint16", kind=DEVICE)
    d.upload(t.view(torch.int16).numpy())
    return d, "bfloat16"


def from_device(obj):
    if DEVICE == "cuda":
        return obj.cpu()
    a = np.empty(SHAPE, np.uint16)
    obj.download(a)
    return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)


def pushes(rank, rnd):
    g = torch.Generator().manual_seed(1000 * rank + rnd)
    return [torch.randn(SHAPE, generator=g).to(torch.bfloat16) for _ in PUSH_KEYS]


def expected_sum(rnd):
    total = torch.zeros(SHAPE)
    for rank in range(ps.num_workers()):
        for t in pushes(rank, rnd):
            total += t.float()
    return total


def serve_sum():
    server = ps.af.Server()
    me, workers = ps.rank() // ps.group_size(), ps.num_workers()  # group ranks
    # Every worker's pushes of each key land in its part of one tensor.
    recv = {key: torch.empty((workers,) + SHAPE, dtype=torch.bfloat16) for key in PUSH_KEYS}
    for key, t in recv.items():
        server.register_recv_tensor(t, list(range(workers)), [key] * workers)
    part_bytes = recv[PUSH_KEYS[0]][0].numel() * 2
    ps.barrier("servers+workers", timeout=30)  # registered before the first push
    for rnd in range(ROUNDS):
        batches = server.get_batch(timeout=30)
        assert [b.worker_rank for b in batches] == list(range(ps.num_workers()))
        total = torch.zeros(SHAPE)
        for b in batches:
            assert b.seq == rnd, (b.seq, rnd)
            assert b.pull == [(PULL_KEY, "bfloat16", SHAPE)], b.pull
            got = ps.af.tensors(b)
            assert [k for k, _ in got] == list(PUSH_KEYS)
            # The data arrived as pushed (exactly: bfloat16 both ways).
            for (key, t), want in zip(got, pushes(b.worker_rank, rnd)):
                assert t.dtype == torch.bfloat16 and tuple(t.shape) == SHAPE
                assert torch.equal(t, want), "push %d of worker %d differs" % (key, b.worker_rank)
                assert t.data_ptr() == recv[key].data_ptr() + b.worker_rank * part_bytes, \
                    "push %d of worker %d did not land in its registered part" % (key, b.worker_rank)
                assert torch.equal(recv[key][b.worker_rank], want)
                total += t.float()
        # numpy views of the same bytes agree.
        arr = ps.af.arrays(batches[0])[0][1]
        assert arr.dtype == np.uint16 and arr.shape == SHAPE and not arr.flags.writeable
        result = (total * (me + 1)).to(torch.bfloat16)
        for b in batches:
            server.respond(b, [(PULL_KEY, result)])
            assert b.answered
    stats = server.stats()
    assert stats["batches"] == ROUNDS * workers, stats
    assert stats["push_bytes_in_place"] == stats["push_bytes"] > 0, stats
    print("PASS server sum")


def work_sum():
    worker = ps.af.Worker()
    servers = ps.num_servers()
    trace = os.environ.get("STEPMESH_ENABLE_TRACE") == "1"
    # Odd rounds push slices of one registered tensor (StepMesh's
    # micro-batch buffers); registering it again is refused.
    pool = torch.empty((len(PUSH_KEYS),) + SHAPE, dtype=torch.bfloat16)
    worker.register_tensor(pool)
    try:
        worker.register_tensor(pool[0])
        raise AssertionError("register_tensor took an overlapping region")
    except ps.Error:
        pass
    ps.barrier("servers+workers", timeout=30)
    for rnd in range(ROUNDS):
        push = pushes(ps.rank() // ps.group_size(), rnd)  # the group rank
        if rnd % 2:
            for i, t in enumerate(push):
                pool[i].copy_(t)
            push = [pool[i] for i in range(len(push))]
        outs = [torch.empty(SHAPE, dtype=torch.bfloat16) for _ in range(servers)]
        if DEVICE:
            dev = [to_device(t) for t in push]
            douts = [to_device(o) for o in outs]
            h = worker.batch_push_pull(
                [(k, d) + ((dt,) if dt else ()) for k, (d, dt) in zip(PUSH_KEYS, dev)],
                [(PULL_KEY, d) + ((dt,) if dt else ()) for d, dt in douts])
        elif rnd % 2:
            h = worker.push_pull(push, list(PUSH_KEYS), outs, [PULL_KEY] * servers)
        else:
            h = worker.batch_push_pull(list(zip(PUSH_KEYS, push)),
                                       [(PULL_KEY, o) for o in outs])
        h.wait(timeout=30)
        if DEVICE:
            outs = [from_device(d) for d, _ in douts]
        want = expected_sum(rnd)
        for s, out in enumerate(outs):
            torch.testing.assert_close(out.float(), want * (s + 1), rtol=2 ** -7, atol=2 ** -6)
        traces = h.traces()
        assert len(traces) == servers
        if trace:
            for req, resp in traces:
                assert 0 < req["start"] <= req["postsend"] <= resp["postrecv"], (req, resp)
        else:
            assert traces == [None] * servers
    print("PASS worker sum%s%s" % (" traced" if trace else "",
                                   " on %s memory" % DEVICE if DEVICE else ""))


def serve_errors():
    server = ps.af.Server()
    ticks, stop = [], threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.01)

    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        server.get_batch(timeout=0.5)
        raise AssertionError("get_batch returned with no batch sent")
    except ps.TimedOut:
        print("get_batch timed out")
    finally:
        stop.set()
        ticker.join()
    # Holding the GIL for 0.5 s would have left the other thread a tick or two.
    assert len(ticks) >= 10, "another thread ran %d times during get_batch" % len(ticks)
    print("another thread ran during get_batch")
    ps.barrier("servers+workers", timeout=30)
    (b,) = server.get_batch(timeout=30)
    assert b.pull == [(PULL_KEY, "float32", (8,))], b.pull
    (key, x), = ps.af.arrays(b)
    assert key == 7 and x.dtype == np.float32
    # A result the worker's pull tensor does not fit names both.
    for bad, why, words in (
            ([(PULL_KEY, np.zeros(9, np.float32))], "size",
             "holds 36 bytes of float32, the worker's pull tensor 32 bytes of float32"),
            ([(PULL_KEY, np.zeros(8, np.int32))], "dtype",
             "holds 32 bytes of int32, the worker's pull tensor 32 bytes of float32")):
        try:
            server.respond(b, bad)
            raise AssertionError("respond took a wrong " + why)
        except ValueError as exc:
            assert words in str(exc), exc
            print("respond refused a wrong %s" % why)
    try:
        server.respond(b, [(PULL_KEY + 1, np.zeros(8, np.float32))])
        raise AssertionError("respond took a wrong key")
    except ps.InvalidArgument:
        print("respond refused a wrong key")
    try:
        server.respond(b, [(PULL_KEY, np.zeros((8, 2), np.float32)[:, 0])])
        raise AssertionError("respond took a non-contiguous result")
    except ValueError:
        print("respond refused a non-contiguous result")
    server.respond(b, [(PULL_KEY, x * 2)])
    try:
        server.respond(b, [(PULL_KEY, x * 2)])
        raise AssertionError("respond answered a batch twice")
    except ps.BadState:
        print("respond refused a second answer")
    try:
        b.push
        raise AssertionError("an answered batch's pushes are still readable")
    except ps.BadState:
        pass
    print("PASS server errors")


def work_errors():
    worker = ps.af.Worker()
    out = np.zeros(8, np.float32)
    for push, why in (([(7, np.zeros((8, 2), np.float32)[:, 0])], "non-contiguous"),
                      ([(7, np.zeros(8, np.uint16))], "uint16")):
        try:
            worker.batch_push_pull(push, [(PULL_KEY, out)])
            raise AssertionError("batch_push_pull took a %s tensor" % why)
        except ValueError:
            print("batch_push_pull refused a %s tensor" % why)
    try:
        worker.batch_push_pull([(7, np.zeros(8, np.float32))], [(PULL_KEY, b"12345678" * 4)])
        raise AssertionError("batch_push_pull took a read-only destination")
    except ValueError:
        print("batch_push_pull refused a read-only destination")
    ps.barrier("servers+workers", timeout=30)
    x = np.arange(8, dtype=np.float32)
    worker.batch_push_pull([(7, x)], [(PULL_KEY, out)]).wait(timeout=30)
    assert np.array_equal(out, x * 2), out
    print("PASS worker errors")


def main():
    mode = sys.argv[1]
    ps.init()
    if ps.is_scheduler():
        ps.wait_job_end(timeout=120)
        return
    role = "server" if ps.is_server() else "worker"
    {("server", "sum"): serve_sum, ("worker", "sum"): work_sum,
     ("server", "errors"): serve_errors, ("worker", "errors"): work_errors}[(role, mode)]()
    ps.finalize()


if __name__ == "__main__":
    main()
