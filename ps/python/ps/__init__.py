"""ps: parameter server and tensor transfer, from Python.

    import ps
    ps.init()                      # DMLC_* from the environment (or keywords)
    w = ps.KVWorker()
    w.push([1, 2], numpy_array).wait()
    out = w.pull([1, 2], numpy.empty_like(numpy_array)).wait()
    ps.finalize()

Buffers (numpy arrays, bytes, memoryview, anything with the buffer
protocol, CPU and CUDA torch tensors, anything with __cuda_array_interface__,
ps.DeviceArray) are sent and received without a copy: leave them alone
until the request's handle says it ended. Blocking calls release the GIL. ps statuses
raise ps.Error subclasses (ps.TimedOut, ps.PeerGone, ...).
"""
from ps._ps import (  # noqa: F401  (the public names)
    AuthError, BadState, CallError, Cancelled, ConfigError, DeviceArray, Error, Handle,
    InvalidArgument,
    JobError, LinkError, LinkFailed, NotFound, PeerError, PeerGone, ProtocolError, Request,
    ResourceError, Shutdown, SumTensor, TimedOut, TimeError, Unsupported,
)
from ps._job import (  # noqa: F401
    barrier, finalize, group_size, init, instance, is_started, my_id, num_servers, num_workers,
    rank, role, van_name,
    is_scheduler, is_server, is_worker, wait_job_end,
)
from ps._kv import KVServer, KVWorker, SumServer  # noqa: F401
from ps._tensor import as_buffer, empty  # noqa: F401

DTYPES = ("float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64",
          "uint8", "uint16", "uint32", "uint64", "char")

from ps import _ps as _core  # noqa: E402

# Objects without the buffer protocol (torch tensors) go through as_buffer.
_core.set_converter(as_buffer)
