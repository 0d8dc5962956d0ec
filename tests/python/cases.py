"""One attention problem run through a flashc API function and checked
against the reference: forward (out, LSE, S_dmask) and backward (dq, dk, dv).

Batched APIs: "func", "kvpacked", "qkvpacked". Varlen APIs: "varlen",
"varlen_kvpacked", "varlen_qkvpacked".
"""

from dataclasses import dataclass, field
from typing import Optional, Sequence, Tuple

import pytest
import torch

import flashc
from checks import (LOW_PRECISION, alibi_slopes, assert_close, assert_lse_close,
                    cu_seqlens_from_lengths, leaf, randn, rounded_out_slack,
                    sdmask_shape)
from reference import attention_ref, attention_ref_varlen, keep_mask_from_sdmask

SDMASK_ATOL = {torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10,
               torch.float32: 1e-5, torch.float64: 1e-12}


@dataclass
class Case:
    sq: int
    sk: int
    d: int = 64
    dtype: torch.dtype = torch.bfloat16
    b: int = 2
    h: int = 4
    hk: Optional[int] = None
    causal: bool = False
    window: Tuple[int, int] = (-1, -1)
    softcap: float = 0.0
    alibi: Optional[str] = None      # None, "h" or "bh"
    dropout_p: float = 0.0
    scale: Optional[float] = None
    deterministic: bool = False
    device: str = "cpu"
    q_scale: float = 1.0             # > 1 pushes softcap into tanh's curved range

    @property
    def nheads_k(self):
        return self.h if self.hk is None else self.hk

    def kwargs(self, slopes):
        return dict(dropout_p=self.dropout_p, softmax_scale=self.scale, causal=self.causal,
                    window_size=self.window, softcap=self.softcap, alibi_slopes=slopes,
                    deterministic=self.deterministic)

    def ref_kwargs(self, slopes):
        return dict(softmax_scale=self.scale, causal=self.causal, window_size=self.window,
                    softcap=self.softcap, alibi_slopes=slopes, dropout_p=self.dropout_p)


@dataclass
class Outcome:
    """What a run produced, for tests that check more than the defaults."""
    out: torch.Tensor
    lse: torch.Tensor
    s_dmask: torch.Tensor
    grads: dict = field(default_factory=dict)
    ref64: object = None
    inputs: dict = field(default_factory=dict)


def _call_batched(api, q, k, v, kwargs, return_lse):
    extra = dict(return_lse=True) if return_lse else dict(return_attn_probs=True)
    if api == "func":
        leaves = dict(q=leaf(q), k=leaf(k), v=leaf(v))
        res = flashc.flash_attn_func(leaves["q"], leaves["k"], leaves["v"], **kwargs, **extra)
        grads = lambda: dict(q=leaves["q"].grad, k=leaves["k"].grad, v=leaves["v"].grad)
    elif api == "kvpacked":
        leaves = dict(q=leaf(q), kv=leaf(torch.stack([k, v], dim=2)))
        res = flashc.flash_attn_kvpacked_func(leaves["q"], leaves["kv"], **kwargs, **extra)
        grads = lambda: dict(q=leaves["q"].grad, k=leaves["kv"].grad[:, :, 0],
                             v=leaves["kv"].grad[:, :, 1])
    elif api == "qkvpacked":
        leaves = dict(qkv=leaf(torch.stack([q, k, v], dim=2)))
        res = flashc.flash_attn_qkvpacked_func(leaves["qkv"], **kwargs, **extra)
        grads = lambda: dict(q=leaves["qkv"].grad[:, :, 0], k=leaves["qkv"].grad[:, :, 1],
                             v=leaves["qkv"].grad[:, :, 2])
    else:
        raise ValueError(api)
    return res, grads


def _seeded_call(call, return_lse, dropout_p, *args):
    """call(*args, return_lse) -> (result, grads getter, S_dmask or None).

    With return_lse and dropout, S_dmask (which return_lse does not give)
    comes from a call with return_attn_probs under the same seed."""
    if not return_lse:
        res, grads = call(*args, False)
        return res, grads, res[2]
    if dropout_p == 0:
        res, grads = call(*args, True)
        return res, grads, None
    seed = int(torch.randint(0, 2 ** 62, (1,)))
    torch.manual_seed(seed)
    with torch.no_grad():
        probe, _ = call(*args, False)
    torch.manual_seed(seed)
    res, grads = call(*args, True)
    assert torch.equal(probe[0], res[0]), "same seed, different dropout masks"
    return res, grads, probe[2]


def check_sdmask(s_dmask, expected, shape, dtype):
    """S_dmask: exp(s - rowmax) on visible entries (negated where dropped),
    0 where hidden and in the padding. expected: per batch entry, the
    reference's (unnormalised probabilities (h, sq, sk), visible (sq, sk),
    scores (h, sq, sk)). In float32 the error of s - rowmax grows with the
    scores' size (a large scale, a wide head dim), and exp passes it on:
    the tolerance scales with the largest visible score there."""
    assert tuple(s_dmask.shape) == tuple(shape), f"S_dmask shape {tuple(s_dmask.shape)} != {shape}"
    assert s_dmask.dtype == dtype, f"S_dmask dtype {s_dmask.dtype} != {dtype}"
    sd = s_dmask.detach().double().cpu()
    covered = torch.zeros(sd.shape, dtype=torch.bool)
    for bi, (probs, visible, scores) in enumerate(expected):
        sq, sk = visible.shape
        got = sd[bi, :, :sq, :sk].abs()
        err = (got - probs.detach().cpu()).abs().max().item() if got.numel() else 0.0
        hidden = ~visible.cpu()
        tol = SDMASK_ATOL[dtype]
        if dtype not in LOW_PRECISION and got.numel():
            tol *= max(1.0, scores.detach().cpu().abs().masked_fill(hidden, 0.0).max().item())
        assert err <= tol, f"|S_dmask| of batch {bi}: error {err:.3g} > {tol:.3g}"
        assert (sd[bi, :, :sq, :sk][:, hidden] == 0).all(), "S_dmask hidden entries are not 0"
        covered[bi, :, :sq, :sk] = True
    assert (sd[~covered] == 0).all(), "S_dmask padding (beyond sq/sk) is not 0"


def run_batched(case: Case, api="func", backward=True, return_lse=False, check=True) -> Outcome:
    """Run `case` through a batched API function and compare with the reference."""
    c = case
    hk = c.nheads_k
    q = randn((c.b, c.sq, c.h, c.d), c.dtype, c.device, scale=c.q_scale)
    k = randn((c.b, c.sk, hk, c.d), c.dtype, c.device)
    v = randn((c.b, c.sk, hk, c.d), c.dtype, c.device)
    dout = randn((c.b, c.sq, c.h, c.d), c.dtype, c.device)
    slopes = alibi_slopes(c.alibi, c.b, c.h, c.device)

    res, grads, s_dmask = _seeded_call(_call_batched, return_lse, c.dropout_p,
                                       api, q, k, v, c.kwargs(slopes))
    out, lse = res[0], res[1]
    assert out.shape == q.shape and out.dtype == c.dtype and out.device == q.device
    lse_dtype = torch.float64 if c.dtype == torch.float64 else torch.float32
    assert lse.shape == (c.b, c.h, c.sq) and lse.dtype == lse_dtype, (lse.shape, lse.dtype)

    keep = None
    if c.dropout_p > 0:
        keep = keep_mask_from_sdmask(s_dmask.cpu(), c.sq, c.sk)
    elif s_dmask is not None:
        assert s_dmask.numel() == 0, "S_dmask must be empty without dropout"

    qc, kc, vc = (t.cpu() for t in (q, k, v))
    sl = slopes.cpu() if slopes is not None else None
    r64_in = dict(q=leaf(qc, torch.float64), k=leaf(kc, torch.float64), v=leaf(vc, torch.float64))
    ref64 = attention_ref(r64_in["q"], r64_in["k"], r64_in["v"], **c.ref_kwargs(sl),
                          keep_mask=keep, compute_dtype=torch.float64)
    outcome = Outcome(out=out, lse=lse, s_dmask=s_dmask, ref64=ref64,
                      inputs=dict(q=q, k=k, v=v, dout=dout, slopes=slopes))
    lowp = c.dtype in LOW_PRECISION
    if lowp:
        rlo_in = dict(q=leaf(qc), k=leaf(kc), v=leaf(vc))
        reflo = attention_ref(rlo_in["q"], rlo_in["k"], rlo_in["v"], **c.ref_kwargs(sl),
                              keep_mask=keep, compute_dtype=c.dtype)
    if check:
        assert_close("out", out, ref64.out, reflo.out if lowp else None, c.dtype)
        assert_lse_close("lse", lse, ref64.lse, c.dtype)
        if c.dropout_p > 0:
            probs = ref64.unnormalized_probs()
            check_sdmask(s_dmask, [(probs[i], ref64.visible, ref64.scores[i]) for i in range(c.b)],
                         sdmask_shape(c.b, c.h, c.sq, c.sk), c.dtype)

    if not backward:
        return outcome
    dlse = torch.randn(lse.shape, dtype=lse.dtype, device=lse.device) if return_lse else None
    if return_lse:
        torch.autograd.backward([out, lse], [dout, dlse])
    else:
        out.backward(dout)
    outcome.grads = got = grads()
    d64 = dout.cpu().double()
    slack = rounded_out_slack(ref64.lse, r64_in, dout, out, ref64.out)
    if return_lse:
        torch.autograd.backward([ref64.out, ref64.lse], [d64, dlse.cpu().double()])
    else:
        ref64.out.backward(d64)
    if lowp:
        if return_lse:
            torch.autograd.backward([reflo.out, reflo.lse], [dout.cpu(), dlse.cpu().to(c.dtype)])
        else:
            reflo.out.backward(dout.cpu())
    if check:
        for name in ("q", "k", "v"):
            assert got[name] is not None, f"d{name} was not computed"
            assert got[name].dtype == c.dtype
            assert_close(f"d{name}", got[name], r64_in[name].grad,
                         rlo_in[name].grad if lowp else None, c.dtype, backward=True,
                         slack=slack[name])
    return outcome


@dataclass
class VarlenCase:
    lengths_q: Sequence[int]
    lengths_k: Optional[Sequence[int]] = None   # None: same as lengths_q
    d: int = 64
    dtype: torch.dtype = torch.bfloat16
    h: int = 4
    hk: Optional[int] = None
    causal: bool = False
    window: Tuple[int, int] = (-1, -1)
    softcap: float = 0.0
    alibi: Optional[str] = None
    dropout_p: float = 0.0
    scale: Optional[float] = None
    deterministic: bool = False
    device: str = "cpu"
    extra_max_seqlen: int = 0        # max_seqlen larger than the true maximum
    q_scale: float = 1.0

    @property
    def nheads_k(self):
        return self.h if self.hk is None else self.hk

    @property
    def lens_k(self):
        return list(self.lengths_q if self.lengths_k is None else self.lengths_k)

    kwargs = Case.kwargs
    ref_kwargs = Case.ref_kwargs


def _call_varlen(api, q, k, v, cu_q, cu_k, max_q, max_k, kwargs, return_lse):
    extra = dict(return_lse=True) if return_lse else dict(return_attn_probs=True)
    if api == "varlen":
        leaves = dict(q=leaf(q), k=leaf(k), v=leaf(v))
        res = flashc.flash_attn_varlen_func(leaves["q"], leaves["k"], leaves["v"], cu_q, cu_k,
                                            max_q, max_k, **kwargs, **extra)
        grads = lambda: dict(q=leaves["q"].grad, k=leaves["k"].grad, v=leaves["v"].grad)
    elif api == "varlen_kvpacked":
        leaves = dict(q=leaf(q), kv=leaf(torch.stack([k, v], dim=1)))
        res = flashc.flash_attn_varlen_kvpacked_func(leaves["q"], leaves["kv"], cu_q, cu_k,
                                                     max_q, max_k, **kwargs, **extra)
        grads = lambda: dict(q=leaves["q"].grad, k=leaves["kv"].grad[:, 0],
                             v=leaves["kv"].grad[:, 1])
    elif api == "varlen_qkvpacked":
        leaves = dict(qkv=leaf(torch.stack([q, k, v], dim=1)))
        res = flashc.flash_attn_varlen_qkvpacked_func(leaves["qkv"], cu_q, max_q, **kwargs,
                                                      **extra)
        grads = lambda: dict(q=leaves["qkv"].grad[:, 0], k=leaves["qkv"].grad[:, 1],
                             v=leaves["qkv"].grad[:, 2])
    else:
        raise ValueError(api)
    return res, grads


def run_varlen(case: VarlenCase, api="varlen", backward=True, return_lse=False,
               check=True, tensors=None) -> Outcome:
    """Run `case` through a varlen API function and compare with the reference.
    tensors: optional (q, k, v) unpadded inputs to use instead of random ones."""
    c = case
    lq, lk = list(c.lengths_q), c.lens_k
    b = len(lq)
    hk = c.nheads_k
    tq, tk = sum(lq), sum(lk)
    if tensors is None:
        q = randn((tq, c.h, c.d), c.dtype, c.device, scale=c.q_scale)
        k = randn((tk, hk, c.d), c.dtype, c.device)
        v = randn((tk, hk, c.d), c.dtype, c.device)
    else:
        q, k, v = tensors
    dout = randn((tq, c.h, c.d), c.dtype, c.device)
    cu_q = cu_seqlens_from_lengths(lq, c.device)
    cu_k = cu_seqlens_from_lengths(lk, c.device)
    max_q = max(lq) + c.extra_max_seqlen
    max_k = max(lk) + c.extra_max_seqlen
    slopes = alibi_slopes(c.alibi, b, c.h, c.device)

    res, grads, s_dmask = _seeded_call(_call_varlen, return_lse, c.dropout_p, api, q, k, v,
                                       cu_q, cu_k, max_q, max_k, c.kwargs(slopes))
    out, lse = res[0], res[1]
    assert out.shape == q.shape and out.dtype == c.dtype
    assert lse.shape == (c.h, tq) and lse.dtype in (torch.float32, torch.float64)

    keep = None
    if c.dropout_p > 0:
        keep = ~torch.signbit(s_dmask.detach().cpu())
    elif s_dmask is not None:
        assert s_dmask.numel() == 0, "S_dmask must be empty without dropout"

    qc, kc, vc = (t.cpu() for t in (q, k, v))
    sl = slopes.cpu() if slopes is not None else None
    cu_qc, cu_kc = cu_q.cpu(), cu_k.cpu()
    r64_in = dict(q=leaf(qc, torch.float64), k=leaf(kc, torch.float64), v=leaf(vc, torch.float64))
    ref64 = attention_ref_varlen(r64_in["q"], r64_in["k"], r64_in["v"], cu_qc, cu_kc,
                                 **c.ref_kwargs(sl), keep_mask=keep)
    lowp = c.dtype in LOW_PRECISION
    if lowp:
        rlo_in = dict(q=leaf(qc), k=leaf(kc), v=leaf(vc))
        reflo = attention_ref_varlen(rlo_in["q"], rlo_in["k"], rlo_in["v"], cu_qc, cu_kc,
                                     **c.ref_kwargs(sl), keep_mask=keep, compute_dtype=c.dtype)
    outcome = Outcome(out=out, lse=lse, s_dmask=s_dmask, ref64=ref64,
                      inputs=dict(q=q, k=k, v=v, dout=dout, cu_q=cu_q, cu_k=cu_k,
                                  max_q=max_q, max_k=max_k, slopes=slopes))
    if check:
        assert_close("out", out, ref64.out, reflo.out if lowp else None, c.dtype)
        assert_lse_close("lse", lse, ref64.lse, c.dtype)
        if c.dropout_p > 0:
            check_sdmask(s_dmask, [(r.unnormalized_probs()[0], r.visible, r.scores[0])
                                   for r in ref64.per_sequence],
                         sdmask_shape(b, c.h, max_q, max_k), c.dtype)
    if not backward:
        return outcome
    dlse = torch.randn(lse.shape, dtype=lse.dtype, device=lse.device) if return_lse else None
    slack = rounded_out_slack(ref64.lse, r64_in, dout, out, ref64.out, varlen=True)
    if return_lse:
        torch.autograd.backward([out, lse], [dout, dlse])
        torch.autograd.backward([ref64.out, ref64.lse], [dout.cpu().double(), dlse.cpu().double()])
        if lowp:
            torch.autograd.backward([reflo.out, reflo.lse], [dout.cpu(), dlse.cpu().to(c.dtype)])
    else:
        out.backward(dout)
        ref64.out.backward(dout.cpu().double())
        if lowp:
            reflo.out.backward(dout.cpu())
    outcome.grads = got = grads()
    if check:
        for name in ("q", "k", "v"):
            assert got[name] is not None, f"d{name} was not computed"
            assert_close(f"d{name}", got[name], r64_in[name].grad,
                         rlo_in[name].grad if lowp else None, c.dtype, backward=True,
                         slack=slack[name])
    return outcome
