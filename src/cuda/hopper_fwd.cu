/* Host side of the Hopper forward: whether it applies, its tensor maps,
 * and the choice of head-dim configuration. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hopper_fwd.h"

typedef CUresult (*flashc_encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                           const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                           const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                           CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* cuTensorMapEncodeTiled, taken from the driver at run time so libflashc
 * does not link libcuda itself; NULL if the driver lacks it. */
static flashc_encode_tiled_fn encode_tiled(void) {
    static const flashc_encode_tiled_fn fn = []() -> flashc_encode_tiled_fn {
        void *f = nullptr;
        cudaDriverEntryPointQueryResult found;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found) !=
                cudaSuccess ||
            found != cudaDriverEntryPointSuccess) {
            cudaGetLastError();
            return nullptr;
        }
        return (flashc_encode_tiled_fn)f;
    }();
    return fn;
}

/* Compute capability 9.0 (sm_90a code runs there and nowhere else). */
static bool current_device_is_hopper(void) {
    enum { MAX_DEVICES = 64 };
    static int known[MAX_DEVICES]; /* 0 unknown, 1 Hopper, 2 not */
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0) {
        cudaGetLastError();
        return false;
    }
    if (dev < MAX_DEVICES && known[dev]) return known[dev] == 1;
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    const bool hopper = major == 9 && minor == 0;
    if (dev < MAX_DEVICES) known[dev] = hopper ? 1 : 2;
    return hopper;
}

/* A 4-d map over (head dim, rows, heads, batch) of 16-bit elements with
 * strides in elements; boxes of 64 columns x box_rows. A stride of a
 * dimension of extent 1 is never used, but TMA still wants it a nonzero
 * multiple of 16 bytes. */
static bool make_map(CUtensorMap *map, const void *data, int is_bf16, int head_dim, int64_t rows, int heads,
                     int batch, int64_t row_stride, int64_t head_stride, int64_t batch_stride, int box_rows) {
    const flashc_encode_tiled_fn encode = encode_tiled();
    if (!encode) return false;
    const cuuint64_t dims[4] = {(cuuint64_t)head_dim, (cuuint64_t)rows, (cuuint64_t)heads, (cuuint64_t)batch};
    const int64_t strides_elems[3] = {row_stride, head_stride, batch_stride};
    cuuint64_t strides[3];
    for (int i = 0; i < 3; ++i) {
        int64_t bytes = strides_elems[i] * 2;
        if (dims[i + 1] == 1 && bytes <= 0) bytes = 16;
        if (bytes <= 0 || bytes % 16 || bytes >= (1ll << 40)) return false;
        strides[i] = (cuuint64_t)bytes;
    }
    const cuuint32_t box[4] = {64, (cuuint32_t)box_rows, 1, 1};
    const cuuint32_t element_strides[4] = {1, 1, 1, 1};
    return encode(map, is_bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
                  const_cast<void *>(data), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

static bool make_maps(flashc_hopper_fwd_maps *m, const flashc_fwd_params *p, int is_bf16, int block_n) {
    const bool varlen = p->cu_seqlens_q != nullptr;
    const int batch = varlen ? 1 : p->batch;
    const int64_t rows_q = varlen ? p->total_q : p->seqlen_q, rows_k = varlen ? p->total_k : p->seqlen_k;
    /* TMA coordinates are 32-bit, and a map has no empty dimension (with
     * no rows at all there is nothing to load: the portable kernel writes
     * the empty rows). */
    if (rows_q > INT32_MAX || rows_k > INT32_MAX || rows_q < 1 || rows_k < 1 || batch < 1 || p->nheads < 1 ||
        p->nheads_k < 1 || p->head_dim < 1 || p->head_dim_v < 1)
        return false;
    memset(m, 0, sizeof *m);
    return make_map(&m->q, p->q, is_bf16, p->head_dim, rows_q, p->nheads, batch, p->q_row_stride,
                    p->q_head_stride, p->q_batch_stride, FLASHC_HOPPER_BLOCK_M) &&
           make_map(&m->k, p->k, is_bf16, p->head_dim, rows_k, p->nheads_k, batch, p->k_row_stride,
                    p->k_head_stride, p->k_batch_stride, block_n) &&
           make_map(&m->v, p->v, is_bf16, p->head_dim_v, rows_k, p->nheads_k, batch, p->v_row_stride,
                    p->v_head_stride, p->v_batch_stride, block_n);
}

static bool forced_portable(void) {
    const char *path = getenv("FLASHC_CUDA_FORWARD");
    return path && strcmp(path, "portable") == 0;
}

cudaError_t flashc_hopper_fwd(const flashc_fwd_params *p, void *stream, int is_bf16, int general) {
    if (forced_portable() || !current_device_is_hopper()) return cudaErrorNotSupported;
    const int d = p->head_dim > p->head_dim_v ? p->head_dim : p->head_dim_v;
    flashc_hopper_fwd_maps maps;
#define FLASHC_HOPPER_TRY_CONFIG(HEAD_DIM, BLOCK_N, BLOCK_N_GENERAL, OVERLAP)                                \
    if (d <= HEAD_DIM) {                                                                             \
        if (!make_maps(&maps, p, is_bf16, general ? BLOCK_N_GENERAL : BLOCK_N)) return cudaErrorNotSupported; \
        return flashc_hopper_fwd_run_hdim##HEAD_DIM(p, &maps, stream, is_bf16, general);             \
    }
    FLASHC_HOPPER_FWD_CONFIGS(FLASHC_HOPPER_TRY_CONFIG)
#undef FLASHC_HOPPER_TRY_CONFIG
    return cudaErrorNotSupported;
}
