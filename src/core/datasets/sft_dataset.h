/* Supervised fine-tuning data (megadlm's own format; docs/DATA.md "SFT data").
 *
 * `megadlm preprocess --sft` writes, beside the token dataset PREFIX (.bin/.idx, Megatron's
 * format), a loss-mask dataset PREFIX_loss_mask of the same shape: uint8 values, one per token,
 * 1 where the token belongs to the response (its end-of-document included), 0 on the prompt.
 * The sequence lengths and document indices of both are identical, so any (sequence, offset,
 * count) read of the tokens reads the matching mask: the mask travels with a sample through
 * Megatron's sample index (gpt_indices_sample), including samples that span documents.
 *
 * Padded SFT (one prompt/response pair per sample) replaces the sample index by a document
 * index: the split's sequences repeated for as many epochs as the samples need, shuffled as
 * one array by numpy.random.RandomState(seed) (Megatron's _build_document_index, without a
 * separate final epoch); sample i is sequence document_index[i], cut to seq_length + 1 tokens
 * or padded up to them. */
#ifndef MEGADLM_CORE_DATASETS_SFT_DATASET_H
#define MEGADLM_CORE_DATASETS_SFT_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "core/datasets/gpt_dataset.h"
#include "core/datasets/indexed_dataset.h"

#define SFT_MASK_SUFFIX "_loss_mask"

/* Opens PREFIX_loss_mask beside the token dataset `tokens` and checks that it is its mask:
 * dtype uint8, the same sequence count, sequence lengths and document indices. NULL on error
 * with a message naming the file and what differs. */
indexed_dataset *sft_mask_open(const indexed_dataset *tokens, char *err, size_t errlen);

/* The padded-SFT index of sequences [beg, end): num_samples (0: one epoch) samples, in
 * out->document_index (num_samples entries used: document_index_len is the epochs' total);
 * out->num_samples is the sample count; sample_index and shuffle_index stay NULL. -1 with a
 * message when the range is empty. */
int sft_doc_index_build(int64_t beg, int64_t end, uint64_t num_samples, uint32_t seed,
                        gpt_indices *out, char *err, size_t errlen);

/* One padded sample: sequence `seq` of `tokens` (and of `mask`) cut to `want` tokens, then
 * padded with `pad_id` (mask value `pad_mask`). Returns the tokens read before padding. */
uint64_t sft_padded_sample(const indexed_dataset *tokens, const indexed_dataset *mask,
                           uint64_t seq, uint64_t want, int32_t pad_id, int32_t pad_mask,
                           int32_t *out_tokens, int32_t *out_mask);

/* Every mask value must be 0 or 1: -1 with a message naming the dataset otherwise. */
int sft_mask_check(const indexed_dataset *mask, const int32_t *values, uint64_t n, char *err,
                   size_t errlen);

#endif
