/* Which checkpoint a run loads and where its checkpoints go, from Megatron's checkpointing flags
 * (docs/CHECKPOINT.md, "Megatron's checkpoint flags"):
 *   - --load DIR resumes from the newer of DIR's latest checkpoint and, with
 *     --non-persistent-ckpt-type global, the latest non-persistent one
 *     (--non-persistent-global-ckpt-dir, default DIR/non_persistent): Megatron's
 *     _load_base_checkpoint, ties going to the non-persistent one; then --ckpt-step N, when
 *     given, names the persistent iteration instead (MegaDLMs' order);
 *   - a directory in a format megadlm cannot read (Megatron's torch_dist or torch checkpoints)
 *     is named as such instead of failing on a missing state.json;
 *   - non-persistent saves keep only the latest iteration directory. */
#ifndef MEGADLM_TRAINING_CHECKPOINT_POLICY_H
#define MEGADLM_TRAINING_CHECKPOINT_POLICY_H

#include <limits.h>
#include <stddef.h>

#include "training/arguments.h"

/* The checkpoint to load: iteration `iteration` of `dir`. */
typedef struct {
    char dir[PATH_MAX];
    int iteration;
    int non_persistent; /* dir is the non-persistent directory */
} ckpt_choice;

/* The directory of non-persistent checkpoints next to `base` (--save or --load):
 * --non-persistent-global-ckpt-dir, or base/non_persistent. */
void ckpt_non_persistent_dir(const megadlm_args *a, const char *base, char *out, size_t len);

/* Picks the checkpoint of --load (see above). 0 with *c; 1 when there is nothing to load
 * (no tracker and no --ckpt-step); -1 with a message naming the file: a malformed tracker, a
 * missing iteration directory, or a directory in another framework's format. Warnings
 * (Megatron's) are printed when `verbose`. */
int ckpt_select(const megadlm_args *a, ckpt_choice *c, int verbose, char *err, size_t errlen);

/* 0 when DIR/iter_NNNNNNN looks like a megadlm checkpoint (or holds nothing known), -1 with
 * a message naming what was found when it holds Megatron's torch_dist files (metadata.json,
 * common.pt, *.distcp) or a Megatron torch checkpoint (mp_rank_* directories). */
int ckpt_check_foreign(const char *dir, int iteration, char *err, size_t errlen);

/* Removes every iter_NNNNNNN directory of dir except iteration `keep` (non-persistent
 * checkpoints: only the latest is kept, once its tracker names it). */
void ckpt_remove_other_iterations(const char *dir, int keep);

/* --use-checkpoint-args (Megatron's load_args_from_checkpoint): the model's shape and
 * tokenizer arguments of the checkpoint ckpt_select picks replace a's (the sizes only where
 * the command line left them at their defaults, the rest always), each change printed when
 * verbose. No checkpoint: a is kept. Before args_validate. 0, or -1 with a message. */
int ckpt_apply_checkpoint_args(megadlm_args *a, int verbose, char *err, size_t errlen);

/* After --use-checkpoint-args and args_validate, before the model is built: the model file of
 * the checkpoint ckpt_select picks must be large enough for the model its state.json describes
 * (ckpt_check_file_holds), so that a state.json edited to a larger model is refused at once
 * instead of after building that model (as generate and convert check). No checkpoint: 0.
 * 0, or -1 with a message naming the file. */
int ckpt_check_checkpoint_args_fit(const megadlm_args *a, char *err, size_t errlen);

#endif
