/* Qualifiers that let one inline function compile for the host and, under
 * nvcc, for the device too. */
#ifndef FLASHC_CORE_HOST_DEVICE_H
#define FLASHC_CORE_HOST_DEVICE_H

#if defined(__CUDACC__)
#  define FLASHC_HD __host__ __device__ __forceinline__
#else
#  define FLASHC_HD static inline
#endif

#endif
