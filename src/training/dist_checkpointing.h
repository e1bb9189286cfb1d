/* Checkpoints of a tensor-parallel model in the layout-independent format of checkpointing.h:
 * every tensor is written whole (unsharded), so a checkpoint saved with one TP size loads into
 * any other. Saving gathers each tensor's slices to TP rank 0 of data-parallel replica 0, which
 * writes (the other replicas hold the same values and wait for its status); loading reads the
 * whole tensors on every rank and keeps each rank's slice. With one TP rank these are exactly
 * ckpt_save / ckpt_load_tensors. */
#ifndef MEGADLM_TRAINING_DIST_CHECKPOINTING_H
#define MEGADLM_TRAINING_DIST_CHECKPOINTING_H

#include "training/checkpointing.h"

/* Collective over the TP and DP groups; every rank returns the same status (the error text on
 * the writing rank, a pointer to it on the others). */
int dist_ckpt_save(const char *dir, const param_set *local, const ckpt_state *st,
                   int with_optimizer, char *err, size_t errlen);
int dist_ckpt_load_tensors(const char *dir, int iteration, param_set *local, int with_optimizer,
                           char *err, size_t errlen);

#endif
