"""flash_attn's interface (flash_attn.flash_attn_interface 2.x), backed by
the flashc C library: the six public functions, the six autograd Functions
behind them, and the four torch.library operators they call; and
flash_attn_with_kvcache (inference over a KV cache, operator
flashc::fwd_kvcache in _kvcache).

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
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F

from . import _checks, _kvcache, _ops, _scalars
from ._shapes import head_dim_multiple, pad_head_dim, round_multiple
from ._tensors import maybe_contiguous

__all__ = [
    "flash_attn_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_kvpacked_func",
    "flash_attn_varlen_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_attn_with_kvcache",
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


# ---- the lower layer -----------------------------------------------------------
# flash_attn's _flash_attn_* with its signatures: the scalars converted as
# flash_attn converts them (_scalars), then the operators (their bodies
# directly where nothing could tell the difference, see _ops).


_LOWER_LAYER_WINDOW = ("window_size_left", "window_size_right")


def _flash_attn_forward(q, k, v, dropout_p, softmax_scale, causal, window_size_left,
                        window_size_right, softcap, alibi_slopes, return_softmax):
    """(out, softmax_lse, S_dmask, rng_state) of attention over q, k, v
    (batch, seqlen, nheads, headdim); head dims the backend takes directly."""
    dropout_p, softmax_scale, causal, (window_size_left, window_size_right), softcap, _ = (
        _scalars.attention_options(dropout_p, softmax_scale, causal,
                                   (window_size_left, window_size_right), softcap, False,
                                   _LOWER_LAYER_WINDOW))
    return_softmax = _scalars.as_bool(return_softmax, "return_softmax")
    if _ops.can_call_directly(q, k, v, alibi_slopes):
        return _ops.batched_forward(q, k, v, dropout_p, softmax_scale, causal, window_size_left,
                                    window_size_right, softcap, alibi_slopes, return_softmax)
    return _wrapped_flash_attn_forward(q, k, v, dropout_p, softmax_scale, causal,
                                       window_size_left, window_size_right, softcap,
                                       alibi_slopes, return_softmax)


def _flash_attn_varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                               dropout_p, softmax_scale, causal, window_size_left=-1,
                               window_size_right=-1, softcap=0.0, alibi_slopes=None,
                               return_softmax=False, block_table=None, leftpad_k=None,
                               seqused_k=None, zero_tensors=False):
    """(out, softmax_lse, S_dmask, rng_state) of variable-length attention
    over q, k, v (total, nheads, headdim)."""
    dropout_p, softmax_scale, causal, (window_size_left, window_size_right), softcap, _ = (
        _scalars.attention_options(dropout_p, softmax_scale, causal,
                                   (window_size_left, window_size_right), softcap, False,
                                   _LOWER_LAYER_WINDOW))
    max_seqlen_q = _scalars.as_int(max_seqlen_q, "max_seqlen_q")
    max_seqlen_k = _scalars.as_int(max_seqlen_k, "max_seqlen_k")
    return_softmax = _scalars.as_bool(return_softmax, "return_softmax")
    zero_tensors = _scalars.as_bool(zero_tensors, "zero_tensors")
    args = (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
            softmax_scale, causal, window_size_left, window_size_right, softcap, alibi_slopes,
            return_softmax, block_table, leftpad_k, seqused_k, zero_tensors)
    if _ops.can_call_directly(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, block_table,
                              leftpad_k, seqused_k):
        return _ops.varlen_forward(*args)
    return _wrapped_flash_attn_varlen_forward(*args)


_increment_version = getattr(torch.autograd.graph, "increment_version", lambda t: None)


def _mark_written(*buffers):
    """What the operators' declared mutation does for the caller's buffers
    written by a direct call: their version counters move, so autograd
    notices a buffer it saved being overwritten."""
    for t in buffers:
        if t is not None:
            _increment_version(t)


def _backward_scalars(dropout_p, softmax_scale, causal, window_size_left, window_size_right,
                      softcap, deterministic):
    dropout_p, softmax_scale, causal, window, softcap, deterministic = (
        _scalars.attention_options(dropout_p, softmax_scale, causal,
                                   (window_size_left, window_size_right), softcap,
                                   deterministic, _LOWER_LAYER_WINDOW))
    return dropout_p, softmax_scale, causal, window[0], window[1], softcap, deterministic


def _flash_attn_backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, dropout_p, softmax_scale,
                         causal, window_size_left, window_size_right, softcap, alibi_slopes,
                         deterministic, rng_state=None, dlse=None):
    """dq, dk, dv (written in place where given) of the batched forward;
    returns softmax_d."""
    scalars = _backward_scalars(dropout_p, softmax_scale, causal, window_size_left,
                                window_size_right, softcap, deterministic)
    args = (dout, q, k, v, out, softmax_lse, dq, dk, dv, *scalars[:6], alibi_slopes, scalars[6])
    if _ops.can_call_directly(dout, q, k, v, out, softmax_lse, dq, dk, dv, alibi_slopes,
                              rng_state, dlse):
        softmax_d = _ops.batched_backward(*args, rng_state, dlse)
        _mark_written(dq, dk, dv)
        return softmax_d
    return _wrapped_flash_attn_backward(*args, rng_state=rng_state, dlse=dlse)


def _flash_attn_varlen_backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q,
                                cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                                softmax_scale, causal, window_size_left, window_size_right,
                                softcap, alibi_slopes, deterministic, rng_state=None,
                                zero_tensors=False, dlse=None):
    """dq, dk, dv (written in place where given) of the varlen forward;
    returns softmax_d."""
    scalars = _backward_scalars(dropout_p, softmax_scale, causal, window_size_left,
                                window_size_right, softcap, deterministic)
    args = (dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q, cu_seqlens_k,
            _scalars.as_int(max_seqlen_q, "max_seqlen_q"),
            _scalars.as_int(max_seqlen_k, "max_seqlen_k"), *scalars[:6], alibi_slopes,
            scalars[6])
    zero_tensors = _scalars.as_bool(zero_tensors, "zero_tensors")
    if _ops.can_call_directly(dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q,
                              cu_seqlens_k, alibi_slopes, rng_state, dlse):
        softmax_d = _ops.varlen_backward(*args, rng_state, zero_tensors, dlse)
        _mark_written(dq, dk, dv)
        return softmax_d
    return _wrapped_flash_attn_varlen_backward(*args, rng_state=rng_state,
                                               zero_tensors=zero_tensors, dlse=dlse)


# ---- shared pieces of the autograd Functions ---------------------------------
#
# These run on every call, so they are written for few Python operations:
# the options travel as one plain tuple (see _attention_forward), checks
# that pass are cheap and the detailed ones (with their messages) run only
# when one fails, whether the operators' bodies may be called directly is
# asked once per call, and the usual case (eager mode, separate q, k, v,
# head dims the backend takes) goes from the Function to the operator's
# body (forward) or to the kernels (backward) without further wrappers.


def _unpad(grad, head_dim):
    """A gradient without the head-dim padding."""
    return grad[..., :head_dim] if grad.shape[-1] != head_dim else grad


# The operator calls of the Functions. When the operators' bodies can be
# called directly (_ops.can_call_directly: eager mode, plain tensors) they
# are, which saves the dispatcher's overhead and the outputs the Functions
# drop: S_dmask unless returned, the (0, 0) rng_state of a call without
# dropout (the backward reads rng_state only with dropout, and takes None),
# and the backward's softmax_d; the backward goes straight to the kernels
# (_ops.backward_kernels: the forward checked its tensors). torch.compile
# always sees the operators.


def _varlen_forward(direct, q, k, v, varlen, options, return_softmax, return_lse):
    """(out_padded, softmax_lse, S_dmask, rng_state) of
    flashc::_flash_attn_varlen_forward."""
    s_dmask = return_softmax and options[0] > 0  # else an empty S_dmask, where returned
    args = (q, k, v, varlen.cu_seqlens_q, varlen.cu_seqlens_k, varlen.max_seqlen_q,
            varlen.max_seqlen_k, *options[:7], s_dmask, varlen.block_table)
    if direct:
        return _ops.varlen_forward(*args, want_s_dmask=return_softmax or return_lse,
                                   want_rng_state=False)
    return _wrapped_flash_attn_varlen_forward(*args)


def _varlen_backward(ctx, direct, dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q,
                     cu_seqlens_k, rng_state, dlse):
    """flashc::_flash_attn_varlen_backward into dq, dk, dv, with the settings
    saved on ctx."""
    if direct:
        _ops.backward_kernels(dout, q, k, v, out, softmax_lse, dlse, dq, dk, dv, *ctx.options,
                              rng_state,
                              (cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous(),
                               ctx.max_seqlen_q, ctx.max_seqlen_k))
    else:
        _wrapped_flash_attn_varlen_backward(
            dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q, cu_seqlens_k,
            ctx.max_seqlen_q, ctx.max_seqlen_k, *ctx.options, rng_state=rng_state, dlse=dlse)


def _outputs(ctx, out, softmax_lse, s_dmask):
    """The Function's outputs where softmax_lse or S_dmask is returned:
    (out, softmax_lse, S_dmask), softmax_lse differentiable and S_dmask
    not."""
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
    # (identity by `is`, not id(): torch.compile cannot take id() of a
    # tensor made inside the compiled function, such as a slice)
    result = None
    for i in range(1, len(tensors)):
        t = tensors[i]
        if t is not None and any(t is s for s in tensors[:i]):
            if result is None:
                result = list(tensors)
            result[i] = t.view_as(t)
    return tensors if result is None else result


def _gradient_buffers(direct, likes, shapes):
    """Empty gradient buffers of the given shapes. Where a compiler could see
    them (anything but plain eager mode, see _ops.can_call_directly) they
    are carved from one allocation: separate torch.empty calls of equal
    shape can be merged into one buffer by a compiler (PyTorch 2.4's
    inductor does), after which the backward would write two gradients
    into the same memory. Eager allocations are never merged, and separate
    ones cost less Python. `likes`: q, k, v, whose dtype and device the
    buffers take."""
    if direct:
        if len(shapes) == 3:  # separate q, k, v: as flash_attn, empty_like of each
            # (where its last dim is contiguous: the kernels write rows)
            return [torch.empty_like(t) if t.stride()[-1] == 1 else t.new_empty(t.shape)
                    for t in likes]
        return [likes[0].new_empty(shape) for shape in shapes]
    sizes = [math.prod(shape) for shape in shapes]
    flat = likes[0].new_empty(sum(sizes))
    return [chunk.view(shape) for chunk, shape in zip(flat.split(sizes), shapes)]


class _Varlen(NamedTuple):
    """The variable-length arguments of a varlen Function's forward."""

    cu_seqlens_q: torch.Tensor
    cu_seqlens_k: torch.Tensor
    max_seqlen_q: int
    max_seqlen_k: int
    block_table: Optional[torch.Tensor] = None


def _packed_shape(t, count):
    """The shape of `count` tensors shaped like t packed on the third axis
    from the end: (batch, seqlen, count, nheads, headdim) or
    (total, count, nheads, headdim)."""
    return (*t.shape[:-2], count, *t.shape[-2:])


def _unpacked(tensors):
    """q, k, v from a Function's tensor inputs: (qkv,), (q, kv) or (q, k, v).
    The packed axis is the third from the end in the batched and the varlen
    layouts alike."""
    if len(tensors) == 1:
        (qkv,) = tensors
        return qkv.select(-3, 0), qkv.select(-3, 1), qkv.select(-3, 2)
    if len(tensors) == 2:
        q, kv = tensors
        return q, kv.select(-3, 0), kv.select(-3, 1)
    return tensors


def _attention_forward(ctx, inputs, dropout_p, softmax_scale, causal, window_size, softcap,
                       alibi_slopes, deterministic, return_softmax, return_lse,
                       is_grad_enabled, varlen=None):
    """The forward of every Function. inputs: its tensors, (qkv,), (q, kv)
    or (q, k, v), each padded to the backend's head-dim multiple before k
    and v are taken apart; varlen: a _Varlen for the varlen Functions. out
    has the head dim of v when v is separate, of q otherwise."""
    dropout_p, softmax_scale, causal, window_size, softcap, deterministic = (
        _scalars.attention_options(dropout_p, softmax_scale, causal, window_size, softcap,
                                   deterministic))
    if type(return_softmax) is not bool:
        return_softmax = _scalars.as_bool(return_softmax, "return_attn_probs")
    if type(return_lse) is not bool:
        return_lse = _scalars.as_bool(return_lse, "return_lse")
    first = inputs[0]
    head_dim = first.shape[-1]
    head_dim_v = inputs[2].shape[-1] if len(inputs) == 3 else head_dim
    if softmax_scale is None:
        softmax_scale = head_dim ** -0.5
    multiple = head_dim_multiple(first)
    padded = multiple > 1 and (head_dim % multiple or head_dim_v % multiple)
    if padded:
        inputs = [pad_head_dim(t, multiple) for t in inputs]
    q, k, v = inputs if len(inputs) == 3 else _unpacked(inputs)
    s_dmask = return_softmax and dropout_p > 0  # else an empty S_dmask, where returned
    if varlen is None:
        if _ops.can_call_directly(q, k, v, alibi_slopes):
            out_padded, softmax_lse, s_dmask, rng_state = _ops.batched_forward(
                q, k, v, dropout_p, softmax_scale, causal, window_size[0], window_size[1],
                softcap, alibi_slopes, s_dmask, return_softmax or return_lse, False)
        else:
            out_padded, softmax_lse, s_dmask, rng_state = _wrapped_flash_attn_forward(
                q, k, v, dropout_p, softmax_scale, causal, window_size[0], window_size[1],
                softcap, alibi_slopes, s_dmask)
        cu_seqlens = ()
    else:
        varlen = varlen._replace(max_seqlen_q=_scalars.as_int(varlen.max_seqlen_q, "max_seqlen_q"),
                                 max_seqlen_k=_scalars.as_int(varlen.max_seqlen_k, "max_seqlen_k"))
        direct = _ops.can_call_directly(q, k, v, varlen.cu_seqlens_q, varlen.cu_seqlens_k,
                                        alibi_slopes)
        out_padded, softmax_lse, s_dmask, rng_state = _varlen_forward(
            direct, q, k, v, varlen,
            (dropout_p, softmax_scale, causal, window_size[0], window_size[1], softcap,
             alibi_slopes),
            return_softmax, return_lse)
        # One cu_seqlens for both (the qkv-packed Function) is saved once.
        cu_seqlens = ((varlen.cu_seqlens_q,) if varlen.cu_seqlens_k is varlen.cu_seqlens_q
                      else (varlen.cu_seqlens_q, varlen.cu_seqlens_k))
        ctx.max_seqlen_q, ctx.max_seqlen_k = varlen.max_seqlen_q, varlen.max_seqlen_k
    ctx.paged = varlen is not None and varlen.block_table is not None
    # Tensors are saved only when a gradient is needed; the rest lives on ctx.
    if (is_grad_enabled and not ctx.paged
            and (first.requires_grad or any(t.requires_grad for t in inputs[1:]))):
        ctx.save_for_backward(q, k, v, out_padded, softmax_lse, *cu_seqlens, rng_state)
    # the backward operators' parameters from dropout_p to deterministic
    ctx.options = (dropout_p, softmax_scale, causal, window_size[0], window_size[1], softcap,
                   alibi_slopes, deterministic)
    # one head dim per tensor input (only a separate v has its own)
    ctx.head_dims = (head_dim, head_dim, head_dim_v)[:len(inputs)]
    ctx.padded = padded
    out = out_padded[..., :head_dim_v] if padded else out_padded
    if not (return_softmax or return_lse):
        return out  # (one output: autograd passes zeros where its gradient is undefined)
    ctx.set_materialize_grads(False)
    return _outputs(ctx, out, softmax_lse, s_dmask)


def _attention_backward(ctx, dout, dlse):
    """The backward of every Function: the gradients of its tensor inputs,
    in the layout the forward received them (see _attention_forward)."""
    if ctx.paged:
        _checks.not_supported(True, "block_table", "the backward of a paged (block_table) "
                              "forward is not supported (as in flash_attn)")
    q, k, v, out, softmax_lse, *cu_seqlens, rng_state = ctx.saved_tensors
    if dout is None or ctx.padded:  # (else autograd gives dout out's shape)
        dout = _incoming_dout(dout, out)
    options = ctx.options
    count = len(ctx.head_dims)
    if not cu_seqlens:
        direct = _ops.can_call_directly(dout, q, k, v, out, softmax_lse, options[6], rng_state,
                                        dlse)
        if direct and count == 3 and not ctx.padded:  # the usual case
            return _ops.backward_kernels(dout, q, k, v, out, softmax_lse, dlse, None, None,
                                         None, *options, rng_state)
    else:
        direct = _ops.can_call_directly(dout, q, k, v, out, softmax_lse, *cu_seqlens,
                                        options[6], rng_state, dlse)
    if count == 1:
        shapes = (_packed_shape(q, 3),)
    elif count == 2:
        shapes = (q.shape, _packed_shape(k, 2))
    else:
        shapes = (q.shape, k.shape, v.shape)
    buffers = _gradient_buffers(direct, (q, k, v), shapes)
    dq, dk, dv = _unpacked(buffers)
    if cu_seqlens:
        _varlen_backward(ctx, direct, dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens[0],
                         cu_seqlens[-1], rng_state, dlse)
    elif direct:
        _ops.backward_kernels(dout, q, k, v, out, softmax_lse, dlse, dq, dk, dv, *options,
                              rng_state)
    else:
        _wrapped_flash_attn_backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, *options,
                                     rng_state=rng_state, dlse=dlse)
    if not ctx.padded:
        # (the shapes are not even read, so torch.jit.trace records no comparison)
        return tuple(buffers)
    return tuple(_unpad(grad, head_dim) for grad, head_dim in zip(buffers, ctx.head_dims))


# ---- the Function the public functions apply -----------------------------------


class _Attention(torch.autograd.Function):
    """What the six public functions apply: their tensor inputs ((qkv,),
    (q, kv) or (q, k, v)), alibi_slopes, cu_seqlens_q and cu_seqlens_k (None
    where absent; cu_seqlens_k None also where it is cu_seqlens_q, which
    torch.compile cannot take twice), and the scalar arguments and max_seqlen_q / max_seqlen_k
    / block_table as one tuple (`settings`: _attention_forward's arguments
    from dropout_p on, alibi_slopes and varlen aside). Function.apply
    handles each argument it is given, so these seven or fewer cost about a
    microsecond less per call than flash_attn's thirteen to eighteen, which
    the six flash_attn-named Functions below keep for code that applies
    them itself."""

    @staticmethod
    def forward(ctx, *args):
        *inputs, alibi_slopes, cu_seqlens_q, cu_seqlens_k, settings = args
        (dropout_p, softmax_scale, causal, window_size, softcap, deterministic, return_softmax,
         return_lse, is_grad_enabled, max_seqlen_q, max_seqlen_k, block_table) = settings
        varlen = None if cu_seqlens_q is None else _Varlen(
            cu_seqlens_q, cu_seqlens_q if cu_seqlens_k is None else cu_seqlens_k, max_seqlen_q,
            max_seqlen_k, block_table)
        return _attention_forward(ctx, inputs, dropout_p, softmax_scale, causal, window_size,
                                  softcap, alibi_slopes, deterministic, return_softmax,
                                  return_lse, is_grad_enabled, varlen)

    @staticmethod
    def backward(ctx, dout, dlse=None, *unused):
        return _attention_backward(ctx, dout, dlse) + (None, None, None, None)


def _settings(dropout_p, softmax_scale, causal, window_size, softcap, deterministic,
              return_attn_probs, return_lse, max_seqlen_q=None, max_seqlen_k=None,
              block_table=None):
    """_Attention's settings tuple (grad mode read here: inside a Function's
    forward it is off)."""
    return (dropout_p, softmax_scale, causal, window_size, softcap, deterministic,
            return_attn_probs, return_lse, torch.is_grad_enabled(), max_seqlen_q, max_seqlen_k,
            block_table)


# ---- batched -----------------------------------------------------------------


class FlashAttnQKVPackedFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, qkv, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                deterministic, return_softmax, return_lse, is_grad_enabled):
        _checks.packed(qkv, "qkv", 5, 2, 3, "(batch, seqlen, 3, nheads, headdim)")
        return _attention_forward(ctx, (qkv,), dropout_p, softmax_scale, causal, window_size,
                                  softcap, alibi_slopes, deterministic, return_softmax,
                                  return_lse, is_grad_enabled)

    @staticmethod
    def backward(ctx, dout, dlse=None, *unused):
        return _attention_backward(ctx, dout, dlse) + (None,) * 10


class FlashAttnKVPackedFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, kv, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                deterministic, return_softmax, return_lse, is_grad_enabled):
        _checks.packed(kv, "kv", 5, 2, 2, "(batch, seqlen_k, 2, nheads_k, headdim)")
        return _attention_forward(ctx, (q, kv), dropout_p, softmax_scale, causal, window_size,
                                  softcap, alibi_slopes, deterministic, return_softmax,
                                  return_lse, is_grad_enabled)

    @staticmethod
    def backward(ctx, dout, dlse=None, *unused):
        return _attention_backward(ctx, dout, dlse) + (None,) * 10


class FlashAttnFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                alibi_slopes, deterministic, return_softmax, return_lse, is_grad_enabled):
        return _attention_forward(ctx, (q, k, v), dropout_p, softmax_scale, causal, window_size,
                                  softcap, alibi_slopes, deterministic, return_softmax,
                                  return_lse, is_grad_enabled)

    @staticmethod
    def backward(ctx, dout, dlse=None, *unused):
        return _attention_backward(ctx, dout, dlse) + (None,) * 10


# ---- varlen ------------------------------------------------------------------


class FlashAttnVarlenQKVPackedFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, qkv, cu_seqlens, max_seqlen, dropout_p, softmax_scale, causal, window_size,
                softcap, alibi_slopes, deterministic, return_softmax, return_lse,
                is_grad_enabled):
        _checks.packed(qkv, "qkv", 4, 1, 3, "(total, 3, nheads, headdim)")
        return _attention_forward(ctx, (qkv,), dropout_p, softmax_scale, causal, window_size,
                                  softcap, alibi_slopes, deterministic, return_softmax,
                                  return_lse, is_grad_enabled,
                                  _Varlen(cu_seqlens, cu_seqlens, max_seqlen, max_seqlen))

    @staticmethod
    def backward(ctx, dout, dlse=None, *unused):
        return _attention_backward(ctx, dout, dlse) + (None,) * 12


class FlashAttnVarlenKVPackedFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                return_softmax, return_lse, is_grad_enabled):
        _checks.packed(kv, "kv", 4, 1, 2, "(total_k, 2, nheads_k, headdim)")
        return _attention_forward(ctx, (q, kv), dropout_p, softmax_scale, causal, window_size,
                                  softcap, alibi_slopes, deterministic, return_softmax,
                                  return_lse, is_grad_enabled,
                                  _Varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k))

    @staticmethod
    def backward(ctx, dout, dlse=None, *unused):
        return _attention_backward(ctx, dout, dlse) + (None,) * 14


class FlashAttnVarlenFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                return_softmax, block_table, return_lse, is_grad_enabled):
        return _attention_forward(ctx, (q, k, v), dropout_p, softmax_scale, causal, window_size,
                                  softcap, alibi_slopes, deterministic, return_softmax,
                                  return_lse, is_grad_enabled,
                                  _Varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                          block_table))

    @staticmethod
    def backward(ctx, dout, dlse=None, *unused):
        return _attention_backward(ctx, dout, dlse) + (None,) * 15


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
    _checks.packed(qkv, "qkv", 5, 2, 3, "(batch, seqlen, 3, nheads, headdim)")
    result = _Attention.apply(qkv, alibi_slopes, None, None, _settings(
        dropout_p, softmax_scale, causal, window_size, softcap, deterministic,
        return_attn_probs, return_lse))
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
    _checks.packed(kv, "kv", 5, 2, 2, "(batch, seqlen_k, 2, nheads_k, headdim)")
    q, kv = _distinct(q, kv)
    result = _Attention.apply(q, kv, alibi_slopes, None, None, _settings(
        dropout_p, softmax_scale, causal, window_size, softcap, deterministic,
        return_attn_probs, return_lse))
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
    if k is q or v is q or v is k:  # (_distinct's test, inline: it runs on every call)
        q, k, v = _distinct(q, k, v)
    result = _Attention.apply(q, k, v, alibi_slopes, None, None, (
        dropout_p, softmax_scale, causal, window_size, softcap, deterministic,
        return_attn_probs, return_lse, torch.is_grad_enabled(), None, None, None))
    # (_settings written out: this function is the one most calls go through)
    if not (return_attn_probs or return_lse):
        return result
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
    _checks.packed(qkv, "qkv", 4, 1, 3, "(total, 3, nheads, headdim)")
    result = _Attention.apply(qkv, alibi_slopes, cu_seqlens, None, _settings(
        dropout_p, softmax_scale, causal, window_size, softcap, deterministic,
        return_attn_probs, return_lse, max_seqlen, max_seqlen))
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
    _checks.packed(kv, "kv", 4, 1, 2, "(total_k, 2, nheads_k, headdim)")
    q, kv, cu_seqlens_q, cu_seqlens_k = _distinct(q, kv, cu_seqlens_q, cu_seqlens_k)
    result = _Attention.apply(q, kv, alibi_slopes, cu_seqlens_q, cu_seqlens_k, _settings(
        dropout_p, softmax_scale, causal, window_size, softcap, deterministic,
        return_attn_probs, return_lse, max_seqlen_q, max_seqlen_k))
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
    max_seqlen_k. With block_table (int32 (batch, max_num_blocks_per_seq)),
    k and v are a paged cache (num_blocks, page_block_size, nheads_k,
    headdim): key j of sequence i is row j % page_block_size of block
    block_table[i, j // page_block_size], and cu_seqlens_k gives only the
    key lengths; such a forward has no backward. Other arguments as
    flash_attn_qkvpacked_func."""
    q, k, v, cu_seqlens_q, cu_seqlens_k = _distinct(q, k, v, cu_seqlens_q, cu_seqlens_k)
    result = _Attention.apply(q, k, v, alibi_slopes, cu_seqlens_q, cu_seqlens_k, _settings(
        dropout_p, softmax_scale, causal, window_size, softcap, deterministic,
        return_attn_probs, return_lse, max_seqlen_q, max_seqlen_k, block_table))
    return _api_result(result, return_attn_probs, return_lse)


def flash_attn_with_kvcache(
    q,
    k_cache,
    v_cache,
    k=None,
    v=None,
    rotary_cos=None,
    rotary_sin=None,
    cache_seqlens=None,
    cache_batch_idx=None,
    cache_leftpad=None,
    block_table=None,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),  # -1 means infinite context window
    softcap=0.0,  # 0.0 means deactivated
    rotary_interleaved=True,
    alibi_slopes=None,
    num_splits=0,
    return_softmax_lse=False,
):
    """Attention of q (batch, seqlen, nheads, headdim) over a KV cache, for
    incremental decoding; no backward.

    If k and v (batch, seqlen_new, nheads_k, headdim) are given, they are
    written into k_cache / v_cache in place at cache indices cache_seqlens,
    cache_seqlens + 1, ... before q attends to the cache (the cache must hold
    them). k_cache / v_cache are (batch_size_cache, seqlen_cache, nheads_k,
    headdim), sequence i using cache batch cache_batch_idx[i] (or i), or with
    block_table (int32 (batch, max_num_blocks_per_seq)) a paged cache
    (num_blocks, page_block_size, nheads_k, headdim) of any block size.
    cache_seqlens: int or int32 (batch,), the keys already in the cache
    (default: all of it); cache_leftpad: int32 (batch,), the first cache
    index of each sequence.

    rotary_cos / rotary_sin (seqlen_ro, rotary_dim / 2): rotary embedding of
    k at positions cache_seqlens, cache_seqlens + 1, ..., and of q at those
    positions under a causal mask or a window, else at cache_seqlens for
    every row; rotary_interleaved pairs dims (0, 1), (2, 3), ..., else
    (i, i + rotary_dim / 2) (GPT-NeoX).

    Masks, softcap, ALiBi and GQA as flash_attn_func, the causal mask aligned
    to the bottom-right corner over the cache's keys. num_splits: key
    splits on CUDA (0 = chosen, 1 = none). Returns out (batch, seqlen,
    nheads, headdim), and softmax_lse (batch, nheads, seqlen) with
    return_softmax_lse."""
    _, softmax_scale, causal, window_size, softcap, _ = _scalars.attention_options(
        0.0, softmax_scale, causal, window_size, softcap, False)
    rotary_interleaved = _scalars.as_bool(rotary_interleaved, "rotary_interleaved")
    num_splits = _scalars.as_int(num_splits, "num_splits")
    return_softmax_lse = _scalars.as_bool(return_softmax_lse, "return_softmax_lse")
    _checks.tensor(q, "q")
    _checks.tensor(k_cache, "k_cache")  # (its device is read here)
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** -0.5
    if cache_seqlens is not None and not isinstance(cache_seqlens, torch.Tensor):
        cache_seqlens = torch.full((q.shape[0],), _scalars.as_int(cache_seqlens, "cache_seqlens"),
                                   dtype=torch.int32, device=k_cache.device)
    # Every tensor argument's type, before either path: a non-tensor would
    # otherwise reach the operator's schema, whose error names no argument.
    _kvcache.check_types(q, k_cache, v_cache, (k, v, cache_seqlens, rotary_cos, rotary_sin,
                                               cache_batch_idx, cache_leftpad, block_table,
                                               alibi_slopes))
    args = (q, k_cache, v_cache, k, v, cache_seqlens, rotary_cos, rotary_sin, cache_batch_idx,
            cache_leftpad, block_table, alibi_slopes, softmax_scale, causal, window_size[0],
            window_size[1], softcap, rotary_interleaved, num_splits)
    if _ops.can_call_directly(q, k_cache, v_cache, k, v, cache_seqlens, rotary_cos, rotary_sin,
                              cache_batch_idx, cache_leftpad, block_table, alibi_slopes):
        out, softmax_lse = _kvcache.fwd_kvcache_body(*args)
        if k is not None:
            _mark_written(k_cache, v_cache)
    else:
        out, softmax_lse = torch.ops.flashc.fwd_kvcache(*args)
    return (out, softmax_lse) if return_softmax_lse else out
