/* Error messages returned to the caller: every module that can fail on user input writes a
 * message naming the file, offset or flag into a caller-provided buffer (docs/architecture/design.md,
 * "Errors a user can act on, and internal errors"; internal errors go through die.h). */
#ifndef MEGADLM_CORE_UTIL_ERROR_H
#define MEGADLM_CORE_UTIL_ERROR_H

#include <stddef.h>

/* printf into err[errlen] (nothing when err is NULL or errlen is 0). */
void err_set(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
