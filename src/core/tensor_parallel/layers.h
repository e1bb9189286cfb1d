/* Tensor-parallel layer pieces (Megatron-core's tensor_parallel/layers.py and cross_entropy.py):
 * how a parameter is partitioned across TP ranks, the vocab-parallel embedding with its
 * reduction across TP, and the vocab-parallel cross-entropy (logits are never gathered: max,
 * sum of exponentials and target logit are reduced across TP).
 *
 * Partitions (rank r of t): ROWS: rows r*R/t .. (r+1)*R/t (column-parallel weights and biases,
 * vocabulary rows); COLS: columns r*K/t .. of every row (row-parallel weights); ROWS_SWIGLU:
 * SwiGLU's linear_fc1, whose rows are [gate (F); up (F)]: rank r holds gate rows r*F/t .. and up
 * rows r*F/t .., stored [gate_r; up_r]. */
#ifndef MEGADLM_CORE_TENSOR_PARALLEL_LAYERS_H
#define MEGADLM_CORE_TENSOR_PARALLEL_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "core/kernels/bf16.h"
#include "core/tensor/tensor.h"
#include "core/transformer/transformer_config.h"

/* Flat index in the whole tensor of the first element of local row i; every local row is a
 * contiguous run of numel/rows elements there. */
size_t tp_shard_row_start(const param_tensor *t, int rank, int tp, int64_t i);
/* Copies between a whole tensor and this rank's slice (to_local: whole -> local). */
void tp_shard_copy(float *local, float *whole, const param_tensor *t, int rank, int tp,
                   int to_local);

/* Megatron's VocabParallelEmbedding, and the learned positions LanguageModelEmbedding adds:
 * each TP rank looks up the tokens of its vocabulary rows (zeros for the others) and the partial
 * sums are reduced across TP (all-reduce, or reduce-scatter to this rank's token shard under
 * sequence parallelism); positions are added on the rank's token rows. With one TP rank, a
 * plain lookup (core/kernels/embedding.h). */
typedef struct {
    const transformer_config *cfg;
    const float *wte; /* [V/t, C] this rank's vocabulary rows (fp32 runs) */
    const uint16_t *wte16; /* --bf16 / --fp16: the same rows in 16 bits (kind), widened on lookup;
                            * wte is then NULL */
    half_kind kind;
    const float *wpe; /* [max_position_embeddings, C] learned positions, or NULL (RoPE) */
    float *dwte, *dwpe; /* their gradients (backward; dwpe NULL without positions) */
    float *partial;   /* [N, C] workspace: the lookup before its reduction (TP only) */
    int positions;    /* > 0: rows at positions >= this (in the whole sequence) are padding
                       * (a masked-diffusion sequence padded to the CP / SP split, possibly past
                       * the position table) and add no learned position; 0: none are */
    const int32_t *position_ids; /* [B, T x CP] the learned-position row of each token of the
                                    whole sequences (position_offset included), or NULL: the
                                    sequence index + position_offset */
} vocab_parallel_embedding;
/* out[Ns, C] (Ns = tc_tokens_local(cfg, B*T)) from tokens[B*T]. */
void vocab_parallel_embedding_forward(const vocab_parallel_embedding *e, float *out,
                                      const int *tokens, int B, int T);
/* Accumulates the gradients of dout[Ns, C] into dwte and dwpe (under sequence parallelism dout
 * is all-gathered into the workspace first). */
void vocab_parallel_embedding_backward(const vocab_parallel_embedding *e, const float *dout,
                                       const int *tokens, int B, int T);

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
