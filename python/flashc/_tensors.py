"""torch tensors as flashc_tensor descriptors (pointer, dtype, device, shape,
strides in elements): views are described, never copied."""
import ctypes
import struct

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
    return packer


# Indexed by rank (entry 0 unused).
_PACKER_OF_RANK = (None, *(_descriptor_packer(r) for r in range(1, _cabi.MAX_RANK + 1)))
_PACK_OF_RANK = (None, *(p.pack_into for p in _PACKER_OF_RANK[1:]))

# One struct for a run of descriptors, by the ranks in it: descriptors lie
# back to back (their size is a multiple of their alignment).
_RUN_PACKERS = {}


def _run_packer(ranks):
    pack = _RUN_PACKERS.get(ranks)
    if pack is None:
        fmt = "=" + "".join(_PACKER_OF_RANK[r].format[1:] for r in ranks)
        pack = _RUN_PACKERS[ranks] = struct.Struct(fmt).pack_into
    return pack

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


def write_descriptors(buffer, offset, tensors, names):
    """Descriptors of the non-None `tensors` one after another from byte
    `offset` of `buffer`; returns their addresses, 0 (NULL) for None. The
    same as write_descriptor in a loop, with the common case (a supported
    dtype, rank and device) in one pass and one pack: this runs for every
    tensor of every call, so it keeps to a few attribute reads each."""
    address = ctypes.addressof(buffer) + offset
    addresses, ranks, values = [], [], []
    codes, cpu, cuda, max_rank = _DTYPE_CODES, _cabi.DEVICE_CPU, _cabi.DEVICE_CUDA, _cabi.MAX_RANK
    for t in tensors:
        if t is None:
            addresses.append(0)
            continue
        shape = t.shape
        rank = len(shape)
        code = codes.get(t.dtype)
        if code is None or not 0 < rank <= max_rank:
            break
        if t.is_cuda:
            values += (t.data_ptr(), code, cuda, t.get_device(), rank, *shape, *t.stride())
        elif t.is_cpu:
            values += (t.data_ptr(), code, cpu, 0, rank, *shape, *t.stride())
        else:
            break
        ranks.append(rank)
        addresses.append(address)
        address += DESCRIPTOR_SIZE
    else:
        if ranks:
            _run_packer(tuple(ranks))(buffer, offset, *values)
        return addresses
    # A tensor the library cannot take: write_descriptor raises, naming it.
    for t, name in zip(tensors, names):
        if t is not None:
            write_descriptor(buffer, offset, t, name)
    raise AssertionError("write_descriptors: an unsupported tensor was not reported")

