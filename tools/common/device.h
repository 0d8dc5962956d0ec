/* CUDA memory, copies, streams and event timing for the CLI and the
 * benchmark. Built with the CUDA runtime when the library has the CUDA
 * backend (FLASHC_TOOL_HAVE_CUDA); otherwise every function says that this
 * build has no CUDA and fails, and flashc_tool_cuda_usable() is 0.
 *
 * Functions returning int return 0 on success and -1 after printing the
 * runtime's message (prefixed with `what`). */
#ifndef FLASHC_TOOLS_DEVICE_H
#define FLASHC_TOOLS_DEVICE_H

#include <stddef.h>

#include "flashc.h"

/* Non-zero when this program can allocate and copy CUDA memory and the
 * library reports a CUDA device. */
int flashc_tool_cuda_usable(void);

/* The name of CUDA device 0 ("NVIDIA H200"), or "none". */
const char *flashc_tool_cuda_device_name(void);
/* Bytes of L2 cache of device 0 (0 when unknown). */
size_t flashc_tool_cuda_l2_bytes(void);

int flashc_tool_device_alloc(void **ptr, size_t bytes, const char *what);
void flashc_tool_device_free(void *ptr);
int flashc_tool_device_copy_to(void *device_dst, const void *host_src, size_t bytes);
int flashc_tool_device_copy_from(void *host_dst, const void *device_src, size_t bytes);
/* Every byte of [ptr, ptr + bytes) set to `byte` (0xFF: NaN poison). */
int flashc_tool_device_fill(void *ptr, int byte, size_t bytes);

/* Scratch for flashc_attention_forward_allocating (a flashc_workspace_allocator
 * whose context is a flashc_tool_scratch, zero-initialised): one device
 * buffer, grown on demand (NaN-poisoned when made, so a kernel that reads
 * scratch it did not write shows) and reused by later calls on the same
 * stream. */
typedef struct flashc_tool_scratch {
    void *ptr;
    size_t bytes;
} flashc_tool_scratch;

void *flashc_tool_scratch_allocate(void *context, size_t bytes, flashc_device device);
void flashc_tool_scratch_free(flashc_tool_scratch *s);

/* A non-blocking stream (the library's calls take it as options.stream). */
int flashc_tool_stream_create(void **stream);
void flashc_tool_stream_destroy(void *stream);
int flashc_tool_stream_synchronize(void *stream);

/* Elapsed time of the work enqueued on a stream between start and stop,
 * measured with CUDA events. */
typedef struct flashc_tool_event_timer {
    void *start, *stop, *stream;
} flashc_tool_event_timer;

int flashc_tool_timer_create(flashc_tool_event_timer *t, void *stream);
int flashc_tool_timer_start(flashc_tool_event_timer *t);
/* Records the stop event, waits for it, and gives the seconds between the
 * two events. */
int flashc_tool_timer_stop(flashc_tool_event_timer *t, double *seconds);
void flashc_tool_timer_destroy(flashc_tool_event_timer *t);

/* Times `count` calls of fn(ctx, i) enqueued back to back on `stream`:
 * events recorded around each call, one wait at the end, so the host's
 * launch work overlaps the device's and is not counted. fn returns 0, or
 * -1 to stop (after printing why). seconds[i] is call i's time. */
int flashc_tool_time_calls(void *stream, int count, int (*fn)(void *ctx, int i), void *ctx,
                           double *seconds);

#endif
