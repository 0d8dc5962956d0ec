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
    if x is None or x.stride()[-1] == 1:
        return x
    x = x.contiguous()
    if x.stride()[-1] != 1 and x.numel() == 0:
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


def _alike(tensors, stats, dtype, rank, cuda, index):
    """Whether `tensors` have `dtype` and `rank` and, with stats (of rank
    one less), the device (cuda, index)."""
    for t in tensors:
        if t.dtype is not dtype or t.dim() != rank or not (
                t.is_cuda and t.get_device() == index if cuda else t.is_cpu):
            return False
    return stats.dim() == rank - 1 and (
        stats.is_cuda and stats.get_device() == index if cuda else stats.is_cpu)


# struct.Struct.pack_into of `count` alike descriptors of `rank` and one of
# rank - 1, by (count, rank).
_ALIKE_PACKERS = {}


def write_call_descriptors(buffer, offset, alike, stats, others, names, checked=0):
    """Descriptors of the tensors of one call from byte `offset` of
    `buffer`, back to back: `alike` (its q-like tensors: one dtype, device
    and rank when the call is valid), `stats` (its LSE, on their device
    with one dimension less) and `others` (the optional tensors, None where
    absent); returns their addresses in that order, 0 (NULL) for None.
    `names`: the C names of all of them, in that order. `checked`: how many
    of the alike tensors, counted from the end, the caller knows to be like
    the first (it checked them, or made them like it), so they are not
    asked their dtype and device; when that is all of them, stats too is
    known to be on their device.

    Alike tensors and their LSE (every valid call) are written in one pack;
    anything else goes through write_descriptors, which describes each
    tensor as it is (the C library then names any mismatch) or names one it
    cannot take. (One function, as every call runs it.)"""
    first = alike[0]
    dtype = first.dtype
    code = _DTYPE_CODES.get(dtype)
    stats_code = None if stats is None else _DTYPE_CODES.get(stats.dtype)
    rank, count = first.dim(), len(alike)
    cuda = first.is_cuda
    index = first.get_device() if cuda else 0
    written = (code is not None and stats_code is not None and 1 < rank <= _cabi.MAX_RANK
               and (cuda or first.is_cpu)
               and (checked == count or _alike(alike[1:count - checked], stats, dtype, rank,
                                               cuda, index)))
    if written:
        device = _cabi.DEVICE_CUDA if cuda else _cabi.DEVICE_CPU
        values = []
        for t in alike:
            values += (t.data_ptr(), code, device, index, rank, *t.shape, *t.stride())
        pack = _ALIKE_PACKERS.get((count, rank))
        if pack is None:
            pack = _ALIKE_PACKERS[count, rank] = _run_packer((rank,) * count + (rank - 1,))
        try:
            pack(buffer, offset, *values, stats.data_ptr(), stats_code, device, index,
                 rank - 1, *stats.shape, *stats.stride())
        except struct.error:  # (write_descriptors rewrites them all, naming any misfit)
            written = False
    if not written:
        return write_descriptors(buffer, offset, (*alike, stats, *others), names)
    base = ctypes.addressof(buffer) + offset
    addresses = [base + i * DESCRIPTOR_SIZE for i in range(count + 1)]
    if others.count(None) == len(others):
        return addresses + [0] * len(others)
    return addresses + write_descriptors(buffer, offset + (count + 1) * DESCRIPTOR_SIZE, others,
                                         names[count + 1:])


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

