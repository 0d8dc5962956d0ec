/* What the CUDA backend's entry points share (backend.cu defines all but
 * the last, kvcache_backend.cu the last): the CUDA-only checks, the
 * forward kernels' parameters, running on the problem's device, its
 * multiprocessor count, and the varlen forward over paged keys that
 * flashc_cuda_forward hands on. */
#ifndef FLASHC_CUDA_BACKEND_SHARED_H
#define FLASHC_CUDA_BACKEND_SHARED_H

#include <cuda_runtime.h>

extern "C" {
#include "../core/problem.h"
}
#include "fwd_params.h"

/* float16 / bfloat16, head dims multiples of 8, 16-byte aligned rows of q,
 * k, v and out, lengths within int32. */
flashc_status flashc_cuda_check_supported(const flashc_problem *p);

flashc_fwd_params flashc_cuda_fwd_params(const flashc_problem *p);

/* Runs body(arg) with `device` current, then restores the caller's device;
 * a CUDA error becomes FLASHC_ERROR_BACKEND with its name. */
flashc_status flashc_cuda_on_device(int device, cudaError_t (*body)(const void *), const void *arg);

/* Multiprocessors of device dev, asked once per device (0 if unknown). */
int flashc_cuda_device_sms(int dev);

/* The most dynamic shared memory one CTA of device dev may opt in to (0 if
 * unknown): 227 KiB on H100 / H200, 163 on A100, 99 on sm_86 / sm_89
 * (RTX 30 / 40, A10, L40S). The kernels' tile choices fit under it. The
 * environment variable FLASHC_CUDA_SMEM_LIMIT (bytes) lowers it, so the
 * choices for smaller parts can be tested on a larger one. */
int flashc_cuda_device_smem_optin(int dev);

/* The varlen forward with a block table (p->kv.block_table): the KV-cache
 * kernel with one split. */
flashc_status flashc_cuda_paged_forward(const flashc_problem *p);

#endif
