/* The supervised fine-tuning objectives (--sft) on a sample and its loss mask (the response
 * tokens, core/datasets/sft_dataset.h), for both families:
 *
 *   vanilla (autoregressive, Megatron's SFT convention): the loss mask of label t
 *   (= sample[t + 1]) is mask[t + 1]: no loss on predicting a prompt token; the micro-batch's
 *   loss is the mean over its response labels.
 *
 *   difflm-noshift (LLaDA's SFT, its paper's section 2.3 and published guidelines): the model
 *   sees x = sample[1 .. L] (as the pretraining objective, training/difflm.h); per sequence
 *   t ~ U(0, 1) and p = (1 - eps) t + eps, eps = 1e-3 (LLaDA's forward_process); each response
 *   position is masked with probability p, a prompt position never; the loss is
 *       (1 / B) sum_b (1 / A_b) sum_{j masked} CE_bj / p_b,
 *   A_b the response tokens of sequence b (its answer length; with --sft-padding eos the
 *   padding end-of-document tokens are response tokens, as LLaDA). A sequence without response
 *   tokens, or whose draw masks none, adds 0 (LLaDA has no fallback mask).
 * Draws come from Philox keyed by --seed and the global sample index, so the objective does not
 * depend on the parallel layout. */
#ifndef MEGADLM_TRAINING_SFT_H
#define MEGADLM_TRAINING_SFT_H

#include <stdint.h>

#define SFT_DIFFLM_EPS 1e-3f /* LLaDA's eps: p >= eps bounds the weight 1 / p */

/* Vanilla: loss_mask[t] = mask[t + 1] for t < T; returns their sum. */
double sft_ar_loss_mask(const int32_t *mask, int T, float *loss_mask);

/* The draws of sample `sample_index`: t in [0, 1), and u_j in [0, 1) for position j. */
float sft_difflm_t(uint64_t seed, uint64_t sample_index);
float sft_difflm_u(uint64_t seed, uint64_t sample_index, int j);

/* Difflm-noshift: one sequence from sample[0 .. L] and its mask[0 .. L]: noisy[L] (model input:
 * x with the masked response positions replaced by mask_token), labels[L] (= sample[1 .. L]),
 * weights[L] (m_j / (p A), 0 off the masked response positions). Returns the masked count. */
int sft_difflm_mask_sequence(const int32_t *sample, const int32_t *mask, int L, int mask_token,
                             uint64_t seed, uint64_t sample_index, int32_t *noisy,
                             int32_t *labels, float *weights);

#endif
