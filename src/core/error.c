#include "error.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_message[512];

flashc_status flashc_fail(flashc_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_message, sizeof last_message, fmt, ap);
    va_end(ap);
    return status;
}

void flashc_clear_error(void) { last_message[0] = '\0'; }

const char *flashc_last_error_message(void) { return last_message; }

const char *flashc_status_string(flashc_status status) {
    switch (status) {
        case FLASHC_SUCCESS: return "FLASHC_SUCCESS: success";
        case FLASHC_ERROR_NULL_POINTER: return "FLASHC_ERROR_NULL_POINTER: a required pointer is NULL";
        case FLASHC_ERROR_DTYPE: return "FLASHC_ERROR_DTYPE: unsupported or mismatched dtype";
        case FLASHC_ERROR_DEVICE: return "FLASHC_ERROR_DEVICE: tensors on different devices";
        case FLASHC_ERROR_RANK: return "FLASHC_ERROR_RANK: wrong tensor rank";
        case FLASHC_ERROR_SHAPE: return "FLASHC_ERROR_SHAPE: shape mismatch or extent out of range";
        case FLASHC_ERROR_STRIDE: return "FLASHC_ERROR_STRIDE: invalid strides";
        case FLASHC_ERROR_HEAD_DIM: return "FLASHC_ERROR_HEAD_DIM: head dim outside [1, 256]";
        case FLASHC_ERROR_HEAD_GROUPS: return "FLASHC_ERROR_HEAD_GROUPS: nheads not a multiple of nheads_k";
        case FLASHC_ERROR_CU_SEQLENS: return "FLASHC_ERROR_CU_SEQLENS: invalid cu_seqlens, seqused_k or max_seqlen";
        case FLASHC_ERROR_DROPOUT: return "FLASHC_ERROR_DROPOUT: dropout_p outside [0, 1)";
        case FLASHC_ERROR_WINDOW: return "FLASHC_ERROR_WINDOW: window size below -1";
        case FLASHC_ERROR_SOFTCAP: return "FLASHC_ERROR_SOFTCAP: softcap negative or not finite";
        case FLASHC_ERROR_SCALE: return "FLASHC_ERROR_SCALE: softmax_scale not finite";
        case FLASHC_ERROR_WORKSPACE: return "FLASHC_ERROR_WORKSPACE: workspace missing or too small";
        case FLASHC_ERROR_ARGUMENT: return "FLASHC_ERROR_ARGUMENT: invalid argument";
        case FLASHC_ERROR_UNSUPPORTED: return "FLASHC_ERROR_UNSUPPORTED: not available in this build or on this device";
        case FLASHC_ERROR_BACKEND: return "FLASHC_ERROR_BACKEND: device runtime failure";
    }
    return "FLASHC_ERROR_UNKNOWN: unknown status";
}
