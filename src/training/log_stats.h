/* The optional numbers of Megatron's training log line: --log-params-norm (calc_params_l2_norm)
 * and --log-num-zeros-in-grad (count_zeros_fp32). Both count each parameter once in the whole
 * model: a TP duplicate (norms, row-parallel biases) on TP rank 0 only, the last stage's copy of
 * the tied word embedding not at all (param_is_not_shared), as the gradient norm does.
 * Collective over the world: every rank calls them at the same iterations. */
#ifndef MEGADLM_TRAINING_LOG_STATS_H
#define MEGADLM_TRAINING_LOG_STATS_H

#include "core/models/gpt_model.h"
#include "core/optimizer/distrib_optimizer.h"

/* L2 norm of the parameters the model reads: the fp32 parameters, or under --bf16 / --fp16 the
 * 16-bit ones widened (Megatron: param.data.float()). The parameters must be complete (after a
 * distributed optimizer's gather has finished). */
double log_params_norm(const gpt_model *m);

/* Zeros in the fp32 gradients after clipping; with the distributed optimizer, in this rank's
 * pieces, summed over every rank (Megatron's grad_stats_parallel_group is the world then). */
double log_num_zeros_in_grad(const param_set *ps, const dist_opt *dopt);

#endif
