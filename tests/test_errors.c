/* Every invalid argument: the call returns the status flashc.h documents
 * for it, a message naming the argument (as spelled in flashc.h), and
 * writes nothing: every byte of every buffer (outputs poisoned beforehand,
 * inputs, the workspace, the returned size) is as it was. Each case starts
 * from a valid problem and breaks exactly one thing; the forward, the
 * workspace-size query and the backward are each checked where the
 * argument applies, the forward's cases through
 * flashc_attention_forward_allocating and the backward's through the
 * one-call backward (flashc_attention_backward_allocating) too, neither
 * calling its allocator. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

enum { FWD = 1, BWD = 2, BOTH = 3 };
enum { BATCHED = 0, VARLEN = 1, BATCHED_F64 = 2, FIXTURES = 3 };

#define BIG_BYTES (8u << 20)

typedef struct fixture {
    test_case tc;
    flashc_tensor q, k, v, out, lse, s_dmask, dout, dlse, dq, dk, dv, cu_q, cu_k, seqused, alibi;
    flashc_forward_args f;
    flashc_backward_args g;
    size_t ws_needed;
    unsigned char *ws;
    test_alloc big;           /* room for enlarged shapes */
    int32_t scratch[3][TEST_MAX_BATCH + 2];
    unsigned char *valid_out, *valid_lse; /* the forward's results, for the backward */
    int workspace_case;       /* the query must succeed: only the backward fails */
} fixture;

static fixture fixtures[FIXTURES];

/* ---- Fixtures --------------------------------------------------------- */

static test_config fixture_config(int kind) {
    test_config c = test_config_default();
    c.dtype = kind == BATCHED_F64 ? FLASHC_DTYPE_FLOAT64 : FLASHC_DTYPE_FLOAT32;
    c.batch = 2;
    c.nheads = 4;
    c.nheads_k = 2;
    c.d = 16;
    c.dv = 12;
    c.seqlen_q = 9;
    c.seqlen_k = 11;
    c.alibi = 1;
    c.with_lse = 1;
    c.with_sdmask = 1;
    c.with_dlse = 1;
    if (kind == VARLEN) {
        c.varlen = 1;
        c.batch = 3;
        c.lens_q[0] = 4, c.lens_q[1] = 0, c.lens_q[2] = 5;   /* cu_q {0, 4, 4, 9} */
        c.lens_k[0] = 3, c.lens_k[1] = 6, c.lens_k[2] = 2;   /* cu_k {0, 3, 9, 11} */
        c.use_seqused_k = 1;
        c.seqused_k[0] = 2, c.seqused_k[1] = 6, c.seqused_k[2] = 1;
        c.alibi = 2;
        c.with_sdmask = 0;
    }
    return c;
}

static void fixture_reset(fixture *x) {
    test_case *tc = &x->tc;
    x->q = tc->q, x->k = tc->k, x->v = tc->v, x->out = tc->out, x->lse = tc->lse;
    x->s_dmask = tc->s_dmask, x->dout = tc->dout, x->dlse = tc->dlse;
    x->dq = tc->dq, x->dk = tc->dk, x->dv = tc->dv;
    x->cu_q = tc->cu_q, x->cu_k = tc->cu_k, x->seqused = tc->seqused, x->alibi = tc->alibi;
    x->f = tc->fwd;
    x->f.q = &x->q, x->f.k = &x->k, x->f.v = &x->v, x->f.out = &x->out;
    x->f.lse = &x->lse;
    x->f.s_dmask = tc->cfg.with_sdmask ? &x->s_dmask : NULL;
    x->g = tc->bwd;
    x->g.dout = &x->dout, x->g.q = &x->q, x->g.k = &x->k, x->g.v = &x->v, x->g.out = &x->out;
    x->g.lse = &x->lse, x->g.dlse = &x->dlse, x->g.dq = &x->dq, x->g.dk = &x->dk, x->g.dv = &x->dv;
    x->g.workspace = x->ws;
    x->g.workspace_bytes = x->ws_needed;
    if (tc->cfg.varlen) {
        flashc_varlen vl = {&x->cu_q, &x->cu_k, &x->seqused, tc->fwd.varlen.max_seqlen_q,
                            tc->fwd.varlen.max_seqlen_k, NULL};
        x->f.varlen = vl;
        x->g.varlen = vl;
    }
    x->f.options.alibi_slopes = &x->alibi;
    x->g.options.alibi_slopes = &x->alibi;
    x->workspace_case = 0;
}

static int setup(void **state) {
    (void)state;
    for (int kind = 0; kind < FIXTURES; ++kind) {
        fixture *x = &fixtures[kind];
        memset(x, 0, sizeof *x);
        test_config c = fixture_config(kind);
        if (test_case_init(&x->tc, &c, test_seed("errors fixture", (uint64_t)kind)) != 0) return -1;
        if (test_case_forward(&x->tc) != FLASHC_SUCCESS) return -1;
        if (flashc_attention_backward_workspace_size(&x->tc.bwd, &x->ws_needed) != FLASHC_SUCCESS)
            return -1;
        x->ws = malloc(x->ws_needed ? x->ws_needed : 1);
        test_alloc_init(&x->big, BIG_BYTES);
        x->valid_out = malloc(x->tc.a_out.size);
        x->valid_lse = malloc(x->tc.a_lse.size);
        memcpy(x->valid_out, x->tc.a_out.bytes, x->tc.a_out.size);
        memcpy(x->valid_lse, x->tc.a_lse.bytes, x->tc.a_lse.size);
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    for (int kind = 0; kind < FIXTURES; ++kind) {
        fixture *x = &fixtures[kind];
        test_case_free(&x->tc);
        free(x->ws);
        test_alloc_free(&x->big);
        free(x->valid_out);
        free(x->valid_lse);
    }
    return 0;
}

/* ---- Snapshots of every byte the call could touch -------------------- */

typedef struct snapshot {
    unsigned char *copy[24];
    const unsigned char *where[24];
    size_t size[24];
    int count;
} snapshot;

static void snap_add(snapshot *s, const void *where, size_t size) {
    if (!where || !size) return;
    s->where[s->count] = where;
    s->size[s->count] = size;
    s->copy[s->count] = malloc(size);
    memcpy(s->copy[s->count], where, size);
    ++s->count;
}

static void snap_take(snapshot *s, fixture *x) {
    test_case *tc = &x->tc;
    test_alloc *all[] = {&tc->a_q,  &tc->a_k,    &tc->a_v,    &tc->a_out,  &tc->a_lse,
                         &tc->a_sdmask, &tc->a_dout, &tc->a_dlse, &tc->a_dq, &tc->a_dk,
                         &tc->a_dv, &tc->a_cu_q, &tc->a_cu_k, &tc->a_seqused, &tc->a_alibi,
                         &x->big};
    s->count = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) snap_add(s, all[i]->bytes, all[i]->size);
    snap_add(s, x->ws, x->ws_needed);
    snap_add(s, x->scratch, sizeof x->scratch);
}

/* Index of the first region that changed, or -1. */
static int snap_changed(const snapshot *s) {
    for (int i = 0; i < s->count; ++i)
        if (memcmp(s->copy[i], s->where[i], s->size[i]) != 0) return i;
    return -1;
}

static void snap_free(snapshot *s) {
    for (int i = 0; i < s->count; ++i) free(s->copy[i]);
    s->count = 0;
}

/* ---- Cases ------------------------------------------------------------ */

typedef struct error_case {
    const char *what;
    int fixture;
    int calls;                   /* FWD, BWD or BOTH */
    void (*mutate)(fixture *x);
    flashc_status expect;
    flashc_status also;          /* a second acceptable status, where flashc.h
                                    leaves the choice open (0: none) */
    const char *argument;        /* substring the message must contain */
} error_case;

static int check_result(const error_case *e, const char *call, flashc_status st) {
    const char *msg = flashc_last_error_message();
    int ok = st == e->expect || (e->also != FLASHC_SUCCESS && st == e->also);
    if (ok && (!msg || !msg[0])) ok = 0;
    if (ok && e->argument && !strstr(msg, e->argument)) ok = 0;
    if (!ok)
        fprintf(stderr, "FAIL %s, %s: expected %s%s%s with a message naming \"%s\"; got %s, \"%s\"\n",
                e->what, call, flashc_status_string(e->expect), e->also ? " or " : "",
                e->also ? flashc_status_string(e->also) : "", e->argument ? e->argument : "",
                flashc_status_string(st), msg ? msg : "(null)");
    return !ok;
}

static int check_untouched(const error_case *e, const char *call, const snapshot *s) {
    int changed = snap_changed(s);
    if (changed < 0) return 0;
    fprintf(stderr, "FAIL %s, %s: the call wrote to memory (region %d) though it failed\n", e->what,
            call, changed);
    return 1;
}

/* An allocator that counts its calls and never provides memory. */
static void *counting_allocate(void *context, size_t bytes, flashc_device device) {
    (void)bytes, (void)device;
    *(int *)context += 1;
    return NULL;
}

static int run_error_case(const error_case *e) {
    fixture *x = &fixtures[e->fixture];
    int fails = 0;
    snapshot s;
    if (e->calls & FWD) {
        fixture_reset(x);
        e->mutate(x);
        test_alloc_poison(&x->tc.a_out);
        test_alloc_poison(&x->tc.a_lse);
        test_alloc_poison(&x->tc.a_sdmask);
        snap_take(&s, x);
        flashc_status st = flashc_attention_forward(&x->f);
        fails += check_result(e, "forward", st);
        int calls = 0;
        st = flashc_attention_forward_allocating(&x->f, counting_allocate, &calls);
        fails += check_result(e, "forward_allocating", st);
        if (calls) {
            fprintf(stderr, "FAIL %s, forward_allocating: the allocator was called\n", e->what);
            ++fails;
        }
        fails += check_untouched(e, "forward", &s);
        snap_free(&s);
        memcpy(x->tc.a_out.bytes, x->valid_out, x->tc.a_out.size);
        memcpy(x->tc.a_lse.bytes, x->valid_lse, x->tc.a_lse.size);
    }
    if (e->calls & BWD) {
        fixture_reset(x);
        e->mutate(x);
        test_alloc_poison(&x->tc.a_dq);
        test_alloc_poison(&x->tc.a_dk);
        test_alloc_poison(&x->tc.a_dv);
        if (x->ws) memset(x->ws, 0xFF, x->ws_needed);
        snap_take(&s, x);
        size_t bytes = 12345;
        flashc_status st = flashc_attention_backward_workspace_size(&x->g, &bytes);
        if (x->workspace_case) {
            /* the query ignores the workspace fields */
            if (st != FLASHC_SUCCESS || bytes != x->ws_needed) {
                fprintf(stderr, "FAIL %s, workspace_size: got %s, %zu bytes (want %zu)\n", e->what,
                        flashc_status_string(st), bytes, x->ws_needed);
                ++fails;
            }
        } else {
            fails += check_result(e, "backward_workspace_size", st);
            if (bytes != 12345) {
                fprintf(stderr, "FAIL %s, backward_workspace_size wrote *bytes (%zu) though it failed\n",
                        e->what, bytes);
                ++fails;
            }
        }
        st = flashc_attention_backward(&x->g);
        fails += check_result(e, "backward", st);
        if (!x->workspace_case) {
            /* the one-call backward rejects it alike, without allocating */
            flashc_backward_args one = x->g;
            one.workspace = NULL;
            one.workspace_bytes = 0;
            int calls = 0;
            st = flashc_attention_backward_allocating(&one, counting_allocate, &calls);
            fails += check_result(e, "backward_allocating", st);
            if (calls) {
                fprintf(stderr, "FAIL %s, backward_allocating: the allocator was called\n", e->what);
                ++fails;
            }
        }
        fails += check_untouched(e, "backward", &s);
        snap_free(&s);
    }
    return fails;
}

/* ---- Mutations -------------------------------------------------------- */

#define M(name, ...)                                                                              \
    static void name(fixture *x) {                                                                \
        (void)x;                                                                                  \
        __VA_ARGS__;                                                                              \
    }

/* Give t the contiguous shape `shape` (rank r) over the big scratch buffer. */
static void regrow(fixture *x, flashc_tensor *t, int r, int64_t s0, int64_t s1, int64_t s2, int64_t s3) {
    int64_t shape[4] = {s0, s1, s2, s3};
    flashc_tensor n = flashc_tensor_contiguous(x->big.bytes, t->dtype, t->device, r, shape);
    *t = n;
}

/* Replace an int32 vector's data with `values` (in the fixture's scratch). */
static void int_values(fixture *x, flashc_tensor *t, int slot, const int32_t *values, int n) {
    memcpy(x->scratch[slot], values, (size_t)n * sizeof(int32_t));
    t->data = x->scratch[slot];
    t->shape[0] = n;
}

static flashc_device cuda0(void) {
    flashc_device d = {FLASHC_DEVICE_CUDA, 0};
    return d;
}

/* null pointers */
M(null_q, x->f.q = NULL; x->g.q = NULL)
M(null_k, x->f.k = NULL; x->g.k = NULL)
M(null_v, x->f.v = NULL; x->g.v = NULL)
M(null_out, x->f.out = NULL; x->g.out = NULL)
M(null_lse_bwd, x->g.lse = NULL)
M(null_dout, x->g.dout = NULL)
M(null_dq, x->g.dq = NULL)
M(null_dk, x->g.dk = NULL)
M(null_dv, x->g.dv = NULL)
M(null_q_data, x->q.data = NULL)
M(null_k_data, x->k.data = NULL)
M(null_v_data, x->v.data = NULL)
M(null_out_data, x->out.data = NULL)
M(null_lse_data, x->lse.data = NULL)
M(null_sdmask_data, x->s_dmask.data = NULL)
M(null_dout_data, x->dout.data = NULL)
M(null_dlse_data, x->dlse.data = NULL)
M(null_dq_data, x->dq.data = NULL)
M(null_dk_data, x->dk.data = NULL)
M(null_dv_data, x->dv.data = NULL)
M(null_alibi_data, x->alibi.data = NULL)
M(null_cu_k, x->f.varlen.cu_seqlens_k = NULL; x->g.varlen.cu_seqlens_k = NULL)
M(null_cu_q_only, x->f.varlen.cu_seqlens_q = NULL; x->g.varlen.cu_seqlens_q = NULL)
M(null_cu_q_data, x->cu_q.data = NULL)
M(null_cu_k_data, x->cu_k.data = NULL)
M(null_seqused_data, x->seqused.data = NULL)

/* ranks */
M(rank_q3, x->q.rank = 3)
M(rank_k3, x->k.rank = 3)
M(rank_v5, x->v.rank = FLASHC_MAX_RANK + 1)
M(rank_q0, x->q.rank = 0)
M(rank_out3, x->out.rank = 3)
M(rank_lse2, x->lse.rank = 2)
M(rank_sdmask3, x->s_dmask.rank = 3)
M(rank_alibi3, x->alibi.rank = 3; x->alibi.shape[2] = 1; x->alibi.stride[2] = 1)
M(rank_dout3, x->dout.rank = 3)
M(rank_dq3, x->dq.rank = 3)
M(rank_dk0, x->dk.rank = 0)
M(rank_dv3, x->dv.rank = 3)
M(rank_dlse4, x->dlse.rank = 4; x->dlse.shape[3] = 1; x->dlse.stride[3] = 1)
M(rank_varlen_q4, x->q.rank = 4; x->q.shape[3] = x->q.shape[2]; x->q.stride[3] = 1;
  x->q.shape[2] = x->q.shape[1]; x->q.stride[2] = x->q.stride[1]; x->q.shape[1] = x->q.shape[0];
  x->q.stride[1] = x->q.stride[0]; x->q.shape[0] = 1; x->q.stride[0] = 0)
M(rank_cu_q2, x->cu_q.rank = 2; x->cu_q.shape[1] = 1; x->cu_q.stride[1] = 1)
M(rank_seqused2, x->seqused.rank = 2; x->seqused.shape[1] = 1; x->seqused.stride[1] = 1)
M(rank_varlen_lse3, x->lse.rank = 3; x->lse.shape[2] = 1; x->lse.stride[2] = 1)

/* shapes (batched: b 2, sq 9, sk 11, h 4, hk 2, d 16, dv 12) */
M(shape_k_batch, regrow(x, &x->k, 4, 3, 11, 2, 16))
M(shape_k_dim, x->k.shape[3] = 15)
M(shape_v_seqlen, x->v.shape[1] = 10)
M(shape_v_heads, x->v.shape[2] = 1)
M(shape_out_batch, x->out.shape[0] = 1)
M(shape_out_seqlen, x->out.shape[1] = 8)
M(shape_out_heads, x->out.shape[2] = 3)
M(shape_out_dim, x->out.shape[3] = 11)
M(shape_lse_long, regrow(x, &x->lse, 3, 2, 4, 10, 0))
M(shape_lse_heads, x->lse.shape[1] = 3)
M(shape_sdmask_unrounded, x->s_dmask.shape[2] = 9; x->s_dmask.shape[3] = 11)
M(shape_sdmask_big, regrow(x, &x->s_dmask, 4, 2, 4, 128, 256))
M(shape_alibi_long, regrow(x, &x->alibi, 1, 5, 0, 0, 0))
M(shape_alibi_batch, regrow(x, &x->alibi, 2, 3, 4, 0, 0))
M(shape_alibi_batch1, regrow(x, &x->alibi, 2, 1, 4, 0, 0))
M(shape_dout, x->dout.shape[1] = 8)
M(shape_dq, x->dq.shape[2] = 3)
M(shape_dk, x->dk.shape[1] = 10)
M(shape_dv, x->dv.shape[3] = 11)
M(shape_dlse, x->dlse.shape[2] = 8)
M(shape_q_negative, x->q.shape[1] = -1)
M(shape_kv_negative, x->k.shape[1] = -3; x->v.shape[1] = -3)
M(shape_varlen_lse, x->lse.shape[1] = 8)
M(shape_cu_k_length, {
    const int32_t cu[5] = {0, 3, 9, 10, 11};
    int_values(x, &x->cu_k, 1, cu, 5);
})
M(shape_seqused_length, {
    const int32_t used[4] = {2, 6, 1, 1};
    int_values(x, &x->seqused, 2, used, 4);
})

/* strides */
static void stride_last(fixture *x, flashc_tensor *t) {
    t->data = x->big.bytes;
    t->stride[t->rank - 1] = 2;
}
M(stride_q_last, stride_last(x, &x->q))
M(stride_k_last, stride_last(x, &x->k))
M(stride_v_last0, x->v.stride[3] = 0)
M(stride_out_last, stride_last(x, &x->out))
M(stride_dout_last, stride_last(x, &x->dout))
M(stride_dq_last, stride_last(x, &x->dq))
M(stride_dk_last, stride_last(x, &x->dk))
M(stride_dv_last, stride_last(x, &x->dv))
M(stride_q_negative, {
    x->q.data = (float *)x->q.data + (x->q.shape[1] - 1) * x->q.stride[1];
    x->q.stride[1] = -x->q.stride[1];
})
M(stride_out_negative, {
    x->out.data = (float *)x->out.data + (x->out.shape[0] - 1) * x->out.stride[0];
    x->out.stride[0] = -x->out.stride[0];
})
M(stride_out_rows_zero, x->out.stride[1] = 0)
M(stride_out_rows_alias_heads, x->out.stride[1] = x->out.stride[2])
M(stride_lse_zero, x->lse.stride[2] = 0)
M(stride_sdmask_zero, x->s_dmask.stride[3] = 0)
M(stride_dq_rows_zero, x->dq.stride[1] = 0)
M(stride_dk_rows_zero, x->dk.stride[1] = 0)
M(stride_dv_heads_alias, x->dv.stride[2] = 0)

/* head dims */
M(head_dim_0, x->q.shape[3] = 0; x->k.shape[3] = 0; x->dq.shape[3] = 0; x->dk.shape[3] = 0)
M(head_dim_257, {
    regrow(x, &x->q, 4, 2, 9, 4, 257);
    regrow(x, &x->k, 4, 2, 11, 2, 257);
    regrow(x, &x->dq, 4, 2, 9, 4, 257);
    regrow(x, &x->dk, 4, 2, 11, 2, 257);
})
M(head_dim_v0, x->v.shape[3] = 0; x->out.shape[3] = 0; x->dout.shape[3] = 0; x->dv.shape[3] = 0)
M(head_dim_v257, {
    regrow(x, &x->v, 4, 2, 11, 2, 257);
    regrow(x, &x->out, 4, 2, 9, 4, 257);
    regrow(x, &x->dout, 4, 2, 9, 4, 257);
    regrow(x, &x->dv, 4, 2, 11, 2, 257);
})

/* head groups: h 4 with hk 3, and hk 8 > h */
M(groups_3, {
    regrow(x, &x->k, 4, 2, 11, 3, 16);
    regrow(x, &x->v, 4, 2, 11, 3, 12);
    regrow(x, &x->dk, 4, 2, 11, 3, 16);
    regrow(x, &x->dv, 4, 2, 11, 3, 12);
})
M(groups_8, {
    regrow(x, &x->k, 4, 2, 11, 8, 16);
    regrow(x, &x->v, 4, 2, 11, 8, 12);
    regrow(x, &x->dk, 4, 2, 11, 8, 16);
    regrow(x, &x->dv, 4, 2, 11, 8, 12);
})

/* dtypes */
M(dtype_q_unknown, x->q.dtype = (flashc_dtype)99)
M(dtype_all_int32, {
    flashc_tensor *ts[8] = {&x->q, &x->k, &x->v, &x->out, &x->dout, &x->dq, &x->dk, &x->dv};
    for (int i = 0; i < 8; ++i) ts[i]->dtype = FLASHC_DTYPE_INT32;
})
M(dtype_k_half, x->k.dtype = FLASHC_DTYPE_FLOAT16)
M(dtype_v_bf16, x->v.dtype = FLASHC_DTYPE_BFLOAT16)
M(dtype_out_f64, x->out.dtype = FLASHC_DTYPE_FLOAT64; x->out.data = x->big.bytes)
M(dtype_dout_half, x->dout.dtype = FLASHC_DTYPE_FLOAT16)
M(dtype_dq_f64, x->dq.dtype = FLASHC_DTYPE_FLOAT64; x->dq.data = x->big.bytes)
M(dtype_dk_half, x->dk.dtype = FLASHC_DTYPE_FLOAT16)
M(dtype_dv_bf16, x->dv.dtype = FLASHC_DTYPE_BFLOAT16)
M(dtype_lse_f64, x->lse.dtype = FLASHC_DTYPE_FLOAT64; x->lse.data = x->big.bytes)
M(dtype_lse_half, x->lse.dtype = FLASHC_DTYPE_FLOAT16)
M(dtype_lse_f32, x->lse.dtype = FLASHC_DTYPE_FLOAT32)
M(dtype_dlse_f64, x->dlse.dtype = FLASHC_DTYPE_FLOAT64; x->dlse.data = x->big.bytes)
M(dtype_sdmask_half, x->s_dmask.dtype = FLASHC_DTYPE_FLOAT16)
M(dtype_alibi_f64, x->alibi.dtype = FLASHC_DTYPE_FLOAT64; x->alibi.data = x->big.bytes)
M(dtype_alibi_half, x->alibi.dtype = FLASHC_DTYPE_FLOAT16)
M(dtype_cu_q_float, x->cu_q.dtype = FLASHC_DTYPE_FLOAT32)
M(dtype_cu_k_f64, x->cu_k.dtype = FLASHC_DTYPE_FLOAT64; x->cu_k.data = x->big.bytes)
M(dtype_seqused_float, x->seqused.dtype = FLASHC_DTYPE_FLOAT32)

/* devices (this build has no CUDA backend) */
M(device_q, x->q.device = cuda0())
M(device_k, x->k.device = cuda0())
M(device_out, x->out.device = cuda0())
M(device_lse, x->lse.device = cuda0())
M(device_sdmask, x->s_dmask.device = cuda0())
M(device_alibi, x->alibi.device = cuda0())
M(device_dout, x->dout.device = cuda0())
M(device_dq, x->dq.device = cuda0())
M(device_dlse, x->dlse.device = cuda0())
M(device_cu_q, x->cu_q.device = cuda0())
M(device_seqused, x->seqused.device = cuda0())
static void all_cuda(fixture *x) {
    flashc_tensor *ts[] = {&x->q,    &x->k,  &x->v,  &x->out, &x->lse, &x->s_dmask, &x->dout, &x->dlse,
                           &x->dq,   &x->dk, &x->dv, &x->cu_q, &x->cu_k, &x->seqused, &x->alibi};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) ts[i]->device = cuda0();
}
M(device_all_cuda, all_cuda(x))
M(device_all_cuda_but_cu_k, all_cuda(x); x->cu_k.device.type = FLASHC_DEVICE_CPU)

/* cu_seqlens (varlen: cu_q {0, 4, 4, 9}, cu_k {0, 3, 9, 11}, used {2, 6, 1}) */
#define CU(name, tensor, slot, ...)                                                               \
    M(name, {                                                                                     \
        const int32_t values[] = {__VA_ARGS__};                                                   \
        int_values(x, &x->tensor, slot, values, (int)(sizeof values / sizeof values[0]));         \
    })
CU(cu_q_decreasing, cu_q, 0, 0, 4, 3, 9)
CU(cu_k_decreasing, cu_k, 1, 0, 5, 3, 11)
CU(cu_q_past_end, cu_q, 0, 0, 4, 5, 10) /* lengths 4, 1, 5: within max_seqlen_q */
CU(cu_k_past_end, cu_k, 1, 0, 3, 9, 12)
CU(cu_q_negative, cu_q, 0, -1, 4, 4, 9)
CU(seqused_too_long, seqused, 2, 2, 7, 1)
CU(seqused_negative, seqused, 2, -1, 6, 1)
M(max_seqlen_q_small, x->f.varlen.max_seqlen_q = 4; x->g.varlen.max_seqlen_q = 4)
M(max_seqlen_k_small, x->f.varlen.max_seqlen_k = 5; x->g.varlen.max_seqlen_k = 5)
M(max_seqlen_q_negative, x->f.varlen.max_seqlen_q = -1; x->g.varlen.max_seqlen_q = -1)
M(max_seqlen_q_beyond_int32, x->f.varlen.max_seqlen_q = INT64_C(1) << 31;
  x->g.varlen.max_seqlen_q = INT64_C(1) << 31)
M(max_seqlen_k_beyond_int32, x->f.varlen.max_seqlen_k = INT64_C(1) << 40;
  x->g.varlen.max_seqlen_k = INT64_C(1) << 40)
CU(cu_k_negative, cu_k, 1, -2, 3, 9, 11)
M(device_cpu_index_1, x->q.device.index = 1; x->k.device.index = 1; x->v.device.index = 1;
  x->out.device.index = 1; x->lse.device.index = 1; x->s_dmask.device.index = 1;
  x->alibi.device.index = 1; x->dout.device.index = 1; x->dq.device.index = 1;
  x->dk.device.index = 1; x->dv.device.index = 1; x->dlse.device.index = 1)
M(device_unknown_type, x->k.device.type = (flashc_device_type)7)
M(q_rows_short, {
    /* 8 packed rows but cu_seqlens_q ends at 9: every row tensor agrees */
    x->q.shape[0] = 8; x->out.shape[0] = 8; x->dout.shape[0] = 8; x->dq.shape[0] = 8;
    x->lse.shape[1] = 8; x->dlse.shape[1] = 8;
})
M(batched_with_cu_k_only, {
    x->f.varlen.cu_seqlens_k = &x->cu_k;
    x->g.varlen.cu_seqlens_k = &x->cu_k;
    x->cu_k = fixtures[VARLEN].tc.cu_k;
})

/* option values */
#define OPT(name, field, value) M(name, x->f.options.field = value; x->g.options.field = value)
OPT(dropout_negative, dropout_p, -0.1)
OPT(dropout_one, dropout_p, 1.0)
OPT(dropout_big, dropout_p, 1.5)
OPT(dropout_nan, dropout_p, NAN)
OPT(dropout_inf, dropout_p, INFINITY)
OPT(window_left_m2, window_left, -2)
OPT(window_right_m3, window_right, -3)
OPT(window_left_min, window_left, INT64_MIN)
OPT(softcap_negative, softcap, -1.0)
OPT(softcap_nan, softcap, NAN)
OPT(softcap_inf, softcap, INFINITY)
OPT(softcap_minus_inf, softcap, -INFINITY)
OPT(scale_nan, softmax_scale, NAN)
OPT(scale_inf, softmax_scale, INFINITY)
OPT(scale_minus_inf, softmax_scale, -INFINITY)
OPT(threads_negative, num_threads, -1)

/* workspace (backward only; the size query must still succeed) */
M(workspace_short, x->g.workspace_bytes = x->ws_needed - 1; x->workspace_case = 1)
M(workspace_null, x->g.workspace = NULL; x->workspace_case = 1)
M(workspace_null_zero, x->g.workspace = NULL; x->g.workspace_bytes = 0; x->workspace_case = 1)

#define S(x) FLASHC_ERROR_##x
static const error_case cases[] = {
    {"q NULL", BATCHED, BOTH, null_q, S(NULL_POINTER), 0, "q"},
    {"k NULL", BATCHED, BOTH, null_k, S(NULL_POINTER), 0, "k"},
    {"v NULL", BATCHED, BOTH, null_v, S(NULL_POINTER), 0, "v"},
    {"out NULL", BATCHED, BOTH, null_out, S(NULL_POINTER), 0, "out"},
    {"lse NULL in backward", BATCHED, BWD, null_lse_bwd, S(NULL_POINTER), 0, "lse"},
    {"dout NULL", BATCHED, BWD, null_dout, S(NULL_POINTER), 0, "dout"},
    {"dq NULL", BATCHED, BWD, null_dq, S(NULL_POINTER), 0, "dq"},
    {"dk NULL", BATCHED, BWD, null_dk, S(NULL_POINTER), 0, "dk"},
    {"dv NULL", BATCHED, BWD, null_dv, S(NULL_POINTER), 0, "dv"},
    {"q->data NULL", BATCHED, BOTH, null_q_data, S(NULL_POINTER), 0, "q"},
    {"k->data NULL", BATCHED, BOTH, null_k_data, S(NULL_POINTER), 0, "k"},
    {"v->data NULL", BATCHED, BOTH, null_v_data, S(NULL_POINTER), 0, "v"},
    {"out->data NULL", BATCHED, BOTH, null_out_data, S(NULL_POINTER), 0, "out"},
    {"lse->data NULL", BATCHED, BOTH, null_lse_data, S(NULL_POINTER), 0, "lse"},
    {"s_dmask->data NULL", BATCHED, FWD, null_sdmask_data, S(NULL_POINTER), 0, "s_dmask"},
    {"dout->data NULL", BATCHED, BWD, null_dout_data, S(NULL_POINTER), 0, "dout"},
    {"dlse->data NULL", BATCHED, BWD, null_dlse_data, S(NULL_POINTER), 0, "dlse"},
    {"dq->data NULL", BATCHED, BWD, null_dq_data, S(NULL_POINTER), 0, "dq"},
    {"dk->data NULL", BATCHED, BWD, null_dk_data, S(NULL_POINTER), 0, "dk"},
    {"dv->data NULL", BATCHED, BWD, null_dv_data, S(NULL_POINTER), 0, "dv"},
    {"alibi_slopes->data NULL", BATCHED, BOTH, null_alibi_data, S(NULL_POINTER), 0, "alibi_slopes"},
    {"cu_seqlens_k NULL with cu_seqlens_q", VARLEN, BOTH, null_cu_k, S(NULL_POINTER), 0, "cu_seqlens_k"},
    {"cu_seqlens_q NULL with cu_seqlens_k", VARLEN, BOTH, null_cu_q_only, S(NULL_POINTER), 0, "cu_seqlens_q"},
    {"cu_seqlens_k only, batched tensors", BATCHED, BOTH, batched_with_cu_k_only, S(NULL_POINTER), 0, "cu_seqlens_q"},
    {"cu_seqlens_q->data NULL", VARLEN, BOTH, null_cu_q_data, S(NULL_POINTER), 0, "cu_seqlens_q"},
    {"cu_seqlens_k->data NULL", VARLEN, BOTH, null_cu_k_data, S(NULL_POINTER), 0, "cu_seqlens_k"},
    {"seqused_k->data NULL", VARLEN, BOTH, null_seqused_data, S(NULL_POINTER), 0, "seqused_k"},

    {"q rank 3 (batched)", BATCHED, BOTH, rank_q3, S(RANK), 0, "q"},
    {"k rank 3", BATCHED, BOTH, rank_k3, S(RANK), 0, "k"},
    {"v rank 5", BATCHED, BOTH, rank_v5, S(RANK), 0, "v"},
    {"q rank 0", BATCHED, BOTH, rank_q0, S(RANK), 0, "q"},
    {"out rank 3", BATCHED, BOTH, rank_out3, S(RANK), 0, "out"},
    {"lse rank 2 (batched)", BATCHED, BOTH, rank_lse2, S(RANK), 0, "lse"},
    {"s_dmask rank 3", BATCHED, FWD, rank_sdmask3, S(RANK), 0, "s_dmask"},
    {"alibi_slopes rank 3", BATCHED, BOTH, rank_alibi3, S(RANK), 0, "alibi_slopes"},
    {"dout rank 3", BATCHED, BWD, rank_dout3, S(RANK), 0, "dout"},
    {"dq rank 3", BATCHED, BWD, rank_dq3, S(RANK), 0, "dq"},
    {"dk rank 0", BATCHED, BWD, rank_dk0, S(RANK), 0, "dk"},
    {"dv rank 3", BATCHED, BWD, rank_dv3, S(RANK), 0, "dv"},
    {"dlse rank 4", BATCHED, BWD, rank_dlse4, S(RANK), 0, "dlse"},
    {"q rank 4 (varlen)", VARLEN, BOTH, rank_varlen_q4, S(RANK), 0, "q"},
    {"cu_seqlens_q rank 2", VARLEN, BOTH, rank_cu_q2, S(RANK), 0, "cu_seqlens_q"},
    {"seqused_k rank 2", VARLEN, BOTH, rank_seqused2, S(RANK), 0, "seqused_k"},
    {"lse rank 3 (varlen)", VARLEN, BOTH, rank_varlen_lse3, S(RANK), 0, "lse"},

    {"k batch 3 vs q batch 2", BATCHED, BOTH, shape_k_batch, S(SHAPE), 0, "k"},
    {"k head dim 15 vs q 16", BATCHED, BOTH, shape_k_dim, S(SHAPE), 0, "k"},
    {"v seqlen 10 vs k 11", BATCHED, BOTH, shape_v_seqlen, S(SHAPE), 0, "v"},
    {"v heads 1 vs k 2", BATCHED, BOTH, shape_v_heads, S(SHAPE), 0, "v"},
    {"out batch 1", BATCHED, BOTH, shape_out_batch, S(SHAPE), 0, "out"},
    {"out seqlen 8", BATCHED, BOTH, shape_out_seqlen, S(SHAPE), 0, "out"},
    {"out heads 3", BATCHED, BOTH, shape_out_heads, S(SHAPE), 0, "out"},
    {"out dim 11 vs dv 12", BATCHED, BOTH, shape_out_dim, S(SHAPE), 0, "out"},
    {"lse (2, 4, 10)", BATCHED, BOTH, shape_lse_long, S(SHAPE), 0, "lse"},
    {"lse heads 3", BATCHED, BOTH, shape_lse_heads, S(SHAPE), 0, "lse"},
    {"s_dmask not rounded to 128", BATCHED, FWD, shape_sdmask_unrounded, S(SHAPE), 0, "s_dmask"},
    {"s_dmask (2, 4, 128, 256)", BATCHED, FWD, shape_sdmask_big, S(SHAPE), 0, "s_dmask"},
    {"alibi_slopes (5)", BATCHED, BOTH, shape_alibi_long, S(SHAPE), 0, "alibi_slopes"},
    {"alibi_slopes (3, 4)", BATCHED, BOTH, shape_alibi_batch, S(SHAPE), 0, "alibi_slopes"},
    {"alibi_slopes (1, 4)", BATCHED, BOTH, shape_alibi_batch1, S(SHAPE), 0, "alibi_slopes"},
    {"dout seqlen 8", BATCHED, BWD, shape_dout, S(SHAPE), 0, "dout"},
    {"dq heads 3", BATCHED, BWD, shape_dq, S(SHAPE), 0, "dq"},
    {"dk seqlen 10", BATCHED, BWD, shape_dk, S(SHAPE), 0, "dk"},
    {"dv dim 11", BATCHED, BWD, shape_dv, S(SHAPE), 0, "dv"},
    {"dlse seqlen 8", BATCHED, BWD, shape_dlse, S(SHAPE), 0, "dlse"},
    {"q seqlen -1", BATCHED, BOTH, shape_q_negative, S(SHAPE), 0, "q"},
    {"k and v seqlen -3", BATCHED, BOTH, shape_kv_negative, S(SHAPE), 0, "k"},
    {"lse (4, 8) vs total_q 9 (varlen)", VARLEN, BOTH, shape_varlen_lse, S(SHAPE), 0, "lse"},
    {"cu_seqlens_k length 5 vs cu_seqlens_q 4", VARLEN, BOTH, shape_cu_k_length, S(SHAPE), S(CU_SEQLENS), "cu_seqlens_k"},
    {"seqused_k length 4 vs batch 3", VARLEN, BOTH, shape_seqused_length, S(SHAPE), S(CU_SEQLENS), "seqused_k"},

    {"q head dim stride 2", BATCHED, BOTH, stride_q_last, S(STRIDE), 0, "q"},
    {"k head dim stride 2", BATCHED, BOTH, stride_k_last, S(STRIDE), 0, "k"},
    {"v head dim stride 0", BATCHED, BOTH, stride_v_last0, S(STRIDE), 0, "v"},
    {"out head dim stride 2", BATCHED, BOTH, stride_out_last, S(STRIDE), 0, "out"},
    {"dout head dim stride 2", BATCHED, BWD, stride_dout_last, S(STRIDE), 0, "dout"},
    {"dq head dim stride 2", BATCHED, BWD, stride_dq_last, S(STRIDE), 0, "dq"},
    {"dk head dim stride 2", BATCHED, BWD, stride_dk_last, S(STRIDE), 0, "dk"},
    {"dv head dim stride 2", BATCHED, BWD, stride_dv_last, S(STRIDE), 0, "dv"},
    {"q negative row stride", BATCHED, BOTH, stride_q_negative, S(STRIDE), 0, "q"},
    {"out negative batch stride", BATCHED, BOTH, stride_out_negative, S(STRIDE), 0, "out"},
    {"out row stride 0 (rows overlap)", BATCHED, FWD, stride_out_rows_zero, S(STRIDE), 0, "out"},
    {"out row stride = head stride (overlap)", BATCHED, FWD, stride_out_rows_alias_heads, S(STRIDE), 0, "out"},
    {"lse row stride 0 (overlap)", BATCHED, FWD, stride_lse_zero, S(STRIDE), 0, "lse"},
    {"s_dmask column stride 0", BATCHED, FWD, stride_sdmask_zero, S(STRIDE), 0, "s_dmask"},
    {"dq row stride 0 (overlap)", BATCHED, BWD, stride_dq_rows_zero, S(STRIDE), 0, "dq"},
    {"dk row stride 0 (overlap)", BATCHED, BWD, stride_dk_rows_zero, S(STRIDE), 0, "dk"},
    {"dv head stride 0 (overlap)", BATCHED, BWD, stride_dv_heads_alias, S(STRIDE), 0, "dv"},

    {"head dim 0", BATCHED, BOTH, head_dim_0, S(HEAD_DIM), 0, "q"},
    {"head dim 257", BATCHED, BOTH, head_dim_257, S(HEAD_DIM), 0, "q"},
    {"value head dim 0", BATCHED, BOTH, head_dim_v0, S(HEAD_DIM), 0, "v"},
    {"value head dim 257", BATCHED, BOTH, head_dim_v257, S(HEAD_DIM), 0, "v"},
    {"4 heads over 3 kv heads", BATCHED, BOTH, groups_3, S(HEAD_GROUPS), 0, "k"},
    {"4 heads over 8 kv heads", BATCHED, BOTH, groups_8, S(HEAD_GROUPS), 0, "k"},

    {"q dtype 99", BATCHED, BOTH, dtype_q_unknown, S(DTYPE), 0, "q"},
    {"q, k, v, out int32", BATCHED, BOTH, dtype_all_int32, S(DTYPE), 0, "q"},
    {"k float16 vs q float32", BATCHED, BOTH, dtype_k_half, S(DTYPE), 0, "k"},
    {"v bfloat16 vs q float32", BATCHED, BOTH, dtype_v_bf16, S(DTYPE), 0, "v"},
    {"out float64 vs q float32", BATCHED, BOTH, dtype_out_f64, S(DTYPE), 0, "out"},
    {"dout float16", BATCHED, BWD, dtype_dout_half, S(DTYPE), 0, "dout"},
    {"dq float64", BATCHED, BWD, dtype_dq_f64, S(DTYPE), 0, "dq"},
    {"dk float16", BATCHED, BWD, dtype_dk_half, S(DTYPE), 0, "dk"},
    {"dv bfloat16", BATCHED, BWD, dtype_dv_bf16, S(DTYPE), 0, "dv"},
    {"lse float64 for float32 inputs", BATCHED, BOTH, dtype_lse_f64, S(DTYPE), 0, "lse"},
    {"lse float16", BATCHED, BOTH, dtype_lse_half, S(DTYPE), 0, "lse"},
    {"lse float32 for float64 inputs", BATCHED_F64, BOTH, dtype_lse_f32, S(DTYPE), 0, "lse"},
    {"dlse float64 for float32 inputs", BATCHED, BWD, dtype_dlse_f64, S(DTYPE), 0, "dlse"},
    {"s_dmask float16 for float32 inputs", BATCHED, FWD, dtype_sdmask_half, S(DTYPE), 0, "s_dmask"},
    {"alibi_slopes float64", BATCHED, BOTH, dtype_alibi_f64, S(DTYPE), 0, "alibi_slopes"},
    {"alibi_slopes float16", BATCHED, BOTH, dtype_alibi_half, S(DTYPE), 0, "alibi_slopes"},
    {"cu_seqlens_q float32", VARLEN, BOTH, dtype_cu_q_float, S(DTYPE), 0, "cu_seqlens_q"},
    {"cu_seqlens_k float64", VARLEN, BOTH, dtype_cu_k_f64, S(DTYPE), 0, "cu_seqlens_k"},
    {"seqused_k float32", VARLEN, BOTH, dtype_seqused_float, S(DTYPE), 0, "seqused_k"},

    {"q on CUDA, rest on CPU", BATCHED, BOTH, device_q, S(DEVICE), 0, "q"},
    {"k on CUDA", BATCHED, BOTH, device_k, S(DEVICE), 0, "k"},
    {"out on CUDA", BATCHED, BOTH, device_out, S(DEVICE), 0, "out"},
    {"lse on CUDA", BATCHED, BOTH, device_lse, S(DEVICE), 0, "lse"},
    {"s_dmask on CUDA", BATCHED, FWD, device_sdmask, S(DEVICE), 0, "s_dmask"},
    {"alibi_slopes on CUDA", BATCHED, BOTH, device_alibi, S(DEVICE), 0, "alibi_slopes"},
    {"dout on CUDA", BATCHED, BWD, device_dout, S(DEVICE), 0, "dout"},
    {"dq on CUDA", BATCHED, BWD, device_dq, S(DEVICE), 0, "dq"},
    {"dlse on CUDA", BATCHED, BWD, device_dlse, S(DEVICE), 0, "dlse"},
    {"cu_seqlens_q on CUDA", VARLEN, BOTH, device_cu_q, S(DEVICE), 0, "cu_seqlens_q"},
    {"seqused_k on CUDA", VARLEN, BOTH, device_seqused, S(DEVICE), 0, "seqused_k"},
    {"everything but cu_seqlens_k on CUDA", VARLEN, BOTH, device_all_cuda_but_cu_k, S(DEVICE), 0, "cu_seqlens_k"},
    {"everything on CUDA, no usable CUDA device", BATCHED, BOTH, device_all_cuda, S(UNSUPPORTED), 0, NULL},
    {"everything on CUDA, no usable CUDA device (varlen)", VARLEN, BOTH, device_all_cuda, S(UNSUPPORTED), 0, NULL},

    {"cu_seqlens_q decreasing", VARLEN, BOTH, cu_q_decreasing, S(CU_SEQLENS), 0, "cu_seqlens_q"},
    {"cu_seqlens_k decreasing", VARLEN, BOTH, cu_k_decreasing, S(CU_SEQLENS), 0, "cu_seqlens_k"},
    {"cu_seqlens_q past total_q", VARLEN, BOTH, cu_q_past_end, S(CU_SEQLENS), 0, "cu_seqlens_q"},
    {"cu_seqlens_k past total_k", VARLEN, BOTH, cu_k_past_end, S(CU_SEQLENS), 0, "cu_seqlens_k"},
    {"cu_seqlens_q starting at -1", VARLEN, BOTH, cu_q_negative, S(CU_SEQLENS), 0, "cu_seqlens_q"},
    {"q has fewer rows than cu_seqlens_q says", VARLEN, BOTH, q_rows_short, S(CU_SEQLENS), 0, "cu_seqlens_q"},
    {"seqused_k beyond the key length", VARLEN, BOTH, seqused_too_long, S(CU_SEQLENS), 0, "seqused_k"},
    {"seqused_k negative", VARLEN, BOTH, seqused_negative, S(CU_SEQLENS), 0, "seqused_k"},
    {"max_seqlen_q below a length", VARLEN, BOTH, max_seqlen_q_small, S(CU_SEQLENS), 0, "max_seqlen_q"},
    {"max_seqlen_k below a length", VARLEN, BOTH, max_seqlen_k_small, S(CU_SEQLENS), 0, "max_seqlen_k"},
    {"max_seqlen_q negative", VARLEN, BOTH, max_seqlen_q_negative, S(CU_SEQLENS), 0, "max_seqlen_q"},
    {"max_seqlen_q 2^31 (beyond int32 cu_seqlens)", VARLEN, BOTH, max_seqlen_q_beyond_int32, S(CU_SEQLENS), 0, "max_seqlen_q"},
    {"max_seqlen_k 2^40", VARLEN, BOTH, max_seqlen_k_beyond_int32, S(CU_SEQLENS), 0, "max_seqlen_k"},
    {"cu_seqlens_k starting at -2", VARLEN, BOTH, cu_k_negative, S(CU_SEQLENS), 0, "cu_seqlens_k"},
    {"CPU tensors with device index 1", BATCHED, BOTH, device_cpu_index_1, S(DEVICE), 0, "q"},
    {"k with an unknown device type", BATCHED, BOTH, device_unknown_type, S(DEVICE), 0, "k"},

    {"dropout_p -0.1", BATCHED, BOTH, dropout_negative, S(DROPOUT), 0, "dropout_p"},
    {"dropout_p 1", BATCHED, BOTH, dropout_one, S(DROPOUT), 0, "dropout_p"},
    {"dropout_p 1.5", BATCHED, BOTH, dropout_big, S(DROPOUT), 0, "dropout_p"},
    {"dropout_p NaN", BATCHED, BOTH, dropout_nan, S(DROPOUT), 0, "dropout_p"},
    {"dropout_p inf", BATCHED, BOTH, dropout_inf, S(DROPOUT), 0, "dropout_p"},
    {"window_left -2", BATCHED, BOTH, window_left_m2, S(WINDOW), 0, "window_left"},
    {"window_right -3", BATCHED, BOTH, window_right_m3, S(WINDOW), 0, "window_right"},
    {"window_left INT64_MIN", BATCHED, BOTH, window_left_min, S(WINDOW), 0, "window_left"},
    {"softcap -1", BATCHED, BOTH, softcap_negative, S(SOFTCAP), 0, "softcap"},
    {"softcap NaN", BATCHED, BOTH, softcap_nan, S(SOFTCAP), 0, "softcap"},
    {"softcap inf", BATCHED, BOTH, softcap_inf, S(SOFTCAP), 0, "softcap"},
    {"softcap -inf", BATCHED, BOTH, softcap_minus_inf, S(SOFTCAP), 0, "softcap"},
    {"softmax_scale NaN", BATCHED, BOTH, scale_nan, S(SCALE), 0, "softmax_scale"},
    {"softmax_scale inf", BATCHED, BOTH, scale_inf, S(SCALE), 0, "softmax_scale"},
    {"softmax_scale -inf", BATCHED, BOTH, scale_minus_inf, S(SCALE), 0, "softmax_scale"},
    {"num_threads -1", BATCHED, BOTH, threads_negative, S(ARGUMENT), 0, "num_threads"},

    {"workspace one byte short", BATCHED, BWD, workspace_short, S(WORKSPACE), 0, "workspace"},
    {"workspace NULL", BATCHED, BWD, workspace_null, S(WORKSPACE), 0, "workspace"},
    {"workspace NULL, 0 bytes", BATCHED, BWD, workspace_null_zero, S(WORKSPACE), 0, "workspace"},
    {"workspace one byte short (varlen)", VARLEN, BWD, workspace_short, S(WORKSPACE), 0, "workspace"},
};
#undef S

static void every_invalid_argument(void **state) {
    (void)state;
    int failed = 0, run = 0;
    int cuda = flashc_cuda_available();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        const error_case *e = &cases[i];
        if (cuda && (e->expect == FLASHC_ERROR_UNSUPPORTED)) continue; /* valid with a GPU */
        if (e->mutate == workspace_short || e->mutate == workspace_null ||
            e->mutate == workspace_null_zero) {
            if (fixtures[e->fixture].ws_needed == 0) {
                printf("note: %s skipped, the workspace size is 0\n", e->what);
                continue;
            }
        }
        ++run;
        if (run_error_case(e)) ++failed;
    }
    printf("invalid arguments: %d/%d cases correct\n", run - failed, run);
    if (failed) fail_msg("%d of %d invalid-argument cases wrong (details above)", failed, run);
}

/* NULL argument structs and a NULL size pointer. */
static void null_argument_structs(void **state) {
    (void)state;
    size_t bytes = 777;
    assert_int_equal(flashc_attention_forward(NULL), FLASHC_ERROR_NULL_POINTER);
    assert_int_equal(flashc_attention_forward_allocating(NULL, NULL, NULL), FLASHC_ERROR_NULL_POINTER);
    assert_true(strlen(flashc_last_error_message()) > 0);
    assert_int_equal(flashc_attention_backward(NULL), FLASHC_ERROR_NULL_POINTER);
    assert_true(strlen(flashc_last_error_message()) > 0);
    assert_int_equal(flashc_attention_backward_workspace_size(NULL, &bytes), FLASHC_ERROR_NULL_POINTER);
    assert_int_equal(bytes, 777);
    fixture *x = &fixtures[BATCHED];
    fixture_reset(x);
    assert_int_equal(flashc_attention_backward_workspace_size(&x->g, NULL), FLASHC_ERROR_NULL_POINTER);
    assert_non_null(strstr(flashc_last_error_message(), "bytes"));
}

/* A dtype mismatch names both dtypes, not their enum values. */
static void dtype_messages_name_dtypes(void **state) {
    (void)state;
    fixture *x = &fixtures[BATCHED];
    fixture_reset(x);
    x->k.dtype = FLASHC_DTYPE_BFLOAT16;
    assert_int_equal(flashc_attention_forward(&x->f), FLASHC_ERROR_DTYPE);
    assert_string_equal(flashc_last_error_message(),
                        "k: dtype bfloat16 differs from q's dtype float32");
    fixture_reset(x);
    assert_string_equal(flashc_dtype_name(FLASHC_DTYPE_FLOAT16), "float16");
    assert_string_equal(flashc_dtype_name(FLASHC_DTYPE_FLOAT64), "float64");
    assert_string_equal(flashc_dtype_name(FLASHC_DTYPE_INT32), "int32");
    assert_string_equal(flashc_dtype_name((flashc_dtype)99), "unknown");
}

/* The fixtures are valid as they stand (so each case above breaks exactly
 * one thing), and a successful call clears the message. */
static void fixtures_are_valid(void **state) {
    (void)state;
    for (int kind = 0; kind < FIXTURES; ++kind) {
        fixture *x = &fixtures[kind];
        fixture_reset(x);
        x->f.options.dropout_p = 2.0;
        assert_int_equal(flashc_attention_forward(&x->f), FLASHC_ERROR_DROPOUT);
        fixture_reset(x);
        assert_int_equal(flashc_attention_forward(&x->f), FLASHC_SUCCESS);
        assert_string_equal(flashc_last_error_message(), "");
        size_t bytes = 0;
        assert_int_equal(flashc_attention_backward_workspace_size(&x->g, &bytes), FLASHC_SUCCESS);
        assert_int_equal(bytes, x->ws_needed);
        assert_int_equal(flashc_attention_backward(&x->g), FLASHC_SUCCESS);
        assert_string_equal(flashc_last_error_message(), "");
        memcpy(x->valid_out, x->tc.a_out.bytes, x->tc.a_out.size);
        memcpy(x->valid_lse, x->tc.a_lse.bytes, x->tc.a_lse.size);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fixtures_are_valid),
        cmocka_unit_test(null_argument_structs),
        cmocka_unit_test(dtype_messages_name_dtypes),
        cmocka_unit_test(every_invalid_argument),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
