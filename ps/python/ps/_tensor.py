"""Objects ps sends without a copy: anything with the buffer protocol,
anything describing device memory with __cuda_array_interface__ (CUDA
torch tensors, CuPy and Numba arrays, ps.DeviceArray), and PyTorch CPU
tensors (through .numpy(), which shares the tensor's memory)."""
import sys


def as_buffer(obj, dtype=None):
    """(buffer, dtype) for obj: obj itself when it has the buffer protocol; a
    CPU torch tensor as a numpy view of its memory, a CUDA one as itself
    (its __cuda_array_interface__); bfloat16 as int16 bits with dtype
    'bfloat16'. ValueError for a tensor ps cannot carry."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(obj, torch.Tensor):
        return obj, dtype
    if obj.device.type not in ("cpu", "cuda"):
        raise ValueError("a %s tensor: ps carries CPU and CUDA tensors only (copy it with "
                         ".cpu() first)" % obj.device.type)
    t = obj.detach()
    if t.dtype == torch.bool or t.is_complex():
        raise ValueError("ps does not carry %s tensors" % t.dtype)
    if t.dtype == torch.bfloat16:
        t, dtype = t.view(torch.int16), "bfloat16"
    return (t if t.device.type == "cuda" else t.numpy()), dtype


def empty(shape, dtype="float32", align=4096):
    """An uninitialised numpy array whose data starts on an `align`-byte
    boundary (a page by default). On some hosts the kernel copies large
    buffers that do not start on a page (numpy's own allocations: 16 bytes
    past one) into a TCP socket at well under its full speed; the TCP van
    then sends them from an aligned copy (PS_TCP_ALIGN_COPY), and
    page-aligned arrays save that copy: docs/PERF.md, "Python"."""
    import numpy as np

    dt = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64)) if np.ndim(shape) else int(shape)
    nbytes = count * dt.itemsize
    raw = np.empty(nbytes + align, dtype=np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off:off + nbytes].view(dt).reshape(shape)
