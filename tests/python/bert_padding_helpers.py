"""Padding helpers written independently of flashc.bert_padding, and the
reference output of a padded batch (each sequence = its unmasked tokens in
order)."""

import torch

from reference import attention_ref


def unpad_ref(x, mask):
    """(tokens, indices, cu_seqlens, max_seqlen, seqlens) as flash_attn defines them."""
    flat_mask = mask.flatten()
    indices = torch.nonzero(flat_mask, as_tuple=False).flatten()
    seqlens = mask.sum(dim=1, dtype=torch.int32)
    cu = torch.zeros(mask.shape[0] + 1, dtype=torch.int32, device=mask.device)
    cu[1:] = torch.cumsum(seqlens, 0)
    return x.flatten(0, 1)[indices], indices, cu, int(seqlens.max()), seqlens


def pad_ref(tokens, indices, batch, seqlen):
    out = tokens.new_zeros((batch * seqlen,) + tuple(tokens.shape[1:]))
    out[indices] = tokens
    return out.view((batch, seqlen) + tuple(tokens.shape[1:]))


def padded_reference_out(x, mask, causal):
    """x (b, s, 3, h, d): self-attention of each sequence's real tokens,
    scattered back to (b, s, h, d) with zeros at padding. Returns the float64
    result and the one computed in x's dtype."""
    b, s, _, h, d = x.shape
    outs = []
    for dtype in (torch.float64, x.dtype):
        out = torch.zeros(b, s, h, d, dtype=dtype)
        for i in range(b):
            rows = mask[i].cpu().nonzero().flatten()
            if rows.numel() == 0:
                continue
            q, k, v = (x[i, rows, j].cpu()[None] for j in range(3))
            res = attention_ref(q, k, v, causal=causal, compute_dtype=dtype)
            out[i, rows] = res.out[0]
        outs.append(out)
    return outs[0], outs[1]
