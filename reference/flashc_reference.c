/* Naive double-precision attention reference: see flashc_reference.h. */
#include "flashc_reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- Elements --------------------------------------------------------- */

int64_t flashc_ref_offset(const flashc_tensor *t, const int64_t *index) {
    int64_t off = 0;
    for (int r = 0; r < t->rank; ++r) off += index[r] * t->stride[r];
    return off;
}

/* Round-to-nearest-even encoding into a small binary float format with
 * `mbits` stored mantissa bits and `ebits` exponent bits. */
static uint16_t encode_small_float(double x, int mbits, int ebits) {
    const int bias = (1 << (ebits - 1)) - 1;
    const int emin = 1 - bias;
    const uint32_t exp_all = (1u << ebits) - 1;
    uint32_t sign = signbit(x) ? 1u << (mbits + ebits) : 0u;
    double a = fabs(x);
    if (isnan(x)) return (uint16_t)(sign | exp_all << mbits | 1u << (mbits - 1));
    if (isinf(x)) return (uint16_t)(sign | exp_all << mbits);
    if (a == 0.0) return (uint16_t)sign;
    if (a < ldexp(1.0, emin)) {
        /* Subnormal: multiples of 2^(emin - mbits); a carry into 2^mbits is
         * exactly the encoding of the smallest normal. */
        uint32_t m = (uint32_t)nearbyint(ldexp(a, mbits - emin));
        return (uint16_t)(sign | m);
    }
    int e;
    frexp(a, &e);
    int exponent = e - 1; /* a in [2^exponent, 2^(exponent+1)) */
    if (exponent > bias) return (uint16_t)(sign | exp_all << mbits);
    uint32_t m = (uint32_t)nearbyint(ldexp(a, mbits - exponent)); /* [2^mbits, 2^(mbits+1)] */
    uint32_t bits = ((uint32_t)(exponent + bias) << mbits) + (m - (1u << mbits));
    if ((bits >> mbits) >= exp_all) return (uint16_t)(sign | exp_all << mbits);
    return (uint16_t)(sign | bits);
}

static double decode_small_float(uint16_t bits, int mbits, int ebits) {
    const int bias = (1 << (ebits - 1)) - 1;
    const uint32_t exp_all = (1u << ebits) - 1;
    int negative = (bits >> (mbits + ebits)) & 1;
    uint32_t field = (bits >> mbits) & exp_all;
    uint32_t mant = bits & ((1u << mbits) - 1);
    double v;
    if (field == exp_all) v = mant ? NAN : INFINITY;
    else if (field == 0) v = ldexp((double)mant, 1 - bias - mbits);
    else v = ldexp((double)(mant | 1u << mbits), (int)field - bias - mbits);
    return negative ? -v : v;
}

uint16_t flashc_ref_half_from_double(double value) { return encode_small_float(value, 10, 5); }
double flashc_ref_half_to_double(uint16_t bits) { return decode_small_float(bits, 10, 5); }
uint16_t flashc_ref_bfloat16_from_double(double value) { return encode_small_float(value, 7, 8); }
double flashc_ref_bfloat16_to_double(uint16_t bits) { return decode_small_float(bits, 7, 8); }

double flashc_ref_load(const flashc_tensor *t, const int64_t *index) {
    int64_t off = flashc_ref_offset(t, index);
    switch (t->dtype) {
        case FLASHC_DTYPE_FLOAT32: return ((const float *)t->data)[off];
        case FLASHC_DTYPE_FLOAT64: return ((const double *)t->data)[off];
        case FLASHC_DTYPE_FLOAT16: return flashc_ref_half_to_double(((const uint16_t *)t->data)[off]);
        case FLASHC_DTYPE_BFLOAT16:
            return flashc_ref_bfloat16_to_double(((const uint16_t *)t->data)[off]);
        case FLASHC_DTYPE_INT32: return ((const int32_t *)t->data)[off];
    }
    return NAN;
}

void flashc_ref_store(flashc_tensor *t, const int64_t *index, double value) {
    int64_t off = flashc_ref_offset(t, index);
    switch (t->dtype) {
        case FLASHC_DTYPE_FLOAT32: ((float *)t->data)[off] = (float)value; break;
        case FLASHC_DTYPE_FLOAT64: ((double *)t->data)[off] = value; break;
        case FLASHC_DTYPE_FLOAT16:
            ((uint16_t *)t->data)[off] = flashc_ref_half_from_double(value);
            break;
        case FLASHC_DTYPE_BFLOAT16:
            ((uint16_t *)t->data)[off] = flashc_ref_bfloat16_from_double(value);
            break;
        case FLASHC_DTYPE_INT32: ((int32_t *)t->data)[off] = (int32_t)llrint(value); break;
    }
}

double flashc_ref_round(flashc_dtype dtype, double value) {
    switch (dtype) {
        case FLASHC_DTYPE_FLOAT32: return (float)value;
        case FLASHC_DTYPE_FLOAT16: return flashc_ref_half_to_double(flashc_ref_half_from_double(value));
        case FLASHC_DTYPE_BFLOAT16:
            return flashc_ref_bfloat16_to_double(flashc_ref_bfloat16_from_double(value));
        case FLASHC_DTYPE_INT32: return (double)(int32_t)llrint(value);
        case FLASHC_DTYPE_FLOAT64: return value;
    }
    return value;
}

/* ---- Sequences -------------------------------------------------------- */

static int is_varlen(const flashc_varlen *varlen) { return varlen && varlen->cu_seqlens_q; }

static double load1(const flashc_tensor *t, int64_t a) { return flashc_ref_load(t, &a); }

int64_t flashc_ref_batch_count(const flashc_tensor *q, const flashc_varlen *varlen) {
    if (is_varlen(varlen)) return varlen->cu_seqlens_q->shape[0] - 1;
    return q->shape[0];
}

flashc_ref_seq flashc_ref_sequence(const flashc_tensor *q, const flashc_tensor *k,
                                   const flashc_varlen *varlen, int64_t b) {
    flashc_ref_seq s;
    if (!is_varlen(varlen)) {
        s.q_start = 0;
        s.k_start = 0;
        s.len_q = q->shape[1];
        s.len_k = k->shape[1];
        return s;
    }
    s.q_start = (int64_t)load1(varlen->cu_seqlens_q, b);
    s.len_q = (int64_t)load1(varlen->cu_seqlens_q, b + 1) - s.q_start;
    s.k_start = (int64_t)load1(varlen->cu_seqlens_k, b);
    s.len_k = (int64_t)load1(varlen->cu_seqlens_k, b + 1) - s.k_start;
    if (varlen->seqused_k) s.len_k = (int64_t)load1(varlen->seqused_k, b);
    return s;
}

void flashc_ref_seq_element(int varlen, int64_t b, int64_t start, int64_t r, int64_t h,
                            int64_t x, int64_t index[4]) {
    if (varlen) {
        index[0] = start + r;
        index[1] = h;
        index[2] = x;
    } else {
        index[0] = b;
        index[1] = r;
        index[2] = h;
        index[3] = x;
    }
}

/* Element (sequence b, local row r, head h, dim x) of a q/k/v-like tensor. */
static int64_t seq_index(const flashc_tensor *t, int varlen, int64_t b, int64_t start, int64_t r,
                         int64_t h, int64_t x, int64_t *index) {
    flashc_ref_seq_element(varlen, b, start, r, h, x, index);
    return flashc_ref_offset(t, index);
}

static double seq_load(const flashc_tensor *t, int varlen, int64_t b, int64_t start, int64_t r,
                       int64_t h, int64_t x) {
    int64_t index[4];
    seq_index(t, varlen, b, start, r, h, x, index);
    return flashc_ref_load(t, index);
}

void flashc_ref_row_element(int varlen, int64_t b, int64_t start, int64_t h, int64_t r,
                            int64_t index[3]) {
    if (varlen) {
        index[0] = h;
        index[1] = start + r;
    } else {
        index[0] = b;
        index[1] = h;
        index[2] = r;
    }
}

/* Element (b, h, local row r) of an lse-like tensor. */
static double row_load(const flashc_tensor *t, int varlen, int64_t b, int64_t start, int64_t h,
                       int64_t r) {
    int64_t index[3];
    flashc_ref_row_element(varlen, b, start, h, r, index);
    return flashc_ref_load(t, index);
}

/* ---- Masks, scores, dropout ------------------------------------------- */

int flashc_ref_visible(const flashc_attention_options *options, int64_t len_q, int64_t len_k,
                       int64_t i, int64_t j) {
    int64_t left = options->window_left;
    int64_t right = options->causal ? 0 : options->window_right;
    int64_t diag = i + len_k - len_q; /* bottom-right aligned diagonal */
    if (j < 0 || j >= len_k) return 0;
    if (left >= 0 && j < diag - left) return 0;
    if (right >= 0 && j > diag + right) return 0;
    return 1;
}

static uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t *hi) {
    uint64_t product = (uint64_t)a * (uint64_t)b;
    *hi = (uint32_t)(product >> 32);
    return (uint32_t)product;
}

void flashc_ref_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t x0 = counter[0], x1 = counter[1], x2 = counter[2], x3 = counter[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; ++round) {
        if (round > 0) { /* Weyl key schedule: bump before rounds 2..10 */
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        uint32_t hi0, hi1;
        uint32_t lo0 = mulhilo(0xD2511F53u, x0, &hi0);
        uint32_t lo1 = mulhilo(0xCD9E8D57u, x2, &hi1);
        uint32_t y0 = hi1 ^ x1 ^ k0;
        uint32_t y2 = hi0 ^ x3 ^ k1;
        x0 = y0;
        x1 = lo1;
        x2 = y2;
        x3 = lo0;
    }
    out[0] = x0;
    out[1] = x1;
    out[2] = x2;
    out[3] = x3;
}

int flashc_ref_dropout_keep(uint64_t seed, uint64_t offset, double p, int64_t b, int64_t h,
                            int64_t nheads, int64_t i, int64_t j) {
    if (p <= 0.0) return 1;
    uint32_t counter[4] = {(uint32_t)(j >> 2), (uint32_t)i, (uint32_t)(b * nheads + h),
                           (uint32_t)offset};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32) ^ (uint32_t)(offset >> 32)};
    uint32_t word[4];
    flashc_ref_philox4x32_10(counter, key, word);
    double threshold = floor(p * 4294967296.0);
    return (double)word[j & 3] >= threshold;
}

/* ---- Attention -------------------------------------------------------- */

/* Everything the row computation needs, resolved from the args. */
typedef struct ref_problem {
    const flashc_tensor *q, *k, *v;
    const flashc_varlen *varlen;
    const flashc_attention_options *options;
    int varlen_mode;
    int64_t nheads, nheads_k, d, dv;
    double scale;
} ref_problem;

static int resolve(ref_problem *p, const flashc_tensor *q, const flashc_tensor *k,
                   const flashc_tensor *v, const flashc_varlen *varlen,
                   const flashc_attention_options *options) {
    if (!q || !k || !v || !varlen || !options) return -1;
    p->q = q;
    p->k = k;
    p->v = v;
    p->varlen = varlen;
    p->options = options;
    p->varlen_mode = is_varlen(varlen);
    if (q->rank != (p->varlen_mode ? 3 : 4)) return -1;
    p->nheads = q->shape[q->rank - 2];
    p->d = q->shape[q->rank - 1];
    p->nheads_k = k->shape[k->rank - 2];
    p->dv = v->shape[v->rank - 1];
    if (p->nheads_k <= 0 || p->nheads % p->nheads_k != 0) return -1;
    p->scale = options->softmax_scale != 0.0 ? options->softmax_scale : 1.0 / sqrt((double)p->d);
    return 0;
}

static double alibi_slope(const ref_problem *p, int64_t b, int64_t h) {
    const flashc_tensor *slopes = p->options->alibi_slopes;
    if (!slopes) return 0.0;
    int64_t index[2];
    if (slopes->rank == 1) {
        index[0] = h;
    } else {
        index[0] = b;
        index[1] = h;
    }
    return flashc_ref_load(slopes, index);
}

/* The keys and values of one (sequence, kv head), decoded once into dense
 * rows (len_k x d and len_k x dv): every query row reads all of them, and
 * converting each element at every read would dominate the run time. */
typedef struct head_kv {
    double *k, *v;
} head_kv;

static void head_kv_free(head_kv *kv) {
    free(kv->k);
    free(kv->v);
}

static int head_kv_load(head_kv *kv, const ref_problem *p, const flashc_ref_seq *seq, int64_t b,
                        int64_t hk) {
    int64_t n = seq->len_k > 0 ? seq->len_k : 1;
    kv->k = malloc((size_t)(n * (p->d > 0 ? p->d : 1)) * sizeof(double));
    kv->v = malloc((size_t)(n * (p->dv > 0 ? p->dv : 1)) * sizeof(double));
    if (!kv->k || !kv->v) return -1;
    for (int64_t j = 0; j < seq->len_k; ++j) {
        for (int64_t x = 0; x < p->d; ++x)
            kv->k[j * p->d + x] = seq_load(p->k, p->varlen_mode, b, seq->k_start, j, hk, x);
        for (int64_t x = 0; x < p->dv; ++x)
            kv->v[j * p->dv + x] = seq_load(p->v, p->varlen_mode, b, seq->k_start, j, hk, x);
    }
    return 0;
}

/* Scores of row i of (b, h) against every column (the keys of h's kv
 * head): s[j] (only where visible[j]), and t[j] = tanh(raw / softcap) for
 * the softcap derivative. Returns the number of visible columns. */
static int64_t row_scores(const ref_problem *p, const flashc_ref_seq *seq, const double *keys,
                          int64_t b, int64_t h, int64_t i, double *s, double *t,
                          unsigned char *visible, double *qrow) {
    double softcap = p->options->softcap;
    double slope = alibi_slope(p, b, h);
    int64_t diag = i + seq->len_k - seq->len_q;
    int64_t count = 0;
    for (int64_t x = 0; x < p->d; ++x)
        qrow[x] = seq_load(p->q, p->varlen_mode, b, seq->q_start, i, h, x);
    for (int64_t j = 0; j < seq->len_k; ++j) {
        visible[j] = (unsigned char)flashc_ref_visible(p->options, seq->len_q, seq->len_k, i, j);
        if (!visible[j]) continue;
        ++count;
        double dot = 0.0;
        for (int64_t x = 0; x < p->d; ++x)
            dot += qrow[x] * keys[j * p->d + x];
        double score = p->scale * dot;
        t[j] = 0.0;
        if (softcap > 0.0) {
            t[j] = tanh(score / softcap);
            score = softcap * t[j];
        }
        s[j] = score - slope * (double)llabs(diag - j);
    }
    return count;
}

/* Normalised probabilities of row i (p[j], 0 where hidden), its row max
 * and LSE. Returns 0 when the row sees nothing (lse +inf). */
static int row_softmax(int64_t len_k, const double *s, const unsigned char *visible, double *prob,
                       double *row_max, double *lse) {
    double m = -INFINITY;
    for (int64_t j = 0; j < len_k; ++j)
        if (visible[j] && s[j] > m) m = s[j];
    if (m == -INFINITY) {
        for (int64_t j = 0; j < len_k; ++j) prob[j] = 0.0;
        *row_max = -INFINITY;
        *lse = INFINITY;
        return 0;
    }
    double sum = 0.0;
    for (int64_t j = 0; j < len_k; ++j) {
        prob[j] = visible[j] ? exp(s[j] - m) : 0.0;
        sum += prob[j];
    }
    for (int64_t j = 0; j < len_k; ++j) prob[j] /= sum;
    *row_max = m;
    *lse = m + log(sum);
    return 1;
}

typedef struct row_buffers {
    double *s, *t, *prob;
    double *factor;  /* dropout factor: 0 dropped, 1/(1-p) kept */
    double *qrow;    /* the row of q */
    unsigned char *visible;
} row_buffers;

static int row_buffers_alloc(row_buffers *r, int64_t len_k, int64_t d) {
    size_t n = (size_t)(len_k > 0 ? len_k : 1);
    r->qrow = malloc((size_t)(d > 0 ? d : 1) * sizeof(double));
    r->s = malloc(n * sizeof(double));
    r->t = malloc(n * sizeof(double));
    r->prob = malloc(n * sizeof(double));
    r->factor = malloc(n * sizeof(double));
    r->visible = malloc(n);
    return r->s && r->t && r->prob && r->factor && r->qrow && r->visible ? 0 : -1;
}

static void row_buffers_free(row_buffers *r) {
    free(r->s);
    free(r->t);
    free(r->prob);
    free(r->factor);
    free(r->qrow);
    free(r->visible);
}

/* Dropout factor of (b, h, i, j): 0 if dropped, 1/(1-p) if kept. */
static double dropout_factor(const ref_problem *p, int64_t b, int64_t h, int64_t i, int64_t j) {
    const flashc_attention_options *o = p->options;
    if (o->dropout_p <= 0.0) return 1.0;
    return flashc_ref_dropout_keep(o->dropout_seed, o->dropout_offset, o->dropout_p, b, h,
                                   p->nheads, i, j)
               ? 1.0 / (1.0 - o->dropout_p)
               : 0.0;
}

/* Forward of (b, h) with resolved problem; see flashc_ref_forward. */
static int forward_head(const ref_problem *p, int64_t b, int64_t h, double *out, double *lse,
                        double *s_dmask) {
    flashc_ref_seq seq = flashc_ref_sequence(p->q, p->k, p->varlen, b);
    int64_t hk = h / (p->nheads / p->nheads_k);
    row_buffers r;
    head_kv kv = {NULL, NULL};
    if (row_buffers_alloc(&r, seq.len_k, p->d) != 0 || head_kv_load(&kv, p, &seq, b, hk) != 0) {
        row_buffers_free(&r);
        head_kv_free(&kv);
        return -1;
    }
    for (int64_t i = 0; i < seq.len_q; ++i) {
        double m, row_lse;
        row_scores(p, &seq, kv.k, b, h, i, r.s, r.t, r.visible, r.qrow);
        row_softmax(seq.len_k, r.s, r.visible, r.prob, &m, &row_lse);
        if (lse) lse[i] = row_lse;
        for (int64_t j = 0; j < seq.len_k; ++j)
            r.factor[j] = r.visible[j] ? dropout_factor(p, b, h, i, j) : 0.0;
        if (out) {
            for (int64_t x = 0; x < p->dv; ++x) {
                double acc = 0.0;
                for (int64_t j = 0; j < seq.len_k; ++j)
                    if (r.factor[j] != 0.0)
                        acc += r.prob[j] * r.factor[j] * kv.v[j * p->dv + x];
                out[i * p->dv + x] = acc;
            }
        }
        if (s_dmask) {
            for (int64_t j = 0; j < seq.len_k; ++j) {
                double e = r.visible[j] ? exp(r.s[j] - m) : 0.0;
                if (r.visible[j] && r.factor[j] == 0.0) e = -e; /* dropped */
                s_dmask[i * seq.len_k + j] = e;
            }
        }
    }
    row_buffers_free(&r);
    head_kv_free(&kv);
    return 0;
}

int flashc_ref_forward(const flashc_forward_args *args, int64_t b, int64_t h, double *out,
                       double *lse, double *s_dmask) {
    ref_problem p;
    if (!args || resolve(&p, args->q, args->k, args->v, &args->varlen, &args->options) != 0)
        return -1;
    if (b < 0 || b >= flashc_ref_batch_count(args->q, &args->varlen) || h < 0 || h >= p.nheads)
        return -1;
    return forward_head(&p, b, h, out, lse, s_dmask);
}

int flashc_ref_backward(const flashc_backward_args *args, int64_t b, int64_t hk, double *dq,
                        double *dk, double *dv) {
    ref_problem p;
    if (!args || !args->dout ||
        resolve(&p, args->q, args->k, args->v, &args->varlen, &args->options) != 0)
        return -1;
    if (b < 0 || b >= flashc_ref_batch_count(args->q, &args->varlen) || hk < 0 ||
        hk >= p.nheads_k)
        return -1;
    flashc_ref_seq seq = flashc_ref_sequence(p.q, p.k, p.varlen, b);
    int64_t group = p.nheads / p.nheads_k;
    int64_t sq = seq.len_q, sk = seq.len_k;
    if (dq) memset(dq, 0, (size_t)(group * sq * p.d) * sizeof(double));
    if (dk) memset(dk, 0, (size_t)(sk * p.d) * sizeof(double));
    if (dv) memset(dv, 0, (size_t)(sk * p.dv) * sizeof(double));

    row_buffers r;
    head_kv kv = {NULL, NULL};
    double *own_out = NULL;
    double *dout_row = malloc((size_t)(p.dv > 0 ? p.dv : 1) * sizeof(double));
    int status = row_buffers_alloc(&r, sk, p.d) != 0 || !dout_row ? -1 : 0;
    if (status == 0 && head_kv_load(&kv, &p, &seq, b, hk) != 0) status = -1;
    if (status == 0 && !args->out) {
        own_out = malloc((size_t)(sq * p.dv > 0 ? sq * p.dv : 1) * sizeof(double));
        if (!own_out) status = -1;
    }
    for (int64_t g = 0; status == 0 && g < group; ++g) {
        int64_t h = hk * group + g;
        if (own_out) forward_head(&p, b, h, own_out, NULL, NULL);
        for (int64_t i = 0; i < sq; ++i) {
            double m, row_lse;
            row_scores(&p, &seq, kv.k, b, h, i, r.s, r.t, r.visible, r.qrow);
            if (!row_softmax(sk, r.s, r.visible, r.prob, &m, &row_lse)) continue;
            /* D_i = rowsum(dO * O) - dLSE_i */
            double D = 0.0;
            for (int64_t x = 0; x < p.dv; ++x) {
                dout_row[x] = seq_load(args->dout, p.varlen_mode, b, seq.q_start, i, h, x);
                double o = own_out ? own_out[i * p.dv + x]
                                   : seq_load(args->out, p.varlen_mode, b, seq.q_start, i, h, x);
                D += dout_row[x] * o;
            }
            if (args->dlse) D -= row_load(args->dlse, p.varlen_mode, b, seq.q_start, h, i);
            for (int64_t j = 0; j < sk; ++j) {
                if (!r.visible[j]) continue;
                double z = dropout_factor(&p, b, h, i, j);
                double dp_dropped = 0.0;
                for (int64_t x = 0; x < p.dv; ++x) {
                    dp_dropped += dout_row[x] * kv.v[j * p.dv + x];
                    if (dv) dv[j * p.dv + x] += r.prob[j] * z * dout_row[x];
                }
                double ds = r.prob[j] * (dp_dropped * z - D);
                if (p.options->softcap > 0.0) ds *= 1.0 - r.t[j] * r.t[j];
                ds *= p.scale;
                for (int64_t x = 0; x < p.d; ++x) {
                    if (dq)
                        dq[(g * sq + i) * p.d + x] += ds * kv.k[j * p.d + x];
                    if (dk) dk[j * p.d + x] += ds * r.qrow[x];
                }
            }
        }
    }
    free(own_out);
    free(dout_row);
    row_buffers_free(&r);
    head_kv_free(&kv);
    return status;
}
