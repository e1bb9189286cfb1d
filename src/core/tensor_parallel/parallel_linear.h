/* Megatron-core's ColumnParallelLinear and RowParallelLinear (tensor_parallel/layers.py), with
 * the communication of tensor and sequence parallelism inside them, overlapped with the GEMMs
 * under --tp-comm-overlap.
 *
 * Weights in PyTorch's layout [out, in]; N token rows; Ns = tc_tokens_local(cfg, N).
 * Column-parallel (linear_qkv, linear_fc1): the input is this rank's [Ns, C] shard, all-gathered
 * along tokens under sequence parallelism (as is otherwise); the output [N, OC] is this rank's
 * columns. Row-parallel (linear_proj, linear_fc2): the input is [N, K] (this rank's columns),
 * the output [Ns, C] is the sum over TP ranks (reduce-scatter under sequence parallelism,
 * all-reduce otherwise) plus the bias.
 * With --tp-comm-overlap (comm_overlap.h) the communication runs under the GEMMs:
 *   column forward   ring all-gather of the input, GEMM per piece          (overlap_ag)
 *   column backward  all-gather of the input for wgrad under the dgrad GEMM (bulk_dgrad),
 *                    reduce-scatter of dgrad under the wgrad GEMM          (bulk_wgrad), or
 *                    dgrad GEMM per piece with a ring reduce-scatter        (rs_dgrad)
 *   row forward      GEMM per piece with a ring reduce-scatter             (overlap_rs)
 *   row backward     ring all-gather of the output gradient, dgrad GEMM per piece (overlap_ag)
 * Under sequence parallelism every GEMM over the gathered token rows (all but wgrad) runs once
 * per piece of comm_overlap.h's row plan, overlapped or not: the same BLAS calls on the same
 * data, so the same bits on any BLAS. What can differ: the order of the reduce-scatter's sum
 * (with t > 2: ring order against MPI's), and test-mode progress, which cuts pieces into finer
 * tiles (and wgrad under bulk_wgrad into tiles of its rows). */
#ifndef MEGADLM_CORE_TENSOR_PARALLEL_PARALLEL_LINEAR_H
#define MEGADLM_CORE_TENSOR_PARALLEL_PARALLEL_LINEAR_H

#include "core/kernels/linear.h"
#include "core/transformer/transformer_config.h"

/* The output layer is column-parallel like linear_qkv and linear_fc1 and overlaps like them;
 * Megatron's (not a Transformer Engine layer) overlaps its backward all-gather and
 * reduce-scatter always (LinearWithGradAccumulationAndAsyncCommunication), megadlm under
 * --tp-comm-overlap with the bulk switches. */
typedef enum {
    TP_LINEAR_QKV,
    TP_LINEAR_PROJ,
    TP_LINEAR_FC1,
    TP_LINEAR_FC2,
    TP_LINEAR_OUTPUT
} tp_linear_name;
typedef struct {
    const transformer_config *cfg;
    int overlap_ag, overlap_rs, rs_dgrad, bulk_dgrad, bulk_wgrad;
    int pieces;
    float *gathered; /* [N, C]: the gathered input (column) or output gradient (row) */
    float *partial;  /* [N, C]: the unreduced output (row) or input gradient (column) */
    float *recv;     /* [(t - 1) * Ns, C]: ring reduce-scatter scratch (overlap only) */
} tp_linear;

/* The linear `name` of a layer with config c, its overlaps resolved from the tp_comm_* flags
 * (none when the overlap engine is not running or the communication is local-only). */
tp_linear tp_linear_make(const transformer_config *c, tp_linear_name name, float *gathered,
                         float *partial, float *recv);
/* w: the weight's fp32 values or its 16-bit copy (linear.h). */
/* out[N, OC] = gather(in_local) @ w^T + b (b may be NULL) */
void column_parallel_linear_forward(const tp_linear *l, float *out, const float *in_local,
                                    linear_weight w, const float *b, int N, int C, int OC);
/* din_local[Ns, C] = the TP-summed gradient w.r.t. in_local (overwritten);
 * dw += dout^T @ gather(in_local); db += column sums of dout (dw, db may be NULL) */
void column_parallel_linear_backward(const tp_linear *l, float *din_local, float *dw, float *db,
                                     const float *dout, const float *in_local, linear_weight w,
                                     int N, int C, int OC);
/* out_local[Ns, C] = reduce(in @ w^T) + b */
void row_parallel_linear_forward(const tp_linear *l, float *out_local, const float *in,
                                 linear_weight w, const float *b, int N, int K, int C);
/* din[N, K] += gather(dout_local) @ w; dw += gather(dout_local)^T @ in; db += column sums of
 * dout_local */
void row_parallel_linear_backward(const tp_linear *l, float *din, float *dw, float *db,
                                  const float *dout_local, const float *in, linear_weight w, int N,
                                  int K, int C);

#endif
