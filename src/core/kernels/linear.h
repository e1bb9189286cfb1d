/* Linear layer with PyTorch's weight layout [out_features, in_features].
 * Shapes: N rows (tokens), C input features, OC output features. */
#ifndef MEGADLM_CORE_KERNELS_LINEAR_H
#define MEGADLM_CORE_KERNELS_LINEAR_H

#include <stddef.h>
#include <stdint.h>

#include "core/kernels/bf16.h"

/* out[N,OC] = inp[N,C] @ weight[OC,C]^T + bias[OC]   (bias may be NULL; out is overwritten) */
void linear_forward(float *out, const float *inp, const float *weight, const float *bias, int N,
                    int C, int OC);
/* dinp[N,C] += dout[N,OC] @ weight[OC,C];  dweight[OC,C] += dout^T @ inp;
 * dbias[OC] += sum_n dout[n,:]   (dinp, dbias may be NULL) */
void linear_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                     const float *inp, const float *weight, int N, int C, int OC);

/* dweight rows [o0, o0 + n) of linear_backward's wgrad: dweight[o0 + i, :] += sum over rows of
 * dout[:, o0 + i] * inp (dweight and dout are the whole [OC, C] and [N, OC]). A registered
 * weight (--bf16, below) takes the bf16 path with the same rounding as linear_backward; (0, OC)
 * gives linear_backward's wgrad bits. For GEMMs cut into tiles under communication. */
void linear_backward_wgrad_rows(float *dweight, const float *dout, const float *inp,
                                const float *weight, int N, int C, int OC, int o0, int n);

/* out[N,OC] += bias[OC] (row-parallel layers add their bias after the reduction). */
void bias_add_forward(float *out, const float *bias, int N, int OC);

/* ---- 16-bit (--bf16, --fp16) ----
 * linear_bf16_setup registers a flat fp32 parameter buffer [main, main + numel) and its bf16
 * copy; from then on linear_forward / linear_backward called with a weight inside that range
 * multiply in bf16 (gemm_bf16: bf16 operands, fp32 sums): the weight is read from the copy at
 * the same offset, and the activation operand (forward: inp; backward: dout, and inp for
 * wgrad) is rounded to bf16 in a workspace, as PyTorch's bf16 autocast rounds it. Outputs,
 * biases and gradients stay fp32 (dweight accumulates into the fp32 main gradient). Rows go in
 * fixed chunks of the workspace (max_rows x 2 x max_width bf16, at most LINEAR_BF16_WS_ELEMS),
 * so the same call gives the same GEMMs, hence the same bits (recomputation). One registration
 * per process (the training model); calls outside a parallel region only. NULL main: off. */
#define LINEAR_BF16_WS_ELEMS ((size_t)16 << 20)
void linear_bf16_setup(const float *main, const uint16_t *copy, size_t numel, int max_rows,
                       int max_width);
/* The same for either 16-bit format: with HALF_FP16 the copy holds IEEE fp16 values, the
 * operands are rounded to fp16 and gemm_half multiplies them (fp32 sums). linear_bf16_setup is
 * this with HALF_BF16. */
void linear_half_setup(half_kind kind, const float *main, const uint16_t *copy, size_t numel,
                       int max_rows, int max_width);
/* The workspace's bytes for (max_rows, max_width): what linear_bf16_setup allocates. */
size_t linear_bf16_workspace_bytes(int max_rows, int max_width);

#endif
