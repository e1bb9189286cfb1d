/* GELU (tanh approximation and exact erf form) and SwiGLU. Elementwise, OpenMP-parallel. */
#include "core/kernels/activation.h"

#include <math.h>

#define GELU_SQRT_2_OVER_PI 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_COEF 0.044715f
#define M_SQRT1_2_F 0.70710678118654752f        /* 1/sqrt(2) */
#define M_1_SQRT_2PI_F 0.39894228040143268f     /* 1/sqrt(2 pi) */

/* out[n] = gelu(inp[n]). out may alias inp. */
void gelu_forward(float *out, const float *inp, size_t n, gelu_kind kind) {
    const long long nn = (long long)n;
    if (kind == GELU_TANH) {
#pragma omp parallel for schedule(static)
        for (long long i = 0; i < nn; i++) {
            const float x = inp[i];
            const float u = GELU_SQRT_2_OVER_PI * (x + GELU_COEF * x * x * x);
            out[i] = 0.5f * x * (1.0f + tanhf(u));
        }
    } else {
#pragma omp parallel for schedule(static)
        for (long long i = 0; i < nn; i++) {
            const float x = inp[i];
            out[i] = 0.5f * x * (1.0f + erff(x * M_SQRT1_2_F));
        }
    }
}

/* dinp[n] += dout[n] * gelu'(inp[n]):
 *   tanh: t = tanh(u), u = sqrt(2/pi) (x + 0.044715 x^3)
 *         gelu' = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
 *   erf:  gelu' = 0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi) */
void gelu_backward(float *dinp, const float *dout, const float *inp, size_t n, gelu_kind kind) {
    const long long nn = (long long)n;
    if (kind == GELU_TANH) {
#pragma omp parallel for schedule(static)
        for (long long i = 0; i < nn; i++) {
            const float x = inp[i];
            const float u = GELU_SQRT_2_OVER_PI * (x + GELU_COEF * x * x * x);
            const float t = tanhf(u);
            const float du = GELU_SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_COEF * x * x);
            dinp[i] += dout[i] * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
        }
    } else {
#pragma omp parallel for schedule(static)
        for (long long i = 0; i < nn; i++) {
            const float x = inp[i];
            const float cdf = 0.5f * (1.0f + erff(x * M_SQRT1_2_F));
            const float pdf = M_1_SQRT_2PI_F * expf(-0.5f * x * x);
            dinp[i] += dout[i] * (cdf + x * pdf);
        }
    }
}

/* inp[N, 2F] = [gate g | up u];  out[N,F] = silu(g) * u. */
void swiglu_forward(float *out, const float *inp, int N, int F) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < N; r++) {
        const float *g = inp + (size_t)r * 2 * F, *u = g + F;
        float *o = out + (size_t)r * F;
        for (int j = 0; j < F; j++) {
            const float sig = 1.0f / (1.0f + expf(-g[j]));
            o[j] = g[j] * sig * u[j];
        }
    }
}

/* dg += dout * u * sig(g) (1 + g (1 - sig(g)));   du += dout * silu(g). */
void swiglu_backward(float *dinp, const float *dout, const float *inp, int N, int F) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < N; r++) {
        const float *g = inp + (size_t)r * 2 * F, *u = g + F;
        float *dg = dinp + (size_t)r * 2 * F, *du = dg + F;
        const float *d = dout + (size_t)r * F;
        for (int j = 0; j < F; j++) {
            const float sig = 1.0f / (1.0f + expf(-g[j]));
            dg[j] += d[j] * u[j] * sig * (1.0f + g[j] * (1.0f - sig));
            du[j] += d[j] * g[j] * sig;
        }
    }
}
