/* Introspection of a built gpt_data for tests and tools (tests/tools/dump_gpt_indices.c):
 * the Megatron indices behind each split. */
#ifndef MEGADLM_CORE_DATASETS_GPT_DATA_DEBUG_H
#define MEGADLM_CORE_DATASETS_GPT_DATA_DEBUG_H

#include "core/datasets/gpt_data.h"
#include "core/datasets/gpt_dataset.h"

enum { GPT_SPLIT_EMPTY = 0, GPT_SPLIT_MOCK = 1, GPT_SPLIT_SINGLE = 2, GPT_SPLIT_BLENDED = 3 };

int gpt_data_split_kind(const gpt_data *d, int split);
/* Number of per-prefix GPT datasets behind a split (1 for a single prefix, 0 for mock/empty). */
int gpt_data_num_components(const gpt_data *d, int split);
/* Indices of component k (the prefix index k) of a split. */
const gpt_indices *gpt_data_component(const gpt_data *d, int split, int k);
/* Sequence range [beg, end) of prefix k that the split uses. */
void gpt_data_component_range(const gpt_data *d, int split, int k, int64_t *beg, int64_t *end);
/* Blended splits: dataset index and dataset sample index (gpt_data_num_samples entries);
 * NULL otherwise. */
const int16_t *gpt_data_blend_dataset_index(const gpt_data *d, int split);
const int64_t *gpt_data_blend_sample_index(const gpt_data *d, int split);
/* Weights the blending index was built with (normalized, as Megatron's BlendedDataset). */
const double *gpt_data_blend_weights(const gpt_data *d, int split);

#endif
