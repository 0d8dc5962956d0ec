/* The attention semantics every backend shares, in one place: which key
 * columns a query row sees, how a raw score becomes a logit (scale, softcap,
 * ALiBi), the dropout keep decision, and the varlen padded offsets.
 * A backend calls these; it never re-derives them. Compiles for host and
 * device. */
#ifndef FLASHC_CORE_SEMANTICS_H
#define FLASHC_CORE_SEMANTICS_H

#include <math.h>
#include <stdint.h>

#include "host_device.h"
#include "philox.h"

/* ---- masks -------------------------------------------------------------- */

/* Visible key columns [*lo, *hi) of query row `row` in a sequence of sq
 * queries and sk keys. Causal and windows are aligned to the bottom-right
 * corner: with shift = sk - sq, column j is visible iff
 *   row + shift - window_left <= j <= row + shift + window_right,
 * a negative window bound being unbounded. The caller has folded `causal`
 * into window_right = 0 (flashc_normalize_window). Both bounds are
 * non-decreasing in `row`, so a block of rows [r0, r1) sees at most
 * [lo(r0), hi(r1 - 1)). An empty row gives *lo == *hi. */
FLASHC_HD void flashc_visible_cols(int64_t row, int64_t sq, int64_t sk,
                                   int64_t window_left, int64_t window_right,
                                   int64_t *lo, int64_t *hi) {
    int64_t diag = row + sk - sq;
    int64_t l = 0, h = sk;
    if (window_left >= 0 && diag - window_left > l) l = diag - window_left;
    if (window_right >= 0 && diag + window_right + 1 < h) h = diag + window_right + 1;
    if (l > sk) l = sk;
    if (h < l) h = l;
    *lo = l;
    *hi = h;
}

/* Fold `causal` into the window (causal forces window_right = 0) and drop
 * bounds that cannot bind for any row of any sequence of the problem:
 * the left bound row + sk - sq - left is <= 0 for every row once
 * left >= sk - 1, the right bound row + sk - sq + right is >= sk - 1 for
 * every row once right >= sq - 1. `max_sq` / `max_sk` are the largest
 * query / key lengths. (flash_attn drops right >= sk, which changes the
 * result when sq > sk + 1; this keeps the rule exact.) */
FLASHC_HD void flashc_normalize_window(int causal, int64_t max_sq, int64_t max_sk,
                                       int64_t *window_left, int64_t *window_right) {
    if (causal) *window_right = 0;
    if (*window_left >= max_sk - 1 && *window_left >= 0) *window_left = -1;
    if (*window_right >= max_sq - 1 && *window_right >= 0) *window_right = -1;
}

/* ---- scores -------------------------------------------------------------- */

/* Logit of (row, col) from the raw dot product q_row · k_col:
 *   s = scale · dot;  softcap > 0: s = softcap · tanh(s / softcap);
 *   then ALiBi: s -= slope · |row + sk - sq - col|  (slope 0 disables). */
FLASHC_HD double flashc_logit(double dot, double scale, double softcap,
                              double alibi_slope, int64_t row, int64_t col,
                              int64_t sq, int64_t sk) {
    double s = scale * dot;
    if (softcap > 0.0) s = softcap * tanh(s / softcap);
    if (alibi_slope != 0.0) {
        int64_t dist = row + sk - sq - col;
        if (dist < 0) dist = -dist;
        s -= alibi_slope * (double)dist;
    }
    return s;
}

/* ALiBi bias as float, for kernels that keep the logit in float. */
FLASHC_HD float flashc_alibi_bias(float slope, int64_t row, int64_t col,
                                  int64_t sq, int64_t sk) {
    int64_t dist = row + sk - sq - col;
    if (dist < 0) dist = -dist;
    return -slope * (float)dist;
}

/* ---- dropout ------------------------------------------------------------- */

/* Keep threshold for drop probability p in [0, 1): an entry is kept iff its
 * 32-bit random word is >= threshold, so P(keep) = 1 - threshold / 2^32. */
FLASHC_HD uint32_t flashc_dropout_threshold(double p) {
    double t = p * 4294967296.0;
    if (!(t > 0.0)) return 0u;
    if (t >= 4294967295.0) return 0xFFFFFFFFu;
    return (uint32_t)t;
}

/* The four random words that decide columns 4·(col/4) .. 4·(col/4)+3 of one
 * (batch, head, row). Counter = (col / 4, row, batch · nheads + head,
 * low word of offset); key = (low word of seed, high word of seed XOR high
 * word of offset). For a fixed seed the map from (offset, batch, head, row,
 * col / 4) to (counter, key) is injective. `batch` is the sequence index in
 * varlen mode, `row` and `col` are positions inside the sequence. */
typedef struct flashc_dropout_input {
    flashc_philox_u32x4 counter;
    uint32_t key0, key1;
} flashc_dropout_input;

/* The Philox counter and key behind flashc_dropout_words (for kernels that
 * run many Philox instances side by side, e.g. one per SIMD lane). */
FLASHC_HD flashc_dropout_input flashc_dropout_counter(uint64_t seed, uint64_t offset,
                                                      int64_t batch, int64_t nheads,
                                                      int64_t head, int64_t row,
                                                      int64_t col) {
    flashc_dropout_input in;
    in.counter.x = (uint32_t)(col >> 2);
    in.counter.y = (uint32_t)row;
    in.counter.z = (uint32_t)(batch * nheads + head);
    in.counter.w = (uint32_t)offset;
    in.key0 = (uint32_t)seed;
    in.key1 = (uint32_t)(seed >> 32) ^ (uint32_t)(offset >> 32);
    return in;
}

FLASHC_HD flashc_philox_u32x4 flashc_dropout_words(uint64_t seed, uint64_t offset,
                                                   int64_t batch, int64_t nheads,
                                                   int64_t head, int64_t row,
                                                   int64_t col) {
    flashc_dropout_input in =
        flashc_dropout_counter(seed, offset, batch, nheads, head, row, col);
    return flashc_philox4x32_10(in.counter, in.key0, in.key1);
}

/* Select the word of column `col` among the four of its group. */
FLASHC_HD uint32_t flashc_dropout_word_for_col(flashc_philox_u32x4 w, int64_t col) {
    switch (col & 3) {
        case 0: return w.x;
        case 1: return w.y;
        case 2: return w.z;
        default: return w.w;
    }
}

/* Whether entry (batch, head, row, col) is kept. */
FLASHC_HD int flashc_dropout_keep(uint64_t seed, uint64_t offset, uint32_t threshold,
                                  int64_t batch, int64_t nheads, int64_t head,
                                  int64_t row, int64_t col) {
    flashc_philox_u32x4 w =
        flashc_dropout_words(seed, offset, batch, nheads, head, row, col);
    return flashc_dropout_word_for_col(w, col) >= threshold;
}

/* ---- varlen per-row buffers ---------------------------------------------- */

/* Start row of sequence `b` in a per-row buffer laid out with a gap after
 * each sequence, so one sequence's tiles of `tile_m` rows never touch the
 * next: ((cu_seqlens[b] + b * tile_m) / tile_m) * tile_m. `tile_m` is the
 * m-block of the kernel that reads and writes the buffer; there is no
 * default. */
FLASHC_HD int64_t flashc_padded_row_offset(int64_t cu_seqlen_b, int64_t b, int64_t tile_m) {
    return ((cu_seqlen_b + b * tile_m) / tile_m) * tile_m;
}

/* Rows a padded per-row buffer needs for `batch` sequences of `total` rows. */
FLASHC_HD int64_t flashc_padded_rows(int64_t total, int64_t batch, int64_t tile_m) {
    return flashc_padded_row_offset(total, batch, tile_m) + tile_m;
}

/* Round up to a multiple of m. */
FLASHC_HD int64_t flashc_round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

#endif
