/* Argument validation: the one place every public argument is checked.
 * On success the problem is filled and every backend may trust it; on
 * failure the status names the argument (flashc_last_error_message) and
 * nothing has been written. */
#ifndef FLASHC_CORE_VALIDATE_H
#define FLASHC_CORE_VALIDATE_H

#include "kvcache.h"
#include "problem.h"

flashc_status flashc_validate_forward(const flashc_forward_args *args, flashc_problem *p);

/* Validates everything but the workspace (whose size depends on the
 * problem); flashc_validate_workspace does that part. */
flashc_status flashc_validate_backward(const flashc_backward_args *args, flashc_problem *p);

flashc_status flashc_validate_workspace(const flashc_backward_args *args, size_t required);

/* flashc_attention_kvcache's arguments, the index tensors' contents
 * included where they are in host memory. */
flashc_status flashc_validate_kvcache(const flashc_kvcache_args *args, flashc_kvcache_problem *p);

#endif
