/* The backends' entry points, called by the dispatcher (src/core/api.c)
 * with a validated problem. */
#ifndef FLASHC_CORE_BACKEND_H
#define FLASHC_CORE_BACKEND_H

#include "kvcache.h"
#include "problem.h"

flashc_status flashc_cpu_forward(const flashc_problem *p);
/* A KV-cache call: the append (rotary on k_new), q rotated into
 * p->q_rotated (when rotary is on), then attention over the cache. */
flashc_status flashc_cpu_kvcache(flashc_kvcache_problem *p);
size_t flashc_cpu_backward_workspace_size(const flashc_problem *p);
flashc_status flashc_cpu_backward(const flashc_problem *p);

#ifdef FLASHC_HAVE_CUDA
flashc_status flashc_cuda_forward(const flashc_problem *p);
size_t flashc_cuda_backward_workspace_size(const flashc_problem *p);
flashc_status flashc_cuda_backward(const flashc_problem *p);
/* Bytes of p->workspace the CUDA KV-cache call needs (split partials),
 * with p->num_splits as given (0 = its heuristic). */
size_t flashc_cuda_kvcache_workspace_size(const flashc_kvcache_problem *p);
flashc_status flashc_cuda_kvcache(flashc_kvcache_problem *p);
int flashc_cuda_device_count(void);
#endif

#endif
