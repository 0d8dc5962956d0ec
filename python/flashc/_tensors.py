"""torch tensors as flashc_tensor descriptors (pointer, dtype, device, shape,
strides in elements): views are described, never copied."""
import ctypes

import torch

from . import _cabi, _layout
from .errors import FlashcTypeError, FlashcValueError

_DTYPE_CODES = {
    torch.float32: _cabi.DTYPE_FLOAT32,
    torch.float16: _cabi.DTYPE_FLOAT16,
    torch.bfloat16: _cabi.DTYPE_BFLOAT16,
    torch.float64: _cabi.DTYPE_FLOAT64,
    torch.int32: _cabi.DTYPE_INT32,
}


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


def _descriptor_packer(rank):
    """Writes a flashc_tensor of `rank` dims: shape[rank:] and
    stride[rank:] stay zero."""
    def used(name):
        return not (name.startswith(("shape[", "stride[")) and int(name[-2]) >= rank)
    packer, names, _ = _layout.packer(_cabi.Tensor, used)
    assert names == ("data", "dtype", "device.type", "device.index", "rank",
                     *(f"shape[{i}]" for i in range(rank)),
                     *(f"stride[{i}]" for i in range(rank))), names
    return packer.pack_into


# Indexed by rank (entry 0 unused).
_PACK_OF_RANK = (None, *(_descriptor_packer(r) for r in range(1, _cabi.MAX_RANK + 1)))

#: Bytes of one descriptor, and the alignment descriptors need in a buffer.
DESCRIPTOR_SIZE = ctypes.sizeof(_cabi.Tensor)
DESCRIPTOR_ALIGNMENT = ctypes.alignment(_cabi.Tensor)


def write_descriptor(buffer, offset, t, name):
    """Writes a flashc_tensor describing `t` (which must stay alive while
    the descriptor is used) at `offset` bytes into the ctypes `buffer`."""
    code = _DTYPE_CODES.get(t.dtype)
    if code is None:
        raise FlashcTypeError(_cabi.ERROR_DTYPE, f"{name}: dtype {t.dtype} is not supported")
    if t.is_cuda:
        device, index = _cabi.DEVICE_CUDA, t.get_device()
    elif t.is_cpu:
        device, index = _cabi.DEVICE_CPU, 0
    else:
        raise FlashcValueError(
            _cabi.ERROR_DEVICE, f"{name}: device {t.device} is not supported (cpu or cuda)"
        )
    shape = t.shape
    rank = len(shape)
    if not 1 <= rank <= _cabi.MAX_RANK:
        raise FlashcValueError(
            _cabi.ERROR_RANK, f"{name}: rank {rank} is outside 1..{_cabi.MAX_RANK}"
        )
    _PACK_OF_RANK[rank](buffer, offset, t.data_ptr(), code, device, index, rank, *shape,
                        *t.stride())

