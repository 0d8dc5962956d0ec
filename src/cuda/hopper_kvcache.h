/* The Hopper (TMA) KV-cache attention kernel's host side, tried by
 * kvcache_dispatch.cu before the portable kernel. */
#ifndef FLASHC_CUDA_HOPPER_KVCACHE_H
#define FLASHC_CUDA_HOPPER_KVCACHE_H

#include <cuda.h>
#include <cuda_runtime.h>

#include "kvcache_params.h"

/* The K and V tensor maps: (column, cache row, KV head, cache batch or
 * paged block), boxes of 64 columns x box_rows. */
typedef struct flashc_hopper_kvc_maps {
    CUtensorMap k, v;
} flashc_hopper_kvc_maps;

#define FLASHC_HOPPER_KVC_HEAD_DIMS(X) X(64) X(128) X(256)

#define FLASHC_HOPPER_KVC_DECLARE_RUN(HEAD_DIM)                                                             \
    cudaError_t flashc_hopper_kvc_run_hdim##HEAD_DIM(const flashc_kvc_params *p, const flashc_hopper_kvc_maps *m, \
                                                     void *stream, int is_bf16, int warps_n);
FLASHC_HOPPER_KVC_HEAD_DIMS(FLASHC_HOPPER_KVC_DECLARE_RUN)
#undef FLASHC_HOPPER_KVC_DECLARE_RUN

/* Launch the attention over the cache with the TMA kernel, or return
 * cudaErrorNotSupported (nothing launched) where it does not apply: not a
 * compute capability 9.0 device, head dims not a multiple of 64 (but
 * see head pairs below; FLASHC_CUDA_KVCACHE=tma takes them unpaired), head dims above 128 unless
 * both are 193-256 in a tile of at most 16 rows per KV head (at 256 the
 * other tiles step 32 keys, and d 192 / dv 128 would load boxes wholly
 * out of bounds; the TMA kernel at 256 read Gemma-like decode 12 % faster
 * than the portable one on the H200), paged blocks of a
 * size other than 16, 32 or a multiple of 64, paged blocks with
 * cache_leftpad, strides TMA cannot take, or the environment variable
 * FLASHC_CUDA_KVCACHE set to "portable" (which tests use to reach the
 * portable kernel on a Hopper GPU; "wide" sends every problem the wide
 * kernel can take to it). */
cudaError_t flashc_hopper_kvc_attention(const flashc_kvc_params *p, void *stream, int is_bf16);

/* Head pairs: at head dims 32 and 96 (d = dv) with an even number of KV
 * heads stored side by side, a row of two adjacent heads is one row of 2d
 * columns, a whole number of 64-column boxes and 128-byte lines. The call
 * runs as nheads_k / 2 such heads of 2d columns with twice the group
 * (kvcache_params.h's pair_dim): each tile row's Q fills its own head's
 * half (zeros in the other), so its scores are its own head's, and it
 * keeps its half of O. At 96 that is the 256 kernel's decode tile (at most
 * 16 rows per pair), whose fourth box lies wholly out of bounds. A row of
 * 192 bytes alone starts mid-line for every other head, and its boxes read
 * at 0.89 of the copy bandwidth, the portable kernel at 0.94; as pairs the
 * same bytes read at 1.03 (MHA 32 / 32, 16 x 8192 on the H100: 517 against
 * 563 us; bench/NOTES.md, "head pairs"). The pairs' view in *view, and 1,
 * where the shape allows them on `device`; else 0. */
int flashc_hopper_kvc_pairs(const flashc_kvc_params *p, int device, flashc_kvc_params *view);
/* Whether the split plan takes the pairs of `view` whose CTAs stream
 * keys_per_cta keys each (params.head_pairs). At 32 (pairs of 64 columns,
 * two CTAs per SM) always: 16 x 8192 206 against 222 us on the portable
 * kernel, 128 x 1024 181 against 209 unpaired. At 96 one pair CTA fills an
 * SM (the 256 kernel), which over short streams does not hide its
 * pipeline's fill and end, nor paged blocks' four boxes and table reads
 * per step (as in the one-CTA-per-SM plan above): only where each CTA
 * streams at least PAIRS_MIN_KEYS keys of whole 64-row boxes. MHA 32 / 32
 * on the H100: pairs 518 / 523 / 536 us at 16 x 8192 / 32 x 4096 / 64 x
 * 2048, the unpaired TMA kernel 603 / 576 / 553; at 128 x 1024 and 256 x
 * 512 pairs 555 / 577, unpaired 535 / 521; paged 16, 32 x 4096: pairs 677,
 * unpaired 642 (bench/NOTES.md, "head pairs"). Where pairs are not taken,
 * these shapes run the unpaired TMA kernel. FLASHC_CUDA_KVCACHE=pairs:
 * pairs wherever the shape allows. */
int flashc_hopper_kvc_pairs_take(const flashc_kvc_params *view, long long keys_per_cta);
#define FLASHC_HOPPER_KVC_PAIRS_MIN_KEYS 2048

/* The wide kernel: 8 warps splitting 128-key steps (16 keys each), three
 * 64 KiB stages, one CTA per SM, for decode tiles (at most 16 rows per KV
 * head) at head dims 65-128 over a contiguous cache or paged blocks of a
 * multiple of 64 rows. Unsplit, where each CTA streams at least MIN_KEYS
 * keys, it beats two 4-warp CTAs per SM by 1.4-4 % (32/8 heads, batch 256
 * x 16k keys: 3751 against 3903 us; batch 16 x 16k: 246.5 against 250.1,
 * where the 4-warp kernel splits in two); over shorter streams one CTA's
 * start and end are not hidden by a second (256 x 1024: +9 %), and paged
 * blocks of 16 (eight table reads and boxes per step) lose 5-14 %
 * (bench/NOTES.md, "the wide kernel"). */
#define FLASHC_HOPPER_KVC_WIDE_WARPS 8 /* its warps_n: kvcache_config.h's row (128, 8) */
#define FLASHC_HOPPER_KVC_WIDE_MIN_KEYS 16384

/* 1 where the wide kernel may run this problem on `device` with each CTA
 * over keys_per_cta keys (FLASHC_CUDA_KVCACHE=wide: whatever the count,
 * for tests), else 0. The TMA kernel may still turn the problem down
 * (tensor map strides): the portable kernel then runs it, unsplit. */
int flashc_hopper_kvc_wide_applies(const flashc_kvc_params *p, int device, long long keys_per_cta);
/* The same for a call of `splits` key splits over `keys` keys: the wide
 * kernel runs unsplit only, unless FLASHC_CUDA_KVCACHE=wide forces it. */
int flashc_hopper_kvc_wide_takes(const flashc_kvc_params *p, int device, long long keys, int splits);
/* Keys per step of the wide kernel. */
int flashc_hopper_kvc_wide_block_n(void);

/* 1 where the Hopper kernel's decode tile (at most 16 rows per KV head,
 * head dims up to 128 or 193-256, TMA boxes) may take this problem on
 * `device`; the wide kernel above applies only there, at 65-128. */
int flashc_hopper_kvc_decode_applies(const flashc_kvc_params *p, int device);

/* 1 where the Hopper kernel takes this problem with a tile of at most 32
 * rows per KV head, the tiles of the one-CTA-per-SM split plan below.
 *
 * The decode kernel one CTA per SM: where a split plan of at most one CTA
 * per SM gives each CTA at least ALONE_MIN_KEYS keys, it beats the plan
 * that fills two CTAs per SM (twice the splits) on the H100: 32 / 8 heads,
 * 1 x 128k at 16 splits 174.3 against 176.5 us, 4 x 32k at 4, 8 x 32k at 2
 * (bench/NOTES.md "cuDNN's decode grids, and the split count"); down to
 * 1024-key streams, 2-6 % (16 x 2048 unsplit 47.4 against 50.3 us, 1 x 16k
 * at 16 splits 27.6 against 28.4: "model decode shapes"). Half the
 * partials, and a CTA alone on its SM streams the SM's whole share.
 * Shorter streams were not measured and keep two CTAs per SM. It holds for
 * the 32-row tile too (MQA 32 / 1, 128 x 8k unsplit: 183.4 against 189.5
 * us at 2 splits). Only over whole 64-row boxes (a contiguous cache, paged
 * blocks of a multiple of 64): paged blocks of 16 take four boxes and four
 * table reads per step, which a lone CTA does not hide; under this plan
 * they ran 1.31-1.35x the contiguous time on the H200 (1 x 128k: 163.3
 * against 125.0 us; 16 x 16k: 329.7 against 243.4), under two CTAs per SM
 * 1.03-1.04x on the H100 (bench/NOTES.md, "paged 16 alone"). */
int flashc_hopper_kvc_alone_applies(const flashc_kvc_params *p, int device);
#define FLASHC_HOPPER_KVC_ALONE_MIN_KEYS 1024

/* The tall tile's key (kvcache_config.h) where it runs this problem, else
 * 0: 17-32 rows per KV head at head dims 65-128, under the one-CTA-per-SM
 * plan (alone = 1; or whatever the plan with FLASHC_CUDA_KVCACHE=tall or
 * =tall128, for tests), over `keys` keys in `splits` splits. Eight warps,
 * two along the rows and four along 64-key steps (kvcache_config.h's
 * FLASHC_KVC_TALL row), where the 2 x 2 tile has four: each warp does the
 * 16-row tile's work per key instead of twice it. MQA 32 / 1, 128 x 8k
 * unsplit: 179.3 against 183.4 us on the H100; 8 x 32k at 16 splits equal
 * (53.5 / 53.0).
 * Where two CTAs share an SM it lost 1-1.3 % (256 x 4k; GQA 8 with 4
 * speculative tokens), so it runs only alone (bench/NOTES.md, "the tall
 * tile"). Where each CTA streams at least TALL_LONG_MIN_KEYS keys it steps
 * 128 keys, three stages (FLASHC_KVC_TALL_LONG): half the barriers per key;
 * MQA 128 x 8k 178.1 against 180.0 us, but 8 x 32k at 16 splits of 2048
 * keys 54.3 against 53.7 (a longer pipeline to fill), H100. */
int flashc_hopper_kvc_tall_takes(const flashc_kvc_params *p, int device, int alone, long long keys, int splits);
#define FLASHC_HOPPER_KVC_TALL_LONG_MIN_KEYS 8192

#endif
