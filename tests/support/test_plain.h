/*
 * The plain same-precision computation that the tolerance rule measures
 * flashc against (DESIGN.md): attention as an eager framework computes it
 * in the input dtype, every product summed in float32 in index order and
 * every intermediate rounded to the dtype.
 *
 * It works on one head of one sequence at a time, over rows decoded once
 * into dense doubles; the inner loops run several independent float32
 * sums side by side, each still summed in index order, so every value is
 * the one an element-by-element computation gives.
 */
#ifndef FLASHC_TEST_PLAIN_H
#define FLASHC_TEST_PLAIN_H

#include "test_support.h"

/* The decoded rows of one (sequence b, query head h): q, out and dout of
 * the head, k and v of its kv head, k and v also transposed. */
typedef struct plain_rows {
    int64_t sq, sk, d, dv;
    double *q, *out, *dout; /* sq x d, sq x dv, sq x dv */
    double *k, *v;          /* sk x d, sk x dv */
    double *kt, *vt;        /* d x sk, dv x sk */
} plain_rows;

/* Decodes the rows of (b, h) of sequence `seq`. Returns 0, or -1 when out
 * of memory. */
int plain_rows_load(plain_rows *r, const test_case *tc, int64_t b, int64_t h,
                    const flashc_ref_seq *seq);
void plain_rows_free(plain_rows *r);

/* Scores and probabilities of (b, h), sq x sk each, row-major. */
typedef struct plain_head {
    int64_t sq, sk;
    double *s;              /* scores after softcap and ALiBi */
    double *t;              /* tanh(raw / softcap) */
    double *p, *pd;         /* probabilities, and with dropout applied */
    double *z;              /* dropout factor: 0 or 1/(1-p) */
    unsigned char *visible;
    double *m, *lse;        /* per row: maximum, LSE (+inf: sees nothing) */
} plain_head;

int plain_probabilities(plain_head *ph, const test_case *tc, int64_t b, int64_t h,
                        const plain_rows *r);
void plain_head_free(plain_head *ph);

/* out of row i (dv values, rounded to the dtype). */
void plain_out_row(const plain_head *ph, const plain_rows *r, flashc_dtype dt, int64_t i,
                   double *out);

/* The magnitudes the rounding errors of a gradient scale with: the largest
 * |scale| * sum |dS term| |k| (dq) and its G-fold for a group sum (dk). */
typedef struct plain_terms {
    double dq, dk;
} plain_terms;

/* The gradients of query head h = hk * G + g: dq (sq x d, rounded) into
 * `dq`, its share of the group's dk and dv added (float32) to `dk` and
 * `dv` (sk x d, sk x dv), term maxima raised in `terms`. */
int plain_backward_head(const test_case *tc, int64_t b, int64_t h, const plain_rows *r,
                        const plain_head *ph, double *dq, double *dk, double *dv,
                        plain_terms *terms);

#endif
