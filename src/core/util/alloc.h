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

/* An array of *cap elements of elem bytes grown to hold at least `need` (capacity doubling from
 * `first`): the array, realloc'ed if needed, and *cap updated. grow_array returns NULL when
 * memory runs out, with p still valid and *cap unchanged, for code that reports its own
 * errors (the tokenizers); xgrow_array ends the job instead, like the x* functions above. */
void *grow_array(void *p, size_t *cap, size_t need, size_t elem, size_t first);
void *xgrow_array(void *p, size_t *cap, size_t need, size_t elem, size_t first, const char *what);

/* free() of every pointer given (NULL ones too): a struct's owned buffers in one statement. */
#define free_all(...)                                                                          \
    free_list((void *[]){__VA_ARGS__}, sizeof((void *[]){__VA_ARGS__}) / sizeof(void *))
void free_list(void *const *p, size_t n);

#endif
