#!/usr/bin/env python3
"""Data-parallel training of a small PyTorch MLP through ps, BytePS style.

Run every process of the job with the launcher (one scheduler, S summation
servers, W workers; the role comes from DMLC_ROLE):

    PYTHONPATH=<the ps package> python3 tools/launch/ps_launch.py -s 1 -w 2 -- \\
        python3 examples/python/train_mlp.py --steps 30

or `bazel run //examples/python:train_mlp -- -w 2 -s 1 -- --steps 30` (launcher options,
then `--`, then the script's).
The scheduler and the servers run the summation server (python3 -m
ps.server); each worker trains on its share of every batch of a synthetic
regression set and prints its loss per step. The three lines that make a
single-process script data-parallel are marked.
"""
import argparse
import os
import sys

ROLE = os.environ.get("DMLC_ROLE", "worker")


class MLP:
    """A two-hidden-layer regressor."""

    def __init__(self, torch, width):
        torch.manual_seed(1 + int(os.environ.get("DMLC_RANK", "0")))
        nn = torch.nn
        self.net = nn.Sequential(nn.Linear(16, width), nn.ReLU(), nn.Linear(width, width),
                                 nn.ReLU(), nn.Linear(width, 1))


def batches(torch, steps, per_worker, workers, rank):
    """Every worker's share of the same global batches (fixed seed)."""
    gen = torch.Generator().manual_seed(2024)
    truth = torch.randn(16, 1, generator=gen)
    for _ in range(steps):
        x = torch.randn(workers * per_worker, 16, generator=gen)
        y = (x @ truth).relu() + 0.01 * torch.randn(workers * per_worker, 1, generator=gen)
        rows = slice(rank * per_worker, (rank + 1) * per_worker)
        yield x[rows], y[rows]


def train(args):
    import torch

    import ps
    import ps.torch as bps

    bps.init()                                                       # 1
    print("worker %d of %d joined over van %s" % (bps.rank(), bps.size(), ps.van_name()))
    model = MLP(torch, args.width).net
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    opt = bps.DistributedOptimizer(opt, named_parameters=model.named_parameters())  # 2
    bps.broadcast_parameters(model.state_dict(), root_rank=0)       # 3
    for step, (x, y) in enumerate(batches(torch, args.steps, args.batch, bps.size(), bps.rank())):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("worker %d step %d loss %.5f" % (bps.rank(), step, loss.item()), flush=True)
    bps.shutdown()
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=32, help="rows per worker and step")
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    args = ap.parse_args()
    if ROLE in ("scheduler", "server"):
        from ps import server
        return server.main([])
    return train(args)


if __name__ == "__main__":
    sys.exit(main())
