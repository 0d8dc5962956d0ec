"""Shapes and dtypes of the outputs, shared by the real operators and
their fake (meta) implementations so both always agree."""
import torch
import torch.nn.functional as F

from . import _cabi


def round_multiple(x, m):
    return (x + m - 1) // m * m


def stats_dtype(dtype):
    """dtype of LSE and softmax_d: float32, float64 for float64 inputs."""
    return torch.float64 if dtype is torch.float64 else torch.float32


def head_dim_multiple(t):
    """Head dims the backend of tensor t's device takes directly are
    multiples of this: any d on the CPU, multiples of 8 on CUDA."""
    return 8 if t.is_cuda else 1


def pad_head_dim(x, multiple):
    """x with its last dim zero-padded to a multiple of `multiple`."""
    d = x.shape[-1]
    if d % multiple == 0:
        return x
    return F.pad(x, [0, multiple - d % multiple])


def s_dmask_shape(batch, nheads, seqlen_q, seqlen_k):
    r = _cabi.SDMASK_ROUND
    return (batch, nheads, round_multiple(seqlen_q, r), round_multiple(seqlen_k, r))


def forward_outputs(q, v, lse_shape, s_dmask_shape_or_none, want_s_dmask=True):
    """Empty out, lse and S_dmask for a forward. S_dmask not requested is an
    empty tensor, or None when want_s_dmask is False."""
    # out as flash_attn makes it (empty_like(q): q's layout, q being dense
    # with a contiguous last dim here); new_empty costs less than torch.empty
    # with a dtype and a device
    if v.shape[-1] == q.shape[-1]:
        out = torch.empty_like(q)
    else:
        out = q.new_empty((*q.shape[:-1], v.shape[-1]))
    lse = q.new_empty(lse_shape, dtype=torch.float64 if q.dtype is torch.float64 else
                      torch.float32)  # (stats_dtype, written out: every call runs this)
    if s_dmask_shape_or_none is not None:
        s_dmask = torch.empty(s_dmask_shape_or_none, dtype=q.dtype, device=q.device)
    elif want_s_dmask:
        s_dmask = torch.empty((0,), dtype=q.dtype, device=q.device)
    else:
        s_dmask = None
    return out, lse, s_dmask


def rng_state(device):
    """An empty rng_state: (seed, offset) as int64."""
    return torch.empty((2,), dtype=torch.int64, device=device)


def softmax_d_batched(q):
    b, sq, h, _ = q.shape
    return torch.empty((b, h, round_multiple(sq, 128)), dtype=stats_dtype(q.dtype),
                       device=q.device)


def softmax_d_varlen(q, cu_seqlens_q):
    total_q, h, _ = q.shape
    batch = cu_seqlens_q.shape[0] - 1
    return torch.empty((h, total_q + 128 * batch), dtype=stats_dtype(q.dtype), device=q.device)
