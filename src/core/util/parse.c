#include "core/util/parse.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>

int parse_int(const char *s, long lo, int *out) {
    if (!s || !*s || isspace((unsigned char)*s)) return -1;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || errno == ERANGE || v > INT_MAX || v < lo) return -1;
    *out = (int)v;
    return 0;
}
