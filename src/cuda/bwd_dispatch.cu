/* The backward's choice of main kernel: the Hopper path where it applies
 * (hopper_bwd.h), else the portable configuration the plan picked
 * (bwd_workspace.h: the smallest compiled head dim that holds d and dv). */
#include "bwd_launch.h"
#include "hopper_bwd.h"

cudaError_t flashc_bwd_dispatch(const flashc_bwd_params *p, void *stream, int is_bf16, int head_dim_config,
                                int small, int general, int *dq_blocked) {
    *dq_blocked = 0;
    cudaError_t err = flashc_hopper_bwd(p, stream, is_bf16);
    if (err == cudaErrorNotSupported) {
        /* The portable kernel, for its own plan or for a Hopper plan the
         * Hopper kernel declined (the tensors did not suit TMA): it walks
         * the plan's key-block chunks and head splits. Deterministic on
         * the Hopper plan: one dQ accumulator, no slices; one CTA per
         * (sequence, kv head, head split), which alone adds into its query
         * heads' dQ rows, is deterministic: slow, but right. */
        flashc_bwd_params portable = *p;
        if (p->dq_order) {
            portable.nchunks = 1;
            portable.dq_order = nullptr;
        }
        err = cudaErrorInvalidValue; /* unreachable: the plan picks a compiled configuration */
#define FLASHC_BWD_TRY_CONFIG(HEAD_DIM) \
    if (head_dim_config == HEAD_DIM) err = flashc_bwd_run_hdim##HEAD_DIM(&portable, stream, is_bf16, small, general);
        FLASHC_BWD_HEAD_DIMS(FLASHC_BWD_TRY_CONFIG)
#undef FLASHC_BWD_TRY_CONFIG
        *dq_blocked = 1;
    }
    if (err == cudaSuccess && p->head_splits > 1) err = flashc_bwd_combine_dkv(p, is_bf16, stream);
    return err;
}
