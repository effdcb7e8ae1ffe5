#!/usr/bin/env python3
"""A toy attention-FFN split through ps.af (StepMesh's shape), in bfloat16.

Attention instances are the workers, FFN instances the servers. Every step
each worker runs a small self-attention over its tokens and sends the
hidden states (bfloat16) to every FFN server in one batch; FFN server s
holds the s-th column block of the FFN's weights (tensor parallel) and
answers relu(h @ W1_s) @ W2_s; the worker adds the servers' partial outputs
and checks them against the whole FFN computed locally in float32.

    PYTHONPATH=<the ps package> python3 tools/launch/ps_launch.py -s 2 -w 2 -- \\
        python3 examples/python/af_toy.py --steps 10

or `bazel run //examples/python:af_toy -- -s 2 -w 2 -- --steps 10`. Every
worker prints one line per step with the largest error against the local
FFN, and exits 1 when an answer is off by more than bfloat16 rounding.
"""
import argparse
import os
import sys

import torch

import ps
import ps.af

HIDDEN_KEY = 1
OUT_KEY = 2


def ffn_weights(hidden, ffn):
    """The whole FFN (every node derives the same weights)."""
    g = torch.Generator().manual_seed(7)
    w1 = torch.randn(hidden, ffn, generator=g) / hidden ** 0.5
    w2 = torch.randn(ffn, hidden, generator=g) / ffn ** 0.5
    return w1, w2


def attention(x, wq, wk, wv):
    q, k, v = x @ wq, x @ wk, x @ wv
    return torch.softmax(q @ k.T / q.shape[1] ** 0.5, dim=-1) @ v


def serve(args):
    """An FFN server: its column block of the weights, one batch of every
    worker per step."""
    server = ps.af.Server()
    s, n = ps.rank(), ps.num_servers()
    w1, w2 = ffn_weights(args.hidden, args.ffn)
    cols = slice(s * args.ffn // n, (s + 1) * args.ffn // n)
    w1_s, w2_s = w1[:, cols].contiguous(), w2[cols, :].contiguous()
    for _ in range(args.steps):
        for batch in server.get_batch(timeout=60):
            (_, h), = ps.af.tensors(batch)
            out = (torch.relu(h.float() @ w1_s) @ w2_s).to(torch.bfloat16)
            server.respond(batch, [(OUT_KEY, out)])


def attend(args):
    """An attention worker: attention here, the FFN on the servers."""
    worker = ps.af.Worker()
    rank, servers = ps.rank(), ps.num_servers()
    g = torch.Generator().manual_seed(100 + rank)
    wq, wk, wv = (torch.randn(args.hidden, args.hidden, generator=g) / args.hidden ** 0.5
                  for _ in range(3))
    w1, w2 = ffn_weights(args.hidden, args.ffn)
    print("worker %d of %d joined over van %s, %d FFN servers"
          % (rank, ps.num_workers(), ps.van_name(), servers), flush=True)
    for step in range(args.steps):
        x = torch.randn(args.tokens, args.hidden, generator=g)
        h = attention(x, wq, wk, wv).to(torch.bfloat16)
        parts = [torch.empty(args.tokens, args.hidden, dtype=torch.bfloat16)
                 for _ in range(servers)]
        worker.push_pull([h], [HIDDEN_KEY], parts, [OUT_KEY] * servers).wait(timeout=60)
        got = sum(p.float() for p in parts)
        want = torch.relu(h.float() @ w1) @ w2
        err = (got - want).abs().max().item()
        # Each partial output is rounded to bfloat16 (8 bits of mantissa).
        bound = servers * 2 ** -7 * want.abs().max().item() + 1e-3
        ok = err <= bound
        print("worker %d step %d: %d tokens through %d FFN servers, max error %.5f (bound %.5f) %s"
              % (rank, step, args.tokens, servers, err, bound, "ok" if ok else "WRONG"),
              flush=True)
        if not ok:
            return 1
    print("worker %d: all %d steps matched the local FFN" % (rank, args.steps), flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--ffn", type=int, default=256)
    args = ap.parse_args()
    ps.init(af=True)  # busy polling, as StepMesh
    role = os.environ.get("DMLC_ROLE", "worker")
    if role == "scheduler":
        ps.wait_job_end()
        return 0
    if role == "server":
        serve(args)
        ps.wait_job_end()
        return 0
    rc = attend(args)
    ps.finalize()
    return rc


if __name__ == "__main__":
    sys.exit(main())
