"""ps.af: the attention-FFN tensor app (StepMesh's API) from Python.

Attention instances are workers, FFN instances servers:

    import ps, ps.af
    ps.init(af=True)          # busy polling, as StepMesh (PS_BUSY_POLL=0 turns it off)
    if ps.is_worker():
        w = ps.af.Worker()
        h = w.push_pull([x], [0], [out_s0, out_s1], [100, 100])   # pull: one per server
        h.wait()
    else:
        s = ps.af.Server()
        for batch in s.get_batch():                # one batch of every worker
            xs = ps.af.tensors(batch)              # [(key, tensor)], zero-copy
            s.respond(batch, [(key, result) for key, dtype, shape in batch.pull])

Tensors are (key, tensor) pairs: numpy arrays, anything with the buffer
protocol, CPU or CUDA torch tensors (bfloat16 included), or other device
memory with __cuda_array_interface__; their dtype and shape travel with
them, and nothing is copied in Python. A server's result of another dtype
or size than the worker's pull tensor raises ValueError in respond. A
worker's tensors must stay untouched until its batch's handle says it
ended; a server's results are held by ps as long as the transport needs
them. The pushed tensors a server sees are read-only views of where they
landed, valid until the batch is answered.
"""
import warnings

import numpy as np

from ps import _job, _ps
from ps._ps import AFBatch as Batch, AFHandle as Handle  # noqa: F401

# numpy element types of the dtypes a batch carries (bfloat16 as its bits).
_NUMPY = {
    "float32": np.float32, "float64": np.float64, "float16": np.float16, "bfloat16": np.uint16,
    "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64, "uint8": np.uint8,
}


class Worker(_ps.AFWorker):
    """An attention worker: batch_push_pull(push, pull) sends every push
    tensor to every server and names where each server's results go (pull
    is server-major: with k slots per server, pull[i*k + j] is server i's
    j-th). Returns a Handle: wait(timeout) ends it, traces()
    reads the per-slot stamps when STEPMESH_ENABLE_TRACE=1."""

    def __init__(self, app_id=0, customer_id=0):
        super().__init__(app_id, customer_id)
        _job._track(self)

    def push_pull(self, push_tensors, push_keys, pull_tensors, pull_keys):
        """StepMesh's fserver_lib.push_pull: tensors and their keys apart."""
        if len(push_tensors) != len(push_keys) or len(pull_tensors) != len(pull_keys):
            raise ValueError("every tensor needs one key")
        return self.batch_push_pull(list(zip(push_keys, push_tensors)),
                                    list(zip(pull_keys, pull_tensors)))


class Server(_ps.AFServer):
    """An FFN server that polls: get_batch(timeout) returns one Batch of
    every worker (by rank); respond(batch, [(key, tensor)]) answers its pull
    slots (ps.InvalidArgument for a key or a size that fits no unanswered
    slot); register_recv_tensor(tensor, worker_ranks, keys) names where
    pushes land (StepMesh's register_recv_buffer)."""

    def __init__(self, app_id=0):
        super().__init__(app_id)
        _job._track(self, serves=True)

    def close(self):
        _job._untrack(self)
        super().close()

    register_recv_buffer = _ps.AFServer.register_recv_tensor


def arrays(batch):
    """The batch's pushed tensors as [(key, numpy array)] without a copy
    (read-only; bfloat16 as uint16 bits), valid until the batch is answered."""
    return [(key, np.frombuffer(mv, dtype=_NUMPY[dtype]).reshape(shape))
            for key, mv, dtype, shape in batch.push]


def tensors(batch):
    """The batch's pushed tensors as [(key, CPU torch tensor)] without a
    copy (bfloat16 as bfloat16), valid until the batch is answered; do not
    write to them."""
    import torch

    out = []
    with warnings.catch_warnings():
        # The views are read-only; torch warns about every such array.
        warnings.simplefilter("ignore", UserWarning)
        for key, mv, dtype, shape in batch.push:
            # torch has no uint16: bfloat16 bits come through int16.
            npdt = np.int16 if dtype == "bfloat16" else _NUMPY[dtype]
            t = torch.from_numpy(np.frombuffer(mv, dtype=npdt).reshape(shape))
            out.append((key, t.view(torch.bfloat16) if dtype == "bfloat16" else t))
    return out
