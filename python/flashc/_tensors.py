"""torch tensors as flashc_tensor descriptors (pointer, dtype, device, shape,
strides in elements): views are described, never copied."""
import ctypes

import torch

from . import _cabi
from .errors import FlashcTypeError, FlashcValueError

_DTYPE_CODES = {
    torch.float32: _cabi.DTYPE_FLOAT32,
    torch.float16: _cabi.DTYPE_FLOAT16,
    torch.bfloat16: _cabi.DTYPE_BFLOAT16,
    torch.float64: _cabi.DTYPE_FLOAT64,
    torch.int32: _cabi.DTYPE_INT32,
}

_DEVICE_CODES = {"cpu": _cabi.DEVICE_CPU, "cuda": _cabi.DEVICE_CUDA}


def maybe_contiguous(x):
    """x itself unless its last dim is strided (the one layout the library
    cannot describe), as flash_attn does."""
    if x is None or x.stride(-1) == 1:
        return x
    x = x.contiguous()
    if x.stride(-1) != 1 and x.numel() == 0:
        # contiguous() keeps the strides of a tensor without elements (an
        # expanded empty gradient, say); a fresh one has standard strides.
        x = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    return x


def descriptor(t, name):
    """A flashc_tensor describing `t` (which must stay alive while the
    descriptor is used)."""
    code = _DTYPE_CODES.get(t.dtype)
    if code is None:
        raise FlashcTypeError(_cabi.ERROR_DTYPE, f"{name}: dtype {t.dtype} is not supported")
    device = _DEVICE_CODES.get(t.device.type)
    if device is None:
        raise FlashcValueError(
            _cabi.ERROR_DEVICE, f"{name}: device {t.device} is not supported (cpu or cuda)"
        )
    if not 1 <= t.dim() <= _cabi.MAX_RANK:
        raise FlashcValueError(
            _cabi.ERROR_RANK, f"{name}: rank {t.dim()} is outside 1..{_cabi.MAX_RANK}"
        )
    desc = _cabi.Tensor()
    desc.data = t.data_ptr()
    desc.dtype = code
    desc.device.type = device
    desc.device.index = t.device.index if t.device.type == "cuda" else 0
    desc.rank = t.dim()
    for i, (extent, stride) in enumerate(zip(t.shape, t.stride())):
        desc.shape[i] = extent
        desc.stride[i] = stride
    return desc


def pointer(t, name):
    """A pointer to a descriptor of `t`, or NULL for None."""
    if t is None:
        return None
    return ctypes.pointer(descriptor(t, name))
