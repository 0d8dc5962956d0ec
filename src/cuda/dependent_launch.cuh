/* A programmatic dependent launch (sm_90+): the kernel may be scheduled
 * while the one before it in the stream still runs (once that one's CTAs
 * have all executed griddepcontrol.launch_dependents or exited), and must
 * execute griddepcontrol.wait before it reads what that kernel writes.
 * Used by the shared last waves' tail grids (tail_split.h) and the
 * KV-cache combine. */
#ifndef FLASHC_CUDA_DEPENDENT_LAUNCH_CUH
#define FLASHC_CUDA_DEPENDENT_LAUNCH_CUH

#include <utility>

#include <cuda_runtime.h>

/* `kernel` on `stream`: a programmatic dependent launch where `dependent`
 * and the current device is compute capability 9.0 or newer, else an
 * ordinary one. */
template <typename... Params, typename... Args>
static cudaError_t flashc_launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                           cudaStream_t stream, bool dependent, Args &&...args) {
    int device = 0, major = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (err != cudaSuccess) return err;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    cudaLaunchAttribute attribute;
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &attribute;
    config.numAttrs = dependent && major >= 9 ? 1 : 0;
    return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

#endif
