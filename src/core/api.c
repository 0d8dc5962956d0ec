/* The public entry points: validate (validate.c), then hand the problem to
 * the backend of the tensors' device. */
#include <stdint.h>
#include <stdlib.h>

#include "backend.h"
#include "error.h"
#include "validate.h"

/* The backward workspace handed to a backend is aligned to this; the size
 * reported to callers includes the slack, so any caller pointer works. */
#define FLASHC_WORKSPACE_ALIGN 64

/* The first FLASHC_WORKSPACE_ALIGN-aligned address at or after `p`. */
static uintptr_t align_workspace(void *p) {
    return ((uintptr_t)p + FLASHC_WORKSPACE_ALIGN - 1) & ~(uintptr_t)(FLASHC_WORKSPACE_ALIGN - 1);
}

/* What a caller must provide for `bytes` aligned bytes (0 stays 0). */
static size_t with_alignment_slack(size_t bytes) { return bytes ? bytes + FLASHC_WORKSPACE_ALIGN : 0; }

const char *flashc_version(void) { return FLASHC_VERSION_STRING; }

int flashc_cuda_available(void) {
#ifdef FLASHC_HAVE_CUDA
    return flashc_cuda_device_count() > 0;
#else
    return 0;
#endif
}

flashc_status flashc_attention_forward_allocating(const flashc_forward_args *args,
                                                  flashc_workspace_allocator allocate, void *context) {
    flashc_clear_error();
    flashc_problem p;
    flashc_status st = flashc_validate_forward(args, &p);
    if (st != FLASHC_SUCCESS) return st;
#ifdef FLASHC_HAVE_CUDA
    if (p.is_cuda) {
        p.scratch_allocate = allocate;
        p.scratch_context = context;
        return flashc_cuda_forward(&p);
    }
#endif
    (void)allocate;
    (void)context;
    return flashc_cpu_forward(&p);
}

flashc_status flashc_attention_forward(const flashc_forward_args *args) {
    return flashc_attention_forward_allocating(args, NULL, NULL);
}

static size_t backend_workspace_size(const flashc_problem *p) {
    size_t bytes;
#ifdef FLASHC_HAVE_CUDA
    if (p->is_cuda)
        bytes = flashc_cuda_backward_workspace_size(p);
    else
#endif
        bytes = flashc_cpu_backward_workspace_size(p);
    return with_alignment_slack(bytes);
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

/* The backward of a validated problem, with `required` bytes (as
 * backend_workspace_size reports them) of workspace at `workspace`. */
static flashc_status run_backward(flashc_problem *p, void *workspace, size_t bytes,
                                  size_t required) {
    if (required) {
        uintptr_t aligned = align_workspace(workspace);
        p->workspace = (void *)aligned;
        p->workspace_bytes = bytes - (size_t)(aligned - (uintptr_t)workspace);
    }
#ifdef FLASHC_HAVE_CUDA
    if (p->is_cuda) return flashc_cuda_backward(p);
#endif
    return flashc_cpu_backward(p);
}

flashc_status flashc_attention_backward(const flashc_backward_args *args) {
    flashc_clear_error();
    flashc_problem p;
    flashc_status st = flashc_validate_backward(args, &p);
    if (st != FLASHC_SUCCESS) return st;
    size_t required = backend_workspace_size(&p);
    st = flashc_validate_workspace(args, required);
    if (st != FLASHC_SUCCESS) return st;
    return run_backward(&p, args->workspace, args->workspace_bytes, required);
}

flashc_status flashc_attention_backward_allocating(const flashc_backward_args *args,
                                                   flashc_workspace_allocator allocate,
                                                   void *context) {
    flashc_clear_error();
    flashc_problem p;
    flashc_status st = flashc_validate_backward(args, &p);
    if (st != FLASHC_SUCCESS) return st;
    if (args->workspace || args->workspace_bytes)
        return flashc_fail(FLASHC_ERROR_WORKSPACE,
                           "workspace: must be NULL with workspace_bytes 0 (the allocator "
                           "provides it), got %p and %zu bytes",
                           args->workspace, args->workspace_bytes);
    size_t required = backend_workspace_size(&p);
    if (required == 0) return run_backward(&p, NULL, 0, 0);
    if (!allocate && p.is_cuda)
        return flashc_fail(FLASHC_ERROR_WORKSPACE,
                           "allocate: is NULL, but the workspace of CUDA tensors (%zu bytes) "
                           "must come from the caller's stream-ordered allocator",
                           required);
    flashc_device device = {p.is_cuda ? FLASHC_DEVICE_CUDA : FLASHC_DEVICE_CPU,
                            p.is_cuda ? p.device_index : 0};
    if (allocate) {
        void *workspace = allocate(context, required, device);
        if (!workspace)
            return flashc_fail(FLASHC_ERROR_WORKSPACE,
                               "allocate: returned NULL for %zu bytes of workspace", required);
        return run_backward(&p, workspace, required, required);
    }
    void *owned = malloc(required);
    if (!owned)
        return flashc_fail(FLASHC_ERROR_WORKSPACE, "workspace: cannot allocate %zu bytes",
                           required);
    st = run_backward(&p, owned, required, required);
    free(owned);
    return st;
}

/* ---- attention over a KV cache ------------------------------------------- */

/* The workspace of a KV-cache call: the rotated q (when rotary is on),
 * then the backend's scratch, each FLASHC_WORKSPACE_ALIGN-aligned. */
static size_t kvcache_q_bytes(const flashc_kvcache_problem *kp) {
    const flashc_problem *p = &kp->attn;
    if (!kp->rotary_dim) return 0;
    size_t bytes = (size_t)(p->batch * p->seqlen_q * p->nheads * p->head_dim) * flashc_dtype_size(p->dtype);
    return (bytes + FLASHC_WORKSPACE_ALIGN - 1) / FLASHC_WORKSPACE_ALIGN * FLASHC_WORKSPACE_ALIGN;
}

static size_t kvcache_backend_bytes(const flashc_kvcache_problem *kp) {
#ifdef FLASHC_HAVE_CUDA
    if (kp->attn.is_cuda) return flashc_cuda_kvcache_workspace_size(kp);
#endif
    (void)kp;
    return 0;
}

static size_t kvcache_workspace_size(const flashc_kvcache_problem *kp) {
    return with_alignment_slack(kvcache_q_bytes(kp) + kvcache_backend_bytes(kp));
}

flashc_status flashc_attention_kvcache_workspace_size(const flashc_kvcache_args *args,
                                                      size_t *bytes) {
    flashc_clear_error();
    if (!bytes) return flashc_fail(FLASHC_ERROR_NULL_POINTER, "bytes: is NULL");
    flashc_kvcache_problem kp;
    flashc_status st = flashc_validate_kvcache(args, &kp);
    if (st != FLASHC_SUCCESS) return st;
    *bytes = kvcache_workspace_size(&kp);
    return FLASHC_SUCCESS;
}

static flashc_status run_kvcache(flashc_kvcache_problem *kp, void *workspace, size_t bytes) {
    if (workspace) {
        uintptr_t aligned = align_workspace(workspace);
        size_t q_bytes = kvcache_q_bytes(kp);
        kp->q_rotated = q_bytes ? (void *)aligned : NULL;
        kp->workspace = (void *)(aligned + q_bytes);
        kp->workspace_bytes = bytes - (size_t)(aligned - (uintptr_t)workspace) - q_bytes;
    }
#ifdef FLASHC_HAVE_CUDA
    if (kp->attn.is_cuda) return flashc_cuda_kvcache(kp);
#endif
    return flashc_cpu_kvcache(kp);
}

flashc_status flashc_attention_kvcache(const flashc_kvcache_args *args) {
    flashc_clear_error();
    flashc_kvcache_problem kp;
    flashc_status st = flashc_validate_kvcache(args, &kp);
    if (st != FLASHC_SUCCESS) return st;
    size_t required = kvcache_workspace_size(&kp);
    if (required == 0) return run_kvcache(&kp, NULL, 0);
    if (args->workspace) {
        if (args->workspace_bytes < required)
            return flashc_fail(FLASHC_ERROR_WORKSPACE, "workspace_bytes: %zu bytes given, %zu required",
                               args->workspace_bytes, required);
        return run_kvcache(&kp, args->workspace, args->workspace_bytes);
    }
    if (kp.attn.is_cuda)
        return flashc_fail(FLASHC_ERROR_WORKSPACE,
                           "workspace: is NULL but %zu bytes are required "
                           "(flashc_attention_kvcache_workspace_size); a CUDA call allocates nothing",
                           required);
    void *owned = malloc(required);
    if (!owned)
        return flashc_fail(FLASHC_ERROR_WORKSPACE, "workspace: cannot allocate %zu bytes", required);
    st = run_kvcache(&kp, owned, required);
    free(owned);
    return st;
}
