#include "cli_device.h"

#include <stdio.h>

#include "flashc.h"

#ifdef FLASHC_CLI_HAVE_CUDA
#include <cuda_runtime_api.h>

static int cuda_check(cudaError_t err, const char *what) {
    if (err == cudaSuccess) return 0;
    fprintf(stderr, "flashc run: %s failed: %s\n", what, cudaGetErrorString(err));
    return -1;
}

int flashc_cli_cuda_usable(void) { return flashc_cuda_available(); }

int flashc_cli_device_alloc(void **ptr, size_t bytes) {
    return cuda_check(cudaMalloc(ptr, bytes ? bytes : 1), "cudaMalloc");
}

int flashc_cli_device_copy_to(void *dst, const void *src, size_t bytes) {
    return cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
}

int flashc_cli_device_copy_from(void *dst, const void *src, size_t bytes) {
    return cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
}

int flashc_cli_device_synchronize(void) {
    return cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

void flashc_cli_device_free(void *ptr) { cudaFree(ptr); }

#else /* built without the CUDA runtime: CUDA memory is not available */

static int no_cuda(void) {
    fprintf(stderr, "flashc run: this flashc was built without the CUDA backend\n");
    return -1;
}

int flashc_cli_cuda_usable(void) { return 0; }
int flashc_cli_device_alloc(void **ptr, size_t bytes) {
    (void)ptr;
    (void)bytes;
    return no_cuda();
}
int flashc_cli_device_copy_to(void *dst, const void *src, size_t bytes) {
    (void)dst;
    (void)src;
    (void)bytes;
    return no_cuda();
}
int flashc_cli_device_copy_from(void *dst, const void *src, size_t bytes) {
    (void)dst;
    (void)src;
    (void)bytes;
    return no_cuda();
}
int flashc_cli_device_synchronize(void) { return 0; }
void flashc_cli_device_free(void *ptr) { (void)ptr; }

#endif
