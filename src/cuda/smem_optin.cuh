/* Raising a kernel's dynamic shared-memory limit above 48 KiB, once per
 * kernel and device: cudaFuncSetAttribute on every launch would also run
 * inside CUDA graph captures, where callers expect only stream work. */
#ifndef FLASHC_CUDA_SMEM_OPTIN_CUH
#define FLASHC_CUDA_SMEM_OPTIN_CUH

#include <cuda_runtime.h>

/* `done` is the caller's per-kernel bit set of devices already raised
 * (devices past 63 are raised on every call). */
static inline cudaError_t flashc_smem_optin(const void *kernel, int bytes, unsigned long long *done) {
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    const unsigned long long bit = device < 64 ? 1ull << device : 0ull;
    if (bit && (__atomic_load_n(done, __ATOMIC_ACQUIRE) & bit)) return cudaSuccess;
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (err == cudaSuccess && bit) __atomic_fetch_or(done, bit, __ATOMIC_RELEASE);
    return err;
}

#endif
