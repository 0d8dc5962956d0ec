"""Invalid arguments: each call fails with the right exception type
(flashc.FlashcError, also a ValueError / TypeError / NotImplementedError as
fits) and a message naming the argument; caller-provided outputs (the lower
layer's dq, dk, dv, poisoned with NaN) are left untouched."""

import re

import pytest
import torch

import flashc
from flashc.flash_attn_interface import (_flash_attn_backward, _flash_attn_forward,
                                         _flash_attn_varlen_backward)


def t(*shape, dtype=torch.bfloat16, device="cpu"):
    return torch.randn(*shape, dtype=torch.float32).to(device=device, dtype=dtype)


def expect_error(fn, exc_type, argument):
    """fn() raises exc_type (and FlashcError) whose message names `argument`."""
    with pytest.raises(exc_type) as info:
        fn()
    assert isinstance(info.value, flashc.FlashcError), \
        f"{type(info.value).__name__} is not a flashc.FlashcError: {info.value}"
    assert isinstance(info.value, RuntimeError)
    assert re.search(argument, str(info.value)), \
        f"message does not name {argument!r}: {info.value}"
    return info.value


Q, K, V = (2, 9, 4, 16), (2, 11, 2, 16), (2, 11, 2, 16)


def batched(**overrides):
    """flash_attn_func arguments with some replaced."""
    args = dict(q=t(*Q), k=t(*K), v=t(*V))
    args.update(overrides)
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
    return lambda: flashc.flash_attn_func(q, k, v, **args)


BATCHED_ERRORS = {
    "k_dtype": (lambda: batched(k=t(*K, dtype=torch.float16)), TypeError, r"\bk\b"),
    "v_dtype": (lambda: batched(v=t(*V, dtype=torch.float32)), TypeError, r"\bv\b"),
    "int32": (lambda: batched(q=torch.ones(Q, dtype=torch.int32),
                              k=torch.ones(K, dtype=torch.int32),
                              v=torch.ones(V, dtype=torch.int32)), TypeError, r"\bq\b"),
    "q_rank": (lambda: batched(q=t(9, 4, 16)), ValueError, r"\bq\b"),
    "k_head_dim": (lambda: batched(k=t(2, 11, 2, 8)), ValueError, r"\bk\b"),
    "v_seqlen": (lambda: batched(v=t(2, 10, 2, 16)), ValueError, r"\bv\b"),
    "k_batch": (lambda: batched(k=t(3, 11, 2, 16)), ValueError, r"\bk\b"),
    "head_groups": (lambda: batched(k=t(2, 11, 3, 16), v=t(2, 11, 3, 16)), ValueError,
                    r"\bk\b|nheads"),
    "head_dim_too_large": (lambda: batched(q=t(2, 9, 4, 257), k=t(2, 11, 2, 257),
                                           v=t(2, 11, 2, 257)), ValueError, r"\bq\b|head"),
    "dropout_negative": (lambda: batched(dropout_p=-0.1), ValueError, "dropout_p"),
    "dropout_one": (lambda: batched(dropout_p=1.0), ValueError, "dropout_p"),
    "dropout_large": (lambda: batched(dropout_p=1.5), ValueError, "dropout_p"),
    "window_left": (lambda: batched(window_size=(-2, 0)), ValueError, "window"),
    "window_right": (lambda: batched(window_size=(3, -5)), ValueError, "window"),
    "window_one_value": (lambda: batched(window_size=(3,)), ValueError, "window_size"),
    "softcap_negative": (lambda: batched(softcap=-1.0), ValueError, "softcap"),
    "softcap_nan": (lambda: batched(softcap=float("nan")), ValueError, "softcap"),
    "scale_inf": (lambda: batched(softmax_scale=float("inf")), ValueError, "softmax_scale"),
    "scale_nan": (lambda: batched(softmax_scale=float("nan")), ValueError, "softmax_scale"),
    "alibi_dtype": (lambda: batched(alibi_slopes=torch.rand(4, dtype=torch.float16)),
                    TypeError, "alibi_slopes"),
    "alibi_shape": (lambda: batched(alibi_slopes=torch.rand(3)), ValueError, "alibi_slopes"),
    "alibi_batch": (lambda: batched(alibi_slopes=torch.rand(3, 4)), ValueError, "alibi_slopes"),
    "strided_view_shape": (lambda: batched(v=t(2, 11, 2, 32)[..., ::2][:, :10]), ValueError,
                           r"\bv\b"),
}
if hasattr(torch, "float8_e4m3fn"):
    BATCHED_ERRORS["float8"] = (lambda: batched(q=t(*Q).to(torch.float8_e4m3fn),
                                                k=t(*K).to(torch.float8_e4m3fn),
                                                v=t(*V).to(torch.float8_e4m3fn)),
                                TypeError, r"\bq\b")


@pytest.mark.parametrize("case", list(BATCHED_ERRORS))
def test_batched_errors(case):
    make, exc, arg = BATCHED_ERRORS[case]
    expect_error(make(), exc, arg)


def test_packed_shape_errors():
    expect_error(lambda: flashc.flash_attn_qkvpacked_func(t(2, 9, 2, 4, 16)), ValueError, "qkv")
    expect_error(lambda: flashc.flash_attn_kvpacked_func(t(*Q), t(2, 11, 3, 2, 16)), ValueError,
                 r"\bkv\b")


def test_strided_last_dim_is_accepted():
    # stride(-1) != 1 is copied (flash_attn's maybe_contiguous), not refused
    q = t(2, 9, 4, 32)[..., ::2]
    out = flashc.flash_attn_func(q, t(*K), t(*V))
    assert out.shape == Q


def varlen(**overrides):
    lengths = [3, 0, 6]
    args = dict(q=t(9, 4, 16), k=t(9, 2, 16), v=t(9, 2, 16),
                cu_seqlens_q=torch.tensor([0, 3, 3, 9], dtype=torch.int32),
                cu_seqlens_k=torch.tensor([0, 3, 3, 9], dtype=torch.int32),
                max_seqlen_q=max(lengths), max_seqlen_k=max(lengths))
    args.update(overrides)
    return lambda: flashc.flash_attn_varlen_func(**args)


VARLEN_ERRORS = {
    "cu_dtype": (lambda: varlen(cu_seqlens_q=torch.tensor([0, 3, 3, 9])), TypeError,
                 "cu_seqlens_q"),
    "cu_k_dtype": (lambda: varlen(cu_seqlens_k=torch.tensor([0, 3, 3, 9],
                                                             dtype=torch.float32)),
                   TypeError, "cu_seqlens_k"),
    "cu_length": (lambda: varlen(cu_seqlens_k=torch.tensor([0, 3, 9], dtype=torch.int32)),
                  ValueError, "cu_seqlens"),
    "cu_rank": (lambda: varlen(cu_seqlens_q=torch.tensor([[0, 3, 3, 9]], dtype=torch.int32)),
                ValueError, "cu_seqlens_q"),
    "cu_decreasing": (lambda: varlen(cu_seqlens_q=torch.tensor([0, 5, 3, 9],
                                                               dtype=torch.int32)),
                      ValueError, "cu_seqlens_q"),
    "cu_beyond_total": (lambda: varlen(cu_seqlens_k=torch.tensor([0, 3, 3, 12],
                                                                 dtype=torch.int32),
                                       max_seqlen_k=9),
                        ValueError, "cu_seqlens_k"),
    "cu_negative": (lambda: varlen(cu_seqlens_q=torch.tensor([-1, 3, 3, 9], dtype=torch.int32)),
                    ValueError, "cu_seqlens_q"),
    "max_seqlen_short": (lambda: varlen(max_seqlen_q=4), ValueError, "max_seqlen_q"),
    "max_seqlen_negative": (lambda: varlen(max_seqlen_k=-1), ValueError, "max_seqlen_k"),
    "q_rank": (lambda: varlen(q=t(1, 9, 4, 16)), ValueError, r"\bq\b"),
    "alibi_batch": (lambda: varlen(alibi_slopes=torch.rand(2, 4)), ValueError, "alibi_slopes"),
    "block_table_rank": (lambda: varlen(block_table=torch.zeros(3, 1, dtype=torch.int32)),
                         ValueError, r"\bk\b"),  # k stays (total_k, ...): not a paged cache
    "block_table_dtype": (lambda: varlen(k=t(2, 4, 2, 16), v=t(2, 4, 2, 16),
                                         block_table=torch.zeros(3, 1, dtype=torch.int64)),
                          TypeError, "block_table"),
    "dropout": (lambda: varlen(dropout_p=2.0), ValueError, "dropout_p"),
    "window": (lambda: varlen(window_size=(-3, -1)), ValueError, "window"),
}


@pytest.mark.parametrize("case", list(VARLEN_ERRORS))
def test_varlen_errors(case):
    make, exc, arg = VARLEN_ERRORS[case]
    expect_error(make(), exc, arg)


# ---- lower-layer backward: errors leave dq, dk, dv untouched -------------------


def backward_problem(varlen_mode=False, dropout_p=0.0):
    if varlen_mode:
        q, k, v = t(9, 4, 16), t(9, 2, 16), t(9, 2, 16)
        cu = torch.tensor([0, 3, 3, 9], dtype=torch.int32)
        from flashc.flash_attn_interface import _flash_attn_varlen_forward
        out, lse, _, rng = _flash_attn_varlen_forward(q, k, v, cu, cu, 6, 6, dropout_p, 0.25,
                                                      True)
        extra = dict(cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=6, max_seqlen_k=6)
    else:
        q, k, v = t(*Q), t(*K), t(*V)
        out, lse, _, rng = _flash_attn_forward(q, k, v, dropout_p, 0.25, True, -1, -1, 0.0,
                                               None, False)
        extra = {}
    args = dict(dout=torch.randn_like(out), q=q, k=k, v=v, out=out, softmax_lse=lse,
                dq=torch.full_like(q, float("nan")), dk=torch.full_like(k, float("nan")),
                dv=torch.full_like(v, float("nan")), dropout_p=dropout_p, softmax_scale=0.25,
                causal=True, window_size_left=-1, window_size_right=-1, softcap=0.0,
                alibi_slopes=None, deterministic=False, rng_state=rng, **extra)
    return args


def run_backward(args):
    fn = _flash_attn_varlen_backward if "cu_seqlens_q" in args else _flash_attn_backward
    return fn(**args)


def _replace(**kw):
    def edit(args):
        for key, value in kw.items():
            args[key] = value(args) if callable(value) else value
    return edit


BACKWARD_ERRORS = {
    "dout_shape": (_replace(dout=lambda a: a["dout"][:, :-1]), ValueError, "dout"),
    "dout_dtype": (_replace(dout=lambda a: a["dout"].float()), TypeError, "dout"),
    "out_shape": (_replace(out=lambda a: a["out"][..., :8]), ValueError, r"\bout\b"),
    "lse_shape": (_replace(softmax_lse=lambda a: a["softmax_lse"][..., :-1]), ValueError,
                  "lse"),
    "lse_dtype": (_replace(softmax_lse=lambda a: a["softmax_lse"].double()), TypeError, "lse"),
    "dlse_shape": (_replace(dlse=lambda a: torch.randn(a["softmax_lse"].shape[:-1] + (3,))),
                   ValueError, "dlse"),
    "dq_dtype": (_replace(dq=lambda a: torch.full(a["q"].shape, float("nan"))), TypeError,
                 r"\bdq\b"),
    "dk_shape": (_replace(dk=lambda a: torch.full_like(a["q"], float("nan"))), ValueError,
                 r"\bdk\b"),
    "dv_last_dim_strided": (_replace(dv=lambda a: torch.full(
        a["v"].shape[:-1] + (2 * a["v"].shape[-1],), float("nan"),
        dtype=a["v"].dtype)[..., ::2]), ValueError, r"\bdv\b"),
    "dq_overlaps_q": (_replace(dq=lambda a: a["q"]), ValueError, r"\bdq\b"),
    "window": (_replace(window_size_left=-7), ValueError, "window"),
    "dropout_p": (_replace(dropout_p=1.0), ValueError, "dropout_p"),
    "k_head_dim": (_replace(k=lambda a: a["k"][..., :8]), ValueError, r"\bk\b"),
}
DROPOUT_BACKWARD_ERRORS = {
    "rng_state_missing": (_replace(rng_state=None), ValueError, "rng_state"),
    "rng_state_dtype": (_replace(rng_state=lambda a: a["rng_state"].int()), ValueError,
                        "rng_state"),
}
VARLEN_BACKWARD_ERRORS = {
    "cu_dtype": (_replace(cu_seqlens_q=lambda a: a["cu_seqlens_q"].long()), TypeError,
                 "cu_seqlens_q"),
    "cu_values": (_replace(cu_seqlens_k=torch.tensor([0, 3, 3, 10], dtype=torch.int32),
                           max_seqlen_k=7), ValueError, "cu_seqlens_k"),
    "max_seqlen": (_replace(max_seqlen_k=2), ValueError, "max_seqlen_k"),
}


def _backward_cases():
    for name in BACKWARD_ERRORS:
        yield pytest.param(False, 0.0, BACKWARD_ERRORS[name], id=f"batched-{name}")
        yield pytest.param(True, 0.0, BACKWARD_ERRORS[name], id=f"varlen-{name}")
    for name, case in DROPOUT_BACKWARD_ERRORS.items():
        yield pytest.param(False, 0.3, case, id=f"batched-{name}")
        yield pytest.param(True, 0.3, case, id=f"varlen-{name}")
    for name, case in VARLEN_BACKWARD_ERRORS.items():
        yield pytest.param(True, 0.0, case, id=f"varlen-{name}")


@pytest.mark.parametrize("varlen_mode,dropout_p,case", list(_backward_cases()))
def test_backward_errors_leave_outputs_untouched(varlen_mode, dropout_p, case):
    edit, exc, arg = case
    args = backward_problem(varlen_mode, dropout_p)
    run_backward(dict(args))                      # the unedited call works
    assert torch.isfinite(args["dq"]).all()
    for name in ("dq", "dk", "dv"):
        args[name].fill_(float("nan"))
    inputs_before = {name: args[name].clone() for name in ("q", "k", "v", "out", "dout")}
    bad = dict(args)
    edit(bad)
    expect_error(lambda: run_backward(bad), exc, arg)
    for name in ("dq", "dk", "dv"):
        assert torch.isnan(args[name]).all(), f"{name} was written by a failing call"
        if bad[name] is not args[name] and bad[name] is not args["q"]:
            assert torch.isnan(bad[name]).all(), f"the replaced {name} was written"
    for name, before in inputs_before.items():
        assert torch.equal(args[name], before), f"{name} was modified by a failing call"


# ---- devices --------------------------------------------------------------------


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")
def test_tensors_on_different_devices():
    expect_error(batched(k=t(*K, device="cuda")), ValueError, r"\bk\b")
    expect_error(batched(alibi_slopes=torch.rand(4, device="cuda")), (ValueError,
                                                                       NotImplementedError),
                 "alibi_slopes")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")
def test_cuda_tensor_without_cuda_backend():
    from flashc import _library
    if _library.cuda_available():
        pytest.skip("this flashc library has the CUDA backend")
    q = t(*Q, device="cuda")
    expect_error(lambda: flashc.flash_attn_func(q, q[:, :, :2], q[:, :, :2]),
                 NotImplementedError, r"\bq\b")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")
def test_float64_on_cuda_is_refused():
    from conftest import cuda_skip_reason
    if cuda_skip_reason():
        pytest.skip(cuda_skip_reason())
    q = t(*Q, dtype=torch.float64, device="cuda")
    expect_error(lambda: flashc.flash_attn_func(q, q, q), (TypeError, NotImplementedError),
                 r"\bq\b")


def test_float64_works_on_the_cpu():
    q = t(1, 5, 2, 8, dtype=torch.float64)
    out, lse = flashc.flash_attn_func(q, q, q, return_lse=True)
    assert out.dtype == torch.float64 and lse.dtype == torch.float64


def test_zero_softmax_scale_is_refused():
    # The C API reads 0 as "default"; an explicit 0.0 must not silently mean 1/sqrt(d).
    expect_error(batched(softmax_scale=0.0), ValueError, "softmax_scale")
