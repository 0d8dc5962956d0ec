"""softmax_d, the backward's per-row D = rowsum(dO * O) - dLSE, in
flash_attn's layouts: (b, h, round128(sq)) batched, (h, total_q + 128 * b)
varlen with sequence i's rows starting at cu_seqlens_q[i] + 128 * i; zero
everywhere else. The C library computes its own D internally; this is the
value the flash_attn backward returns, computed with torch operations."""
import torch


def _row_dot(dout, out, dtype):
    return (dout.to(dtype) * out.to(dtype)).sum(-1)


def fill_batched(softmax_d, dout, out, dlse):
    d = _row_dot(dout, out, softmax_d.dtype).transpose(1, 2)  # (b, h, sq)
    if dlse is not None:
        d = d - dlse
    softmax_d.zero_()
    softmax_d[..., : d.shape[-1]] = d


def fill_varlen(softmax_d, dout, out, dlse, cu_seqlens_q):
    total_q = out.shape[0]
    d = _row_dot(dout, out, softmax_d.dtype).transpose(0, 1)  # (h, total_q)
    if dlse is not None:
        d = d - dlse
    rows = torch.arange(total_q, device=out.device)
    cu = cu_seqlens_q.to(torch.int64)
    # Sequence of each packed row: the number of sequence ends at or before it.
    seq = torch.searchsorted(cu[1:], rows, right=True)
    in_a_sequence = (rows >= cu[0]) & (rows < cu[-1])
    d = torch.where(in_a_sequence, d, torch.zeros((), dtype=d.dtype, device=d.device))
    # Rows outside every sequence land in gaps (before the first sequence or
    # after the last one), never on a row of a sequence.
    softmax_d.zero_()
    softmax_d.index_copy_(1, rows + 128 * seq, d)
