/* The precision of a checkpoint's parameters, and what a load converts between precisions
 * (docs/CHECKPOINT.md, "Precision"). */
#ifndef MEGADLM_TRAINING_CHECKPOINT_PRECISION_H
#define MEGADLM_TRAINING_CHECKPOINT_PRECISION_H

#include <stddef.h>

#include "core/tensor/safetensors.h"
#include "core/tensor/tensor.h"

/* What a checkpoint's parameters are: the run's precision (transformer_config.bf16).
 * CKPT_FP32: model.safetensors holds the F32 parameters (param_set_fp32: params.data, or an
 * --fp16 run's params.main). CKPT_BF16 (CKPT_FP16): it holds the model's 16-bit parameters
 * (params.data_bf16), and the optimizer file holds the fp32 main parameters (params.main) as "optimizer.fp32_param.<name>", as Megatron's
 * Float16OptimizerWithFloat16Params keeps fp32_from_fp16_params ("optimizer.state.fp32_param"
 * in its distributed checkpoints). Zero (the default of a zeroed ckpt_state) is FP32. */
typedef enum { CKPT_FP32 = 0, CKPT_BF16, CKPT_FP16 } ckpt_precision;

/* ST_F32, ST_BF16, ST_F16. */
st_dtype ckpt_precision_dtype(ckpt_precision p);
/* "float32", "bfloat16", "float16": PyTorch's names (state.json's "params_dtype", and Hugging
 * Face's torch_dtype). */
const char *ckpt_precision_name(ckpt_precision p);
/* The precision whose parameters are stored as dt (F32, BF16 or F16): 0, or -1. */
int ckpt_precision_of_dtype(st_dtype dt, ckpt_precision *p);
/* The model's parameters in precision p as stored in model.safetensors: ps->data (F32) or its
 * 16-bit copy; NULL when ps has no copy in that precision. */
const void *ckpt_model_params(const param_set *ps, ckpt_precision p);

/* The tensor groups of the checkpoint files, numbered across both files: group 0 is the model
 * file's parameters, groups 1, 2 (and 3) the optimizer file's exp_avg, exp_avg_sq (and, with
 * 16-bit parameters, fp32_param). File tensor k of group g is named prefix + the parameter's
 * name. */
enum { CKPT_GROUP_PARAMS = 0, CKPT_GROUP_EXP_AVG, CKPT_GROUP_EXP_AVG_SQ, CKPT_GROUP_MAIN,
       CKPT_GROUPS };
/* The groups of file `optimizer` (0 model, 1 optimizer) under precision p: [*first, *end). */
void ckpt_file_groups(int optimizer, ckpt_precision p, int *first, int *end);
const char *ckpt_group_prefix(int group);  /* "", "optimizer.exp_avg.", ... */
st_dtype ckpt_group_dtype(int group, ckpt_precision p);

/* The model file's parameter dtype, from the entries a load's checks found (params[0 .. n)):
 * every parameter of one file has the same dtype. 0 and *dt, or -1 with a message naming the
 * file and two tensors that differ. */
int ckpt_params_dtype(const st_file *f, const st_entry *const *params, int n, st_dtype *dt,
                      char *err, size_t errlen);

/* The precision of the parameters in the checkpoint file at path (a model.safetensors): every
 * tensor F32, or every one BF16, or F16. 0 and *p, or -1 with a message naming the file. */
int ckpt_file_precision(const char *path, ckpt_precision *p, char *err, size_t errlen);

/* The log line of a load that converts between precisions, "" when it converts nothing:
 * `file` is model.safetensors' dtype, `run` this run's precision, from_main whether the
 * parameters came from the optimizer file's fp32 main parameters. */
void ckpt_conversion_note(char *out, size_t len, st_dtype file, ckpt_precision run,
                          int from_main);

#endif
