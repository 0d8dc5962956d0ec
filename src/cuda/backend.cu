/* The CUDA backend's entry points (declared in src/core/backend.h): checks
 * that only this backend has (dtypes, head dims, 16-byte rows), the
 * kernel parameters, the choice of configuration, and the launches on the
 * caller's stream and device. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

extern "C" {
#include "../core/backend.h"
#include "../core/error.h"
}
#include "backend_shared.h"
#include "bwd_launch.h"
#include "bwd_workspace.h"
#include "fwd_launch.h"
#include "hopper_bwd.h"
#include "kernel_variant.h"

extern "C" int flashc_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* no driver or no device: clear the sticky state */
        return 0;
    }
    return n;
}

static bool aligned16(const void *ptr) { return ((uintptr_t)ptr & 15u) == 0; }

/* cp.async moves 16-byte chunks: every row of q, k, v, out must start on a
 * 16-byte boundary. */
static flashc_status check_rows_aligned(const char *name, const flashc_seq_tensor *t) {
    if (!aligned16(t->data) || t->batch_stride % 8 || t->row_stride % 8 || t->head_stride % 8)
        return flashc_fail(FLASHC_ERROR_STRIDE,
                           "%s: the CUDA backend needs 16-byte aligned rows (data pointer aligned to 16 "
                           "bytes, batch/row/head strides multiples of 8 elements)",
                           name);
    return FLASHC_SUCCESS;
}

flashc_status flashc_cuda_check_supported(const flashc_problem *p) {
    if (p->dtype != FLASHC_DTYPE_FLOAT16 && p->dtype != FLASHC_DTYPE_BFLOAT16)
        return flashc_fail(FLASHC_ERROR_DTYPE,
                           "q: the CUDA backend takes float16 or bfloat16 (got %s); use the CPU backend for "
                           "float32 / float64",
                           p->dtype == FLASHC_DTYPE_FLOAT32 ? "float32" : "float64");
    if (p->head_dim % 8)
        return flashc_fail(FLASHC_ERROR_HEAD_DIM,
                           "q: head dim %lld is not a multiple of 8, which the CUDA backend needs (pad it)",
                           (long long)p->head_dim);
    if (p->head_dim_v % 8)
        return flashc_fail(FLASHC_ERROR_HEAD_DIM,
                           "v: head dim %lld is not a multiple of 8, which the CUDA backend needs (pad it)",
                           (long long)p->head_dim_v);
    flashc_status st;
    if ((st = check_rows_aligned("q", &p->q)) != FLASHC_SUCCESS) return st;
    if ((st = check_rows_aligned("k", &p->k)) != FLASHC_SUCCESS) return st;
    if ((st = check_rows_aligned("v", &p->v)) != FLASHC_SUCCESS) return st;
    if ((st = check_rows_aligned("out", &p->out)) != FLASHC_SUCCESS) return st;
    if (p->seqlen_q > INT32_MAX || p->seqlen_k > INT32_MAX)
        return flashc_fail(FLASHC_ERROR_SHAPE, "q: sequence lengths above 2^31 - 1 are not supported on CUDA");
    return FLASHC_SUCCESS;
}

static int clamp_window(int64_t w) { return w > INT32_MAX ? INT32_MAX : (int)w; }

flashc_fwd_params flashc_cuda_fwd_params(const flashc_problem *p) {
    flashc_fwd_params k;
    k.q = p->q.data;
    k.k = p->k.data;
    k.v = p->v.data;
    k.out = p->out.data;
    k.lse = (float *)p->lse.data;
    k.q_batch_stride = p->q.batch_stride, k.q_row_stride = p->q.row_stride, k.q_head_stride = p->q.head_stride;
    k.k_batch_stride = p->k.batch_stride, k.k_row_stride = p->k.row_stride, k.k_head_stride = p->k.head_stride;
    k.v_batch_stride = p->v.batch_stride, k.v_row_stride = p->v.row_stride, k.v_head_stride = p->v.head_stride;
    k.o_batch_stride = p->out.batch_stride, k.o_row_stride = p->out.row_stride;
    k.o_head_stride = p->out.head_stride;
    k.lse_batch_stride = p->lse.batch_stride, k.lse_head_stride = p->lse.head_stride;
    k.lse_row_stride = p->lse.row_stride;
    k.batch = (int)p->batch;
    k.nheads = (int)p->nheads;
    k.nheads_k = (int)p->nheads_k;
    k.head_dim = (int)p->head_dim;
    k.head_dim_v = (int)p->head_dim_v;
    k.seqlen_q = (int)p->seqlen_q;
    k.seqlen_k = (int)p->seqlen_k;
    k.cu_seqlens_q = p->cu_seqlens_q;
    k.cu_seqlens_k = p->cu_seqlens_k;
    k.seqused_k = p->seqused_k;
    k.total_q = p->total_q;
    k.total_k = p->total_k;
    k.scale_log2 = (float)(p->scale * FLASHC_LOG2E);
    k.softcap_inv_scale = p->softcap > 0.0 ? (float)(p->scale / p->softcap) : 0.0f;
    k.softcap_log2 = (float)(p->softcap * FLASHC_LOG2E);
    k.alibi_slopes = p->alibi_slopes;
    k.alibi_batch_stride = p->alibi_batch_stride;
    k.alibi_head_stride = p->alibi_head_stride;
    k.window_left = clamp_window(p->window_left);
    k.window_right = clamp_window(p->window_right);
    k.dropout_threshold = p->dropout_p > 0.0 ? p->dropout_threshold : 0u;
    k.dropout_rescale = p->dropout_p > 0.0 ? (float)(1.0 / (1.0 - p->dropout_p)) : 1.0f;
    k.dropout_seed = p->dropout_seed;
    k.dropout_offset = p->dropout_offset;
    k.tail = flashc_tail_plan(0, 0, 0, 0, 0); /* none: the launch chooses (fwd_launch.cuh) */
    k.tail_slots = nullptr;
    k.tail_counts = nullptr;
    return k;
}

flashc_status flashc_cuda_on_device(int device, cudaError_t (*body)(const void *), const void *p) {
    int previous = -1;
    cudaError_t err = cudaGetDevice(&previous);
    if (err == cudaSuccess && previous != device) err = cudaSetDevice(device);
    if (err == cudaSuccess) err = body(p);
    if (previous >= 0 && previous != device) cudaSetDevice(previous);
    if (err != cudaSuccess) {
        cudaGetLastError();
        return flashc_fail(FLASHC_ERROR_BACKEND, "CUDA: %s (%s)", cudaGetErrorString(err), cudaGetErrorName(err));
    }
    return FLASHC_SUCCESS;
}

static cudaError_t forward_body(const void *arg) {
    const flashc_problem *p = (const flashc_problem *)arg;
    const flashc_fwd_params k = flashc_cuda_fwd_params(p);
    const int is_bf16 = p->dtype == FLASHC_DTYPE_BFLOAT16;
    flashc_fwd_scratch scratch;
    scratch.allocate = p->scratch_allocate;
    scratch.context = p->scratch_context;
    scratch.device.type = FLASHC_DEVICE_CUDA;
    scratch.device.index = p->device_index;
    cudaError_t err = flashc_fwd_dispatch(&k, &scratch, p->stream, is_bf16, flashc_needs_general_kernel(p));
    if (err == cudaSuccess && p->is_varlen) err = flashc_fwd_fill_outside_rows(&k, is_bf16, p->stream);
    if (err == cudaSuccess && p->s_dmask.data) err = flashc_fwd_write_dmask(&k, &p->s_dmask, is_bf16, p->stream);
    return err;
}

extern "C" flashc_status flashc_cuda_forward(const flashc_problem *p) {
    flashc_status st = flashc_cuda_check_supported(p);
    if (st != FLASHC_SUCCESS) return st;
    if (p->kv.block_table) return flashc_cuda_paged_forward(p); /* kvcache_backend.cu */
    return flashc_cuda_on_device(p->device_index, forward_body, p);
}

/* ---- backward ------------------------------------------------------------ */

static flashc_status check_backward_supported(const flashc_problem *p) {
    flashc_status st = flashc_cuda_check_supported(p);
    if (st != FLASHC_SUCCESS) return st;
    if ((st = check_rows_aligned("dout", &p->dout)) != FLASHC_SUCCESS) return st;
    if ((st = check_rows_aligned("dq", &p->dq)) != FLASHC_SUCCESS) return st;
    if ((st = check_rows_aligned("dk", &p->dk)) != FLASHC_SUCCESS) return st;
    if ((st = check_rows_aligned("dv", &p->dv)) != FLASHC_SUCCESS) return st;
    return FLASHC_SUCCESS;
}

static flashc_bwd_params make_bwd_params(const flashc_problem *p, const flashc_bwd_plan *plan,
                                         const flashc_bwd_layout *L) {
    flashc_bwd_params k;
    k.fwd = flashc_cuda_fwd_params(p);
    k.dout = p->dout.data;
    k.do_batch_stride = p->dout.batch_stride, k.do_row_stride = p->dout.row_stride;
    k.do_head_stride = p->dout.head_stride;
    k.dlse = (const float *)p->dlse.data;
    k.dlse_batch_stride = p->dlse.batch_stride, k.dlse_head_stride = p->dlse.head_stride;
    k.dlse_row_stride = p->dlse.row_stride;
    k.dq = p->dq.data;
    k.dk = p->dk.data;
    k.dv = p->dv.data;
    k.dq_batch_stride = p->dq.batch_stride, k.dq_row_stride = p->dq.row_stride, k.dq_head_stride = p->dq.head_stride;
    k.dk_batch_stride = p->dk.batch_stride, k.dk_row_stride = p->dk.row_stride, k.dk_head_stride = p->dk.head_stride;
    k.dv_batch_stride = p->dv.batch_stride, k.dv_row_stride = p->dv.row_stride, k.dv_head_stride = p->dv.head_stride;
    k.scale = (float)p->scale;
    char *ws = (char *)p->workspace;
    k.lse2 = (float *)(ws + L->lse2_offset);
    k.dsum = (float *)(ws + L->dsum_offset);
    k.dq_accum = (float *)(ws + L->dq_offset);
    k.ws_rows = L->ws_rows;
    k.dq_slice_stride = L->dq_slice_stride;
    k.dq_cols = plan->head_dim;
    k.dq_blocked = 0; /* flashc_bwd_dispatch says which main kernel ran */
    k.dq_slices = plan->dq_slices;
    k.tile_m = plan->tile_m;
    k.nchunks = plan->nchunks;
    k.deterministic = p->deterministic != 0;
    k.dq_order = plan->dq_order_rows ? (int *)(ws + L->dq_order_offset) : nullptr;
    k.dq_order_rows = plan->dq_order_rows;
    k.head_splits = plan->head_splits;
    k.dk_part = plan->head_splits > 1 ? (float *)(ws + L->dk_part_offset) : nullptr;
    k.dv_part = plan->head_splits > 1 ? (float *)(ws + L->dv_part_offset) : nullptr;
    k.part_rows = L->part_rows;
    k.tail = plan->tail;
    k.tail_slots = plan->tail.ctas ? (float *)(ws + L->tail_slots_offset) : nullptr;
    k.tail_counts = plan->tail.ctas ? (int *)(ws + L->tail_counts_offset) : nullptr;
    return k;
}

/* Attribute attr of device dev, asked once per device (devices past 63
 * every time) into `cache`; 0 if unknown. */
enum { FLASHC_CACHED_DEVICES = 64 };
static int cached_device_attribute(int dev, cudaDeviceAttr attr, int (&cache)[FLASHC_CACHED_DEVICES]) {
    if (dev < 0) return 0;
    if (dev < FLASHC_CACHED_DEVICES && cache[dev]) return cache[dev];
    int value = 0;
    if (cudaDeviceGetAttribute(&value, attr, dev) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    if (dev < FLASHC_CACHED_DEVICES) cache[dev] = value;
    return value;
}

int flashc_cuda_device_sms(int dev) {
    static int known[FLASHC_CACHED_DEVICES];
    return cached_device_attribute(dev, cudaDevAttrMultiProcessorCount, known);
}

int flashc_cuda_device_smem_optin(int dev) {
    static int known[FLASHC_CACHED_DEVICES];
    int optin = cached_device_attribute(dev, cudaDevAttrMaxSharedMemoryPerBlockOptin, known);
    const char *limit = getenv("FLASHC_CUDA_SMEM_LIMIT");
    if (limit) {
        const long cap = strtol(limit, nullptr, 10);
        if (cap > 0 && cap < optin) optin = (int)cap;
    }
    return optin;
}

/* The plan of the kernel that will run (bwd_workspace.h). The environment
 * variable FLASHC_CUDA_BWD_HEAD_SPLITS, a divisor of the GQA group, fixes
 * the head splits, and FLASHC_CUDA_BWD_TAIL=0 turns the shared last wave
 * off (for benchmarks of the choices, and tests). */
static flashc_bwd_plan backward_plan(const flashc_problem *p) {
    const bool hopper = flashc_hopper_bwd_applies(p);
    flashc_bwd_plan plan = flashc_bwd_plan_of(p, hopper, flashc_cuda_device_sms(p->device_index),
                                              flashc_cuda_device_smem_optin(p->device_index));
    const char *forced = getenv("FLASHC_CUDA_BWD_HEAD_SPLITS");
    const int64_t group = p->nheads_k > 0 ? p->nheads / p->nheads_k : 1;
    if (forced) {
        const long s = strtol(forced, nullptr, 10);
        if (s >= 1 && s <= group && group % s == 0) plan.head_splits = (int)s;
    }
    const char *tail = getenv("FLASHC_CUDA_BWD_TAIL");
    if ((tail && strcmp(tail, "0") == 0) || plan.head_splits != 1) plan.tail = flashc_tail_plan(0, 0, 0, 0, 0);
    return plan;
}

static cudaError_t backward_body(const void *arg) {
    const flashc_problem *p = (const flashc_problem *)arg;
    const flashc_bwd_plan plan = backward_plan(p);
    const flashc_bwd_layout L = flashc_bwd_layout_of(p, &plan);
    if (L.bytes > p->workspace_bytes) return cudaErrorInvalidValue; /* unreachable: api.c checked the size */
    flashc_bwd_params k = make_bwd_params(p, &plan, &L);
    const int is_bf16 = p->dtype == FLASHC_DTYPE_BFLOAT16;
    cudaError_t err = flashc_bwd_preprocess(&k, is_bf16, p->stream);
    if (err == cudaSuccess) err = flashc_bwd_dispatch(&k, p->stream, is_bf16, plan.head_dim, plan.small,
                                                      flashc_needs_general_kernel(p), &k.dq_blocked);
    if (err == cudaSuccess) err = flashc_bwd_convert_dq(&k, is_bf16, p->stream);
    if (err == cudaSuccess && p->is_varlen) err = flashc_bwd_zero_unused_rows(&k, is_bf16, p->stream);
    return err;
}

/* The same plan and layout as the launch (bwd_workspace.h). */
extern "C" size_t flashc_cuda_backward_workspace_size(const flashc_problem *p) {
    const flashc_bwd_plan plan = backward_plan(p);
    return flashc_bwd_layout_of(p, &plan).bytes;
}

extern "C" flashc_status flashc_cuda_backward(const flashc_problem *p) {
    flashc_status st = check_backward_supported(p);
    if (st != FLASHC_SUCCESS) return st;
    return flashc_cuda_on_device(p->device_index, backward_body, p);
}
