/* Where the CLI's tensors live: host memory, or CUDA memory when the CLI
 * was built with the CUDA runtime. The host copy always exists (inputs are
 * generated there, the reference check reads there). */
#ifndef FLASHC_TOOLS_CLI_DEVICE_H
#define FLASHC_TOOLS_CLI_DEVICE_H

#include <stddef.h>

/* Non-zero when this CLI can allocate and copy CUDA memory and the library
 * reports a CUDA device. */
int flashc_cli_cuda_usable(void);

/* Each returns 0 on success, -1 after printing a message. */
int flashc_cli_device_alloc(void **ptr, size_t bytes);
int flashc_cli_device_copy_to(void *device_dst, const void *host_src, size_t bytes);
int flashc_cli_device_copy_from(void *host_dst, const void *device_src, size_t bytes);
int flashc_cli_device_synchronize(void);
void flashc_cli_device_free(void *ptr);

#endif
