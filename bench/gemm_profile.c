/* A GEMM profiler for benchmarks: loaded with LD_PRELOAD into a megadlm run, it wraps
 * cblas_sgemm (the one BLAS entry megadlm's fp32 products go through, src/core/kernels/gemm.c),
 * times every call and, at exit, writes one line per product shape to $GEMM_PROFILE_OUT:
 *   kind M N K calls seconds mean_GFLOP/s best_GFLOP/s
 * kind: "output" when a dimension is $GEMM_PROFILE_VOCAB (the output layer), "small" for
 * products under 2^24 multiply-adds (attention's per-head blocks), "layer" otherwise. The
 * bench divides the seconds by the iterations' time to get the share of the step spent in
 * GEMMs. Calls made inside OpenMP parallel regions (attention) are timed per thread and summed,
 * so "small" counts thread-seconds; bench_profile.sh says so. */
#define _GNU_SOURCE
#include <cblas.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef void (*sgemm_fn)(const enum CBLAS_ORDER, const enum CBLAS_TRANSPOSE,
                         const enum CBLAS_TRANSPOSE, const blasint, const blasint, const blasint,
                         const float, const float *, const blasint, const float *, const blasint,
                         const float, float *, const blasint);

#define MAX_SHAPES 4096
typedef struct {
    int ta, tb, m, n, k;
    long calls;
    double seconds, best;
} shape;

static shape g_shapes[MAX_SHAPES];
static int g_count;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void record(int ta, int tb, int m, int n, int k, double dt) {
    pthread_mutex_lock(&g_lock);
    int i = 0;
    while (i < g_count && !(g_shapes[i].ta == ta && g_shapes[i].tb == tb && g_shapes[i].m == m &&
                            g_shapes[i].n == n && g_shapes[i].k == k))
        i++;
    if (i == g_count && g_count < MAX_SHAPES) g_shapes[g_count++] = (shape){ta, tb, m, n, k, 0, 0, 0};
    if (i < g_count) {
        g_shapes[i].calls++;
        g_shapes[i].seconds += dt;
        if (g_shapes[i].best == 0 || dt < g_shapes[i].best) g_shapes[i].best = dt;
    }
    pthread_mutex_unlock(&g_lock);
}

void cblas_sgemm(const enum CBLAS_ORDER o, const enum CBLAS_TRANSPOSE ta,
                 const enum CBLAS_TRANSPOSE tb, const blasint m, const blasint n, const blasint k,
                 const float alpha, const float *a, const blasint lda, const float *b,
                 const blasint ldb, const float beta, float *c, const blasint ldc) {
    static sgemm_fn real;
    if (!real) real = (sgemm_fn)dlsym(RTLD_NEXT, "cblas_sgemm");
    if (!real) abort();
    double t0 = now();
    real(o, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    record(ta == CblasTrans, tb == CblasTrans, m, n, k, now() - t0);
}

__attribute__((destructor)) static void report(void) {
    const char *path = getenv("GEMM_PROFILE_OUT");
    if (!g_count || !path) return;
    FILE *f = fopen(path, "w");
    if (!f) return;
    const char *v = getenv("GEMM_PROFILE_VOCAB");
    long vocab = v ? atol(v) : -1;
    for (int i = 0; i < g_count; i++) {
        const shape *s = &g_shapes[i];
        double flop = 2.0 * s->m * s->n * s->k;
        const char *kind = (s->m == vocab || s->n == vocab || s->k == vocab) ? "output"
                           : flop < 2.0 * (1 << 24)                         ? "small"
                                                                            : "layer";
        fprintf(f, "%s %c%c %d %d %d %ld %.6f %.1f %.1f\n", kind, s->ta ? 'T' : 'N',
                s->tb ? 'T' : 'N', s->m, s->n, s->k, s->calls, s->seconds,
                flop * s->calls / s->seconds / 1e9, flop / s->best / 1e9);
    }
    fclose(f);
}
