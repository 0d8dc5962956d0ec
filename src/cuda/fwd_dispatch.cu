/* The forward's choice of kernel: the Hopper path where it applies
 * (hopper_fwd.h), else the portable kernel of the smallest compiled head
 * dim that holds both d and dv (fwd_config.h). */
#include "fwd_launch.h"
#include "hopper_fwd.h"

cudaError_t flashc_fwd_dispatch(const flashc_fwd_params *k, const flashc_fwd_scratch *scratch, void *stream,
                                int is_bf16, int general) {
    const cudaError_t hopper = flashc_hopper_fwd(k, stream, is_bf16, general);
    if (hopper != cudaErrorNotSupported) return hopper;
    const int d = k->head_dim > k->head_dim_v ? k->head_dim : k->head_dim_v;
#define FLASHC_TRY_CONFIG(HEAD_DIM, BM, BN, BNG, BND, W, C, EK) \
    if (d <= HEAD_DIM) return flashc_fwd_run_hdim##HEAD_DIM(k, scratch, stream, is_bf16, general);
    FLASHC_FWD_CONFIGS(FLASHC_TRY_CONFIG)
#undef FLASHC_TRY_CONFIG
    return cudaErrorInvalidValue; /* unreachable: validation caps head dims at 256 */
}
