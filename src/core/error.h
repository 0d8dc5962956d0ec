/* The thread-local error message behind flashc_last_error_message(). */
#ifndef FLASHC_CORE_ERROR_H
#define FLASHC_CORE_ERROR_H

#include "flashc.h"

#if defined(__GNUC__)
#  define FLASHC_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#  define FLASHC_PRINTF(a, b)
#endif

/* Record a message for this thread and return `status`, so a check reads
 *   return flashc_fail(FLASHC_ERROR_SHAPE, "q: ...", ...); */
flashc_status flashc_fail(flashc_status status, const char *fmt, ...) FLASHC_PRINTF(2, 3);

/* Clear the message (a call that succeeds leaves ""). */
void flashc_clear_error(void);

#endif
