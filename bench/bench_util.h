/* What the C benches share: a monotonic clock and deterministic test matrices. */
#ifndef MEGADLM_BENCH_BENCH_UTIL_H
#define MEGADLM_BENCH_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline double bench_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* n floats in [-0.5, 0.5) from a linear congruential sequence (the same for a seed everywhere). */
static inline float *bench_filled(size_t n, unsigned seed) {
    float *p = malloc(n * sizeof(float));
    if (!p) {
        perror("malloc");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
    }
    return p;
}

/* A KEY=VALUE argument of the small programs (the benches, tests/tools/moe_layer_run): KEY
 * into key (keylen bytes), the value returned; anything else ends the program with a message. */
static inline const char *bench_key_value(const char *arg, char *key, size_t keylen) {
    const char *eq = strchr(arg, '=');
    if (!eq || (size_t)(eq - arg) >= keylen) {
        fprintf(stderr, "bad option %s (expected KEY=VALUE)\n", arg);
        exit(2);
    }
    snprintf(key, keylen, "%.*s", (int)(eq - arg), arg);
    return eq + 1;
}

/* One GEMM shape of the benches: C[M,N] = op(A) op(B) + beta C, ta/tb transposed. */
typedef struct {
    const char *name;
    int ta, tb, M, N, K;
    float beta;
} gemm_case;

#endif
