"""Decode over a full KV cache: flashc's flash_attn_with_kvcache against
PyTorch SDPA's cuDNN and flash backends on the same shapes, in one run.

One query token per sequence, bf16, head dim 128, every cache row used
(cache_seqlens = the cache length: SDPA has no per-sequence lengths). Each
library's call is captured in a CUDA graph of 20 calls and replayed; time =
median of 7 replays / 20. GB/s = K + V bytes read / time; the copy ceiling
(device-to-device copy of 4 GiB, read + write) is measured in the same run.

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
    (32, 8, 256, 4096), (32, 32, 1, 131072), (32, 32, 16, 16384), (32, 32, 64, 4096),
]


def graph_time(fn, calls=20, replays=7):
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
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return sorted(times)[replays // 2] * 1e-3  # seconds


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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="TSV file for the rows")
    args = parser.parse_args()
    copy = copy_bandwidth()
    print(f"# copy {copy:.0f} GB/s; torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}")
    header = "heads\tbatch\tcache\tflashc_us\tcudnn_us\tflash_us\tflashc_GBs\tflashc/copy\tflashc/best"
    rows = [header]
    print(header)
    for h, hk, batch, cache in SHAPES:
        d = 128
        q = torch.randn(batch, 1, h, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(batch, cache, hk, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        lens = torch.full((batch,), cache, dtype=torch.int32, device="cuda")
        t_fc = graph_time(lambda: flashc.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens))
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        peers = {}
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    peers[name] = graph_time(lambda: F.scaled_dot_product_attention(
                        qt, kt, vt, enable_gqa=hk != h))
            except RuntimeError:
                peers[name] = float("nan")
        kv_bytes = 2 * k.numel() * k.element_size()
        best = min(t for t in peers.values() if t == t) if any(t == t for t in peers.values()) else float("nan")
        row = (f"{h}/{hk}\t{batch}\t{cache}\t{t_fc * 1e6:.1f}\t{peers['cudnn'] * 1e6:.1f}\t"
               f"{peers['flash'] * 1e6:.1f}\t{kv_bytes / t_fc / 1e9:.0f}\t{kv_bytes / t_fc / 1e9 / copy:.3f}\t"
               f"{best / t_fc:.3f}")
        rows.append(row)
        print(row, flush=True)
        del q, k, v, qt, kt, vt
        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
