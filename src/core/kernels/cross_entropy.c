/* Softmax cross-entropy, parallel over rows, max-subtracted (numerically stable). */
#include "core/kernels/cross_entropy.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* expf for x <= 88, branch-free so the loops vectorize (glibc's expf does not): range
 * reduction x = n ln2 + r, |r| <= ln2/2, degree-6 polynomial (Cephes expf coefficients),
 * times 2^n built in the exponent bits. Max relative error ~1e-7 (about 1.5 ulp); arguments
 * below -87.7 return 0 (flush to zero), NaN propagates. */
static inline float vexpf(float x) {
    x = x < -88.0f ? -88.0f : (x > 88.0f ? 88.0f : x);
    const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round(x/ln2) */
    float r = x - n * 0.693145751953125f;
    r = r - n * 1.428606765330187045e-06f;
    float p = 1.9875691500E-4f;
    p = p * r + 1.3981999507E-3f;
    p = p * r + 8.3334519073E-3f;
    p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f;
    p = p * r + 5.0000001201E-1f;
    p = p * r * r + r + 1.0f;
    const int32_t bits = ((int32_t)n + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return p * two_n;
}

/* losses[n] = lse[n] - logits[n, targets[n]],  lse[n] = max + log(sum_v exp(logits[n,v] - max))
 * logits[N,V]; lse may be NULL (evaluation). */
void cross_entropy_forward(float *losses, float *lse, const float *logits, const int *targets,
                           int N, int V) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (int v = 0; v < V; v++) mx = x[v] > mx ? x[v] : mx;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int v = 0; v < V; v++) sum += vexpf(x[v] - mx);
        const float l = mx + logf(sum);
        if (lse) lse[n] = l;
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
        for (int v = 0; v < V; v++) d[v] = vexpf(x[v] - l) * dl;
        d[targets[n]] -= dl;
    }
}
