"""Probes of the KV-cache decode on one GPU, flashc alone, µs per call (median of five runs of 40 calls; the timer and
the copy bandwidth are head_pairs_ab.py's):

    paged   paged blocks of 16 (random and in-order tables), 64 and 256 against the contiguous cache, d96 and d128,
            MHA and GQA 4: whether paged 16 at d96 (0.83 of copy) loses to the DRAM or to the kernel;
    append  plain / +append (one new token) / +append+rotary, the append fused into the Hopper kernel against the
            append kernel before it (FLASHC_CUDA_KVCACHE_APPEND), two rounds;
    wave    rows of one CTA per (sequence, KV head), unsplit, at 120-132 CTAs: the same time at 132 CTAs as at 128
            means each CTA's stream is the bound (spreading the work over every SM would pay), time in proportion
            to the bytes means the DRAM is.

(bench/kvcache_ncu.py puts the decode rows under Nsight Compute.)

    GPU_STEPS=build CUDA_ARCHS=90-real bash scripts/gpu_check.sh
    FLASHC_LIBRARY=build-gpu/src/libflashc.so PYTHONPATH=python python3 bench/experiments/kvcache_probe.py append
"""
import os
import sys

import torch

import flashc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from head_pairs_ab import copy_gbs, timed  # noqa: E402

BF16 = torch.bfloat16


def make(h, hk, d, batch, cache, block=0, in_order=False):
    """q, k, v and the call's keywords: every cache full; paged blocks in random order unless in_order."""
    q = torch.randn(batch, 1, h, d, device="cuda", dtype=BF16)
    table = None
    if block:
        blocks = batch * cache // block
        k = torch.randn(blocks, block, hk, d, device="cuda", dtype=BF16)
        order = torch.arange(blocks, device="cuda") if in_order else torch.randperm(blocks, device="cuda")
        table = order.to(torch.int32).view(batch, -1)
    else:
        k = torch.randn(batch, cache, hk, d, device="cuda", dtype=BF16)
    v = torch.randn_like(k)
    lens = torch.full((batch,), cache, dtype=torch.int32, device="cuda")
    return q, k, v, dict(cache_seqlens=lens, block_table=table)


def kv_gbs(batch, cache, hk, d, us):
    return 2 * batch * cache * hk * d * 2 / us / 1e3


def paged():
    copy = copy_gbs()
    print(f"# {torch.cuda.get_device_name()}; copy {copy:.0f} GB/s")
    for d, hk, batch, cache in ((96, 32, 32, 4096), (128, 32, 32, 4096), (96, 8, 64, 4096), (128, 8, 64, 4096)):
        for block, in_order in ((0, False), (16, False), (16, True), (64, False), (256, False)):
            q, k, v, kw = make(32, hk, d, batch, cache, block, in_order)
            us = timed(lambda: flashc.flash_attn_with_kvcache(q, k, v, **kw))
            layout = f"paged {block}{' in order' if in_order else ''}" if block else "contiguous"
            print(f"d{d} 32/{hk} {batch}x{cache} {layout}\t{us:.1f} us\t"
                  f"{kv_gbs(batch, cache, hk, d, us) / copy:.3f} of copy", flush=True)
            del q, k, v, kw
            torch.cuda.empty_cache()


def append():
    for d, hk, batch, cache, block in ((96, 32, 16, 8192, 0), (96, 32, 16, 8192, 64), (32, 32, 16, 8192, 0),
                                       (128, 8, 32, 8192, 0)):
        q, k, v, plain = make(32, hk, d, batch, cache, block)
        k_new = torch.randn(batch, 1, hk, d, device="cuda", dtype=BF16)
        angle = torch.rand(cache, d // 2, device="cuda")
        lens = torch.full((batch,), cache - 1, dtype=torch.int32, device="cuda")  # the same keys are attended
        appended = dict(plain, cache_seqlens=lens, k=k_new, v=torch.randn_like(k_new))
        rotated = dict(appended, rotary_cos=angle.cos().to(BF16), rotary_sin=angle.sin().to(BF16))
        runs = {}
        for _ in range(2):
            for mode in ("fused", "kernel"):
                os.environ["FLASHC_CUDA_KVCACHE_APPEND"] = mode
                for tag, kw in (("plain", plain), ("append", appended), ("rotary", rotated)):
                    us = timed(lambda: flashc.flash_attn_with_kvcache(q, k, v, **kw))
                    runs.setdefault((mode, tag), []).append(us)
        os.environ.pop("FLASHC_CUDA_KVCACHE_APPEND", None)
        mean = {key: sum(x) / len(x) for key, x in runs.items()}
        for mode in ("fused", "kernel"):
            base = mean[(mode, "plain")]
            print(f"d{d} 32/{hk} {batch}x{cache} {'paged ' + str(block) if block else 'contiguous'} {mode}: "
                  f"plain {base:.1f} us, +append {mean[(mode, 'append')] - base:+.2f}, "
                  f"+append+rotary {mean[(mode, 'rotary')] - base:+.2f} (rounds {runs[(mode, 'rotary')]})", flush=True)
        del q, k, v, plain, appended, rotated
        torch.cuda.empty_cache()


def wave():
    for h, hk, cache, batches in ((32, 1, 8192, (120, 128, 132)), (32, 4, 16384, (30, 32, 33)), (32, 8, 16384, (15, 16))):
        for batch in batches:
            q, k, v, kw = make(h, hk, 128, batch, cache)
            us = timed(lambda: flashc.flash_attn_with_kvcache(q, k, v, **kw))
            print(f"{h}/{hk} {batch}x{cache} ({batch * hk} CTAs unsplit)\t{us:.1f} us\t"
                  f"{kv_gbs(batch, cache, hk, 128, us):.0f} GB/s\t{us / (batch * hk):.3f} us per CTA", flush=True)
            del q, k, v, kw
            torch.cuda.empty_cache()


if __name__ == "__main__":
    probes = {"paged": paged, "append": append, "wave": wave}
    if len(sys.argv) != 2 or sys.argv[1] not in probes:
        sys.exit(f"usage: {sys.argv[0]} {{{'|'.join(probes)}}}")
    probes[sys.argv[1]]()
