"""Decode over a KV cache on the shapes of models, beside the peers that take
each shape: flashc's flash_attn_with_kvcache against FlashAttention-4
(flash_attn.cute, where importable: ../shared/peers/fa4.sh) and PyTorch
SDPA's cuDNN and flash backends.

bench/kvcache_peers.py is the issue's square grid (hdim 128, 32 / 8 and
32 / 32 heads, one query token). These rows are what serving runs beyond
it: GQA groups of 7 and 8, MQA, head dims 96 and 256, softcap with a
window, a sliding window over a longer cache, and several query tokens
per sequence (speculative decoding, causal from the cache's end). SDPA
runs only the rows it can express exactly (no softcap, no window; one
query token, or several with its lower-right causal bias); FA4 those its
SM90 kernels take. A peer that does not take a row prints why and leaves
its column empty.

Timing as in kvcache_peers.py (its helpers): each call captured in a CUDA
graph of 20, replayed in three rounds with the libraries in turn; the
best round's median of 7 replays / 20. GB/s = the K + V bytes the call
must read (the keys some query sees: the window's, where there is one) /
time; the copy ceiling is measured in the same run.

    FLASHC_LIBRARY=build-gpu/src/libflashc.so PYTHONPATH=python \\
        python3 bench/kvcache_models_peers.py [--out results.tsv]
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kvcache_peers import make_graph, start_table, time_graphs, timing_columns, write_table  # noqa: E402

import flashc  # noqa: E402

# name, q heads, KV heads, head dim, query tokens, batch, cache, softcap, window (left keys; -1 none)
SHAPES = [
    ("Llama-3-70B-like GQA 8", 64, 8, 128, 1, 32, 8192, 0.0, -1),
    ("Qwen2-7B-like GQA 7", 28, 4, 128, 1, 64, 8192, 0.0, -1),
    ("MQA 32/1", 32, 1, 128, 1, 128, 8192, 0.0, -1),
    ("Phi-3-like MHA d96", 32, 32, 96, 1, 16, 8192, 0.0, -1),
    ("Gemma-2-like d256 softcap 50 window 4096", 16, 8, 256, 1, 32, 8192, 50.0, 4095),
    ("Gemma-2-like d256 plain", 16, 8, 256, 1, 32, 8192, 0.0, -1),
    ("Mistral-like window 4096 over 16k", 32, 8, 128, 1, 16, 16384, 0.0, 4095),
    ("speculative 4 tokens, GQA 4", 32, 8, 128, 4, 32, 8192, 0.0, -1),
    ("speculative 4 tokens, GQA 8", 64, 8, 128, 4, 32, 8192, 0.0, -1),
    ("long context 1 x 128k, GQA 8", 64, 8, 128, 1, 1, 131072, 0.0, -1),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="TSV file for the rows")
    parser.add_argument("--only", help="rows whose name contains one of these comma-separated words")
    parser.add_argument("--num-splits", type=int, default=0, help="flashc's num_splits (0: its own choice)")
    parser.add_argument("--no-peers", action="store_true", help="time flashc alone (A/B runs of builds)")
    args = parser.parse_args()
    copy, fa4, rows = start_table("shape\theads\td\tsq\tbatch\tcache", "\tmax_diff")
    for name, h, hk, d, sq, batch, cache, softcap, window in SHAPES:
        if args.only and not any(word in name for word in args.only.split(",")):
            continue
        q = torch.randn(batch, sq, h, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(batch, cache, hk, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        lens = torch.full((batch,), cache, dtype=torch.int32, device="cuda")
        causal = sq > 1
        fa4_window = (window if window >= 0 else None, 0 if window >= 0 else None)

        def call_flashc():
            return flashc.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens, causal=causal,
                                                  window_size=(window, 0 if window >= 0 else -1), softcap=softcap,
                                                  num_splits=args.num_splits)

        def call_fa4():
            out = fa4(q, k, v, causal=causal, softcap=softcap, window_size=fa4_window)
            return out[0] if isinstance(out, tuple) else out

        def call_sdpa():  # (batch, heads, rows, d) in, out as q
            return F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, enable_gqa=hk != h).transpose(1, 2)

        graphs = {"flashc": make_graph(call_flashc)}
        backends = []  # the SDPA backends tried on this row
        if softcap == 0.0 and window < 0 and not args.no_peers:
            qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            mask = None
            if causal:
                from torch.nn.attention.bias import causal_lower_right
                mask = causal_lower_right(sq, cache)
            # lower-right causal: SDPA's flash backend takes it natively; under
            # the cuDNN backend alone it would fall back to a materialised mask
            backends = [("flash", SDPBackend.FLASH_ATTENTION)]
            if not causal:
                backends.insert(0, ("cudnn", SDPBackend.CUDNN_ATTENTION))
            for peer, backend in backends:
                try:
                    with sdpa_kernel(backend):
                        graphs[peer] = make_graph(call_sdpa)
                except RuntimeError as e:
                    print(f"# {peer} {name}: {e}".splitlines()[0][:160])
        if fa4 and not args.no_peers:
            try:
                graphs["fa4"] = make_graph(call_fa4)
            except Exception as e:  # a shape FA4 does not take
                print(f"# fa4 {name}: {type(e).__name__}: {e}".splitlines()[0][:160])
        # the rows compare the same attention: flashc's output against a peer's
        out = call_flashc()
        ref = None
        if "fa4" in graphs:
            ref = call_fa4()
        else:
            for peer, backend in backends:
                if peer in graphs:  # an SDPA backend that took the row
                    with sdpa_kernel(backend):
                        ref = call_sdpa()
                    break
        diff = (out.float() - ref.float()).abs().max().item() if ref is not None else float("nan")
        t = time_graphs(graphs)
        keys = cache if window < 0 else min(cache, window + sq)
        kv_bytes = 2 * batch * keys * hk * d * k.element_size()
        row = (f"{name}\t{h}/{hk}\t{d}\t{sq}\t{batch}\t{cache}\t" + timing_columns(t, kv_bytes, copy) +
               f"\t{diff:.1e}")
        rows.append(row)
        print(row, flush=True)
        del graphs, q, k, v
        torch.cuda.empty_cache()
    write_table(args.out, rows)


if __name__ == "__main__":
    main()
