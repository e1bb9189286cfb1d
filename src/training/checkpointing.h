/* Megatron's checkpointing.py for a training run: save_checkpoint, load_checkpoint and what
 * goes with them (checkpointing.c). The files are checkpoint_files.h's. */
#ifndef MEGADLM_TRAINING_CHECKPOINTING_H
#define MEGADLM_TRAINING_CHECKPOINTING_H

#include "training/trainer.h"

/* Saves after this iteration into --save (_non_persistent: its non-persistent directory);
 * with --async-save a background write finalized later. 0, or -1 (reported). */
int save_checkpoint(trainer *tr);
int save_checkpoint_non_persistent(trainer *tr);
/* Megatron's maybe_finalize_async_save: completes the pending --async-save write, if any
 * (blocking, or only when every rank's writer is done). Collective. 0, or -1 (reported). */
int finalize_async_save(trainer *tr, int blocking);
/* Loads the checkpoint ckpt_select picks. 0 ok (or nothing to load), 1 nothing to load under
 * --exit-on-missing-checkpoint, -1 error. */
int load_checkpoint(trainer *tr);
/* Megatron's --moe-use-upcycling, in place of load_checkpoint: the dense checkpoint that
 * ckpt_select picks in --load read into this MoE model (every routed expert a copy of its
 * layer's dense MLP, the routers as initialised, every other tensor as loaded), the model
 * only; refused when --save already holds a checkpoint. The run then starts at iteration 0
 * (fresh optimizer, LR schedule and data position). 0, or -1 (reported). */
int upcycle_checkpoint(trainer *tr);
/* Megatron's save of the upcycled model before training: --save, as iteration 1, the model
 * only (the model ready: its 16-bit copy rounded). 0, or -1 (reported). */
int save_upcycled_checkpoint(trainer *tr);
/* --ckpt-convert-format: the loaded checkpoint written again. The exit status. */
int convert_checkpoint(trainer *tr);

#endif
