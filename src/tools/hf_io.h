/* What the layouts of `megadlm convert` share (convert.c: GPT-2 / Llama / Qwen3, the command;
 * convert_difflm.c: MegaDLMs' DiffLM files; hf_names.c: the name maps of all three): the list
 * of tensors being written and a reader over one or several safetensors files (a sharded
 * export). In a file of their own, below them, so that no layout includes another. */
#ifndef MEGADLM_TOOLS_HF_IO_H
#define MEGADLM_TOOLS_HF_IO_H

#include <stddef.h>
#include <stdint.h>

#include "core/tensor/safetensors.h"

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
/* Opens IN/model.safetensors, or the shards of IN/model.safetensors.index.json. */
int hf_shards_open(const char *in, hf_shards *s, char *err, size_t errlen);
void hf_shards_close(hf_shards *s);

/* Shortest decimal that reads back as the same float (1e-05, not 9.99999974737875e-06). */
double nice_float(float f);

#endif
