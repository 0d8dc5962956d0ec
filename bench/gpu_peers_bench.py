#!/usr/bin/env python3
"""flashc against every peer an H100/H200 user would pick, in one run:
PyTorch SDPA's flash backend (FlashAttention-2), cuDNN (through SDPA) and
FlashAttention-4's SM90 kernels (`flash_attn.cute`, where importable: see
../shared/peers/fa4.sh), on two tables:

- the standard grid of DESIGN.md (bf16, hdim 64/128/256, nheads =
  2048/hdim, batch = 16384/seqlen, causal and not), forward and backward;
- model-like shapes: GQA ratios 4 and 8, sliding windows, softcap with a
  window, head dims 192/128, varlen of mixed lengths, fp16;
- deterministic mode (flashc and FA4 only: SDPA has none), where the
  backward sums dQ in a fixed order.

Each row prints TFLOP/s per library and flashc over the best peer that ran
it (`/best`). A peer that cannot run a case (SDPA has no windows, softcap
or varlen; a library without a kernel for the head dims) shows "-".

FLOPs count the (query, key) pairs each mask lets through: forward
2·h·(d + dv) per pair, backward 2.5× the forward (DESIGN's convention; the
square causal grid gives the usual 4·b·h·s²·d / 2). Timing: CUDA events
around each call, calls enqueued back to back after warm-up (at least
--warmup-ms long), median of the repeats, and the median of --rounds rounds
over the libraries in rotated order; inputs rotate over sets totalling 4× L2 where one set fits twice
in L2 (as bench/gpu_sdpa_bench.py, whose helpers this uses). The backward
is torch.autograd.grad of each library's own forward output.

    python3 bench/gpu_peers_bench.py [--grid-only | --models-only | --det-only] [--quick]
                                     [--repeat 10] [--warmup-ms 100] [--rounds 3]
                                     [--out results.tsv]
"""
import argparse
import datetime
import math
import os
import sys
from typing import NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_sdpa_bench import L2_DEFAULT, TOKENS, WIDTH, time_median  # noqa: E402


class Case(NamedTuple):
    """One attention problem. lengths: varlen sequence lengths (q and k
    alike), else None; window: (left, right), -1 unbounded."""

    name: str
    batch: int
    seqlen: int
    heads: int
    kv_heads: int
    hdim: int
    hdim_v: int
    causal: bool
    window: Tuple[int, int] = (-1, -1)
    softcap: float = 0.0
    lengths: Optional[Tuple[int, ...]] = None
    dtype: torch.dtype = torch.bfloat16
    deterministic: bool = False


def standard_grid(hdims, seqlens, causals):
    return [Case(f"grid d{d} s{s}{' causal' if c else ''}", max(1, TOKENS // s), s,
                 max(1, WIDTH // d), max(1, WIDTH // d), d, d, c)
            for d in hdims for c in causals for s in seqlens]


MODEL_CASES = [
    Case("Llama-3-8B-like GQA 32/8, d128, 4k, causal", 2, 4096, 32, 8, 128, 128, True),
    Case("Llama-3-70B-like GQA 64/8, d128, 4k, causal", 2, 4096, 64, 8, 128, 128, True),
    Case("GQA 16/4, d64, 8k, causal", 2, 8192, 16, 4, 64, 64, True),
    Case("Mistral-like window 4096, GQA 32/8, d128, 8k", 1, 8192, 32, 8, 128, 128, True,
         (4096, 0)),
    Case("Gemma-2-like softcap 50 + window 4096, 16/8, d256, 8k", 1, 8192, 16, 8, 256, 256, True,
         (4096, 0), 50.0),
    Case("DeepSeek-like d192 / dv128, 16 heads, 4k, causal", 2, 4096, 16, 16, 192, 128, True),
    Case("varlen mixed lengths (16 seqs, 128..8k), 16/16, d128, causal", 1, 8192, 16, 16, 128,
         128, True, lengths=(8192, 128, 3000, 512, 7000, 1500, 4096, 256, 900, 6000, 2048, 333,
                             5000, 64, 1200, 2600)),
    Case("fp16 GQA 32/8, d128, 4k, causal", 2, 4096, 32, 8, 128, 128, True,
         dtype=torch.float16),
]


DET_CASES = [
    Case(f"deterministic d{d} {s // 1024}k{' causal' if c else ''}", TOKENS // s, s, WIDTH // d,
         WIDTH // d, d, d, c, deterministic=True)
    for d, s, c in ((64, 4096, True), (128, 4096, True), (128, 4096, False), (128, 16384, True),
                    (256, 4096, True))
] + [Case("deterministic Llama-3-70B-like GQA 64/8, d128, 4k, causal", 2, 4096, 64, 8, 128, 128,
          True, deterministic=True)]


# ---- FLOPs -----------------------------------------------------------------------


def visible_pairs(sq, sk, causal, window):
    """(query, key) pairs the mask lets through, bottom-right aligned."""
    left, right = window
    if causal:
        right = 0
    total = 0
    for i in range(sq):
        diag = i + sk - sq
        lo = 0 if left < 0 else max(0, diag - left)
        hi = sk if right < 0 else min(sk, diag + right + 1)
        total += max(0, hi - lo)
    return total


def forward_flops(case):
    seqs = case.lengths or (case.seqlen,) * case.batch
    pairs = sum(visible_pairs(s, s, case.causal, case.window) for s in seqs)
    return 2.0 * case.heads * (case.hdim + case.hdim_v) * pairs


# ---- inputs ------------------------------------------------------------------------


def make_inputs(case, device, seed):
    """(q, k, v, dout) in flash_attn's layouts: (b, s, h, d), or varlen
    (total, h, d) with cu_seqlens."""
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    lead = (sum(case.lengths),) if case.lengths else (case.batch, case.seqlen)

    def rand(heads, d):
        return torch.randn((*lead, heads, d), generator=g, device=device, dtype=case.dtype)
    return (rand(case.heads, case.hdim), rand(case.kv_heads, case.hdim),
            rand(case.kv_heads, case.hdim_v), rand(case.heads, case.hdim_v))


def cu_seqlens(lengths, device):
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(torch.tensor(lengths), 0)
    return cu.to(device)


# ---- the libraries: forward(q, k, v) -> out, or raise when they cannot --------------


def flashc_forward(case, device):
    import flashc
    if case.lengths:
        cu, m = cu_seqlens(case.lengths, device), max(case.lengths)
        return lambda q, k, v: flashc.flash_attn_varlen_func(
            q, k, v, cu, cu, m, m, causal=case.causal, window_size=case.window,
            softcap=case.softcap, deterministic=case.deterministic)
    return lambda q, k, v: flashc.flash_attn_func(q, k, v, causal=case.causal,
                                                  window_size=case.window, softcap=case.softcap,
                                                  deterministic=case.deterministic)


def sdpa_forward(backend):
    def make(case, device):
        if case.lengths or case.window != (-1, -1) or case.softcap or case.deterministic:
            raise NotImplementedError("SDPA has no varlen, window, softcap or deterministic mode")
        gqa = dict(enable_gqa=True) if case.heads != case.kv_heads else {}

        def run(q, k, v):
            with sdpa_kernel([backend]):
                out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                     v.transpose(1, 2), is_causal=case.causal,
                                                     **gqa)
            return out.transpose(1, 2)
        return run
    return make


def fa4_forward(case, device):
    from flash_attn.cute import flash_attn_func, flash_attn_varlen_func
    window = tuple(None if w < 0 else w for w in case.window)
    kw = dict(causal=case.causal, softcap=case.softcap)
    if case.deterministic:
        kw["deterministic"] = True
    if window != (None, None):
        kw["window_size"] = window

    def first(result):
        return result[0] if isinstance(result, tuple) else result
    if case.lengths:
        cu, m = cu_seqlens(case.lengths, device), max(case.lengths)
        return lambda q, k, v: first(flash_attn_varlen_func(
            q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=m, max_seqlen_k=m, **kw))
    return lambda q, k, v: first(flash_attn_func(q, k, v, **kw))


LIBRARIES = {"flashc": flashc_forward, "flash": sdpa_forward(SDPBackend.FLASH_ATTENTION),
             "cudnn": sdpa_forward(SDPBackend.CUDNN_ATTENTION), "fa4": fa4_forward}
PEERS = ("flash", "cudnn", "fa4")


def fa4_available():
    try:
        import flash_attn.cute  # noqa: F401
        return True
    except Exception:
        return False


# ---- timing --------------------------------------------------------------------------


def time_case(case, device, l2, args, libraries, backward):
    """{(library, pass): seconds or None}, and the forward's max error of
    each library against flashc (relative to flashc's max). Bytes of one
    input set (q, k, v, out, dout, dq, dk, dv) decide how many sets rotate.
    Every library's calls are built first; then args.rounds rounds time
    them in rotated order (each timing warmed up for args.warmup_ms), and
    the median round counts: the H200 runs at its power cap under the
    heaviest kernels, and a library timed right after one of them would
    start at lowered clocks (bench/NOTES.md, "the SDPA harness under the
    power cap")."""
    elems = sum(case.lengths) if case.lengths else case.batch * case.seqlen
    bytes_one = elems * (2 * case.heads * (case.hdim + case.hdim_v)
                         + 2 * case.kv_heads * (case.hdim + case.hdim_v)) * 2
    nsets = 1 if bytes_one >= 2 * l2 else min(16, -(-4 * l2 // bytes_one))
    sets = [make_inputs(case, device, seed=1000 + i) for i in range(nsets)]
    errors, reference, calls = {}, None, {}

    def skip(name, p, e):
        print(f"#   {name} {p}: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}",
              flush=True)

    for name in libraries:
        try:
            fwd = LIBRARIES[name](case, device)
            out = fwd(*sets[0][:3])
            if reference is None:
                reference = out.float()
            errors[name] = ((out.float() - reference).abs().max()
                            / reference.abs().max().clamp_min(1e-6)).item()
            calls[(name, "fwd")] = [(lambda s=s, fwd=fwd: fwd(*s[:3])) for s in sets]
        except Exception as e:  # no kernel for this case
            skip(name, "fwd", e)
            continue
        if not backward:
            continue
        try:
            bwd = []
            for q, k, v, dout in sets:
                leaves = [t.detach().requires_grad_() for t in (q, k, v)]
                out = fwd(*leaves)
                bwd.append(lambda out=out, leaves=leaves, dout=dout: torch.autograd.grad(
                    out, leaves, dout, retain_graph=True))
            bwd[0]()
            calls[(name, "bwd")] = bwd
        except Exception as e:
            skip(name, "bwd", e)
        torch.cuda.synchronize()
    samples = {key: [] for key in calls}
    order = [n for n in libraries if any(key[0] == n for key in calls)]
    warmup_s = args.warmup_ms * 1e-3
    for rnd in range(args.rounds):
        for name in order[rnd % len(order):] + order[:rnd % len(order)] if order else []:
            for p in ("fwd", "bwd"):
                if (name, p) not in calls:
                    continue
                try:
                    samples[(name, p)].append(time_median(calls[(name, p)], args.warmup, args.repeat,
                                                          warmup_s))
                except Exception as e:
                    skip(name, p, e)
    times = {(n, p): None for n in libraries for p in ("fwd", "bwd")}
    for key, got in samples.items():
        if got:
            times[key] = sorted(got)[len(got) // 2]
    calls = sets = None
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return times, errors


def tflops(flops, seconds):
    return flops / seconds * 1e-12 if seconds else float("nan")


def run_table(title, cases, args, device, l2, libraries):
    print(f"\n{title}", flush=True)
    rows = []
    for case in cases:
        times, errors = time_case(case, device, l2, args, libraries, not args.forward_only)
        fl = forward_flops(case)
        for p in ("fwd",) if args.forward_only else ("fwd", "bwd"):
            flops = fl if p == "fwd" else 2.5 * fl
            tf = {n: tflops(flops, times.get((n, p))) for n in libraries}
            peers = [tf[n] for n in PEERS if n in tf and not math.isnan(tf[n])]
            best = max(peers) if peers else float("nan")
            row = dict(case=case.name, pass_=p, **{f"{n}_tflops": tf[n] for n in libraries},
                       ratio_best=tf["flashc"] / best if peers else float("nan"),
                       err_max=max((e for n, e in errors.items() if n != "flashc"),
                                   default=float("nan")))
            rows.append(row)
            cols = " ".join(f"{n} {tf[n]:6.1f}" if not math.isnan(tf[n]) else f"{n}      -"
                            for n in libraries)
            print(f"  {p} {case.name}: {cols} | /best {row['ratio_best']:.3f}", flush=True)
    for p in ("fwd",) if args.forward_only else ("fwd", "bwd"):
        ok = [r["ratio_best"] for r in rows if r["pass_"] == p and not math.isnan(r["ratio_best"])]
        if ok:
            print(f"{p}: flashc / best peer: geometric mean {math.exp(sum(map(math.log, ok)) / len(ok)):.3f}, "
                  f"lowest {min(ok):.3f} over {len(ok)} rows", flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hdim", default="64,128,256")
    ap.add_argument("--seqlen", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--quick", action="store_true", help="grid: hdim 128, seqlen 2048,8192")
    ap.add_argument("--grid-only", action="store_true")
    ap.add_argument("--models-only", action="store_true")
    ap.add_argument("--det-only", action="store_true")
    ap.add_argument("--forward-only", action="store_true")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--warmup-ms", type=float, default=100.0,
                    help="each timing warms up for at least this long (100)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds over the libraries in rotated order; the median round counts (3)")
    ap.add_argument("--out", help="TSV of every row")
    args = ap.parse_args()
    if args.quick:
        args.hdim, args.seqlen = "128", "2048,8192"
    if not torch.cuda.is_available():
        raise SystemExit("gpu_peers_bench: torch sees no CUDA device")
    device = torch.device("cuda", 0)
    props = torch.cuda.get_device_properties(device)
    l2 = getattr(props, "L2_cache_size", 0) or L2_DEFAULT
    import flashc
    libraries = ["flashc", "flash", "cudnn"] + (["fa4"] if fa4_available() else [])
    header = (f"flashc vs peers, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}, "
              f"{props.name}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
              f"flashc {flashc.__version__}, FA4 {'yes' if 'fa4' in libraries else 'not importable'}; "
              f"median of {args.repeat} after {args.warmup} warm-up calls and >= {args.warmup_ms:g} ms, "
              f"median of {args.rounds} rounds in rotated order")
    print("# " + header, flush=True)
    rows = []
    only = [args.grid_only, args.models_only, args.det_only]
    if sum(only) > 1:
        raise SystemExit("gpu_peers_bench: at most one of --grid-only, --models-only, --det-only")
    if not (args.models_only or args.det_only):
        grid = standard_grid([int(x) for x in args.hdim.split(",")],
                             [int(x) for x in args.seqlen.split(",")],
                             [bool(int(x)) for x in args.causal.split(",")])
        rows += run_table("standard grid (TFLOP/s)", grid, args, device, l2, libraries)
    if not (args.grid_only or args.det_only):
        rows += run_table("model-like shapes (TFLOP/s)", MODEL_CASES, args, device, l2, libraries)
    if not (args.grid_only or args.models_only):
        rows += run_table("deterministic mode (TFLOP/s)", DET_CASES, args, device, l2, libraries)
    if args.out:
        cols = ["case", "pass_"] + [f"{n}_tflops" for n in libraries] + ["ratio_best", "err_max"]
        with open(args.out, "w") as f:
            f.write("# " + header + "\n" + "\t".join(c.rstrip("_") for c in cols) + "\n")
            for r in rows:
                f.write("\t".join(str(r[c]) for c in cols) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
