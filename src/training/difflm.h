/* The masked-diffusion objective of MegaDLMs' pretrain_difflm.py (--model-running-mode
 * difflm-noshift), applied to the training loop's batches:
 *   - with --attention-mask-type no_mask and probability --difflm-varilen-prob, a micro-batch is
 *     cut to a random length R in [2, s] (otherwise R = s);
 *   - "no shift": the model sees x = sample[1 .. R-1] (length L = R - 1) and predicts x in place,
 *     with learned positions 1 .. L (RoPE 0 .. L-1);
 *   - for each sequence b: t_b ~ U(0, 1); each position masked with probability t_b; a sequence
 *     with no masked position gets one at random; masked positions take --mask-token;
 *     p_b = masked / L;
 *   - loss = sum_b sum_i (m_bi / p_b) CE_bi loss_mask_bi / sum loss_mask.
 * Every draw comes from Philox keyed by the global sample index (varilen: by the iteration and
 * global micro-batch), so the objective does not depend on the parallel layout (MegaDLMs seeds
 * by data-parallel rank instead). */
#ifndef MEGADLM_TRAINING_DIFFLM_H
#define MEGADLM_TRAINING_DIFFLM_H

#include <stdint.h>

#include "training/arguments.h"

/* The length R (<= s) micro-batch `global_microbatch` of `iteration` is cut to. */
int difflm_length(uint64_t seed, uint32_t iteration, uint32_t global_microbatch, int s,
                  float varilen_prob);

/* Sequence parallelism splits a micro-batch's B x L tokens across `ranks`; the length L is
 * padded up to the smallest Lp >= L with B x Lp divisible by ranks (the padding's keys are
 * masked out, its loss weights 0: the numbers of the unpadded batch). L itself when ranks <= 1. */
int difflm_padded_length(int L, int B, int ranks);

/* Context parallelism (cp > 1) splits each sequence into 2 cp chunks: the smallest Lp >= L that
 * is a multiple of 2 cp with B x Lp / cp divisible by ranks; difflm_padded_length when cp <= 1.
 * Non-decreasing in L (the condition does not depend on L), so the longest micro-batch, L =
 * seq-length - 1, has the longest padded length (difflm_model_length). */
int difflm_padded_length_cp(int L, int B, int ranks, int cp);

/* The positions the model's buffers hold per sequence (transformer_config.seq_length):
 * --seq-length, or for difflm-noshift the padded length of its seq-length - 1 tokens where
 * that is longer (a length that does not divide into 2 CP chunks, or into the
 * sequence-parallel ranks: seq-length 50 at CP 4 holds 56 positions, 49 real and 7 padding).
 * The padding has no learned position (its rows add none) and RoPE angles from tables of this
 * length. */
int difflm_model_length(const megadlm_args *a);

/* One sequence: sample[R + 1 .. ] is unused; from sample[0 .. R] (R = L + 1 tokens used:
 * sample[1 .. L]) and its loss mask lm[0 .. L-1] (lm[j] for label sample[j + 1]) fills
 * noisy[L] (the model input), labels[L] (= sample[1 .. L]) and weights[L] (m_j / p * lm[j]).
 * Returns the number of masked positions. */
int difflm_mask_sequence(const int32_t *sample, const float *lm, int L, int mask_token,
                         uint64_t seed, uint64_t sample_index, int32_t *noisy, int32_t *labels,
                         float *weights);

/* Masked-diffusion training on the loss-weighted rows only (difflm-noshift without
 * --difflm-full-logits): the head runs them in chunks of GPT_HEAD_CHUNK_ROWS rows, and the
 * logits buffer of each activation store holds min(N, that) rows (gpt_model.logits_in_chunks). */
int difflm_logits_in_chunks(const megadlm_args *a);

#endif
