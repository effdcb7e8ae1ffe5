"""Objects ps sends without a copy: anything with the buffer protocol, and
PyTorch CPU tensors (through .numpy(), which shares the tensor's memory)."""
import sys


def as_buffer(obj, dtype=None):
    """(buffer, dtype) for obj: obj itself when it has the buffer protocol; a
    CPU torch tensor as a numpy view of its memory (bfloat16 as int16 bits
    with dtype 'bfloat16'). ValueError for a tensor ps cannot carry."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(obj, torch.Tensor):
        return obj, dtype
    if obj.device.type != "cpu":
        raise ValueError("a %s tensor: this build of ps carries CPU tensors only "
                         "(copy it with .cpu() first)" % obj.device.type)
    t = obj.detach()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy(), "bfloat16"
    if t.dtype == torch.bool or t.is_complex():
        raise ValueError("ps does not carry %s tensors" % t.dtype)
    return t.numpy(), dtype
