"""Merging attention over disjoint key sets.

If out_i, lse_i are the attention output and log-sum-exp of the same
queries over disjoint sets of keys K_i (for example chunks of a long
sequence, or a cache and new tokens), attention over the union of the K_i
is exactly

    lse = logsumexp_i lse_i,    out = sum_i exp(lse_i - lse) * out_i.

flashc (as flash_attn) marks a row that sees no key with lse = +inf and
out = 0; such a part contributes nothing here, and a row that sees no key
in any part gets out 0 and lse +inf, without NaN in values or gradients.
"""
import torch

from . import _cabi
from .errors import FlashcValueError


def _check(outs, lses):
    if not isinstance(outs, (list, tuple)) or not isinstance(lses, (list, tuple)):
        raise FlashcValueError(_cabi.ERROR_ARGUMENT, "outs, lses: must be lists of tensors")
    if len(outs) == 0:
        raise FlashcValueError(_cabi.ERROR_ARGUMENT, "outs: must hold at least one tensor")
    if len(lses) != len(outs):
        raise FlashcValueError(
            _cabi.ERROR_ARGUMENT, f"lses: has {len(lses)} tensors but outs has {len(outs)}"
        )
    shape = outs[0].shape
    if outs[0].dim() not in (3, 4):
        raise FlashcValueError(
            _cabi.ERROR_RANK,
            f"outs[0]: expected (batch, seqlen, nheads, headdim) or (total, nheads, headdim), "
            f"got shape {tuple(shape)}",
        )
    # (b, sq, h, d) -> lse (b, h, sq); (total, h, d) -> lse (h, total).
    lse_shape = (*shape[:-3], shape[-2], shape[-3])
    for i, (o, l) in enumerate(zip(outs, lses)):
        if o.shape != shape:
            raise FlashcValueError(
                _cabi.ERROR_SHAPE,
                f"outs[{i}]: shape {tuple(o.shape)} differs from outs[0]'s {tuple(shape)}",
            )
        if o.device != outs[0].device or l.device != outs[0].device:
            raise FlashcValueError(
                _cabi.ERROR_DEVICE, f"outs[{i}], lses[{i}]: must be on {outs[0].device}"
            )
        if tuple(l.shape) != lse_shape:
            raise FlashcValueError(
                _cabi.ERROR_SHAPE,
                f"lses[{i}]: expected shape {lse_shape} for outs of shape {tuple(shape)}, "
                f"got {tuple(l.shape)}",
            )
        if not l.is_floating_point():
            raise FlashcValueError(_cabi.ERROR_DTYPE, f"lses[{i}]: must be floating point")


def merge_attn_states(outs, lses):
    """Combines attention outputs of the same queries over disjoint key sets.

    Arguments:
        outs: list of n tensors, each (batch, seqlen_q, nheads, headdim)
            (varlen: (total_q, nheads, headdim)), any floating dtype.
        lses: list of n matching log-sum-exps, (batch, nheads, seqlen_q)
            (varlen: (nheads, total_q)), as flashc returns them; +inf (or
            -inf) marks a row that saw no key in that part.
    Returns:
        (out, lse): out like outs[0] (its dtype), lse like lses[0] (its
        dtype); +inf where no part saw a key (out 0 there). Differentiable
        with respect to every out_i and lse_i (plain torch operations).
    """
    _check(outs, lses)
    work = torch.promote_types(lses[0].dtype, torch.float32)
    lse_all = torch.stack([l.to(work) for l in lses])  # (n, *lse_shape)
    seen = torch.isfinite(lse_all)
    any_seen = seen.any(dim=0)
    neg_inf = torch.full((), float("-inf"), dtype=work, device=lse_all.device)
    zero = torch.zeros((), dtype=work, device=lse_all.device)
    # The shift is a constant of the formula, so it carries no gradient.
    shift = torch.where(seen, lse_all, neg_inf).amax(dim=0).detach()
    shift = torch.where(any_seen, shift, zero)
    # where() on both sides keeps the gradient of the masked parts at 0
    # (instead of 0 * inf = NaN).
    exps = torch.where(seen, torch.exp(torch.where(seen, lse_all, shift) - shift), zero)
    total = exps.sum(dim=0)
    total_safe = torch.where(any_seen, total, torch.ones((), dtype=work, device=total.device))
    lse = torch.where(any_seen, shift + torch.log(total_safe),
                      torch.full((), float("inf"), dtype=work, device=total.device))
    weights = exps / total_safe  # (n, *lse_shape), 0 for unseen parts
    # lse layout (..., h, rows) -> out layout (..., rows, h, 1).
    weights = weights.transpose(-1, -2).unsqueeze(-1)
    out = sum(w * o.to(work) for w, o in zip(weights.unbind(0), outs))
    return out.to(outs[0].dtype), lse.to(lses[0].dtype)
