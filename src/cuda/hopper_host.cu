/* Host helpers of the Hopper path (hopper_host.h). */
#include "hopper_host.h"

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

bool flashc_hopper_device(int dev) {
    enum { MAX_DEVICES = 64 };
    static int known[MAX_DEVICES]; /* 0 unknown, 1 Hopper, 2 not */
    if (dev < 0) return false;
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

bool flashc_hopper_current_device(void) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return flashc_hopper_device(dev);
}

/* A stride of a dimension of extent 1 is never used, but TMA still wants
 * it a nonzero multiple of 16 bytes. */
bool flashc_hopper_make_map(CUtensorMap *map, const void *data, int is_bf16, int head_dim, int64_t rows, int heads,
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
