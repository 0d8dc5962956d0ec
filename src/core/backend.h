/* The backends' entry points, called by the dispatcher (src/core/api.c)
 * with a validated problem. */
#ifndef FLASHC_CORE_BACKEND_H
#define FLASHC_CORE_BACKEND_H

#include "problem.h"

flashc_status flashc_cpu_forward(const flashc_problem *p);
size_t flashc_cpu_backward_workspace_size(const flashc_problem *p);
flashc_status flashc_cpu_backward(const flashc_problem *p);

#ifdef FLASHC_HAVE_CUDA
flashc_status flashc_cuda_forward(const flashc_problem *p);
size_t flashc_cuda_backward_workspace_size(const flashc_problem *p);
flashc_status flashc_cuda_backward(const flashc_problem *p);
int flashc_cuda_device_count(void);
#endif

#endif
