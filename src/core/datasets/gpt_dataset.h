/* Megatron's GPTDataset index building, split and blending logic, transcribed from
 *   megatron/core/datasets/gpt_dataset.py   (_build_document_sample_shuffle_indices,
 *                                            _get_num_epochs, _build_document_index,
 *                                            _build_shuffle_index)
 *   megatron/core/datasets/helpers.cpp      (build_sample_idx, build_blending_indices)
 *   megatron/core/datasets/blended_megatron_dataset_config.py (parse_and_normalize_split,
 *                                            convert_split_vector_to_split_matrix)
 *   megatron/core/datasets/blended_megatron_dataset_builder.py (split bookends,
 *                                            _get_size_per_split_per_dataset)
 * with numpy.random.RandomState reproduced by core/random/mt19937.h, so that for the same
 * sequence lengths, split, seed, seq_length and sample counts the indices are identical to
 * Megatron's (tests/scripts/test_megatron_format.sh checks this against NumPy).
 * add_extra_token_to_sequence is always on: a sample holds seq_length + 1 tokens. */
#ifndef MEGADLM_CORE_DATASETS_GPT_DATASET_H
#define MEGADLM_CORE_DATASETS_GPT_DATASET_H

#include <stddef.h>
#include <stdint.h>

/* The document ("sequence" in IndexedDataset terms), sample and shuffle indices of one
 * GPTDataset. Arrays come from mem_alloc(MEM_OTHER). */
typedef struct {
    int32_t *document_index;    /* [document_index_len] sequence ids, epochs concatenated */
    uint64_t document_index_len;
    int64_t *sample_index;      /* [2 * (num_samples + 1)] (document_index position, offset) */
    int64_t *shuffle_index;     /* [num_samples] */
    uint64_t num_samples;       /* Megatron's len(dataset) = sample_index rows - 1 */
    int num_epochs;
    int separate_final_epoch;
    uint64_t num_tokens_per_epoch;
} gpt_indices;

/* Builds the indices for the sequences [doc_beg, doc_end) of an indexed dataset whose
 * sequence lengths are `sizes`. num_samples_requested: Megatron's num_samples (0 means None:
 * one epoch). seed: RandomState seed (Megatron's --seed; NumPy needs it < 2^32).
 * drop_last_partial: Megatron's drop_last_partial_sequence (True except, optionally, valid).
 * Returns GPT_INDICES_OK, or a failure with a message: GPT_INDICES_TOO_MANY when the samples
 * asked for are more than the indices can hold (the caller says which of its settings asks for
 * them), GPT_INDICES_BAD otherwise (e.g. a split with no tokens, which Megatron would loop on
 * forever). */
enum { GPT_INDICES_OK = 0, GPT_INDICES_BAD = -1, GPT_INDICES_TOO_MANY = -2 };
int gpt_indices_build(const int32_t *sizes, int64_t doc_beg, int64_t doc_end,
                      uint64_t num_samples_requested, int seq_length, uint32_t seed,
                      int drop_last_partial, gpt_indices *out, char *err, size_t errlen);
void gpt_indices_free(gpt_indices *ix);

/* Sample `i` (no shuffle applied: i indexes the sample index) spans document_index positions
 * [beg, end] from offset off_beg to off_end inclusive of the extra token. Copies its
 * seq_length + 1 tokens with read(seq, offset, count, out, ctx). Returns the tokens written
 * (< seq_length + 1 only for a last partial sample when drop_last_partial was 0). */
typedef void (*gpt_read_fn)(void *ctx, uint64_t seq, uint64_t offset, uint64_t count,
                            int32_t *out);
uint64_t gpt_indices_sample(const gpt_indices *ix, const int32_t *sizes, int seq_length,
                            uint64_t sample, gpt_read_fn read, void *ctx, int32_t *out);

/* Megatron's normalize(): w / numpy.sum(w) with NumPy's pairwise summation. */
void gpt_normalize(const double *w, int n, double *out);

/* Split weights "969,30,1" (Megatron's --split): up to 3 non-negative weights separated by ','
 * or '/', missing ones are 0, normalized (parse_and_normalize_split). The error describes the
 * weights ("expected up to 3 comma-separated weights, found ..."); the caller names its flag. */
int gpt_split_parse(const char *split, double weights[3], char *err, size_t errlen);

/* Megatron's split matrix and bookends: split s covers sequences
 * [round(lo_s * n), round(hi_s * n)) (Python round: half to even); present[s] = 0 where the
 * matrix entry is None (zero weight). */
void gpt_split_ranges(const double weights[3], uint64_t num_elements, int present[3],
                      int64_t beg[3], int64_t end[3]);

/* Samples requested from one dataset of a weighted blend: ceil(target * weight * 1.005). */
uint64_t gpt_blend_dataset_size(uint64_t target, double weight);

/* helpers.cpp build_blending_indices: greedy, the dataset with the largest
 * weight * max(i, 1) - taken wins (lowest index on ties). weights normalized by the caller. */
void gpt_blending_indices(const double *weights, int num_datasets, uint64_t size,
                          int16_t *dataset_index, int64_t *dataset_sample_index);

#endif
