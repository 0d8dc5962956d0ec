"""Comparison rules and random inputs shared by the tests.

Tolerance rule (as flash_attn's tests do it): for float16/bfloat16 inputs the
error of flashc against the float64 reference must be at most twice the error
of the same reference computed in the low precision (plain PyTorch in that
dtype), plus a small epsilon. float32 inputs are compared with the float64
reference directly, relative to the largest reference magnitude.
"""

import torch

LOW_PRECISION = (torch.float16, torch.bfloat16)

# float32 inputs: max |flashc - ref64| <= rtol * max(|ref64|, 1)
FP32_FORWARD_RTOL = 1e-4
FP32_BACKWARD_RTOL = 1e-3
# Low precision: max error <= LOWP_FACTOR * low-precision reference error + eps.
LOWP_FACTOR = 2.0
LOWP_FORWARD_EPS = 1e-5
LOWP_BACKWARD_EPS = 1e-4
# LSE is float32 for every input dtype: computed from the (exact) low-precision
# inputs it is compared with float64 at float32 accuracy.
LSE_ATOL = 2e-4
LSE_RTOL = 1e-4


def randn(shape, dtype, device="cpu", scale=1.0, requires_grad=False):
    """Normal random tensor of `dtype` (drawn in float32, then rounded)."""
    t = (torch.randn(shape, dtype=torch.float32) * scale).to(device=device, dtype=dtype)
    return t.requires_grad_(requires_grad)


def leaf(t, dtype=None):
    """A detached copy that requires grad (optionally converted)."""
    t = t.detach()
    if dtype is not None:
        t = t.to(dtype)
    return t.clone().requires_grad_(True)


def alibi_slopes(kind, batch, nheads, device="cpu"):
    """Random positive float32 slopes of shape (h) ("h") or (b, h) ("bh")."""
    if kind is None:
        return None
    shape = (nheads,) if kind == "h" else (batch, nheads)
    return (torch.rand(shape, dtype=torch.float32) * 0.5 + 0.05).to(device)


def max_abs_error(actual, expected):
    a = actual.detach().double().cpu()
    e = expected.detach().double().cpu()
    if a.shape != e.shape:
        raise AssertionError(f"shape {tuple(a.shape)} != expected {tuple(e.shape)}")
    if a.numel() == 0:
        return 0.0
    both_inf = torch.isinf(a) & torch.isinf(e) & (torch.sign(a) == torch.sign(e))
    diff = torch.where(both_inf, torch.zeros_like(a), (a - e).abs())
    diff = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)
    return diff.max().item()


def max_abs(t):
    t = t.detach().double().cpu()
    t = t[torch.isfinite(t)]
    return t.abs().max().item() if t.numel() else 0.0


def assert_close(name, actual, ref64, ref_lowp, dtype, backward=False, slack=0.0):
    """Apply the tolerance rule for inputs of `dtype` (see the module doc).
    slack: an error the rule must allow on top (see rounded_out_slack)."""
    err = max_abs_error(actual, ref64)
    if dtype in LOW_PRECISION:
        lowp_err = max_abs_error(ref_lowp, ref64)
        eps = LOWP_BACKWARD_EPS if backward else LOWP_FORWARD_EPS
        bound = LOWP_FACTOR * lowp_err + eps * max(1.0, max_abs(ref64)) + slack
        assert err <= bound, (f"{name}: max error {err:.3g} > {LOWP_FACTOR} x low-precision "
                              f"reference error {lowp_err:.3g} + eps + slack {slack:.3g} "
                              f"(bound {bound:.3g})")
    else:
        rtol = FP32_BACKWARD_RTOL if backward else FP32_FORWARD_RTOL
        if dtype == torch.float64:
            rtol = 1e-10
        bound = rtol * max(1.0, max_abs(ref64)) + slack
        assert err <= bound, f"{name}: max error {err:.3g} > {bound:.3g} ({dtype})"


def rounded_out_slack(ref_lse, inputs64, dout, out, ref_out, varlen=False):
    """The gradient error that comes from the backward receiving the forward
    output rounded to the input dtype (as flash_attn's backward does).

    The backward uses D_i = rowsum(dO_i * O_i); with the rounded O it uses
    D_i + delta_i, delta_i = rowsum(dO_i * (O_rounded_i - O_i)), which is
    exactly a gradient of the LSE with dLSE = -delta. Where the exact
    gradient cancels (a row with a single visible key), this is the whole
    error and the low-precision reference, which does not use D, shows none.
    Returns {name: max |that gradient|} for the tensors of inputs64."""
    delta = (dout.detach().cpu().double() * (out.detach().cpu().double() - ref_out.detach())).sum(-1)
    delta = delta.transpose(0, 1) if varlen else delta.transpose(1, 2)
    names = list(inputs64)
    grads = torch.autograd.grad(ref_lse, [inputs64[n] for n in names], -delta,
                                retain_graph=True, allow_unused=True)
    return {n: (0.0 if g is None else max_abs(g)) for n, g in zip(names, grads)}


def assert_lse_close(name, actual, ref64, dtype=torch.float32):
    """LSE (natural log, +inf on empty rows) against the float64 reference."""
    a = actual.detach().double().cpu()
    e = ref64.detach().double().cpu()
    assert a.shape == e.shape, f"{name}: shape {tuple(a.shape)} != {tuple(e.shape)}"
    inf_rows = torch.isinf(e)
    assert torch.equal(torch.isposinf(a), torch.isposinf(e)), (
        f"{name}: +inf (rows that see no key) at {(torch.isposinf(a) != torch.isposinf(e)).sum()} "
        f"wrong places")
    finite = ~inf_rows
    if finite.any():
        tol = 1e-12 if dtype == torch.float64 else None
        diff = (a[finite] - e[finite]).abs()
        bound = (LSE_ATOL + LSE_RTOL * e[finite].abs()) if tol is None else tol * (1 + e[finite].abs())
        bad = diff > bound
        assert not bad.any(), f"{name}: max error {diff.max().item():.3g} ({bad.sum()} elements)"


def random_lengths(batch, max_len, allow_empty=True, generator=None):
    """Random sequence lengths in [0 or 1, max_len], one of them max_len."""
    low = 0 if allow_empty else 1
    lengths = torch.randint(low, max_len + 1, (batch,))
    lengths[torch.randint(0, batch, (1,))] = max_len
    return lengths


def padding_mask(lengths, max_len, mode="right"):
    """Bool (b, max_len) attention mask with lengths[i] True entries.

    right: the first lengths[i] positions; left: the last; random: scattered."""
    b = lengths.shape[0]
    mask = torch.zeros(b, max_len, dtype=torch.bool)
    for i, n in enumerate(lengths.tolist()):
        if mode == "right":
            mask[i, :n] = True
        elif mode == "left":
            mask[i, max_len - n:] = True
        else:
            mask[i, torch.randperm(max_len)[:n]] = True
    return mask


def cu_seqlens_from_lengths(lengths, device="cpu"):
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(torch.as_tensor(lengths, dtype=torch.int64), 0).to(torch.int32)
    return cu.to(device)


def sdmask_shape(b, h, sq, sk):
    r = lambda x: (x + 127) // 128 * 128
    return (b, h, r(sq), r(sk))
