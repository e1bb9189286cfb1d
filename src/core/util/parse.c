#include "core/util/parse.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int parse_int(const char *s, long lo, int *out) {
    return parse_int_status(s, lo, out) == PARSE_OK ? 0 : -1;
}

parse_status parse_int_status(const char *s, long lo, int *out) {
    if (!s || !*s || isspace((unsigned char)*s)) return PARSE_NOT_NUMBER;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end) return PARSE_NOT_NUMBER;
    if (errno == ERANGE || v > INT_MAX || v < INT_MIN) return PARSE_OUT_OF_RANGE;
    if (v < lo) return PARSE_BELOW;
    *out = (int)v;
    return PARSE_OK;
}

parse_status parse_float_status(const char *s, float *out) {
    if (!s || !*s || isspace((unsigned char)*s)) return PARSE_NOT_NUMBER;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || isnan(v)) return PARSE_NOT_NUMBER;
    /* "inf" is a word, not an overflow; 1e400 overflows the double (ERANGE, HUGE_VAL) */
    if (isinf(v) && errno != ERANGE) return PARSE_NOT_NUMBER;
    if (!isfinite(v) || fabs(v) > FLT_MAX) return PARSE_OUT_OF_RANGE;
    if (v != 0.0 && (float)v == 0.0f) return PARSE_OUT_OF_RANGE;
    if (v == 0.0 && errno == ERANGE) return PARSE_OUT_OF_RANGE; /* 1e-400: underflowed */
    *out = (float)v;
    return PARSE_OK;
}

void parse_message(char *buf, size_t n, const char *flag, const char *word, parse_status st,
                   const char *expected, int is_float) {
    if (st == PARSE_OUT_OF_RANGE)
        snprintf(buf, n, "%s: '%s' is out of range (%s)", flag, word,
                 is_float ? "a 32-bit float: 0, or a magnitude from 1.4e-45 to 3.4e+38"
                          : "a 32-bit integer: from -2147483648 to 2147483647");
    else
        snprintf(buf, n, "%s: expected %s, found '%s'", flag, expected, word);
}

int parse_int_flag(const char *flag, const char *word, long lo, int *out, char *err,
                   size_t errlen) {
    parse_status st = parse_int_status(word, lo, out);
    if (st == PARSE_OK) return 0;
    char below[64];
    snprintf(below, sizeof below, "an integer >= %ld", lo);
    const char *want = st != PARSE_BELOW ? "an integer"
                       : lo == 1         ? "a positive integer"
                       : lo == 0         ? "a non-negative integer"
                                         : below;
    parse_message(err, errlen, flag, word, st, want, 0);
    return -1;
}
