/* Tensor-parallel layer pieces (Megatron-core's tensor_parallel/layers.py and cross_entropy.py):
 * how a parameter is partitioned across TP ranks, the vocab-parallel embedding and the
 * vocab-parallel cross-entropy (logits are never gathered: max, sum of exponentials and target
 * logit are reduced across TP).
 *
 * Partitions (rank r of t): ROWS: rows r*R/t .. (r+1)*R/t (column-parallel weights and biases,
 * vocabulary rows); COLS: columns r*K/t .. of every row (row-parallel weights); ROWS_SWIGLU:
 * SwiGLU's linear_fc1, whose rows are [gate (F); up (F)]: rank r holds gate rows r*F/t .. and up
 * rows r*F/t .., stored [gate_r; up_r]. */
#ifndef MEGADLM_CORE_TENSOR_PARALLEL_LAYERS_H
#define MEGADLM_CORE_TENSOR_PARALLEL_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "core/tensor/tensor.h"

/* Flat index in the whole tensor of the first element of local row i; every local row is a
 * contiguous run of numel/rows elements there. */
size_t tp_shard_row_start(const param_tensor *t, int rank, int tp, int64_t i);
/* Copies between a whole tensor and this rank's slice (to_local: whole -> local). */
void tp_shard_copy(float *local, float *whole, const param_tensor *t, int rank, int tp,
                   int to_local);

/* out[n, :] = wte_local[tokens[n] - vocab_start, :] for tokens this rank owns, else 0.
 * tokens[N], wte_local[Vl, C], out[N, C]. */
void vocab_parallel_embedding_forward(float *out, const int *tokens, const float *wte_local,
                                      int vocab_start, int Vl, int N, int C);
/* dwte_local[tokens[n] - vocab_start, :] += dout[n, :] for owned tokens. */
void vocab_parallel_embedding_backward(float *dwte_local, const float *dout, const int *tokens,
                                       int vocab_start, int Vl, int N, int C);
/* out[n, :] += wpe[(first_token + n) % T, :] for n < Ns (a shard of the [B*T] tokens);
 * backward: dwpe[...] += dout[n, :]. */
void position_embedding_add(float *out, const float *wpe, int64_t first_token, int Ns, int T,
                            int C);
void position_embedding_add_backward(float *dwpe, const float *dout, int64_t first_token, int Ns,
                                     int T, int C);

/* Vocab-parallel cross-entropy over logits_local[N, Vl] (this rank's vocabulary columns
 * vocab_start ..): losses[N] and lse[N] (logsumexp over the whole vocabulary) on every rank;
 * sumexp[N] is scratch. */
void vocab_parallel_cross_entropy_forward(float *losses, float *lse, float *sumexp,
                                          const float *logits_local, const int *targets,
                                          int vocab_start, int Vl, int N);
/* dlogits_local = (softmax - onehot) * dlosses, written (may alias logits_local). */
void vocab_parallel_cross_entropy_backward(float *dlogits_local, const float *logits_local,
                                           const float *lse, const int *targets, int vocab_start,
                                           const float *dlosses, int Vl, int N);

/* Sums across TP the gradients of parameters marked tp_allreduce_grad (Megatron's
 * finalize_model_grads: sequence-parallel norms and biases, q/k layernorm weights). */
void tp_allreduce_partial_grads(param_set *ps);

#endif
