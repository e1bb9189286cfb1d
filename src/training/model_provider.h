/* From validated arguments to a model (pretrain_gpt.py's model_provider). Shared by `train`,
 * `generate` and the tests, so every command builds the same model from the same flags. */
#ifndef MEGADLM_TRAINING_MODEL_PROVIDER_H
#define MEGADLM_TRAINING_MODEL_PROVIDER_H

#include "core/models/gpt_model.h"
#include "core/transformer/transformer_config.h"
#include "training/arguments.h"

/* The transformer_config the (validated) arguments describe. */
transformer_config model_config_from_args(const megadlm_args *a);

/* Megatron's num_floating_point_operations(args, batch_size) (megatron/training/training.py):
 *   12 * B * s * L * h^2 * ( (1 + g/a + s/h) * (a*kv/h)      attention: QKV, scores, proj
 *                           + (f/h) * (3/2 if swiglu else 1)   MLP
 *                           + V / (2 L h) )                     logits
 * 12 = 3 (forward, dgrad, wgrad) x 2 (two GEMMs of each size) x 2 (multiply-add). */
double model_flops_per_iteration(const megadlm_args *a, int64_t batch_size);

#endif
