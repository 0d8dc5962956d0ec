"""flashc.bert_padding: unpad_input / pad_input / index_first_axis as in
flash_attn 2.7+ (five return values of unpad_input, unused_mask)."""

import pytest
import torch

from bert_padding_helpers import pad_ref, unpad_ref
from checks import padding_mask, random_lengths
from flashc.bert_padding import index_first_axis, pad_input, unpad_input


@pytest.mark.parametrize("mode", ["right", "left", "random"])
@pytest.mark.parametrize("empty", [False, True])
def test_unpad_matches_definition(mode, empty):
    b, s = 5, 23
    lengths = random_lengths(b, s, allow_empty=True)
    if empty:
        lengths[1] = 0
    mask = padding_mask(lengths, s, mode)
    x = torch.randn(b, s, 3, 7)
    got = unpad_input(x, mask)
    assert len(got) == 5
    expected = unpad_ref(x, mask)
    assert torch.equal(got[0], expected[0])
    assert torch.equal(got[1], expected[1])
    assert got[2].dtype == torch.int32 and torch.equal(got[2], expected[2])
    assert int(got[3]) == expected[3]
    assert torch.equal(got[4].to(torch.int32), expected[4])


def test_unpad_accepts_int_masks():
    mask = padding_mask(torch.tensor([3, 0, 5]), 6).to(torch.int64)
    x = torch.randn(3, 6, 4)
    got = unpad_input(x, mask)
    assert torch.equal(got[0], unpad_ref(x, mask.bool())[0])


def test_unused_mask():
    # unused tokens are kept in the packed rows (cu_seqlens counts them) but
    # not in the used lengths.
    b, s = 3, 10
    used = padding_mask(torch.tensor([4, 7, 0]), s)
    unused = torch.zeros_like(used)
    unused[0, 4:6] = True
    unused[2, 0:3] = True
    x = torch.randn(b, s, 5)
    tokens, indices, cu, max_len, seqlens = unpad_input(x, used, unused)
    all_mask = used | unused
    e_tokens, e_indices, e_cu, e_max, _ = unpad_ref(x, all_mask)
    assert torch.equal(tokens, e_tokens) and torch.equal(indices, e_indices)
    assert torch.equal(cu, e_cu) and int(max_len) == e_max
    assert seqlens.tolist() == [4, 7, 0]


def test_pad_roundtrip_and_gradients():
    b, s = 4, 17
    mask = padding_mask(random_lengths(b, s), s, "random")
    x = torch.randn(b, s, 2, 8, dtype=torch.float64, requires_grad=True)
    tokens, indices, cu, max_len, _ = unpad_input(x, mask)
    back = pad_input(tokens, indices, b, s)
    assert torch.equal(back, pad_ref(tokens.detach(), indices, b, s))
    assert torch.equal(back[mask], x[mask]) and (back[~mask] == 0).all()
    g = torch.randn_like(back)
    back.backward(g)
    assert torch.equal(x.grad[mask], g[mask]) and (x.grad[~mask] == 0).all()


def test_index_first_axis_and_its_gradient():
    x = torch.randn(11, 3, 4, dtype=torch.float64, requires_grad=True)
    idx = torch.tensor([7, 0, 3, 10])
    y = index_first_axis(x, idx)
    assert torch.equal(y, x[idx])
    torch.autograd.gradcheck(lambda t: index_first_axis(t, idx), (x,))
    torch.autograd.gradcheck(lambda t: pad_input(t, idx, 2, 6),
                             (torch.randn(4, 3, dtype=torch.float64, requires_grad=True),))
