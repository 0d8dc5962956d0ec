#include "device.h"

#include <stdio.h>
#include <stdlib.h>

#include "flashc.h"

#ifdef FLASHC_TOOL_HAVE_CUDA
#include <cuda_runtime_api.h>

static int cuda_check(cudaError_t err, const char *what) {
    if (err == cudaSuccess) return 0;
    fprintf(stderr, "flashc: %s failed: %s (%s)\n", what, cudaGetErrorString(err),
            cudaGetErrorName(err));
    return -1;
}

int flashc_tool_cuda_usable(void) {
    if (!flashc_cuda_available()) return 0;
    /* The library's runtime sees a device; this program's must too. */
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

const char *flashc_tool_cuda_device_name(void) {
    static char name[256];
    struct cudaDeviceProp prop;
    if (!flashc_tool_cuda_usable() || cudaGetDeviceProperties(&prop, 0) != cudaSuccess)
        return "none";
    snprintf(name, sizeof name, "%s", prop.name);
    return name;
}

size_t flashc_tool_cuda_l2_bytes(void) {
    int bytes = 0;
    if (!flashc_tool_cuda_usable() ||
        cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, 0) != cudaSuccess)
        return 0;
    return (size_t)bytes;
}

int flashc_tool_device_alloc(void **ptr, size_t bytes, const char *what) {
    char label[128];
    snprintf(label, sizeof label, "cudaMalloc of %s (%.1f MiB)", what, (double)bytes / 1048576.0);
    *ptr = NULL;
    return cuda_check(cudaMalloc(ptr, bytes ? bytes : 1), label);
}

void flashc_tool_device_free(void *ptr) {
    if (ptr) cudaFree(ptr);
}

int flashc_tool_device_copy_to(void *dst, const void *src, size_t bytes) {
    /* A copy from pageable memory may return before its DMA is done, and
     * the non-blocking streams the calls run on do not wait for it. */
    if (cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the device") != 0)
        return -1;
    return cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after cudaMemcpy");
}

int flashc_tool_device_copy_from(void *dst, const void *src, size_t bytes) {
    return cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
}

int flashc_tool_device_fill(void *ptr, int byte, size_t bytes) {
    if (cuda_check(cudaMemset(ptr, byte, bytes), "cudaMemset") != 0) return -1;
    return cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after cudaMemset");
}

int flashc_tool_stream_create(void **stream) {
    cudaStream_t s = NULL;
    if (cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate") != 0)
        return -1;
    *stream = (void *)s;
    return 0;
}

void flashc_tool_stream_destroy(void *stream) {
    if (stream) cudaStreamDestroy((cudaStream_t)stream);
}

int flashc_tool_stream_synchronize(void *stream) {
    return cuda_check(cudaStreamSynchronize((cudaStream_t)stream), "cudaStreamSynchronize");
}

int flashc_tool_timer_create(flashc_tool_event_timer *t, void *stream) {
    cudaEvent_t a = NULL, b = NULL;
    t->start = t->stop = NULL;
    t->stream = stream;
    if (cuda_check(cudaEventCreate(&a), "cudaEventCreate") != 0) return -1;
    if (cuda_check(cudaEventCreate(&b), "cudaEventCreate") != 0) {
        cudaEventDestroy(a);
        return -1;
    }
    t->start = (void *)a;
    t->stop = (void *)b;
    return 0;
}

int flashc_tool_timer_start(flashc_tool_event_timer *t) {
    return cuda_check(cudaEventRecord((cudaEvent_t)t->start, (cudaStream_t)t->stream),
                      "cudaEventRecord (start)");
}

int flashc_tool_timer_stop(flashc_tool_event_timer *t, double *seconds) {
    float ms = 0.0f;
    if (cuda_check(cudaEventRecord((cudaEvent_t)t->stop, (cudaStream_t)t->stream),
                   "cudaEventRecord (stop)") != 0 ||
        cuda_check(cudaEventSynchronize((cudaEvent_t)t->stop), "cudaEventSynchronize") != 0 ||
        cuda_check(cudaEventElapsedTime(&ms, (cudaEvent_t)t->start, (cudaEvent_t)t->stop),
                   "cudaEventElapsedTime") != 0)
        return -1;
    /* A kernel that faulted shows here, not at its launch. */
    if (cuda_check(cudaGetLastError(), "a kernel on the stream") != 0) return -1;
    *seconds = 1e-3 * (double)ms;
    return 0;
}

void flashc_tool_timer_destroy(flashc_tool_event_timer *t) {
    if (t->start) cudaEventDestroy((cudaEvent_t)t->start);
    if (t->stop) cudaEventDestroy((cudaEvent_t)t->stop);
    t->start = t->stop = NULL;
}

int flashc_tool_time_calls(void *stream, int count, int (*fn)(void *ctx, int i), void *ctx,
                           double *seconds) {
    cudaEvent_t *ev = calloc((size_t)(2 * count), sizeof *ev);
    if (!ev) return -1;
    int created = 0, rc = 0;
    for (; created < 2 * count; ++created)
        if (cuda_check(cudaEventCreate(&ev[created]), "cudaEventCreate") != 0) {
            rc = -1;
            break;
        }
    for (int i = 0; rc == 0 && i < count; ++i) {
        if (cuda_check(cudaEventRecord(ev[2 * i], (cudaStream_t)stream), "cudaEventRecord") != 0 ||
            fn(ctx, i) != 0 ||
            cuda_check(cudaEventRecord(ev[2 * i + 1], (cudaStream_t)stream), "cudaEventRecord") != 0)
            rc = -1;
    }
    if (rc == 0 && (cuda_check(cudaStreamSynchronize((cudaStream_t)stream), "cudaStreamSynchronize") != 0 ||
                    cuda_check(cudaGetLastError(), "a kernel on the stream") != 0))
        rc = -1;
    for (int i = 0; rc == 0 && i < count; ++i) {
        float ms = 0.0f;
        if (cuda_check(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]), "cudaEventElapsedTime") != 0)
            rc = -1;
        seconds[i] = 1e-3 * (double)ms;
    }
    if (rc != 0) cudaStreamSynchronize((cudaStream_t)stream);
    for (int i = 0; i < created; ++i) cudaEventDestroy(ev[i]);
    free(ev);
    return rc;
}

#else /* built without the CUDA runtime */

static int no_cuda(void) {
    fprintf(stderr, "flashc: this program was built without the CUDA backend\n");
    return -1;
}

int flashc_tool_cuda_usable(void) { return 0; }
const char *flashc_tool_cuda_device_name(void) { return "none"; }
size_t flashc_tool_cuda_l2_bytes(void) { return 0; }

int flashc_tool_device_alloc(void **ptr, size_t bytes, const char *what) {
    (void)bytes;
    (void)what;
    *ptr = NULL;
    return no_cuda();
}

void flashc_tool_device_free(void *ptr) { (void)ptr; }

int flashc_tool_device_copy_to(void *dst, const void *src, size_t bytes) {
    (void)dst;
    (void)src;
    (void)bytes;
    return no_cuda();
}

int flashc_tool_device_copy_from(void *dst, const void *src, size_t bytes) {
    (void)dst;
    (void)src;
    (void)bytes;
    return no_cuda();
}

int flashc_tool_device_fill(void *ptr, int byte, size_t bytes) {
    (void)ptr;
    (void)byte;
    (void)bytes;
    return no_cuda();
}

int flashc_tool_stream_create(void **stream) {
    *stream = NULL;
    return no_cuda();
}

void flashc_tool_stream_destroy(void *stream) { (void)stream; }
int flashc_tool_stream_synchronize(void *stream) {
    (void)stream;
    return no_cuda();
}

int flashc_tool_timer_create(flashc_tool_event_timer *t, void *stream) {
    t->start = t->stop = NULL;
    t->stream = stream;
    return no_cuda();
}

int flashc_tool_timer_start(flashc_tool_event_timer *t) {
    (void)t;
    return no_cuda();
}

int flashc_tool_timer_stop(flashc_tool_event_timer *t, double *seconds) {
    (void)t;
    *seconds = 0.0;
    return no_cuda();
}

void flashc_tool_timer_destroy(flashc_tool_event_timer *t) { (void)t; }

int flashc_tool_time_calls(void *stream, int count, int (*fn)(void *ctx, int i), void *ctx,
                           double *seconds) {
    (void)stream;
    (void)count;
    (void)fn;
    (void)ctx;
    (void)seconds;
    return no_cuda();
}

#endif

void *flashc_tool_scratch_allocate(void *context, size_t bytes, flashc_device device) {
    flashc_tool_scratch *s = context;
    (void)device; /* the tools run on device 0 */
    if (bytes <= s->bytes) return s->ptr;
    flashc_tool_scratch_free(s); /* cudaFree waits for the work that used it */
    if (flashc_tool_device_alloc(&s->ptr, bytes, "the forward's scratch") != 0 ||
        flashc_tool_device_fill(s->ptr, 0xFF, bytes) != 0) {
        flashc_tool_scratch_free(s);
        return NULL;
    }
    s->bytes = bytes;
    return s->ptr;
}

void flashc_tool_scratch_free(flashc_tool_scratch *s) {
    flashc_tool_device_free(s->ptr);
    s->ptr = NULL;
    s->bytes = 0;
}
