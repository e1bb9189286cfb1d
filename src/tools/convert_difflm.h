/* MegaDLMs' DiffLM layout of `megadlm convert --to hf` (convert_difflm.c), which convert.c
 * calls for masked-diffusion models. */
#ifndef MEGADLM_TOOLS_CONVERT_DIFFLM_H
#define MEGADLM_TOOLS_CONVERT_DIFFLM_H

#include <stddef.h>
#include <stdint.h>

#include "core/models/gpt_param_table.h"
#include "tools/hf_io.h"
#include "training/arguments.h"
#include "training/checkpoint_precision.h"

/* Whether the model is a masked-diffusion one (difflm-noshift or bidirectional attention),
 * which exports as MegaDLMs' DiffLM. */
int difflm_is_model(const transformer_config *c, const megadlm_args *a);
/* What of the model DiffLM lacks, NULL when everything maps. */
const char *difflm_misfit(const transformer_config *c, const megadlm_args *a);
/* Writes OUT/config.json, generation_config.json, the weights (model.safetensors, or
 * model-0000i-of-0000N.safetensors + model.safetensors.index.json as transformers'
 * save_pretrained shards them for MegaDLMs' --num_output_shards), the tokenizer files and the
 * Python files of --hf-code-dir.
 * 0, or -1 with a message on stderr. */
typedef struct {
    int num_output_shards; /* --num-output-shards (1: one model.safetensors) */
    const char *code_dir;  /* --hf-code-dir: its *.py files copied into OUT, or NULL */
} difflm_export_opts;
int difflm_write_export(const char *out, const transformer_config *c, const megadlm_args *a,
                        ckpt_precision p, out_set *o, const difflm_export_opts *eo);
/* The split of save_pretrained(max_shard_size = param_count * 2 // max(1, num_output_shards - 1))
 * over n tensors of shapes [d0] / [d0, d1] (d1 0) in state_dict order, elem_bytes each value;
 * param_count adds inv_freq_values (MegaDLMs' intermediate state dict holds one rotary
 * inv_freq per layer). shard_of[i] gets tensor i's shard (0-based); returns the shard count. */
int difflm_plan_shards(int n, const int64_t (*shapes)[2], uint64_t inv_freq_values,
                       size_t elem_bytes, int num_output_shards, int *shard_of);

#endif
