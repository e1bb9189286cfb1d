/* Megatron-core's finalize_model_grads (distributed/finalize_model_grads.py): after the last
 * micro-batch's backward, the gradient reductions that backward leaves to the end of the
 * iteration, in Megatron's order:
 *
 *   1. data parallelism: every bucket averaged across DP (ddp_finish_grad_sync; reductions
 *      still in flight from --overlap-grad-reduce are completed first, so the sums below never
 *      touch a bucket MPI is still writing);
 *   2. tensor parallelism: the gradients each TP rank holds only a part of (tp_allreduce_grad:
 *      norms, row-parallel biases and learned positions under sequence parallelism, q/k
 *      layernorm weights) summed across TP (Megatron's _allreduce_layernorm_grads);
 *   3. pipeline parallelism with tied embeddings: the first stage's word embedding and the last
 *      stage's copy get the sum of both gradients over the embedding group (Megatron's
 *      _allreduce_word_embedding_grads), so both take the same step. */
#ifndef MEGADLM_CORE_DISTRIBUTED_FINALIZE_MODEL_GRADS_H
#define MEGADLM_CORE_DISTRIBUTED_FINALIZE_MODEL_GRADS_H

#include "core/distributed/distributed_data_parallel.h"
#include "core/tensor/tensor.h"

/* d: the data-parallel buckets over ps (NULL: none). tied_embedding: index in ps->tensors of
 * the word embedding (first stage) or its copy (last stage) that the embedding group shares;
 * -1 where this rank holds none. */
void finalize_model_grads(ddp *d, param_set *ps, int tied_embedding);

#endif
