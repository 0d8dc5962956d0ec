"""The four flashc operators, registered with torch.library in the `flashc`
namespace (flashc::_flash_attn_forward, flashc::_flash_attn_varlen_forward,
flashc::_flash_attn_backward, flashc::_flash_attn_varlen_backward), with
fake implementations for torch.compile. Names, parameters and return values
are flash_attn's; the backward operators take one more, optional argument,
`dlse` (the gradient of softmax_lse).

The operators take head dims the backend accepts (the autograd layer pads);
inputs whose last dim is strided are made contiguous; everything else is
described to the C library as the view it is.

Each operator's body is a plain function here (batched_forward,
varlen_forward, batched_backward, varlen_backward). The autograd layer
calls those directly when nothing could tell the difference (see
can_call_directly): the dispatcher's path through a Python custom operator
costs tens of microseconds per call, as much as a short GPU kernel. Called
directly they can also skip outputs the caller drops.
"""
from typing import Optional, Tuple

import torch

from . import _checks, _kernels, _rng, _shapes, _softmax_d
from ._tensors import maybe_contiguous

_DEVICES = ("cpu", "cuda")


def _check_attention_inputs(q, k, v, rank, layout, kv_rank=None, kv_layout=None):
    """Ranks (k and v: kv_rank in kv_layout where they differ from q's, as
    a paged cache does) and one attention dtype."""
    _checks.rank(q, "q", rank, layout)
    _checks.rank(k, "k", kv_rank or rank, kv_layout or layout)
    _checks.rank(v, "v", kv_rank or rank, kv_layout or layout)
    _checks.attention_dtype(q, "q")
    _checks.attention_dtype(k, "k", q)
    _checks.attention_dtype(v, "v", q)


def _check_forward_scalars(dropout_p, softmax_scale):
    if not _checks.forward_scalars_ok(dropout_p, softmax_scale):
        _checks.dropout(dropout_p)
        _checks.softmax_scale(softmax_scale)


# Tensor types the operators see as they are: no __torch_dispatch__, no
# __torch_function__ (Parameter disables it).
_PLAIN_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)

# The state can_call_directly reads; without any of these (an older or
# newer PyTorch), the operators are always called.
_STATE_QUERIES = tuple(
    getattr(module, name, None)
    for module, name in (
        (torch._C, "_len_torch_dispatch_stack"),
        (torch._C, "_is_torch_function_mode_enabled"),
        (torch._C._autograd, "_profiler_enabled"),
        (torch._C, "_get_tracing_state"),
    )
)
_DIRECT_CALLS_POSSIBLE = None not in _STATE_QUERIES
_is_compiling = torch.compiler.is_compiling  # (the function torch.compile recognises)
(_dispatch_mode_count, _torch_function_mode_enabled, _profiler_enabled,
 _jit_tracing_state) = _STATE_QUERIES


def can_call_directly(*tensors):
    """Whether calling an operator's body directly does what calling the
    operator would: not while torch.compile / torch.export trace (the
    operators are what they must see), nor under a dispatch or
    torch_function mode (FakeTensorMode, make_fx, FlopCounterMode...), the
    autograd profiler (its trace names the operators), torch.jit tracing,
    or for tensor subclasses and devices other than cpu and cuda (meta
    tensors go to the fake implementations). None entries are skipped; the
    device is asked of the first tensor only (the bodies' checks reject
    tensors on different devices, naming them)."""
    if (
        not _DIRECT_CALLS_POSSIBLE
        or _is_compiling()
        or _dispatch_mode_count()
        or _torch_function_mode_enabled()
        or _profiler_enabled()
        or _jit_tracing_state() is not None
    ):
        return False
    for t in tensors:
        if t is not None and type(t) not in _PLAIN_TENSOR_TYPES:
            return False
    first = tensors[0]
    return first.is_cpu or first.is_cuda


# ---- forward -----------------------------------------------------------------


def _run_forward(q, k, v, out, lse, s_dmask, dropout_p, softmax_scale, causal, window_size_left,
                 window_size_right, softcap, alibi_slopes, want_rng_state, varlen=()):
    """Both forward bodies' kernel call into out, lse and S_dmask (an empty
    or absent S_dmask is not written), with a fresh dropout seed, after
    their checks (so q, k, v have one dtype and device); varlen:
    (cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k) of
    _kernels.forward. Returns rng_state."""
    if dropout_p > 0.0:
        seed, offset, rng_state = _rng.draw(q.device)
    else:
        seed = offset = 0
        rng_state = _rng.unused(q.device) if want_rng_state else None
    _kernels.forward(q, k, v, out, lse,
                     s_dmask if s_dmask is not None and s_dmask.numel() else None,
                     softmax_scale, causal, window_size_left, window_size_right, softcap,
                     alibi_slopes, dropout_p, seed, offset, *varlen, checked=True)
    return rng_state


def batched_forward(q, k, v, dropout_p, softmax_scale, causal, window_size_left,
                    window_size_right, softcap, alibi_slopes, return_softmax,
                    want_s_dmask=True, want_rng_state=True):
    """flashc::_flash_attn_forward's body. want_s_dmask=False: S_dmask comes
    back as None unless requested; want_rng_state=False: rng_state comes
    back as None without dropout. (The autograd Functions' forward on every
    eager call: each line here runs per call.)"""
    if not _checks.attention_inputs_ok(4, q, k, v, alibi_slopes):
        _check_attention_inputs(q, k, v, 4, "(batch, seqlen, nheads, headdim)")
        _checks.same_device([("q", q), ("k", k), ("v", v), ("alibi_slopes", alibi_slopes)])
    if not _checks.forward_scalars_ok(dropout_p, softmax_scale):
        _check_forward_scalars(dropout_p, softmax_scale)
    # (stride()[-1]: stride(-1) parses its argument, which costs twice as much)
    if q.stride()[-1] != 1 or k.stride()[-1] != 1 or v.stride()[-1] != 1:
        q, k, v = maybe_contiguous(q), maybe_contiguous(k), maybe_contiguous(v)
    out, lse, s_dmask = _batched_forward_outputs(q, k, v, return_softmax, dropout_p,
                                                 want_s_dmask)
    rng_state = _run_forward(q, k, v, out, lse, s_dmask, dropout_p, softmax_scale, causal,
                             window_size_left, window_size_right, softcap, alibi_slopes,
                             want_rng_state)
    return out, lse, s_dmask, rng_state


@torch.library.custom_op("flashc::_flash_attn_forward", mutates_args=(), device_types=_DEVICES)
def _flash_attn_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dropout_p: float,
    softmax_scale: float,
    causal: bool,
    window_size_left: int,
    window_size_right: int,
    softcap: float,
    alibi_slopes: Optional[torch.Tensor],
    return_softmax: bool,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return batched_forward(q, k, v, dropout_p, softmax_scale, causal, window_size_left,
                           window_size_right, softcap, alibi_slopes, return_softmax)


def _batched_forward_outputs(q, k, v, return_softmax, dropout_p, want_s_dmask=True):
    b, sq, h, _ = q.shape
    s_dmask = (_shapes.s_dmask_shape(b, h, sq, k.shape[1]) if return_softmax and dropout_p > 0
               else None)
    return _shapes.forward_outputs(q, v, (b, h, sq), s_dmask, want_s_dmask)


@_flash_attn_forward.register_fake
def _(q, k, v, dropout_p, softmax_scale, causal, window_size_left, window_size_right, softcap,
      alibi_slopes, return_softmax):
    out, lse, s_dmask = _batched_forward_outputs(q, k, v, return_softmax, dropout_p)
    return out, lse, s_dmask, _shapes.rng_state(q.device)


def varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                   softmax_scale, causal, window_size_left=-1, window_size_right=-1,
                   softcap=0.0, alibi_slopes=None, return_softmax=False, block_table=None,
                   leftpad_k=None, seqused_k=None, zero_tensors=False, want_s_dmask=True,
                   want_rng_state=True):
    """flashc::_flash_attn_varlen_forward's body; want_s_dmask and
    want_rng_state as batched_forward."""
    _checks.not_supported(leftpad_k, "leftpad_k", "left padding of keys is not supported by flashc "
                          "in the varlen forward (flash_attn_with_kvcache takes cache_leftpad)")
    if block_table is None:
        if not _checks.attention_inputs_ok(3, q, k, v, alibi_slopes):
            _check_attention_inputs(q, k, v, 3, "(total, nheads, headdim)")
    else:  # paged: k and v are (num_blocks, page_block_size, nheads_k, headdim)
        _check_attention_inputs(q, k, v, 3, "(total, nheads, headdim)", 4,
                                "(num_blocks, page_block_size, nheads_k, headdim) with block_table")
        _checks.int32_matrix(block_table, "block_table")
        block_table = maybe_contiguous(block_table)
    _checks.cu_seqlens(cu_seqlens_q, cu_seqlens_k)
    if seqused_k is not None:
        _checks.int32_vector(seqused_k, "seqused_k", cu_seqlens_q.shape[0] - 1)
    _checks.same_device([("q", q), ("k", k), ("v", v), ("cu_seqlens_q", cu_seqlens_q),
                         ("cu_seqlens_k", cu_seqlens_k), ("seqused_k", seqused_k),
                         ("alibi_slopes", alibi_slopes), ("block_table", block_table)])
    _check_forward_scalars(dropout_p, softmax_scale)
    q, k, v = maybe_contiguous(q), maybe_contiguous(k), maybe_contiguous(v)
    out, lse, s_dmask = _varlen_forward_outputs(q, v, cu_seqlens_q, max_seqlen_q, max_seqlen_k,
                                                return_softmax, dropout_p, want_s_dmask)
    rng_state = _run_forward(
        q, k, v, out, lse, s_dmask, dropout_p, softmax_scale, causal, window_size_left,
        window_size_right, softcap, alibi_slopes, want_rng_state,
        (cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous(),
         None if seqused_k is None else seqused_k.contiguous(), max_seqlen_q, max_seqlen_k,
         block_table),
    )
    if zero_tensors:
        _lse_outside_sequences(lse, cu_seqlens_q, float("-inf"))
    return out, lse, s_dmask, rng_state


@torch.library.custom_op(
    "flashc::_flash_attn_varlen_forward", mutates_args=(), device_types=_DEVICES
)
def _flash_attn_varlen_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    dropout_p: float,
    softmax_scale: float,
    causal: bool,
    window_size_left: int = -1,
    window_size_right: int = -1,
    softcap: float = 0.0,
    alibi_slopes: Optional[torch.Tensor] = None,
    return_softmax: bool = False,
    block_table: Optional[torch.Tensor] = None,
    leftpad_k: Optional[torch.Tensor] = None,
    seqused_k: Optional[torch.Tensor] = None,
    zero_tensors: bool = False,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                          dropout_p, softmax_scale, causal, window_size_left, window_size_right,
                          softcap, alibi_slopes, return_softmax, block_table, leftpad_k,
                          seqused_k, zero_tensors)


def _varlen_forward_outputs(q, v, cu_seqlens_q, max_seqlen_q, max_seqlen_k, return_softmax,
                            dropout_p, want_s_dmask=True):
    total_q, h, _ = q.shape
    batch = cu_seqlens_q.shape[0] - 1
    s_dmask = (
        _shapes.s_dmask_shape(batch, h, max_seqlen_q, max_seqlen_k)
        if return_softmax and dropout_p > 0
        else None
    )
    return _shapes.forward_outputs(q, v, (h, total_q), s_dmask, want_s_dmask)


def _lse_outside_sequences(lse, cu_seqlens_q, value):
    """flash_attn's zero_tensors: packed rows that belong to no sequence keep
    LSE -inf (flashc writes them as rows that see no key: out 0, LSE +inf)."""
    rows = torch.arange(lse.shape[1], device=lse.device)
    outside = (rows < cu_seqlens_q[0]) | (rows >= cu_seqlens_q[-1])
    lse.masked_fill_(outside.unsqueeze(0), value)


@_flash_attn_varlen_forward.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
      causal, window_size_left=-1, window_size_right=-1, softcap=0.0, alibi_slopes=None,
      return_softmax=False, block_table=None, leftpad_k=None, seqused_k=None,
      zero_tensors=False):
    out, lse, s_dmask = _varlen_forward_outputs(q, v, cu_seqlens_q, max_seqlen_q, max_seqlen_k,
                                                return_softmax, dropout_p)
    return out, lse, s_dmask, _shapes.rng_state(q.device)


# ---- backward ----------------------------------------------------------------


def _backward_inputs_ok(dout, q, k, v, out, softmax_lse, dq, dk, dv, rank, others):
    """What _check_backward_inputs and same_device check, cheaply."""
    if not _checks.attention_inputs_ok(rank, q, k, v, dout, out, softmax_lse, dq, dk, dv,
                                       *others):
        return False
    dtype = q.dtype
    return (dout.dim() == rank and out.dim() == rank and dout.dtype == dtype
            and out.dtype == dtype and (dq is None or (dq.dtype == dtype and dq.shape == q.shape))
            and (dk is None or (dk.dtype == dtype and dk.shape == k.shape))
            and (dv is None or (dv.dtype == dtype and dv.shape == v.shape)))


def _check_backward_inputs(dout, q, k, v, out, softmax_lse, dq, dk, dv, rank, layout):
    _check_attention_inputs(q, k, v, rank, layout)
    _checks.rank(dout, "dout", rank, layout)
    _checks.rank(out, "out", rank, layout)
    _checks.attention_dtype(out, "out", q)
    _checks.attention_dtype(dout, "dout", q)
    _checks.gradient_buffer(dq, "dq", q, "q")
    _checks.gradient_buffer(dk, "dk", k, "k")
    _checks.gradient_buffer(dv, "dv", v, "v")


def _gradient_buffers(q, k, v, dq, dk, dv):
    return (
        torch.empty_like(q) if dq is None else dq,
        torch.empty_like(k) if dk is None else dk,
        torch.empty_like(v) if dv is None else dv,
    )


def _run_backward(dout, q, k, v, out, softmax_lse, dlse, dq, dk, dv, dropout_p, softmax_scale,
                  causal, window_size_left, window_size_right, softcap, alibi_slopes,
                  deterministic, rng_state, varlen=()):
    """Both backward bodies after their layout and device checks: the scalar
    checks, then backward_kernels."""
    _check_forward_scalars(dropout_p, softmax_scale)
    backward_kernels(dout, q, k, v, out, softmax_lse, dlse, dq, dk, dv, dropout_p, softmax_scale,
                     causal, window_size_left, window_size_right, softcap, alibi_slopes,
                     deterministic, rng_state, varlen)


def backward_kernels(dout, q, k, v, out, softmax_lse, dlse, dq, dk, dv, dropout_p,
                     softmax_scale, causal, window_size_left, window_size_right, softcap,
                     alibi_slopes, deterministic, rng_state, varlen=()):
    """The backward's kernels into dq, dk, dv (fresh buffers where None),
    with no checks of their own beyond rng_state (the C library validates
    every argument again and writes nothing on error): for the bodies above,
    after theirs, and for the autograd Functions, whose tensors are their
    forward's (checked there) and whose dout autograd gives out's shape and
    dtype. varlen: (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    of _kernels.backward. Returns dq, dk, dv."""
    if dropout_p > 0:
        _checks.rng_state(rng_state, dropout_p)
        seed, offset = _rng.replay(rng_state)
    else:
        seed = offset = 0
    # (dout apart: the gradient of a sum or a mean arrives expanded, with
    # stride 0, where the forward's tensors are already contiguous rows)
    if dout.stride()[-1] != 1:
        dout = maybe_contiguous(dout)
    if q.stride()[-1] != 1 or k.stride()[-1] != 1 or v.stride()[-1] != 1 or out.stride()[-1] != 1:
        q, k, v, out = maybe_contiguous(q), maybe_contiguous(k), maybe_contiguous(v), \
            maybe_contiguous(out)
    made = dq is None and dk is None and dv is None
    if made:  # as flash_attn, empty_like of each (their last dim contiguous, as the kernels write)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    elif dq is None or dk is None or dv is None:
        dq, dk, dv = _gradient_buffers(q, k, v, dq, dk, dv)
    _kernels.backward(dout, q, k, v, out, softmax_lse, dlse, dq, dk, dv, softmax_scale, causal,
                      window_size_left, window_size_right, softcap, alibi_slopes, dropout_p, seed,
                      offset, deterministic, *varlen, made_gradients=made)
    return dq, dk, dv


def batched_backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, dropout_p, softmax_scale,
                     causal, window_size_left, window_size_right, softcap, alibi_slopes,
                     deterministic, rng_state=None, dlse=None, want_softmax_d=True):
    """flashc::_flash_attn_backward's body. want_softmax_d=False skips
    softmax_d (a few more kernels on the GPU) and returns None."""
    if not _backward_inputs_ok(dout, q, k, v, out, softmax_lse, dq, dk, dv, 4,
                               (dlse, alibi_slopes, rng_state)):
        _check_backward_inputs(dout, q, k, v, out, softmax_lse, dq, dk, dv, 4,
                               "(batch, seqlen, nheads, headdim)")
        _checks.same_device([("q", q), ("k", k), ("v", v), ("out", out), ("dout", dout),
                             ("softmax_lse", softmax_lse), ("dlse", dlse), ("dq", dq),
                             ("dk", dk), ("dv", dv), ("alibi_slopes", alibi_slopes),
                             ("rng_state", rng_state)])
    _run_backward(dout, q, k, v, out, softmax_lse, dlse, dq, dk, dv, dropout_p, softmax_scale,
                  causal, window_size_left, window_size_right, softcap, alibi_slopes,
                  deterministic, rng_state)
    if not want_softmax_d:
        return None
    softmax_d = _shapes.softmax_d_batched(q)
    _softmax_d.fill_batched(softmax_d, dout, out, dlse)
    return softmax_d


@torch.library.custom_op(
    "flashc::_flash_attn_backward", mutates_args=("dq", "dk", "dv"), device_types=_DEVICES
)
def _flash_attn_backward(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    softmax_lse: torch.Tensor,
    dq: Optional[torch.Tensor],
    dk: Optional[torch.Tensor],
    dv: Optional[torch.Tensor],
    dropout_p: float,
    softmax_scale: float,
    causal: bool,
    window_size_left: int,
    window_size_right: int,
    softcap: float,
    alibi_slopes: Optional[torch.Tensor],
    deterministic: bool,
    rng_state: Optional[torch.Tensor] = None,
    dlse: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    return batched_backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, dropout_p,
                            softmax_scale, causal, window_size_left, window_size_right, softcap,
                            alibi_slopes, deterministic, rng_state, dlse)


@_flash_attn_backward.register_fake
def _(dout, q, k, v, out, softmax_lse, dq, dk, dv, dropout_p, softmax_scale, causal,
      window_size_left, window_size_right, softcap, alibi_slopes, deterministic, rng_state=None,
      dlse=None):
    return _shapes.softmax_d_batched(q)


def varlen_backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q, cu_seqlens_k,
                    max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
                    window_size_left, window_size_right, softcap, alibi_slopes, deterministic,
                    rng_state=None, zero_tensors=False, dlse=None, want_softmax_d=True):
    """flashc::_flash_attn_varlen_backward's body; want_softmax_d as
    batched_backward."""
    # zero_tensors needs no work here: flashc writes dq, dk and dv in full,
    # rows outside every sequence included (as zeros).
    if not _backward_inputs_ok(dout, q, k, v, out, softmax_lse, dq, dk, dv, 3,
                               (dlse, alibi_slopes, rng_state)):
        _check_backward_inputs(dout, q, k, v, out, softmax_lse, dq, dk, dv, 3,
                               "(total, nheads, headdim)")
    _checks.cu_seqlens(cu_seqlens_q, cu_seqlens_k)
    _checks.same_device([("q", q), ("k", k), ("v", v), ("out", out), ("dout", dout),
                         ("softmax_lse", softmax_lse), ("dlse", dlse), ("dq", dq), ("dk", dk),
                         ("dv", dv), ("cu_seqlens_q", cu_seqlens_q),
                         ("cu_seqlens_k", cu_seqlens_k), ("alibi_slopes", alibi_slopes),
                         ("rng_state", rng_state)])
    _run_backward(
        dout, q, k, v, out, softmax_lse, dlse, dq, dk, dv, dropout_p, softmax_scale, causal,
        window_size_left, window_size_right, softcap, alibi_slopes, deterministic, rng_state,
        (cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous(), max_seqlen_q, max_seqlen_k),
    )
    if not want_softmax_d:
        return None
    softmax_d = _shapes.softmax_d_varlen(q, cu_seqlens_q)
    _softmax_d.fill_varlen(softmax_d, dout, out, dlse, cu_seqlens_q)
    return softmax_d


@torch.library.custom_op(
    "flashc::_flash_attn_varlen_backward", mutates_args=("dq", "dk", "dv"), device_types=_DEVICES
)
def _flash_attn_varlen_backward(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    softmax_lse: torch.Tensor,
    dq: Optional[torch.Tensor],
    dk: Optional[torch.Tensor],
    dv: Optional[torch.Tensor],
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    dropout_p: float,
    softmax_scale: float,
    causal: bool,
    window_size_left: int,
    window_size_right: int,
    softcap: float,
    alibi_slopes: Optional[torch.Tensor],
    deterministic: bool,
    rng_state: Optional[torch.Tensor] = None,
    zero_tensors: bool = False,
    dlse: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    return varlen_backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q,
                           cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
                           causal, window_size_left, window_size_right, softcap, alibi_slopes,
                           deterministic, rng_state, zero_tensors, dlse)


@_flash_attn_varlen_backward.register_fake
def _(dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
      max_seqlen_k, dropout_p, softmax_scale, causal, window_size_left, window_size_right,
      softcap, alibi_slopes, deterministic, rng_state=None, zero_tensors=False, dlse=None):
    return _shapes.softmax_d_varlen(q, cu_seqlens_q)
