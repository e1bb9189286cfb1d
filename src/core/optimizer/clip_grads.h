/* Global-norm gradient clipping over a param_set's flat gradient buffer (Megatron-core's
 * optimizer/clip_grads.py: get_grad_norm_fp32, clip_grad_by_total_norm_fp32). The distributed
 * optimizer's norm over its pieces is distrib_optimizer.h's, from optimizer_grad_sumsq_at. */
#ifndef MEGADLM_CORE_OPTIMIZER_CLIP_GRADS_H
#define MEGADLM_CORE_OPTIMIZER_CLIP_GRADS_H

#include <stddef.h>

#include "core/tensor/tensor.h"

/* L2 norm of all gradients (accumulated in double). */
float optimizer_grad_norm(const param_set *ps);
/* This rank's share of the squared norm over [begin, end) of the flat gradient buffer (double):
 * tensors every TP rank holds whole (tp_duplicate) count on TP rank 0 only, the last pipeline
 * stage's copy of a tied embedding (pp_shared_copy) not at all (Megatron's
 * param_is_not_tensor_parallel_duplicate and shared-embedding rules). optimizer_grad_norm is
 * sqrt of its TP all-reduce over the whole buffer; the distributed optimizer sums its pieces. */
double optimizer_grad_sumsq(const param_set *ps, size_t begin, size_t end);
/* The same over gradients held elsewhere: g[i - begin] is element i's (a gradient shard). */
double optimizer_grad_sumsq_at(const param_set *ps, const float *g, size_t begin, size_t end);

/* Megatron: coeff = clip / (norm + 1e-6); gradients scaled by coeff when coeff < 1. */
void optimizer_clip_grads(param_set *ps, float grad_norm, float clip_grad);

#endif
