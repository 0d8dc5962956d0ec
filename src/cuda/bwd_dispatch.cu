/* The backward's choice of main kernel: the Hopper path where it applies
 * (hopper_bwd.h), else the portable configuration the plan picked
 * (bwd_workspace.h: the smallest compiled head dim that holds d and dv). */
#include "bwd_launch.h"
#include "hopper_bwd.h"

cudaError_t flashc_bwd_dispatch(const flashc_bwd_params *p, void *stream, int is_bf16, int head_dim_config,
                                int small, int general) {
    const cudaError_t hopper = flashc_hopper_bwd(p, stream, is_bf16);
    if (hopper == cudaSuccess && p->head_splits > 1) return flashc_bwd_combine_dkv(p, is_bf16, stream);
    if (hopper != cudaErrorNotSupported) return hopper;
    /* A plan for the Hopper kernel, which declined (the tensors did not
     * suit TMA): the portable kernel walks whole groups and writes dK, dV
     * itself. Deterministic: one dQ accumulator there, no slices; one CTA
     * per (sequence, kv head), which alone adds into its query heads' dQ
     * rows, is deterministic: slow, but right. */
    flashc_bwd_params portable = *p;
    portable.head_splits = 1;
    if (p->dq_order) {
        portable.nchunks = 1;
        portable.dq_order = nullptr;
    }
    p = &portable;
#define FLASHC_BWD_TRY_CONFIG(HEAD_DIM) \
    if (head_dim_config == HEAD_DIM) return flashc_bwd_run_hdim##HEAD_DIM(p, stream, is_bf16, small, general);
    FLASHC_BWD_HEAD_DIMS(FLASHC_BWD_TRY_CONFIG)
#undef FLASHC_BWD_TRY_CONFIG
    return cudaErrorInvalidValue; /* unreachable: the plan picks a compiled configuration */
}
