/* Checked allocation of the small internal tables a job cannot run without (descriptors,
 * index arrays, request lists): a failure is an internal error, not a user's, so it ends every
 * rank through die() with the request and what it was for, instead of a NULL that
 * crashes later. Large buffers go through the tracked allocator (core/tensor/memory.h), which
 * fails the same way. Code that reads user files and can report the file keeps returning its
 * own errors. */
#ifndef MEGADLM_CORE_UTIL_ALLOC_H
#define MEGADLM_CORE_UTIL_ALLOC_H

#include <stddef.h>

void *xmalloc(size_t bytes, const char *what);
/* Zero-filled count x size bytes; an overflowing product is a failure like any other. */
void *xcalloc(size_t count, size_t size, const char *what);
void *xrealloc(void *p, size_t bytes, const char *what);
char *xstrdup(const char *s, const char *what);

#endif
