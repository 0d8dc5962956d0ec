/* Which variant of the portable kernels a problem takes, decided on the
 * host by the forward's dispatch and the backward's plan alike. */
#ifndef FLASHC_CUDA_KERNEL_VARIANT_H
#define FLASHC_CUDA_KERNEL_VARIANT_H

#include <stdbool.h>

#include "../core/problem.h"

/* Whether the portable kernels' general variant runs the problem: softcap,
 * ALiBi or dropout is on, or the scale is negative (the plain kernels take
 * row maxima of raw dot products and fold the scale into the exponent,
 * which is right only for a positive scale). */
static inline bool flashc_needs_general_kernel(const flashc_problem *p) {
    return p->softcap > 0.0 || p->alibi_slopes != NULL || (p->dropout_p > 0.0 && p->dropout_threshold != 0u) ||
           p->scale < 0.0;
}

#endif
