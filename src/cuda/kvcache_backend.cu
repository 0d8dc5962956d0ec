/* The CUDA backend's KV-cache entry points (declared in src/core/backend.h)
 * and the varlen forward over paged keys: the kernel parameters, the
 * number of key splits, the split partials' place in the workspace, and
 * the launches (append, attention, combine) on the caller's stream. Nothing
 * here reads device memory or synchronises, so a call can be captured in
 * a CUDA graph. */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

extern "C" {
#include "../core/backend.h"
#include "../core/error.h"
}
#include "backend_shared.h"
#include "fwd_launch.h"
#include "hopper_kvcache.h"
#include "kvcache_launch.h"

/* The attention part of the parameters, from a validated problem: the
 * strides, heads, the key layout and the score rule (the forward's). */
static flashc_kvc_params kvc_params(const flashc_problem *p) {
    const flashc_fwd_params f = flashc_cuda_fwd_params(p);
    flashc_kvc_params k;
    memset(&k, 0, sizeof k);
    k.q = p->q.data;
    k.k = p->k.data;
    k.v = p->v.data;
    k.out = p->out.data;
    k.lse = (float *)p->lse.data;
    k.q_batch_stride = f.q_batch_stride, k.q_row_stride = f.q_row_stride, k.q_head_stride = f.q_head_stride;
    k.k_batch_stride = f.k_batch_stride, k.k_row_stride = f.k_row_stride, k.k_head_stride = f.k_head_stride;
    k.v_batch_stride = f.v_batch_stride, k.v_row_stride = f.v_row_stride, k.v_head_stride = f.v_head_stride;
    k.o_batch_stride = f.o_batch_stride, k.o_row_stride = f.o_row_stride, k.o_head_stride = f.o_head_stride;
    k.lse_batch_stride = f.lse_batch_stride, k.lse_head_stride = f.lse_head_stride;
    k.lse_row_stride = f.lse_row_stride;
    k.batch = f.batch;
    k.nheads = f.nheads;
    k.nheads_k = f.nheads_k;
    k.group = f.nheads / f.nheads_k;
    k.head_dim = f.head_dim;
    k.head_dim_v = f.head_dim_v;
    k.seqlen_q = f.seqlen_q;

    const flashc_kv_layout *kv = &p->kv;
    k.cache_seqlens = kv->cache_seqlens;
    k.cache_leftpad = kv->cache_leftpad;
    k.cache_batch_idx = kv->cache_batch_idx;
    k.new_rows = (int)kv->new_rows;
    k.capacity = (int)kv->capacity;
    k.cache_batch = (int)kv->cache_batch;
    k.cu_seqlens_q = p->is_varlen ? p->cu_seqlens_q : NULL;
    k.cu_seqlens_k = p->is_varlen ? p->cu_seqlens_k : NULL;
    k.seqused_k = p->is_varlen ? p->seqused_k : NULL;
    k.total_q = p->total_q;
    k.block_table = kv->block_table;
    k.block_table_stride = kv->block_table_stride;
    k.block_size = (int)kv->block_size;
    k.num_blocks = (int)kv->num_blocks;

    k.scale_log2 = f.scale_log2;
    k.softcap_inv_scale = f.softcap_inv_scale;
    k.softcap_log2 = f.softcap_log2;
    k.alibi_slopes = f.alibi_slopes;
    k.alibi_batch_stride = f.alibi_batch_stride;
    k.alibi_head_stride = f.alibi_head_stride;
    k.window_left = f.window_left;
    k.window_right = f.window_right;
    k.num_splits = 1;
    return k;
}

/* Cache indices, block counts and the like are int32 in the kernels. */
static flashc_status check_kv_layout_supported(const flashc_problem *p) {
    const flashc_kv_layout *kv = &p->kv;
    if (kv->capacity + kv->new_rows > INT32_MAX || kv->num_blocks > INT32_MAX || kv->cache_batch > INT32_MAX)
        return flashc_fail(FLASHC_ERROR_SHAPE,
                           "k_cache: more than 2^31 - 1 cache indices, blocks or cache batches are not "
                           "supported on CUDA");
    return FLASHC_SUCCESS;
}

/* ---- key splits ------------------------------------------------------------ */

/* FlashAttention-2's rule, with a fuller last wave: no split when the
 * CTAs (batch x KV heads x row blocks) already fill 80 % of the CTA slots
 * (SMs x CTAs per SM), else the fewest splits whose waves are at least 95 %
 * as full as the best count's (FlashAttention-2: 85 %, which left slots
 * empty at batch 1; 99 % chose more waves of shorter CTAs, slower: see
 * bench/NOTES.md); counts that give the same key blocks per split as one
 * fewer are skipped. The key count is the capacity (the cache lengths are on the
 * device): splits past a short sequence's keys find nothing and cost a
 * few empty partials. */
static int kvc_split_heuristic(long long ctas, long long slots, long long key_blocks) {
    if (ctas >= 0.8 * (double)slots) return 1;
    long long max_splits = FLASHC_KVC_MAX_SPLITS;
    if (max_splits > slots) max_splits = slots;
    if (max_splits > key_blocks) max_splits = key_blocks;
    float efficiency[FLASHC_KVC_MAX_SPLITS + 1] = {0};
    float best = 0.0f;
    for (long long s = 1; s <= max_splits; ++s) {
        const bool distinct = s == 1 || (key_blocks + s - 1) / s != (key_blocks + s - 2) / (s - 1);
        if (!distinct) continue;
        const float waves = (float)(ctas * s) / (float)slots;
        efficiency[s] = waves / ceilf(waves);
        if (efficiency[s] > best) best = efficiency[s];
    }
    for (long long s = 1; s <= max_splits; ++s)
        if (efficiency[s] >= 0.95f * best) return (int)s;
    return 1;
}

/* Keys a sequence may have: the capacity, which holds the appended rows
 * too (a sequence with cache_seqlens + seqlen_new past it is invalid and
 * skipped). Counting the new rows on top added a key block whenever the
 * capacity was a multiple of the block: 33 splits instead of 32 on
 * 1 x 16384 paged 16 with one new token (bench/NOTES.md). */
static long long kvc_keys(const flashc_kvc_params *p) { return p->capacity; }

/* The heuristic's split count for the portable tile (which the Hopper
 * kernel shares), or on Hopper, for tiles of up to 32 rows, the count for
 * one CTA per SM where that plan gives each CTA enough keys
 * (hopper_kvcache.h; *alone_plan set to 1 then). */
static int kvc_num_splits(const flashc_kvc_params *p, int device, int *alone_plan) {
    const long long rows_per_head = (long long)p->seqlen_q * p->group;
    const int optin = flashc_cuda_device_smem_optin(device);
    const flashc_kvc_tile tile = flashc_kvc_tile_of(p->head_dim, p->head_dim_v, rows_per_head, optin);
    const int sms = flashc_cuda_device_sms(device);
    int smem_per_sm = 0;
    if (sms == 0 || tile.block_m == 0 ||
        cudaDeviceGetAttribute(&smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device) != cudaSuccess) {
        cudaGetLastError();
        return 1; /* the launch reports the device's error */
    }
    if (smem_per_sm > optin + 1024) smem_per_sm = optin + 1024; /* FLASHC_CUDA_SMEM_LIMIT: a smaller part */
    int ctas_per_sm = smem_per_sm / (tile.smem_bytes + 1024); /* 1 KiB reserved per CTA */
    ctas_per_sm = ctas_per_sm < 1 ? 1 : (ctas_per_sm > 2 ? 2 : ctas_per_sm); /* __launch_bounds__ */
    const long long m_blocks = (rows_per_head + tile.block_m - 1) / tile.block_m;
    const long long ctas = (long long)p->batch * p->nheads_k * m_blocks;
    const long long key_blocks = (kvc_keys(p) + tile.block_n - 1) / tile.block_n;
    if (ctas == 0 || key_blocks == 0) return 1;
    if (ctas_per_sm > 1 && flashc_hopper_kvc_alone_applies(p, device)) {
        const int alone = kvc_split_heuristic(ctas, sms, key_blocks);
        if (ctas * alone <= sms && (key_blocks / alone) * tile.block_n >= FLASHC_HOPPER_KVC_ALONE_MIN_KEYS) {
            *alone_plan = 1;
            return alone;
        }
    }
    return kvc_split_heuristic(ctas, (long long)sms * ctas_per_sm, key_blocks);
}

/* The key splits of a call and whether the Hopper wide kernel takes it
 * (hopper_kvcache.h): only unsplit, where its one CTA per (sequence, KV
 * head) fills the SMs once or more (the heuristic's rule for one CTA per
 * SM) and streams the whole cache. Where it would split (batch 4 x 128k
 * keys: 4 splits against the 4-warp kernel's 8) it measured 0.5-1.4 %
 * slower. The splits otherwise are the heuristic's for the portable tile,
 * which the 4-warp Hopper kernel shares; where they put one CTA per SM,
 * tiles of 17-32 rows run the tall kernel. */
typedef struct kvc_split_plan {
    int splits, wide, tall, pairs;
} kvc_split_plan;

static kvc_split_plan kvc_plan_of(const flashc_kvcache_problem *kp, const flashc_kvc_params *params) {
    const flashc_problem *p = &kp->attn;
    const long long keys = kvc_keys(params);
    kvc_split_plan plan = {1, 0, 0, 0};
    /* no query rows (batch 0 or seqlen_q 0): nothing to split or combine, and
     * the caller sized no partials for a forced num_splits */
    if (p->batch * p->seqlen_q == 0) return plan;
    if (kp->num_splits >= 1) {
        plan.splits = kp->num_splits < FLASHC_KVC_MAX_SPLITS ? kp->num_splits : FLASHC_KVC_MAX_SPLITS;
        plan.wide = flashc_hopper_kvc_wide_takes(params, p->device_index, keys, plan.splits);
        plan.tall = flashc_hopper_kvc_tall_takes(params, p->device_index, 0, keys, plan.splits);
        return plan;
    }
    const int sms = flashc_cuda_device_sms(p->device_index);
    /* the wide kernel's tiles: one per (sequence, KV head) */
    const long long ctas = (long long)params->batch * params->nheads_k;
    const long long block_n = flashc_hopper_kvc_wide_block_n();
    const long long key_blocks = (keys + block_n - 1) / block_n;
    if (sms > 0 && ctas > 0 && key_blocks > 0) {
        const int wide_splits = kvc_split_heuristic(ctas, sms, key_blocks);
        if (flashc_hopper_kvc_wide_takes(params, p->device_index, keys, wide_splits)) {
            plan.splits = wide_splits; /* more than 1 only when forced (tests) */
            plan.wide = 1;
            return plan;
        }
    }
    int alone = 0;
    plan.splits = kvc_num_splits(params, p->device_index, &alone);
    plan.tall = flashc_hopper_kvc_tall_takes(params, p->device_index, alone, keys, plan.splits);
    return plan;
}

/* Head pairs (hopper_kvcache.h), planned for their own CTAs (half the KV
 * heads, twice the group), where the shape allows them and that plan gives
 * each CTA a long enough stream; else the plan of the call as it is. */
static kvc_split_plan kvc_plan(const flashc_kvcache_problem *kp, const flashc_kvc_params *params) {
    flashc_kvc_params pairs;
    if (flashc_hopper_kvc_pairs(params, kp->attn.device_index, &pairs)) {
        kvc_split_plan plan = kvc_plan_of(kp, &pairs);
        if (flashc_hopper_kvc_pairs_take(&pairs, (kvc_keys(&pairs) + plan.splits - 1) / plan.splits)) {
            plan.pairs = 1;
            return plan;
        }
    }
    return kvc_plan_of(kp, params);
}

/* Split partials: out rows [split][row][dv] then LSE [split][row], float32. */
static size_t kvc_partial_bytes(const flashc_problem *p, int splits) {
    if (splits <= 1) return 0;
    const size_t rows = (size_t)(p->batch * p->seqlen_q * p->nheads);
    return (size_t)splits * rows * (size_t)(p->head_dim_v + 1) * sizeof(float);
}

extern "C" size_t flashc_cuda_kvcache_workspace_size(const flashc_kvcache_problem *kp) {
    const flashc_kvc_params params = kvc_params(&kp->attn);
    return kvc_partial_bytes(&kp->attn, kvc_plan(kp, &params).splits);
}

/* ---- the KV-cache call ------------------------------------------------------ */

typedef struct kvc_call {
    flashc_kvc_params k;
    int is_bf16, append, combine;
    void *stream;
} kvc_call;

/* How a call with an append (k_new, rotary) runs on Hopper:
 *   fused (default)  no append kernel: the Hopper kernel's CTAs write the
 *                    rows and rotate Q themselves (params.fused_append);
 *   kernel           the append kernel, then the attention reading the
 *                    rows it leaves alone before it waits for it
 *                    (params.early_cache_reads);
 *   serial           the append kernel, then the attention reading nothing
 *                    before it has completed.
 * FLASHC_CUDA_KVCACHE_APPEND names one (tests, A/B runs). The portable
 * kernel always runs behind the append kernel. */
typedef enum { KVC_APPEND_FUSED, KVC_APPEND_KERNEL, KVC_APPEND_SERIAL } kvc_append_mode;

static kvc_append_mode kvc_append_mode_of(void) {
    const char *mode = getenv("FLASHC_CUDA_KVCACHE_APPEND");
    if (mode && strcmp(mode, "serial") == 0) return KVC_APPEND_SERIAL;
    if (mode && strcmp(mode, "kernel") == 0) return KVC_APPEND_KERNEL;
    return KVC_APPEND_FUSED;
}

static cudaError_t kvc_body(const void *arg) {
    const kvc_call *c = (const kvc_call *)arg;
    flashc_kvc_params k = c->k;
    cudaError_t err = cudaSuccess;
    const kvc_append_mode mode = kvc_append_mode_of();
    /* fused only where the grid has CTAs (query rows): without any, no
     * CTA would write the new rows, and the append kernel does */
    bool attended = false;
    if (c->append && mode == KVC_APPEND_FUSED && k.batch > 0 && k.seqlen_q > 0) {
        k.fused_append = 1;
        err = flashc_hopper_kvc_attention(&k, c->stream, c->is_bf16);
        attended = err != cudaErrorNotSupported; /* else nothing was launched */
        if (!attended) err = cudaSuccess, k.fused_append = 0;
    }
    if (!attended) {
        int appended = 0;
        if (c->append) err = flashc_kvc_append(&k, c->stream, c->is_bf16, &appended);
        /* the Hopper kernel reads the cache rows the append leaves alone early
         * only right behind the append kernel (kvcache_append.cu) */
        k.early_cache_reads = appended && mode != KVC_APPEND_SERIAL;
        if (err == cudaSuccess) err = flashc_kvc_attention(&k, c->stream, c->is_bf16);
    }
    if (err == cudaSuccess && c->combine) err = flashc_kvc_combine(&k, c->stream, c->is_bf16);
    return err;
}

extern "C" flashc_status flashc_cuda_kvcache(flashc_kvcache_problem *kp) {
    const flashc_problem *p = &kp->attn;
    flashc_status st = flashc_cuda_check_supported(p);
    if (st == FLASHC_SUCCESS) st = check_kv_layout_supported(p);
    if (st != FLASHC_SUCCESS) return st;

    kvc_call c;
    c.k = kvc_params(p);
    c.is_bf16 = p->dtype == FLASHC_DTYPE_BFLOAT16;
    c.stream = p->stream;
    c.append = (kp->k_new.data && p->kv.new_rows > 0) || kp->rotary_dim > 0;
    if (kp->k_new.data) {
        c.k.k_new = kp->k_new.data;
        c.k.v_new = kp->v_new.data;
        c.k.kn_batch_stride = kp->k_new.batch_stride, c.k.kn_row_stride = kp->k_new.row_stride;
        c.k.kn_head_stride = kp->k_new.head_stride;
        c.k.vn_batch_stride = kp->v_new.batch_stride, c.k.vn_row_stride = kp->v_new.row_stride;
        c.k.vn_head_stride = kp->v_new.head_stride;
    }
    if (kp->rotary_dim > 0) {
        c.k.rotary_cos = kp->rotary_cos;
        c.k.rotary_sin = kp->rotary_sin;
        c.k.rotary_row_stride = kp->rotary_row_stride;
        c.k.rotary_rows = kp->rotary_rows;
        c.k.rotary_dim = (int)kp->rotary_dim;
        c.k.rotary_interleaved = kp->rotary_interleaved;
        c.k.rotary_q_per_row = kp->rotary_q_per_row;
        /* the caller's q is rotated into q_rotated, which is attended */
        c.k.q_in = p->q.data;
        c.k.qi_batch_stride = p->q.batch_stride, c.k.qi_row_stride = p->q.row_stride;
        c.k.qi_head_stride = p->q.head_stride;
        c.k.q_rotated = kp->q_rotated;
        c.k.q = kp->q_rotated;
        c.k.q_head_stride = p->head_dim;
        c.k.q_row_stride = p->nheads * p->head_dim;
        c.k.q_batch_stride = p->seqlen_q * p->nheads * p->head_dim;
    }
    const kvc_split_plan plan = kvc_plan(kp, &c.k);
    const int splits = plan.splits;
    c.k.wide = plan.wide;
    c.k.tall = plan.tall;
    c.k.head_pairs = plan.pairs;
    const size_t partial_bytes = kvc_partial_bytes(p, splits);
    c.combine = splits > 1;
    if (c.combine) {
        if (!kp->workspace || kp->workspace_bytes < partial_bytes) /* api.c sized it */
            return flashc_fail(FLASHC_ERROR_WORKSPACE, "workspace: %zu bytes of split partials needed, %zu given",
                               partial_bytes, kp->workspace ? kp->workspace_bytes : (size_t)0);
        c.k.num_splits = splits;
        c.k.partial_rows = p->batch * p->seqlen_q * p->nheads;
        c.k.o_partial = (float *)kp->workspace;
        c.k.lse_partial = c.k.o_partial + (size_t)splits * c.k.partial_rows * p->head_dim_v;
    }
    return flashc_cuda_on_device(p->device_index, kvc_body, &c);
}

/* ---- varlen forward over paged keys ---------------------------------------- */

typedef struct paged_call {
    flashc_kvc_params k;
    flashc_fwd_params f;
    int is_bf16;
    void *stream;
} paged_call;

static cudaError_t paged_body(const void *arg) {
    const paged_call *c = (const paged_call *)arg;
    cudaError_t err = flashc_kvc_attention(&c->k, c->stream, c->is_bf16);
    if (err == cudaSuccess) err = flashc_fwd_fill_outside_rows(&c->f, c->is_bf16, c->stream);
    return err;
}

flashc_status flashc_cuda_paged_forward(const flashc_problem *p) {
    if (p->dropout_p > 0.0)
        return flashc_fail(FLASHC_ERROR_UNSUPPORTED,
                           "dropout_p: dropout is not supported with a block_table (paged K/V) on CUDA; "
                           "got %g",
                           p->dropout_p);
    if (p->s_dmask.data)
        return flashc_fail(FLASHC_ERROR_UNSUPPORTED,
                           "s_dmask: not supported with a block_table (paged K/V) on CUDA");
    flashc_status st = check_kv_layout_supported(p);
    if (st != FLASHC_SUCCESS) return st;
    paged_call c;
    c.k = kvc_params(p);
    flashc_kvc_params pairs; /* unsplit: each CTA streams up to the capacity */
    c.k.head_pairs = flashc_hopper_kvc_pairs(&c.k, p->device_index, &pairs) &&
                     flashc_hopper_kvc_pairs_take(&pairs, kvc_keys(&pairs));
    c.f = flashc_cuda_fwd_params(p);
    c.is_bf16 = p->dtype == FLASHC_DTYPE_BFLOAT16;
    c.stream = p->stream;
    return flashc_cuda_on_device(p->device_index, paged_body, &c);
}
