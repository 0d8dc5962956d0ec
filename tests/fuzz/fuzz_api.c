/* libFuzzer target for the public C API.
 *
 * The input bytes are decoded into one call of one entry point: forward,
 * backward (with a caller's workspace, or in one call with its allocator
 * or the library's), the workspace-size query, the KV-cache call (with
 * its workspace query; contiguous or paged cache, appends, rotary, index
 * tensors whose contents go out of range), or the small helpers (options
 * default, tensor_contiguous, status_string, dtype_size, version). For the
 * attention calls a small, consistent problem is built first (batched or
 * varlen, any dtype, optional LSE / S_dmask / dLSE / ALiBi / seqused_k,
 * contiguous or strided views), then a byte-chosen number of mutations
 * breaks it: NULL pointers, invalid enum values, ranks, shapes and strides
 * (0, negative, huge), option values (NaN, inf, negative), cu_seqlens
 * contents, max_seqlen, workspace sizes.
 *
 * Memory: every tensor gets a buffer of exactly the bytes its (mutated)
 * descriptor addresses, so any read or write past it is an ASan report.
 * A descriptor that addresses more than the budget gets a tiny buffer
 * instead, and then only the workspace-size query is called (it validates
 * but never touches tensor data): a valid huge descriptor would rightly be
 * read by forward/backward. Descriptors that are invalid (rank, negative
 * shape or stride, bad dtype) keep a tiny buffer and are passed anyway:
 * validation must reject them before touching memory.
 *
 * Oracles besides the sanitizers: a failing call returns a known status,
 * leaves a non-empty message and writes no output; a successful call
 * leaves the message empty.
 *
 * tests/fuzz/seeds holds one short input per entry point: an input that
 * runs out of bytes decodes to a small valid problem, so short seeds reach
 * the kernels. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashc.h"

#define BUDGET_BYTES (1u << 20)

/* ---- byte reader ---------------------------------------------------------- */

typedef struct reader {
    const uint8_t *p;
    size_t n;
} reader;

static uint8_t rd_u8(reader *r) {
    if (r->n == 0) return 0;
    r->n--;
    return *r->p++;
}

static uint32_t rd_u32(reader *r) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = v << 8 | rd_u8(r);
    return v;
}

static uint64_t rd_u64(reader *r) { return (uint64_t)rd_u32(r) << 32 | rd_u32(r); }

static int rd_below(reader *r, int n) { return n <= 1 ? 0 : rd_u8(r) % n; }

static int64_t rd_interesting_i64(reader *r) {
    static const int64_t values[] = {
        0, 1, 2, 3, -1, -2, 7, 8, 9, 16, 63, 64, 65, 127, 128, 129, 255, 256, 257,
        INT32_MAX, (int64_t)INT32_MAX + 1, INT32_MIN, INT64_MAX, INT64_MIN, INT64_MAX / 2,
        (int64_t)1 << 31, (int64_t)1 << 32, (int64_t)1 << 40, -((int64_t)1 << 40), (int64_t)1 << 62,
    };
    uint8_t b = rd_u8(r);
    if (b & 0x80) return values[(b & 0x7F) % (sizeof values / sizeof values[0])];
    if (b & 0x40) return (int64_t)rd_u64(r);
    return (int64_t)(b & 0x3F) - 4;
}

static double rd_interesting_double(reader *r) {
    static const double values[] = {0.0, -0.0, 1.0, -1.0, 0.5, 0.999999, 1.0, 1.5, 1e-300, -1e-300,
                                    1e300, -1e300, NAN, -NAN, INFINITY, -INFINITY, 5e-324, 30.0};
    uint8_t b = rd_u8(r);
    if (b & 0x80) return values[(b & 0x7F) % (sizeof values / sizeof values[0])];
    if (b & 0x40) {
        uint64_t bits = rd_u64(r);
        double d;
        memcpy(&d, &bits, sizeof d);
        return d;
    }
    return (double)(b & 0x3F) / 16.0;
}

/* ---- tensors -------------------------------------------------------------- */

/* The KV-cache call uses q, k (k_cache), v (v_cache), out, lse, alibi and
 * the S_KNEW.. slots. */
enum slot {
    S_Q, S_K, S_V, S_OUT, S_LSE, S_SDMASK, S_DOUT, S_DLSE, S_DQ, S_DK, S_DV,
    S_ALIBI, S_CU_Q, S_CU_K, S_SEQUSED,
    S_KNEW, S_VNEW, S_CACHE_SEQLENS, S_BATCH_IDX, S_LEFTPAD, S_BLOCK_TABLE, S_COS, S_SIN,
    S_COUNT
};

/* Slots whose int32 contents the validator reads. */
static int slot_is_index(int s) {
    return s == S_CU_Q || s == S_CU_K || s == S_SEQUSED || s == S_ALIBI || s == S_CACHE_SEQLENS ||
           s == S_BATCH_IDX || s == S_LEFTPAD || s == S_BLOCK_TABLE;
}

static const int slot_is_output[S_COUNT] = {
    [S_OUT] = 1, [S_LSE] = 1, [S_SDMASK] = 1, [S_DQ] = 1, [S_DK] = 1, [S_DV] = 1,
};

typedef struct fuzz_tensor {
    int used;             /* the call receives this descriptor */
    int pointer_null;     /* pass a NULL descriptor pointer instead */
    flashc_tensor t;
    void *buffer;         /* what we allocated (t.data unless mutated to NULL) */
    size_t bytes;
    void *snapshot;       /* outputs: copy taken before the call */
} fuzz_tensor;

typedef struct fuzz_case {
    fuzz_tensor ts[S_COUNT];
    int32_t cu_q[8], cu_k[8], seqused[8];
    /* KV cache: index contents, and whether the caches are written. */
    int32_t cache_seqlens[8], batch_idx[8], leftpad[8], block_table[32];
    int cache_is_output;
    int varlen;
    int64_t max_seqlen_q, max_seqlen_k;
    flashc_attention_options opt;
    int oversized;        /* some descriptor addresses more than the budget */
    int int_data_unsafe;  /* an int32/ALiBi tensor the validator reads is too big */
    size_t budget_used;
} fuzz_case;

typedef enum { EXTENT_OK, EXTENT_INVALID, EXTENT_HUGE } extent_kind;

/* Bytes a descriptor addresses: 1 + the largest offset, times the element
 * size, with every overflow counted as huge. */
static extent_kind descriptor_extent(const flashc_tensor *t, size_t *bytes) {
    size_t es = flashc_dtype_size(t->dtype);
    if (t->rank < 1 || t->rank > FLASHC_MAX_RANK || es == 0) return EXTENT_INVALID;
    uint64_t last = 0;
    for (int i = 0; i < t->rank; ++i) {
        if (t->shape[i] < 0 || t->stride[i] < 0) return EXTENT_INVALID;
        if (t->shape[i] == 0) {
            *bytes = 0;
            return EXTENT_OK;
        }
    }
    for (int i = 0; i < t->rank; ++i) {
        uint64_t extent = (uint64_t)t->shape[i] - 1, stride = (uint64_t)t->stride[i];
        if (stride != 0 && extent > (UINT64_MAX / 4) / stride) return EXTENT_HUGE;
        last += extent * stride;
        if (last > BUDGET_BYTES) return EXTENT_HUGE;
    }
    *bytes = (size_t)(last + 1) * es;
    return *bytes > BUDGET_BYTES ? EXTENT_HUGE : EXTENT_OK;
}

static void fill_values(void *data, flashc_dtype dt, size_t bytes, reader *r, uint32_t *lcg) {
    size_t es = flashc_dtype_size(dt);
    int raw = rd_u8(r) < 16; /* sometimes raw bit patterns: NaN, inf, denormals */
    uint8_t *p = data;
    for (size_t i = 0; i < bytes; ++i) {
        *lcg = *lcg * 1664525u + 1013904223u;
        p[i] = (uint8_t)(*lcg >> 24);
    }
    if (raw || es == 0) return;
    size_t n = bytes / es;
    for (size_t i = 0; i < n; ++i) {
        *lcg = *lcg * 1664525u + 1013904223u;
        float f = (float)((int)(*lcg >> 16) - 32768) / 16384.0f;
        switch (dt) {
            case FLASHC_DTYPE_FLOAT32: ((float *)data)[i] = f; break;
            case FLASHC_DTYPE_FLOAT64: ((double *)data)[i] = f; break;
            case FLASHC_DTYPE_FLOAT16:
            case FLASHC_DTYPE_BFLOAT16: {
                /* bfloat16: the high half of the float; float16 from a
                 * small exponent range, both finite. */
                uint32_t bits;
                memcpy(&bits, &f, 4);
                uint16_t v = dt == FLASHC_DTYPE_BFLOAT16 ? (uint16_t)(bits >> 16)
                                                         : (uint16_t)(0x3000u | ((*lcg >> 8) & 0x0FFFu) | ((*lcg >> 4) & 0x8000u));
                ((uint16_t *)data)[i] = v;
                break;
            }
            default: break;
        }
    }
}

/* Write an int32 vector into a tensor's buffer through its descriptor. */
static void fill_int32(fuzz_tensor *ft, const int32_t *values, int count) {
    if (ft->t.dtype != FLASHC_DTYPE_INT32 || ft->t.rank < 1 || !ft->buffer) return;
    int64_t n = ft->t.shape[0], stride = ft->t.stride[0];
    if (stride < 0 || stride > (int64_t)BUDGET_BYTES) return; /* invalid or far out: nothing to place */
    for (int64_t i = 0; i < n && i < count; ++i) {
        uint64_t off = (uint64_t)i * (uint64_t)stride * 4;
        if (off + 4 <= ft->bytes) memcpy((char *)ft->buffer + off, &values[i], 4);
    }
}

/* Write a row-major (rows, cols) int32 table into a 2-d tensor's buffer
 * through its descriptor (cols = the descriptor's second extent). */
static void fill_int32_2d(fuzz_tensor *ft, const int32_t *values, int count) {
    if (ft->t.dtype != FLASHC_DTYPE_INT32 || ft->t.rank != 2 || !ft->buffer) return;
    int64_t rows = ft->t.shape[0], cols = ft->t.shape[1];
    int64_t s0 = ft->t.stride[0], s1 = ft->t.stride[1];
    if (s0 < 0 || s1 < 0 || s0 > (int64_t)BUDGET_BYTES || s1 > (int64_t)BUDGET_BYTES) return;
    if (rows <= 0 || cols <= 0) return;
    for (int k = 0; k < count; ++k) {
        int64_t i = k / cols, j = k % cols;
        if (i >= rows) break;
        uint64_t off = ((uint64_t)i * (uint64_t)s0 + (uint64_t)j * (uint64_t)s1) * 4;
        if (off + 4 <= ft->bytes) memcpy((char *)ft->buffer + off, &values[k], 4);
    }
}

/* Allocate every used tensor's buffer from its final descriptor. */
static void materialize(fuzz_case *c, reader *r) {
    uint32_t lcg = rd_u32(r);
    for (int s = 0; s < S_COUNT; ++s) {
        fuzz_tensor *ft = &c->ts[s];
        if (!ft->used || ft->pointer_null) continue;
        int make_null = ft->t.data == NULL; /* a mutation asked for NULL data */
        size_t bytes = 0;
        extent_kind k = descriptor_extent(&ft->t, &bytes);
        if (k == EXTENT_OK && c->budget_used + bytes > BUDGET_BYTES) k = EXTENT_HUGE;
        if (k == EXTENT_HUGE) {
            c->oversized = 1;
            if (slot_is_index(s)) c->int_data_unsafe = 1;
            bytes = 16;
        } else if (k == EXTENT_INVALID) {
            bytes = 16;
        }
        c->budget_used += bytes;
        ft->buffer = malloc(bytes ? bytes : 1);
        ft->bytes = bytes;
        if (!ft->buffer) abort();
        if (bytes) fill_values(ft->buffer, ft->t.dtype, bytes, r, &lcg);
        ft->t.data = make_null ? NULL : ft->buffer;
        if (s == S_CU_Q) fill_int32(ft, c->cu_q, 8);
        if (s == S_CU_K) fill_int32(ft, c->cu_k, 8);
        if (s == S_SEQUSED) fill_int32(ft, c->seqused, 8);
        if (s == S_CACHE_SEQLENS) fill_int32(ft, c->cache_seqlens, 8);
        if (s == S_BATCH_IDX) fill_int32(ft, c->batch_idx, 8);
        if (s == S_LEFTPAD) fill_int32(ft, c->leftpad, 8);
        if (s == S_BLOCK_TABLE) fill_int32_2d(ft, c->block_table, 32);
        int written = slot_is_output[s] || (c->cache_is_output && (s == S_K || s == S_V));
        if (written && bytes) {
            ft->snapshot = malloc(bytes);
            if (!ft->snapshot) abort();
            memcpy(ft->snapshot, ft->buffer, bytes);
        }
    }
}

static void release(fuzz_case *c) {
    for (int s = 0; s < S_COUNT; ++s) {
        free(c->ts[s].buffer);
        free(c->ts[s].snapshot);
    }
}

static const flashc_tensor *desc(fuzz_case *c, int s) {
    fuzz_tensor *ft = &c->ts[s];
    return ft->used && !ft->pointer_null ? &ft->t : NULL;
}

static flashc_tensor *desc_mut(fuzz_case *c, int s) {
    fuzz_tensor *ft = &c->ts[s];
    return ft->used && !ft->pointer_null ? &ft->t : NULL;
}

/* ---- building a problem --------------------------------------------------- */

static void set_contiguous(fuzz_tensor *ft, flashc_dtype dt, int rank, const int64_t *shape) {
    flashc_device cpu = {FLASHC_DEVICE_CPU, 0};
    ft->used = 1;
    /* data: a non-NULL placeholder until materialize() allocates. */
    ft->t = flashc_tensor_contiguous((void *)1, dt, cpu, rank, shape);
}

/* Strided "packed" layout for q/k/v style tensors: a gap after each head
 * and row, as views of a larger tensor have. */
static void make_strided(fuzz_tensor *ft, int64_t pad) {
    flashc_tensor *t = &ft->t;
    if (t->rank < 2) return;
    int64_t stride = t->shape[t->rank - 1];
    for (int i = t->rank - 2; i >= 0; --i) {
        stride += pad;
        t->stride[i] = stride;
        stride *= t->shape[i] > 0 ? t->shape[i] : 1;
    }
}

static void build_problem(fuzz_case *c, reader *r, int backward) {
    memset(c, 0, sizeof *c);
    /* Zero bytes (an exhausted input) decode to a small valid problem. */
    uint8_t flags = rd_u8(r);
    c->varlen = flags & 1;
    int64_t b = (1 + rd_u8(r)) % 4;
    int64_t sq = (3 + rd_u8(r)) % 10, sk = (5 + rd_u8(r)) % 10;
    int64_t h = 1 + (1 + rd_u8(r)) % 4;
    int64_t hk = 1 + rd_below(r, (int)h);
    uint8_t dsel = rd_u8(r);
    int64_t d = dsel < 240 ? 1 + (dsel + 7) % 16 : 250 + dsel % 10;
    uint8_t dvsel = rd_u8(r);
    int64_t dv = dvsel < 128 ? d : (dvsel < 250 ? 1 + dvsel % 16 : 250 + dvsel % 10);
    flashc_dtype dt = (flashc_dtype)rd_below(r, 4);
    flashc_dtype lse_dt = dt == FLASHC_DTYPE_FLOAT64 ? FLASHC_DTYPE_FLOAT64 : FLASHC_DTYPE_FLOAT32;

    int64_t total_q = 0, total_k = 0;
    if (c->varlen) {
        c->cu_q[0] = c->cu_k[0] = 0;
        for (int64_t i = 0; i < b; ++i) {
            int32_t lq = (3 + rd_u8(r)) % 8, lk = (5 + rd_u8(r)) % 8;
            c->cu_q[i + 1] = c->cu_q[i] + lq;
            c->cu_k[i + 1] = c->cu_k[i] + lk;
            c->seqused[i] = rd_below(r, lk + 1);
            if (lq > c->max_seqlen_q) c->max_seqlen_q = lq;
            if (lk > c->max_seqlen_k) c->max_seqlen_k = lk;
        }
        total_q = c->cu_q[b];
        total_k = c->cu_k[b];
        int64_t qs[3] = {total_q, h, d}, ks[3] = {total_k, hk, d}, vs[3] = {total_k, hk, dv},
                os[3] = {total_q, h, dv}, ls[2] = {h, total_q}, cs[1] = {b + 1}, us[1] = {b};
        set_contiguous(&c->ts[S_Q], dt, 3, qs);
        set_contiguous(&c->ts[S_K], dt, 3, ks);
        set_contiguous(&c->ts[S_V], dt, 3, vs);
        set_contiguous(&c->ts[S_OUT], dt, 3, os);
        set_contiguous(&c->ts[S_LSE], lse_dt, 2, ls);
        set_contiguous(&c->ts[S_DOUT], dt, 3, os);
        set_contiguous(&c->ts[S_DLSE], lse_dt, 2, ls);
        set_contiguous(&c->ts[S_DQ], dt, 3, qs);
        set_contiguous(&c->ts[S_DK], dt, 3, ks);
        set_contiguous(&c->ts[S_DV], dt, 3, vs);
        set_contiguous(&c->ts[S_CU_Q], FLASHC_DTYPE_INT32, 1, cs);
        set_contiguous(&c->ts[S_CU_K], FLASHC_DTYPE_INT32, 1, cs);
        set_contiguous(&c->ts[S_SEQUSED], FLASHC_DTYPE_INT32, 1, us);
        c->ts[S_SEQUSED].used = (flags >> 1) & 1;
        int64_t mq = c->max_seqlen_q, mk = c->max_seqlen_k;
        int64_t ms[4] = {b, h, (mq + 127) / 128 * 128, (mk + 127) / 128 * 128};
        set_contiguous(&c->ts[S_SDMASK], dt, 4, ms);
    } else {
        int64_t qs[4] = {b, sq, h, d}, ks[4] = {b, sk, hk, d}, vs[4] = {b, sk, hk, dv},
                os[4] = {b, sq, h, dv}, ls[3] = {b, h, sq};
        int64_t ms[4] = {b, h, (sq + 127) / 128 * 128, (sk + 127) / 128 * 128};
        set_contiguous(&c->ts[S_Q], dt, 4, qs);
        set_contiguous(&c->ts[S_K], dt, 4, ks);
        set_contiguous(&c->ts[S_V], dt, 4, vs);
        set_contiguous(&c->ts[S_OUT], dt, 4, os);
        set_contiguous(&c->ts[S_LSE], lse_dt, 3, ls);
        set_contiguous(&c->ts[S_DOUT], dt, 4, os);
        set_contiguous(&c->ts[S_DLSE], lse_dt, 3, ls);
        set_contiguous(&c->ts[S_DQ], dt, 4, qs);
        set_contiguous(&c->ts[S_DK], dt, 4, ks);
        set_contiguous(&c->ts[S_DV], dt, 4, vs);
        set_contiguous(&c->ts[S_SDMASK], dt, 4, ms);
        c->max_seqlen_q = sq;
        c->max_seqlen_k = sk;
    }
    /* Optional tensors. */
    c->ts[S_LSE].used = backward || ((flags >> 2) & 1);
    c->ts[S_SDMASK].used = !backward && ((flags >> 3) & 1);
    c->ts[S_DLSE].used = backward && ((flags >> 4) & 1);
    if (!backward) c->ts[S_DOUT].used = c->ts[S_DQ].used = c->ts[S_DK].used = c->ts[S_DV].used = 0;
    if ((flags >> 5) & 1) {
        int64_t as2[2] = {b, h}, as1[1] = {h};
        int per_bh = (flags >> 6) & 1;
        set_contiguous(&c->ts[S_ALIBI], FLASHC_DTYPE_FLOAT32, per_bh ? 2 : 1, per_bh ? as2 : as1);
    }
    if (flags >> 7) {
        /* Strided views (as slices of packed tensors are). */
        int64_t pad = 1 + rd_below(r, 8);
        for (int s = S_Q; s <= S_DV; ++s)
            if (c->ts[s].used && s != S_LSE && s != S_DLSE && s != S_SDMASK) make_strided(&c->ts[s], pad);
    }

    c->opt = flashc_attention_options_default();
    uint8_t o = rd_u8(r);
    c->opt.causal = o & 1;
    if (o & 2) {
        c->opt.window_left = rd_below(r, 12) - 1;
        c->opt.window_right = rd_below(r, 12) - 1;
    }
    if (o & 4) c->opt.softcap = rd_below(r, 50) / 2.0;
    if (o & 8) c->opt.dropout_p = rd_below(r, 10) / 10.0;
    c->opt.dropout_seed = rd_u64(r);
    c->opt.dropout_offset = (o & 16) ? rd_u64(r) : 0;
    if (o & 32) c->opt.softmax_scale = rd_below(r, 64) / 16.0 - 1.0;
    c->opt.deterministic = (o >> 6) & 1;
    c->opt.num_threads = 1 + ((o >> 7) & 1);
}

/* ---- mutations ------------------------------------------------------------ */

static void mutate_tensor(fuzz_case *c, reader *r) {
    fuzz_tensor *ft = &c->ts[rd_below(r, S_COUNT)];
    flashc_tensor *t = &ft->t;
    switch (rd_below(r, 11)) {
        case 0: ft->pointer_null = 1; break;
        case 1: t->data = NULL; break;
        case 2: t->dtype = (flashc_dtype)(rd_u8(r) < 128 ? rd_below(r, 6) : (int)rd_u32(r)); break;
        case 3: t->device.type = (flashc_device_type)(rd_u8(r) < 128 ? rd_below(r, 3) : (int)rd_u32(r)); break;
        case 4: t->device.index = (int)rd_interesting_i64(r); break;
        case 5: t->rank = rd_u8(r) < 200 ? rd_below(r, 7) - 1 : (int)rd_u32(r); break;
        case 6:
        case 7: t->shape[rd_below(r, FLASHC_MAX_RANK)] = rd_interesting_i64(r); break;
        case 8:
        case 9: t->stride[rd_below(r, FLASHC_MAX_RANK)] = rd_interesting_i64(r); break;
        default: ft->used = !ft->used; break; /* drop a required / add an unexpected tensor */
    }
}

static void mutate_option(fuzz_case *c, reader *r) {
    flashc_attention_options *o = &c->opt;
    switch (rd_below(r, 12)) {
        case 0: o->softmax_scale = rd_interesting_double(r); break;
        case 1: o->causal = (int)rd_interesting_i64(r); break;
        case 2: o->window_left = rd_interesting_i64(r); break;
        case 3: o->window_right = rd_interesting_i64(r); break;
        case 4: o->softcap = rd_interesting_double(r); break;
        case 5: o->dropout_p = rd_interesting_double(r); break;
        case 6: o->dropout_seed = rd_u64(r); o->dropout_offset = rd_u64(r); break;
        case 7: o->deterministic = (int)rd_interesting_i64(r); break;
        /* Thread counts stay small: a huge valid count only costs time. */
        case 8: o->num_threads = rd_below(r, 6) - 2; break;
        case 9: o->stream = (void *)(uintptr_t)rd_u64(r); break;
        case 10: c->max_seqlen_q = rd_interesting_i64(r); break;
        default: c->max_seqlen_k = rd_interesting_i64(r); break;
    }
}

static void mutate_seqlens(fuzz_case *c, reader *r) {
    int which = rd_below(r, 7);
    if (which == 6) {
        c->block_table[rd_below(r, 32)] = (int32_t)rd_interesting_i64(r);
        return;
    }
    int32_t *arrays[6] = {c->cu_q, c->cu_k, c->seqused, c->cache_seqlens, c->batch_idx, c->leftpad};
    arrays[which][rd_below(r, 8)] = (int32_t)rd_interesting_i64(r);
}

static void mutate(fuzz_case *c, reader *r) {
    int count = rd_below(r, 4); /* often 0: the valid problem runs */
    for (int i = 0; i < count; ++i) {
        int kind = rd_below(r, 3);
        if (kind == 0) mutate_tensor(c, r);
        else if (kind == 1) mutate_option(c, r);
        else mutate_seqlens(c, r);
    }
}

/* ---- oracles -------------------------------------------------------------- */

static void fail(const char *what, flashc_status st) {
    fprintf(stderr, "fuzz_api: %s (status %d: %s; message '%s')\n", what, (int)st,
            flashc_status_string(st), flashc_last_error_message());
    abort();
}

/* FLASHC_FUZZ_STATS=1: print how often each status came back, to see
 * that the inputs reach the kernels and not only the validator. */
static long status_counts[4][FLASHC_ERROR_BACKEND + 1];
static int stats_registered;

static void print_stats(void) {
    static const char *names[4] = {"forward", "backward", "workspace_size", "kvcache"};
    for (int e = 0; e < 4; ++e) {
        fprintf(stderr, "fuzz_api stats %-14s", names[e]);
        for (int st = 0; st <= FLASHC_ERROR_BACKEND; ++st) fprintf(stderr, " %ld", status_counts[e][st]);
        fprintf(stderr, "   (counts by status 0..%d)\n", FLASHC_ERROR_BACKEND);
    }
}

static void count_status(int entry, flashc_status st) {
    if (!stats_registered) {
        stats_registered = 1;
        if (getenv("FLASHC_FUZZ_STATS")) atexit(print_stats);
    }
    if ((int)st >= 0 && (int)st <= FLASHC_ERROR_BACKEND) status_counts[entry][st]++;
}

static void check_result(fuzz_case *c, flashc_status st) {
    if ((int)st < (int)FLASHC_SUCCESS || (int)st > (int)FLASHC_ERROR_BACKEND) fail("unknown status", st);
    const char *msg = flashc_last_error_message();
    if (!msg) fail("NULL error message", st);
    if (st == FLASHC_SUCCESS) {
        if (msg[0] != '\0') fail("success left a non-empty message", st);
        return;
    }
    if (msg[0] == '\0') fail("error without a message", st);
    for (int s = 0; s < S_COUNT; ++s) {
        fuzz_tensor *ft = &c->ts[s];
        if (ft->snapshot && memcmp(ft->snapshot, ft->buffer, ft->bytes) != 0)
            fail("a failed call wrote an output", st);
    }
}

/* FLASHC_FUZZ_VERBOSE=1: print each decoded call (to describe a
 * reproducer). */
static void describe(const char *entry, fuzz_case *c) {
    static const char *names[S_COUNT] = {"q", "k", "v", "out", "lse", "s_dmask", "dout", "dlse", "dq",
                                         "dk", "dv", "alibi", "cu_seqlens_q", "cu_seqlens_k", "seqused_k",
                                         "k_new", "v_new", "cache_seqlens", "cache_batch_idx",
                                         "cache_leftpad", "block_table", "rotary_cos", "rotary_sin"};
    if (!getenv("FLASHC_FUZZ_VERBOSE")) return;
    fprintf(stderr, "%s: varlen %d max_seqlen_q %lld max_seqlen_k %lld oversized %d\n", entry, c->varlen,
            (long long)c->max_seqlen_q, (long long)c->max_seqlen_k, c->oversized);
    for (int s = 0; s < S_COUNT; ++s) {
        fuzz_tensor *ft = &c->ts[s];
        if (!ft->used) continue;
        if (ft->pointer_null) {
            fprintf(stderr, "  %-12s NULL descriptor\n", names[s]);
            continue;
        }
        fprintf(stderr, "  %-12s data %s dtype %d device %d:%d rank %d shape", names[s], ft->t.data ? "set" : "NULL",
                (int)ft->t.dtype, (int)ft->t.device.type, ft->t.device.index, ft->t.rank);
        for (int i = 0; i < FLASHC_MAX_RANK; ++i) fprintf(stderr, " %lld", (long long)ft->t.shape[i]);
        fprintf(stderr, " stride");
        for (int i = 0; i < FLASHC_MAX_RANK; ++i) fprintf(stderr, " %lld", (long long)ft->t.stride[i]);
        fprintf(stderr, " (%zu bytes)\n", ft->bytes);
    }
    if (c->varlen)
        fprintf(stderr, "  cu_q %d %d %d %d %d  cu_k %d %d %d %d %d  seqused %d %d %d %d\n", c->cu_q[0], c->cu_q[1],
                c->cu_q[2], c->cu_q[3], c->cu_q[4], c->cu_k[0], c->cu_k[1], c->cu_k[2], c->cu_k[3], c->cu_k[4],
                c->seqused[0], c->seqused[1], c->seqused[2], c->seqused[3]);
    const flashc_attention_options *o = &c->opt;
    fprintf(stderr, "  options scale %g causal %d window (%lld, %lld) softcap %g dropout %g seed %llu offset %llu det %d threads %d\n",
            o->softmax_scale, o->causal, (long long)o->window_left, (long long)o->window_right, o->softcap, o->dropout_p,
            (unsigned long long)o->dropout_seed, (unsigned long long)o->dropout_offset, o->deterministic, o->num_threads);
}

/* ---- entry points --------------------------------------------------------- */

/* After a build: the byte-chosen mutations, the buffers, the description. */
static void prepare(fuzz_case *c, reader *r, const char *entry) {
    mutate(c, r);
    materialize(c, r);
    describe(entry, c);
}

/* prepare, for the entry points whose validation reads the data of the
 * index tensors (slot_is_index: cu_seqlens, seqused, ALiBi, the KV cache's
 * cache_seqlens, block_table, ...): 0, with the case released, when one of
 * them addresses more than the budget and so got a 16-byte buffer the
 * validator would read past. */
static int prepare_indexed(fuzz_case *c, reader *r, const char *entry) {
    prepare(c, r, entry);
    if (!c->int_data_unsafe) return 1;
    release(c);
    return 0;
}

static flashc_varlen varlen_args(fuzz_case *c) {
    flashc_varlen v;
    memset(&v, 0, sizeof v);
    if (c->varlen) {
        v.cu_seqlens_q = desc(c, S_CU_Q);
        v.cu_seqlens_k = desc(c, S_CU_K);
        v.seqused_k = desc(c, S_SEQUSED);
    }
    v.max_seqlen_q = c->max_seqlen_q;
    v.max_seqlen_k = c->max_seqlen_k;
    return v;
}

static void fuzz_forward(reader *r) {
    fuzz_case c;
    build_problem(&c, r, 0);
    prepare(&c, r, "forward");
    if (!c.oversized) {
        flashc_forward_args a;
        memset(&a, 0, sizeof a);
        a.q = desc(&c, S_Q);
        a.k = desc(&c, S_K);
        a.v = desc(&c, S_V);
        a.out = desc_mut(&c, S_OUT);
        a.lse = desc_mut(&c, S_LSE);
        a.s_dmask = desc_mut(&c, S_SDMASK);
        a.varlen = varlen_args(&c);
        a.options = c.opt;
        a.options.alibi_slopes = desc(&c, S_ALIBI);
        flashc_status st = flashc_attention_forward(rd_u8(r) == 0xFF ? NULL : &a);
        count_status(0, st);
        check_result(&c, st);
    }
    release(&c);
}

/* The one-call backward's allocator: malloc'ed memory (freed after the
 * call), or NULL when `fail` is set. */
typedef struct fuzz_allocator {
    int fail;
    void *memory;
} fuzz_allocator;

static void *fuzz_allocate(void *context, size_t bytes, flashc_device device) {
    fuzz_allocator *fa = context;
    if (device.type != FLASHC_DEVICE_CPU) fail("the allocator was asked for non-CPU memory", FLASHC_SUCCESS);
    if (fa->memory) fail("the allocator was called twice", FLASHC_SUCCESS);
    if (fa->fail) return NULL;
    fa->memory = malloc(bytes);
    if (!fa->memory) abort();
    memset(fa->memory, 0xA5, bytes);
    return fa->memory;
}

static void fuzz_backward(reader *r, int query_only) {
    fuzz_case c;
    build_problem(&c, r, 1);
    if (!prepare_indexed(&c, r, query_only ? "workspace_size" : "backward")) return;
    flashc_backward_args a;
    memset(&a, 0, sizeof a);
    a.dout = desc(&c, S_DOUT);
    a.q = desc(&c, S_Q);
    a.k = desc(&c, S_K);
    a.v = desc(&c, S_V);
    a.out = desc(&c, S_OUT);
    a.lse = desc(&c, S_LSE);
    a.dlse = desc(&c, S_DLSE);
    a.dq = desc_mut(&c, S_DQ);
    a.dk = desc_mut(&c, S_DK);
    a.dv = desc_mut(&c, S_DV);
    a.varlen = varlen_args(&c);
    a.options = c.opt;
    a.options.alibi_slopes = desc(&c, S_ALIBI);
    size_t need = 0;
    uint8_t sel = rd_u8(r);
    flashc_status st = flashc_attention_backward_workspace_size(sel == 0xFF ? NULL : &a, sel == 0xFE ? NULL : &need);
    /* The query writes nothing into tensors either. */
    count_status(2, st);
    check_result(&c, st);
    if (query_only || c.oversized) {
        release(&c);
        return;
    }
    /* Workspace: what was asked, or a byte-chosen wrong amount; the size
     * passed is never more than what is allocated. */
    size_t ws_bytes = need;
    uint8_t w = rd_u8(r);
    if (st == FLASHC_SUCCESS && need <= BUDGET_BYTES && w >= 184 && w < 200) {
        /* The one-call backward: its workspace from the library (allocate
         * NULL) or from an allocator that succeeds or fails by the byte. */
        fuzz_allocator fa = {w & 1, NULL};
        flashc_status ast = flashc_attention_backward_allocating(&a, w < 192 ? NULL : fuzz_allocate, &fa);
        count_status(1, ast);
        check_result(&c, ast);
        free(fa.memory);
        release(&c);
        return;
    }
    if (st != FLASHC_SUCCESS || need > BUDGET_BYTES) ws_bytes = rd_below(r, 256);
    else if (w >= 224) ws_bytes = need > 0 ? need - 1 - (size_t)rd_below(r, (int)(need < 64 ? need : 64)) : 0;
    else if (w >= 208) ws_bytes = need + (size_t)rd_below(r, 64);
    void *ws = malloc(ws_bytes ? ws_bytes : 1);
    if (!ws) abort();
    memset(ws, 0xA5, ws_bytes);
    a.workspace = w >= 200 && w < 208 ? NULL : ws;
    a.workspace_bytes = ws_bytes;
    flashc_status bst = flashc_attention_backward(&a);
    count_status(1, bst);
    check_result(&c, bst);
    free(ws);
    release(&c);
}

/* A small, consistent KV-cache call: contiguous or paged cache, index
 * contents in range (mutations move them out). */
static void build_kvcache(fuzz_case *c, reader *r) {
    memset(c, 0, sizeof *c);
    uint8_t flags = rd_u8(r);
    int paged = flags & 1;
    int64_t b = 1 + rd_u8(r) % 3, sq = 1 + rd_u8(r) % 4;
    int64_t h = 1 + (1 + rd_u8(r)) % 4, hk = 1 + rd_below(r, (int)h);
    int64_t d = 1 + (7 + rd_u8(r)) % 16, dv = rd_u8(r) < 128 ? d : 1 + rd_u8(r) % 16;
    flashc_dtype dt = (flashc_dtype)rd_below(r, 4);
    int64_t s_new = (flags >> 1) & 1 ? rd_u8(r) % 4 : 0;
    int64_t bs = 1 + rd_u8(r) % 8, per_seq = 1 + rd_u8(r) % 4;
    int64_t capacity = paged ? bs * per_seq : (3 + rd_u8(r)) % 13;
    int64_t outer = paged ? b * per_seq + rd_below(r, 3) : b + rd_below(r, 2);
    for (int64_t i = 0; i < b; ++i) {
        int64_t room = capacity - s_new;
        c->cache_seqlens[i] = room > 0 ? rd_below(r, (int)room + 1) : 0;
        c->leftpad[i] = rd_below(r, c->cache_seqlens[i] + 1);
        c->batch_idx[i] = rd_below(r, (int)outer);
    }
    for (int i = 0; i < 32; ++i) c->block_table[i] = rd_below(r, (int)outer);
    int64_t rows = paged ? bs : capacity;
    int64_t qs[4] = {b, sq, h, d}, ks[4] = {outer, rows, hk, d}, vs[4] = {outer, rows, hk, dv},
            kn[4] = {b, s_new, hk, d}, vn[4] = {b, s_new, hk, dv}, os[4] = {b, sq, h, dv},
            ls[3] = {b, h, sq}, bv[1] = {b}, bt[2] = {b, per_seq};
    set_contiguous(&c->ts[S_Q], dt, 4, qs);
    set_contiguous(&c->ts[S_K], dt, 4, ks);
    set_contiguous(&c->ts[S_V], dt, 4, vs);
    set_contiguous(&c->ts[S_OUT], dt, 4, os);
    set_contiguous(&c->ts[S_LSE], dt == FLASHC_DTYPE_FLOAT64 ? FLASHC_DTYPE_FLOAT64 : FLASHC_DTYPE_FLOAT32, 3, ls);
    c->ts[S_LSE].used = (flags >> 2) & 1;
    set_contiguous(&c->ts[S_CACHE_SEQLENS], FLASHC_DTYPE_INT32, 1, bv);
    c->ts[S_CACHE_SEQLENS].used = s_new > 0 || ((flags >> 3) & 1);
    if ((flags >> 1) & 1) {
        set_contiguous(&c->ts[S_KNEW], dt, 4, kn);
        set_contiguous(&c->ts[S_VNEW], dt, 4, vn);
        c->cache_is_output = 1;
    }
    if ((flags >> 4) & 1) set_contiguous(&c->ts[S_LEFTPAD], FLASHC_DTYPE_INT32, 1, bv);
    if (paged) set_contiguous(&c->ts[S_BLOCK_TABLE], FLASHC_DTYPE_INT32, 2, bt);
    else if ((flags >> 5) & 1) set_contiguous(&c->ts[S_BATCH_IDX], FLASHC_DTYPE_INT32, 1, bv);
    if (((flags >> 6) & 1) && (flags >> 1) & 1 && d >= 2) {
        int64_t cs[2] = {capacity + sq, 1 + rd_below(r, (int)(d / 2))};
        set_contiguous(&c->ts[S_COS], dt, 2, cs);
        set_contiguous(&c->ts[S_SIN], dt, 2, cs);
    }
    if (flags >> 7) {
        int64_t as1[1] = {h};
        set_contiguous(&c->ts[S_ALIBI], FLASHC_DTYPE_FLOAT32, 1, as1);
    }
    c->opt = flashc_attention_options_default();
    uint8_t o = rd_u8(r);
    c->opt.causal = o & 1;
    if (o & 2) {
        c->opt.window_left = rd_below(r, 12) - 1;
        c->opt.window_right = rd_below(r, 12) - 1;
    }
    if (o & 4) c->opt.softcap = rd_below(r, 50) / 2.0;
    if (o & 8) c->opt.softmax_scale = rd_below(r, 64) / 16.0 - 1.0;
    c->opt.num_threads = 1 + ((o >> 4) & 1);
}

static void fuzz_kvcache(reader *r) {
    fuzz_case c;
    build_kvcache(&c, r);
    if (!prepare_indexed(&c, r, "kvcache")) return;
    flashc_kvcache_args a;
    memset(&a, 0, sizeof a);
    a.q = desc(&c, S_Q);
    a.k_cache = desc_mut(&c, S_K);
    a.v_cache = desc_mut(&c, S_V);
    a.k_new = desc(&c, S_KNEW);
    a.v_new = desc(&c, S_VNEW);
    a.cache_seqlens = desc(&c, S_CACHE_SEQLENS);
    a.cache_batch_idx = desc(&c, S_BATCH_IDX);
    a.cache_leftpad = desc(&c, S_LEFTPAD);
    a.block_table = desc(&c, S_BLOCK_TABLE);
    a.rotary_cos = desc(&c, S_COS);
    a.rotary_sin = desc(&c, S_SIN);
    a.rotary_interleaved = rd_u8(r) & 1;
    a.num_splits = rd_below(r, 4) - 1;
    a.out = desc_mut(&c, S_OUT);
    a.lse = desc_mut(&c, S_LSE);
    a.options = c.opt;
    a.options.alibi_slopes = desc(&c, S_ALIBI);
    size_t need = 0;
    flashc_status st = flashc_attention_kvcache_workspace_size(&a, &need);
    count_status(3, st);
    check_result(&c, st);
    if (c.oversized) {
        release(&c);
        return;
    }
    /* The library's own workspace, the size asked for, or too little. */
    uint8_t w = rd_u8(r);
    size_t ws_bytes = st == FLASHC_SUCCESS && need <= BUDGET_BYTES ? need : 0;
    if (w >= 224 && ws_bytes > 0) ws_bytes -= 1 + (size_t)rd_below(r, (int)(ws_bytes < 64 ? ws_bytes : 64));
    void *ws = w < 128 ? NULL : malloc(ws_bytes ? ws_bytes : 1);
    a.workspace = ws;
    a.workspace_bytes = ws ? ws_bytes : 0;
    flashc_status kst = flashc_attention_kvcache(&a);
    count_status(3, kst);
    check_result(&c, kst);
    free(ws);
    release(&c);
}

static void fuzz_helpers(reader *r) {
    switch (rd_below(r, 5)) {
        case 0: {
            flashc_attention_options o = flashc_attention_options_default();
            if (o.window_left != -1 || o.window_right != -1 || o.dropout_p != 0.0 || o.alibi_slopes)
                fail("unexpected default options", FLASHC_SUCCESS);
            break;
        }
        case 1: {
            int64_t shape[FLASHC_MAX_RANK + 4];
            for (int i = 0; i < FLASHC_MAX_RANK + 4; ++i) shape[i] = rd_interesting_i64(r);
            int rank = rd_u8(r) < 200 ? rd_below(r, FLASHC_MAX_RANK + 3) - 1 : (int)rd_u32(r);
            flashc_device dev = {(flashc_device_type)rd_below(r, 3), (int)rd_interesting_i64(r)};
            flashc_tensor t = flashc_tensor_contiguous(NULL, (flashc_dtype)(int)rd_u32(r), dev, rank,
                                                       rd_u8(r) < 16 ? NULL : shape);
            if (t.rank < 0 || t.rank > FLASHC_MAX_RANK) fail("tensor_contiguous rank out of range", FLASHC_SUCCESS);
            break;
        }
        case 2: {
            const char *s = flashc_status_string((flashc_status)(int)rd_u32(r));
            if (!s || !s[0]) fail("empty status string", FLASHC_SUCCESS);
            break;
        }
        case 3: {
            size_t n = flashc_dtype_size((flashc_dtype)(int)rd_u32(r));
            if (n != 0 && n != 2 && n != 4 && n != 8) fail("odd dtype size", FLASHC_SUCCESS);
            break;
        }
        default: {
            const char *v = flashc_version();
            if (!v || !v[0] || !flashc_last_error_message()) fail("empty version", FLASHC_SUCCESS);
            (void)flashc_cuda_available();
            break;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    reader r = {data, size};
    switch (rd_below(&r, 5)) {
        case 0: fuzz_forward(&r); break;
        case 1: fuzz_backward(&r, 0); break;
        case 2: fuzz_backward(&r, 1); break;
        case 4: fuzz_kvcache(&r); break;
        default: fuzz_helpers(&r); break;
    }
    return 0;
}
