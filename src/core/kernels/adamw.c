/* AdamW (decoupled weight decay), elementwise in float; bias corrections in double. */
#include "core/kernels/adamw.h"

#include <math.h>

#include "core/tensor/dtype.h"

/* The update of element i of param, grad, m, v, with bc1, bc2 the bias corrections (one
 * definition for every loop below):
 *   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
 *   p -= lr * ( (m / (1-b1^step)) / (sqrt(v / (1-b2^step)) + eps) + weight_decay * p )
 * The buffers must not overlap (the loops are SIMD-vectorized). */
#define ADAMW_ELEMENT(i)                                                                      \
    do {                                                                                      \
        const float g = grad[i];                                                              \
        const float mi = h.beta1 * m[i] + (1.0f - h.beta1) * g;                               \
        const float vi = h.beta2 * v[i] + (1.0f - h.beta2) * g * g;                           \
        m[i] = mi;                                                                            \
        v[i] = vi;                                                                            \
        const float mhat = mi / bc1, vhat = vi / bc2;                                         \
        param[i] -= h.lr * (mhat / (sqrtf(vhat) + h.eps) + h.weight_decay * param[i]);        \
    } while (0)

static float bias_correction(float beta, int step) {
    return (float)(1.0 - pow((double)beta, (double)step));
}

void adamw_update(float *param, const float *grad, float *m, float *v, size_t n, adamw_hparams h) {
    const float bc1 = bias_correction(h.beta1, h.step), bc2 = bias_correction(h.beta2, h.step);
    const long long nn = (long long)n;
#pragma omp parallel for simd schedule(static)
    for (long long i = 0; i < nn; i++) ADAMW_ELEMENT(i);
}

void adamw_update_half(float *param, uint16_t *param16, half_kind kind, const float *grad,
                       float *m, float *v, size_t n, adamw_hparams h) {
    const float bc1 = bias_correction(h.beta1, h.step), bc2 = bias_correction(h.beta2, h.step);
    const long long nn = (long long)n;
    if (kind == HALF_BF16) {
#pragma omp parallel for simd schedule(static)
        for (long long i = 0; i < nn; i++) {
            ADAMW_ELEMENT(i);
            param16[i] = bf16_from_float(param[i]);
        }
    } else if (kind == HALF_FP16) {
#pragma omp parallel for simd schedule(static)
        for (long long i = 0; i < nn; i++) {
            ADAMW_ELEMENT(i);
            param16[i] = fp16_from_float(param[i]);
        }
    } else {
        adamw_update(param, grad, m, v, n, h);
    }
}
