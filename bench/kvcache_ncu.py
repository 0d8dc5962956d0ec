"""Decode kernels under Nsight Compute: flashc's flash_attn_with_kvcache
beside SDPA's cuDNN (and flash) backend on the same shapes, with the
hardware counters that say where a bandwidth-bound kernel's time goes:
DRAM bytes read against the K + V bytes the call must read (over-fetch),
DRAM throughput, L2 requests and sectors per request (how the loads are
cut: whole 256-byte rows or 128-byte boxes), L2 hit rate, SM and warp
activity, how evenly the SMs were busy (the mean and the least-busy SM's
active cycles over the kernel's elapsed cycles: a low minimum is a tail
where some SMs ran out of work), and the launch shape.

One query token per sequence, bf16, head dim 128, every cache row used.
Each library's call runs three times inside an NVTX range that ncu
filters on; ncu runs with --clock-control none (the card's clocks are
left alone) and flushes the caches before each kernel (its default), as
a decode step over a cache larger than L2 finds them. The driver starts
one ncu process per (shape, library) and prints one row per kernel.

    FLASHC_LIBRARY=build-gpu/src/libflashc.so PYTHONPATH=python \\
        python3 bench/kvcache_ncu.py [--shapes 32/8/64/4096,32/8/1/131072] [--out rows.tsv]

Needs ncu on the PATH (or NCU=path) and hardware counters (a runtime
that exposes them).
"""
import argparse
import csv
import io
import os
import subprocess
import sys

METRICS = [
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "lts__t_requests_op_read.sum",
    "lts__t_sectors_op_read.sum",
    "lts__t_sector_hit_rate.pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__cycles_active.avg",
    "sm__cycles_active.min",
    "gpc__cycles_elapsed.max",
    "launch__grid_size",
    "launch__block_size",
    "launch__registers_per_thread",
]
LIBRARIES = ("flashc", "cudnn", "flash")
RANGE = "decode"


def parse_shape(text):
    h, hk, batch, cache = (int(x) for x in text.split("/"))
    return h, hk, batch, cache


def call(lib, shape, calls):
    """Runs under ncu: the library's decode call, warmed up, then `calls`
    times inside the NVTX range ncu profiles."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    h, hk, batch, cache = shape
    d = 128
    q = torch.randn(batch, 1, h, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(batch, cache, hk, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    if lib == "flashc":
        import flashc

        lens = torch.full((batch,), cache, dtype=torch.int32, device="cuda")

        def fn():
            return flashc.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens)
    else:
        backend = SDPBackend.CUDNN_ATTENTION if lib == "cudnn" else SDPBackend.FLASH_ATTENTION
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

        def fn():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=hk != h)
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(RANGE)
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()


def profile(lib, shape, calls, ncu):
    """The kernels ncu measured for one (library, shape): a list of dicts."""
    cmd = [ncu, "--clock-control", "none", "--nvtx", "--nvtx-include", f"{RANGE}/", "--metrics",
           ",".join(METRICS), "--csv", "--page", "raw", sys.executable, os.path.abspath(__file__), "--call", lib,
           "--shape", "/".join(map(str, shape)), "--calls", str(calls)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith('"')]
    if done.returncode != 0 or len(lines) < 2:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        print(f"# {lib} {shape}: ncu gave no rows (exit {done.returncode}): {' | '.join(tail)}", flush=True)
        return []
    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    return [r for r in rows if r.get("ID", "").strip().isdigit()]  # the second line holds units


def number(row, metric):
    text = row.get(metric, "").replace(",", "").strip()
    try:
        return float(text)
    except ValueError:
        return float("nan")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default="32/8/64/4096,32/8/1/131072,32/8/256/1024",
                        help="q heads/kv heads/batch/cache, comma-separated")
    parser.add_argument("--libraries", default="flashc,cudnn", help=f"some of {','.join(LIBRARIES)}")
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--out", help="TSV file for the rows")
    parser.add_argument("--call", choices=LIBRARIES, help=argparse.SUPPRESS)
    parser.add_argument("--shape", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.call:
        call(args.call, parse_shape(args.shape), args.calls)
        return
    ncu = os.environ.get("NCU", "ncu")
    header = ("shape\tlibrary\tkernel\tus\tdram_read_MB\tneeded_MB\tread/needed\tdram_write_MB\tdram_pct\t"
              "TB/s\tl2_requests_k\tsectors/request\tl2_hit_pct\tsm_pct\twarps_pct\tsm_busy_avg_pct\tsm_busy_min_pct\t"
              "grid\tblock\tregs")
    print(header, flush=True)
    out = [header]
    for text in args.shapes.split(","):
        shape = parse_shape(text)
        h, hk, batch, cache = shape
        needed = 2 * batch * cache * hk * 128 * 2  # K + V bytes, bf16
        for lib in args.libraries.split(","):
            kernels = profile(lib, shape, args.calls, ncu)
            per_call = len(kernels) // args.calls if kernels else 0
            for row in kernels[-per_call:] if per_call else []:  # the last call's kernels
                us = number(row, "gpu__time_duration.sum") / 1e3  # ns -> us
                read = number(row, "dram__bytes_read.sum")
                requests = number(row, "lts__t_requests_op_read.sum")
                elapsed = number(row, "gpc__cycles_elapsed.max")
                line = "\t".join([
                    text, lib, row.get("Kernel Name", "?")[:60], f"{us:.1f}", f"{read / 1e6:.1f}",
                    f"{needed / 1e6:.1f}", f"{read / needed:.3f}",
                    f"{number(row, 'dram__bytes_write.sum') / 1e6:.1f}",
                    f"{number(row, 'dram__throughput.avg.pct_of_peak_sustained_elapsed'):.1f}",
                    f"{read / us / 1e6:.2f}", f"{requests / 1e3:.0f}",
                    f"{number(row, 'lts__t_sectors_op_read.sum') / requests:.2f}",
                    f"{number(row, 'lts__t_sector_hit_rate.pct'):.1f}",
                    f"{number(row, 'sm__throughput.avg.pct_of_peak_sustained_elapsed'):.1f}",
                    f"{number(row, 'sm__warps_active.avg.pct_of_peak_sustained_active'):.1f}",
                    f"{100 * number(row, 'sm__cycles_active.avg') / elapsed:.1f}",
                    f"{100 * number(row, 'sm__cycles_active.min') / elapsed:.1f}",
                    f"{number(row, 'launch__grid_size'):.0f}", f"{number(row, 'launch__block_size'):.0f}",
                    f"{number(row, 'launch__registers_per_thread'):.0f}"])
                print(line, flush=True)
                out.append(line)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
