/* Which query rows see a block of keys, on the device (the backward's key
 * blocks walk exactly those rows, bwd_kernel.cuh) and on the host (the
 * plan counts them to predict each tile's cost, bwd_workspace.h). Plain C
 * too: tests/test_bwd_visibility.c checks it against the visibility rule
 * by brute force. */
#ifndef FLASHC_CUDA_BWD_VISIBILITY_H
#define FLASHC_CUDA_BWD_VISIBILITY_H

#include "../core/host_device.h"

/* Query rows [*first, *last] of a sequence (sq queries, sk keys) that see
 * any of the keys [n0, n1); *first > *last when none does. Inverts the
 * visibility rule of flashc_visible_cols: row i sees key j iff
 * j - shift - window_right <= i <= j - shift + window_left. */
FLASHC_HD void flashc_bwd_rows_seeing(long long n0, long long n1, long long sq, long long sk, long long window_left,
                                      long long window_right, int *first, int *last) {
    const long long shift = sk - sq;
    long long lo = 0, hi = sq - 1;
    if (window_right >= 0 && n0 - shift - window_right > lo) lo = n0 - shift - window_right;
    if (window_left >= 0 && n1 - 1 - shift + window_left < hi) hi = n1 - 1 - shift + window_left;
    if (lo > hi) { /* empty (also when lo >= sq or hi < 0) */
        *first = 0;
        *last = -1;
        return;
    }
    *first = (int)lo;
    *last = (int)hi;
}

#endif
