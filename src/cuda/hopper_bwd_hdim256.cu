/* Hopper backward kernels for head dims up to 256 (hopper_bwd_config.h):
 * d and dv past 192, or either past 128 with the other past 192. The
 * narrower ones of this configuration run kernels whose products stop
 * at their columns (hopper_bwd_hdim192x*.cu). */
#include "hopper_bwd_launch.cuh"

static FLASHC_HOPPER_BWD_DEFINE_RUN_COLS(run_full, 256, 256, 256)

cudaError_t flashc_hopper_bwd_run_hdim256(const flashc_bwd_params *p, const flashc_hopper_bwd_maps *m, void *stream,
                                          int is_bf16) {
    const int d = p->fwd.head_dim, dv = p->fwd.head_dim_v;
    if (d <= 192 && dv <= 128) return flashc_hopper_bwd_run_hdim192x128(p, m, stream, is_bf16);
    if (d <= 192 && dv <= 192) return flashc_hopper_bwd_run_hdim192x192(p, m, stream, is_bf16);
    return run_full(p, m, stream, is_bf16);
}
