"""A worker of the ps.torch job of test_torch.py (scheduler and servers:
python3 -m ps.server).

Every worker push_pulls tensors of each dtype the summation server sums,
with values that depend on its rank, and checks every element of the sum
(average=False) and of the average; a tensor larger than
BYTEPS_PARTITION_BYTES travels as several parts; an operation the package
refuses raises ValueError. Prints PASS.
"""
import torch

import ps.torch as bps

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
          torch.int16, torch.int32, torch.int64, torch.uint8)


def rank_values(rank, n, dtype):
    # Small integers: exact in every dtype, so the sum can be compared exactly.
    return ((torch.arange(n) % 7) + rank + 1).to(dtype)


def main():
    bps.init()
    rank, size = bps.rank(), bps.size()
    for dtype in DTYPES:
        t = rank_values(rank, 1000, dtype)
        got = bps.push_pull(t, name="sum.%s" % dtype, average=False)
        want = sum(rank_values(r, 1000, torch.float64) for r in range(size)).to(dtype)
        assert got is t and torch.equal(t, want), "sum of %s: %s != %s" % (dtype, t[:8], want[:8])
        print("sum %s ok" % dtype)
    # Averages, and a tensor of several parts (the test sets the part size).
    big = torch.full((300, 1000), float(rank + 1))
    bps.push_pull(big, name="big", average=True)
    assert torch.all(big == sum(r + 1 for r in range(size)) / size), big.flatten()[:4]
    t = bps._state["tensors"]["big"]
    assert t.num_parts > 1, "the 1.2 MB tensor travelled as %d part(s)" % t.num_parts
    print("average over %d parts ok" % t.num_parts)
    # Rounds: the same name again sums the new values.
    for step in range(3):
        x = torch.full((64,), float(step * 10 + rank))
        bps.push_pull(x, name="rounds", average=False)
        assert torch.all(x == sum(step * 10 + r for r in range(size)))
    # Async: several in flight, then synchronize.
    xs = [torch.full((128,), float(i + rank)) for i in range(4)]
    hs = [bps.push_pull_async(x, "async.%d" % i, average=False) for i, x in enumerate(xs)]
    for i, h in enumerate(hs):
        assert torch.all(bps.synchronize(h) == sum(i + r for r in range(size)))
    # Refusals, before anything is sent.
    for what, fn in (
            ("contiguous", lambda: bps.push_pull(torch.zeros(8, 8).t(), "nc")),
            ("declared", lambda: bps.push_pull(torch.zeros(65), "rounds")),
            ("declared", lambda: bps.push_pull(torch.zeros(64, dtype=torch.float64), "rounds")),
            ("does not sum", lambda: bps.push_pull(torch.zeros(4, dtype=torch.bool), "b"))):
        try:
            fn()
        except ValueError as exc:
            assert what in str(exc), (what, str(exc))
        else:
            raise AssertionError("expected ValueError (%s)" % what)
    print("refusals ok")
    print("PASS worker %d" % rank)
    bps.shutdown()


if __name__ == "__main__":
    main()
