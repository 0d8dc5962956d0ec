"""Scalar arguments in every form flash_attn accepts (Python numbers, numpy
scalars, 0-d and 1-element tensors on the CPU or the GPU, any 2-element
sequence or tensor for window_size) give bit-identical results to the plain
Python form, through every public function and the lower layer; forms
that are not integer-like / real / boolean raise the library's error
naming the argument."""

import numpy as np
import pytest
import torch

import flashc
from checks import cu_seqlens_from_lengths
from conftest import skip_unless_device
from flashc.flash_attn_interface import (_flash_attn_backward, _flash_attn_forward,
                                         _flash_attn_varlen_backward,
                                         _flash_attn_varlen_forward)


def _dtype(device):
    return torch.float32 if device == "cpu" else torch.bfloat16


def _forms_int(value, device):
    """value as flash_attn accepts an int."""
    return [np.int64(value), np.int32(value), torch.tensor(value), torch.tensor([value]),
            torch.tensor(value, dtype=torch.int32, device=device),
            torch.tensor([value], device=device)]


def _forms_float(value, device):
    return [np.float32(value), np.float64(value), torch.tensor(value),
            torch.tensor([value], dtype=torch.float64),
            torch.tensor(value, device=device)]


def _forms_bool(value, device):
    return [np.bool_(value), int(value), np.int64(value), torch.tensor(value),
            torch.tensor([value], device=device)]


def _forms_window(window, device):
    left, right = window
    return [list(window), np.array(window), torch.tensor(window),
            torch.tensor(window, dtype=torch.int32, device=device),
            (np.int64(left), np.int32(right)), (torch.tensor(left), torch.tensor([right])),
            torch.tensor([[left, right]])]


def _inputs(device, b=2, sq=37, sk=29, h=4, hk=2, d=24):
    dtype = _dtype(device)
    q = torch.randn(b, sq, h, d, device=device, dtype=dtype)
    k, v = (torch.randn(b, sk, hk, d, device=device, dtype=dtype) for _ in range(2))
    return q, k, v


def _run_batched(q, k, v, **kw):
    """out, lse and the three gradients, fresh leaves each time."""
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out, lse = flashc.flash_attn_func(q, k, v, return_lse=True, **kw)
    (out.float().sum() + lse.sum()).backward()
    return out, lse, q.grad, k.grad, v.grad


def _assert_identical(a, b, what):
    for x, y in zip(a, b):
        assert torch.equal(x, y), f"{what}: results differ from the plain Python form"


# plain value of each scalar, and the forms it is given in
PLAIN = dict(softmax_scale=0.375, causal=True, window_size=(9, 3), softcap=2.5,
             deterministic=True)
FORMS = dict(softmax_scale=_forms_float, causal=_forms_bool, window_size=_forms_window,
             softcap=_forms_float, deterministic=_forms_bool)


@pytest.mark.parametrize("argument", sorted(FORMS))
def test_batched_scalar_forms(device, argument):
    skip_unless_device(device)
    q, k, v = _inputs(device)
    expected = _run_batched(q, k, v, **PLAIN)
    for form in FORMS[argument](PLAIN[argument], device):
        got = _run_batched(q, k, v, **{**PLAIN, argument: form})
        _assert_identical(expected, got, f"{argument}={form!r}")


def test_dropout_p_forms(device):
    skip_unless_device(device)
    q, k, v = _inputs(device)
    torch.manual_seed(11)
    expected = _run_batched(q, k, v, dropout_p=0.25, causal=True)
    for form in _forms_float(0.25, device):
        torch.manual_seed(11)
        got = _run_batched(q, k, v, dropout_p=form, causal=True)
        _assert_identical(expected, got, f"dropout_p={form!r}")


def test_return_flags_forms(device):
    skip_unless_device(device)
    q, k, v = _inputs(device)
    plain = flashc.flash_attn_func(q, k, v, return_attn_probs=True)
    for form in _forms_bool(True, device):
        got = flashc.flash_attn_func(q, k, v, return_attn_probs=form)
        assert len(got) == 3
        _assert_identical(plain[:2], got[:2], f"return_attn_probs={form!r}")
        got = flashc.flash_attn_func(q, k, v, return_lse=form)
        assert len(got) == 2
        _assert_identical(plain[:2], got, f"return_lse={form!r}")


def test_packed_functions_take_tensor_window(device):
    skip_unless_device(device)
    q, k, v = _inputs(device, sk=37, hk=4)
    qkv = torch.stack([q, k, v], dim=2)
    kv = torch.stack([k, v], dim=2)
    window = torch.tensor([7, 0], device=device)
    for fn, args in ((flashc.flash_attn_qkvpacked_func, (qkv,)),
                     (flashc.flash_attn_kvpacked_func, (q, kv))):
        expected = fn(*args, window_size=(7, 0), softmax_scale=0.25)
        got = fn(*args, window_size=window, softmax_scale=torch.tensor(0.25))
        assert torch.equal(expected, got), fn.__name__


def _varlen_inputs(device, lengths_q=(5, 0, 17, 9), lengths_k=(7, 3, 17, 12), h=4, hk=2, d=16):
    dtype = _dtype(device)
    cu_q = cu_seqlens_from_lengths(lengths_q).to(device)
    cu_k = cu_seqlens_from_lengths(lengths_k).to(device)
    q = torch.randn(sum(lengths_q), h, d, device=device, dtype=dtype)
    k, v = (torch.randn(sum(lengths_k), hk, d, device=device, dtype=dtype) for _ in range(2))
    return q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k)


def test_varlen_scalar_forms(device):
    skip_unless_device(device)
    q, k, v, cu_q, cu_k, mq, mk = _varlen_inputs(device)
    expected = flashc.flash_attn_varlen_func(q, k, v, cu_q, cu_k, mq, mk, causal=True,
                                             window_size=(4, 1), softmax_scale=0.375)
    for max_q, max_k in zip(_forms_int(mq, device), _forms_int(mk, device)):
        got = flashc.flash_attn_varlen_func(
            q, k, v, cu_q, cu_k, max_q, max_k, causal=torch.tensor(True),
            window_size=torch.tensor([4, 1]), softmax_scale=np.float32(0.375))
        assert torch.equal(expected, got), f"max_seqlen={max_q!r}"
    qkv = torch.stack([q, q, q], dim=1)
    expected = flashc.flash_attn_varlen_qkvpacked_func(qkv, cu_q, mq, window_size=(2, 2))
    got = flashc.flash_attn_varlen_qkvpacked_func(qkv, cu_q, torch.tensor(mq),
                                                  window_size=np.array([2, 2]))
    assert torch.equal(expected, got)
    kv = torch.stack([k, v], dim=1)
    expected = flashc.flash_attn_varlen_kvpacked_func(q, kv, cu_q, cu_k, mq, mk, softcap=3.0)
    got = flashc.flash_attn_varlen_kvpacked_func(q, kv, cu_q, cu_k, np.int64(mq), np.int32(mk),
                                                 softcap=torch.tensor(3))
    assert torch.equal(expected, got)


def test_lower_layer_scalar_forms(device):
    skip_unless_device(device)
    q, k, v = _inputs(device)
    plain = (0.0, 0.375, True, 6, 2, 1.5, None, False)
    forms = (np.float64(0.0), torch.tensor(0.375, device=device), np.bool_(True),
             torch.tensor([6]), np.int64(2), torch.tensor(1.5, dtype=torch.float64),
             None, torch.tensor(False))
    expected = _flash_attn_forward(q, k, v, *plain)
    got = _flash_attn_forward(q, k, v, *forms)
    _assert_identical(expected[:2], got[:2], "_flash_attn_forward")
    out, lse = expected[0], expected[1]
    dout = torch.randn_like(out)

    def backward(*scalars):
        grads = [torch.full_like(t, float("nan")) for t in (q, k, v)]
        _flash_attn_backward(dout, q, k, v, out, lse, *grads, *scalars)
        return grads

    want = backward(0.0, 0.375, True, 6, 2, 1.5, None, True)
    have = backward(np.float32(0.0), torch.tensor(0.375, device=device), torch.tensor(1),
                    np.int32(6), torch.tensor([2], device=device), np.float64(1.5), None,
                    np.bool_(True))
    _assert_identical(want, have, "_flash_attn_backward")

    q, k, v, cu_q, cu_k, mq, mk = _varlen_inputs(device)
    expected = _flash_attn_varlen_forward(q, k, v, cu_q, cu_k, mq, mk, 0.0, 0.25, True, 3, 0)
    got = _flash_attn_varlen_forward(q, k, v, cu_q, cu_k, torch.tensor(mq), np.int64(mk),
                                     np.float32(0.0), torch.tensor([0.25]), torch.tensor(True),
                                     torch.tensor(3, device=device), np.int8(0))
    _assert_identical(expected[:2], got[:2], "_flash_attn_varlen_forward")
    out, lse = expected[0], expected[1]
    dout = torch.randn_like(out)

    def varlen_backward(max_q, max_k, scale):
        grads = [torch.full_like(t, float("nan")) for t in (q, k, v)]
        _flash_attn_varlen_backward(dout, q, k, v, out, lse, *grads, cu_q, cu_k, max_q, max_k,
                                    0.0, scale, True, 3, 0, 0.0, None, False)
        return grads

    _assert_identical(varlen_backward(mq, mk, 0.25),
                      varlen_backward(torch.tensor(mq, device=device), np.int64(mk),
                                      np.float32(0.25)),
                      "_flash_attn_varlen_backward")


REJECTED = {
    "window_float_bound": (dict(window_size=(1.5, 2)), TypeError, r"window_size\[0\]"),
    "window_integral_float": (dict(window_size=(3, 2.0)), TypeError, r"window_size\[1\]"),
    "window_three": (dict(window_size=(1, 2, 3)), ValueError, "window_size"),
    "window_three_tensor": (dict(window_size=torch.tensor([1, 2, 3])), ValueError,
                            "window_size"),
    "window_float_tensor": (dict(window_size=torch.tensor([1.0, 2.0])), ValueError,
                            "window_size"),
    "window_string": (dict(window_size="12"), ValueError, "window_size"),
    "window_scalar": (dict(window_size=4), ValueError, "window_size"),
    "window_string_bound": (dict(window_size=("1", 2)), TypeError, r"window_size\[0\]"),
    "scale_string": (dict(softmax_scale="0.5"), TypeError, "softmax_scale"),
    "scale_tensor_two": (dict(softmax_scale=torch.tensor([0.1, 0.2])), ValueError,
                         "softmax_scale"),
    "scale_complex": (dict(softmax_scale=1j), TypeError, "softmax_scale"),
    "softcap_none": (dict(softcap=None), TypeError, "softcap"),
    "dropout_string": (dict(dropout_p="0.1"), TypeError, "dropout_p"),
    "causal_float": (dict(causal=1.0), TypeError, "causal"),
    "causal_string": (dict(causal="yes"), TypeError, "causal"),
    "causal_none": (dict(causal=None), TypeError, "causal"),
    "causal_float_tensor": (dict(causal=torch.tensor(1.0)), TypeError, "causal"),
    "deterministic_list": (dict(deterministic=[True]), TypeError, "deterministic"),
}


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_rejected_forms(case):
    kwargs, exc_type, pattern = REJECTED[case]
    q, k, v = _inputs("cpu")
    with pytest.raises(exc_type, match=pattern) as info:
        flashc.flash_attn_func(q, k, v, **kwargs)
    assert isinstance(info.value, flashc.FlashcError)


def test_rejected_max_seqlen_and_lower_layer():
    q, k, v, cu_q, cu_k, mq, mk = _varlen_inputs("cpu")
    with pytest.raises(TypeError, match="max_seqlen_q") as info:
        flashc.flash_attn_varlen_func(q, k, v, cu_q, cu_k, float(mq), mk)
    assert isinstance(info.value, flashc.FlashcError)
    with pytest.raises(ValueError, match="max_seqlen_k"):
        flashc.flash_attn_varlen_func(q, k, v, cu_q, cu_k, mq, torch.tensor([mk, mk]))
    q, k, v = _inputs("cpu")
    with pytest.raises(TypeError, match="window_size_left") as info:
        _flash_attn_forward(q, k, v, 0.0, 0.3, False, 2.5, -1, 0.0, None, False)
    assert isinstance(info.value, flashc.FlashcError)
    with pytest.raises(ValueError, match="softmax_scale"):
        _flash_attn_forward(q, k, v, 0.0, None, False, -1, -1, 0.0, None, False)


def test_compile_fullgraph_with_python_and_numpy_integers():
    """Python numbers, numpy integers and a window tensor trace under
    torch.compile(fullgraph=True) and give the eager results."""
    q, k, v = _inputs("cpu", b=1, sq=21, sk=21)

    def fn(q, k, v, window):
        return flashc.flash_attn_func(q, k, v, window_size=window, softmax_scale=0.3,
                                      causal=True)

    compiled = torch.compile(fn, fullgraph=True)
    for window in ((5, 2), (np.int64(4), np.int64(1)), torch.tensor([3, 0])):
        expected = fn(q, k, v, window)
        assert torch.equal(compiled(q, k, v, window), expected), repr(window)


def test_compile_dynamic_max_seqlen_is_not_specialised():
    """A max_seqlen read off a size under torch.compile(dynamic=True) stays
    symbolic through the conversion: new lengths reuse the one graph."""
    graphs = []

    def count(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def fn(q, cu):
        return flashc.flash_attn_varlen_func(q, q, q, cu, cu, q.shape[0], q.shape[0],
                                             causal=True)

    compiled = torch.compile(fn, backend=count, dynamic=True)
    for lengths in ((10, 20), (15, 30), (32, 32)):
        q = torch.randn(sum(lengths), 2, 8)
        cu = cu_seqlens_from_lengths(lengths)
        assert torch.equal(compiled(q, cu), fn(q, cu)), lengths
    assert len(graphs) == 1, f"{len(graphs)} graphs for three lengths"
