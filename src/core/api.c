/* The public entry points: validate (validate.c), then hand the problem to
 * the backend of the tensors' device. */
#include <stdint.h>

#include "backend.h"
#include "error.h"
#include "validate.h"

/* The backward workspace handed to a backend is aligned to this; the size
 * reported to callers includes the slack, so any caller pointer works. */
#define FLASHC_WORKSPACE_ALIGN 64

const char *flashc_version(void) { return FLASHC_VERSION_STRING; }

int flashc_cuda_available(void) {
#ifdef FLASHC_HAVE_CUDA
    return flashc_cuda_device_count() > 0;
#else
    return 0;
#endif
}

flashc_status flashc_attention_forward(const flashc_forward_args *args) {
    flashc_clear_error();
    flashc_problem p;
    flashc_status st = flashc_validate_forward(args, &p);
    if (st != FLASHC_SUCCESS) return st;
#ifdef FLASHC_HAVE_CUDA
    if (p.is_cuda) return flashc_cuda_forward(&p);
#endif
    return flashc_cpu_forward(&p);
}

static size_t backend_workspace_size(const flashc_problem *p) {
    size_t bytes;
#ifdef FLASHC_HAVE_CUDA
    if (p->is_cuda)
        bytes = flashc_cuda_backward_workspace_size(p);
    else
#endif
        bytes = flashc_cpu_backward_workspace_size(p);
    return bytes ? bytes + FLASHC_WORKSPACE_ALIGN : 0;
}

flashc_status flashc_attention_backward_workspace_size(const flashc_backward_args *args,
                                                       size_t *bytes) {
    flashc_clear_error();
    if (!bytes) return flashc_fail(FLASHC_ERROR_NULL_POINTER, "bytes: is NULL");
    flashc_problem p;
    flashc_status st = flashc_validate_backward(args, &p);
    if (st != FLASHC_SUCCESS) return st;
    *bytes = backend_workspace_size(&p);
    return FLASHC_SUCCESS;
}

flashc_status flashc_attention_backward(const flashc_backward_args *args) {
    flashc_clear_error();
    flashc_problem p;
    flashc_status st = flashc_validate_backward(args, &p);
    if (st != FLASHC_SUCCESS) return st;
    size_t required = backend_workspace_size(&p);
    st = flashc_validate_workspace(args, required);
    if (st != FLASHC_SUCCESS) return st;
    if (required) {
        uintptr_t base = (uintptr_t)args->workspace;
        uintptr_t aligned = (base + FLASHC_WORKSPACE_ALIGN - 1) & ~(uintptr_t)(FLASHC_WORKSPACE_ALIGN - 1);
        p.workspace = (void *)aligned;
        p.workspace_bytes = args->workspace_bytes - (size_t)(aligned - base);
    }
#ifdef FLASHC_HAVE_CUDA
    if (p.is_cuda) return flashc_cuda_backward(&p);
#endif
    return flashc_cpu_backward(&p);
}
