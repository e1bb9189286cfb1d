/* Checkpoints of any parallel layout (TP x PP x DP, interleaved model chunks, the distributed
 * optimizer) in the layout-independent format of checkpointing.h: every tensor whole
 * (unsharded), in the whole model's order, so a checkpoint saved with one layout loads into any
 * other. No rank holds more than its own slices.
 *
 * Saving: every rank lays the files out from the model config alone (gpt_param_table_whole:
 * names, whole shapes, offsets; the header's length does not depend on the crc32 values).
 * World rank 0 creates DIR/iter_NNNNNNN.tmp-<pid>/ and the files at their final size; after a
 * barrier every rank that owns data pwrite()s its slices at their offsets, straight from its
 * buffers (a TP slice is one run of rows, one run per row for a column split, two runs for
 * SwiGLU's fc1):
 *   - parameters: data-parallel replica 0; a TP-duplicated tensor by TP rank 0 only; the last
 *     pipeline stage's copy of a tied word embedding never (the first stage's is saved);
 *   - AdamW moments: the same ranks, or with the distributed optimizer every DP rank its own
 *     pieces of the flat buffer (mapped to runs of tensor elements).
 * Each writer also folds its runs into one partial crc32 per tensor (crc32 is affine over
 * GF(2)); an XOR reduction to rank 0 gives the whole tensors' crc32s, and rank 0 writes the
 * header last. Every writer fsyncs; after a barrier rank 0 commits with checkpointing.c's
 * atomic protocol (state.json, rename into place, tracker). The files are byte for byte what
 * one process writes with ckpt_save.
 *
 * Loading: every rank parses the headers (st_open: a mapping of which only the header is
 * touched) and pread()s only its slices (its TP rows / columns of its stage's tensors; the
 * moments of its distributed-optimizer pieces only) straight into its buffers. Checks
 * (presence, shapes, dtypes, crc32s: each byte's crc share read and computed by the rank that
 * would write it, through a bounce buffer of at most 1 MiB) all pass, on every rank, before any
 * buffer is written.
 *
 * Both are collective over the world; every rank returns the same status and, on failure, the
 * message of the lowest failing rank. */
#ifndef MEGADLM_TRAINING_DIST_CHECKPOINTING_H
#define MEGADLM_TRAINING_DIST_CHECKPOINTING_H

#include <stddef.h>
#include <stdint.h>

#include "core/optimizer/distrib_optimizer.h"
#include "core/transformer/transformer_config.h"
#include "training/checkpoint_files.h"

/* cfg: the model's config (any rank's: only the model's shape and precision are used);
 * local: this rank's parameters (gpt_model's params); dopt: the distributed optimizer holding
 * the AdamW moments, or NULL when local->exp_avg / exp_avg_sq hold them; with_optimizer: also
 * the moments.
 *
 * Precision (checkpoint_precision.h): the files are in the run's (dist_ckpt_precision): under
 * --bf16 model.safetensors holds local->data_bf16 as BF16 and the optimizer file also the fp32
 * main parameters local->main ("optimizer.fp32_param.<name>", written and read as the
 * parameters are: whole slices, by the data-parallel replica 0). A load takes the precision
 * from the files: with the optimizer state and a 16-bit model file, local->main gets the fp32
 * main parameters; otherwise the model file's values (16-bit ones widened exactly) go to the
 * fp32 parameters (param_set_fp32: data, or main under --bf16 / --fp16). The caller rounds
 * the 16-bit copy from them afterwards (gpt_model_params_to_bf16);
 * dist_ckpt_last_conversion says what was converted. */
int dist_ckpt_save(const char *dir, const transformer_config *cfg, const param_set *local,
                   const dist_opt *dopt, const ckpt_state *st, int with_optimizer, char *err,
                   size_t errlen);
int dist_ckpt_load_tensors(const char *dir, int iteration, const transformer_config *cfg,
                           param_set *local, dist_opt *dopt, int with_optimizer, char *err,
                           size_t errlen);

/* A load of the model file only whose tensors come from other names: source(name, buf, len)
 * gives the file tensor model tensor `name` is read from (name itself, or another written into
 * buf), or NULL: not read, the tensor keeps its value. Several model tensors may read one file
 * tensor; every tensor of the file must be read by some (the checks of a load otherwise: shapes,
 * crc32s, dtypes). Megatron's upcycling (checkpointing.h, upcycle_checkpoint) reads a dense
 * checkpoint into an MoE model so. Collective, as dist_ckpt_load_tensors. */
typedef const char *(*dist_ckpt_source_fn)(const char *name, char *buf, size_t len);
int dist_ckpt_load_renamed(const char *dir, int iteration, const transformer_config *cfg,
                           param_set *local, dist_opt *dopt, dist_ckpt_source_fn source,
                           char *err, size_t errlen);

/* --async-save (Megatron's async save, on CPUs): the collective start of dist_ckpt_save (checks,
 * layout, rank 0's temporary directory and files), then a copy of this rank's slices (its
 * parameters, moments, the distributed optimizer's pieces: the state at the save point) that a
 * background thread writes while training goes on; nothing of the checkpoint is visible (no
 * tracker, no iter_NNNNNNN) until dist_ckpt_finish, collective, joins the writers, writes the
 * headers and commits with the atomic protocol. The files are byte for byte dist_ckpt_save's.
 * *out: the save in flight. 0, or -1 (every rank) with the message. */
typedef struct dist_ckpt_pending dist_ckpt_pending;
int dist_ckpt_save_async(const char *dir, const transformer_config *cfg, const param_set *local,
                         const dist_opt *dopt, const ckpt_state *st, int with_optimizer,
                         dist_ckpt_pending **out, char *err, size_t errlen);
/* Collective: 1 when every rank's writer has finished (dist_ckpt_finish will not wait). */
int dist_ckpt_pending_done(const dist_ckpt_pending *p);
/* Collective: completes the save (waiting for this rank's writer) and frees p. 0, or -1 with
 * the lowest failing rank's message; the temporary files are removed, the tracker untouched. */
int dist_ckpt_finish(dist_ckpt_pending *p, char *err, size_t errlen);
/* Not collective: waits for this rank's writer and drops the save (after an error elsewhere);
 * rank 0 removes the temporary directory. NULL: nothing. */
void dist_ckpt_pending_discard(dist_ckpt_pending *p);
int dist_ckpt_pending_iteration(const dist_ckpt_pending *p);
const char *dist_ckpt_pending_dir(const dist_ckpt_pending *p); /* the checkpoint directory */

/* What the last save or load did on this rank (--log-memory prints it). */
typedef struct {
    uint64_t file_bytes;  /* the checkpoint's tensor files (model + optimizer), in all */
    uint64_t data_bytes;  /* tensor bytes this rank wrote (save) or copied out (load) */
    uint64_t runs;        /* the pwrite calls (save) or copies (load) they took */
    size_t buffer_peak;   /* tracked memory (MEM_OTHER) the call allocated at its peak */
} dist_ckpt_stats;
const dist_ckpt_stats *dist_ckpt_last_stats(void);

/* The precision of the run of cfg: what its checkpoints hold. */
ckpt_precision dist_ckpt_precision(const transformer_config *cfg);
/* The log line of the last successful load if it converted between precisions
 * (ckpt_conversion_note), else "". The same on every rank. */
const char *dist_ckpt_last_conversion(void);

#endif
