/* LayerNorm and RMSNorm over the last dimension, as torch.nn.LayerNorm and Megatron's RMSNorm
 * compute them (biased variance; rstd = 1/sqrt(var + eps), RMSNorm: 1/sqrt(mean(x^2) + eps)).
 * Shapes: N rows, C features. Backward accumulates (+=) into every gradient buffer. */
#ifndef MEGADLM_CORE_KERNELS_NORM_H
#define MEGADLM_CORE_KERNELS_NORM_H

#include "core/kernels/qkv_layout.h"

typedef enum { NORM_LAYERNORM = 0, NORM_RMSNORM = 1 } norm_kind;

/* out[N,C] = (inp - mean) * rstd * weight[C] + bias[C];  saves mean[N], rstd[N] */
void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                       const float *weight, const float *bias, int N, int C, float eps);
void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, const float *mean,
                        const float *rstd, int N, int C);

/* out[N,C] = inp * rstd * weight[C];  saves rstd[N] */
void rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int N, int C,
                     float eps);
void rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                      const float *weight, const float *rstd, int N, int C);

/* --qk-layernorm: inside the packed QKV buffer [N, qkv_row_width(l)] (Megatron's layout,
 * qkv_layout.h), every query head (HS values) is normalized with q_weight/q_bias[HS] and every
 * key head with k_weight/k_bias[HS]; value heads are copied unchanged. Biases are NULL for
 * RMSNorm, and mean is unused (may be NULL). Stats per row and head: mean, rstd
 * [N * (NH + NG)]. Backward: dinp += d/dinp (value heads pass dout through), weight/bias grads
 * accumulate. */
typedef struct {
    const float *q_weight, *q_bias, *k_weight, *k_bias;
} qk_norm_weights;
typedef struct {
    float *q_weight, *q_bias, *k_weight, *k_bias; /* any may be NULL (not wanted) */
} qk_norm_grads;
typedef struct {
    float *mean, *rstd;
} qk_norm_stats;

void qk_norm_forward(float *out, qk_norm_stats st, const float *inp, qk_norm_weights w, int N,
                     qkv_layout l, norm_kind kind, float eps);
/* Reads w's weights (not its biases) and st. */
void qk_norm_backward(float *dinp, qk_norm_grads g, const float *dout, const float *inp,
                      qk_norm_weights w, qk_norm_stats st, int N, qkv_layout l, norm_kind kind);

#endif
