/* Tiles of the KV-cache attention kernel (kvcache_kernel.cuh), one per
 * compiled head dim and warp layout. A head dim d (and value head dim dv)
 * runs in the smallest HEAD_DIM >= max(d, dv); columns past d / dv are
 * zero-filled on load and never stored.
 *
 * Four warps, each owning 16 tile rows and BLOCK_N / WARPS_N keys of every
 * key block: WARPS_M = 4 / WARPS_N warps stack along the rows. WARPS_N 8
 * is the Hopper kernel's wide decode tile only (hopper_kvcache.h): eight
 * warps of 16 keys over 128-key blocks, one CTA per SM; the portable
 * kernel never takes it. Decode has
 * few rows (the query heads of one GQA group times sq), so its warps split
 * the keys instead (WARPS_N 4: a 16-row tile, each warp 16 keys of 64) and
 * are merged once at the end; prefill over a cache stacks them (WARPS_N 1:
 * 64 rows). STAGES key blocks (K and V) are in flight at once (cp.async):
 * the kernel is bound by the bandwidth of reading the cache, and two CTAs
 * per SM (H100 / H200, head dims up to 128) keep STAGES - 1 blocks each
 * loading while one is computed.
 *
 * Shared memory: Q (BLOCK_M rows), STAGES x (K, V) blocks, rows padded by
 * 16 bytes as in the forward (ldmatrix without bank conflicts), two rings
 * of per-row cache offsets; the epilogue reuses the K / V stages. Parts
 * with 99 KiB per CTA (sm_86 / sm_89) cannot hold the 128 and 256
 * configurations; the SMALL ones below (fewer stages, shorter key blocks)
 * run there, chosen at run time from the device's limit. */
#ifndef FLASHC_CUDA_KVCACHE_CONFIG_H
#define FLASHC_CUDA_KVCACHE_CONFIG_H

#include "fwd_config.h"

#define FLASHC_KVC_THREADS 128

#define FLASHC_KVC_CONFIGS(X)                    \
    /* HEAD_DIM WARPS_N BLOCK_N STAGES SMALL */ \
    X(64, 4, 64, 4, 0)                           \
    X(64, 2, 64, 4, 0)                           \
    X(64, 1, 64, 4, 0)                           \
    X(128, 8, 128, 3, 0) /* Hopper wide only */  \
    X(128, 4, 64, 3, 0)                          \
    X(128, 2, 64, 3, 0)                          \
    X(128, 1, 64, 3, 0)                          \
    X(256, 4, 64, 2, 0)                          \
    X(256, 2, 32, 3, 0)                          \
    X(256, 1, 32, 3, 0)                          \
    /* SMALL: for 99 KiB per CTA (sm_86 / sm_89), \
       where the ones above do not fit */        \
    X(128, 4, 64, 2, 1)                          \
    X(128, 2, 64, 2, 1)                          \
    X(128, 1, 64, 2, 1)                          \
    X(256, 2, 32, 2, 1)                          \
    X(256, 1, 16, 3, 1)

/* The compiled head dims, smallest first. */
#define FLASHC_KVC_HEAD_DIMS(X) X(64) X(128) X(256)

template <int HEAD_DIM, int WARPS_N, bool SMALL = false>
struct flashc_kvc_config {
    static constexpr bool COMPILED = false;
};
#define FLASHC_KVC_CONFIG_STRUCT_OF(D, KEY, WM, WN, BN, S, SM)                                       \
    template <>                                                                                      \
    struct flashc_kvc_config<D, KEY, SM> {                                                           \
        static constexpr bool COMPILED = true;                                                       \
        static constexpr int WARPS_N = WN, WARPS_M = WM, BLOCK_M = 16 * WARPS_M;                    \
        static constexpr int THREADS = 32 * WARPS_M * WN;                                            \
        static constexpr int BLOCK_N = BN, STAGES = S, KEYS_PER_WARP = BN / WN;                      \
        static constexpr int SD = FLASHC_SMEM_ROW(D);   /* K / V / Q smem row, elements */           \
        static constexpr int LDO = D + 8;               /* epilogue float rows (bank spread) */      \
        static constexpr int Q_BYTES = BLOCK_M * SD * 2;                                             \
        static constexpr int OFFSET_BYTES = 2 * 2 * BN * 8; /* [ring][k, v][row] int64 */            \
        static constexpr int STAGE_BYTES = 2 * BN * SD * 2;                                          \
        static constexpr int EPILOGUE_BYTES = WN * BLOCK_M * (LDO + 2) * 4;                          \
        static constexpr int LOOP_BYTES = S * STAGE_BYTES;                                           \
        static constexpr int SMEM_BYTES =                                                            \
            Q_BYTES + OFFSET_BYTES + (LOOP_BYTES > EPILOGUE_BYTES ? LOOP_BYTES : EPILOGUE_BYTES);    \
        static_assert(KEYS_PER_WARP % 16 == 0, "P V steps over whole 16-key atoms");                \
        static_assert(BN <= THREADS, "one thread per key row computes its offsets");                 \
        static_assert(S >= 2, "a stage computed while the next loads");                              \
    };
#define FLASHC_KVC_CONFIG_STRUCT(D, WN, BN, S, SM) FLASHC_KVC_CONFIG_STRUCT_OF(D, WN, (WN >= 4 ? 1 : 4 / WN), WN, BN, S, SM)
FLASHC_KVC_CONFIGS(FLASHC_KVC_CONFIG_STRUCT)
/* The Hopper tall tile (hopper_kvcache.h): 32 rows as two row warps x four
 * key warps over 64-key steps, eight warps, one CTA per SM; keyed apart
 * from the four-warp tiles, which the portable kernel shares (24 is a
 * key, not a warp count). */
#define FLASHC_KVC_TALL 24
FLASHC_KVC_CONFIG_STRUCT_OF(128, FLASHC_KVC_TALL, 2, 4, 64, 4, 0)
#define FLASHC_KVC_TALL_LONG 25 /* the same over 128-key steps, three stages */
FLASHC_KVC_CONFIG_STRUCT_OF(128, FLASHC_KVC_TALL_LONG, 2, 4, 128, 3, 0)
#undef FLASHC_KVC_CONFIG_STRUCT
#undef FLASHC_KVC_CONFIG_STRUCT_OF

/* Shared memory of configuration (head_dim, warps_n, small), 0 if it is
 * not compiled. */
static inline int flashc_kvc_config_smem(int head_dim, int warps_n, int small) {
#define FLASHC_KVC_SMEM_OF(D, WN, BN, S, SM) \
    if (head_dim == D && warps_n == WN && small == SM) return flashc_kvc_config<D, WN, SM>::SMEM_BYTES;
    FLASHC_KVC_CONFIGS(FLASHC_KVC_SMEM_OF)
#undef FLASHC_KVC_SMEM_OF
    return 0;
}

/* The warp layout for `rows` tile rows per (sequence, KV head): the
 * query heads of the group times the query rows. */
static inline int flashc_kvc_warps_n(long long rows) { return rows <= 16 ? 4 : rows <= 32 ? 2 : 1; }

/* The configuration of compiled head dim head_dim for `rows` tile rows on
 * a device whose CTAs may have optin bytes of shared memory: the rows'
 * warp layout, or where it does not fit the SMALL one (fewer stages or
 * keys; at 256 columns no 4-warp key split, whose 64-key blocks need two
 * 64 KiB stages). warps_n 0: nothing fits. */
typedef struct flashc_kvc_layout {
    int warps_n, small;
} flashc_kvc_layout;

static inline flashc_kvc_layout flashc_kvc_layout_of(int head_dim, long long rows, int optin) {
    flashc_kvc_layout l = {flashc_kvc_warps_n(rows), 0};
    if (flashc_kvc_config_smem(head_dim, l.warps_n, 0) <= optin) return l;
    l.small = 1;
    if (!flashc_kvc_config_smem(head_dim, l.warps_n, 1)) l.warps_n = 2;
    const int smem = flashc_kvc_config_smem(head_dim, l.warps_n, 1);
    if (smem == 0 || smem > optin) l.warps_n = 0;
    return l;
}

#endif
