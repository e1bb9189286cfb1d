/* LayerNorm / RMSNorm over the last dimension, and the per-head --qk-layernorm on the packed
 * QKV buffer. Forward and the input gradient are parallel over rows; the weight/bias gradients
 * are parallel over column blocks (each block sums over all rows in row order), so every
 * result is independent of the thread count. Accumulation is in float, like PyTorch; the
 * per-row sums have SIMD_LANES partial sums in an order fixed by the source (simd_math.h), so
 * they do not depend on the vector width either. */
#include "core/kernels/norm.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "core/kernels/simd_math.h"

/* ---- per-vector helpers (one row of C values, or one head of HS values) ---- */

/* LayerNorm statistics, two-pass in float: mean, biased variance, rstd = 1/sqrt(var + eps). */
static inline void ln_stats(const float *x, int C, float eps, float *mean_out, float *rstd_out) {
    const float m = simd_sum(x, C) / (float)C;
    const float var = simd_sum_sq(x, C, m) / (float)C;
    *mean_out = m;
    *rstd_out = 1.0f / sqrtf(var + eps);
}

/* RMSNorm: rstd = 1/sqrt(mean(x^2) + eps). */
static inline float rms_rstd(const float *x, int C, float eps) {
    return 1.0f / sqrtf(simd_sum_sq(x, C, 0.0f) / (float)C + eps);
}

/* y = (x - m) * s * w + b  (b may be NULL; m = 0 and b = NULL give RMSNorm). y may alias x. */
static inline void norm_apply(float *y, const float *x, int C, float m, float s, const float *w,
                              const float *b) {
    if (b)
        for (int i = 0; i < C; i++)
            y[i] = (x[i] - m) * s * w[i] + b[i];
    else
        for (int i = 0; i < C; i++)
            y[i] = (x[i] - m) * s * w[i];
}

/* Input gradient of one normalized vector, accumulated. With xhat = (x - m) * s, g = w * dy:
 *   LayerNorm: dx += s * (g - mean(g) - xhat * mean(g * xhat))
 *   RMSNorm:   dx += s * (g - xhat * mean(g * xhat))            (m = 0, no mean(g) term) */
static inline void norm_dx(float *dx, const float *dy, const float *x, const float *w, int C,
                           float m, float s, int layernorm) {
    /* the two sums with fixed lanes (simd_math.h) */
    float ga[SIMD_LANES] = {0}, gxa[SIMD_LANES] = {0};
    int i0 = 0;
    for (; i0 + SIMD_LANES <= C; i0 += SIMD_LANES)
        for (int j = 0; j < SIMD_LANES; j++) {
            const float g = w[i0 + j] * dy[i0 + j];
            ga[j] += g;
            gxa[j] += g * (x[i0 + j] - m) * s;
        }
    for (int j = 0; i0 + j < C; j++) {
        const float g = w[i0 + j] * dy[i0 + j];
        ga[j] += g;
        gxa[j] += g * (x[i0 + j] - m) * s;
    }
    float g_mean = simd_lanes_total(ga), gx_mean = simd_lanes_total(gxa);
    g_mean = layernorm ? g_mean / (float)C : 0.0f;
    gx_mean /= (float)C;
    for (int i = 0; i < C; i++) {
        const float xhat = (x[i] - m) * s;
        dx[i] += s * (w[i] * dy[i] - g_mean - xhat * gx_mean);
    }
}

/* Column block width for the weight/bias reductions. */
#define WGRAD_BLOCK 32

/* ---- LayerNorm ---- */

/* out[N,C] = (inp - mean) * rstd * weight[C] + bias[C];  mean[N], rstd[N] saved (may be NULL
 * for inference). out may alias inp. */
void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                       const float *bias, int N, int C, float eps) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float m, s;
        ln_stats(x, C, eps, &m, &s);
        norm_apply(out + (size_t)n * C, x, C, m, s, weight, bias);
        if (mean)
            mean[n] = m;
        if (rstd)
            rstd[n] = s;
    }
}

/* dinp[N,C] += ...;  dweight[C] += sum_n dout * xhat;  dbias[C] += sum_n dout.
 * Any of dinp, dweight, dbias may be NULL. */
void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, const float *mean, const float *rstd,
                        int N, int C) {
    if (dinp) {
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++)
            norm_dx(dinp + (size_t)n * C, dout + (size_t)n * C, inp + (size_t)n * C, weight, C,
                    mean[n], rstd[n], 1);
    }
    if (dweight || dbias) {
        const int nblocks = (C + WGRAD_BLOCK - 1) / WGRAD_BLOCK;
#pragma omp parallel for schedule(static)
        for (int blk = 0; blk < nblocks; blk++) {
            const int c0 = blk * WGRAD_BLOCK;
            const int w = C - c0 < WGRAD_BLOCK ? C - c0 : WGRAD_BLOCK;
            float dw[WGRAD_BLOCK] = {0}, db[WGRAD_BLOCK] = {0};
            for (int n = 0; n < N; n++) {
                const float *x = inp + (size_t)n * C + c0, *dy = dout + (size_t)n * C + c0;
                const float m = mean[n], s = rstd[n];
                for (int i = 0; i < w; i++) {
                    dw[i] += dy[i] * (x[i] - m) * s;
                    db[i] += dy[i];
                }
            }
            for (int i = 0; i < w; i++) {
                if (dweight)
                    dweight[c0 + i] += dw[i];
                if (dbias)
                    dbias[c0 + i] += db[i];
            }
        }
    }
}

/* ---- RMSNorm ---- */

/* out[N,C] = inp * rstd * weight[C];  rstd[N] saved (may be NULL). out may alias inp. */
void rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int N, int C,
                     float eps) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        const float s = rms_rstd(x, C, eps);
        norm_apply(out + (size_t)n * C, x, C, 0.0f, s, weight, NULL);
        if (rstd)
            rstd[n] = s;
    }
}

/* dinp[N,C] += ...;  dweight[C] += sum_n dout * inp * rstd.  dinp or dweight may be NULL. */
void rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                      const float *weight, const float *rstd, int N, int C) {
    if (dinp) {
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++)
            norm_dx(dinp + (size_t)n * C, dout + (size_t)n * C, inp + (size_t)n * C, weight, C,
                    0.0f, rstd[n], 0);
    }
    if (dweight) {
        const int nblocks = (C + WGRAD_BLOCK - 1) / WGRAD_BLOCK;
#pragma omp parallel for schedule(static)
        for (int blk = 0; blk < nblocks; blk++) {
            const int c0 = blk * WGRAD_BLOCK;
            const int w = C - c0 < WGRAD_BLOCK ? C - c0 : WGRAD_BLOCK;
            float dw[WGRAD_BLOCK] = {0};
            for (int n = 0; n < N; n++) {
                const float *x = inp + (size_t)n * C + c0, *dy = dout + (size_t)n * C + c0;
                const float s = rstd[n];
                for (int i = 0; i < w; i++)
                    dw[i] += dy[i] * x[i] * s;
            }
            for (int i = 0; i < w; i++)
                dweight[c0 + i] += dw[i];
        }
    }
}

/* ---- per-head QK norm on the packed QKV buffer (layout in qkv_layout.h) ----
 * Statistics are indexed
 *   query head h (0..NH-1):  n * (NH + NG) + h
 *   key head of group g:     n * (NH + NG) + NH + g. */

/* Index of the statistics of slot k (< Q: query head, Q: key head) of group g in row n. */
static inline size_t qk_stat_index(qkv_layout l, int n, int g, int k) {
    const int Q = qkv_heads_per_group(l);
    return (size_t)n * (l.NH + l.NG) + (k < Q ? g * Q + k : l.NH + g);
}

/* out[N,QKV_C]: query/key heads normalized over HS, value heads copied. out may alias inp. */
void qk_norm_forward(float *out, qk_norm_stats st, const float *inp, qk_norm_weights w, int N,
                     qkv_layout l, norm_kind kind, float eps) {
    const int Q = qkv_heads_per_group(l), NG = l.NG, HS = l.HS;
    const size_t QKV_C = qkv_row_width(l);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *xr = inp + (size_t)n * QKV_C;
        float *yr = out + (size_t)n * QKV_C;
        for (int g = 0; g < NG; g++) {
            for (int k = 0; k < Q + 2; k++) {
                const float *x = xr + qkv_slot_offset(l, g, k);
                float *y = yr + qkv_slot_offset(l, g, k);
                if (k == Q + 1) { /* value head */
                    if (y != x)
                        memcpy(y, x, (size_t)HS * sizeof(float));
                    continue;
                }
                const size_t si = qk_stat_index(l, n, g, k);
                const float *wt = k < Q ? w.q_weight : w.k_weight;
                const float *b = k < Q ? w.q_bias : w.k_bias;
                float m = 0.0f, s;
                if (kind == NORM_LAYERNORM)
                    ln_stats(x, HS, eps, &m, &s);
                else
                    s = rms_rstd(x, HS, eps);
                norm_apply(y, x, HS, m, s, wt, kind == NORM_LAYERNORM ? b : NULL);
                if (st.mean)
                    st.mean[si] = m;
                if (st.rstd)
                    st.rstd[si] = s;
            }
        }
    }
}

/* dq_weight/dq_bias[HS] += sums over all rows and query heads, dk_weight/dk_bias[HS] over all
 * rows and key heads. Parallel over (query|key, channel block); each sums rows and heads in
 * order. */
static void qk_norm_wgrad(qk_norm_grads g, const float *dout, const float *inp,
                          qk_norm_stats st, int N, qkv_layout l, int ln) {
    const int Q = qkv_heads_per_group(l), NG = l.NG, HS = l.HS;
    const size_t QKV_C = qkv_row_width(l);
    const int nblocks = (HS + WGRAD_BLOCK - 1) / WGRAD_BLOCK;
#pragma omp parallel for schedule(static)
    for (int task = 0; task < 2 * nblocks; task++) {
        const int is_key = task / nblocks, blk = task % nblocks;
        const int c0 = blk * WGRAD_BLOCK;
        const int w = HS - c0 < WGRAD_BLOCK ? HS - c0 : WGRAD_BLOCK;
        float dw[WGRAD_BLOCK] = {0}, db[WGRAD_BLOCK] = {0};
        for (int n = 0; n < N; n++) {
            for (int grp = 0; grp < NG; grp++) {
                const int k_begin = is_key ? Q : 0, k_end = is_key ? Q + 1 : Q;
                for (int k = k_begin; k < k_end; k++) {
                    const size_t off = (size_t)n * QKV_C + qkv_slot_offset(l, grp, k) + c0;
                    const size_t si = qk_stat_index(l, n, grp, k);
                    const float m = ln ? st.mean[si] : 0.0f, s = st.rstd[si];
                    const float *x = inp + off, *dy = dout + off;
                    for (int i = 0; i < w; i++) {
                        dw[i] += dy[i] * (x[i] - m) * s;
                        db[i] += dy[i];
                    }
                }
            }
        }
        float *gw = is_key ? g.k_weight : g.q_weight;
        float *gb = ln ? (is_key ? g.k_bias : g.q_bias) : NULL;
        for (int i = 0; i < w; i++) {
            if (gw)
                gw[c0 + i] += dw[i];
            if (gb)
                gb[c0 + i] += db[i];
        }
    }
}

/* dinp[N,QKV_C] += gradient (value heads: += dout); weight and bias gradients as in
 * qk_norm_wgrad. Biases are only touched for LayerNorm; any gradient pointer may be NULL. */
void qk_norm_backward(float *dinp, qk_norm_grads g, const float *dout, const float *inp,
                      qk_norm_weights w, qk_norm_stats st, int N, qkv_layout l, norm_kind kind) {
    const int Q = qkv_heads_per_group(l), NG = l.NG, HS = l.HS;
    const size_t QKV_C = qkv_row_width(l);
    const int ln = kind == NORM_LAYERNORM;
    if (dinp) {
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            for (int grp = 0; grp < NG; grp++) {
                for (int k = 0; k < Q + 2; k++) {
                    const size_t off = (size_t)n * QKV_C + qkv_slot_offset(l, grp, k);
                    if (k == Q + 1) {
                        for (int i = 0; i < HS; i++)
                            dinp[off + i] += dout[off + i];
                        continue;
                    }
                    const size_t si = qk_stat_index(l, n, grp, k);
                    norm_dx(dinp + off, dout + off, inp + off, k < Q ? w.q_weight : w.k_weight,
                            HS, ln ? st.mean[si] : 0.0f, st.rstd[si], ln);
                }
            }
        }
    }
    if (g.q_weight || g.k_weight || (ln && (g.q_bias || g.k_bias)))
        qk_norm_wgrad(g, dout, inp, st, N, l, ln);
}
