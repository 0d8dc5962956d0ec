#!/usr/bin/env python3
"""Per-call cost of small attention problems: flashc's Python package beside
PyTorch SDPA (its flash backend on CUDA, its default on the CPU), eager
mode, on problems whose kernels take microseconds, so what is timed is what
each library does around its kernels (Python, argument checks, tensor
allocations, driver calls, extra kernels).

Each figure is the mean wall time per call over --iters back-to-back calls
after warm-up, the device synchronised once at the end of the loop. The
loops of the two libraries alternate, --rounds times, and the fastest round
of each is reported: on a shared or virtualised host the slow rounds are
interference, which alternation spreads over both libraries. Rows:

    forward           out = f(q, k, v) with inputs that require grad
    forward no_grad   the same under torch.no_grad() (inference)
    forward+backward  f(q, k, v).sum().backward()

    python3 bench/percall_bench.py [--device cuda|cpu] [--shape 1,128,8,64]
        [--dtype bf16|fp16|fp32] [--causal 1] [--threads 1] [--profile]

--profile adds a torch.profiler table of flashc's forward+backward (host
time per operator, device time per kernel).
"""
import argparse
import datetime
import sys
import time

import torch
import torch.nn.functional as F

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def mean_us(fn, device, iters):
    """Mean wall time of one of `iters` back-to-back calls, synchronised at
    the end."""
    _sync(device)
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    _sync(device)
    return (time.perf_counter() - start) / iters * 1e6


def fastest_rounds(functions, device, iters, rounds, warmup=50):
    """{name: fastest round's mean} of the functions, their rounds
    alternating."""
    for fn in functions.values():
        for _ in range(warmup):
            fn()
    best = {}
    for _ in range(rounds):
        for name, fn in functions.items():
            t = mean_us(fn, device, iters)
            best[name] = min(best.get(name, t), t)
    return best


def calls(q, k, v, causal):
    """(name, forward, forward+backward) of each library on the same data."""
    import flashc
    # SDPA takes (b, h, s, d): views of the same (b, s, h, d) tensors.
    qs, ks, vs = (t.detach().transpose(1, 2).requires_grad_() for t in (q, k, v))

    def sdpa(q_, k_, v_):
        if q_.is_cuda:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q_, k_, v_, is_causal=causal)
        return F.scaled_dot_product_attention(q_, k_, v_, is_causal=causal)

    def flashc_fb():
        flashc.flash_attn_func(q, k, v, causal=causal).sum().backward()

    def sdpa_fb():
        sdpa(qs, ks, vs).sum().backward()

    return [
        ("flashc", lambda: flashc.flash_attn_func(q, k, v, causal=causal), flashc_fb),
        ("sdpa", lambda: sdpa(qs, ks, vs), sdpa_fb),
    ]


def no_grad(fn):
    def run():
        with torch.no_grad():
            fn()
    return run


def profile(fn, device):
    from torch.profiler import ProfilerActivity, profile as torch_profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    for _ in range(20):
        fn()
    _sync(device)
    with torch_profile(activities=activities) as prof:
        for _ in range(20):
            fn()
        _sync(device)
    sort = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=sort, row_limit=25))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--shape", default=None, help="b,s,h,d (default 1,128,8,64 on CUDA, "
                    "1,1,1,8 on the CPU)")
    ap.add_argument("--dtype", default=None, help="bf16 (CUDA default), fp16, fp32 (CPU default)")
    ap.add_argument("--causal", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (torch.set_num_threads)")
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    device = args.device
    shape = tuple(int(x) for x in (args.shape or ("1,128,8,64" if device == "cuda"
                                                   else "1,1,1,8")).split(","))
    dtype = DTYPES[args.dtype or ("bf16" if device == "cuda" else "fp32")]
    if device == "cpu":
        torch.set_num_threads(args.threads)
    causal = bool(args.causal)
    import flashc
    what = torch.cuda.get_device_name() if device == "cuda" else f"CPU, {args.threads} thread(s)"
    print(f"# percall_bench {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}, "
          f"{what}, torch {torch.__version__}, flashc {flashc.__version__}, shape {shape} "
          f"{dtype} causal={causal}, mean of {args.iters} calls, fastest of {args.rounds} "
          "alternating rounds")
    q, k, v = (torch.randn(shape, device=device, dtype=dtype, requires_grad=True)
               for _ in range(3))
    libraries = calls(q, k, v, causal)
    cases = (("forward", lambda f: f[1], args.iters),
             ("forward no_grad", lambda f: no_grad(f[1]), args.iters),
             ("forward+backward", lambda f: f[2], args.iters // 2))
    print(f"{'':18s}{'flashc us':>11s}{'sdpa us':>11s}{'ratio':>8s}")
    for label, pick, iters in cases:
        best = fastest_rounds({lib[0]: pick(lib) for lib in libraries}, device, iters,
                              args.rounds)
        a, b = best["flashc"], best["sdpa"]
        print(f"{label:18s}{a:11.1f}{b:11.1f}{a / b:8.2f}")
    if args.profile:
        profile(calls(q, k, v, causal)[0][2], device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
