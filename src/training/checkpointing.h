/* Checkpoints, independent of the parallel layout:
 *   DIR/iter_NNNNNNN/model.safetensors      every parameter, unsharded, Megatron-core names
 *   DIR/iter_NNNNNNN/optimizer.safetensors  "optimizer.exp_avg.<name>", "optimizer.exp_avg_sq.<name>"
 *   DIR/iter_NNNNNNN/state.json             {"iteration", "consumed_train_samples",
 *                                            "optimizer_step", "args": {...}, "format_version"}
 *   DIR/latest_checkpointed_iteration.txt   the iteration number (Megatron's tracker file)
 * Saving writes DIR/iter_NNNNNNN.tmp-<pid>/, fsyncs every file and the directory, renames it
 * into place, then replaces the tracker file atomically (write temp, fsync, rename): a crash at
 * any point leaves the previous checkpoint as "latest". Layout in docs/CHECKPOINT.md. */
#ifndef MEGADLM_TRAINING_CHECKPOINTING_H
#define MEGADLM_TRAINING_CHECKPOINTING_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/tensor/tensor.h"

typedef struct {
    int iteration;
    uint64_t consumed_train_samples;
    int optimizer_step;
    cJSON *args; /* owned by the caller on save; on load, owned by the state (ckpt_state_free) */
} ckpt_state;

/* with_optimizer: also write exp_avg / exp_avg_sq. 0, or -1 with a message naming the path. */
int ckpt_save(const char *dir, const param_set *ps, const ckpt_state *st, int with_optimizer,
              char *err, size_t errlen);

/* Reads DIR/latest_checkpointed_iteration.txt. 0 and *iteration, 1 when DIR has no tracker
 * (nothing to load), -1 on a malformed tracker (message names the file). */
int ckpt_read_latest(const char *dir, int *iteration, char *err, size_t errlen);

/* Reads only state.json of DIR/iter_NNNNNNN (so the caller can rebuild the model config from
 * the saved args before allocating). */
int ckpt_load_state(const char *dir, int iteration, ckpt_state *st, char *err, size_t errlen);
void ckpt_state_free(ckpt_state *st);

/* Loads tensors into ps by name: every tensor of ps must be present with the same shape
 * (else an error naming the file, the tensor and both shapes). with_optimizer: also the
 * AdamW moments (an error if absent). */
int ckpt_load_tensors(const char *dir, int iteration, param_set *ps, int with_optimizer,
                      char *err, size_t errlen);

#endif
