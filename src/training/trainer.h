/* The state of one training job and the functions the files of the training loop share
 * (training.c: pretrain, train, train_step, evaluate; training_setup.c: setup and teardown;
 * training_log.c: the log line, TensorBoard, the reports; checkpointing.c: save_checkpoint and
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
#include "training/training.h"

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
} trainer;

static inline double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- training.c ---- */
/* The samples Megatron's scheduler has counted: those of the steps taken (a skipped step does
 * not move it); the step about to be taken uses the lr of those samples. */
int64_t scheduler_samples(const trainer *tr);

/* ---- training_setup.c (Megatron's setup_model_and_optimizer and what pretrain sets up) ---- */
/* The model (the provider's, initialised), the data-parallel buckets and distributed optimizer,
 * the loss scaler, and the checkpoint of --load with the 16-bit copy rounded from it. 0; 1 when
 * there was nothing to load under --exit-on-missing-checkpoint; -1 on an error (reported). */
int setup_model_and_optimizer(trainer *tr, const transformer_config *cfg);
/* --bf16 / --fp16: the 16-bit GEMM chosen now (serial code, before any parallel region). 0, or
 * -1 after printing the error. */
int setup_half(const megadlm_args *a);
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

/* ---- training_log.c ---- */
/* Chooses the rank print_rank_last prints on (every rank prints until then). */
void print_rank_last_set(int on);

/* Megatron's total_loss_dict and the timer of the log interval: what training_log accumulates
 * between two log lines. */
typedef struct {
    double t_log;       /* when the interval started (evaluation and saves restart it) */
    double loss;        /* sum of the advanced iterations' losses */
    int iters, advanced, skipped, nan; /* iterations; advanced, skipped, not finite */
    int memory_reported; /* --log-memory: reported after the first iteration */
} log_totals;

/* Megatron's training_log, after iteration tr->iteration (counted): accumulates the loss,
 * reports memory after the first iteration (--log-memory), writes TensorBoard at its interval
 * and prints the log line at --log-interval. stepped: the step was taken. */
void training_log(trainer *tr, log_totals *t, float loss, float grad_norm, int stepped);

/* Megatron's evaluate_and_print_results: the framed line, and TensorBoard. */
void print_eval(trainer *tr, const char *what, int iteration, float loss);
/* --check-for-nan-in-loss-and-grad: every rank says why the job stops. */
void report_nonfinite(int iteration, float loss, float norm, int first_rank);
/* Threads per rank, BLAS kernels and denormals for the whole job (collective). */
void log_threads(void);
/* Pipeline: the share of training time this stage waited for transfers. */
void log_pipeline_bubble(const trainer *tr);
/* --log-memory: the data-parallel reductions so far (per rank). */
void log_dp_communication(const trainer *tr);
/* Context parallelism's ring: transfers and how much of them compute hid. */
void log_cp_ring(const trainer *tr);

/* ---- checkpointing.c (Megatron's save_checkpoint / load_checkpoint of a run) ---- */
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
/* --ckpt-convert-format: the loaded checkpoint written again. The exit status. */
int convert_checkpoint(trainer *tr);

#endif
