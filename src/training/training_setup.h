/* Megatron's setup_model_and_optimizer and the rest of what pretrain sets up and tears down
 * (training_setup.c). */
#ifndef MEGADLM_TRAINING_TRAINING_SETUP_H
#define MEGADLM_TRAINING_TRAINING_SETUP_H

#include "core/optimizer/optimizer_param_scheduler.h"
#include "training/trainer.h"

/* The model (the provider's, initialised), the data-parallel buckets and distributed optimizer,
 * the loss scaler, and the checkpoint of --load with the 16-bit copy rounded from it. 0; 1 when
 * there was nothing to load under --exit-on-missing-checkpoint; -1 on an error (reported). */
int setup_model_and_optimizer(trainer *tr, const transformer_config *cfg);
/* --bf16 / --fp16: the 16-bit GEMM chosen now (serial code, before any parallel region). 0, or
 * -1 after printing the error. */
int setup_half(const megadlm_args *a);
/* The scheduler's styles of --lr-decay-style and --lr-wsd-decay-style (validated). */
lr_decay_style training_lr_decay_style(const megadlm_args *a);
lr_wsd_style training_lr_wsd_style(const megadlm_args *a);
/* The optimizer's hyperparameters and the lr schedule (get_optimizer_param_scheduler). */
void setup_optimizer(trainer *tr);
/* --tp-comm-overlap: the overlap engine (ends the job when it cannot start). */
void setup_tp_comm_overlap(const megadlm_args *a);
/* Megatron's build_train_valid_test_datasets: the sizes of the splits, the provider's data. 0,
 * or -1 after printing the error. */
int build_train_valid_test_datasets(trainer *tr);
/* Everything pretrain built, in reverse (parts not built yet are NULL), and the TP overlap
 * engine's summary. */
void trainer_free(trainer *tr);

#endif
