"""Padding helpers for the varlen functions, as flash_attn.bert_padding:
unpad_input turns a padded batch and its attention mask into packed rows
plus cu_seqlens; pad_input scatters packed rows back into a padded batch."""
import torch
import torch.nn.functional as F


def _check_indices(indices):
    if indices.ndim != 1 or indices.dtype != torch.int64:
        raise ValueError(
            f"indices: expected a 1-D int64 tensor, got {indices.dtype} of shape "
            f"{tuple(indices.shape)}"
        )


class IndexFirstAxis(torch.autograd.Function):
    """input[indices] along the first axis, with a scatter as backward."""

    @staticmethod
    def forward(ctx, input, indices):
        _check_indices(indices)
        if input.ndim < 2:
            raise ValueError(f"input: needs at least 2 dims, got shape {tuple(input.shape)}")
        ctx.save_for_backward(indices)
        ctx.first_axis_dim, other_shape = input.shape[0], input.shape[1:]
        flat = input.reshape(input.shape[0], -1)
        index = indices.unsqueeze(1).expand(-1, flat.shape[1])
        return torch.gather(flat, 0, index).reshape(-1, *other_shape)

    @staticmethod
    def backward(ctx, grad_output):
        (indices,) = ctx.saved_tensors
        other_shape = grad_output.shape[1:]
        grad = grad_output.reshape(grad_output.shape[0], -1)
        grad_input = torch.zeros(
            (ctx.first_axis_dim, grad.shape[1]), device=grad.device, dtype=grad.dtype
        )
        grad_input.scatter_(0, indices.unsqueeze(1).expand(-1, grad.shape[1]), grad)
        return grad_input.reshape(ctx.first_axis_dim, *other_shape), None


index_first_axis = IndexFirstAxis.apply


class IndexPutFirstAxis(torch.autograd.Function):
    """A zero tensor of first_axis_dim rows with `values` put at `indices`."""

    @staticmethod
    def forward(ctx, values, indices, first_axis_dim):
        _check_indices(indices)
        if values.ndim < 2:
            raise ValueError(f"values: needs at least 2 dims, got shape {tuple(values.shape)}")
        ctx.save_for_backward(indices)
        output = torch.zeros(
            first_axis_dim, *values.shape[1:], device=values.device, dtype=values.dtype
        )
        output[indices] = values
        return output

    @staticmethod
    def backward(ctx, grad_output):
        (indices,) = ctx.saved_tensors
        return grad_output[indices], None, None


index_put_first_axis = IndexPutFirstAxis.apply


def unpad_input(hidden_states, attention_mask, unused_mask=None):
    """
    Arguments:
        hidden_states: (batch, seqlen, ...)
        attention_mask: (batch, seqlen), bool / int, 1 means valid and 0
            means not valid.
        unused_mask: (batch, seqlen), bool / int, 1 means the element is
            allocated but unused (kept in the packed rows, not counted in
            used_seqlens_in_batch).
    Returns:
        hidden_states: (total_nnz, ...), the selected rows.
        indices: (total_nnz,), their positions in the flattened batch.
        cu_seqlens: (batch + 1,) int32, cumulative sequence lengths.
        max_seqlen_in_batch: int.
        used_seqlens_in_batch: (batch,) int32, the lengths attention_mask
            selects.
    """
    all_masks = (attention_mask + unused_mask) if unused_mask is not None else attention_mask
    seqlens_in_batch = all_masks.sum(dim=-1, dtype=torch.int32)
    used_seqlens_in_batch = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(all_masks.flatten(), as_tuple=False).flatten()
    max_seqlen_in_batch = seqlens_in_batch.max().item()
    cu_seqlens = F.pad(torch.cumsum(seqlens_in_batch, dim=0, dtype=torch.int32), (1, 0))
    rows = hidden_states.reshape(-1, *hidden_states.shape[2:])
    return (
        index_first_axis(rows, indices),
        indices,
        cu_seqlens,
        max_seqlen_in_batch,
        used_seqlens_in_batch,
    )


def pad_input(hidden_states, indices, batch, seqlen):
    """
    Arguments:
        hidden_states: (total_nnz, ...), packed rows (as unpad_input gives).
        indices: (total_nnz,), their positions in the flattened batch.
        batch, seqlen: the padded batch's extents.
    Returns:
        (batch, seqlen, ...), zero where no row was put.
    """
    output = index_put_first_axis(hidden_states, indices, batch * seqlen)
    return output.reshape(batch, seqlen, *output.shape[1:])
