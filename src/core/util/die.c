#include "core/util/die.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int g_rank;
static void (*g_abort_all)(int code);

void die_set_abort(int rank, void (*abort_all)(int code)) {
    g_rank = rank;
    g_abort_all = abort_all;
}

void die(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[rank %d] error: ", g_rank);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    /* the message must be out before MPI_Abort kills the process */
    fflush(stderr);
    fflush(stdout);
    if (g_abort_all) g_abort_all(code);
    exit(code);
}
