"""Argument checks done in Python before any output is allocated or any
random number drawn. The C library validates everything again (and names
the argument); these catch what would otherwise fail obscurely in Python
(a wrong rank before shapes are read) or what only Python knows (torch
dtypes and devices, whether the library has the CUDA backend)."""
import math

import torch

from . import _cabi, _library
from .errors import FlashcTypeError, FlashcUnsupportedError, FlashcValueError

ATTENTION_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


# ---- the common case, cheaply -------------------------------------------------
# Every call passes through these first. They only say whether the detailed
# checks below would all pass (so they run, with their messages, only when
# something is wrong): a few attribute reads instead of a function call per
# tensor and property.


def attention_inputs_ok(rank, q, k, v, *others):
    """q, k, v tensors of `rank` and one supported dtype, on one usable
    device with the (non-None) `others`. (The device as is_cpu / is_cuda
    and get_device(): cheaper than comparing torch.device objects.)"""
    try:
        dtype = q.dtype
        if not (q.dim() == rank and k.dim() == rank and v.dim() == rank
                and dtype in ATTENTION_DTYPES and k.dtype is dtype and v.dtype is dtype):
            return False
        if q.is_cpu:
            for t in (k, v, *others):
                if t is not None and not t.is_cpu:
                    return False
            return True
        if not q.is_cuda:
            return False
        index = q.get_device()
        for t in (k, v, *others):
            if t is not None and not (t.is_cuda and t.get_device() == index):
                return False
    except AttributeError:  # not tensors
        return False
    return _library.cuda_available()


def forward_scalars_ok(dropout_p, scale):
    """dropout() and softmax_scale() below would pass."""
    return (type(dropout_p) is float and 0.0 <= dropout_p < 1.0 and type(scale) is float
            and scale != 0.0 and math.isfinite(scale))


def tensor(t, name, optional=False):
    """t is a torch.Tensor (or None where `optional`)."""
    if isinstance(t, torch.Tensor) or (optional and t is None):
        return
    raise FlashcTypeError(
        _cabi.ERROR_ARGUMENT,
        f"{name}: expected a torch.Tensor{' or None' if optional else ''}, got {type(t).__name__}",
    )


def rank(t, name, expected, layout):
    tensor(t, name)
    if t.dim() != expected:
        raise FlashcValueError(
            _cabi.ERROR_RANK,
            f"{name}: expected rank {expected} {layout}, got shape {tuple(t.shape)}",
        )


def attention_dtype(t, name, like=None, like_name="q"):
    if t.dtype not in ATTENTION_DTYPES:
        raise FlashcTypeError(
            _cabi.ERROR_DTYPE,
            f"{name}: dtype {t.dtype} is not supported (float16, bfloat16, float32, "
            "float64 on the CPU)",
        )
    if like is not None and t.dtype != like.dtype:
        raise FlashcTypeError(
            _cabi.ERROR_DTYPE, f"{name}: dtype {t.dtype} differs from {like_name}'s {like.dtype}"
        )


def same_device(named):
    """All tensors of `named` ((name, tensor-or-None) pairs) on one device
    the library can use."""
    first_name, first, device = None, None, None
    for name, t in named:
        if t is None:
            continue
        if first is None:
            first_name, first, device = name, t, t.device
        elif t.device != device:
            raise FlashcValueError(
                _cabi.ERROR_DEVICE,
                f"{name}: is on {t.device} but {first_name} is on {device}; all tensors "
                "must be on one device",
            )
    if first is None or first.is_cpu:
        return
    if not first.is_cuda:
        raise FlashcValueError(
            _cabi.ERROR_DEVICE,
            f"{first_name}: device {device} is not supported (cpu or cuda)",
        )
    if not _library.cuda_available():
        raise FlashcUnsupportedError(
            _cabi.ERROR_UNSUPPORTED,
            f"{first_name}: is a CUDA tensor, but the flashc library ({_library.path}) has "
            "no CUDA backend or sees no CUDA device",
        )


def dropout(p):
    if not (isinstance(p, (int, float)) and 0.0 <= p < 1.0):
        raise FlashcValueError(_cabi.ERROR_DROPOUT, f"dropout_p: must be in [0, 1), got {p!r}")


def softmax_scale(scale):
    if scale is None:
        raise FlashcValueError(
            _cabi.ERROR_SCALE, "softmax_scale: expected a number (the operators take no default)"
        )
    if not math.isfinite(scale):
        raise FlashcValueError(_cabi.ERROR_SCALE, f"softmax_scale: must be finite, got {scale!r}")
    if scale == 0.0:
        # 0 selects 1/sqrt(d) in the C API, so it cannot mean "scale 0".
        raise FlashcValueError(
            _cabi.ERROR_SCALE,
            "softmax_scale: must be non-zero (None selects the default 1/sqrt(head dim))",
        )


def _int32_tensor(t, name, rank):
    tensor(t, name)
    if t.dtype != torch.int32:
        raise FlashcTypeError(_cabi.ERROR_DTYPE, f"{name}: dtype must be torch.int32, got {t.dtype}")
    if t.dim() != rank:
        raise FlashcValueError(
            _cabi.ERROR_RANK, f"{name}: expected a {rank}-D tensor, got shape {tuple(t.shape)}"
        )


def int32_vector(t, name, length=None):
    _int32_tensor(t, name, 1)
    if length is not None and t.shape[0] != length:
        raise FlashcValueError(
            _cabi.ERROR_CU_SEQLENS, f"{name}: expected {length} entries, got {t.shape[0]}"
        )


def int32_matrix(t, name):
    _int32_tensor(t, name, 2)


def cu_seqlens(cu_q, cu_k):
    int32_vector(cu_q, "cu_seqlens_q")
    int32_vector(cu_k, "cu_seqlens_k")
    if cu_q.shape[0] < 2:
        raise FlashcValueError(
            _cabi.ERROR_CU_SEQLENS,
            f"cu_seqlens_q: needs batch + 1 >= 2 entries, got {cu_q.shape[0]}",
        )
    if cu_k.shape[0] != cu_q.shape[0]:
        raise FlashcValueError(
            _cabi.ERROR_CU_SEQLENS,
            f"cu_seqlens_k: has {cu_k.shape[0]} entries but cu_seqlens_q has {cu_q.shape[0]}",
        )


def rng_state(state, dropout_p):
    if dropout_p == 0.0:
        return
    if state is None:
        raise FlashcValueError(
            _cabi.ERROR_ARGUMENT,
            "rng_state: required when dropout_p > 0 (the forward's (seed, offset))",
        )
    if state.dtype != torch.int64 or state.numel() != 2:
        raise FlashcValueError(
            _cabi.ERROR_ARGUMENT,
            f"rng_state: expected an int64 tensor of 2 elements (seed, offset), got "
            f"{state.dtype} of shape {tuple(state.shape)}",
        )


def not_supported(value, name, why):
    if value is not None:
        raise FlashcUnsupportedError(_cabi.ERROR_UNSUPPORTED, f"{name}: {why}")


def gradient_buffer(t, name, like, like_name):
    """A caller-provided dq/dk/dv buffer: q's dtype and device, written in
    place, so it cannot be copied to fix its layout."""
    if t is None:
        return
    if t.dtype != like.dtype:
        raise FlashcTypeError(
            _cabi.ERROR_DTYPE, f"{name}: dtype {t.dtype} differs from {like_name}'s {like.dtype}"
        )
    if t.shape != like.shape:
        raise FlashcValueError(
            _cabi.ERROR_SHAPE,
            f"{name}: expected shape {tuple(like.shape)} (as {like_name}), got {tuple(t.shape)}",
        )


def packed(t, name, expected_rank, axis, count, layout):
    """A packed qkv / kv: `count` tensors stacked along `axis`."""
    rank(t, name, expected_rank, layout)
    if t.shape[axis] != count:
        raise FlashcValueError(
            _cabi.ERROR_SHAPE,
            f"{name}: expected {layout}, got shape {tuple(t.shape)} (dim {axis} must be {count})",
        )
