/* The device mirror of a test case: every host allocation copied to the
 * GPU, the same views over the copies, calls on the case's stream, and the
 * outputs copied back whole. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "test_cuda_support.h"

static int cuda_ok(cudaError_t err, const char *what) {
    if (err == cudaSuccess) return 1;
    fprintf(stderr, "FAIL CUDA runtime: %s: %s (%s)\n", what, cudaGetErrorString(err),
            cudaGetErrorName(err));
    return 0;
}

/* Shared by every case, made once before any case runs (cases may run on
 * several host threads): the side stream and the delay buffer. */
static cudaStream_t side_stream = NULL;
static void *delay_buffer = NULL;
static const size_t delay_bytes = 64u << 20;

static void prepare_shared(void) {
    static int prepared = 0;
    if (prepared) return;
    prepared = 1;
    if (!cuda_ok(cudaStreamCreateWithFlags(&side_stream, cudaStreamNonBlocking),
                 "cudaStreamCreateWithFlags"))
        side_stream = NULL;
    if (!cuda_ok(cudaMalloc(&delay_buffer, delay_bytes), "cudaMalloc (delay buffer)"))
        delay_buffer = NULL;
}

int tcuda_available(void) {
    if (!flashc_cuda_available()) return 0;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return 0;
    prepare_shared();
    return 1;
}

void *tcuda_side_stream(void) { return (void *)side_stream; }

/* Work queued ahead of a call on the side stream: a call that launched
 * anywhere else would run before or beside it, and the copy back (queued
 * on the side stream after the call) would see poison or stale bytes. */
static void queue_delay(cudaStream_t stream) {
    if (!stream || !delay_buffer) return;
    cuda_ok(cudaMemsetAsync(delay_buffer, 0x5A, delay_bytes, stream), "cudaMemsetAsync (delay)");
}

static test_alloc *allocation(test_case *tc, int i) {
    test_alloc *all[TCUDA_ALLOCS] = {&tc->a_q,    &tc->a_k,      &tc->a_v,    &tc->a_out,
                                     &tc->a_lse,  &tc->a_sdmask, &tc->a_dout, &tc->a_dlse,
                                     &tc->a_dq,   &tc->a_dk,     &tc->a_dv,   &tc->a_cu_q,
                                     &tc->a_cu_k, &tc->a_seqused, &tc->a_alibi};
    return all[i];
}

static int allocation_index(const tcuda_case *c, const test_alloc *a) {
    for (int i = 0; i < TCUDA_ALLOCS; ++i)
        if (allocation((test_case *)&c->tc, i) == a) return i;
    return -1;
}

/* The device twin of host tensor t: same shape and strides, data at the
 * same offset into the mirror of the allocation that holds it. */
static flashc_tensor on_device(tcuda_case *c, const flashc_tensor *t) {
    flashc_tensor d = *t;
    d.device.type = FLASHC_DEVICE_CUDA;
    d.device.index = 0;
    const unsigned char *p = t->data;
    for (int i = 0; i < TCUDA_ALLOCS; ++i) {
        test_alloc *a = allocation(&c->tc, i);
        if (p && a->bytes && p >= a->bytes && p < a->bytes + a->size) {
            d.data = (unsigned char *)c->dev[i] + (p - a->bytes);
            return d;
        }
    }
    d.data = NULL; /* an unused tensor */
    return d;
}

static void build_args(tcuda_case *c) {
    test_case *tc = &c->tc;
    c->q = on_device(c, &tc->q);
    c->k = on_device(c, &tc->k);
    c->v = on_device(c, &tc->v);
    c->out = on_device(c, &tc->out);
    c->lse = on_device(c, &tc->lse);
    c->s_dmask = on_device(c, &tc->s_dmask);
    c->dout = on_device(c, &tc->dout);
    c->dlse = on_device(c, &tc->dlse);
    c->dq = on_device(c, &tc->dq);
    c->dk = on_device(c, &tc->dk);
    c->dv = on_device(c, &tc->dv);
    c->cu_q = on_device(c, &tc->cu_q);
    c->cu_k = on_device(c, &tc->cu_k);
    c->seqused = on_device(c, &tc->seqused);
    c->alibi = on_device(c, &tc->alibi);

    flashc_varlen vl = tc->fwd.varlen;
    if (vl.cu_seqlens_q) vl.cu_seqlens_q = &c->cu_q;
    if (vl.cu_seqlens_k) vl.cu_seqlens_k = &c->cu_k;
    if (vl.seqused_k) vl.seqused_k = &c->seqused;
    flashc_attention_options o = tc->fwd.options;
    if (o.alibi_slopes) o.alibi_slopes = &c->alibi;
    o.stream = c->stream;

    c->fwd = tc->fwd;
    c->fwd.q = &c->q;
    c->fwd.k = &c->k;
    c->fwd.v = &c->v;
    c->fwd.out = &c->out;
    c->fwd.lse = tc->fwd.lse ? &c->lse : NULL;
    c->fwd.s_dmask = tc->fwd.s_dmask ? &c->s_dmask : NULL;
    c->fwd.varlen = vl;
    c->fwd.options = o;

    c->bwd = tc->bwd;
    c->bwd.dout = &c->dout;
    c->bwd.q = &c->q;
    c->bwd.k = &c->k;
    c->bwd.v = &c->v;
    c->bwd.out = &c->out;
    c->bwd.lse = &c->lse;
    c->bwd.dlse = tc->bwd.dlse ? &c->dlse : NULL;
    c->bwd.dq = &c->dq;
    c->bwd.dk = &c->dk;
    c->bwd.dv = &c->dv;
    c->bwd.varlen = vl;
    c->bwd.options = o;
    c->bwd.workspace = NULL;
    c->bwd.workspace_bytes = 0;
}

int tcuda_case_upload(tcuda_case *c) {
    for (int i = 0; i < TCUDA_ALLOCS; ++i) {
        test_alloc *a = allocation(&c->tc, i);
        if (c->dev[i] && c->dev_size[i] != a->size) {
            cudaFree(c->dev[i]);
            c->dev[i] = NULL;
            c->dev_size[i] = 0;
        }
        if (!a->bytes) continue;
        if (!c->dev[i]) {
            if (!cuda_ok(cudaMalloc(&c->dev[i], a->size), "cudaMalloc")) return -1;
            c->dev_size[i] = a->size;
        }
        if (!cuda_ok(cudaMemcpy(c->dev[i], a->bytes, a->size, cudaMemcpyHostToDevice),
                     "cudaMemcpy to the device"))
            return -1;
    }
    /* A copy from pageable memory may return before its DMA is done, and
     * the side stream does not wait for the default one. */
    if (!cuda_ok(cudaStreamSynchronize(NULL), "cudaStreamSynchronize after the uploads")) return -1;
    build_args(c);
    return 0;
}

void tcuda_case_free(tcuda_case *c) {
    for (int i = 0; i < TCUDA_ALLOCS; ++i)
        if (c->dev[i]) cudaFree(c->dev[i]);
    if (c->workspace) cudaFree(c->workspace);
    if (c->scratch) cudaFree(c->scratch);
    test_case_free(&c->tc);
    memset(c, 0, sizeof *c);
}

static int poison(tcuda_case *c, test_alloc *a) {
    int i = allocation_index(c, a);
    if (i < 0 || !c->dev[i]) return 0;
    return cuda_ok(cudaMemsetAsync(c->dev[i], 0xFF, c->dev_size[i], (cudaStream_t)c->stream),
                   "cudaMemsetAsync (poison)")
               ? 0
               : -1;
}

/* Copy allocation a back into its host bytes, on the case's stream. */
static int fetch_into(const tcuda_case *c, const test_alloc *a, unsigned char *host) {
    int i = allocation_index(c, a);
    if (i < 0 || !c->dev[i]) return 0;
    if (!cuda_ok(cudaMemcpyAsync(host, c->dev[i], c->dev_size[i], cudaMemcpyDeviceToHost,
                                 (cudaStream_t)c->stream),
                 "cudaMemcpyAsync to the host") ||
        !cuda_ok(cudaStreamSynchronize((cudaStream_t)c->stream), "cudaStreamSynchronize"))
        return -1;
    return 0;
}

unsigned char *tcuda_fetch(const tcuda_case *c, const test_alloc *a) {
    unsigned char *copy = malloc(a->size ? a->size : 1);
    if (copy && fetch_into(c, a, copy) != 0) {
        free(copy);
        return NULL;
    }
    return copy;
}

/* Wait for the call's stream; a kernel fault surfaces here. */
static flashc_status finish(tcuda_case *c, flashc_status st) {
    if (!cuda_ok(cudaStreamSynchronize((cudaStream_t)c->stream), "cudaStreamSynchronize after the call"))
        return FLASHC_ERROR_BACKEND;
    return st;
}

/* The forward's allocator (context: the case): the case's scratch, grown
 * when too small, poisoned on the call's stream before the kernels that
 * use it are queued. */
static void *scratch_allocate(void *context, size_t bytes, flashc_device device) {
    tcuda_case *c = context;
    (void)device;
    ++c->scratch_requests;
    if (bytes > c->scratch_bytes) {
        if (c->scratch) cudaFree(c->scratch);
        c->scratch = NULL;
        c->scratch_bytes = 0;
        if (!cuda_ok(cudaMalloc(&c->scratch, bytes), "cudaMalloc of the forward's scratch")) return NULL;
        c->scratch_bytes = bytes;
    }
    if (!cuda_ok(cudaMemsetAsync(c->scratch, 0xFF, bytes, (cudaStream_t)c->stream), "cudaMemsetAsync (poison)"))
        return NULL;
    return c->scratch;
}

flashc_status tcuda_forward(tcuda_case *c) {
    test_case *tc = &c->tc;
    queue_delay((cudaStream_t)c->stream);
    if (poison(c, &tc->a_out) || poison(c, &tc->a_lse) || poison(c, &tc->a_sdmask))
        return FLASHC_ERROR_BACKEND;
    flashc_status st = finish(c, flashc_attention_forward_allocating(&c->fwd, scratch_allocate, c));
    if (fetch_into(c, &tc->a_out, tc->a_out.bytes) || fetch_into(c, &tc->a_lse, tc->a_lse.bytes) ||
        fetch_into(c, &tc->a_sdmask, tc->a_sdmask.bytes))
        return FLASHC_ERROR_BACKEND;
    return st;
}

flashc_status tcuda_backward(tcuda_case *c) {
    test_case *tc = &c->tc;
    queue_delay((cudaStream_t)c->stream);
    if (poison(c, &tc->a_dq) || poison(c, &tc->a_dk) || poison(c, &tc->a_dv))
        return FLASHC_ERROR_BACKEND;
    size_t bytes = 0;
    c->bwd.workspace = NULL;
    c->bwd.workspace_bytes = 0;
    flashc_status st = flashc_attention_backward_workspace_size(&c->bwd, &bytes);
    if (st == FLASHC_SUCCESS) {
        if (c->workspace) cudaFree(c->workspace);
        c->workspace = NULL;
        /* exactly the reported size, so a memory checker sees any overrun */
        if (!cuda_ok(cudaMalloc(&c->workspace, bytes ? bytes : 1), "cudaMalloc (workspace)") ||
            !cuda_ok(cudaMemsetAsync(c->workspace, 0xFF, bytes ? bytes : 1, (cudaStream_t)c->stream),
                     "cudaMemsetAsync (workspace)"))
            return FLASHC_ERROR_BACKEND;
        c->workspace_bytes = bytes;
        c->bwd.workspace = c->workspace;
        c->bwd.workspace_bytes = bytes;
        st = flashc_attention_backward(&c->bwd);
    }
    st = finish(c, st);
    if (fetch_into(c, &tc->a_dq, tc->a_dq.bytes) || fetch_into(c, &tc->a_dk, tc->a_dk.bytes) ||
        fetch_into(c, &tc->a_dv, tc->a_dv.bytes))
        return FLASHC_ERROR_BACKEND;
    return st;
}

int tcuda_workspace_untouched(const tcuda_case *c) {
    if (!c->workspace || c->workspace_bytes == 0) return 1;
    unsigned char *copy = malloc(c->workspace_bytes);
    if (!copy) return 0;
    int ok = cuda_ok(cudaMemcpy(copy, c->workspace, c->workspace_bytes, cudaMemcpyDeviceToHost),
                     "cudaMemcpy (workspace)");
    for (size_t i = 0; ok && i < c->workspace_bytes; ++i) ok = copy[i] == 0xFF;
    free(copy);
    return ok;
}

int tcuda_check_repeatable(tcuda_case *c, void *stream) {
    test_case *tc = &c->tc;
    test_alloc *outs[3] = {&tc->a_out, &tc->a_lse, &tc->a_sdmask};
    const char *names[3] = {"out", "lse", "s_dmask"};
    unsigned char *first[3];
    for (int i = 0; i < 3; ++i) {
        first[i] = malloc(outs[i]->size ? outs[i]->size : 1);
        if (first[i]) memcpy(first[i], outs[i]->bytes, outs[i]->size);
    }
    void *own = c->stream;
    c->stream = stream;
    c->fwd.options.stream = stream;
    flashc_status st = tcuda_forward(c);
    c->stream = own;
    c->fwd.options.stream = own;
    int fails = 0;
    char desc[768];
    test_config_describe(&tc->cfg, desc, sizeof desc);
    if (st != FLASHC_SUCCESS) {
        fprintf(stderr, "FAIL repeated forward returned %s (%s) [%s]\n", flashc_status_string(st),
                flashc_last_error_message(), desc);
        ++fails;
    }
    for (int i = 0; i < 3 && !fails; ++i) {
        if (!first[i] || memcmp(first[i], outs[i]->bytes, outs[i]->size) == 0) continue;
        size_t at = 0;
        while (at < outs[i]->size && first[i][at] == outs[i]->bytes[at]) ++at;
        fprintf(stderr,
                "FAIL forward not bit-reproducible: %s differs from the first run at byte %zu of "
                "%zu (second run on the %s stream) [%s] input seed %llu\n",
                names[i], at, outs[i]->size, stream ? "side" : "default", desc,
                (unsigned long long)tc->seed);
        ++fails;
    }
    for (int i = 0; i < 3; ++i) free(first[i]);
    return fails;
}
