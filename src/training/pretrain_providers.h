/* What a model family gives the training loop (training.h's pretrain), as Megatron's pretrain
 * takes train_valid_test_dataset_provider, model_provider and forward_step_func: the model, the
 * datasets, and the forward step of a micro-batch with the buffers it fills. */
#ifndef MEGADLM_TRAINING_PRETRAIN_PROVIDERS_H
#define MEGADLM_TRAINING_PRETRAIN_PROVIDERS_H

#include <stdint.h>

#include "core/datasets/gpt_data.h"
#include "core/models/gpt_model.h"
#include "core/transformer/transformer_config.h"
#include "training/arguments.h"
#include "training/tokenizer/tokenizer.h"

/* One micro-batch's forward as the schedule asks for it: which samples, which random draws,
 * and the provider's batch buffers. Micro-batch k of this DP rank is Megatron's sampler's: each
 * data-parallel step takes micro_batch x DP consecutive samples and DP rank d the d-th
 * micro-batch of them; the dropout key uses that global micro-batch index, so any layout draws
 * the masks one process would. */
typedef struct {
    const megadlm_args *a;
    gpt_model *model;
    void *batch;                /* what batch_create returned */
    const gpt_data *data;       /* the split's dataset */
    int split;                  /* SPLIT_TRAIN, SPLIT_VALID, SPLIT_TEST */
    uint64_t first;             /* the micro-batch's first (global) sample */
    uint32_t iteration;         /* iterations done before this one */
    uint32_t global_microbatch; /* k x DP + DP rank */
    int training;               /* 0: evaluation (no dropout, no backward) */
    uint64_t seed;              /* the key of the dropout and masking streams */
    float grad_seed;            /* training: d(objective)/d(loss) (schedules.py's loss scaling
                                   and 1/num_microbatches), for a forward that runs backward
                                   parts itself; 0 in evaluation */
} forward_step_args;

/* What a model family gives pretrain. */
typedef struct {
    /* Megatron's model_provider: the model of this rank's stage (not initialised) */
    gpt_model *(*model_provider)(const megadlm_args *a, const transformer_config *cfg);
    /* Megatron's train_valid_test_datasets_provider: data[split] holding at least
     * num_samples[split] samples (one object may serve several splits). 0, or -1 after
     * printing the error. */
    int (*datasets_provider)(const megadlm_args *a, const tokenizer *tok,
                             const uint64_t num_samples[3], gpt_data *data[3]);
    /* The buffers forward_step fills (made once the model is built, freed by batch_free) */
    void *(*batch_create)(const megadlm_args *a, const tokenizer *tok, const gpt_model *m);
    void (*batch_free)(void *batch);
    /* Megatron's forward_step_func: the micro-batch's loss (the sum the schedule reduces) */
    float (*forward_step)(const forward_step_args *s, activation_store *store);
} pretrain_providers;

#endif
