"""The tensor descriptors the package hands the C library: what the one-pack
writer of a call's tensors (_tensors.write_call_descriptors) writes is, field
by field, each tensor as it is (data pointer, dtype, device, rank, shape,
strides), for views of every kind; where the tensors are not alike (another
dtype, rank or device) each one is described as it is, so that the library
names the mismatch; unsupported tensors raise naming the argument. Read
back through the ctypes mirror of flashc_tensor, independently of the
struct formats that wrote them."""
import ctypes

import pytest
import torch

from flashc import _cabi, _kernels, _tensors
from flashc.errors import FlashcError, FlashcTypeError

from conftest import skip_unless_device

CODES = {torch.float32: _cabi.DTYPE_FLOAT32, torch.float16: _cabi.DTYPE_FLOAT16,
         torch.bfloat16: _cabi.DTYPE_BFLOAT16, torch.float64: _cabi.DTYPE_FLOAT64,
         torch.int32: _cabi.DTYPE_INT32}
NAMES = ("dout", "q", "k", "v", "out", "dq", "dk", "dv", "lse", "dlse", "alibi_slopes",
         "cu_seqlens_q", "cu_seqlens_k")


def read_descriptor(address):
    """The flashc_tensor at `address`, as a ctypes struct (copied)."""
    return _cabi.Tensor.from_buffer_copy(ctypes.string_at(address, ctypes.sizeof(_cabi.Tensor)))


def assert_describes(address, t):
    d = read_descriptor(address)
    assert d.data == t.data_ptr()
    assert d.dtype == CODES[t.dtype]
    if t.is_cuda:
        assert (d.device.type, d.device.index) == (_cabi.DEVICE_CUDA, t.get_device())
    else:
        assert (d.device.type, d.device.index) == (_cabi.DEVICE_CPU, 0)
    assert d.rank == t.dim()
    assert list(d.shape)[:t.dim()] == list(t.shape)
    assert list(d.stride)[:t.dim()] == list(t.stride())
    assert list(d.shape)[t.dim():] == [0] * (_cabi.MAX_RANK - t.dim())
    assert list(d.stride)[t.dim():] == [0] * (_cabi.MAX_RANK - t.dim())


def poisoned_buffer():
    """A backward argument buffer with every byte 0xAB, so that a field the
    writer skipped shows."""
    buffer = _kernels._BackwardBuffer()
    ctypes.memset(buffer, 0xAB, ctypes.sizeof(buffer))
    return buffer


def views(device, dtype, rank):
    """q-like tensors of `rank` (4 batched, 3 varlen) as views of every
    kind: contiguous, a slice of a packed qkv, a permuted (head-major)
    layout, and one padded in every dim; all with a contiguous last dim."""
    shape = (2, 7, 3, 16)[4 - rank:]
    plain = torch.randn(shape, device=device, dtype=dtype)
    packed = torch.randn(*shape[:-2], 3, *shape[-2:], device=device, dtype=dtype).select(-3, 1)
    permuted = torch.randn(*shape[:-3], shape[-2], shape[-3], shape[-1], device=device,
                           dtype=dtype).transpose(-3, -2)
    padded = torch.randn([n + 2 for n in shape], device=device, dtype=dtype)[
        tuple(slice(1, 1 + n) for n in shape)]
    return plain, packed, permuted, padded


@pytest.mark.parametrize("rank", [4, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("checked", [False, True])
def test_alike_tensors_are_described_as_they_are(device, rank, dtype, checked):
    skip_unless_device(device, dtype)
    alike = views(device, dtype, rank) * 2  # eight q-like tensors, as the backward has
    lse = torch.randn((2, 3, 7)[4 - rank:], device=device, dtype=torch.float32)
    if dtype == torch.float64:
        lse = lse.double()
    buffer = poisoned_buffer()
    addresses = _tensors.write_call_descriptors(
        buffer, _kernels._BACKWARD_DESCRIPTORS_AT, alike, lse, (None,) * 4, NAMES, checked)
    assert len(addresses) == 13 and addresses[9:] == [0] * 4
    assert len(set(addresses[:9])) == 9
    for address, t in zip(addresses, (*alike, lse)):
        assert_describes(address, t)


def test_optional_tensors_follow_the_alike_ones(device):
    skip_unless_device(device)
    dtype = torch.float16 if device == "cuda" else torch.float32
    alike = views(device, dtype, 3)
    lse = torch.randn(3, 7, device=device)
    slopes = torch.rand(3, device=device)
    cu = torch.tensor([0, 3, 7], dtype=torch.int32, device=device)
    buffer = poisoned_buffer()
    names = ("q", "k", "v", "out", "lse", "dlse", "alibi_slopes", "cu_seqlens_q", "cu_seqlens_k")
    addresses = _tensors.write_call_descriptors(
        buffer, _kernels._BACKWARD_DESCRIPTORS_AT, alike, lse, (None, slopes, cu, cu), names)
    assert addresses[5] == 0
    for address, t in zip(addresses, (*alike, lse, None, slopes, cu, cu)):
        if t is not None:
            assert_describes(address, t)
    assert addresses[7] != addresses[8]  # one descriptor each, even for one tensor


@pytest.mark.parametrize("odd_one", ["dtype", "rank", "lse_dtype"])
def test_tensors_that_are_not_alike_are_each_described_as_they_are(odd_one):
    q, k, v, out = (torch.randn(2, 5, 3, 8) for _ in range(4))
    lse = torch.randn(2, 3, 5)
    if odd_one == "dtype":
        k = k.half()
    elif odd_one == "rank":
        v = v[0]
    else:
        lse = lse.double()
    buffer = poisoned_buffer()
    addresses = _tensors.write_call_descriptors(
        buffer, _kernels._FORWARD_DESCRIPTORS_AT, (q, k, v, out), lse, (None,) * 5,
        _kernels._FORWARD_TENSORS)
    for address, t in zip(addresses, (q, k, v, out, lse)):
        assert_describes(address, t)


def test_the_library_names_the_tensor_that_is_not_alike():
    q, v = torch.randn(1, 5, 2, 8), torch.randn(1, 5, 2, 8)
    k = torch.randn(1, 5, 2, 8, dtype=torch.float64)
    out, lse = torch.full_like(q, float("nan")), torch.full((1, 2, 5), float("nan"))
    with pytest.raises(FlashcTypeError, match="k"):
        _kernels.forward(q, k, v, out, lse, None, softmax_scale=0.3, causal=False,
                         window_left=-1, window_right=-1, softcap=0.0, alibi_slopes=None,
                         dropout_p=0.0, seed=0, offset=0)
    assert out.isnan().all() and lse.isnan().all()


def test_unsupported_tensors_raise_naming_them():
    q, k, v, out = (torch.randn(1, 5, 2, 8) for _ in range(4))
    lse = torch.randn(1, 2, 5)
    buffer = poisoned_buffer()
    with pytest.raises(FlashcTypeError, match="lse"):
        _tensors.write_call_descriptors(buffer, _kernels._FORWARD_DESCRIPTORS_AT,
                                        (q, k, v, out), lse.long(), (None,) * 5,
                                        _kernels._FORWARD_TENSORS)
    with pytest.raises(FlashcTypeError, match="cu_seqlens_k"):
        _tensors.write_call_descriptors(
            buffer, _kernels._FORWARD_DESCRIPTORS_AT, (q, k, v, out), lse,
            (None, None, torch.zeros(2, dtype=torch.int32), torch.zeros(2, dtype=torch.int64),
             None), _kernels._FORWARD_TENSORS)
    with pytest.raises(FlashcError, match="k"):
        _tensors.write_call_descriptors(buffer, _kernels._FORWARD_DESCRIPTORS_AT,
                                        (q, k.to("meta"), v, out), lse, (None,) * 5,
                                        _kernels._FORWARD_TENSORS)


def test_ranks_that_cancel_out_are_not_packed_as_alike():
    """A rank-5 tensor and a rank-3 one among rank-4 alike tensors carry as
    many shape and stride values as two of rank 4; they are not packed as
    alike: the rank-5 one is refused, by name, and the rank-3 one, with it
    in the place of the rank-5 one, is described with its own rank."""
    q, out = torch.randn(1, 5, 2, 8), torch.randn(1, 5, 2, 8)
    wide, narrow = torch.randn(1, 5, 1, 2, 8), torch.randn(5, 2, 8)
    lse = torch.randn(1, 2, 5)
    with pytest.raises(FlashcError, match="k: rank 5"):
        _tensors.write_call_descriptors(poisoned_buffer(), _kernels._FORWARD_DESCRIPTORS_AT,
                                        (q, wide, narrow, out), lse, (None,) * 5,
                                        _kernels._FORWARD_TENSORS)
    addresses = _tensors.write_call_descriptors(
        poisoned_buffer(), _kernels._FORWARD_DESCRIPTORS_AT, (q, narrow, q, out), lse,
        (None,) * 5, _kernels._FORWARD_TENSORS)
    for address, t in zip(addresses, (q, narrow, q, out, lse)):
        assert_describes(address, t)
