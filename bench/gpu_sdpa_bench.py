#!/usr/bin/env python3
"""flashc's attention on the GPU against PyTorch SDPA's `flash` and `cudnn`
backends, on DESIGN.md's standard grid: bf16, hdim 64/128/256, nheads =
2048/hdim, batch = 16384/seqlen, seqlen 512..16384, causal and not.

FLOPs: forward 4*b*h*sq*sk*d, halved when causal; backward 2.5x that.
Timing: CUDA events around each call, calls enqueued back to back on the
current stream after warm-up runs (at least --warmup-ms long, so that the
clocks settle to this kernel's power draw), median of the repeats, and of
--rounds rounds over the implementations in rotated order (none is always
timed right after a peer's hotter kernel); where one set of
tensors fits twice in L2, calls rotate over sets totalling 4x L2. Forward
calls are also captured into a CUDA graph (the same calls, replayed): that
time is the GPU's alone, without each library's per-call CPU cost, which
exceeds the kernel time of small problems; the ratios use it, and the eager
figures are printed beside them.

All three read the same (batch, seqlen, heads, hdim) tensors: SDPA gets
them as (batch, heads, seqlen, hdim) views, flash_attn's own layout.

flashc is called through the `flashc` Python package when it imports, else
through ctypes on libflashc.so (--lib or FLASHC_LIBRARY). Its backward is
timed where the library has one on CUDA; otherwise a note says so. Backward
calls through autograd (SDPA, the flashc package) drop the inputs'
gradients first, so that every library writes fresh gradients (no
accumulation kernels in the time).

    python3 bench/gpu_sdpa_bench.py [--hdim 64,128] [--seqlen 1024] [--causal 0,1]
                                    [--quick] [--out results.tsv]
"""
import argparse
import ctypes
import datetime
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

TOKENS = 16384   # batch * seqlen
WIDTH = 2048     # nheads * hdim
L2_DEFAULT = 60 << 20

# ---- flashc through ctypes (include/flashc.h) -------------------------------

MAX_RANK = 4
DTYPE_FLOAT32, DTYPE_FLOAT16, DTYPE_BFLOAT16 = 0, 1, 2
DEVICE_CUDA = 1
SUCCESS, ERROR_UNSUPPORTED = 0, 16
c_enum = ctypes.c_int


class _Device(ctypes.Structure):
    _fields_ = [("type", c_enum), ("index", ctypes.c_int)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", c_enum), ("device", _Device),
                ("rank", ctypes.c_int), ("shape", ctypes.c_int64 * MAX_RANK),
                ("stride", ctypes.c_int64 * MAX_RANK)]


class _Options(ctypes.Structure):
    _fields_ = [("softmax_scale", ctypes.c_double), ("causal", ctypes.c_int),
                ("window_left", ctypes.c_int64), ("window_right", ctypes.c_int64),
                ("softcap", ctypes.c_double), ("alibi_slopes", ctypes.POINTER(_Tensor)),
                ("dropout_p", ctypes.c_double), ("dropout_seed", ctypes.c_uint64),
                ("dropout_offset", ctypes.c_uint64), ("deterministic", ctypes.c_int),
                ("num_threads", ctypes.c_int), ("stream", ctypes.c_void_p)]


class _Varlen(ctypes.Structure):
    _fields_ = [("cu_seqlens_q", ctypes.POINTER(_Tensor)), ("cu_seqlens_k", ctypes.POINTER(_Tensor)),
                ("seqused_k", ctypes.POINTER(_Tensor)), ("max_seqlen_q", ctypes.c_int64),
                ("max_seqlen_k", ctypes.c_int64)]


_P = ctypes.POINTER(_Tensor)


class _ForwardArgs(ctypes.Structure):
    _fields_ = [("q", _P), ("k", _P), ("v", _P), ("out", _P), ("lse", _P), ("s_dmask", _P),
                ("varlen", _Varlen), ("options", _Options)]


class _BackwardArgs(ctypes.Structure):
    _fields_ = [("dout", _P), ("q", _P), ("k", _P), ("v", _P), ("out", _P), ("lse", _P),
                ("dlse", _P), ("dq", _P), ("dk", _P), ("dv", _P), ("workspace", ctypes.c_void_p),
                ("workspace_bytes", ctypes.c_size_t), ("varlen", _Varlen), ("options", _Options)]


class CtypesFlashc:
    """The few calls the bench needs, straight on libflashc."""

    name = "ctypes"

    def __init__(self, path):
        self.path = path
        lib = ctypes.CDLL(path)
        lib.flashc_version.restype = ctypes.c_char_p
        lib.flashc_cuda_available.restype = ctypes.c_int
        lib.flashc_status_string.argtypes = [c_enum]
        lib.flashc_status_string.restype = ctypes.c_char_p
        lib.flashc_last_error_message.restype = ctypes.c_char_p
        lib.flashc_attention_options_default.restype = _Options
        lib.flashc_attention_forward.argtypes = [ctypes.POINTER(_ForwardArgs)]
        lib.flashc_attention_forward.restype = c_enum
        lib.flashc_attention_backward.argtypes = [ctypes.POINTER(_BackwardArgs)]
        lib.flashc_attention_backward.restype = c_enum
        lib.flashc_attention_backward_workspace_size.argtypes = [
            ctypes.POINTER(_BackwardArgs), ctypes.POINTER(ctypes.c_size_t)]
        lib.flashc_attention_backward_workspace_size.restype = c_enum
        self.lib = lib
        self.version = lib.flashc_version().decode()
        if not lib.flashc_cuda_available():
            raise RuntimeError(f"{path}: flashc_cuda_available() is 0 (built without CUDA, or no GPU)")

    def error(self, status):
        return (f"{self.lib.flashc_status_string(status).decode()}: "
                f"{self.lib.flashc_last_error_message().decode()}")

    @staticmethod
    def _tensor(t):
        d = _Tensor()
        d.data = t.data_ptr()
        d.dtype = {torch.float16: DTYPE_FLOAT16, torch.bfloat16: DTYPE_BFLOAT16,
                   torch.float32: DTYPE_FLOAT32}[t.dtype]
        d.device = _Device(DEVICE_CUDA, t.device.index or 0)
        d.rank = t.dim()
        for i in range(t.dim()):
            d.shape[i] = t.shape[i]
            d.stride[i] = t.stride(i)
        return d

    def forward_call(self, q, k, v, causal):
        """A function that runs the forward into fresh out/lse (made once),
        and those tensors."""
        b, s, h, _ = q.shape
        out = torch.empty(q.shape[:3] + (v.shape[3],), dtype=q.dtype, device=q.device)
        lse = torch.empty((b, h, s), dtype=torch.float32, device=q.device)
        keep = [self._tensor(t) for t in (q, k, v, out, lse)]
        args = _ForwardArgs()
        args.q, args.k, args.v, args.out, args.lse = (ctypes.pointer(t) for t in keep)
        args.options = self.lib.flashc_attention_options_default()
        args.options.causal = int(causal)
        fwd = self.lib.flashc_attention_forward

        def run():
            # the current stream at call time: a graph capture's, when capturing
            args.options.stream = torch.cuda.current_stream(q.device).cuda_stream
            st = fwd(ctypes.byref(args))
            if st != SUCCESS:
                raise RuntimeError(f"flashc forward: {self.error(st)}")
        # the descriptors hold raw pointers: the tensors must live as long
        run.keep = (keep, args, q, k, v, out, lse)
        return run, out, lse

    def backward_call(self, q, k, v, causal, dout):
        """A function that runs the backward (after one forward), or None
        and the library's message where it has no CUDA backward."""
        fwd, out, lse = self.forward_call(q, k, v, causal)
        fwd()
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        keep = [self._tensor(t) for t in (dout, q, k, v, out, lse, dq, dk, dv)]
        args = _BackwardArgs()
        (args.dout, args.q, args.k, args.v, args.out, args.lse, args.dq, args.dk,
         args.dv) = (ctypes.pointer(t) for t in keep)
        args.options = self.lib.flashc_attention_options_default()
        args.options.causal = int(causal)
        args.options.stream = torch.cuda.current_stream(q.device).cuda_stream
        size = ctypes.c_size_t(0)
        st = self.lib.flashc_attention_backward_workspace_size(ctypes.byref(args), ctypes.byref(size))
        if st == ERROR_UNSUPPORTED:
            return None, self.error(st)
        if st != SUCCESS:
            raise RuntimeError(f"flashc backward workspace query: {self.error(st)}")
        workspace = torch.empty(max(size.value, 1), dtype=torch.uint8, device=q.device)
        args.workspace = workspace.data_ptr()
        args.workspace_bytes = size.value
        st = self.lib.flashc_attention_backward(ctypes.byref(args))
        if st == ERROR_UNSUPPORTED:
            return None, self.error(st)
        if st != SUCCESS:
            raise RuntimeError(f"flashc backward: {self.error(st)}")
        bwd = self.lib.flashc_attention_backward

        def run():
            args.options.stream = torch.cuda.current_stream(q.device).cuda_stream
            s = bwd(ctypes.byref(args))
            if s != SUCCESS:
                raise RuntimeError(f"flashc backward: {self.error(s)}")
        run.keep = (keep, args, workspace, fwd, out, lse, dout, dq, dk, dv)
        return run, None


class PackageFlashc:
    """flashc through its Python package (flash_attn's API, autograd)."""

    name = "package"

    def __init__(self, module):
        self.module = module
        self.path = getattr(module, "library_path", "?")
        self.version = getattr(module, "__version__", "?")
        if not module.cuda_available():
            raise RuntimeError(f"flashc package ({self.path}): cuda_available() is False")

    def forward_call(self, q, k, v, causal):
        f = self.module.flash_attn_func

        def run():
            with torch.no_grad():
                return f(q, k, v, causal=causal)
        return run, None, None

    def backward_call(self, q, k, v, causal, dout):
        qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
        try:
            out = self.module.flash_attn_func(qg, kg, vg, causal=causal)
            out.backward(dout, retain_graph=True)
        except NotImplementedError as e:  # FlashcUnsupportedError
            return None, str(e)

        def run():
            _fresh_gradients(qg, kg, vg)
            out.backward(dout, retain_graph=True)
        run.keep = (qg, kg, vg, out)
        return run, None


def load_flashc(lib_path):
    if lib_path:
        os.environ["FLASHC_LIBRARY"] = lib_path
    notes = []
    try:
        import flashc
        return PackageFlashc(flashc), notes
    except Exception as e:  # not installed, or no CUDA in it: try the library
        notes.append(f"flashc package not used ({type(e).__name__}: {e})")
    path = lib_path or os.environ.get("FLASHC_LIBRARY")
    if not path:
        raise SystemExit("gpu_sdpa_bench: the flashc package is not usable and no library was given "
                         "(--lib PATH or FLASHC_LIBRARY=PATH to libflashc.so)\n  " + "\n  ".join(notes))
    return CtypesFlashc(path), notes


# ---- SDPA --------------------------------------------------------------------

SDPA_BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def sdpa_forward_call(backend, q, k, v, causal):
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))

    def run():
        with torch.no_grad(), sdpa_kernel([SDPA_BACKENDS[backend]]):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
    return run


def _fresh_gradients(*leaves):
    """Drops the leaves' .grad, so that a timed backward writes new
    gradients instead of adding into the last call's (autograd's in-place
    add would put three extra kernels into the time of the libraries called
    through autograd and not of the one called through ctypes)."""
    for t in leaves:
        t.grad = None


def sdpa_backward_call(backend, q, k, v, causal, dout):
    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
    with sdpa_kernel([SDPA_BACKENDS[backend]]):
        out = F.scaled_dot_product_attention(qg.transpose(1, 2), kg.transpose(1, 2),
                                             vg.transpose(1, 2), is_causal=causal)
    dout_t = dout.transpose(1, 2)

    def run():
        _fresh_gradients(qg, kg, vg)
        with sdpa_kernel([SDPA_BACKENDS[backend]]):
            out.backward(dout_t, retain_graph=True)
    run.keep = (qg, kg, vg, out)
    return run


# ---- timing ------------------------------------------------------------------

def warm_up(calls, warmup, warmup_s):
    """At least `warmup` untimed calls, and more until `warmup_s` seconds
    have passed: the clocks settle to this kernel's power draw (a peer's
    hotter kernel just before leaves them lower for tens of ms)."""
    start, n = time.perf_counter(), 0
    while n < warmup or time.perf_counter() - start < warmup_s:
        for _ in range(max(1, warmup)):
            calls[n % len(calls)]()
            n += 1
        torch.cuda.synchronize()


def time_median(calls, warmup, repeat, warmup_s=0.0):
    """Median seconds of one call; calls[i % len(calls)] is run i (input
    sets rotate). Events around each call, enqueued back to back."""
    warm_up(calls, warmup, warmup_s)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(repeat)]
    for i, (start, stop) in enumerate(events):
        start.record()
        calls[i % len(calls)]()
        stop.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events) * 1e-3


def note_failure(impl, p, d, s, causal, e):
    print(f"# {impl} {p} hdim {d} seqlen {s} causal {int(causal)}: "
          f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", flush=True)


def time_graph(calls, warmup, repeat, warmup_s=0.0):
    """Seconds of one call when `repeat` calls (rotating over the sets) are
    captured into one CUDA graph: median of 5 replays after `warmup`
    untimed ones (and more until `warmup_s` seconds have passed)."""
    for c in calls:
        c()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(repeat):
            calls[i % len(calls)]()
    warm_up([graph.replay], warmup, warmup_s)
    times = []
    for _ in range(5):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop) * 1e-3 / repeat)
    del graph
    return statistics.median(times)


def forward_error(flashc, q, k, v, causal):
    """max |flashc - SDPA| / max |SDPA| of one forward: the speed only
    counts if flashc computes attention."""
    run, out, _ = flashc.forward_call(q, k, v, causal)
    result = run()
    o_flashc = result if out is None else out
    for backend in SDPA_BACKENDS:
        try:
            o_ref = sdpa_forward_call(backend, q, k, v, causal)().transpose(1, 2)
        except RuntimeError:
            continue
        return ((o_flashc.float() - o_ref.float()).abs().max() / o_ref.float().abs().max()).item()
    return float("nan")


def forward_flops(b, h, s, d, causal):
    f = 4.0 * b * h * s * s * d
    return f / 2 if causal else f


def make_sets(b, s, h, d, count, device, seed):
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    sets = []
    for _ in range(count):
        q, k, v, dout = (torch.randn((b, s, h, d), generator=g, device=device, dtype=torch.bfloat16)
                         for _ in range(4))
        sets.append((q, k, v, dout))
    return sets


def set_count(b, s, h, d, l2_bytes, backward):
    # q, k, v, out (+ dout, dq, dk, dv) in bf16
    one = b * s * h * d * 2 * (8 if backward else 4)
    if one >= 2 * l2_bytes:
        return 1
    return min(64, -(-4 * l2_bytes // one))


# ---- the run -----------------------------------------------------------------

def parse_list(text, kind=int):
    return [kind(x) for x in text.split(",") if x.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hdim", default="64,128,256", help="head dims (64,128,256)")
    ap.add_argument("--seqlen", default="512,1024,2048,4096,8192,16384", help="sequence lengths")
    ap.add_argument("--causal", default="0,1", help="0 = not causal, 1 = causal (0,1)")
    ap.add_argument("--quick", action="store_true", help="hdim 128, seqlen 1024,4096, fewer repeats")
    ap.add_argument("--forward-only", action="store_true", help="skip every backward")
    ap.add_argument("--warmup", type=int, default=5, help="untimed calls first (5)")
    ap.add_argument("--repeat", type=int, default=30, help="timed calls, median reported (30)")
    ap.add_argument("--warmup-ms", type=float, default=100.0,
                    help="warm-up of each timing lasts at least this long (100 ms)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds over the implementations in rotated order; the median round is reported (3)")
    ap.add_argument("--lib", help="libflashc.so for the ctypes path (else FLASHC_LIBRARY)")
    ap.add_argument("--out", help="write the results as TSV here")
    args = ap.parse_args()
    if args.quick:
        if args.hdim == ap.get_default("hdim"):
            args.hdim = "128"
        if args.seqlen == ap.get_default("seqlen"):
            args.seqlen = "1024,4096"
        args.repeat = min(args.repeat, 10)
        args.warmup = min(args.warmup, 3)
    hdims, seqlens = parse_list(args.hdim), parse_list(args.seqlen)
    warmup_s = args.warmup_ms * 1e-3
    causals = [bool(c) for c in parse_list(args.causal)]
    if not torch.cuda.is_available():
        raise SystemExit("gpu_sdpa_bench: torch sees no CUDA device")
    device = torch.device("cuda", 0)
    flashc, notes = load_flashc(args.lib)
    props = torch.cuda.get_device_properties(device)
    l2 = getattr(props, "L2_cache_size", 0) or L2_DEFAULT
    header = [
        f"flashc vs PyTorch SDPA, bf16, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
        f"device {props.name} (L2 {l2 >> 20} MiB); torch {torch.__version__}, "
        f"cuDNN {torch.backends.cudnn.version()}; flashc {flashc.version} via {flashc.name} ({flashc.path})",
        f"batch = {TOKENS}/seqlen, nheads = {WIDTH}/hdim; FLOPs fwd 4*b*h*s*s*d (/2 causal), bwd 2.5x; "
        f"CUDA events, median of {args.repeat} after {args.warmup} warm-up calls and >= {args.warmup_ms:g} ms, "
        f"median of {args.rounds} rounds in rotated order; inputs rotated over sets of 4x L2 "
        "where one set fits in 2x L2; forward: the same calls captured in a CUDA graph (median of 5 replays)",
    ] + notes
    for line in header:
        print("# " + line, flush=True)

    rows, bwd_note, failures = [], None, 0
    impls = ["flashc", "flash", "cudnn"]
    for d in hdims:
        for causal in causals:
            for s in seqlens:
                b, h = max(1, TOKENS // s), max(1, WIDTH // d)
                fl = forward_flops(b, h, s, d, causal)
                passes = ["fwd"] if args.forward_only else ["fwd", "bwd"]
                nsets = max(set_count(b, s, h, d, l2, p == "bwd") for p in passes)
                sets = make_sets(b, s, h, d, nsets, device, seed=d * 100003 + s)
                for p in passes:
                    flops = fl if p == "fwd" else 2.5 * fl
                    res, eager, err = {}, {}, float("nan")
                    runs = {}
                    for impl in impls:
                        try:
                            if impl == "flashc" and p == "fwd":
                                calls = [flashc.forward_call(q, k, v, causal)[0] for q, k, v, _ in sets]
                            elif impl == "flashc":
                                calls = []
                                for q, k, v, dout in sets:
                                    run, note = flashc.backward_call(q, k, v, causal, dout)
                                    if run is None:
                                        bwd_note = note
                                        calls = None
                                        break
                                    calls.append(run)
                            elif p == "fwd":
                                calls = [sdpa_forward_call(impl, q, k, v, causal) for q, k, v, _ in sets]
                            else:
                                calls = [sdpa_backward_call(impl, q, k, v, causal, dout)
                                         for q, k, v, dout in sets]
                            runs[impl] = calls
                        except Exception as e:  # a backend without a kernel for this case
                            note_failure(impl, p, d, s, causal, e)
                            if impl == "flashc":
                                failures += 1
                        finally:
                            torch.cuda.synchronize()
                    # rounds in rotated order, so that no implementation is
                    # always the one timed right after another's hottest kernel
                    times = {i: [] for i in runs if runs[i] is not None}
                    eagers = {i: [] for i in times}
                    for rnd in range(args.rounds):
                        order = [i for i in impls[rnd % len(impls):] + impls[:rnd % len(impls)] if i in times]
                        for impl in order:
                            try:
                                calls = runs[impl]
                                if p == "fwd":
                                    eagers[impl].append(time_median(calls, args.warmup, args.repeat, warmup_s))
                                    times[impl].append(time_graph(calls, args.warmup, args.repeat, warmup_s))
                                else:
                                    times[impl].append(time_median(calls, args.warmup, args.repeat, warmup_s))
                            except Exception as e:
                                note_failure(impl, p, d, s, causal, e)
                                if impl == "flashc":
                                    failures += 1
                                del times[impl]
                            finally:
                                torch.cuda.synchronize()
                    for impl in impls:
                        res[impl] = statistics.median(times[impl]) if times.get(impl) else float("nan")
                        if eagers.get(impl) and impl in times:
                            eager[impl] = statistics.median(eagers[impl])
                    runs = calls = None
                    if p == "fwd" and not math.isnan(res["flashc"]):
                        err = forward_error(flashc, *sets[0][:3], causal)
                        if not err < 2e-2:
                            print(f"# WARNING flashc forward differs from SDPA by {err:.3g} (relative) "
                                  f"at hdim {d} seqlen {s} causal {int(causal)}", flush=True)
                            failures += 1
                    tf = {i: (flops / res[i] * 1e-12 if res[i] and not math.isnan(res[i]) else float("nan"))
                          for i in impls}
                    row = dict(hdim=d, seqlen=s, batch=b, nheads=h, causal=int(causal), pass_=p,
                               nsets=nsets, err=err,
                               **{f"{i}_ms": res[i] * 1e3 for i in impls},
                               **{f"{i}_tflops": tf[i] for i in impls})
                    for i in impls:
                        row[f"{i}_eager_tflops"] = (flops / eager[i] * 1e-12 if eager.get(i) and
                                                    not math.isnan(eager[i]) else float("nan"))
                    row["ratio_flash"] = tf["flashc"] / tf["flash"] if tf["flash"] else float("nan")
                    row["ratio_cudnn"] = tf["flashc"] / tf["cudnn"] if tf["cudnn"] else float("nan")
                    rows.append(row)
                    print(f"  {p} hdim {d:3d} seqlen {s:5d} causal {int(causal)}: flashc {tf['flashc']:6.1f} "
                          f"flash {tf['flash']:6.1f} cudnn {tf['cudnn']:6.1f} TFLOP/s"
                          + (" (graph); eager " + " ".join(f"{row[i + '_eager_tflops']:6.1f}" for i in impls)
                             if p == "fwd" else ""), flush=True)
                del sets
                torch.cuda.empty_cache()

    print()
    for p in ["fwd"] if args.forward_only else ["fwd", "bwd"]:
        sel = [r for r in rows if r["pass_"] == p]
        if not sel:
            continue
        fwd = p == "fwd"
        print("forward TFLOP/s (CUDA graph; eager: calls from Python one by one)" if fwd else "backward TFLOP/s")
        print(f"{'hdim':>4} {'seqlen':>6} {'causal':>6} | {'flashc':>7} {'flash':>7} {'cudnn':>7} | "
              f"{'/flash':>7} {'/cudnn':>7}" + (f" | {'eager:':>7} {'flashc':>7} {'flash':>7} {'/flash':>7}"
                                               if fwd else ""))
        for r in sel:
            eager_cols = ""
            if fwd:
                ef, es = r["flashc_eager_tflops"], r["flash_eager_tflops"]
                eager_cols = f" | {'':>7} {ef:7.1f} {es:7.1f} {(ef / es if es else float('nan')):7.3f}"
            print(f"{r['hdim']:4d} {r['seqlen']:6d} {('yes' if r['causal'] else 'no'):>6} | "
                  f"{r['flashc_tflops']:7.1f} {r['flash_tflops']:7.1f} {r['cudnn_tflops']:7.1f} | "
                  f"{r['ratio_flash']:7.3f} {r['ratio_cudnn']:7.3f}" + eager_cols)
        ok = [r for r in sel if not math.isnan(r["ratio_flash"]) and not math.isnan(r["ratio_cudnn"])]
        if ok:
            gm = lambda key: math.exp(sum(math.log(r[key]) for r in ok) / len(ok))
            print(f"geometric mean over {len(ok)} rows: flashc/flash {gm('ratio_flash'):.3f}, "
                  f"flashc/cudnn {gm('ratio_cudnn'):.3f}")
        print()
    if not args.forward_only and bwd_note:
        print(f"backward: flashc has no CUDA backward in this version ({bwd_note}); not timed")
    if args.out:
        cols = ["hdim", "seqlen", "batch", "nheads", "causal", "pass_", "flashc_ms", "flashc_tflops",
                "flash_ms", "flash_tflops", "cudnn_ms", "cudnn_tflops", "ratio_flash", "ratio_cudnn",
                "flashc_eager_tflops", "flash_eager_tflops", "cudnn_eager_tflops", "err", "nsets"]
        with open(args.out, "w") as f:
            for line in header:
                f.write("# " + line + "\n")
            f.write("\t".join("pass" if c == "pass_" else c for c in cols) + "\n")
            for r in rows:
                f.write("\t".join(f"{r[c]:.4f}" if isinstance(r[c], float) else str(r[c]) for c in cols) + "\n")
        print(f"results: {args.out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
