#include "core/util/alloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/util/die.h"

/* Zero bytes still get a valid pointer (malloc(0) may return NULL). */
void *xmalloc(size_t bytes, const char *what) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) die(1, "out of memory allocating %zu bytes for %s", bytes, what);
    return p;
}

void *xcalloc(size_t count, size_t size, const char *what) {
    if (size && count > SIZE_MAX / size)
        die(1, "out of memory: %zu x %zu bytes for %s overflow a size", count, size,
                       what);
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) die(1, "out of memory allocating %zu x %zu bytes for %s", count, size, what);
    return p;
}

void *xrealloc(void *p, size_t bytes, const char *what) {
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) die(1, "out of memory growing %s to %zu bytes", what, bytes);
    return q;
}

char *xstrdup(const char *s, const char *what) {
    size_t n = strlen(s) + 1;
    return memcpy(xmalloc(n, what), s, n);
}
