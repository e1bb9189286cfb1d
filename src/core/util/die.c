#include "core/util/die.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_rank;
static void (*g_abort_all)(int code);

void die_set_abort(int rank, void (*abort_all)(int code)) {
    g_rank = rank;
    g_abort_all = abort_all;
}

/* The path from the tree's src/ on: __FILE__ is however the build named the file (often
 * absolute), and the message should say the same on every machine. */
static const char *source_path(const char *file) {
    const char *s = NULL;
    for (const char *p = strstr(file, "src/"); p; p = strstr(p + 1, "src/"))
        if (p == file || p[-1] == '/') s = p;
    return s ? s : file;
}

void die_at(const char *file, int line, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[rank %d] error: ", g_rank);
    vfprintf(stderr, fmt, ap);
    /* after the message, so that a line read for its message reads as before */
    fprintf(stderr, " (at %s:%d)\n", source_path(file), line);
    va_end(ap);
    /* the message must be out before MPI_Abort kills the process */
    fflush(stderr);
    fflush(stdout);
    if (g_abort_all) g_abort_all(code);
    exit(code);
}
