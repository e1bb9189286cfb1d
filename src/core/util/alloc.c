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

/* The capacity grow_array moves to; 0 when its bytes overflow a size. */
static size_t grown_capacity(size_t cap, size_t need, size_t elem, size_t first) {
    size_t nc = cap ? cap : (first ? first : 1);
    while (nc < need) {
        if (nc > SIZE_MAX / 2) return 0;
        nc *= 2;
    }
    return elem && nc > SIZE_MAX / elem ? 0 : nc;
}

void *grow_array(void *p, size_t *cap, size_t need, size_t elem, size_t first) {
    if (need <= *cap && p) return p;
    size_t nc = grown_capacity(*cap, need, elem, first);
    void *q = nc ? realloc(p, nc * elem > 0 ? nc * elem : 1) : NULL;
    if (q) *cap = nc;
    return q;
}

void *xgrow_array(void *p, size_t *cap, size_t need, size_t elem, size_t first, const char *what) {
    if (need <= *cap && p) return p;
    size_t nc = grown_capacity(*cap, need, elem, first);
    if (!nc) die(1, "out of memory: %s of %zu entries overflows a size", what, need);
    void *q = xrealloc(p, nc * elem, what);
    *cap = nc;
    return q;
}

void free_list(void *const *p, size_t n) {
    for (size_t i = 0; i < n; i++) free(p[i]);
}
