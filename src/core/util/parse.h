/* Strict number parsing for every flag of every subcommand: the whole word must be the number
 * (no leading space or sign games, no trailing text), and it must fit. */
#ifndef MEGADLM_CORE_UTIL_PARSE_H
#define MEGADLM_CORE_UTIL_PARSE_H

#include <stddef.h>

/* A decimal int in [lo, INT_MAX]: 0, or -1 (out untouched). */
int parse_int(const char *s, long lo, int *out);

/* Why a word was refused, so that a message can say it: not a number at all, or a number
 * outside what the flag's type holds. */
typedef enum {
    PARSE_OK = 0,
    PARSE_NOT_NUMBER,   /* not the number's syntax (or nan, inf) */
    PARSE_BELOW,        /* an integer below the flag's lower bound */
    PARSE_OUT_OF_RANGE, /* beyond the type: an int above INT_MAX / below INT_MIN, a float of
                         * magnitude above FLT_MAX, or a non-zero one that rounds to 0 */
} parse_status;

/* parse_int's rules, saying why. */
parse_status parse_int_status(const char *s, long lo, int *out);
/* A finite decimal number that a float holds: |v| <= FLT_MAX and not a non-zero value that
 * rounds to 0 (below the smallest subnormal float). */
parse_status parse_float_status(const char *s, float *out);

/* The message for a status other than PARSE_OK: "FLAG: 'word' is out of range (the type's
 * range)", else "FLAG: expected EXPECTED, found 'word'" (EXPECTED: "an integer >= 1", "a
 * number", ...); is_float: the word was parsed as a float. */
void parse_message(char *buf, size_t n, const char *flag, const char *word, parse_status st,
                   const char *expected, int is_float);

/* An integer flag's word, >= lo, parsed and refused the same way by every subcommand: 0, or -1
 * with parse_message's text in err ("FLAG: expected an integer, found 'WORD'", below lo "a
 * positive integer" (lo 1), "a non-negative integer" (lo 0), else "an integer >= LO"). */
int parse_int_flag(const char *flag, const char *word, long lo, int *out, char *err,
                   size_t errlen);

#endif
