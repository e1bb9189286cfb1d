/* The state of one training job, which the files of the training loop share (training.c:
 * pretrain, train, train_step, evaluate; training_setup.c: setup and teardown; training_log.c:
 * the log line, TensorBoard, the reports; checkpointing.c: save_checkpoint and
 * load_checkpoint). Internal to them: commands run a job through training.h's pretrain. */
#ifndef MEGADLM_TRAINING_TRAINER_H
#define MEGADLM_TRAINING_TRAINER_H

#include <stdint.h>
#include <time.h>

#include "core/datasets/gpt_data.h"
#include "core/distributed/distributed_data_parallel.h"
#include "core/distributed/fsdp.h"
#include "core/models/gpt_model.h"
#include "core/optimizer/distrib_optimizer.h"
#include "core/optimizer/grad_scaler.h"
#include "core/optimizer/optimizer.h"
#include "core/optimizer/optimizer_param_scheduler.h"
#include "core/pipeline_parallel/schedules.h"
#include "training/arguments.h"
#include "training/dist_checkpointing.h"
#include "training/monitor.h"
#include "training/rerun.h"
#include "training/tokenizer/tokenizer.h"
#include "training/pretrain_providers.h"

/* Everything one training job holds. */
typedef struct {
    megadlm_args *a;
    const pretrain_providers *prov; /* the model family's model, data and forward step */
    tokenizer *tok;
    gpt_model *model;
    gpt_data *data[3];    /* the data of each split (the same object unless per-split paths) */
    void *batch;          /* the provider's batch buffers */
    optimizer_config oc;
    lr_scheduler sched;
    int num_microbatches; /* per data-parallel rank */
    pipeline_stores *pipe; /* activation stores of the micro-batches in flight */
    double train_seconds; /* time in train_step (excludes evaluation and checkpoints) */
    int num_stores;
    int num_unchecked;    /* stores that keep everything (partial recompute) */
    ddp *ddp;             /* data-parallel gradient reduction (buckets) */
    dist_opt *dopt;       /* --use-distributed-optimizer (NULL: plain AdamW) */
    fsdp_grads *fsdp;     /* FSDP optim_grads(_params): the gradient shard (NULL: whole) */
    fsdp_params *fsdp_params; /* FSDP optim_grads_params: the parameter shard (NULL: whole) */
    dist_ckpt_pending *pending; /* --async-save: the checkpoint being written, or NULL */
    int pending_non_persistent; /* it goes to the non-persistent directory */
    uint64_t pending_consumed;  /* its consumed samples (progress.txt when it completes) */
    int loaded;                 /* a checkpoint was loaded */
    int dp_rank, dp_size;
    int iteration;
    int train_iters;     /* --train-iters, or --train-samples // global batch */
    int optimizer_steps; /* steps taken (AdamW's step count): iterations less skipped ones;
                            counted from 0 again after a load without the optimizer state */
    int scaling;         /* a loss scaler runs (--fp16, --loss-scale) */
    grad_scaler scaler;  /* its state (the loss scale the log shows) */
    int overflow;        /* the last iteration's scaled gradients were not finite: skipped, and
                            no grad norm (Megatron's optimizer.step returns None) */
    int advanced;        /* an iteration of this process took a step: the log has a loss */
    rerun_state rerun;   /* --rerun-mode */
    uint64_t consumed_train_samples;
    uint64_t rng_seed; /* the key of the dropout and masking streams: --seed, or the
                          checkpoint's rng_state (Megatron's RNG state) */
    int difflm;        /* --model-running-mode difflm-noshift */
    monitor mon;          /* TensorBoard, progress.txt (training/monitor.h) */
    double real_len_acc;  /* difflm: sum over the log interval's advanced iterations of each
                             one's mean input length (MegaDLMs' "real input length") */
    struct on_the_fly_eval *otf; /* --use-on-the-fly-eval (training/on_the_fly_eval.h), or NULL */
} trainer;

static inline double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Megatron's scheduler counts the samples of the steps taken (a skipped step does not move
 * it); the step about to be taken uses the lr of those samples. */
static inline int64_t scheduler_samples(const trainer *tr) {
    int64_t skipped = (int64_t)(tr->iteration - tr->optimizer_steps) * tr->a->global_batch_size;
    return (int64_t)tr->consumed_train_samples - skipped;
}

#endif
