"""flash_attn's interface (flash_attn.flash_attn_interface 2.x), backed by
the flashc C library: the six public functions, the six autograd Functions
behind them, and the four torch.library operators they call.

Beyond flash_attn, every public function takes `return_lse=False`: when
True it returns (out, softmax_lse) (or (out, softmax_lse, S_dmask) with
return_attn_probs), and softmax_lse is differentiable: its gradient reaches
the C backward as dLSE. The softmax_lse returned with return_attn_probs is
differentiable too.

Shapes as flash_attn: q (b, sq, h, d), k/v (b, sk, hk, d), qkv
(b, s, 3, h, d), kv (b, sk, 2, hk, d), out like q, softmax_lse (b, h, sq)
float32; varlen q (total_q, h, d), k/v (total_k, hk, d), qkv
(total, 3, h, d), kv (total_k, 2, hk, d), softmax_lse (h, total_q), with
int32 cu_seqlens of length b + 1 and int max_seqlen. dtypes float16,
bfloat16, float32, and float64 on the CPU.
"""
import math

import torch
import torch.nn.functional as F

from . import _checks, _ops
from ._ops import (
    _flash_attn_backward,
    _flash_attn_forward,
    _flash_attn_varlen_backward,
    _flash_attn_varlen_forward,
)
from ._shapes import head_dim_multiple, pad_head_dim, round_multiple
from ._tensors import maybe_contiguous

__all__ = [
    "flash_attn_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_kvpacked_func",
    "flash_attn_varlen_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_varlen_kvpacked_func",
    "FlashAttnFunc",
    "FlashAttnQKVPackedFunc",
    "FlashAttnKVPackedFunc",
    "FlashAttnVarlenFunc",
    "FlashAttnVarlenQKVPackedFunc",
    "FlashAttnVarlenKVPackedFunc",
    "_flash_attn_forward",
    "_flash_attn_varlen_forward",
    "_flash_attn_backward",
    "_flash_attn_varlen_backward",
    "_wrapped_flash_attn_forward",
    "_wrapped_flash_attn_varlen_forward",
    "_wrapped_flash_attn_backward",
    "_wrapped_flash_attn_varlen_backward",
    "maybe_contiguous",
    "round_multiple",
]

_wrapped_flash_attn_forward = torch.ops.flashc._flash_attn_forward
_wrapped_flash_attn_varlen_forward = torch.ops.flashc._flash_attn_varlen_forward
_wrapped_flash_attn_backward = torch.ops.flashc._flash_attn_backward
_wrapped_flash_attn_varlen_backward = torch.ops.flashc._flash_attn_varlen_backward


# ---- shared pieces of the autograd Functions ---------------------------------


def _default_scale(softmax_scale, head_dim):
    # From the head dim before any padding, as flash_attn.
    return head_dim ** (-0.5) if softmax_scale is None else softmax_scale


def _pad(x, multiple):
    return pad_head_dim(x, multiple) if multiple > 1 else x


def _unpad(grad, head_dim):
    """A gradient without the head-dim padding; the gradient itself when
    there is none. Where nothing is padded (head_dim_multiple 1) the shape
    is not even read, so torch.jit.trace records no comparison. (The
    forward's out stays a slice, always a view as in flash_attn.)"""
    if head_dim_multiple(grad.device) > 1 and grad.shape[-1] != head_dim:
        return grad[..., :head_dim]
    return grad


# The operator calls of the Functions. When the operators' bodies can be
# called directly (_ops.can_call_directly: eager mode, plain tensors) they
# are, which saves the dispatcher's overhead and the outputs the Functions
# drop: S_dmask unless returned, the (0, 0) rng_state of a call without
# dropout (the backward reads rng_state only with dropout, and takes None),
# and the backward's softmax_d. torch.compile always sees the operators.


def _forward(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
             return_softmax, return_lse):
    """(out_padded, softmax_lse, S_dmask, rng_state) of flashc::_flash_attn_forward."""
    if _ops.can_call_directly(q, k, v, alibi_slopes):
        return _ops.batched_forward(
            q, k, v, dropout_p, softmax_scale, causal, window_size[0], window_size[1], softcap,
            alibi_slopes, return_softmax and dropout_p > 0,
            want_s_dmask=return_softmax or return_lse, want_rng_state=False,
        )
    return _wrapped_flash_attn_forward(
        q, k, v, dropout_p, softmax_scale, causal=causal,
        window_size_left=window_size[0], window_size_right=window_size[1],
        softcap=softcap, alibi_slopes=alibi_slopes,
        return_softmax=return_softmax and dropout_p > 0,
    )


def _varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                    softmax_scale, causal, window_size, softcap, alibi_slopes, return_softmax,
                    return_lse, block_table=None):
    """(out_padded, softmax_lse, S_dmask, rng_state) of
    flashc::_flash_attn_varlen_forward."""
    if _ops.can_call_directly(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes):
        return _ops.varlen_forward(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
            softmax_scale, causal, window_size[0], window_size[1], softcap, alibi_slopes,
            return_softmax and dropout_p > 0, block_table,
            want_s_dmask=return_softmax or return_lse, want_rng_state=False,
        )
    return _wrapped_flash_attn_varlen_forward(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
        softmax_scale, causal=causal, window_size_left=window_size[0],
        window_size_right=window_size[1], softcap=softcap, alibi_slopes=alibi_slopes,
        return_softmax=return_softmax and dropout_p > 0, block_table=block_table,
    )


def _backward(ctx, dout, q, k, v, out, softmax_lse, dq, dk, dv, rng_state, dlse):
    """flashc::_flash_attn_backward into dq, dk, dv, with the settings saved on ctx."""
    args = (dout, q, k, v, out, softmax_lse, dq, dk, dv, ctx.dropout_p, ctx.softmax_scale,
            ctx.causal, ctx.window_size[0], ctx.window_size[1], ctx.softcap, ctx.alibi_slopes,
            ctx.deterministic)
    if _ops.can_call_directly(dout, q, k, v, out, softmax_lse, ctx.alibi_slopes, rng_state,
                              dlse):
        _ops.batched_backward(*args, rng_state, dlse, want_softmax_d=False)
    else:
        _wrapped_flash_attn_backward(*args, rng_state=rng_state, dlse=dlse)


def _varlen_backward(ctx, dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q,
                     cu_seqlens_k, max_seqlen_q, max_seqlen_k, rng_state, dlse):
    """flashc::_flash_attn_varlen_backward into dq, dk, dv, with the settings
    saved on ctx."""
    args = (dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q, cu_seqlens_k,
            max_seqlen_q, max_seqlen_k, ctx.dropout_p, ctx.softmax_scale, ctx.causal,
            ctx.window_size[0], ctx.window_size[1], ctx.softcap, ctx.alibi_slopes,
            ctx.deterministic)
    if _ops.can_call_directly(dout, q, k, v, out, softmax_lse, cu_seqlens_q, cu_seqlens_k,
                              ctx.alibi_slopes, rng_state, dlse):
        _ops.varlen_backward(*args, rng_state, False, dlse, want_softmax_d=False)
    else:
        _wrapped_flash_attn_varlen_backward(*args, rng_state=rng_state, dlse=dlse)


def _save_forward(ctx, is_grad, tensors, **scalars):
    """Tensors are saved only when a gradient is needed; scalars live on ctx."""
    if is_grad:
        ctx.save_for_backward(*tensors)
    for name, value in scalars.items():
        setattr(ctx, name, value)


def _outputs(ctx, out, softmax_lse, s_dmask, return_softmax, return_lse):
    """The Function's outputs: out alone, or (out, softmax_lse, S_dmask) with
    softmax_lse differentiable and S_dmask not."""
    if not (return_softmax or return_lse):
        return out
    ctx.mark_non_differentiable(s_dmask)
    return out, softmax_lse, s_dmask


def _api_result(result, return_attn_probs, return_lse):
    if return_attn_probs:
        return result
    if return_lse:
        return result[0], result[1]
    return result


def _incoming_dout(dout, out_padded):
    """dout zero-padded to the head dim of the saved out (all zeros when
    only softmax_lse was used)."""
    if dout is None:
        return torch.zeros_like(out_padded)
    missing = out_padded.shape[-1] - dout.shape[-1]
    return F.pad(dout, [0, missing]) if missing else dout


def _distinct(*tensors):
    """The tensors, with any that repeats an earlier one (cu_seqlens passed
    for q and k, flash_attn_func(q, q, q)) replaced by a view of it: the
    autograd Functions then never receive one tensor twice, which
    torch.compile cannot trace. Gradients through the views add up as they
    would on the shared tensor."""
    if len({id(t) for t in tensors}) == len(tensors):
        return tensors
    result = []
    for i, t in enumerate(tensors):
        if t is not None and any(t is s for s in tensors[:i]):
            t = t.view_as(t)
        result.append(t)
    return result


def _gradient_buffers(dtype, device, *shapes):
    """Empty gradient buffers of the given shapes. Where a compiler could see
    them (anything but plain eager mode, see _ops.can_call_directly) they
    are carved from one allocation: separate torch.empty calls of equal
    shape can be merged into one buffer by a compiler (PyTorch 2.4's
    inductor does), after which the backward would write two gradients
    into the same memory. Eager allocations are never merged, and separate
    ones cost less Python."""
    if _ops.can_call_directly():
        return [torch.empty(shape, dtype=dtype, device=device) for shape in shapes]
    sizes = [math.prod(shape) for shape in shapes]
    flat = torch.empty(sum(sizes), dtype=dtype, device=device)
    return [chunk.view(shape) for chunk, shape in zip(flat.split(sizes), shapes)]


def _check_block_table(block_table):
    _checks.not_supported(block_table, "block_table", "paged KV is not supported by flashc yet")


# ---- batched -----------------------------------------------------------------


class FlashAttnQKVPackedFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, qkv, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                deterministic, return_softmax, return_lse, is_grad_enabled):
        _checks.packed(qkv, "qkv", 5, 2, 3, "(batch, seqlen, 3, nheads, headdim)")
        _checks.window_size(window_size)
        is_grad = is_grad_enabled and qkv.requires_grad
        head_dim = qkv.shape[-1]
        softmax_scale = _default_scale(softmax_scale, head_dim)
        qkv = _pad(qkv, head_dim_multiple(qkv.device))
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        out_padded, softmax_lse, s_dmask, rng_state = _forward(
            q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
            return_softmax, return_lse,
        )
        _save_forward(ctx, is_grad, (q, k, v, out_padded, softmax_lse, rng_state),
                      dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                      window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                      deterministic=deterministic, head_dim=head_dim)
        ctx.set_materialize_grads(False)
        out = out_padded[..., :head_dim]
        return _outputs(ctx, out, softmax_lse, s_dmask, return_softmax, return_lse)

    @staticmethod
    def backward(ctx, dout, dlse=None, *unused):
        q, k, v, out, softmax_lse, rng_state = ctx.saved_tensors
        dout = _incoming_dout(dout, out)
        (dqkv,) = _gradient_buffers(q.dtype, q.device, (*q.shape[:-2], 3, *q.shape[-2:]))
        _backward(ctx, dout, q, k, v, out, softmax_lse, dqkv[:, :, 0], dqkv[:, :, 1],
                  dqkv[:, :, 2], rng_state, dlse)
        dqkv = _unpad(dqkv, ctx.head_dim)
        return dqkv, None, None, None, None, None, None, None, None, None, None


class FlashAttnKVPackedFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, kv, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                deterministic, return_softmax, return_lse, is_grad_enabled):
        _checks.packed(kv, "kv", 5, 2, 2, "(batch, seqlen_k, 2, nheads_k, headdim)")
        _checks.window_size(window_size)
        is_grad = is_grad_enabled and (q.requires_grad or kv.requires_grad)
        head_dim = q.shape[-1]
        softmax_scale = _default_scale(softmax_scale, head_dim)
        multiple = head_dim_multiple(q.device)
        q, kv = _pad(q, multiple), _pad(kv, multiple)
        k, v = kv[:, :, 0], kv[:, :, 1]
        out_padded, softmax_lse, s_dmask, rng_state = _forward(
            q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
            return_softmax, return_lse,
        )
        _save_forward(ctx, is_grad, (q, k, v, out_padded, softmax_lse, rng_state),
                      dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                      window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                      deterministic=deterministic, head_dim=head_dim)
        ctx.set_materialize_grads(False)
        out = out_padded[..., :head_dim]
        return _outputs(ctx, out, softmax_lse, s_dmask, return_softmax, return_lse)

    @staticmethod
    def backward(ctx, dout, dlse=None, *unused):
        q, k, v, out, softmax_lse, rng_state = ctx.saved_tensors
        dout = _incoming_dout(dout, out)
        dq, dkv = _gradient_buffers(q.dtype, q.device, q.shape,
                                    (*k.shape[:-2], 2, *k.shape[-2:]))
        _backward(ctx, dout, q, k, v, out, softmax_lse, dq, dkv[:, :, 0], dkv[:, :, 1],
                  rng_state, dlse)
        dq = _unpad(dq, ctx.head_dim)
        dkv = _unpad(dkv, ctx.head_dim)
        return dq, dkv, None, None, None, None, None, None, None, None, None, None


class FlashAttnFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                alibi_slopes, deterministic, return_softmax, return_lse, is_grad_enabled):
        _checks.window_size(window_size)
        is_grad = is_grad_enabled and (q.requires_grad or k.requires_grad or v.requires_grad)
        head_dim, head_dim_v = q.shape[-1], v.shape[-1]
        softmax_scale = _default_scale(softmax_scale, head_dim)
        multiple = head_dim_multiple(q.device)
        q, k, v = _pad(q, multiple), _pad(k, multiple), _pad(v, multiple)
        out_padded, softmax_lse, s_dmask, rng_state = _forward(
            q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
            return_softmax, return_lse,
        )
        _save_forward(ctx, is_grad, (q, k, v, out_padded, softmax_lse, rng_state),
                      dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                      window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                      deterministic=deterministic, head_dim=head_dim, head_dim_v=head_dim_v)
        ctx.set_materialize_grads(False)
        out = out_padded[..., :head_dim_v]
        return _outputs(ctx, out, softmax_lse, s_dmask, return_softmax, return_lse)

    @staticmethod
    def backward(ctx, dout, dlse=None, *unused):
        q, k, v, out, softmax_lse, rng_state = ctx.saved_tensors
        dout = _incoming_dout(dout, out)
        dq, dk, dv = _gradient_buffers(q.dtype, q.device, q.shape, k.shape, v.shape)
        _backward(ctx, dout, q, k, v, out, softmax_lse, dq, dk, dv, rng_state, dlse)
        dq = _unpad(dq, ctx.head_dim)
        dk = _unpad(dk, ctx.head_dim)
        dv = _unpad(dv, ctx.head_dim_v)
        return dq, dk, dv, None, None, None, None, None, None, None, None, None, None


# ---- varlen ------------------------------------------------------------------


class FlashAttnVarlenQKVPackedFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, qkv, cu_seqlens, max_seqlen, dropout_p, softmax_scale, causal, window_size,
                softcap, alibi_slopes, deterministic, return_softmax, return_lse,
                is_grad_enabled):
        _checks.packed(qkv, "qkv", 4, 1, 3, "(total, 3, nheads, headdim)")
        _checks.window_size(window_size)
        is_grad = is_grad_enabled and qkv.requires_grad
        head_dim = qkv.shape[-1]
        softmax_scale = _default_scale(softmax_scale, head_dim)
        qkv = _pad(qkv, head_dim_multiple(qkv.device))
        q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
        out_padded, softmax_lse, s_dmask, rng_state = _varlen_forward(
            q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, dropout_p,
            softmax_scale, causal, window_size, softcap, alibi_slopes, return_softmax,
            return_lse,
        )
        _save_forward(ctx, is_grad,
                      (q, k, v, out_padded, softmax_lse, cu_seqlens, rng_state),
                      dropout_p=dropout_p, max_seqlen=max_seqlen, softmax_scale=softmax_scale,
                      causal=causal, window_size=window_size, softcap=softcap,
                      alibi_slopes=alibi_slopes, deterministic=deterministic,
                      head_dim=head_dim)
        ctx.set_materialize_grads(False)
        out = out_padded[..., :head_dim]
        return _outputs(ctx, out, softmax_lse, s_dmask, return_softmax, return_lse)

    @staticmethod
    def backward(ctx, dout, dlse=None, *unused):
        q, k, v, out, softmax_lse, cu_seqlens, rng_state = ctx.saved_tensors
        dout = _incoming_dout(dout, out)
        (dqkv,) = _gradient_buffers(q.dtype, q.device, (q.shape[0], 3, *q.shape[1:]))
        _varlen_backward(
            ctx, dout, q, k, v, out, softmax_lse, dqkv[:, 0], dqkv[:, 1], dqkv[:, 2],
            cu_seqlens, cu_seqlens, ctx.max_seqlen, ctx.max_seqlen, rng_state, dlse,
        )
        dqkv = _unpad(dqkv, ctx.head_dim)
        return dqkv, None, None, None, None, None, None, None, None, None, None, None, None


class FlashAttnVarlenKVPackedFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                return_softmax, return_lse, is_grad_enabled):
        _checks.packed(kv, "kv", 4, 1, 2, "(total_k, 2, nheads_k, headdim)")
        _checks.window_size(window_size)
        is_grad = is_grad_enabled and (q.requires_grad or kv.requires_grad)
        head_dim = q.shape[-1]
        softmax_scale = _default_scale(softmax_scale, head_dim)
        multiple = head_dim_multiple(q.device)
        q, kv = _pad(q, multiple), _pad(kv, multiple)
        k, v = kv[:, 0], kv[:, 1]
        out_padded, softmax_lse, s_dmask, rng_state = _varlen_forward(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
            softmax_scale, causal, window_size, softcap, alibi_slopes, return_softmax,
            return_lse,
        )
        _save_forward(ctx, is_grad,
                      (q, k, v, out_padded, softmax_lse, cu_seqlens_q, cu_seqlens_k, rng_state),
                      dropout_p=dropout_p, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                      softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                      softcap=softcap, alibi_slopes=alibi_slopes, deterministic=deterministic,
                      head_dim=head_dim)
        ctx.set_materialize_grads(False)
        out = out_padded[..., :head_dim]
        return _outputs(ctx, out, softmax_lse, s_dmask, return_softmax, return_lse)

    @staticmethod
    def backward(ctx, dout, dlse=None, *unused):
        q, k, v, out, softmax_lse, cu_seqlens_q, cu_seqlens_k, rng_state = ctx.saved_tensors
        dout = _incoming_dout(dout, out)
        dq, dkv = _gradient_buffers(q.dtype, q.device, q.shape, (k.shape[0], 2, *k.shape[1:]))
        _varlen_backward(
            ctx, dout, q, k, v, out, softmax_lse, dq, dkv[:, 0], dkv[:, 1],
            cu_seqlens_q, cu_seqlens_k, ctx.max_seqlen_q, ctx.max_seqlen_k, rng_state, dlse,
        )
        dq = _unpad(dq, ctx.head_dim)
        dkv = _unpad(dkv, ctx.head_dim)
        return (dq, dkv) + (None,) * 14


class FlashAttnVarlenFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                return_softmax, block_table, return_lse, is_grad_enabled):
        _checks.window_size(window_size)
        is_grad = is_grad_enabled and (q.requires_grad or k.requires_grad or v.requires_grad)
        head_dim, head_dim_v = q.shape[-1], v.shape[-1]
        softmax_scale = _default_scale(softmax_scale, head_dim)
        multiple = head_dim_multiple(q.device)
        q, k, v = _pad(q, multiple), _pad(k, multiple), _pad(v, multiple)
        out_padded, softmax_lse, s_dmask, rng_state = _varlen_forward(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
            softmax_scale, causal, window_size, softcap, alibi_slopes, return_softmax,
            return_lse, block_table,
        )
        _save_forward(ctx, is_grad,
                      (q, k, v, out_padded, softmax_lse, cu_seqlens_q, cu_seqlens_k, rng_state),
                      dropout_p=dropout_p, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                      softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                      softcap=softcap, alibi_slopes=alibi_slopes, deterministic=deterministic,
                      head_dim=head_dim, head_dim_v=head_dim_v)
        ctx.set_materialize_grads(False)
        out = out_padded[..., :head_dim_v]
        return _outputs(ctx, out, softmax_lse, s_dmask, return_softmax, return_lse)

    @staticmethod
    def backward(ctx, dout, dlse=None, *unused):
        q, k, v, out, softmax_lse, cu_seqlens_q, cu_seqlens_k, rng_state = ctx.saved_tensors
        dout = _incoming_dout(dout, out)
        dq, dk, dv = _gradient_buffers(q.dtype, q.device, q.shape, k.shape, v.shape)
        _varlen_backward(
            ctx, dout, q, k, v, out, softmax_lse, dq, dk, dv,
            cu_seqlens_q, cu_seqlens_k, ctx.max_seqlen_q, ctx.max_seqlen_k, rng_state, dlse,
        )
        dq = _unpad(dq, ctx.head_dim)
        dk = _unpad(dk, ctx.head_dim)
        dv = _unpad(dv, ctx.head_dim_v)
        return (dq, dk, dv) + (None,) * 15


# ---- the public functions ------------------------------------------------------


def flash_attn_qkvpacked_func(
    qkv,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),  # -1 means infinite context window
    softcap=0.0,  # 0.0 means deactivated
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    return_lse=False,
):
    """Attention over a packed qkv of shape (batch, seqlen, 3, nheads, headdim)
    (k and v have the heads of q). Faster in backward than separate q, k, v
    because the gradient is written into one buffer.

    Arguments:
        dropout_p: drop probability (0.0 for evaluation).
        softmax_scale: scaling of QK^T; default 1 / sqrt(headdim).
        causal: causal mask aligned to the bottom-right corner.
        window_size: (left, right) sliding window, -1 unbounded.
        softcap: > 0 applies softcap * tanh(scores / softcap).
        alibi_slopes: float32 (nheads,) or (batch, nheads); adds
            -slope * |i + seqlen_k - seqlen_q - j| to the score.
        deterministic: deterministic backward (the CPU backend always is).
        return_attn_probs: also return softmax_lse and S_dmask (testing only;
            S_dmask is an empty tensor unless dropout_p > 0).
        return_lse: also return softmax_lse, differentiable (flashc).
    Returns:
        out (batch, seqlen, nheads, headdim); with return_attn_probs
        (out, softmax_lse, S_dmask); with return_lse only (out, softmax_lse).
        softmax_lse: (batch, nheads, seqlen) float32, natural log, +inf for
        a row that sees no key.
    """
    result = FlashAttnQKVPackedFunc.apply(
        qkv, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
        deterministic, return_attn_probs, return_lse, torch.is_grad_enabled(),
    )
    return _api_result(result, return_attn_probs, return_lse)


def flash_attn_kvpacked_func(
    q,
    kv,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    return_lse=False,
):
    """Attention of q (batch, seqlen_q, nheads, headdim) over a packed kv
    (batch, seqlen_k, 2, nheads_k, headdim); nheads must be a multiple of
    nheads_k (MQA/GQA: query head i uses kv head i // (nheads / nheads_k)).
    Other arguments and the return value as flash_attn_qkvpacked_func."""
    q, kv = _distinct(q, kv)
    result = FlashAttnKVPackedFunc.apply(
        q, kv, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
        deterministic, return_attn_probs, return_lse, torch.is_grad_enabled(),
    )
    return _api_result(result, return_attn_probs, return_lse)


def flash_attn_func(
    q,
    k,
    v,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    return_lse=False,
):
    """Attention of q (batch, seqlen_q, nheads, headdim) over k
    (batch, seqlen_k, nheads_k, headdim) and v (batch, seqlen_k, nheads_k,
    headdim_v); nheads must be a multiple of nheads_k (MQA/GQA). With
    causal and seqlen_q != seqlen_k the mask is aligned to the bottom-right
    corner: query i sees key j iff j <= i + seqlen_k - seqlen_q; a row that
    sees no key gives 0. Other arguments and the return value as
    flash_attn_qkvpacked_func."""
    q, k, v = _distinct(q, k, v)
    result = FlashAttnFunc.apply(
        q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
        deterministic, return_attn_probs, return_lse, torch.is_grad_enabled(),
    )
    return _api_result(result, return_attn_probs, return_lse)


def flash_attn_varlen_qkvpacked_func(
    qkv,
    cu_seqlens,
    max_seqlen,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    return_lse=False,
):
    """Variable-length attention over a packed qkv (total, 3, nheads,
    headdim); cu_seqlens: int32 (batch + 1,), the sequences' start rows;
    max_seqlen: int, at least the longest sequence. softmax_lse is
    (nheads, total). Other arguments as flash_attn_qkvpacked_func."""
    result = FlashAttnVarlenQKVPackedFunc.apply(
        qkv, cu_seqlens, max_seqlen, dropout_p, softmax_scale, causal, window_size, softcap,
        alibi_slopes, deterministic, return_attn_probs, return_lse, torch.is_grad_enabled(),
    )
    return _api_result(result, return_attn_probs, return_lse)


def flash_attn_varlen_kvpacked_func(
    q,
    kv,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    return_lse=False,
):
    """Variable-length attention of q (total_q, nheads, headdim) over a
    packed kv (total_k, 2, nheads_k, headdim), with int32 cu_seqlens_q /
    cu_seqlens_k (batch + 1,) and int max_seqlen_q / max_seqlen_k. Causal
    masks are aligned to each sequence's bottom-right corner. Other
    arguments as flash_attn_qkvpacked_func."""
    q, kv, cu_seqlens_q, cu_seqlens_k = _distinct(q, kv, cu_seqlens_q, cu_seqlens_k)
    result = FlashAttnVarlenKVPackedFunc.apply(
        q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
        softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
        return_attn_probs, return_lse, torch.is_grad_enabled(),
    )
    return _api_result(result, return_attn_probs, return_lse)


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    block_table=None,
    return_lse=False,
):
    """Variable-length attention of q (total_q, nheads, headdim) over k
    (total_k, nheads_k, headdim) and v (total_k, nheads_k, headdim_v), with
    int32 cu_seqlens_q / cu_seqlens_k (batch + 1,) and int max_seqlen_q /
    max_seqlen_k. block_table (paged KV) is not supported yet and must be
    None. Other arguments as flash_attn_qkvpacked_func."""
    _check_block_table(block_table)
    q, k, v, cu_seqlens_q, cu_seqlens_k = _distinct(q, k, v, cu_seqlens_q, cu_seqlens_k)
    result = FlashAttnVarlenFunc.apply(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
        softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
        return_attn_probs, block_table, return_lse, torch.is_grad_enabled(),
    )
    return _api_result(result, return_attn_probs, return_lse)
