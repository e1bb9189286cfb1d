/* Linear layer with PyTorch's weight layout [out_features, in_features].
 * Shapes: N rows (tokens), C input features, OC output features. */
#ifndef MEGADLM_CORE_KERNELS_LINEAR_H
#define MEGADLM_CORE_KERNELS_LINEAR_H

#include <stddef.h>
#include <stdint.h>

#include "core/kernels/bf16.h"

/* A linear's weight [OC, C]: fp32 values, or (--bf16, --fp16) the model's 16-bit parameters in
 * the format linear_half_setup named. With h16 set the GEMMs multiply in that format and f32 is
 * not read (it may be NULL): under mixed precision the model never reads the fp32 main
 * parameters, which belong to the optimizer (and may be sharded). */
typedef struct {
    const float *f32;
    const uint16_t *h16;
} linear_weight;
static inline linear_weight linear_w32(const float *w) { return (linear_weight){w, NULL}; }

/* out[N,OC] = inp[N,C] @ weight[OC,C]^T + bias[OC]   (bias may be NULL; out is overwritten) */
void linear_forward(float *out, const float *inp, linear_weight weight, const float *bias, int N,
                    int C, int OC);
/* dinp[N,C] += dout[N,OC] @ weight[OC,C];  dweight[OC,C] += dout^T @ inp;
 * dbias[OC] += sum_n dout[n,:]   (dinp, dbias may be NULL) */
void linear_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                     const float *inp, linear_weight weight, int N, int C, int OC);

/* dweight rows [o0, o0 + n) of linear_backward's wgrad: dweight[o0 + i, :] += sum over rows of
 * dout[:, o0 + i] * inp (dweight and dout are the whole [OC, C] and [N, OC]). A 16-bit
 * weight (--bf16, below) takes the bf16 path with the same rounding as linear_backward; (0, OC)
 * gives linear_backward's wgrad bits. For GEMMs cut into tiles under communication. */
void linear_backward_wgrad_rows(float *dweight, const float *dout, const float *inp,
                                linear_weight weight, int N, int C, int OC, int o0, int n);

/* out[N,OC] += bias[OC] (row-parallel layers add their bias after the reduction). */
void bias_add_forward(float *out, const float *bias, int N, int OC);

/* ---- 16-bit (--bf16, --fp16) ----
 * linear_half_setup names the run's 16-bit format and allocates the operand workspace; from
 * then on linear_forward / linear_backward called with a 16-bit weight (h16) multiply in that
 * format (gemm_half: 16-bit operands, fp32 sums): the activation operand (forward: inp;
 * backward: dout, and inp for wgrad) is rounded to the format in the workspace, as PyTorch's
 * autocast rounds it. Outputs, biases and gradients stay fp32 (dweight accumulates into the
 * fp32 main gradient). The rounded operands live in a workspace (max_rows x 2 x max_width
 * values, at most LINEAR_BF16_WS_ELEMS): forward takes as many rows at a time as it holds of the
 * input; backward as many as it holds of both operands, and where that is fewer than all rows
 * (the widest linears, such as a large vocabulary's output layer) it runs in blocks of the
 * outputs over all rows instead (linear.c's backward_blocks). Chunks and blocks are functions
 * of the shapes alone, so the same call gives the same GEMMs, hence the same bits
 * (recomputation). One setup per process (the training model); calls outside a parallel
 * region only. HALF_NONE: off (frees the workspace). */
#define LINEAR_BF16_WS_ELEMS ((size_t)16 << 20)
void linear_half_setup(half_kind kind, int max_rows, int max_width);
/* The 16-bit linears from the threads of a parallel region (the MoE experts' grouped
 * schedule): each thread brings its own operand workspace of linear_half_ws_elems() elements
 * (the shared one's size, so the same chunks: the same bits as linear_forward /
 * linear_backward); the weight must be 16-bit. */
size_t linear_half_ws_elems(void);
void linear_forward_in(uint16_t *ws, float *out, const float *inp, linear_weight weight, int N,
                       int C, int OC);
void linear_backward_in(uint16_t *ws, float *dinp, float *dweight, const float *dout,
                        const float *inp, linear_weight weight, int N, int C, int OC);
/* linear_half_setup(HALF_BF16, ...) */
void linear_bf16_setup(int max_rows, int max_width);
/* The workspace's bytes for (max_rows, max_width): what linear_half_setup allocates. */
size_t linear_bf16_workspace_bytes(int max_rows, int max_width);

#endif
