"""Decode over a full KV cache: flashc's flash_attn_with_kvcache against
PyTorch SDPA's cuDNN and flash backends and FlashAttention-4
(flash_attn.cute, where importable: ../shared/peers/fa4.sh) on the same
shapes, in one run.

One query token per sequence, bf16, head dim 128, every cache row used
(cache_seqlens = the cache length: SDPA has no per-sequence lengths). Each
library's call is captured in a CUDA graph of 20 calls. The graphs of a
shape are replayed in three rounds, the libraries in turn within each
round (the first reads of freshly allocated memory are slower, whoever
makes them); time = the best round's median of 7 replays / 20. GB/s = K +
V bytes read / time; the copy ceiling (device-to-device copy of 4 GiB,
read + write) is measured in the same run.

    FLASHC_LIBRARY=build-gpu/src/libflashc.so PYTHONPATH=python \\
        python3 bench/kvcache_peers.py [--out results.tsv]
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashc

SHAPES = [  # (q heads, kv heads, batch, cache)
    (32, 8, 1, 131072), (32, 8, 4, 32768), (32, 8, 8, 32768), (32, 8, 16, 16384),
    (32, 8, 32, 8192), (32, 8, 64, 4096), (32, 8, 64, 8192), (32, 8, 256, 1024),
    (32, 8, 256, 4096), (32, 8, 64, 16384), (32, 32, 1, 131072), (32, 32, 16, 16384), (32, 32, 64, 4096),
]


def make_graph(fn, calls=20):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph


def replay_time(graph, calls=20, replays=7):
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return sorted(times)[replays // 2] * 1e-3  # seconds


def fa4_function():
    """FA4's flash_attn_func, or None where flash_attn.cute is not installed."""
    try:
        from flash_attn.cute import flash_attn_func
    except Exception:  # not installed here
        return None
    return flash_attn_func


def copy_bandwidth():
    """Device-to-device copy of 4 GiB (cudaMemcpyAsync, eager), read +
    write, median of 5."""
    a = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    b.copy_(a)
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        b.copy_(a)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return 2 * a.numel() / sorted(times)[2] / 1e9


NAMES = ["flashc", "cudnn", "flash", "fa4"]


def start_table(key_columns, extra_columns=""):
    """The copy ceiling, FA4 (or None) and the table's rows so far, its
    header, which is printed with the copy line."""
    copy = copy_bandwidth()
    fa4 = fa4_function()
    print(f"# copy {copy:.0f} GB/s; torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}; "
          f"FA4 {'yes' if fa4 else 'not importable'}")
    header = (key_columns + "\t" + "\t".join(f"{n}_us" for n in NAMES) +
              "\tflashc_GBs\tflashc/copy\tflashc/best" + extra_columns)
    print(header)
    return copy, fa4, [header]


def time_graphs(graphs, rounds=3):
    """Seconds per call of each library (NaN where it has no graph): the
    best of `rounds` rounds, the libraries in turn within each."""
    times = {name: float("inf") for name in graphs}
    for _ in range(rounds):
        for name, graph in graphs.items():
            times[name] = min(times[name], replay_time(graph))
    return {name: times.get(name, float("nan")) for name in NAMES}


def timing_columns(t, kv_bytes, copy):
    """A row's µs per library, flashc's GB/s, its ratio to the copy and to
    the best peer that ran."""
    peers = [t[n] for n in NAMES[1:] if t[n] == t[n]]
    best = min(peers) if peers else float("nan")
    gbs = kv_bytes / t["flashc"] / 1e9
    return ("\t".join(f"{t[n] * 1e6:.1f}" for n in NAMES) +
            f"\t{gbs:.0f}\t{gbs / copy:.3f}\t{best / t['flashc']:.3f}")


def write_table(path, rows):
    if path:
        with open(path, "w") as f:
            f.write("\n".join(rows) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="TSV file for the rows")
    args = parser.parse_args()
    copy, fa4, rows = start_table("heads\tbatch\tcache")
    for h, hk, batch, cache in SHAPES:
        d = 128
        q = torch.randn(batch, 1, h, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(batch, cache, hk, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        lens = torch.full((batch,), cache, dtype=torch.int32, device="cuda")
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        graphs = {"flashc": make_graph(lambda: flashc.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens))}
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    graphs[name] = make_graph(lambda: F.scaled_dot_product_attention(qt, kt, vt,
                                                                                     enable_gqa=hk != h))
            except RuntimeError:
                pass
        if fa4:
            try:
                graphs["fa4"] = make_graph(lambda: fa4(q, k, v))
            except Exception as e:  # a shape FA4 does not take
                print(f"# FA4 {h}/{hk} {batch} x {cache}: {type(e).__name__}: {e}".splitlines()[0])
        t = time_graphs(graphs)
        row = f"{h}/{hk}\t{batch}\t{cache}\t" + timing_columns(t, 2 * k.numel() * k.element_size(), copy)
        rows.append(row)
        print(row, flush=True)
        del graphs, q, k, v, qt, kt, vt
        torch.cuda.empty_cache()
    write_table(args.out, rows)


if __name__ == "__main__":
    main()
