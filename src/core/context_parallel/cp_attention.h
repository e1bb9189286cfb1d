/* Core attention under context parallelism, --cp-comm-type allgather (Megatron-core's
 * all-gather context parallelism): each rank holds the query, key and value rows of its two
 * chunks of every sequence (cp_layout.h). Forward all-gathers the keys and values of the whole
 * sequence across the context-parallel group and runs the local queries against all of them
 * (the causal mask and the dropout masks on global positions: attention_forward_rows), so the
 * result is the single process's, exactly up to summation order. Backward all-gathers them again
 * (nothing of the whole sequence is kept between the passes: a rank's saved activations stay
 * 1/CP of the sequence), computes the local queries' gradient and every key's and value's
 * gradient from the local queries, and reduce-scatters the latter back to the rows' owners.
 *
 * Communication: an all-gather of B T QKV / CP floats per rank in forward, an all-gather and a
 * reduce-scatter of as much in backward. The probabilities kept for backward are the local
 * queries' [B, NH, T/CP, T]. */
#ifndef MEGADLM_CORE_CONTEXT_PARALLEL_CP_ATTENTION_H
#define MEGADLM_CORE_CONTEXT_PARALLEL_CP_ATTENTION_H

#include "core/kernels/attention.h"
#include "core/transformer/transformer_config.h"

/* out[B, T_local, NH*HS] and probs [2][B, NH, T_local/2, T] (if kept) from this rank's qkv
 * [B, T_local, QKV] (x: the local shape); o.kv_len counts keys of the whole sequence. */
void cp_attention_forward(const transformer_config *c, float *out, attention_probs probs,
                          const float *qkv, qkv_batch x, attention_opts o,
                          attention_workspace ws);
/* dqkv[B, T_local, QKV] += the gradient w.r.t. this rank's rows (its queries', and its keys'
 * and values' summed over every rank's queries). */
void cp_attention_backward(const transformer_config *c, float *dqkv, const float *dout,
                           const float *qkv, attention_probs probs, qkv_batch x,
                           attention_opts o, attention_workspace ws);

#endif
