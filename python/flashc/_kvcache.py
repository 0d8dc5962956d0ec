"""Attention over a KV cache: the operator flashc::fwd_kvcache (flash_attn's
flash_attn_gpu.fwd_kvcache, without its `out` argument), which appends k / v
into k_cache / v_cache in place and declares that mutation, so torch.compile
orders it correctly; and its fake implementation.

The C library validates every argument (the index tensors' contents too on
the CPU) and writes nothing on error; this layer checks argument types,
makes the inputs it may copy contiguous, pads head dims the CUDA backend
does not take (writing the padded cache back, as flash_attn does), and on
CUDA repeats flash_attn's check that a paged cache's block table holds
every sequence (a host read, skipped while a CUDA graph is captured: the
kernels never read or write outside the cache whatever the lengths).
"""
from typing import Optional, Tuple

import torch

from . import _cabi, _checks, _kernels, _shapes
from ._tensors import maybe_contiguous
from .errors import FlashcValueError

_DEVICES = ("cpu", "cuda")

_TENSOR_ARGUMENTS = ("k", "v", "cache_seqlens", "rotary_cos", "rotary_sin", "cache_batch_idx",
                     "cache_leftpad", "block_table", "alibi_slopes")


def check_types(q, k_cache, v_cache, optional):
    """q, k_cache, v_cache tensors; `optional` (the _TENSOR_ARGUMENTS, in
    order) tensors or None; k and v given together; the caches, k, v and
    rotary tables of q's dtype (named as torch names them: the C library's
    messages would say k_new / v_new)."""
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        _checks.tensor(t, name)
    for name, t in zip(_TENSOR_ARGUMENTS, optional):
        _checks.tensor(t, name, optional=True)
    k, v, _, rotary_cos, rotary_sin = optional[:5]
    if (k is None) != (v is None):
        missing, given = ("v", "k") if v is None else ("k", "v")
        raise FlashcValueError(
            _cabi.ERROR_ARGUMENT,
            f"{missing}: is None while {given} is given (new keys and values are appended "
            "together)")
    _checks.attention_dtype(q, "q")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache), ("k", k), ("v", v),
                    ("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin)):
        if t is not None:
            _checks.attention_dtype(t, name, like=q)


def _check_paged_capacity(k, cache_seqlens, block_table, k_cache):
    """flash_attn's host check that the block table addresses every key."""
    if (block_table is None or cache_seqlens is None or not k_cache.is_cuda
            or torch.cuda.is_current_stream_capturing() or cache_seqlens.numel() == 0):
        return
    seqlen_new = 0 if k is None else k.shape[1]
    longest = int(cache_seqlens.max().item()) + seqlen_new
    capacity = block_table.shape[1] * k_cache.shape[1]
    if longest > capacity:
        raise FlashcValueError(
            _cabi.ERROR_ARGUMENT,
            f"cache_seqlens: max(cache_seqlens){' + seqlen_new' if seqlen_new else ''} "
            f"(= {longest}) exceeds the capacity addressable by block_table "
            f"(max_num_blocks_per_seq * page_block_size = {capacity}); allocate more "
            "columns in block_table")


def _outputs(q, v_cache):
    b, sq, h, _ = q.shape
    out = q.new_empty((b, sq, h, v_cache.shape[-1]))
    lse = q.new_empty((b, h, sq), dtype=_shapes.stats_dtype(q.dtype))
    return out, lse


def fwd_kvcache_body(q, k_cache, v_cache, k, v, cache_seqlens, rotary_cos, rotary_sin,
                     cache_batch_idx, cache_leftpad, block_table, alibi_slopes, softmax_scale,
                     causal, window_size_left, window_size_right, softcap, rotary_interleaved,
                     num_splits):
    """flashc::fwd_kvcache's body: (out, softmax_lse). The caller checked
    the arguments' types (check_types; the operator's schema does it for
    calls through torch.ops)."""
    q, k, v = maybe_contiguous(q), maybe_contiguous(k), maybe_contiguous(v)
    cache_seqlens, cache_batch_idx, cache_leftpad, block_table, rotary_cos, rotary_sin = (
        maybe_contiguous(t) for t in (cache_seqlens, cache_batch_idx, cache_leftpad,
                                      block_table, rotary_cos, rotary_sin))
    _check_paged_capacity(k, cache_seqlens, block_table, k_cache)
    multiple = _shapes.head_dim_multiple(q)
    d, dv = q.shape[-1], v_cache.shape[-1]
    padded = multiple > 1 and (d % multiple or dv % multiple)
    if not padded:
        out, lse = _outputs(q, v_cache)
        _kernels.kvcache(q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx,
                         cache_leftpad, block_table, rotary_cos, rotary_sin, rotary_interleaved,
                         num_splits, out, lse, softmax_scale, causal, window_size_left,
                         window_size_right, softcap, alibi_slopes)
        return out, lse
    # Head dims the CUDA kernels do not take: run on zero-padded copies and
    # write the appended rows back (flash_attn does the same copy).
    pad = [_shapes.pad_head_dim(t, multiple) if t is not None else None
           for t in (q, k_cache, v_cache, k, v)]
    out, lse = _outputs(pad[0], pad[2])
    _kernels.kvcache(pad[0], pad[1], pad[2], pad[3], pad[4], cache_seqlens, cache_batch_idx,
                     cache_leftpad, block_table, rotary_cos, rotary_sin, rotary_interleaved,
                     num_splits, out, lse, softmax_scale, causal, window_size_left,
                     window_size_right, softcap, alibi_slopes)
    if k is not None:
        k_cache.copy_(pad[1][..., :d])
        v_cache.copy_(pad[2][..., :dv])
    return out[..., :dv], lse


@torch.library.custom_op("flashc::fwd_kvcache", mutates_args=("k_cache", "v_cache"),
                         device_types=_DEVICES)
def fwd_kvcache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k: Optional[torch.Tensor],
    v: Optional[torch.Tensor],
    cache_seqlens: Optional[torch.Tensor],
    rotary_cos: Optional[torch.Tensor],
    rotary_sin: Optional[torch.Tensor],
    cache_batch_idx: Optional[torch.Tensor],
    cache_leftpad: Optional[torch.Tensor],
    block_table: Optional[torch.Tensor],
    alibi_slopes: Optional[torch.Tensor],
    softmax_scale: float,
    causal: bool,
    window_size_left: int,
    window_size_right: int,
    softcap: float,
    rotary_interleaved: bool,
    num_splits: int,
) -> Tuple[torch.Tensor, torch.Tensor]:
    out, lse = fwd_kvcache_body(q, k_cache, v_cache, k, v, cache_seqlens, rotary_cos, rotary_sin,
                                cache_batch_idx, cache_leftpad, block_table, alibi_slopes,
                                softmax_scale, causal, window_size_left, window_size_right,
                                softcap, rotary_interleaved, num_splits)
    # (a custom operator's outputs may not be views of anything: the
    # padded path's out is a slice)
    return (out.contiguous() if out._base is not None else out), lse


@fwd_kvcache.register_fake
def _(q, k_cache, v_cache, k, v, cache_seqlens, rotary_cos, rotary_sin, cache_batch_idx,
      cache_leftpad, block_table, alibi_slopes, softmax_scale, causal, window_size_left,
      window_size_right, softcap, rotary_interleaved, num_splits):
    return _outputs(q, v_cache)

