/* What convert.c (the GPT-2 / Llama / Qwen3 layouts, the command) and convert_difflm.c
 * (MegaDLMs' DiffLM layout) share: the list of tensors being written, the grouped-QKV row
 * arithmetic, and a reader over one or several safetensors files (a sharded export). */
#ifndef MEGADLM_TOOLS_CONVERT_INTERNAL_H
#define MEGADLM_TOOLS_CONVERT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/models/gpt_spec.h"
#include "core/tensor/safetensors.h"
#include "training/arguments.h"
#include "training/checkpoint_precision.h"

/* Output tensors, in the order they are added: names and float buffers owned here. */
typedef struct {
    int n, cap;
    st_tensor_desc *d;
    char **names;
    float **bufs;
    int64_t (*shapes)[2];
} out_set;

/* A new [d0] (ndim 1) or [d0, d1] (ndim 2) tensor; returns its buffer to fill. */
float *out_add(out_set *o, const char *name, int ndim, int64_t d0, int64_t d1);
void out_free(out_set *o);

/* Row of megadlm's grouped linear_qkv for (part 0 q / 1 k / 2 v, head within its kind,
 * channel r). */
int64_t convert_qkv_row(const transformer_config *c, int part, int head, int r);

/* The safetensors files of an HF export: model.safetensors, or the shards its
 * model.safetensors.index.json names. */
typedef struct {
    int n;
    st_file *f;
} hf_shards;

/* Reads HF tensor `name` of shape [d0(, d1)] into out (F32/F16/BF16 widened): 0, or -1 with a
 * message on stderr naming the file and tensor. */
int hf_read(const hf_shards *s, const char *name, int ndim, int64_t d0, int64_t d1, float *out);
/* The entry named `name` in any of the files, or NULL (*which: its file). */
const st_entry *hf_find(const hf_shards *s, const char *name, const st_file **which);

/* Shortest decimal that reads back as the same float (1e-05, not 9.99999974737875e-06). */
double nice_float(float f);

/* ---- MegaDLMs' DiffLM layout (convert_difflm.c) ---- */

/* Whether the model is a masked-diffusion one (difflm-noshift or bidirectional attention),
 * which exports as MegaDLMs' DiffLM. */
int difflm_is_model(const transformer_config *c, const megadlm_args *a);
/* What of the model DiffLM lacks, NULL when everything maps. */
const char *difflm_misfit(const transformer_config *c, const megadlm_args *a);
/* The tensors in DiffLM's state_dict order. */
void difflm_to_hf_tensors(const transformer_config *c, const param_set *ps, out_set *o);
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
/* Opens IN/model.safetensors, or the shards of IN/model.safetensors.index.json. */
int hf_shards_open(const char *in, hf_shards *s, char *err, size_t errlen);
void hf_shards_close(hf_shards *s);

#endif
