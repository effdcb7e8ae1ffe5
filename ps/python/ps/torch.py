"""ps for PyTorch, in BytePS's shape: a training script changes three lines.

    import ps.torch as bps
    bps.init()
    opt = bps.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    bps.broadcast_parameters(model.state_dict(), root_rank=0)

push_pull(tensor, name) sums a tensor over every worker through the
summation servers (python3 -m ps.server or ps.SumServer), in place and
without a copy in Python: a CPU tensor as its memory, a CUDA tensor as its
device memory (__cuda_array_interface__), whose parts ps sends once the
work queued on the tensor's current stream is done (a van without device
memory stages each part through page-locked memory of ps's own, as BytePS
stages GPU tensors). The tensor is split into parts of at most
BYTEPS_PARTITION_BYTES bytes (one key each, spread over the servers), and
average=True divides the sum by the number of workers. Every worker must
push_pull the same names in the same order (a name's first use declares
it, as in BytePS). Tensors must be contiguous.
"""
import torch

import ps
from ps import _job, _ps
from ps._tensor import as_buffer

_state = {"worker": None, "tensors": {}, "next_id": 0}

_DTYPES = {
    torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
    torch.bfloat16: "bfloat16", torch.int8: "int8", torch.int16: "int16", torch.int32: "int32",
    torch.int64: "int64", torch.uint8: "uint8",
}


def init(**settings):
    """Joins the job (ps.init) as a worker and opens the KV worker of the
    summation servers (app 0)."""
    if not ps.is_started():
        ps.init(**settings)
    if _state["worker"] is None:
        _state["worker"] = ps.KVWorker(app_id=0)


def shutdown():
    """Frees the declared tensors and leaves the job (ps.finalize)."""
    for t in _state["tensors"].values():
        t.close()
    _state["tensors"].clear()
    _state["worker"] = None
    _state["next_id"] = 0
    ps.finalize()


def rank():
    return ps.rank()


def size():
    return ps.num_workers()


def local_rank():
    return ps.rank()


def _declared(name, tensor):
    t = _state["tensors"].get(name)
    nbytes = tensor.numel() * tensor.element_size()
    dtype = _DTYPES.get(tensor.dtype)
    if dtype is None:
        raise ValueError("push_pull of %s: ps does not sum %s tensors" % (name, tensor.dtype))
    if t is None:
        if _state["worker"] is None:
            raise ps.BadState("ps.torch is not initialised (call ps.torch.init())")
        t = _ps.SumTensor(_state["worker"], _state["next_id"], dtype, nbytes)
        _state["next_id"] += 1
        _state["tensors"][name] = t
    elif t.nbytes != nbytes or t.dtype != dtype:
        raise ValueError("push_pull of %s: declared as %d bytes of %s, now %d bytes of %s"
                         % (name, t.nbytes, t.dtype, nbytes, dtype))
    return t


class _Pending:
    __slots__ = ("sum_tensor", "tensor", "average")

    def __init__(self, sum_tensor, tensor, average):
        self.sum_tensor = sum_tensor
        self.tensor = tensor
        self.average = average


def push_pull_async(tensor, name, average=True):
    """Starts summing tensor (in place) over every worker; synchronize() the
    returned handle before reading or changing the tensor."""
    if not tensor.is_contiguous():
        raise ValueError("push_pull of %s: the tensor is not contiguous" % name)
    t = _declared(name, tensor)
    buf, _ = as_buffer(tensor)
    if tensor.device.type == "cuda":
        # What is summed is the tensor's value once the work queued so far
        # on its current stream (the gradient's producer) is done; ps waits
        # for that off this thread.
        t.start(buf, stream=torch.cuda.current_stream(tensor.device).cuda_stream)
    else:
        t.start(buf)
    return _Pending(t, tensor, average)


def synchronize(handle, timeout=None):
    """Waits for a push_pull_async; returns its tensor, now the sum (or the
    average)."""
    handle.sum_tensor.wait(timeout)
    if handle.average:
        n = size()
        if handle.tensor.is_floating_point():
            handle.tensor.div_(n)
        else:
            handle.tensor.floor_divide_(n)
    return handle.tensor


def push_pull(tensor, name, average=True):
    """Sums tensor in place over every worker (average: divided by their
    number) and returns it."""
    return synchronize(push_pull_async(tensor, name, average))


def broadcast_parameters(params, root_rank=0):
    """Gives every worker root_rank's values: params is a state_dict or an
    iterable of (name, tensor). Other workers zero theirs and everyone
    push_pulls the sum, as BytePS does."""
    items = sorted(params.items() if isinstance(params, dict) else params, key=lambda kv: kv[0])
    pending = []
    with torch.no_grad():
        for name, p in items:
            data = p.data if isinstance(p, torch.Tensor) else p
            if rank() != root_rank:
                data.zero_()
            pending.append(push_pull_async(data, "Parameter." + name, average=False))
        for h in pending:
            synchronize(h)


class DistributedOptimizer:
    """Wraps a torch optimizer so that step() uses gradients averaged over
    the workers. Each gradient's push_pull starts from a hook the moment
    backward() has accumulated it, so that communication overlaps the rest
    of the backward pass (as BytePS and Horovod do); step() starts any that
    did not start yet, waits for all, then runs the wrapped optimizer's
    step. Every gradient is declared here, in name order, so that each
    name has the same keys on every worker whatever order backward() gives
    the gradients in. With backward_passes_per_step=N, gradients accumulate
    over N backward passes and are averaged at every N-th step().
    early_starts counts the push_pulls started during backward(). Other
    attributes are the wrapped optimizer's."""

    def __init__(self, optimizer, named_parameters=None, backward_passes_per_step=1):
        self._opt = optimizer
        if named_parameters is not None:
            named = list(named_parameters)
        else:
            named = [("param.%d.%d" % (g, i), p) for g, group in enumerate(optimizer.param_groups)
                     for i, p in enumerate(group["params"])]
        names = [n for n, _ in named]
        if len(set(names)) != len(names):
            raise ValueError("DistributedOptimizer: parameter names must be unique")
        if backward_passes_per_step < 1:
            raise ValueError("DistributedOptimizer: backward_passes_per_step must be at least 1")
        self._named = sorted(named, key=lambda kv: kv[0])
        self._passes = backward_passes_per_step
        self._count = 0
        self._pending = {}  # name -> push_pull handle of this step
        self._seen = {}     # name -> backward passes accumulated since the last average
        self._accumulators = []  # kept alive: their hooks go with them
        self.early_starts = 0
        for name, p in self._named:
            if p.requires_grad:
                _declared("Gradient." + name, p)
                self._hook(name, p)

    def _hook(self, name, p):
        # The gradient accumulator of p: its hook runs once backward() has
        # added this pass's gradient into p.grad.
        accumulator = p.expand_as(p).grad_fn.next_functions[0][0]

        def ready(*_):
            seen = self._seen.get(name, 0) + 1
            self._seen[name] = seen
            if seen > self._passes or name in self._pending:
                raise ps.BadState("DistributedOptimizer: the gradient of %s was computed more "
                                  "than backward_passes_per_step (%d) times before step()"
                                  % (name, self._passes))
            if seen == self._passes and p.grad is not None:
                self._pending[name] = push_pull_async(p.grad, "Gradient." + name, average=True)
                self.early_starts += 1

        accumulator.register_hook(ready)
        self._accumulators.append(accumulator)

    def synchronize(self):
        """Averages every gradient over the workers now: starts those that
        backward() did not, and waits for all."""
        for name, p in self._named:
            if name not in self._pending and p.grad is not None:
                self._pending[name] = push_pull_async(p.grad, "Gradient." + name, average=True)
        try:
            for name, _ in self._named:
                h = self._pending.get(name)
                if h is not None:
                    synchronize(h)
        finally:
            self._pending.clear()
            self._seen.clear()

    def step(self, closure=None):
        self._count += 1
        if self._count % self._passes == 0:
            self.synchronize()
            return self._opt.step(closure)
        return None

    def zero_grad(self, *args, **kwargs):
        return self._opt.zero_grad(*args, **kwargs)

    def __getattr__(self, attr):
        return getattr(self._opt, attr)
