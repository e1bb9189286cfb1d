/* AdamW (decoupled weight decay), elementwise in float; bias corrections in double. */
#include "core/kernels/adamw.h"

#include <math.h>

/* param, grad, m, v [n]; step >= 1.
 *   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
 *   p -= lr * ( (m / (1-b1^step)) / (sqrt(v / (1-b2^step)) + eps) + weight_decay * p )
 * The four buffers must not overlap (the loop is SIMD-vectorized). */
void adamw_update(float *param, const float *grad, float *m, float *v, size_t n, adamw_hparams h) {
    const float lr = h.lr, beta1 = h.beta1, beta2 = h.beta2, eps = h.eps;
    const float weight_decay = h.weight_decay;
    const int step = h.step;
    const float bc1 = (float)(1.0 - pow((double)beta1, (double)step));
    const float bc2 = (float)(1.0 - pow((double)beta2, (double)step));
    const long long nn = (long long)n;
#pragma omp parallel for simd schedule(static)
    for (long long i = 0; i < nn; i++) {
        const float g = grad[i];
        const float mi = beta1 * m[i] + (1.0f - beta1) * g;
        const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        const float mhat = mi / bc1, vhat = vi / bc2;
        param[i] -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * param[i]);
    }
}
