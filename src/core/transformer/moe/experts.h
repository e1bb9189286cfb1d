/* The routed experts (Megatron-core's moe/experts.py: SequentialMLP, and GroupedMLP's single
 * computation for all local experts): each local expert is an MLP without biases, linear_fc1
 * [FC1, C] (with SwiGLU its gate rows then its up rows), the activation, linear_fc2 [C, F], run
 * on its rows of the expert-major permuted input (token_dispatcher.h). The weights of the local
 * experts are contiguous, expert after expert: fc1 [E_local, FC1, C] and fc2 [E_local, C, F]
 * (their checkpoint names are per expert: gpt_param_table.c); under tensor parallelism each
 * rank holds its share of every local expert, split as the dense MLP (F / TP), and its fc2
 * output is a partial sum the dispatcher reduces (token_dispatcher.h). Under --bf16 / --fp16 they are
 * the model's 16-bit GEMM weights and linear_fc1's output is rounded to 16 bits, as the dense
 * MLP's (mlp.c).
 *
 * Two schedules of the same GEMM calls (each expert's GEMM runs whole, on the same rows): a
 * loop over the experts, each GEMM on every thread (SequentialMLP); or --moe-grouped-gemm, one
 * parallel region over all local experts on all threads, the experts with the most rows first,
 * each expert's GEMMs on one thread (the CPU's grouped GEMM: no per-expert fork/join, small
 * experts side by side). The grouped schedule computes every expert's products as the loop does
 * on one thread, whatever the thread count. The two give the same bits on one thread, and
 * wherever OpenBLAS runs each of the loop's products on one thread anyway (small products, as
 * test_moe_torch's); not in general: with more threads OpenBLAS splits a product among them,
 * which changed its last bits under Haswell's and Zen's kernels on every shape measured, and under
 * SkylakeX's when a weight gradient's K (the expert's rows) is blocked otherwise than on one
 * thread (e.g. 478 rows). bench/bench_moe.sh compares the bits on its shapes. */
#ifndef MEGADLM_CORE_TRANSFORMER_MOE_EXPERTS_H
#define MEGADLM_CORE_TRANSFORMER_MOE_EXPERTS_H

#include <stdint.h>

#include "core/kernels/linear.h"
#include "core/transformer/transformer_config.h"

/* The local experts' weights (or their gradients: h16 NULL). */
typedef struct {
    linear_weight fc1, fc2;
} moe_expert_weights;

/* Local expert e's rows are [begin[e], begin[e + 1]) of the R = begin[E_local] rows. */
typedef struct {
    int num_experts;     /* local experts */
    const int32_t *begin; /* [num_experts + 1] */
} moe_expert_rows;

/* fc1 [R, FC1] and act [R, F] (kept for backward) and out [R, C] from rows [R, C]. */
void moe_experts_forward(const transformer_config *c, moe_expert_weights w, moe_expert_rows g,
                         const float *rows, float *fc1, float *act, float *out);
/* drows [R, C] = the gradient w.r.t. rows (overwritten); dw's fc1/fc2 f32 gradients
 * accumulate. dact [R, F] and dfc1 [R, FC1] scratch. dout is not changed. */
void moe_experts_backward(const transformer_config *c, moe_expert_weights w,
                          moe_expert_weights dw, moe_expert_rows g, const float *rows,
                          const float *fc1, const float *act, const float *dout, float *dact,
                          float *dfc1, float *drows);

#endif
