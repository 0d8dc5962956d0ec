"""Head pairs (src/cuda/hopper_kvcache.h) against the unpaired KV-cache kernels on Hopper.

flashc alone, one process; FLASHC_CUDA_KVCACHE is switched per call (the library reads it on every call):
unset (the library's choice), `pairs` (head pairs wherever the shape allows), `tma` (the unpaired TMA kernel),
two rounds each (`--portable` adds the cp.async kernel). Prints, per shape and kernel, µs per call (median of five runs of 40
calls), the K/V bandwidth and its ratio to a 1 GiB device copy measured first, and the largest difference from
the first kernel's output (bf16 rounding only).

    GPU_STEPS=build CUDA_ARCHS=90-real bash scripts/gpu_check.sh
    FLASHC_LIBRARY=build-gpu/src/libflashc.so PYTHONPATH=python python3 bench/experiments/head_pairs_ab.py
"""
import os
import sys

import torch

import flashc

MODES = ("", "pairs", "tma") * 2
if "--portable" in sys.argv:
    MODES = ("", "pairs", "tma", "portable") * 2


def timed(fn, n=40, reps=5):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(n):
            fn()
        b.record()
        torch.cuda.synchronize()
        runs.append(a.elapsed_time(b) * 1000 / n)
    runs.sort()
    return runs[len(runs) // 2]


def copy_gbs():
    x = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    return 2 * 2**30 / timed(lambda: y.copy_(x)) / 1e3


def case(tag, h, hk, d, batch, cache, gbs_copy, append=False, rotary=False, block=0):
    dev, bf = "cuda", torch.bfloat16
    q = torch.randn(batch, 1, h, d, device=dev, dtype=bf)
    table = None
    if block:
        blocks = batch * cache // block
        k = torch.randn(blocks, block, hk, d, device=dev, dtype=bf)
        table = torch.randperm(blocks, device=dev, dtype=torch.int32).view(batch, -1)
    else:
        k = torch.randn(batch, cache, hk, d, device=dev, dtype=bf)
    v = torch.randn_like(k)
    lens = torch.full((batch,), cache - 1 if append else cache, dtype=torch.int32, device=dev)
    kw = dict(cache_seqlens=lens, block_table=table)
    if append:  # one new token per sequence, written at cache - 1: the same keys are attended
        kw["k"] = torch.randn(batch, 1, hk, d, device=dev, dtype=bf)
        kw["v"] = torch.randn_like(kw["k"])
    if rotary:
        angle = torch.rand(cache, d // 2, device=dev)
        kw["rotary_cos"], kw["rotary_sin"] = angle.cos().to(bf), angle.sin().to(bf)
    first = None
    for mode in MODES:
        if mode:
            os.environ["FLASHC_CUDA_KVCACHE"] = mode
        else:
            os.environ.pop("FLASHC_CUDA_KVCACHE", None)
        out = flashc.flash_attn_with_kvcache(q, k, v, **kw)
        first = out if first is None else first
        diff = (out.float() - first.float()).abs().max().item()
        us = timed(lambda: flashc.flash_attn_with_kvcache(q, k, v, **kw))
        gbs = 2 * batch * cache * hk * d * 2 / us / 1e3
        print(f"{tag}\t{mode or 'default'}\t{us:.1f} us\t{gbs:.0f} GB/s\t{gbs / gbs_copy:.3f} of copy\t"
              f"diff {diff:.1e}", flush=True)
    os.environ.pop("FLASHC_CUDA_KVCACHE", None)


def main():
    gbs_copy = copy_gbs()
    print(f"# {torch.cuda.get_device_name()}; copy {gbs_copy:.0f} GB/s")
    for batch, cache in ((16, 8192), (32, 4096), (64, 2048), (128, 1024), (256, 512)):
        case(f"d96 MHA 32/32 {batch}x{cache}", 32, 32, 96, batch, cache, gbs_copy)
    case("d96 MHA 32/32 32x4096 paged 16", 32, 32, 96, 32, 4096, gbs_copy, block=16)
    case("d96 MHA 32/32 16x8192 +append+rotary", 32, 32, 96, 16, 8192, gbs_copy, append=True, rotary=True)
    for batch, cache in ((64, 4096), (128, 2048), (256, 1024), (1, 32768), (4, 16384)):
        case(f"d96 GQA 32/8 {batch}x{cache}", 32, 8, 96, batch, cache, gbs_copy)
    case("d32 MHA 32/32 16x8192", 32, 32, 32, 16, 8192, gbs_copy)
    case("d32 MHA 32/32 128x1024", 32, 32, 32, 128, 1024, gbs_copy)


if __name__ == "__main__":
    main()
