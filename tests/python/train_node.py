"""A worker of the data-parallel training job of test_train.py (the
scheduler and servers are `python3 -m ps.server`).

  train_node.py STEPS [DEVICE]      DEVICE: cpu (default) or cuda

Each of the W workers trains the same MLP on its share of every batch of a
synthetic regression set (fixed seeds) through ps.torch: gradients averaged
by the summation servers, the initial parameters broadcast from worker 0
(every worker starts from its own random ones). Then it trains the same
model alone on the whole batches and checks that both sets of parameters
agree to float tolerance, and that every gradient's push_pull started
during backward(). With DEVICE cuda the models, data and gradients live on
the GPU (ps.torch hands the CUDA gradients to ps as device memory through
__cuda_array_interface__, their current stream saying when they are
ready). Prints the loss per step and PASS.
"""
import sys

import torch

import ps.torch as bps

IN, HIDDEN, PER_WORKER = 8, 32, 16
LR, MOMENTUM = 0.05, 0.9


DEVICE = torch.device(sys.argv[2] if len(sys.argv) > 2 else "cpu")


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.Tanh(),
                               torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.Tanh(),
                               torch.nn.Linear(HIDDEN, 1)).to(DEVICE)


def make_data(steps, workers):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(steps, workers * PER_WORKER, IN, generator=g)
    w = torch.randn(IN, 1, generator=g)
    y = torch.tanh(x @ w) + 0.05 * torch.randn(steps, workers * PER_WORKER, 1, generator=g)
    return x.to(DEVICE), y.to(DEVICE)


def train(model, opt, x, y, rows, log):
    losses = []
    for step in range(x.shape[0]):
        xb, yb = x[step, rows], y[step, rows]
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if log:
            print("step %d loss %.6f" % (step, loss.item()))
    return losses


def main():
    steps = int(sys.argv[1])
    bps.init()
    rank, size = bps.rank(), bps.size()
    x, y = make_data(steps, size)

    model = make_model(seed=1000 + rank)
    opt = bps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM),
                                   named_parameters=model.named_parameters())
    bps.broadcast_parameters(model.state_dict(), root_rank=0)
    mine = slice(rank * PER_WORKER, (rank + 1) * PER_WORKER)
    train(model, opt, x, y, mine, log=True)
    # Every gradient's push_pull started from backward(), none from step().
    num_params = len(list(model.parameters()))
    assert opt.early_starts == steps * num_params, \
        "%d of %d push_pulls overlapped backward()" % (opt.early_starts, steps * num_params)

    reference = make_model(seed=1000)  # worker 0's initial parameters
    ref_opt = torch.optim.SGD(reference.parameters(), lr=LR, momentum=MOMENTUM)
    train(reference, ref_opt, x, y, slice(None), log=False)
    with torch.no_grad():
        before = torch.nn.functional.mse_loss(make_model(seed=1000)(x), y).item()
        after = torch.nn.functional.mse_loss(reference(x), y).item()
    assert after < 0.7 * before, "the run did not learn: loss %.4f -> %.4f" % (before, after)

    worst = 0.0
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        diff = (p.detach() - q.detach()).abs().max().item()
        worst = max(worst, diff)
        assert torch.allclose(p, q, rtol=1e-4, atol=1e-5), \
            "%s differs from the single-process run by %g" % (name, diff)
    moved = max((p.detach() - q.detach()).abs().max().item() for p, q in
                zip(reference.parameters(), make_model(seed=1000).parameters()))
    assert moved > 1e-3, "training did not change the parameters"
    print("parameters match the single-process run after %d steps (max diff %.3g, moved %.3g); "
          "loss on the whole set %.4f -> %.4f" % (steps, worst, moved, before, after))
    print("PASS worker %d (%s)" % (rank, DEVICE))
    bps.shutdown()


if __name__ == "__main__":
    main()
