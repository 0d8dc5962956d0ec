/* Host side of the Hopper KV-cache kernel (hopper_kvcache.h): whether it
 * applies, its tensor maps, the head dim of the launch. */
#include <stdlib.h>
#include <string.h>

#include "hopper_host.h"
#include "hopper_kvcache.h"
#include "kvcache_config.h"

static bool forced(const char *kernel) {
    const char *path = getenv("FLASHC_CUDA_KVCACHE");
    return path && strcmp(path, kernel) == 0;
}
static bool forced_portable(void) { return forced("portable"); }

static bool pairs_view(const flashc_kvc_params *p, flashc_kvc_params *view);

/* Head dims that are not a multiple of 64 leave each row's last box partly
 * out of bounds (96: columns 96-127 zero-filled). Over long streams of
 * such caches the TMA kernel read at 0.85-0.90 of the copy bandwidth
 * where the portable kernel's cp.async reached 0.94 (MHA d96,
 * bench/NOTES.md "model decode shapes"); where head pairs could take the
 * problem (hopper_kvcache.h), they take the long streams, and the short
 * ones read faster through the unpaired boxes than through cp.async (MHA
 * 128 x 1024: 526 against 556 us). Other such problems run the portable
 * kernel, unless FLASHC_CUDA_KVCACHE=tma (tests, A/B runs). */
static bool whole_boxes(const flashc_kvc_params *p) {
    flashc_kvc_params view;
    return (p->head_dim % 64 == 0 && p->head_dim_v % 64 == 0) || forced("tma") || pairs_view(p, &view);
}

/* Boxes of whole paged blocks (16 or 32 rows), or of 64 rows within a
 * contiguous cache or blocks of 64k rows; 0 where a 64-key step would
 * straddle blocks unevenly. */
static int box_rows_of(const flashc_kvc_params *p) {
    if (!p->block_table) return 64;
    if (p->cache_leftpad) return 0; /* steps start at leftpad, not at a block boundary */
    if (p->block_size == 16 || p->block_size == 32) return p->block_size;
    return p->block_size % 64 == 0 ? 64 : 0;
}

static int max_head_dim(const flashc_kvc_params *p) { return p->head_dim > p->head_dim_v ? p->head_dim : p->head_dim_v; }

/* The 128 kernel (head dims 65-128) is the only one with the wide and tall
 * tiles. */
static bool hdim128_kernel(const flashc_kvc_params *p) { return max_head_dim(p) > 64 && max_head_dim(p) <= 128; }

/* Warps along the keys of the problem's decode tile: 4 for at most 16 rows
 * per KV head, 2 for 17-32, 1 beyond (kvcache_config.h). */
static int tile_warps_n(const flashc_kvc_params *p) { return flashc_kvc_warps_n((long long)p->seqlen_q * p->group); }

/* Head dims above 128 run the 256 kernel, which has 64-key steps only in
 * the decode tile (at most 16 rows per KV head; kvcache_config.h's other
 * 256 tiles step 32 keys), and only where each of K's and V's four boxes
 * per row holds some of the row (193-256: d 192 / dv 128 run the portable
 * kernel rather than load boxes wholly out of bounds). */
static bool tma_head_dim(const flashc_kvc_params *p) {
    if (max_head_dim(p) <= 128) return true;
    if (p->pair_dim) return tile_warps_n(p) == 4; /* 192: the fourth box wholly out of bounds, zeros */
    return p->head_dim > 192 && p->head_dim_v > 192 && p->head_dim <= 256 && p->head_dim_v <= 256 &&
           tile_warps_n(p) == 4;
}

/* The problem's shape and layout suit the TMA kernel (whatever the device). */
static bool tma_takes(const flashc_kvc_params *p) {
    return !forced_portable() && tma_head_dim(p) && box_rows_of(p) != 0 && whole_boxes(p);
}

/* The head-pair view of a problem (kvcache_params.h's pair_dim), where its
 * shape and strides allow one: d = dv is not a multiple of 64 but 2d is
 * (32, 96), an even number of KV heads, each head's row right after the
 * previous one's in K and V; and the view takes the TMA kernel. Not under
 * FLASHC_CUDA_KVCACHE=tma, which tests and A/B runs use to reach the
 * unpaired kernel (=pairs: wherever the shape allows). */
static bool pairs_view(const flashc_kvc_params *p, flashc_kvc_params *view) {
    const int d = p->head_dim;
    if (p->pair_dim || forced("tma") || d != p->head_dim_v || d % 64 == 0 || (2 * d) % 64 != 0 || 2 * d > 256 ||
        p->nheads_k % 2 != 0 || p->k_head_stride != d || p->v_head_stride != d)
        return false;
    *view = *p;
    view->pair_dim = d;
    view->head_dim = view->head_dim_v = 2 * d;
    view->nheads_k = p->nheads_k / 2;
    view->group = 2 * p->group;
    view->k_head_stride = view->v_head_stride = 2 * d;
    return tma_takes(view);
}

int flashc_hopper_kvc_pairs(const flashc_kvc_params *p, int device, flashc_kvc_params *view) {
    return pairs_view(p, view) && flashc_hopper_device(device);
}

int flashc_hopper_kvc_pairs_take(const flashc_kvc_params *view, long long keys_per_cta) {
    if (forced("pairs") || max_head_dim(view) <= 128) return 1;
    return keys_per_cta >= FLASHC_HOPPER_KVC_PAIRS_MIN_KEYS && box_rows_of(view) == 64;
}

cudaError_t flashc_hopper_kvc_attention(const flashc_kvc_params *p, void *stream, int is_bf16) {
    flashc_kvc_params view;
    if (p->head_pairs && pairs_view(p, &view)) { /* the plan's choice (=pairs forces it there) */
        /* the fused append writes and rotates one head's rows: behind the
         * append kernel instead (kvcache_backend.cu falls back to it) */
        if (p->fused_append) return cudaErrorNotSupported;
        p = &view;
    }
    const int d = max_head_dim(p);
    const int box_rows = box_rows_of(p);
    if (!tma_takes(p) || !flashc_hopper_current_device()) return cudaErrorNotSupported;
    const int64_t rows = p->block_table ? p->block_size : p->capacity;
    const int64_t batches = p->block_table ? p->num_blocks : p->cache_batch;
    if (rows < 1 || batches < 1 || rows > INT32_MAX || batches > INT32_MAX) return cudaErrorNotSupported;
    flashc_hopper_kvc_maps m;
    if (!flashc_hopper_make_map(&m.k, p->k, is_bf16, p->head_dim, rows, p->nheads_k, (int)batches, p->k_row_stride,
                                p->k_head_stride, p->k_batch_stride, box_rows) ||
        !flashc_hopper_make_map(&m.v, p->v, is_bf16, p->head_dim_v, rows, p->nheads_k, (int)batches,
                                p->v_row_stride, p->v_head_stride, p->v_batch_stride, box_rows))
        return cudaErrorNotSupported;
    int warps_n = tile_warps_n(p);
    if (p->wide && warps_n == 4) warps_n = FLASHC_HOPPER_KVC_WIDE_WARPS;
    if (p->tall && warps_n == 2) warps_n = p->tall;
#define FLASHC_HOPPER_KVC_TRY(HEAD_DIM) \
    if (d <= HEAD_DIM) return flashc_hopper_kvc_run_hdim##HEAD_DIM(p, &m, stream, is_bf16, warps_n);
    FLASHC_HOPPER_KVC_HEAD_DIMS(FLASHC_HOPPER_KVC_TRY)
#undef FLASHC_HOPPER_KVC_TRY
    return cudaErrorNotSupported;
}

/* The TMA kernel takes the problem with a tile of at least min_warps_n
 * warps along the keys (4: at most 16 rows per KV head; 2: at most 32). */
static int tma_tile_applies(const flashc_kvc_params *p, int device, int min_warps_n) {
    return tma_takes(p) && tile_warps_n(p) >= min_warps_n && flashc_hopper_device(device);
}

int flashc_hopper_kvc_decode_applies(const flashc_kvc_params *p, int device) { return tma_tile_applies(p, device, 4); }

int flashc_hopper_kvc_alone_applies(const flashc_kvc_params *p, int device) {
    return box_rows_of(p) == 64 && tma_tile_applies(p, device, 2);
}

int flashc_hopper_kvc_wide_applies(const flashc_kvc_params *p, int device, long long keys_per_cta) {
    /* whole 64-column boxes only (d96 runs as head pairs over long streams) */
    if (!hdim128_kernel(p) || p->head_dim % 64 != 0 || p->head_dim_v % 64 != 0 || box_rows_of(p) != 64 ||
        !flashc_hopper_kvc_decode_applies(p, device))
        return 0;
    return forced("wide") || keys_per_cta >= FLASHC_HOPPER_KVC_WIDE_MIN_KEYS;
}

int flashc_hopper_kvc_wide_takes(const flashc_kvc_params *p, int device, long long keys, int splits) {
    return (splits == 1 || forced("wide")) && flashc_hopper_kvc_wide_applies(p, device, (keys + splits - 1) / splits);
}

int flashc_hopper_kvc_tall_takes(const flashc_kvc_params *p, int device, int alone, long long keys, int splits) {
    if (!(alone || forced("tall") || forced("tall128")) || !hdim128_kernel(p) || tile_warps_n(p) != 2 ||
        !tma_tile_applies(p, device, 2))
        return 0;
    const long long keys_per_cta = (keys + splits - 1) / splits;
    const bool long_steps =
        forced("tall128") || (!forced("tall") && keys_per_cta >= FLASHC_HOPPER_KVC_TALL_LONG_MIN_KEYS);
    return long_steps ? FLASHC_KVC_TALL_LONG : FLASHC_KVC_TALL;
}

int flashc_hopper_kvc_wide_block_n(void) { return flashc_kvc_config<128, FLASHC_HOPPER_KVC_WIDE_WARPS>::BLOCK_N; }
