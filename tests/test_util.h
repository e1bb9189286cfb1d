/* Minimal assertion helpers for unit tests: every failed check prints file:line and the
 * values, and the test exits non-zero at the end (TEST_DONE). */
#ifndef MEGADLM_TESTS_TEST_UTIL_H
#define MEGADLM_TESTS_TEST_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int test_failures = 0;
static int test_checks = 0;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        test_checks++;                                                               \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            test_failures++;                                                         \
        }                                                                            \
    } while (0)

/* |a - b| <= atol + rtol * |b| */
#define CHECK_CLOSE(a, b, rtol, atol)                                                       \
    do {                                                                                    \
        double _a = (double)(a), _b = (double)(b);                                          \
        test_checks++;                                                                      \
        if (!(fabs(_a - _b) <= (atol) + (rtol) * fabs(_b)) || isnan(_a) || isnan(_b)) {     \
            fprintf(stderr, "%s:%d: %s = %.9g, expected %s = %.9g (rtol %g, atol %g)\n",    \
                    __FILE__, __LINE__, #a, _a, #b, _b, (double)(rtol), (double)(atol));    \
            test_failures++;                                                                \
        }                                                                                   \
    } while (0)

#define TEST_DONE()                                                                  \
    do {                                                                             \
        printf("%d checks, %d failed\n", test_checks, test_failures);                \
        return test_failures ? 1 : 0;                                                \
    } while (0)

#endif
