/* Softmax cross-entropy, parallel over rows, max-subtracted (numerically stable). The exp is
 * simd_expf (simd_math.h): vectorized, ~1e-7 relative error. */
#include "core/kernels/cross_entropy.h"

#include <math.h>
#include <stddef.h>

#include "core/kernels/simd_math.h"

/* losses[n] = lse[n] - logits[n, targets[n]],  lse[n] = max + log(sum_v exp(logits[n,v] - max))
 * logits[N,V]; lse may be NULL (evaluation). */
void cross_entropy_forward(float *losses, float *lse, const float *logits, const int *targets,
                           int N, int V) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        const float mx = simd_max(x, V);
        const float l = mx + logf(simd_sum_exp(x, V, mx));
        if (lse)
            lse[n] = l;
        losses[n] = l - x[targets[n]];
    }
}

/* dlogits[n,v] = (exp(logits[n,v] - lse[n]) - [v == targets[n]]) * dlosses[n]  (written, not
 * accumulated; dlogits may be logits itself: each element is read before it is written). */
void cross_entropy_backward(float *dlogits, const float *logits, const float *lse,
                            const int *targets, const float *dlosses, int N, int V) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        float *d = dlogits + (size_t)n * V;
        const float l = lse[n], dl = dlosses[n];
#pragma omp simd
        for (int v = 0; v < V; v++)
            d[v] = simd_expf(x[v] - l) * dl;
        d[targets[n]] -= dl;
    }
}
