/* Strict number parsing for every flag of every subcommand: the whole word must be the number
 * (no leading space or sign games, no trailing text), and it must fit. */
#ifndef MEGADLM_CORE_UTIL_PARSE_H
#define MEGADLM_CORE_UTIL_PARSE_H

/* A decimal int in [lo, INT_MAX]: 0, or -1 (out untouched). */
int parse_int(const char *s, long lo, int *out);

#endif
