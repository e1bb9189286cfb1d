/* GELU (tanh approximation and exact erf form) and SwiGLU. Elementwise, OpenMP-parallel.
 *
 * Tanh GELU is evaluated through the identity 0.5 (1 + tanh(u)) = sigmoid(2u), i.e.
 *   gelu(x) = x * sigmoid(2u),  u = sqrt(2/pi) (x + 0.044715 x^3),
 * with the vectorizable simd_expf (glibc's tanhf is a scalar call, ~15 ns per element); this is
 * the same function as PyTorch's 0.5 x (1 + tanh(u)) up to float rounding (~1e-7 relative),
 * and avoids the cancellation of 1 + tanh(u) for u << 0. The erf form uses erff. */
#include "core/kernels/activation.h"

#include <math.h>

#include "core/kernels/simd_math.h"

#define GELU_SQRT_2_OVER_PI 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_COEF 0.044715f
#define M_SQRT1_2_F 0.70710678118654752f    /* 1/sqrt(2) */
#define M_1_SQRT_2PI_F 0.39894228040143268f /* 1/sqrt(2 pi) */

/* u = sqrt(2/pi) (x + 0.044715 x^3), the tanh argument of both passes. */
static inline float gelu_tanh_arg(float x) {
    return GELU_SQRT_2_OVER_PI * (x + GELU_COEF * x * x * x);
}

/* out[n] = gelu(inp[n]). out may alias inp. */
void gelu_forward(float *out, const float *inp, size_t n, gelu_kind kind) {
    const long long nn = (long long)n;
    if (kind == GELU_TANH) {
#pragma omp parallel for simd schedule(static)
        for (long long i = 0; i < nn; i++) {
            out[i] = inp[i] * simd_sigmoidf(2.0f * gelu_tanh_arg(inp[i])); /* 0.5 x (1 + tanh u) */
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
 *         computed with sg = sigmoid(2u) = 0.5 (1 + t), 0.5 (1 - t^2) = 2 sg (1 - sg)
 *   erf:  gelu' = 0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi) */
void gelu_backward(float *dinp, const float *dout, const float *inp, size_t n, gelu_kind kind) {
    const long long nn = (long long)n;
    if (kind == GELU_TANH) {
#pragma omp parallel for simd schedule(static)
        for (long long i = 0; i < nn; i++) {
            const float x = inp[i];
            const float u = gelu_tanh_arg(x);
            const float e = simd_expf(-2.0f * u);
            const float sg = 1.0f / (1.0f + e); /* = 0.5 (1 + tanh u) */
            const float sg_c = e * sg;          /* = 1 - sg, without cancellation */
            const float du = GELU_SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_COEF * x * x);
            /* 0.5 (1 - tanh^2 u) = 2 sg (1 - sg) */
            dinp[i] += dout[i] * (sg + 2.0f * x * sg * sg_c * du);
        }
    } else {
#pragma omp parallel for schedule(static)
        for (long long i = 0; i < nn; i++) {
            const float x = inp[i];
            const float cdf = 0.5f * (1.0f + erff(x * M_SQRT1_2_F));
            const float pdf = M_1_SQRT_2PI_F * simd_expf(-0.5f * x * x);
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
            const float sig = simd_sigmoidf(g[j]);
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
            const float sig = simd_sigmoidf(g[j]);
            dg[j] += d[j] * u[j] * sig * (1.0f + g[j] * (1.0f - sig));
            du[j] += d[j] * g[j] * sig;
        }
    }
}
