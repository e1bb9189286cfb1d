/* Where a training run reports besides its log lines (Megatron's global_vars writers and
 * progress log): TensorBoard event files (--tensorboard-dir; written by the last rank, which
 * holds Megatron's writer and, in megadlm, the loss), progress.txt (--log-progress; world rank
 * 0, in the --save directory), and the W&B flags, which megadlm records but cannot act on (no
 * network): one notice says where the scalars go instead. Which scalars, under which tags, is
 * training_log.c's (Megatron's training_log and evaluate_and_print_results). */
#ifndef MEGADLM_TRAINING_MONITOR_H
#define MEGADLM_TRAINING_MONITOR_H

#include <stdint.h>

#include "training/arguments.h"
#include "training/tensorboard/tensorboard.h"

typedef struct {
    const megadlm_args *a;
    tb_writer *tb;          /* NULL unless this rank writes TensorBoard */
    int progress;           /* this rank appends to <save>/progress.txt */
    double job_start;       /* wall clock seconds (Megatron's _TRAIN_START_TIME) */
    double flops_at_start;  /* floating-point operations done before this job (the loaded
                               iteration's) */
} monitor;

/* At the start of the job (Megatron's pretrain): the job's start time; "Starting job" in
 * progress.txt (world rank 0); the notices (tensorboard, W&B, flags without effect) on the log
 * rank, which writes TensorBoard. 0, or -1 with err. */
int monitor_open(monitor *m, const megadlm_args *a, int log_rank, int world_rank, char *err,
                 size_t errlen);

/* When training starts (Megatron's train), from start_iteration (the loaded one, 0 for a fresh
 * run): on tb_rank, the event file and the arguments as texts. 0, or -1 with err. */
int monitor_start(monitor *m, int tb_rank, int start_iteration, char *err, size_t errlen);

/* TensorBoard: `value` under `tag` at `step` (nothing on ranks without the writer). A write
 * that fails ends the job, naming the file. */
void monitor_scalar(monitor *m, const char *tag, double value, int64_t step);
/* Megatron's pair: `tag` at the iteration and "<tag> vs samples" at the consumed samples. */
void monitor_scalar_pair(monitor *m, const char *tag, double value, int64_t iteration,
                         int64_t samples);
/* Writes the queued events to the file (each log line, each evaluation). */
void monitor_flush(monitor *m);

/* progress.txt after a checkpoint of `iteration` was saved: Megatron's "Saved checkpoint" line
 * (job and cumulative throughput, floating-point operations and tokens so far). */
void monitor_progress_saved(monitor *m, int iteration, uint64_t consumed_samples);

/* Flushes and closes the event file (exit, also after a failure). */
void monitor_close(monitor *m);

/* Megatron's num_floating_point_operations of one iteration, times iterations: the operations
 * of a run with a constant global batch size. */
double monitor_flops(const megadlm_args *a, int iterations);

#endif
