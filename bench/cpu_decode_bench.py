"""Decode over a full KV cache on the CPU: flashc's flash_attn_with_kvcache
against PyTorch SDPA on the CPU (enable_gqa), on the same shapes, in one
run.

A few query tokens per sequence (1 by default), head dim 128, GQA 32 / 8,
MHA 32 / 32 and MQA 32 / 1, every cache row used (cache_seqlens = the cache length: SDPA
has no per-sequence lengths; SDPA's query attends to the whole cache). The
two libraries alternate within each of `--rounds` rounds, each round timing
`--calls` calls of each; time = the best round's mean per call. GB/s = K + V
bytes a call must read / time. The read ceiling of the machine is measured
in the same run: a sum over 1 GiB of float32, on the same threads.

    FLASHC_LIBRARY=build/src/libflashc.so PYTHONPATH=python OMP_NUM_THREADS=2 \\
        python3 bench/cpu_decode_bench.py [--threads 2] [--queries 1] [--out rows.tsv]

flashc takes its thread count from OpenMP (OMP_NUM_THREADS), SDPA from
torch.set_num_threads(--threads): give both the same number.
"""
import argparse
import time

import torch
import torch.nn.functional as F

import flashc

SHAPES = [  # (q heads, kv heads, batch, cache)
    (32, 8, 1, 4096), (32, 8, 1, 32768), (32, 8, 8, 4096), (32, 8, 32, 1024),
    (32, 32, 1, 4096), (32, 32, 1, 32768), (32, 32, 8, 4096), (32, 1, 1, 32768),
]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def mean_time(fn, calls):
    fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def read_bandwidth():
    x = torch.ones(1 << 28, dtype=torch.float32)
    x.sum()
    best = min(mean_time(x.sum, 1) for _ in range(5))
    return x.numel() * 4 / best / 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--queries", type=int, default=1, help="query tokens per sequence")
    parser.add_argument("--dtype", default="fp32,bf16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--shape", help="only this row: Q_HEADS,KV_HEADS,BATCH,CACHE")
    parser.add_argument("--out", help="TSV file for the rows")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    ceiling = read_bandwidth()
    print(f"# torch {torch.__version__}, {args.threads} threads, {args.queries} queries per "
          f"sequence; read ceiling {ceiling:.1f} GB/s (sum over 1 GiB)")
    header = "dtype\theads\tbatch\tcache\tflashc_ms\tsdpa_ms\tflashc_GBs\tflashc/ceiling\tsdpa/flashc"
    rows = [header]
    print(header)
    for dname in args.dtype.split(","):
        dtype = DTYPES[dname]
        shapes = [tuple(int(x) for x in args.shape.split(","))] if args.shape else SHAPES
        for h, hk, batch, cache in shapes:
            d, sq = 128, args.queries
            q = torch.randn(batch, sq, h, d, dtype=dtype)
            k = torch.randn(batch, cache, hk, d, dtype=dtype)
            v = torch.randn_like(k)
            lens = torch.full((batch,), cache, dtype=torch.int32)
            qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            calls = {
                "flashc": lambda: flashc.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens),
                "sdpa": lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=hk != h),
            }
            times = {name: float("inf") for name in calls}
            for _ in range(args.rounds):
                for name, fn in calls.items():
                    times[name] = min(times[name], mean_time(fn, args.calls))
            kv_bytes = 2 * k.numel() * k.element_size()
            gbs = kv_bytes / times["flashc"] / 1e9
            row = (f"{dname}\t{h}/{hk}\t{batch}\t{cache}\t{times['flashc'] * 1e3:.2f}\t"
                   f"{times['sdpa'] * 1e3:.2f}\t{gbs:.1f}\t{gbs / ceiling:.3f}\t"
                   f"{times['sdpa'] / times['flashc']:.2f}")
            rows.append(row)
            print(row, flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
