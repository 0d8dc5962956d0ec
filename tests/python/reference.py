"""Attention in plain PyTorch, written from the semantics in DESIGN.md.

It shares no code with flashc: the rules are implemented again here so a
mistake in one is caught by the other.

For query row i and key column j of one sequence (lengths sq, sk), with
shift = sk - sq:
  - causal sets window_right = 0 and keeps window_left;
  - window (left, right), -1 unbounded: visible iff
    i + shift - left <= j <= i + shift + right;
  - s = scale * q_i . k_j; softcap c > 0: s = c * tanh(s / c); then ALiBi adds
    -slope_h * |i + shift - j|;
  - a row with no visible column: out 0, LSE +inf;
  - dropout: kept entries scaled by 1 / (1 - p); the LSE is pre-dropout.

Everything is computed in `compute_dtype` (float64 for the exact reference,
the input dtype for the "plain low-precision" reference of the tolerance
rule). Gradients come from autograd; fully masked rows give zeros, not NaN.
"""

import math
from dataclasses import dataclass
from typing import Optional, Tuple

import torch

SDMASK_ROUND = 128


def round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def visible_mask(sq: int, sk: int, causal: bool = False,
                 window_size: Tuple[int, int] = (-1, -1),
                 device="cpu") -> torch.Tensor:
    """Boolean (sq, sk): True where key column j is visible from row i."""
    left, right = int(window_size[0]), int(window_size[1])
    if causal:
        right = 0
    rows = torch.arange(sq, device=device)[:, None]
    cols = torch.arange(sk, device=device)[None, :]
    diag = rows + (sk - sq)
    visible = torch.ones(sq, sk, dtype=torch.bool, device=device)
    if left >= 0:
        visible &= cols >= diag - left
    if right >= 0:
        visible &= cols <= diag + right
    return visible


def alibi_bias(slopes: torch.Tensor, sq: int, sk: int, dtype) -> torch.Tensor:
    """-slope * |i + shift - j| for slopes of shape (..., h): (..., h, sq, sk)."""
    rows = torch.arange(sq, device=slopes.device)[:, None]
    cols = torch.arange(sk, device=slopes.device)[None, :]
    dist = (rows + (sk - sq) - cols).abs().to(dtype)
    return -slopes.to(dtype)[..., None, None] * dist


@dataclass
class AttentionResult:
    out: torch.Tensor          # like q, last dim dv
    lse: torch.Tensor          # (b, h, sq); +inf on rows that see nothing
    scores: torch.Tensor       # (b, h, sq, sk) logits after softcap and ALiBi
    row_max: torch.Tensor      # (b, h, sq) max over visible columns (0 if none)
    visible: torch.Tensor      # (sq, sk) bool

    def unnormalized_probs(self) -> torch.Tensor:
        """exp(s - row max) on visible entries, 0 elsewhere (S_dmask's magnitude)."""
        e = torch.exp(self.scores - self.row_max[..., None])
        return torch.where(self.visible, e, torch.zeros_like(e))


def attention_ref(q, k, v, softmax_scale: Optional[float] = None, causal: bool = False,
                  window_size=(-1, -1), softcap: float = 0.0,
                  alibi_slopes: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
                  keep_mask: Optional[torch.Tensor] = None,
                  compute_dtype=torch.float64) -> AttentionResult:
    """Batched attention. q (b, sq, h, d), k (b, sk, hk, d), v (b, sk, hk, dv).

    alibi_slopes: (h) or (b, h). keep_mask: bool broadcastable to (b, h, sq, sk),
    True where dropout keeps the entry (required when dropout_p > 0).
    Outputs are in compute_dtype; they keep the autograd graph to q, k, v.
    """
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    if h % hk != 0:
        raise ValueError("h must be a multiple of hk")
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(d)
    qc, kc, vc = (t.to(compute_dtype) for t in (q, k, v))
    # GQA/MQA: query head i reads kv head i // (h / hk).
    kc = kc.repeat_interleave(h // hk, dim=2)
    vc = vc.repeat_interleave(h // hk, dim=2)

    s = torch.einsum("bihd,bjhd->bhij", qc, kc) * softmax_scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if alibi_slopes is not None:
        slopes = alibi_slopes if alibi_slopes.dim() == 2 else alibi_slopes[None, :]
        s = s + alibi_bias(slopes, sq, sk, compute_dtype)

    visible = visible_mask(sq, sk, causal, window_size, device=q.device)
    masked = s.masked_fill(~visible, float("-inf"))
    row_max = masked.amax(dim=-1) if sk > 0 else s.new_full((b, h, sq), float("-inf"))
    has_key = torch.isfinite(row_max)
    # Softmax is shift invariant, so the shift needs no gradient; this keeps
    # the gradient of rows with no visible key at exactly zero.
    shift = torch.where(has_key, row_max, torch.zeros_like(row_max)).detach()
    e = torch.exp(masked - shift[..., None])
    denom = e.sum(dim=-1)
    safe_denom = torch.where(has_key, denom, torch.ones_like(denom))
    probs = e / safe_denom[..., None]
    lse = torch.where(has_key, shift + torch.log(safe_denom),
                      torch.full_like(denom, float("inf")))

    if dropout_p > 0.0:
        if keep_mask is None:
            raise ValueError("dropout_p > 0 needs keep_mask")
        probs = probs * keep_mask.to(compute_dtype) / (1.0 - dropout_p)
    out = torch.einsum("bhij,bjhd->bihd", probs, vc)
    return AttentionResult(out=out, lse=lse, scores=s.detach(), row_max=shift,
                           visible=visible)


@dataclass
class VarlenResult:
    out: torch.Tensor          # (total_q, h, dv)
    lse: torch.Tensor          # (h, total_q)
    per_sequence: list         # AttentionResult of each sequence (b = 1)


def attention_ref_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale=None,
                         causal=False, window_size=(-1, -1), softcap=0.0,
                         alibi_slopes=None, dropout_p=0.0, keep_mask=None,
                         compute_dtype=torch.float64) -> VarlenResult:
    """Varlen attention by looping over sequences. q (total_q, h, d).

    keep_mask: bool (b, h, >=max_sq, >=max_sk), sequence i's mask in
    keep_mask[i, :, :sq_i, :sk_i]. Rows of q outside every sequence get out 0
    and LSE +inf.
    """
    cq = [int(x) for x in cu_seqlens_q.cpu()]
    ck = [int(x) for x in cu_seqlens_k.cpu()]
    total_q, h = q.shape[0], q.shape[1]
    dv = v.shape[-1]
    outs, lses, per_seq = [], [], []
    covered = 0
    if cq[0] > 0:
        outs.append(q.new_zeros(cq[0], h, dv, dtype=compute_dtype))
        lses.append(q.new_full((h, cq[0]), float("inf"), dtype=compute_dtype))
    for i in range(len(cq) - 1):
        sq, sk = cq[i + 1] - cq[i], ck[i + 1] - ck[i]
        slopes = None
        if alibi_slopes is not None:
            slopes = alibi_slopes[i] if alibi_slopes.dim() == 2 else alibi_slopes
        keep = None
        if keep_mask is not None:
            keep = keep_mask[i:i + 1, :, :sq, :sk]
        res = attention_ref(q[None, cq[i]:cq[i + 1]], k[None, ck[i]:ck[i + 1]],
                            v[None, ck[i]:ck[i + 1]], softmax_scale, causal, window_size,
                            softcap, slopes, dropout_p, keep, compute_dtype)
        per_seq.append(res)
        outs.append(res.out[0])
        lses.append(res.lse[0])
        covered = cq[i + 1]
    if covered < total_q:
        outs.append(q.new_zeros(total_q - covered, h, dv, dtype=compute_dtype))
        lses.append(q.new_full((h, total_q - covered), float("inf"), dtype=compute_dtype))
    return VarlenResult(out=torch.cat(outs, dim=0), lse=torch.cat(lses, dim=1),
                        per_sequence=per_seq)


def keep_mask_from_sdmask(s_dmask: torch.Tensor, sq: int, sk: int) -> torch.Tensor:
    """Dropout keep mask recovered from S_dmask: negative (sign bit set) = dropped."""
    return ~torch.signbit(s_dmask[..., :sq, :sk])


def merge_ref(outs, lses):
    """Exact combination of attention over disjoint key sets, in float64.

    outs: list of (..., s, h, d); lses: list of (..., h, s) with +inf for a
    part that saw no key (weight 0)."""
    stacked_lse = torch.stack([torch.where(torch.isinf(l) & (l > 0),
                                           torch.full_like(l, float("-inf")), l)
                               for l in lses])
    lse = torch.logsumexp(stacked_lse, dim=0)
    empty = torch.isinf(lse) & (lse < 0)
    safe = torch.where(empty, torch.zeros_like(lse), lse)
    out = 0
    for o, l in zip(outs, stacked_lse):
        w = torch.exp(l - safe)                        # (..., h, s)
        out = out + o * w.movedim(-1, -2)[..., None]   # (..., s, h, 1)
    return out, torch.where(empty, torch.full_like(lse, float("inf")), lse)
