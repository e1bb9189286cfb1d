/* Checkpoints, independent of the parallel layout:
 *   DIR/iter_NNNNNNN/model.safetensors      every parameter, unsharded, Megatron-core names, in
 *                                            the run's precision (F32; BF16 under --bf16)
 *   DIR/iter_NNNNNNN/optimizer.safetensors  "optimizer.exp_avg.<name>", "optimizer.exp_avg_sq.<name>"
 *                                            and, when the parameters are 16-bit, their fp32
 *                                            main parameters "optimizer.fp32_param.<name>"
 *   DIR/iter_NNNNNNN/state.json             {"iteration", "consumed_train_samples",
 *                                            "optimizer_step", "params_dtype", "args": {...},
 *                                            "format_version", "grad_scaler": {...} with --fp16}
 *   DIR/latest_checkpointed_iteration.txt   the iteration number (Megatron's tracker file)
 * Saving writes DIR/iter_NNNNNNN.tmp-<pid>/, fsyncs every file and the directory, renames it
 * into place, then replaces the tracker file atomically (write temp, fsync, rename): a crash at
 * any point leaves the previous checkpoint as "latest". Layout in docs/CHECKPOINT.md.
 * A training run's save_checkpoint / load_checkpoint (Megatron's checkpointing.py) are
 * checkpointing.h's, over these files and dist_checkpointing.h's slices. */
#ifndef MEGADLM_TRAINING_CHECKPOINT_FILES_H
#define MEGADLM_TRAINING_CHECKPOINT_FILES_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/tensor/safetensors.h"
#include "core/tensor/tensor.h"
#include "training/checkpoint_precision.h"

typedef struct {
    int iteration;
    uint64_t consumed_train_samples;
    int optimizer_step;
    ckpt_precision precision; /* state.json "params_dtype" (absent: float32) */
    cJSON *args; /* owned by the caller on save; on load, owned by the state (ckpt_state_free) */
    cJSON *grad_scaler; /* the loss scaler's state (--fp16, Megatron's optimizer state keeps it),
                           or NULL: none; owned as args */
    cJSON *rng_state;   /* {"seed": S}: the key of the counter-based dropout and masking streams
                           (Megatron's rng_state), or NULL: saved with --no-save-rng; owned as
                           args */
} ckpt_state;

/* Writes the parameters in st->precision (a 16-bit precision needs ps's copy in it);
 * with_optimizer: also exp_avg / exp_avg_sq (and, with 16-bit parameters, ps->data as the fp32
 * main parameters). 0, or -1 with a message naming the path. */
int ckpt_save(const char *dir, const param_set *ps, const ckpt_state *st, int with_optimizer,
              char *err, size_t errlen);

/* A checkpoint never holds a NaN or an infinity: 0 when every parameter (its 16-bit copy too,
 * where ps has one: rounding can overflow) and with with_optimizer every AdamW moment of ps is
 * finite, else -1 with a message naming the first
 * tensor that is not. ckpt_save checks this before writing (and refuse_nonfinite adds to the
 * message that the save is refused and the previous checkpoint kept; returns -1). */
int ckpt_check_finite(const param_set *ps, int with_optimizer, char *err, size_t errlen);
int refuse_nonfinite(char *err, size_t errlen);
/* The index of the first NaN or infinity in x[0..n), n when there is none. */
size_t ckpt_first_nonfinite(const float *x, size_t n);

/* Before a model is built from a configuration read from a file (state.json, config.json):
 * 0 when the tensor file at path is large enough to hold numel parameters (2 bytes each at
 * least), else -1 with a message naming the file and both sizes. */
int ckpt_check_file_holds(const char *path, size_t numel, char *err, size_t errlen);

/* Reads DIR/latest_checkpointed_iteration.txt. 0 and *iteration, 1 when DIR has no tracker
 * (nothing to load), -1 on a malformed tracker (message names the file). */
int ckpt_read_latest(const char *dir, int *iteration, char *err, size_t errlen);

/* Reads only state.json of DIR/iter_NNNNNNN (so the caller can rebuild the model config from
 * the saved args before allocating). */
int ckpt_load_state(const char *dir, int iteration, ckpt_state *st, char *err, size_t errlen);
void ckpt_state_free(ckpt_state *st);

/* Loads tensors into ps by name: every tensor of ps must be present with the same shape
 * (else an error naming the file, the tensor and both shapes). The parameters go into ps->data
 * as fp32: F32 bit for bit, 16-bit ones widened exactly. with_optimizer: also the AdamW moments
 * (an error if absent) and, when model.safetensors holds 16-bit parameters, ps->data is their
 * fp32 main parameters from the optimizer file instead (Megatron's load of
 * fp32_from_fp16_params). ps's 16-bit copy, if any, is not touched: the caller rounds it. */
int ckpt_load_tensors(const char *dir, int iteration, param_set *ps, int with_optimizer,
                      char *err, size_t errlen);

/* ---- The steps of ckpt_save, for writers that fill the files themselves ----
 * (training/dist_checkpointing.c, where every rank writes its own slices into files one rank
 * created). ckpt_begin: mkdir -p DIR, then DIR/iter_NNNNNNN.tmp-<pid>/ (x->tmp_dir; the test
 * hook's "tmpdir" stage); the caller writes model.safetensors (and optimizer.safetensors) there,
 * calling ckpt_stage_hook("model" / "optimizer", path) before each, and fsyncs them.
 * ckpt_commit: the rest of the protocol (state.json, fsync of the directory, the move into
 * place, the tracker, leftovers), cleaning up after itself on failure. ckpt_abort: removes the
 * temporary directory after a failure before ckpt_commit. */
typedef struct {
    char dir[PATH_MAX], final_dir[PATH_MAX], tmp_dir[PATH_MAX], old_dir[PATH_MAX];
    char tracker[PATH_MAX], tracker_tmp[PATH_MAX];
    int iteration;
} ckpt_txn;

int ckpt_begin(ckpt_txn *x, const char *dir, int iteration, char *err, size_t errlen);
int ckpt_commit(ckpt_txn *x, const ckpt_state *st, char *err, size_t errlen);
void ckpt_abort(ckpt_txn *x);
/* The fault-injection point of a save at `stage`: -1 with a message naming path when the
 * function given to ckpt_set_fault_injection says to fail there. */
int ckpt_stage_hook(const char *stage, const char *path, char *err, size_t errlen);

/* Fault injection, for tests of the save protocol only (NULL, the default, injects nothing).
 * fault(stage) is called before each stage of a save ("tmpdir", "model", "optimizer", "state",
 * "rename", "tracker"); non-zero makes the save fail there as an I/O error would. It is also
 * called with "exchange" before the atomic swap of an existing iteration directory; non-zero
 * there takes the path of a file system without RENAME_EXCHANGE. */
typedef int (*ckpt_fault_fn)(const char *stage);
void ckpt_set_fault_injection(ckpt_fault_fn fault);

/* The header of a checkpoint file of ps's tensors (their whole shapes in ps->tensors[].shape),
 * byte for byte what ckpt_save writes under precision p: the model file (optimizer = 0), or the
 * optimizer file (the tensors of each of its groups in turn: every "optimizer.exp_avg.<name>",
 * every "optimizer.exp_avg_sq.<name>", with 16-bit parameters every
 * "optimizer.fp32_param.<name>"), with crcs[k] as the crc32 of file tensor k. Its length does
 * not depend on the crc values. st_header's outputs (begin[k]: file tensor k's data offset in
 * the byte buffer). */
int ckpt_file_header(const char *path, const param_set *ps, int optimizer, ckpt_precision p,
                     const uint32_t *crcs, uint8_t **header, uint64_t *header_bytes,
                     uint64_t *begin, uint64_t *buffer_bytes, char *err, size_t errlen);

/* The checks of ckpt_load_tensors on one tensor, for readers of slices: f holds `name` with
 * this shape, as F32, F16 or BF16; when __metadata__ has "crc32.<name>" it must be 8 hex
 * digits, returned in *crc with *has_crc = 1 (the caller checks the data against it, with
 * ckpt_check_crc). 0, or -1 with the message naming the file and the tensor. */
int ckpt_check_entry(const st_file *f, const char *name, int ndim, const int64_t *shape,
                     const st_entry **out, uint32_t *crc, int *has_crc, char *err,
                     size_t errlen);
/* 0 when got == want, else -1 with ckpt_load_tensors' "crc32 mismatch" message. */
int ckpt_check_crc(const st_file *f, const char *name, uint32_t want, uint32_t got, char *err,
                   size_t errlen);

/* A file's tensors that a load does not read: refused (Megatron's load_state_dict is strict), so
 * that a tensor of another configuration (position embeddings under a state.json changed to
 * RoPE) is an error at once rather than dropped without a word by the next save. ents[nents]:
 * the entries the load reads (those of other files and NULLs are skipped). model: NULL when f
 * is the model file; for the optimizer file, the model file, and an entry named by a group
 * prefix (ckpt_group_prefix) and a tensor of the model file is accepted unread (fp32_param of
 * a file the load takes the parameters from elsewhere). 0, or -1 naming the file and the
 * first such tensor. */
int ckpt_check_unused(const st_file *f, const st_entry *const *ents, size_t nents,
                      const st_file *model, char *err, size_t errlen);

#endif
