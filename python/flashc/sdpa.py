"""flashc behind PyTorch's own attention: F.scaled_dot_product_attention's
flash backend and torch.nn.attention.varlen, through PyTorch's registry of
flash-attention implementations (torch 2.11 and later).

    import flashc, torch
    torch.nn.attention.activate_flash_attention_impl("flashc")
    # every F.scaled_dot_product_attention call that SDPA sends to its flash
    # backend on a CUDA device now runs flashc's kernels, forward and backward
    torch.nn.attention.restore_flash_attention_impl()   # PyTorch's own again

`import flashc` registers the implementation "flashc" and never activates
it. Activation replaces the CUDA kernels of four ATen operators:
_scaled_dot_product_flash_attention and its backward (what SDPA's flash
backend calls) and _flash_attention_forward / _flash_attention_backward
(what varlen_attn and the former call). Each replacement serves what flashc
can serve and hands everything else to the kernel it replaced, captured
with torch.library.get_kernel at activation:

- served: float16 / bfloat16 CUDA tensors on one device of compute
  capability 8.0 or more, head dims multiples of 8 up to 256 (SDPA pads
  them so), MQA / GQA, causal (bottom-right aligned, as FlashAttention-2;
  SDPA sends only square causal problems here), sliding windows and ALiBi
  slopes of _flash_attention_forward (a window bound >= seqlen_k is
  dropped, as FlashAttention-2 does), varlen with seqused_k, dropout,
  deterministic mode (torch.use_deterministic_algorithms);
- handed back: anything else: other dtypes or devices, return_debug_mask,
  dropout inside a CUDA graph capture (flashc draws its seed on the host),
  arguments added to these operators after torch 2.11, and the backward of
  a dropout forward that PyTorch's kernel ran (its mask is not flashc's).

Dropout draws (seed, offset) from PyTorch's CUDA generator as flashc's own
functions do; the mask is flashc's Philox scheme (README, "Dropout RNG
contract"), so it differs bit for bit from FlashAttention-2's while keeping
its distribution. The backward reads that pair back to the host (one
device synchronisation per dropout backward). Forward outputs carry, as
the operator's `unused` output, a view of a per-device marker tensor: a
backward with dropout is served only when that marker comes back, so a
dropout forward run by PyTorch's kernel is never replayed with flashc's
mask.
"""
import functools
import logging

import torch

from . import _kernels, _library, _rng
from .errors import FlashcError

__all__ = ["IMPL_NAME", "available", "fallback_counts"]

log = logging.getLogger(__name__)

#: The name under which import flashc registers the implementation.
IMPL_NAME = "flashc"

_ATTENTION = getattr(torch.nn, "attention", None)
_REGISTER = getattr(_ATTENTION, "register_flash_attention_impl", None)
_GET_KERNEL = getattr(torch.library, "get_kernel", None)

_SERVED_DTYPES = (torch.float16, torch.bfloat16)
_MAX_HEAD_DIM = 256

# Why calls went to PyTorch's kernel instead, by reason (for tests and
# debugging; reset with fallback_counts(reset=True)).
_fallbacks = {}


def available():
    """Whether this torch has the flash-attention registry (torch 2.11 and
    later), so that activate_flash_attention_impl("flashc") works."""
    return _REGISTER is not None and _GET_KERNEL is not None


def fallback_counts(reset=False):
    """{reason: calls} of the calls handed to PyTorch's own kernels since
    the last reset."""
    counts = dict(_fallbacks)
    if reset:
        _fallbacks.clear()
    return counts


# ---- what flashc serves --------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _capability(index):
    return torch.cuda.get_device_capability(index)


def _unsupported(tensors, head_dims, nheads, nheads_k):
    """Why flashc cannot serve these (non-None) tensors, or None."""
    first = tensors[0]
    if not first.is_cuda:
        return "not a CUDA tensor"
    if not _library.cuda_available():
        return "the flashc library has no CUDA backend"
    device = first.device
    for t in tensors:
        if t.device != device:
            return "tensors on several devices"
        if t.dtype != first.dtype:
            return "mixed dtypes"
    if first.dtype not in _SERVED_DTYPES:
        return f"dtype {first.dtype}"
    if any(d % 8 or d > _MAX_HEAD_DIM or d < 1 for d in head_dims):
        return f"head dims {head_dims}"
    if nheads_k < 1 or nheads % nheads_k:
        return f"{nheads} query heads over {nheads_k} key heads"
    if _capability(first.get_device()) < (8, 0):
        return "compute capability below 8.0"
    return None


def _rows_aligned(t):
    """What the CUDA backend takes as it is: a contiguous last dim, 16-byte
    aligned rows."""
    if t.stride(-1) != 1 or t.data_ptr() % 16:
        return False
    return all(s % 8 == 0 for s in t.stride()[:-1])


def _aligned(t):
    return t if _rows_aligned(t) else t.contiguous()


def _empty_like_layout(t, last_dim, dtype=None):
    """An empty tensor of t's shape but `last_dim` in its last dim, with t's
    dimension order (what the operators' meta functions promise:
    empty_like(query))."""
    shape = (*t.shape[:-1], last_dim)
    if last_dim == t.shape[-1]:
        return torch.empty_like(t, dtype=dtype)
    order = sorted(range(t.dim()), key=lambda i: (t.stride(i), i), reverse=True)
    dense = torch.empty([shape[i] for i in order], dtype=dtype or t.dtype, device=t.device)
    return dense.permute([order.index(i) for i in range(t.dim())])


_markers = {}


def _marker(device):
    """A fresh view of this device's marker: the forward's `unused` output
    that tells a backward flashc ran the forward (see the module text)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    base = _markers.get(index)
    if base is None:
        base = _markers[index] = torch.zeros((), dtype=torch.uint64, device=device)
    return base.view(())


def _is_marker(t):
    if t is None or not t.is_cuda:
        return False
    base = _markers.get(t.get_device())
    return base is not None and t.data_ptr() == base.data_ptr()


def _window(is_causal, left, right, seqlen_k):
    """(left, right) as FlashAttention-2 applies them: None and -1 are
    unbounded, causal sets right to 0, a bound >= seqlen_k is dropped."""
    left = -1 if left is None or left >= seqlen_k else int(left)
    right = -1 if right is None or right >= seqlen_k else int(right)
    if is_causal:
        right = 0
    return left, right


def _default_scale(scale, head_dim):
    return head_dim ** -0.5 if scale is None else float(scale)


def _dropout(device, dropout_p):
    """(seed, offset, rng_state, unused) of a forward."""
    unused = _marker(device)
    if dropout_p > 0:
        seed, offset, state = _rng.draw(device)
        return seed, offset, state.view(torch.uint64), unused
    return 0, 0, torch.zeros((2,), dtype=torch.uint64, device=device), unused


def _replayed(dropout_p, rng_state):
    """(seed, offset) of a backward (a device synchronisation with dropout)."""
    if dropout_p > 0:
        return _rng.replay(rng_state.view(torch.int64))
    return 0, 0


def _fallback(reason, original, keyset, args, kwargs):
    _fallbacks[reason] = _fallbacks.get(reason, 0) + 1
    log.debug("flashc sdpa: PyTorch's kernel runs this call (%s)", reason)
    return original.call_boxed(keyset, *args, **kwargs)


def _newer_arguments(extra):
    """Arguments of torch versions after 2.11 that this module does not know
    (an out buffer, a block table, a split count): any that is set."""
    return [name for name, value in extra.items() if value is not None]


def _forward_reason(return_debug_mask, dropout_p, extra):
    """Why a forward whose tensors flashc takes goes to PyTorch's kernel all
    the same, or None."""
    if return_debug_mask:
        return "return_debug_mask"
    if dropout_p > 0 and torch.cuda.is_current_stream_capturing():
        return "dropout under CUDA graph capture"
    newer = _newer_arguments(extra)
    return f"arguments {newer}" if newer else None


def _backward_reason(dropout_p, unused, extra):
    """The same for a backward (`unused`: the forward's marker output)."""
    if dropout_p > 0 and not _is_marker(unused):
        return "dropout forward by PyTorch's kernel"
    newer = _newer_arguments(extra)
    return f"arguments {newer}" if newer else None


def _staging(t):
    """Where the kernels write t: t itself, or a fresh contiguous tensor
    when t's rows are not aligned for the CUDA backend (copied back by
    _unstage)."""
    return t if _rows_aligned(t) else torch.empty(t.shape, dtype=t.dtype, device=t.device)


def _unstage(t, staged):
    if staged is not t:
        t.copy_(staged)


# ---- the four replacements -------------------------------------------------------


def _sdpa_forward(original, keyset, query, key, value, dropout_p=0.0, is_causal=False,
                  return_debug_mask=False, *, scale=None, **extra):
    """aten::_scaled_dot_product_flash_attention: (b, h, s, d) tensors."""
    args = (query, key, value, dropout_p, is_causal, return_debug_mask)
    kwargs = dict(scale=scale, **extra)
    reason = _unsupported((query, key, value), (query.shape[-1], value.shape[-1]),
                          query.shape[1], key.shape[1]) if query.dim() == 4 else "not 4-D"
    if reason is None:
        reason = _forward_reason(return_debug_mask, dropout_p, extra)
    if reason is not None:
        return _fallback(reason, original, keyset, args, kwargs)
    out = _empty_like_layout(query, value.shape[-1])
    b, h, sq, d = query.shape
    sk = key.shape[2]
    lse = torch.empty((b, h, sq), dtype=torch.float32, device=query.device)
    seed, offset, rng_state, unused = _dropout(query.device, dropout_p)
    q, k, v = (_aligned(t.transpose(1, 2)) for t in (query, key, value))
    out_bshd = out.transpose(1, 2)
    target = _staging(out_bshd)
    try:
        _kernels.forward(q, k, v, target, lse, None, softmax_scale=_default_scale(scale, d),
                         causal=bool(is_causal), window_left=-1,
                         window_right=0 if is_causal else -1, softcap=0.0, alibi_slopes=None,
                         dropout_p=float(dropout_p), seed=seed, offset=offset)
    except FlashcError as e:
        return _fallback(f"flashc: {e.status_name}", original, keyset, args, kwargs)
    _unstage(out_bshd, target)
    debug_mask = torch.empty(0, dtype=query.dtype, device=query.device)
    return out, lse, None, None, sq, sk, rng_state, unused, debug_mask


def _sdpa_backward(original, keyset, grad_out, query, key, value, out, logsumexp, cum_seq_q,
                   cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset,
                   *, scale=None, **extra):
    """aten::_scaled_dot_product_flash_attention_backward: (b, h, s, d)."""
    args = (grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
            dropout_p, is_causal, philox_seed, philox_offset)
    kwargs = dict(scale=scale, **extra)
    reason = _unsupported((grad_out, query, key, value, out),
                          (query.shape[-1], value.shape[-1]), query.shape[1], key.shape[1]) \
        if query.dim() == 4 else "not 4-D"
    if reason is None:
        reason = _backward_reason(dropout_p, philox_offset, extra)
    if reason is not None:
        return _fallback(reason, original, keyset, args, kwargs)
    grads = [_empty_like_layout(t, t.shape[-1]) for t in (query, key, value)]
    try:
        _run_backward(grad_out.transpose(1, 2), query.transpose(1, 2), key.transpose(1, 2),
                      value.transpose(1, 2), out.transpose(1, 2), logsumexp,
                      [g.transpose(1, 2) for g in grads], dropout_p, philox_seed,
                      _default_scale(scale, query.shape[-1]), bool(is_causal), -1,
                      0 if is_causal else -1)
    except FlashcError as e:
        return _fallback(f"flashc: {e.status_name}", original, keyset, args, kwargs)
    return tuple(grads)


def _run_backward(dout, q, k, v, out, lse, grads, dropout_p, rng_state, scale, causal, left,
                  right, **varlen):
    """flashc's backward into `grads` (copied there when their rows are not
    aligned for the CUDA backend)."""
    seed, offset = _replayed(dropout_p, rng_state)
    targets = [_staging(g) for g in grads]
    _kernels.backward(_aligned(dout), _aligned(q), _aligned(k), _aligned(v), _aligned(out),
                      lse if lse.is_contiguous() else lse.contiguous(), None, *targets,
                      softmax_scale=scale, causal=causal, window_left=left, window_right=right,
                      softcap=0.0, alibi_slopes=None, dropout_p=float(dropout_p), seed=seed,
                      offset=offset, deterministic=torch.are_deterministic_algorithms_enabled(),
                      **varlen)
    for g, t in zip(grads, targets):
        _unstage(g, t)


def _varlen_arguments(cum_seq_q, cum_seq_k, max_q, max_k, seqused_k=None):
    if cum_seq_q is None:
        return {}
    return dict(cu_seqlens_q=cum_seq_q.contiguous(), cu_seqlens_k=cum_seq_k.contiguous(),
                max_seqlen_q=int(max_q), max_seqlen_k=int(max_k),
                **({} if seqused_k is None else {"seqused_k": seqused_k.contiguous()}))


def _flash_forward(original, keyset, query, key, value, cum_seq_q, cum_seq_k, max_q, max_k,
                   dropout_p, is_causal, return_debug_mask, *, scale=None, window_size_left=None,
                   window_size_right=None, seqused_k=None, alibi_slopes=None, **extra):
    """aten::_flash_attention_forward: (b, s, h, d), or varlen (total, h, d)
    with int32 cum_seq_q / cum_seq_k."""
    args = (query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
            return_debug_mask)
    kwargs = dict(scale=scale, window_size_left=window_size_left,
                  window_size_right=window_size_right, seqused_k=seqused_k,
                  alibi_slopes=alibi_slopes, **extra)
    varlen = cum_seq_q is not None
    rank = 3 if varlen else 4
    if query.dim() != rank or key.dim() != rank or value.dim() != rank:
        reason = "layout"
    else:
        reason = _unsupported((query, key, value), (query.shape[-1], value.shape[-1]),
                              query.shape[-2], key.shape[-2])
    if reason is None and (cum_seq_k is None) != (cum_seq_q is None):
        reason = "cum_seq_q without cum_seq_k"
    if reason is None and seqused_k is not None and not varlen:
        reason = "seqused_k without cum_seq_q"
    if reason is None:
        reason = _forward_reason(return_debug_mask, dropout_p, extra)
    if reason is not None:
        return _fallback(reason, original, keyset, args, kwargs)
    out = _empty_like_layout(query, value.shape[-1])
    h = query.shape[-2]
    lse_shape = (h, query.shape[0]) if varlen else (query.shape[0], h, query.shape[1])
    lse = torch.empty(lse_shape, dtype=torch.float32, device=query.device)
    seqlen_k = int(max_k) if varlen else key.shape[1]
    left, right = _window(is_causal, window_size_left, window_size_right, seqlen_k)
    seed, offset, rng_state, unused = _dropout(query.device, dropout_p)
    target = _staging(out)
    try:
        _kernels.forward(_aligned(query), _aligned(key), _aligned(value), target, lse, None,
                         softmax_scale=_default_scale(scale, query.shape[-1]),
                         causal=bool(is_causal), window_left=left, window_right=right,
                         softcap=0.0, alibi_slopes=alibi_slopes, dropout_p=float(dropout_p),
                         seed=seed, offset=offset,
                         **_varlen_arguments(cum_seq_q, cum_seq_k, max_q, max_k, seqused_k))
    except FlashcError as e:
        return _fallback(f"flashc: {e.status_name}", original, keyset, args, kwargs)
    _unstage(out, target)
    debug_mask = torch.empty(0, dtype=query.dtype, device=query.device)
    return out, lse, rng_state, unused, debug_mask


def _flash_backward(original, keyset, grad_out, query, key, value, out, logsumexp, cum_seq_q,
                    cum_seq_k, max_q, max_k, dropout_p, is_causal, rng_state, unused, *,
                    scale=None, window_size_left=None, window_size_right=None, **extra):
    """aten::_flash_attention_backward, layouts as its forward."""
    args = (grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
            dropout_p, is_causal, rng_state, unused)
    kwargs = dict(scale=scale, window_size_left=window_size_left,
                  window_size_right=window_size_right, **extra)
    varlen = cum_seq_q is not None
    rank = 3 if varlen else 4
    if any(t.dim() != rank for t in (grad_out, query, key, value, out)):
        reason = "layout"
    else:
        reason = _unsupported((grad_out, query, key, value, out),
                              (query.shape[-1], value.shape[-1]), query.shape[-2],
                              key.shape[-2])
    if reason is None and (cum_seq_k is not None) != varlen:
        reason = "cum_seq_q without cum_seq_k"
    if reason is None:
        reason = _backward_reason(dropout_p, unused, extra)
    if reason is not None:
        return _fallback(reason, original, keyset, args, kwargs)
    seqlen_k = int(max_k) if varlen else key.shape[1]
    left, right = _window(is_causal, window_size_left, window_size_right, seqlen_k)
    grads = [_empty_like_layout(t, t.shape[-1]) for t in (query, key, value)]
    try:
        _run_backward(grad_out, query, key, value, out, logsumexp, grads, dropout_p, rng_state,
                      _default_scale(scale, query.shape[-1]), bool(is_causal), left, right,
                      **_varlen_arguments(cum_seq_q, cum_seq_k, max_q, max_k))
    except FlashcError as e:
        return _fallback(f"flashc: {e.status_name}", original, keyset, args, kwargs)
    return tuple(grads)


_REPLACEMENTS = {
    "_scaled_dot_product_flash_attention": _sdpa_forward,
    "_scaled_dot_product_flash_attention_backward": _sdpa_backward,
    "_flash_attention_forward": _flash_forward,
    "_flash_attention_backward": _flash_backward,
}


class _Handle:
    """What activation returns to the registry: remove() restores PyTorch's
    kernels."""

    def __init__(self, library):
        self.library = library

    def remove(self):
        if self.library is not None:
            self.library._destroy()
            self.library = None


def _activate():
    """The registry's register_fn: replace the CUDA kernels of the four
    operators, each falling back to the kernel it replaces."""
    library = torch.library.Library("aten", "IMPL", "CUDA")
    try:
        for name, replacement in _REPLACEMENTS.items():
            original = _GET_KERNEL(f"aten::{name}", "CUDA")
            library.impl(name, functools.partial(replacement, original), "CUDA",
                         with_keyset=True)
    except Exception:
        library._destroy()
        raise
    return _Handle(library)


def _register():
    """Called by import flashc: makes "flashc" known to the registry (never
    active until the user activates it)."""
    if available():
        _REGISTER(IMPL_NAME, register_fn=_activate)
