/* Core attention under context parallelism, --cp-comm-type a2a (DeepSpeed-Ulysses, Megatron's
 * a2a): an all-to-all trades the sequence split for a head split. Rank rho sends each rank the
 * columns of that rank's share of the query groups (the packed QKV buffer is group-major, so a
 * share is a contiguous slice: 1/CP of this rank's groups with their query heads) for its own
 * rows, and receives its share for every rank's rows: the whole sequence of NH/CP heads. The
 * single process's kernel runs on it (global positions, the masks and dropout of heads
 * heads.first + rho NH/CP ..), and a second all-to-all returns each rank's rows of the output.
 * Backward all-to-alls Q, K, V again (nothing of the whole sequence is kept between the passes)
 * and the output gradient, and returns the Q, K, V gradients the same way.
 *
 * Needs this rank's query groups divisible by CP (args_validate). Kept per layer: the
 * probabilities [B, NH/CP, T, T], as many floats as allgather's [B, NH, T/CP, T]. */
#ifndef MEGADLM_CORE_CONTEXT_PARALLEL_CP_A2A_H
#define MEGADLM_CORE_CONTEXT_PARALLEL_CP_A2A_H

#include "core/kernels/attention.h"
#include "core/transformer/transformer_config.h"

void cp_a2a_forward(const transformer_config *c, float *out, attention_probs probs,
                    const float *qkv, qkv_batch x, attention_opts o, attention_workspace ws);
void cp_a2a_backward(const transformer_config *c, float *dqkv, const float *dout,
                     const float *qkv, attention_probs probs, qkv_batch x, attention_opts o,
                     attention_workspace ws);

#endif
