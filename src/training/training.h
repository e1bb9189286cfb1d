/* The training loop (Megatron's megatron/training/training.py: pretrain, train, train_step,
 * evaluate), model-agnostic: what a model family adds (its model, its datasets, its forward
 * step) comes in through pretrain_providers (training/pretrain_providers.h), as Megatron's
 * pretrain(train_valid_test_dataset_provider, model_provider, model_type, forward_step_func).
 * The GPT family's providers are tools/train.c (Megatron's pretrain_gpt.py). Setup is
 * training_setup.c, logging training_log.c, save and load checkpointing.c. */
#ifndef MEGADLM_TRAINING_TRAINING_H
#define MEGADLM_TRAINING_TRAINING_H

#include "training/arguments.h"
#include "training/pretrain_providers.h"

/* Runs a whole training job from validated arguments. Returns the exit status. */
int pretrain(megadlm_args *a, const pretrain_providers *p);

#endif
