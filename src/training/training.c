#include "training/training.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/datasets/gpt_data.h"
#include "core/distributed/data_parallel.h"
#include "core/distributed/distributed_data_parallel.h"
#include "core/distributed/finalize_model_grads.h"
#include "core/distributed/fsdp.h"
#include "core/optimizer/distrib_optimizer.h"
#include "core/models/gpt_model.h"
#include "core/optimizer/grad_scaler.h"
#include "core/optimizer/optimizer.h"
#include "core/optimizer/optimizer_param_scheduler.h"
#include "core/pipeline_parallel/p2p_communication.h"
#include "core/pipeline_parallel/schedules.h"
#include "core/tensor/memory.h"
#include "core/transformer/activation_memory.h"
#include "training/checkpoint_policy.h"
#include "training/checkpointing.h"
#include "training/watchdog.h"
#include "training/debug.h"
#include "training/difflm.h"
#include "training/log_stats.h"
#include "training/monitor.h"
#include "training/dist_checkpointing.h"
#include "core/kernels/blas_kernels.h"
#include "core/kernels/gemm.h"
#include "core/context_parallel/cp_ring.h"
#include "core/parallel_state.h"
#include "core/threads.h"
#include "core/util/denormals.h"
#include "core/tensor_parallel/comm_overlap.h"
#include "core/tensor_parallel/mappings.h"
#include "training/model_provider.h"
#include "training/rerun.h"
#include "training/megatron_memory.h"
#include "training/theoretical_memory.h"
#include "training/tokenizer/tokenizer.h"
#include "core/util/alloc.h"
#include "core/util/die.h"

/* Megatron prints the training log on the last rank (print_rank_last); the others stay quiet
 * except for what is per rank (parameter counts, memory). */
static int g_log_rank = 1;
static void log_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_printf(const char *fmt, ...) {
    if (!g_log_rank) return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Everything one training job holds. */
typedef struct {
    megadlm_args *a;
    tokenizer *tok;
    gpt_model *model;
    gpt_data *data[3];    /* the data of each split (the same object unless per-split paths) */
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
    int32_t *sample;   /* [seq_length + 1] */
    int difflm;        /* --model-running-mode difflm-noshift */
    float *lm;         /* [seq_length] one sequence's loss mask (difflm) */
    int32_t *tokens;   /* [micro_batch_size * the model's seq_length] */
    int32_t *labels;
    float *loss_mask;
    monitor mon;          /* TensorBoard, progress.txt (training/monitor.h) */
    double real_len_acc;  /* difflm: sum over the log interval's advanced iterations of each
                             one's mean input length (MegaDLMs' "real input length") */
} trainer;

/* Reads sample `index` of `split` into tr->sample. An id outside the vocabulary ends every
 * rank (only the rank that reads it may see it, e.g. one data-parallel replica). */
static void read_sample(trainer *tr, int split, uint64_t index) {
    char err[1024];
    if (gpt_data_get(tr->data[split], split, index, tr->sample, err, sizeof err) != 0)
        die(1, "%s", err);
}

/* Fills the micro-batch whose first sample is global sample `first` of `split`:
 * tokens = sample[:-1], labels = sample[1:], loss mask 1 (0 on eod tokens with --eod-mask-loss,
 * as Megatron's get_ltor_masks_and_position_ids). */
static void get_batch(trainer *tr, int split, uint64_t first) {
    const megadlm_args *a = tr->a;
    int T = a->seq_length, eod = tokenizer_eod(tr->tok);
    for (int b = 0; b < a->micro_batch_size; b++) {
        read_sample(tr, split, first + b);
        for (int t = 0; t < T; t++) {
            int i = b * T + t;
            tr->tokens[i] = tr->sample[t];
            tr->labels[i] = tr->sample[t + 1];
            tr->loss_mask[i] = (a->eod_mask_loss && tr->sample[t] == eod) ? 0.0f : 1.0f;
        }
    }
}

/* The schedules' forward_step / backward_step (pipeline_parallel/schedules.h): micro-batch k
 * of this DP rank is Megatron's sampler's: each data-parallel step takes micro_batch x DP
 * consecutive samples and DP rank d the d-th micro-batch of them; the dropout key uses that
 * global micro-batch index, so any layout draws the masks one process would. */
typedef struct {
    trainer *tr;
    int split;
    uint64_t first; /* first sample of this global batch */
    int training;
} step_ctx;

/* The masked-diffusion batch (training/difflm.h): L = R - 1 unshifted tokens per sequence
 * with masked positions replaced, labels, weights m/p * loss mask, in rows of Lp >= L tokens
 * (positions L .. Lp-1 padding: --mask-token, weight 0); returns sum(loss mask). */
static float get_difflm_batch(trainer *tr, int split, uint64_t first, int L, int Lp) {
    const megadlm_args *a = tr->a;
    int eod = tokenizer_eod(tr->tok);
    double denominator = 0.0;
    for (int b = 0; b < a->micro_batch_size; b++) {
        read_sample(tr, split, first + b);
        for (int j = 0; j < L; j++) { /* Megatron's loss mask of label j (token j is eod) */
            tr->lm[j] = (a->eod_mask_loss && tr->sample[j] == eod) ? 0.0f : 1.0f;
            denominator += tr->lm[j];
        }
        size_t row = (size_t)b * Lp;
        difflm_mask_sequence(tr->sample, tr->lm, L, a->mask_token, tr->rng_seed, first + b,
                             tr->tokens + row, tr->labels + row, tr->loss_mask + row);
        for (int j = L; j < Lp; j++) {
            tr->tokens[row + j] = tr->labels[row + j] = a->mask_token;
            tr->loss_mask[row + j] = 0.0f;
        }
    }
    return (float)denominator;
}

/* Ranks a micro-batch's tokens are split across outside the tensor-parallel regions: the
 * tensor-parallel size under sequence parallelism, else 1. */
static int sp_ranks(const trainer *tr) {
    const transformer_config *c = &tr->model->cfg;
    return tc_sp(c) ? tc_tp(c) : 1;
}

/* d(objective)/d(loss) of a micro-batch: Megatron's loss / num_microbatches, times the loss
 * scale (schedules.py's grad_scale_func) when one runs. The same within an iteration: the
 * scaler moves after it, so a masked-diffusion forward, which runs the head's backward, uses
 * the seed its backward is given. */
static float grad_seed(const trainer *tr) {
    return tr->scaling ? tr->scaler.scale / tr->num_microbatches : 1.0f / tr->num_microbatches;
}

static float forward_step(void *user, int k, activation_store *store) {
    watchdog_progress("running a forward step");
    step_ctx *sc = user;
    trainer *tr = sc->tr;
    const megadlm_args *a = tr->a;
    uint32_t global_mb = (uint32_t)(k * tr->dp_size + tr->dp_rank);
    uint64_t first = sc->first + (uint64_t)global_mb * a->micro_batch_size;
    gpt_step step = {.seed = tr->rng_seed,
                     .iteration = sc->training ? (uint32_t)tr->iteration : 0,
                     .microbatch = sc->training ? global_mb : 0,
                     .training = sc->training};
    if (tr->difflm) {
        /* variable length: training only, with bidirectional attention (as MegaDLMs) */
        float varilen = sc->training && !tr->model->cfg.causal ? a->difflm_varilen_prob : 0.0f;
        int L = difflm_length(tr->rng_seed, (uint32_t)tr->iteration, global_mb, a->seq_length,
                              varilen) - 1;
        int Lp = difflm_padded_length_cp(L, a->micro_batch_size, sp_ranks(tr),
                                         a->context_parallel_size);
        gpt_batch b = {.tokens = tr->tokens, .labels = tr->labels, .loss_mask = tr->loss_mask,
                       .denominator = get_difflm_batch(tr, sc->split, first, L, Lp),
                       .B = a->micro_batch_size, .T = Lp, .T_valid = L,
                       .loss_rows_only = !a->difflm_full_logits,
                       .grad_seed = sc->training ? grad_seed(tr) : 0.0f};
        return gpt_model_forward(tr->model, store, &b, step);
    }
    get_batch(tr, sc->split, first);
    gpt_batch b = {.tokens = tr->tokens, .labels = tr->labels, .loss_mask = tr->loss_mask,
                   .B = a->micro_batch_size, .T = a->seq_length};
    return gpt_model_forward(tr->model, store, &b, step);
}

static void backward_step(void *user, int k, activation_store *store) {
    (void)k;
    watchdog_progress("running a backward step");
    step_ctx *sc = user;
    const trainer *tr = sc->tr;
    /* Megatron's no_sync: the last micro-batch's backward may start the DP reductions (FSDP's
     * sharded gradients: every micro-batch's, fsdp_backward_begin) */
    if (tr->fsdp_params)
        fsdp_params_backward(tr->fsdp_params, 1); /* each unit's own gradient buffer */
    else if (tr->fsdp)
        fsdp_backward_begin(tr->fsdp);
    else
        ddp_set_last_microbatch(tr->ddp, k == tr->num_microbatches - 1);
    float seed = grad_seed(tr);
    if (tr->model->detect_anomaly)
        snprintf(tr->model->anomaly_where, sizeof tr->model->anomaly_where,
                 "iteration %d, micro-batch %d of data-parallel rank %d", tr->iteration + 1, k,
                 tr->dp_rank);
    gpt_model_backward(tr->model, store, seed);
    if (tr->fsdp_params)
        fsdp_params_backward(tr->fsdp_params, 0);
    else if (tr->fsdp)
        fsdp_backward_end(tr->fsdp);
}

/* Mean over micro-batches and DP replicas of a loss sum the last pipeline stage computed
 * (every rank gets it, so every rank takes the same decisions on it). */
static float global_mean_loss(const trainer *tr, double loss_sum) {
    const parallel_state *ps = parallel_get();
    if (ps->mpi && ps->pp_size > 1)
        MPI_Bcast(&loss_sum, 1, MPI_DOUBLE, ps->pp_size - 1, ps->pp);
    return (float)dp_average(loss_sum / tr->num_microbatches);
}

/* Megatron's scheduler counts the samples of the steps taken (a skipped step does not move
 * it); the step about to be taken uses the lr of those samples. */
static int64_t scheduler_samples(const trainer *tr) {
    int64_t skipped = (int64_t)(tr->iteration - tr->optimizer_steps) * tr->a->global_batch_size;
    return (int64_t)tr->consumed_train_samples - skipped;
}

/* The lowest world rank whose own share of an iteration is not finite: its loss sum before
 * the reductions (last stage), or its gradients. Collective over the world; called by every
 * rank when the reduced loss or gradient norm (equal on all ranks) is not finite. */
static int first_nonfinite_rank(const trainer *tr, double local_loss) {
    const parallel_state *ps = parallel_get();
    const param_set *p = &tr->model->params;
    int bad = !isfinite(local_loss);
    const float *g = tr->fsdp ? tr->fsdp->grad_shard : p->grad;
    size_t n = tr->fsdp ? tr->fsdp->shard_numel : p->numel;
    for (size_t i = 0; i < n && !bad; i++) bad = !isfinite(g[i]);
    int me = bad ? ps->world_rank : ps->world_size, first = me;
    if (ps->mpi && ps->world_size > 1)
        MPI_Allreduce(&me, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return first < ps->world_size ? first : ps->world_rank; /* only NaN from a reduction */
}

/* Megatron's found_inf: all-reduced with MAX over the model-parallel group (TP x PP), since
 * each rank checks only its own shard and stage and an overflow need not reach every rank's
 * gradients (one stage's may overflow alone); every rank then skips and updates its scaler
 * alike. Data-parallel ranks hold the same reduced gradients, so their flags already agree. */
static int model_parallel_found_inf(int local) {
    float f = local ? 1.0f : 0.0f;
    tp_all_reduce_max(&f, 1);
    return parallel_sum_double(PARALLEL_GROUP_PP, f) > 0.0;
}

/* One forward/backward of the iteration over its micro-batches and the gradient reductions:
 * the loss, the gradient norm and the loss scaler's found_inf (its update is the caller's, so
 * that a re-run does not update it twice). *loss_sum: this rank's sum before the reductions. */
static void compute_step(trainer *tr, rerun_result *r, double *loss_sum) {
    megadlm_args *a = tr->a;
    param_set *ps = &tr->model->params;
    if (tr->fsdp)
        fsdp_grads_zero(tr->fsdp);
    else
        memset(ps->grad, 0, ps->numel * sizeof(float));
    step_ctx sc = {.tr = tr, .split = SPLIT_TRAIN, .first = tr->consumed_train_samples,
                   .training = 1};
    pipeline_steps steps = {.user = &sc, .forward_step = forward_step,
                            .backward_step = backward_step,
                            .partial_checkpoints =
                                a->num_microbatches_with_partial_activation_checkpoints};
    if (tr->fsdp_params) fsdp_params_training(tr->fsdp_params, 1);
    *loss_sum = forward_backward(tr->pipe, tr->num_microbatches, &steps);
    if (tr->fsdp_params) {
        fsdp_params_training(tr->fsdp_params, 0);
        fsdp_params_drop(tr->fsdp_params); /* the step changes the shard */
    }
    watchdog_progress("reducing gradients and stepping the optimizer");
    if (!tr->fsdp) /* else reduced after each backward (fsdp_backward_end) */
        finalize_model_grads(tr->ddp, ps, tr->model->spec.tied_embedding);
    /* Megatron's MixedPrecisionOptimizer.prepare_grads: unscale this rank's gradients,
     * found_inf over the model-parallel group (the same decision on every rank). A found_inf
     * makes the norm below non-finite: the step is skipped (or the job stops when
     * --check-for-nan-in-loss-and-grad is on, as Megatron's gradient check does). */
    r->overflow = 0;
    if (tr->scaling) {
        int local = grad_scaler_unscale(ps->grad, ps->numel, grad_scaler_inv_scale(&tr->scaler));
        r->overflow = model_parallel_found_inf(local);
    }
    float norm = tr->dopt ? dist_opt_grad_norm(tr->dopt) : optimizer_grad_norm(ps);
    if (r->overflow) norm = NAN; /* even if the squares' sum lost the infinity */
    r->norm = norm;
    r->loss = global_mean_loss(tr, *loss_sum);
}

/* --rerun-mode: the iteration's result after validation (validate_results: a rejected result
 * re-run; report_stats: every result re-run and counted). Returns -1 when a rejected result is
 * reproducible (persistent: the job stops), else 0. */
static int compute_validated_step(trainer *tr, rerun_result *r, double *loss_sum) {
    int iteration = tr->iteration + 1;
    compute_step(tr, r, loss_sum);
    rerun_inject(&tr->rerun, iteration, 0, r);
    if (tr->rerun.mode == RERUN_DISABLED) return 0;
    int rejected = rerun_rejected(&tr->rerun, r);
    if (tr->rerun.mode == RERUN_VALIDATE_RESULTS && !rejected) {
        rerun_accept(&tr->rerun, r);
        return 0;
    }
    if (rejected)
        log_printf("Unexpected result at iteration #%d (lm loss %g, grad norm %g; "
                   "message='%s')\n"
                   "Need to rerun step to check reproducibility of initial result\n",
                   iteration, (double)r->loss, (double)r->norm,
                   (rejected & RERUN_REJECT_NAN) ? "found NaN or infinity in the loss or the "
                                                   "gradient norm" : "Spiky loss");
    rerun_result again;
    double again_sum;
    compute_step(tr, &again, &again_sum); /* the same samples, iteration and random keys */
    rerun_inject(&tr->rerun, iteration, 1, &again);
    if (tr->rerun.mode == RERUN_REPORT_STATS)
        rerun_count(&tr->rerun, r, &again);
    else if (rerun_judge(iteration, rejected, r, &again))
        return -1;
    *r = again; /* the gradients in the buffers are the re-run's */
    rerun_accept(&tr->rerun, r);
    *loss_sum = again_sum;
    return 0;
}

/* One iteration: the schedule's forward/backward over the micro-batches (gradient
 * accumulation), gradient reductions, clipping, AdamW. Megatron's loss: the mean over
 * micro-batches of each micro-batch's token-averaged loss. Megatron's NaN policy: a loss or a
 * reduced gradient norm that is not finite stops the job (--check-for-nan-in-loss-and-grad,
 * the default; *bad_rank_out = the first rank that saw it) or skips the step, leaving
 * parameters, optimizer state and the lr schedule as they were. Returns 1 when the step was
 * taken, 0 when it was not, -1 when --rerun-mode validate_results found a persistent error. */
static int train_step(trainer *tr, float *loss_out, float *grad_norm_out, int *bad_rank_out) {
    megadlm_args *a = tr->a;
    param_set *ps = &tr->model->params;
    rerun_result r;
    double loss_sum;
    if (compute_validated_step(tr, &r, &loss_sum) != 0) return -1;
    tr->overflow = r.overflow;
    if (tr->scaling) grad_scaler_update(&tr->scaler, tr->overflow);
    float norm = r.norm;
    *loss_out = r.loss;
    *grad_norm_out = norm;
    *bad_rank_out = -1;
    if (!isfinite(*loss_out) || !isfinite(norm)) {
        *bad_rank_out = first_nonfinite_rank(tr, loss_sum);
        /* with overlap, the next forward completes a parameter gather: start one of the
         * unchanged parameters */
        if (tr->dopt && !tr->fsdp_params) ddp_start_param_sync(tr->ddp);
        return 0;
    }
    if (tr->dopt)
        dist_opt_clip_grads(tr->dopt, norm, a->clip_grad);
    else
        optimizer_clip_grads(ps, norm, a->clip_grad);
    float lr = (float)lr_scheduler_get(&tr->sched, scheduler_samples(tr));
    tr->optimizer_steps++;
    if (tr->dopt) {
        dist_opt_step(tr->dopt, &tr->oc, lr, tr->optimizer_steps);
        if (!tr->fsdp_params) /* FSDP gathers each unit when it is needed */
            ddp_start_param_sync(tr->ddp); /* completed by the next forward with overlap */
    } else {
        optimizer_step(ps, &tr->oc, lr, tr->optimizer_steps);
    }
    /* --bf16 / --fp16: the updated main parameters (the distributed optimizer rounded its
     * pieces and gathered the copy; with --overlap-param-gather the gather is in flight and
     * the next forward widens each range as it completes: gpt_model.h's params_needed) */
    if (tr->fsdp_params) /* (FSDP widens each unit as it is gathered) */
        return 1;
    if (tr->dopt && tr->a->overlap_param_gather)
        gpt_model_params_gathering(tr->model);
    else
        gpt_model_params_to_bf16(tr->model);
    return 1;
}

/* Mean loss over eval_iters global batches of `split`, starting at sample `first`. */
static float evaluate(trainer *tr, int split, uint64_t first) {
    megadlm_args *a = tr->a;
    double sum = 0.0;
    for (int it = 0; it < a->eval_iters; it++) {
        step_ctx sc = {.tr = tr, .split = split,
                       .first = first + (uint64_t)it * a->global_batch_size, .training = 0};
        pipeline_steps steps = {.user = &sc, .forward_step = forward_step};
        sum += global_mean_loss(tr, forward_only(tr->pipe, tr->num_microbatches, &steps));
    }
    if (tr->fsdp_params) fsdp_params_drop(tr->fsdp_params);
    return a->eval_iters ? (float)(sum / a->eval_iters) : 0.0f;
}

/* MegaDLMs' "real input length" of the micro-batches this rank ran in one iteration: the mean
 * over them of the length the model saw (difflm: cut by --difflm-varilen-prob in training, then
 * unshifted; seq-length - 1 in evaluation), Megatron's legacy mean over micro-batches of a
 * reported value that is not a (sum, count) pair. The draws are forward_step's: the RNG
 * state's seed, which a resumed run takes from its checkpoint, not --seed. */
static double real_input_length(const trainer *tr, uint32_t iteration, int training) {
    const megadlm_args *a = tr->a;
    float varilen = training && !tr->model->cfg.causal ? a->difflm_varilen_prob : 0.0f;
    double sum = 0.0;
    for (int k = 0; k < tr->num_microbatches; k++)
        sum += difflm_length(tr->rng_seed, iteration, (uint32_t)(k * tr->dp_size + tr->dp_rank),
                             a->seq_length, varilen) - 1;
    return sum / tr->num_microbatches;
}

/* Megatron's evaluate_and_print_results for each reported key: "<key> value" and "<key> PPL"
 * in the line; "<key> validation" (and its ppl with --log-validation-ppl-to-tensorboard) in
 * TensorBoard at the iteration and at the consumed samples (the test split too, as Megatron). */
static void eval_key(trainer *tr, char *line, size_t cap, int *n, const char *key, double value) {
    double ppl = exp(fmin(value, 20.0));
    *n += snprintf(line + *n, cap - *n, "%s value: %.6E | %s PPL: %.6E | ", key, value, key, ppl);
    char tag[96];
    snprintf(tag, sizeof tag, "%s validation", key);
    monitor_scalar_pair(&tr->mon, tag, value, tr->iteration, tr->consumed_train_samples);
    if (tr->a->log_validation_ppl_to_tensorboard) {
        snprintf(tag, sizeof tag, "%s validation ppl", key);
        monitor_scalar_pair(&tr->mon, tag, ppl, tr->iteration, tr->consumed_train_samples);
    }
}

static void print_eval(trainer *tr, const char *what, int iteration, float loss) {
    char line[512];
    int n = snprintf(line, sizeof(line), " %s loss at iteration %d | ", what, iteration);
    eval_key(tr, line, sizeof line, &n, "lm loss", loss);
    if (tr->difflm) eval_key(tr, line, sizeof line, &n, "real input length",
                             real_input_length(tr, 0, 0));
    char dashes[520]; /* one longer than the line, as Megatron's */
    memset(dashes, '-', n + 1);
    dashes[n + 1] = '\0';
    log_printf("%s\n%s\n%s\n", dashes, line, dashes);
    monitor_flush(&tr->mon);
    fflush(stdout);
}

/* --log-memory: what the last checkpoint save or load moved on this rank, beside what the
 * rank holds (its slices) and the tracked buffers the checkpoint code allocated. */
static void log_checkpoint_io(const trainer *tr, const char *what, const char *verb) {
    const dist_ckpt_stats *s = dist_ckpt_last_stats();
    const param_set *ps = &tr->model->params;
    /* in the files' dtypes: the parameters in the run's precision; the moments (and, with
     * 16-bit parameters, the fp32 main parameters) F32 */
    ckpt_precision prec = dist_ckpt_precision(&tr->model->cfg);
    size_t par = ps->numel * st_dtype_size(ckpt_precision_dtype(prec));
    size_t opt = (tr->dopt ? 2 * tr->dopt->shard_numel : 2 * ps->numel) * sizeof(float) +
                 (prec == CKPT_FP32 ? 0 : ps->numel * sizeof(float));
    printf("[Rank %d] checkpoint %s | tensor files %llu bytes | %s by this rank %llu bytes in "
           "%llu runs | this rank's slices %zu bytes (parameters %zu, optimizer state %zu) | "
           "checkpoint buffers (peak) %zu bytes\n",
           parallel_world_rank(), what, (unsigned long long)s->file_bytes, verb,
           (unsigned long long)s->data_bytes, (unsigned long long)s->runs, par + opt, par, opt,
           s->buffer_peak);
    fflush(stdout);
}

/* The state.json of a save now: counters, arguments, the loss scaler's state and, unless
 * --no-save-rng, the RNG state (the streams' key). */
static ckpt_state save_state(const trainer *tr) {
    const megadlm_args *a = tr->a;
    ckpt_state st = {.iteration = tr->iteration,
                     .consumed_train_samples = tr->consumed_train_samples,
                     .optimizer_step = tr->optimizer_steps,
                     .args = args_to_json(a),
                     .grad_scaler = tr->scaling ? grad_scaler_to_json(&tr->scaler) : NULL};
    if (!a->no_save_rng) {
        st.rng_state = cJSON_CreateObject();
        char seed[32];
        snprintf(seed, sizeof seed, "%llu", (unsigned long long)tr->rng_seed);
        cJSON_AddStringToObject(st.rng_state, "seed", seed); /* a u64: exact as a string */
    }
    if (a->ckpt_convert_format[0]) { /* the converted checkpoint's args describe the run */
        cJSON_ReplaceItemInObject(st.args, "ckpt_convert_format", cJSON_CreateString(""));
        cJSON_ReplaceItemInObject(st.args, "ckpt_convert_save", cJSON_CreateString(""));
        cJSON_ReplaceItemInObject(st.args, "async_save", cJSON_CreateFalse()); /* not used */
    }
    return st;
}

/* A save that failed on this rank: the message, and -1. */
static int save_failed(int iteration, const char *dir, const char *err) {
    fprintf(stderr, "[rank %d] error: saving the checkpoint of iteration %d to %s: %s\n",
            parallel_world_rank(), iteration, dir, err);
    return -1;
}

/* What follows a committed save, synchronous or async: older non-persistent iterations
 * removed, the memory line, Megatron's log line (timing: what its brackets say), progress.txt. */
static void save_committed(trainer *tr, int iteration, const char *dir, int non_persistent,
                           uint64_t consumed, const char *timing) {
    if (non_persistent && parallel_world_rank() == 0) ckpt_remove_other_iterations(dir, iteration);
    if (tr->a->log_memory) log_checkpoint_io(tr, "save", "written");
    log_printf("  successfully saved checkpoint from iteration %7d to %s [ %s ]\n", iteration, dir,
               timing);
    monitor_progress_saved(&tr->mon, iteration, consumed);
    fflush(stdout);
}

/* Completes the pending --async-save write, if any: waits for this rank's writer (blocking) or,
 * not blocking, only when every rank's writer is done (Megatron's maybe_finalize_async_save).
 * Collective. 0, or -1 on a failed save (reported). */
static int finish_async_save(trainer *tr, int blocking) {
    if (!tr->pending) return 0;
    if (!blocking && !dist_ckpt_pending_done(tr->pending)) return 0;
    char err[1024], dir[PATH_MAX];
    int it = dist_ckpt_pending_iteration(tr->pending);
    snprintf(dir, sizeof dir, "%s", dist_ckpt_pending_dir(tr->pending));
    int non_persistent = tr->pending_non_persistent;
    double t0 = now_seconds();
    int rc = dist_ckpt_finish(tr->pending, err, sizeof err);
    tr->pending = NULL;
    if (rc != 0) return save_failed(it, dir, err);
    char timing[64];
    snprintf(timing, sizeof timing, "async, finalized in t %.1f ms", (now_seconds() - t0) * 1000.0);
    save_committed(tr, it, dir, non_persistent, tr->pending_consumed, timing);
    return 0;
}

/* Saves the state after this iteration into dir (--save, its non-persistent directory, or
 * the convert mode's): with --async-save a background write finalized later. */
static int save_to(trainer *tr, const char *dir, int non_persistent) {
    megadlm_args *a = tr->a;
    watchdog_progress("saving a checkpoint");
    if (finish_async_save(tr, 1) != 0) return -1; /* one save at a time, as Megatron */
    char err[1024];
    ckpt_state st = save_state(tr);
    double t0 = now_seconds();
    /* every rank writes its own slices (the distributed optimizer: its own pieces of the
     * moments) of the gathered parameters */
    if (tr->dopt) ddp_finish_param_sync(tr->ddp);
    if (tr->fsdp_params) fsdp_params_materialize(tr->fsdp_params); /* the whole parameters */
    int with_optimizer = !a->no_save_optim, rc;
    if (a->async_save && !a->ckpt_convert_format[0]) {
        rc = dist_ckpt_save_async(dir, &tr->model->cfg, &tr->model->params, tr->dopt, &st,
                                  with_optimizer, &tr->pending, err, sizeof err);
        tr->pending_non_persistent = non_persistent;
        tr->pending_consumed = tr->consumed_train_samples;
    } else {
        rc = dist_ckpt_save(dir, &tr->model->cfg, &tr->model->params, tr->dopt, &st,
                            with_optimizer, err, sizeof(err));
    }
    if (tr->fsdp_params) fsdp_params_dematerialize(tr->fsdp_params, 0); /* (async: copied) */
    ckpt_state_free(&st);
    if (rc != 0) return save_failed(tr->iteration, dir, err);
    if (tr->pending) {
        log_printf("  saving checkpoint from iteration %7d to %s in the background (async) "
                   "[ t %.1f ms ]\n", tr->iteration, dir, (now_seconds() - t0) * 1000.0);
        return 0;
    }
    char timing[32];
    snprintf(timing, sizeof timing, "t %.1f ms", (now_seconds() - t0) * 1000.0);
    save_committed(tr, tr->iteration, dir, non_persistent, tr->consumed_train_samples, timing);
    return 0;
}

static int save(trainer *tr) { return save_to(tr, tr->a->save, 0); }

/* A non-persistent save (--non-persistent-save-interval): into the non-persistent directory
 * of --save, older ones removed once it is complete. */
static int save_non_persistent(trainer *tr) {
    char dir[PATH_MAX];
    ckpt_non_persistent_dir(tr->a, tr->a->save, dir, sizeof dir);
    return save_to(tr, dir, 1);
}

/* The model flags a checkpoint fixes: resuming with different values is refused. */
static const char *const *const k_model_flags = args_model_flags; /* arguments.def: MODEL */

static int check_checkpoint_args(const megadlm_args *a, const cJSON *saved, const char *dir,
                                 char *err, size_t errlen) {
    cJSON *now = args_to_json(a);
    int rc = 0;
    for (int i = 0; k_model_flags[i]; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(now, k_model_flags[i]);
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(saved, k_model_flags[i]);
        if (!x || !y || cJSON_Compare(x, y, 1)) continue;
        char *xs = cJSON_PrintUnformatted(x), *ys = cJSON_PrintUnformatted(y);
        snprintf(err, errlen, "--load %.600s: the checkpoint was saved with %s = %s, this run has %s",
                 dir, k_model_flags[i], ys, xs);
        free(xs);
        free(ys);
        rc = -1;
        break;
    }
    cJSON_Delete(now);
    return rc;
}

/* Reads this rank's slices of the tensors and, unless --no-load-optim or --finetune, of the
 * optimizer state (the distributed optimizer: the moments of its own pieces only). */
static int load_tensors(trainer *tr, const char *dir, int it, char *err, size_t errlen) {
    int with_optimizer = !tr->a->no_load_optim && !tr->a->finetune;
    int rc = dist_ckpt_load_tensors(dir, it, &tr->model->cfg, &tr->model->params,
                                    tr->dopt, with_optimizer, err, errlen);
    if (tr->a->log_memory) log_checkpoint_io(tr, "load", "read");
    return rc;
}

/* The dynamic loss scaler's state from a checkpoint's (Megatron's optimizer load_state_dict:
 * a checkpoint without one, e.g. from a --bf16 or fp32 run, leaves the scaler as the flags set
 * it up; one this run has no use for is not loaded, with a warning). */
static int load_grad_scaler(trainer *tr, const cJSON *saved, const char *dir, int it, char *err,
                            size_t errlen) {
    if (!saved || !tr->scaling || !tr->scaler.dynamic) {
        if (saved)
            log_printf(" WARNING: the checkpoint holds a loss scaler's state; this run scales "
                       "%s: not loaded\n", tr->scaling ? "by a constant" : "no loss");
        else if (tr->scaling && tr->scaler.dynamic)
            log_printf(" WARNING: the checkpoint holds no loss scaler's state: starting from "
                       "--initial-loss-scale\n");
        return 0;
    }
    char why[256];
    if (grad_scaler_from_json(&tr->scaler, saved, why, sizeof why) == 0) return 0;
    snprintf(err, errlen, "%.600s/iter_%07d/state.json: %s", dir, it, why);
    return -1;
}

/* Megatron's RNG state: unless --no-load-rng or --finetune, the streams continue with the
 * checkpoint's key (absent: saved with --no-save-rng, --seed's). */
static int load_rng(trainer *tr, const cJSON *rng, const char *dir, int it, char *err,
                    size_t errlen) {
    if (!rng || tr->a->no_load_rng || tr->a->finetune) return 0;
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(rng, "seed");
    char *end = NULL;
    unsigned long long v = cJSON_IsString(seed) ? strtoull(seed->valuestring, &end, 10) : 0;
    if (!end || end == seed->valuestring || *end || seed->valuestring[0] == '-') {
        snprintf(err, errlen, "%.600s/iter_%07d/state.json: expected \"rng_state\" to be "
                 "{\"seed\": \"<unsigned integer>\"}", dir, it);
        return -1;
    }
    if (v != tr->rng_seed)
        log_printf(" > loading checkpoint: the RNG state's seed %llu (dropout and masking) "
                   "replaces --seed %llu (--no-load-rng keeps --seed)\n", v,
                   (unsigned long long)tr->rng_seed);
    tr->rng_seed = v;
    return 0;
}

/* Loads the checkpoint ckpt_select picks (the latest of --load, a newer non-persistent one,
 * or --ckpt-step's). 0 ok (or nothing to load), 1 nothing to load under
 * --exit-on-missing-checkpoint, -1 error. */
static int load(trainer *tr) {
    megadlm_args *a = tr->a;
    char err[1024];
    ckpt_choice ch;
    int rc = ckpt_select(a, &ch, g_log_rank, err, sizeof err);
    if (rc == 1) {
        log_printf(" WARNING: could not find the metadata file %s/latest_checkpointed_iteration.txt\n"
               "    will not load any checkpoints and will start from random\n",
               a->load);
        if (a->exit_on_missing_checkpoint) {
            log_printf(">> '--exit-on-missing-checkpoint' set ... exiting. <<\n");
            return 1;
        }
        return 0;
    }
    const char *dir = ch.dir;
    int it = ch.iteration;
    ckpt_state st = {0};
    if (rc < 0 || ckpt_load_state(dir, it, &st, err, sizeof(err)) != 0 ||
        check_checkpoint_args(a, st.args, dir, err, sizeof(err)) != 0 ||
        load_rng(tr, st.rng_state, dir, it, err, sizeof err) != 0 ||
        load_tensors(tr, dir, it, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: loading checkpoint: %s\n", err);
        ckpt_state_free(&st);
        return -1;
    }
    /* Megatron: --finetune starts at iteration 0 with no consumed samples; without the
     * optimizer state AdamW and the lr schedule (here: its samples, scheduler_samples) start
     * from step 0, with zero moments */
    if (!a->finetune) {
        tr->iteration = st.iteration;
        tr->consumed_train_samples = st.consumed_train_samples;
    }
    tr->optimizer_steps = a->no_load_optim || a->finetune ? 0 : st.optimizer_step;
    rc = load_grad_scaler(tr, st.grad_scaler, dir, it, err, sizeof err);
    ckpt_state_free(&st);
    if (rc != 0) {
        fprintf(stderr, "error: loading checkpoint: %s\n", err);
        return -1;
    }
    if (dist_ckpt_last_conversion()[0]) log_printf("%s\n", dist_ckpt_last_conversion());
    tr->loaded = 1;
    const parallel_state *pst = parallel_get(); /* the logging rank's, as Megatron's line */
    log_printf("  successfully loaded checkpoint from %s [ t %d/%d, p %d/%d ] at iteration %d\n",
               dir, pst->tp_rank + 1, pst->tp_size, pst->pp_rank + 1, pst->pp_size,
               tr->iteration);
    return 0;
}

static void setup_optimizer(trainer *tr) {
    megadlm_args *a = tr->a;
    tr->oc = (optimizer_config){.beta1 = a->adam_beta1, .beta2 = a->adam_beta2,
                                .eps = a->adam_eps, .weight_decay = a->weight_decay,
                                .clip_grad = a->clip_grad};
    /* Megatron's get_optimizer_param_scheduler: lengths in samples, the warmup unrounded */
    double warmup;
    int64_t decay, wsd_decay;
    args_lr_schedule_samples(a, &warmup, &decay, &wsd_decay);
    tr->sched = (lr_scheduler){.max_lr = args_decimal(a->lr), .min_lr = args_decimal(a->min_lr),
                               .init_lr = args_decimal(a->lr_warmup_init),
                               .warmup_steps = warmup, .decay_steps = decay,
                               .wsd_decay_steps = wsd_decay,
                               .style = lr_decay_style_parse(a->lr_decay_style),
                               .wsd_style = lr_wsd_style_parse(a->lr_wsd_decay_style)};
    if (a->train_samples > 0) /* Megatron's update_train_iters says so too */
        log_printf("setting training iterations to %d\n", tr->train_iters);
}

/* A split holds fewer samples than the run reads only when it is a blend without weights
 * (one epoch of each dataset): Megatron's single-pass data loader would stop with
 * StopIteration when it runs out, mid-run; say so before training instead. */
static int check_split_size(const char *flag, const gpt_data *d, int s, uint64_t wanted) {
    static const char *const NAMES[3] = {"train", "valid", "test"};
    static const char *const WHY[3] = {
        "--train-iters x --global-batch-size, or --train-samples",
        "(--train-iters / --eval-interval + 1) x --eval-iters x --global-batch-size",
        "--eval-iters x --global-batch-size"};
    uint64_t have = gpt_data_num_samples(d, s);
    if (have == 0 || have >= wanted) return 0; /* 0: a split --split leaves out */
    fprintf(stderr,
            "error: %s: the %s split holds %llu samples (no weights: one epoch of each "
            "dataset, as Megatron) but the run reads %llu (%s); Megatron's data loader would "
            "run out mid-run. Give weights (W1 P1 W2 P2 ...) to draw more epochs, or read "
            "fewer samples\n",
            flag, NAMES[s], (unsigned long long)have, (unsigned long long)wanted, WHY[s]);
    return -1;
}

/* Megatron's num samples per split: train = iters x gbs (--train-samples when sample-based);
 * valid = (iters / eval_interval + 1) x eval_iters x gbs; test = eval_iters x gbs. */
/* --train-data-path / --valid-data-path / --test-data-path: each split from its own datasets,
 * all of whose documents go to that split (Megatron's blend_per_split). */
static int build_split_data(trainer *tr, const gpt_data_config *dc) {
    const megadlm_args *a = tr->a;
    const char *flags[3] = {"--train-data-path", "--valid-data-path", "--test-data-path"};
    const char *specs[3] = {a->train_data_path, a->valid_data_path, a->test_data_path};
    const char *all_to[3] = {"1,0,0", "0,1,0", "0,0,1"};
    char err[1024];
    for (int k = 0; k < 3; k++) {
        gpt_data_config c = *dc;
        char *paths[ARGS_MAX_DATA_PATHS];
        double w[ARGS_MAX_DATA_PATHS];
        int count = 0, weighted = 0;
        const char *spec = specs[k][0] ? specs[k] : a->train_data_path;
        if (args_parse_blend(flags[k], spec, paths, w, &count, &weighted, err, sizeof(err))) {
            fprintf(stderr, "error: %s\n", err);
            return -1;
        }
        c.num_paths = count;
        c.data_paths = (const char **)paths;
        c.flag = flags[k];
        /* one prefix is one GPTDataset here even with a weight (Megatron's blend_per_split
         * branch tests len(prefixes) == 1 alone; --data-path's tests the weights too) */
        c.weights = weighted && count > 1 ? w : NULL;
        c.split = all_to[k];
        for (int j = 0; j < 3; j++)
            if (j != k) c.num_samples[j] = 0;
        if (!specs[k][0]) c.num_samples[k] = 0; /* no such split: nothing to build */
        tr->data[k] = gpt_data_build(&c, err, sizeof(err));
        for (int i = 0; i < count; i++) free(paths[i]);
        if (!tr->data[k]) {
            if (!strncmp(err, flags[k], strlen(flags[k])))
                fprintf(stderr, "error: %s\n", err); /* it names the flag already */
            else
                fprintf(stderr, "error: %s: %s\n", flags[k], err);
            return -1;
        }
        if (check_split_size(flags[k], tr->data[k], k, c.num_samples[k]) != 0) return -1;
    }
    return 0;
}

static int build_data(trainer *tr) {
    megadlm_args *a = tr->a;
    uint64_t gbs = a->global_batch_size;
    gpt_data_config dc = {
        .mock = a->mock_data,
        .num_paths = a->num_data_paths,
        .data_paths = (const char **)a->data_paths,
        .weights = a->data_weighted ? a->data_weights : NULL,
        .split = a->split,
        .seq_length = a->seq_length,
        .seed = a->seed,
        .vocab_size = tokenizer_vocab_size(tr->tok),
        .eod = tokenizer_eod(tr->tok),
        /* sample-based: the train split holds --train-samples (Megatron's
         * get_train_valid_test_num_samples), the evaluations follow the iterations */
        .num_samples = {a->train_samples > 0 ? (uint64_t)a->train_samples
                                             : (uint64_t)tr->train_iters * gbs,
                        (uint64_t)(tr->train_iters / a->eval_interval + 1) * a->eval_iters * gbs,
                        (uint64_t)a->eval_iters * gbs},
        .cache_dir = a->data_cache_path,
        .log = g_log_rank ? stdout : NULL,
    };
    log_printf("> building train, validation, and test datasets ...\n");
    if (a->data_cache_path[0] && a->mock_data)
        log_printf(" > --data-cache-path %s: mock data has no indices to cache\n",
                   a->data_cache_path);
    char err[1024];
    if (!a->train_data_path[0]) { /* one source split by --split */
        gpt_data *d = gpt_data_build(&dc, err, sizeof(err));
        if (!d) {
            fprintf(stderr, "error: %s\n", err);
            return -1;
        }
        tr->data[0] = tr->data[1] = tr->data[2] = d;
        for (int s = 0; s < 3; s++)
            if (check_split_size("--data-path", d, s, dc.num_samples[s]) != 0) return -1;
    } else if (build_split_data(tr, &dc) != 0) {
        return -1;
    }
    log_printf(" > datasets target sizes (minimum size):\n    train:      %llu\n"
           "    validation: %llu\n    test:       %llu\n",
           (unsigned long long)dc.num_samples[0], (unsigned long long)dc.num_samples[1],
           (unsigned long long)dc.num_samples[2]);
    if (gpt_data_num_samples(tr->data[SPLIT_TRAIN], SPLIT_TRAIN) == 0) {
        fprintf(stderr, "error: --split %s leaves no training samples\n", a->split);
        return -1;
    }
    return 0;
}

/* Iterations since the last log line: all, those that took a step, those skipped, and of
 * these the ones whose loss was not finite (Megatron's advanced / skipped / nan iterations). */
typedef struct {
    int iters, advanced, skipped, nan;
} log_counts;

/* The optional numbers of one iteration (training/log_stats.h; NAN or < 0: not computed). */
typedef struct {
    double params_norm; /* --log-params-norm */
    double num_zeros;   /* --log-num-zeros-in-grad, not after a skipped step (Megatron: None) */
} log_extras;

/* Megatron's num_floating_point_operations per iteration over the time of one and the world
 * (on CPUs: per rank), in TFLOP/s. */
static double throughput_tflops(const megadlm_args *a, double per_iter_s) {
    return model_flops_per_iteration(a, a->global_batch_size) /
           (per_iter_s * 1e12 * a->world_size);
}

static void training_log(trainer *tr, double elapsed_s, const log_counts *c, double loss_sum,
                         double lr, float grad_norm, const log_extras *x) {
    megadlm_args *a = tr->a;
    double per_iter = elapsed_s / c->iters;
    double tflops = throughput_tflops(a, per_iter);
    /* Megatron's optional fields: throughput (--log-throughput; 3 decimals, not Megatron's 1,
     * since a CPU rank's TFLOP/s are below 0.1), grad norm (not after an overflow: its
     * optimizer step returned None), num zeros, params norm; the loss scale is the one after
     * this iteration's update (1.0 without a scaler) */
    char thr[80] = "", norm[48] = "", zeros[48] = "", pnorm[48] = "", loss[96] = "";
    if (a->log_throughput)
        snprintf(thr, sizeof thr, " throughput per GPU (TFLOP/s/GPU): %.3f |", tflops);
    if (!tr->overflow) snprintf(norm, sizeof norm, " grad norm: %.3f |", grad_norm);
    if (x->num_zeros >= 0.0) snprintf(zeros, sizeof zeros, " num zeros: %.1f |", x->num_zeros);
    if (!isnan(x->params_norm))
        snprintf(pnorm, sizeof pnorm, " params norm: %.3f |", x->params_norm);
    /* Megatron averages the reported values over the iterations that took a step; their sums
     * start with the first such iteration of the process (until then the line has no loss);
     * a zero average is left out */
    if (tr->advanced) {
        int n = c->advanced > 1 ? c->advanced : 1, k = 0;
        double avg_loss = loss_sum / n, avg_len = tr->real_len_acc / n;
        if (avg_loss > 0.0) k = snprintf(loss, sizeof loss, " lm loss: %.6E |", avg_loss);
        if (tr->difflm && avg_len > 0.0)
            snprintf(loss + k, sizeof loss - k, " real input length: %.6E |", avg_len);
    }
    /* Megatron's line starts with the local time: " [YYYY-MM-DD HH:MM:SS] iteration ..." */
    char when[32] = "";
    time_t now = time(NULL);
    struct tm tm_now;
    if (localtime_r(&now, &tm_now)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm_now);
    log_printf(" [%s] iteration %8d/%8d | consumed samples: %12llu | elapsed time per iteration (ms): "
           "%.1f |%s learning rate: %.6E | global batch "
           "size: %5d |%s loss scale: %.1f |%s%s%s number of skipped "
           "iterations: %3d | number of nan iterations: %3d |\n",
           when, tr->iteration, tr->train_iters, (unsigned long long)tr->consumed_train_samples,
           per_iter * 1000.0, thr, lr, a->global_batch_size, loss,
           tr->scaling ? (double)tr->scaler.scale : 1.0, norm, zeros, pnorm, c->skipped, c->nan);
    /* Megatron: with --log-timers-to-tensorboard, the iteration's time and the throughput */
    if (a->log_timers_to_tensorboard) {
        monitor_scalar(&tr->mon, "iteration-time", per_iter, tr->iteration);
        if (a->log_throughput) monitor_scalar(&tr->mon, "throughput", tflops, tr->iteration);
    }
    monitor_flush(&tr->mon);
    fflush(stdout);
}

/* One iteration's values for TensorBoard (Megatron's training_log at
 * --tensorboard-log-interval): the loss of this iteration, not the log line's average. */
typedef struct {
    float loss, lr, grad_norm;
    double real_len; /* difflm */
    int skipped;     /* skipped iterations since the last log line */
} tb_values;

/* Megatron's resident/allocated/count of torch.cuda.memory_stats on CPUs: the process's
 * resident set and megadlm's tracked allocator (the writing rank's). */
static void tensorboard_memory(trainer *tr) {
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        fclose(f);
    }
    monitor_scalar(&tr->mon, "mem-reserved-bytes", (double)resident * sysconf(_SC_PAGESIZE),
                   tr->iteration);
    monitor_scalar(&tr->mon, "mem-allocated-bytes", (double)mem_total_current(), tr->iteration);
    monitor_scalar(&tr->mon, "mem-allocated-count", (double)mem_live_count(), tr->iteration);
}

static void tensorboard_iteration(trainer *tr, const tb_values *v, const log_extras *x) {
    const megadlm_args *a = tr->a;
    monitor *m = &tr->mon;
    int64_t it = tr->iteration, samples = (int64_t)tr->consumed_train_samples;
    monitor_scalar_pair(m, "learning-rate", v->lr, it, samples);
    if (v->skipped > 0) monitor_scalar(m, "skipped-iterations", v->skipped, it);
    monitor_scalar_pair(m, "batch-size", a->global_batch_size, it, samples);
    monitor_scalar_pair(m, "lm loss", v->loss, it, samples);
    if (tr->difflm) monitor_scalar_pair(m, "real input length", v->real_len, it, samples);
    if (a->log_loss_scale_to_tensorboard)
        monitor_scalar_pair(m, "loss-scale", tr->scaling ? tr->scaler.scale : 1.0, it, samples);
    if (a->log_world_size_to_tensorboard)
        monitor_scalar_pair(m, "world-size", a->world_size, it, samples);
    if (!tr->overflow) monitor_scalar_pair(m, "grad-norm", v->grad_norm, it, samples);
    if (x->num_zeros >= 0.0) monitor_scalar_pair(m, "num-zeros", x->num_zeros, it, samples);
    if (!isnan(x->params_norm)) monitor_scalar_pair(m, "params-norm", x->params_norm, it, samples);
    if (a->log_memory_to_tensorboard) tensorboard_memory(tr);
}

/* --log-params-norm and --log-num-zeros-in-grad at an iteration that logs (collective: every
 * rank computes them at the same iterations). */
static log_extras compute_extras(trainer *tr, int stepped) {
    const megadlm_args *a = tr->a;
    log_extras x = {.params_norm = NAN, .num_zeros = -1.0};
    if (a->log_num_zeros_in_grad && stepped)
        x.num_zeros = log_num_zeros_in_grad(&tr->model->params, tr->dopt);
    if (a->log_params_norm) {
        if (tr->dopt) ddp_finish_param_sync(tr->ddp); /* the gathered parameters complete */
        if (tr->fsdp_params) fsdp_params_materialize(tr->fsdp_params);
        x.params_norm = log_params_norm(tr->model);
        if (tr->fsdp_params) fsdp_params_dematerialize(tr->fsdp_params, 0);
    }
    return x;
}

/* --check-for-nan-in-loss-and-grad: every rank says why the job stops. */
static void report_nonfinite(int iteration, float loss, float norm, int first_rank) {
    char what[128];
    if (!isfinite(loss) && !isfinite(norm))
        snprintf(what, sizeof what, "lm loss is %f and grad norm is %f", loss, norm);
    else if (!isfinite(loss))
        snprintf(what, sizeof what, "lm loss is %f", loss);
    else
        snprintf(what, sizeof what, "grad norm is %f", norm);
    fprintf(stderr,
            "[rank %d] error: iteration %d: %s (first seen on rank %d); stopping before the "
            "optimizer step (--check-for-nan-in-loss-and-grad; "
            "--no-check-for-nan-in-loss-and-grad skips such iterations instead)\n",
            parallel_world_rank(), iteration, what, first_rank);
    fflush(stderr);
}

/* The last stage's logits per store (within the saved activations): the rows the
 * store's buffer holds against theoretical_megadlm_logits_rows, and why that many. */
static void log_logits(const trainer *tr, const activation_store *s, int rank) {
    if (!s->logits) return;
    const megadlm_args *a = tr->a;
    printf("[Rank %d] logits per store (bytes) | predicted %zu | measured %zu | rows %d "
           "of %d | %s |\n", rank, theoretical_megadlm_logits_bytes(a),
           mem_block_bytes(s->logits), s->logits_rows,
           a->micro_batch_size * tc_seq_local(&tr->model->cfg),
           difflm_logits_in_chunks(a) ? "masked diffusion: loss-weighted rows in chunks"
                                      : "every row");
}

/* Saved activations per layer: what the tracked allocator measured when the block was built,
 * beside the analytic count of docs/MEMORY.md (they must agree). Then, per category, what
 * `megadlm memory` predicts for this rank (training/theoretical_memory.c, the same code) beside
 * what the allocator holds: any difference is a bug in one of the two. */
static void log_saved_activations(const trainer *tr) {
    const gpt_model *m = tr->model;
    const activation_store *s = tr->pipe->stores[0];
    int B = tr->a->micro_batch_size, T = tc_seq_local(&m->cfg), rank = parallel_world_rank();
    /* a store holds one model chunk's layers; every chunk's layer j keeps what layer j of the
     * first store's block was given */
    for (int j = 0; j < m->num_chunks; j++)
        for (int l = 0; l < m->block.num_layers; l++)
            printf("[Rank %d] saved activations layer %d (bytes) | measured %zu | analytic %zu |\n",
                   rank, tc_chunk_layer_offset(&m->cfg, j) + l,
                   activation_store_layer_saved_bytes(s, l),
                   activation_memory_layer_bytes(&s->cfg, B, T, l));
    theoretical_megadlm_bytes p = theoretical_megadlm_rank(tr->a, parallel_get()->pp_rank,
                                                           tr->num_stores, tr->num_unchecked);
    const struct {
        const char *name;
        size_t predicted;
        mem_category cat;
    } rows[] = {{"parameters", p.parameters, MEM_PARAMS},
                {"gradients", p.gradients, MEM_GRADS},
                {"optimizer state", p.optimizer, MEM_OPTIMIZER},
                {"saved activations", p.saved_activations, MEM_ACTIVATIONS}};
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        size_t measured = mem_current(rows[i].cat);
        printf("[Rank %d] memory %s (bytes) | predicted %zu | measured %zu | difference %lld |\n",
               rank, rows[i].name, rows[i].predicted, measured,
               (long long)measured - (long long)rows[i].predicted);
    }
    log_logits(tr, s, rank);
    fflush(stdout);
}

/* Megatron's first-log report (report_theoretical_memory, rank 0) with megadlm's numbers
 * for the model and layout, and Megatron's own beside them when its formula differs
 * (training/megatron_memory.h; `megadlm memory` prints the same lines). */
static void log_theoretical_memory(const trainer *tr) {
    if (parallel_world_rank() != 0) return;
    theoretical_memory m;
    theoretical_memory_compute(tr->a, &m);
    megatron_memory_print_footprints(stdout, tr->a, &m);
    fflush(stdout);
}

/* Pipeline: the activation stores of this stage (--log-memory, after the first iteration):
 * allocated, of which keep everything, the most the schedule held at once, and that in
 * micro-batches' worth of the stage's layers (a store holds one model chunk, 1/v of them),
 * beside the schedule's count min(W + 1, M v) / v (1F1B: min(p - r, M)). */
static void log_pipeline_stores(const trainer *tr) {
    const parallel_state *ps = parallel_get();
    if (ps->pp_size <= 1) return;
    int v = tr->model->num_chunks, M = tr->num_microbatches;
    int W = schedule_num_warmup(ps->pp_size, ps->pp_rank, v, M);
    int in_flight = W + 1 < M * v ? W + 1 : M * v;
    printf("[Rank %d] pipeline stage %d activation stores | allocated %d (%d keep everything) | "
           "at most %d in use | micro-batches' worth %.4f | schedule: %d warm-up forwards, "
           "min(W + 1, M v) / v = %.4f | model chunks %d |\n",
           ps->world_rank, ps->pp_rank, tr->num_stores, tr->num_unchecked,
           schedule_peak_in_flight(), (double)schedule_peak_in_flight() / v, W,
           (double)in_flight / v, v);
    fflush(stdout);
}

/* Payload moved by the tensor-parallel regions in the first iteration (per rank). */
static void log_tp_communication(const trainer *tr) {
    const tp_comm_stats *st = tp_comm_get_stats();
    if (tr->a->tensor_model_parallel_size <= 1) return;
    printf("[Rank %d] tensor-parallel communication in iteration 1 (payload bytes) | all-reduce "
           "%.0f (%lu calls) | all-gather %.0f (%lu calls) | reduce-scatter %.0f (%lu calls) |\n",
           parallel_world_rank(), st->all_reduce_bytes, st->all_reduce_calls,
           st->all_gather_bytes, st->all_gather_calls, st->reduce_scatter_bytes,
           st->reduce_scatter_calls);
    fflush(stdout);
}

/* FSDP optim_grads_params: the parameter shard; the model gathers each unit (embedding, layer,
 * head) when it needs it, the next one prefetched with --overlap-param-gather. */
static void setup_fsdp_params(trainer *tr) {
    gpt_model *m = tr->model;
    int tied = !m->cfg.untie_embeddings_and_output_weights;
    tr->fsdp_params = fsdp_params_create(&m->params, tr->ddp, m->spec.layer_begin,
                                         m->spec.num_layers, tied, tr->a->overlap_param_gather,
                                         gpt_model_set_data_range, m);
    if (tr->fsdp_params->half) /* the 16-bit pieces; the fp32 main ones are the optimizer's */
        tr->dopt->copy_shard = tr->fsdp_params->shard;
    else
        tr->dopt->param_shard = tr->fsdp_params->shard;
    fsdp_params_shard_grads(tr->fsdp_params, tr->fsdp, tr->a->overlap_grad_reduce,
                            gpt_model_set_grad_range);
    m->grads_done = fsdp_params_grads_done;
    m->grads_done_user = tr->fsdp_params;
    m->params_needed = fsdp_params_needed;
    m->params_needed_user = tr->fsdp_params;
    m->params_done = fsdp_params_done;
    m->params_done_user = tr->fsdp_params;
    log_printf("> FSDP optim_grads_params: %zu parameters kept per rank; %d units gathered "
               "when needed%s\n", tr->fsdp_params->shard_numel, tr->fsdp_params->num_units,
               tr->a->overlap_param_gather ? ", the next one prefetched" : "");
}

/* Buckets and, with the flags, the overlap hooks and the distributed optimizer. */
static void setup_data_parallel(trainer *tr) {
    const megadlm_args *a = tr->a;
    gpt_model *m = tr->model;
    ddp_config dc = {.overlap_grad_reduce = a->overlap_grad_reduce,
                     .use_distributed_optimizer = a->use_distributed_optimizer,
                     .overlap_param_gather = a->overlap_param_gather,
                     .bucket_size = a->ddp_bucket_size,
                     .num_instances = a->num_distributed_optimizer_instances};
    tr->ddp = ddp_create(&m->params, &dc);
    if (a->num_distributed_optimizer_instances > 1)
        log_printf("> distributed optimizer: %d instances of %d data-parallel ranks, each a full "
                   "copy of the optimizer state (gradients reduce-scattered within an instance, "
                   "all-reduced across instances)\n",
                   a->num_distributed_optimizer_instances, tr->ddp->dp_size);
    if (a->overlap_grad_reduce) {
        m->grads_done = ddp_grads_done;
        m->grads_done_user = tr->ddp;
    }
    if (a->use_distributed_optimizer) {
        tr->dopt = dist_opt_create(&m->params, tr->ddp, tc_half(&m->cfg));
        if (args_fsdp_shards_grads(a)) {
            tr->fsdp = fsdp_grads_create(&m->params, tr->ddp, gpt_model_set_grad, m);
            tr->dopt->grad_shard = tr->fsdp->grad_shard;
            log_printf("> FSDP %s: gradients reduce-scattered after every micro-batch's "
                       "backward, %zu elements kept per rank\n",
                       a->data_parallel_sharding_strategy, tr->fsdp->shard_numel);
        }
        if (!strcmp(a->data_parallel_sharding_strategy, "optim_grads_params") &&
            args_fsdp_shards_grads(a))
            setup_fsdp_params(tr);
        if (a->overlap_param_gather && !tr->fsdp_params) { /* (FSDP: its own prefetch) */
            m->params_needed = ddp_params_needed;
            m->params_needed_user = tr->ddp;
        }
    }
    log_printf("> data-parallel size %d: %d bucket%s for gradient %s%s\n", parallel_get()->dp_size,
               tr->ddp->num_buckets, tr->ddp->num_buckets == 1 ? "" : "s",
               a->use_distributed_optimizer ? "reduce-scatter" : "all-reduce",
               a->overlap_grad_reduce ? " (overlapped with backward)" : "");
}

/* What the data-parallel reduction did so far (per rank, --log-memory: after the first
 * iteration and at the end): bucket reductions the backward hook started (overlap), those
 * started after backward, those the hook's progress calls saw complete before backward ended;
 * time per iteration in the hook and in the wait after backward (the exposed part). With the
 * distributed optimizer, parameter all-gathers started nonblocking and completed in forward. */
static void log_dp_communication(const trainer *tr) {
    if (!tr->ddp) return;
    const ddp_stats *s = ddp_get_stats(tr->ddp);
    double it = s->iterations ? (double)s->iterations : 1.0;
    printf("[Rank %d] data-parallel communication over %lu iterations | buckets %d | started "
           "during backward %lu | started after backward %lu | completed during backward %lu | "
           "hook %.3f ms/iter | wait after backward %.3f ms/iter |",
           parallel_world_rank(), s->iterations, s->num_buckets, s->started_in_backward,
           s->started_at_finish, s->completed_in_backward, s->hook_seconds * 1e3 / it,
           s->finish_seconds * 1e3 / it);
    if (tr->dopt)
        printf(" parameter all-gathers started %lu | completed in forward %lu |",
               s->gathers_started, s->gathers_completed_in_forward);
    printf("\n");
    if (tr->fsdp_params) {
        const fsdp_param_stats *f = &tr->fsdp_params->stats;
        printf("[Rank %d] FSDP parameter all-gathers | units needed %lu | gathered at need %lu "
               "| prefetched %lu (used %lu) | received %.0f bytes | exposed %.6f s | gathered "
               "at most %zu bytes at once | unit gradients reduce-scattered %lu, at most %zu "
               "bytes at once |\n",
               parallel_world_rank(), f->needed, f->blocking, f->prefetched, f->prefetch_used,
               f->bytes, f->exposed_seconds, f->peak_gathered_bytes, f->reduced,
               f->peak_grad_bytes);
    }
    fflush(stdout);
}

/* Bytes this stage sent to its neighbours in the first iteration (with --log-memory). */
static void log_pipeline_transfers(void) {
    const parallel_state *ps = parallel_get();
    if (ps->pp_size <= 1) return;
    double fwd, bwd;
    p2p_sent_bytes(&fwd, &bwd);
    printf("[Rank %d] pipeline transfers in iteration 1 (bytes sent) | activations %.0f | "
           "gradients %.0f |\n", ps->world_rank, fwd, bwd);
    fflush(stdout);
}

/* Pipeline bubble: the share of training time this stage spent waiting for transfers, beside
 * the ideal share of the iteration: (p - 1) / (m + p - 1) for 1F1B (a bubble of (p - 1)/m of
 * the compute time), (p - 1) / (m v + p - 1) interleaved ((p - 1)/(m v)). */
static void log_pipeline_bubble(const trainer *tr) {
    const parallel_state *ps = parallel_get();
    if (ps->pp_size <= 1 || tr->train_seconds <= 0.0) return;
    double wait = p2p_wait_seconds(), m = tr->num_microbatches, p = ps->pp_size;
    int v = tr->model->num_chunks;
    if (v > 1)
        printf("[Rank %d] pipeline stage %d: waited %.3f s for transfers of %.3f s of training "
               "(%.1f%%; the interleaved bubble (p - 1)/(m v + p - 1) = %.1f%%, v = %d)\n",
               ps->world_rank, ps->pp_rank, wait, tr->train_seconds,
               100.0 * wait / tr->train_seconds, 100.0 * (p - 1) / (m * v + p - 1), v);
    else
        printf("[Rank %d] pipeline stage %d: waited %.3f s for transfers of %.3f s of training "
               "(%.1f%%; 1F1B's bubble (p - 1)/(m + p - 1) = %.1f%%)\n",
               ps->world_rank, ps->pp_rank, wait, tr->train_seconds,
               100.0 * wait / tr->train_seconds, 100.0 * (p - 1) / (m + p - 1));
    fflush(stdout);
}

/* Whether the compute threads flush denormals (core/util/denormals.h), counted in a team of
 * this rank's size as the kernels' own regions run (the log rank's). */
static void log_denormals(int threads) {
    const int flushing = denormals_team_flushing(threads);
    if (!strcmp(denormals_mode_name(), "flush"))
        log_printf("> denormals: flushed to zero (FTZ and DAZ) in %d of %d compute threads "
                   "(%s=keep keeps them)\n", flushing, threads, DENORMALS_ENV);
    else
        log_printf("> denormals: kept (%s=keep) in %d of %d compute threads\n", DENORMALS_ENV,
                   threads - flushing, threads);
}

/* Threads per rank (core/threads.h) and the BLAS kernels, for the whole job: the log rank
 * prints the range over all ranks and says once if any node has more processes than CPUs. */
static void log_threads(void) {
    const thread_plan *tp = threads_plan();
    int lo = tp->threads, hi = tp->threads, over = tp->oversubscribed, env = tp->from_env;
    int sharing = tp->sharing, cpus = tp->cpus;
    if (parallel_get()->mpi) {
        int in[4] = {-lo, hi, over, sharing}, out[4];
        MPI_Allreduce(in, out, 4, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        lo = -out[0], hi = out[1], over = out[2], sharing = out[3];
    }
    char range[32];
    if (lo == hi) snprintf(range, sizeof range, "%d", lo);
    else snprintf(range, sizeof range, "%d to %d", lo, hi);
    if (env)
        log_printf("> threads per rank: %s (OpenMP and OpenBLAS; from OMP_NUM_THREADS)\n", range);
    else if (over)
        log_printf("> threads per rank: %s (OpenMP and OpenBLAS): more processes than CPUs on a "
                   "node (%d processes share %d CPUs), 1 thread each; set OMP_NUM_THREADS to "
                   "choose\n", range, sharing, cpus);
    else
        log_printf("> threads per rank: %s (OpenMP and OpenBLAS; %d CPU%s in this rank's "
                   "affinity mask, shared by %d process%s)\n", range, cpus, cpus == 1 ? "" : "s",
                   sharing, sharing == 1 ? "" : "es");
    log_printf("> BLAS: %s\n", blas_kernels_line());
    log_denormals(tp->threads);
    const char *better = blas_kernels_missed();
    if (better && !getenv("OPENBLAS_CORETYPE"))
        log_printf(" WARNING: OpenBLAS did not recognise this CPU and runs its %s kernels, which "
                   "use no AVX2; the CPU can run %s's (several times faster GEMMs): set "
                   "OPENBLAS_CORETYPE=%s\n", gemm_blas_kernels(), better, better);
}

/* --bf16 / --fp16: the 16-bit GEMM chosen now (serial code, before any parallel region), and
 * what is 16-bit in this run (docs/MEMORY.md). */
static int setup_half(const megadlm_args *a) {
    const half_kind k = a->bf16 ? HALF_BF16 : a->fp16 ? HALF_FP16 : HALF_NONE;
    if (k == HALF_NONE) return 0;
    const char *f = half_kind_name(k);
    char err[256];
    if (gemm_half_init(k, err, sizeof err) != 0) {
        fprintf(stderr, "error: --%s: %s\n", f, err);
        return -1;
    }
    log_printf("> %s: the model's parameters (2 bytes each, a copy rounded from the fp32 main "
               "parameters after every optimizer step; norm, bias and position parameters read "
               "as their %s values widened); GEMM operands of linear_qkv, "
               "linear_proj, linear_fc1, linear_fc2 and the output layer rounded to %s, fp32 "
               "sums; linear_qkv and linear_fc1 outputs, q/k norm and RoPE outputs, attention "
               "scores, probabilities and dropped probabilities and the residual stream rounded "
               "to %s; saved for backward in %s: layer inputs, norm outputs, qkv, attention "
               "probabilities and context, residual after attention, fc1, activation output. "
               "fp32: main parameters, gradients (accumulated and reduced in fp32), Adam "
               "moments, norm statistics, softmax, cross-entropy and the loss\n", f, f, f, f, f);
    log_printf("> %s\n", gemm_half_describe(k));
    p2p_set_half_activations(k);
    if (a->tensor_model_parallel_size > 1 || a->pipeline_model_parallel_size > 1 ||
        a->data_parallel_size > 1) /* docs/ARCHITECTURE.md, "Mixed precision" */
        log_printf("> %s communication: tensor-parallel reductions and data-parallel gradient "
                   "all-reduces (reduce-scatters) in fp32; the distributed optimizer's parameter "
                   "all-gathers in %s; sequence parallelism's all-gathers of GEMM operands in "
                   "%s (exact: their readers round to %s); pipeline transfers: activations "
                   "in %s (%s values), gradients in fp32\n", f, f, f, f, f, f);
    return 0;
}

/* The loss scaler Megatron's get_megatron_optimizer builds: constant with --loss-scale (--fp16
 * or --bf16), dynamic with --fp16 otherwise, none else (the flags are validated). */
static void setup_loss_scaler(trainer *tr) {
    const megadlm_args *a = tr->a;
    if (a->loss_scale > 0.0f) {
        tr->scaler = grad_scaler_constant(a->loss_scale);
        log_printf("> loss scaling: constant %.1f (gradients unscaled before clipping; a step with "
                   "a non-finite gradient is skipped)\n", (double)a->loss_scale);
    } else if (a->fp16) {
        tr->scaler = grad_scaler_dynamic(a->initial_loss_scale, a->min_loss_scale,
                                         (int)a->loss_scale_window, a->hysteresis);
        log_printf("> loss scaling: dynamic from %.1f (min %.1f, x2 after %d iterations without "
                   "overflow, x0.5 after %d overflows; an overflow skips the step)\n",
                   (double)a->initial_loss_scale, (double)a->min_loss_scale,
                   (int)a->loss_scale_window, a->hysteresis);
    } else {
        return;
    }
    tr->scaling = 1;
}

/* --tp-comm-overlap: the overlap engine's progress mode, and what overlaps (the log rank). */
static void setup_tp_comm_overlap(const megadlm_args *a) {
    char err[1024];
    tp_progress_mode mode = strcmp(a->tp_comm_overlap_progress, "thread") ? TP_PROGRESS_TEST
                                                                         : TP_PROGRESS_THREAD;
    if (tp_overlap_init(mode, err, sizeof(err)) != 0)
        die(2, "--tp-comm-overlap: %s", err);
    log_printf("> TP communication overlap: all-gather %s, reduce-scatter %s, %s (linear_qkv "
               "%s, linear_fc1 %s); %d pieces per shard, progress by %s\n",
               a->tp_comm_overlap_ag ? "on" : "off", a->tp_comm_overlap_rs ? "on" : "off",
               a->tp_comm_overlap_rs_dgrad ? "rs-dgrad"
               : a->tp_comm_bulk_dgrad && a->tp_comm_bulk_wgrad ? "bulk dgrad and wgrad"
               : a->tp_comm_bulk_dgrad ? "bulk dgrad"
               : a->tp_comm_bulk_wgrad ? "bulk wgrad" : "no bulk overlap",
               a->tp_comm_overlap_disable_qkv ? "excluded" : "included",
               a->tp_comm_overlap_disable_fc1 ? "excluded" : "included",
               args_sp_pieces(a),
               mode == TP_PROGRESS_THREAD ? "a communication thread" : "tests between GEMM tiles");
}

/* Everything pretrain built, in reverse (parts not built yet are NULL), and the TP overlap
 * engine's summary. */
/* Context parallelism's ring (--cp-comm-type p2p): its transfers and how much of them the
 * attention compute hid (core/context_parallel/cp_ring.h). MEGADLM_CP_RING_BLOCKING=1 runs every
 * transfer blocking before its step's compute: the baseline bench/bench_context_parallel.sh
 * measures the hidden fraction against. */
static void log_cp_ring(const trainer *tr) {
    if (!tr->model) return; /* setup failed before the model existed */
    const transformer_config *c = &tr->model->cfg;
    if (tc_cp(c) <= 1 || !c->cp_ring) return;
    const cp_ring_stats *st = cp_ring_get_stats();
    log_printf("> CP ring (this rank): %lu steps, %.1f MB sent, %.4f s of attention compute with "
               "transfers in flight, %.4f s waiting for transfers after it, %.4f s of blocking "
               "transfers\n",
               st->steps, st->bytes / 1e6, st->compute_s, st->wait_s, st->blocking_s);
}

static void trainer_free(trainer *tr) {
    watchdog_stop();
    monitor_close(&tr->mon); /* the event file flushed, also when the run failed */
    mem_free(tr->sample);
    mem_free(tr->tokens);
    mem_free(tr->labels);
    mem_free(tr->loss_mask);
    mem_free(tr->lm);
    for (int k = 0; k < 3; k++) /* one object may serve several splits */
        if (tr->data[k] && (k == 0 || tr->data[k] != tr->data[k - 1]) &&
            (k < 2 || tr->data[k] != tr->data[0]))
            gpt_data_free(tr->data[k]);
    pipeline_stores_free(tr->pipe); /* NULL when setup failed before they were made */
    p2p_set_half_activations(HALF_NONE);
    if (tr->a->log_memory) log_dp_communication(tr);
    dist_ckpt_pending_discard(tr->pending); /* after an error: joined, not committed */
    tr->pending = NULL;
    dist_opt_free(tr->dopt);
    fsdp_grads_free(tr->fsdp);
    fsdp_params_free(tr->fsdp_params);
    ddp_free(tr->ddp); /* waits for parameter gathers in flight */
    log_cp_ring(tr); /* reads the model's configuration: before it is freed */
    gpt_model_free(tr->model);
    tokenizer_free(tr->tok);
    if (tp_overlap_ready()) {
        const tp_overlap_stats *os = tp_overlap_get_stats();
        log_printf("> TP communication overlapped with GEMMs: %lu ring all-gathers, %lu ring "
                   "reduce-scatters, %lu bulk all-gathers, %lu bulk reduce-scatters\n",
                   os->ring_all_gathers, os->ring_reduce_scatters, os->bulk_all_gathers,
                   os->bulk_reduce_scatters);
    }
    tp_overlap_finalize();
}

/* Megatron's --ckpt-convert-format: the loaded checkpoint written again, into
 * --ckpt-convert-save/FMT, in megadlm's format (the only one it writes: `torch`, which Megatron
 * writes as PyTorch pickles, gets it too, so that `megadlm convert --to hf` and MegaDLMs'
 * .../ckptstep_N/torch layout find a checkpoint there); without training. */
static int convert_checkpoint(trainer *tr) {
    megadlm_args *a = tr->a;
    if (!tr->loaded) {
        fprintf(stderr, "error: --ckpt-convert-format %s: no checkpoint in --load %s to "
                "convert\n", a->ckpt_convert_format, a->load);
        return 1;
    }
    char dir[PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s/%s", a->ckpt_convert_save, a->ckpt_convert_format) >=
        (int)sizeof dir) {
        fprintf(stderr, "error: --ckpt-convert-save %s: path too long\n", a->ckpt_convert_save);
        return 1;
    }
    if (save_to(tr, dir, 0) != 0) return 1;
    log_printf("> converted checkpoint: torch_dist -> %s: iteration %d of %s written to %s in "
               "megadlm's format (safetensors; %s, %s)\n", a->ckpt_convert_format,
               tr->iteration, a->load, dir,
               a->no_save_optim ? "model only, no optimizer state" : "with the optimizer state",
               a->no_save_rng ? "no RNG state" : "with the RNG state");
    return 0;
}

int pretrain(megadlm_args *a) {
    trainer tr = {.a = a, .train_iters = args_train_iters(a)};
    char err[1024];
    int status = 1;
    tokenizer_options topts = {.type = a->tokenizer_type,
                               .vocab_size = a->vocab_size,
                               .vocab_file = a->vocab_file,
                               .merge_file = a->merge_file,
                               .tokenizer_model = a->tokenizer_model};
    tr.tok = tokenizer_create_opts(&topts, err, sizeof(err));
    if (!tr.tok) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    const parallel_state *pst = parallel_get();
    g_log_rank = pst->world_rank == pst->world_size - 1;
    if (g_log_rank) args_print(a, stdout);
    if (monitor_open(&tr.mon, a, g_log_rank, pst->world_rank, err, sizeof err) != 0)
        die(2, "%s", err);
    log_threads();
    const char *ring_blocking = getenv("MEGADLM_CP_RING_BLOCKING"); /* the bench's baseline */
    cp_ring_set_blocking(ring_blocking && !strcmp(ring_blocking, "1"));
    if (a->tp_comm_overlap) setup_tp_comm_overlap(a);
    transformer_config cfg = model_config_from_args(a);
    tr.num_microbatches = a->global_batch_size / (a->micro_batch_size * a->data_parallel_size);
    /* activation stores of the micro-batches (model chunks, interleaved) in flight; with
     * per-micro-batch partial recompute, num_unchecked of them keep everything */
    tr.num_stores = schedule_stores(pst->pp_size, pst->pp_rank, cfg.vp_size, tr.num_microbatches,
                                    a->num_microbatches_with_partial_activation_checkpoints,
                                    &tr.num_unchecked);
    log_printf("building GPT model ...\n");
    tr.model = gpt_model_create(&cfg, a->micro_batch_size,
                                a->use_distributed_optimizer ? GPT_MODEL_TRAINING_SHARDED_OPTIMIZER
                                                             : GPT_MODEL_TRAINING);
    printf(" > number of parameters on (tensor, pipeline) model parallel rank (%d, %d): %zu\n",
           pst->tp_rank, pst->pp_rank, tr.model->params.numel);
    gpt_model_init_params(tr.model, a->seed);
    /* masked diffusion: the head runs its loss-weighted rows in chunks (stores made below hold
     * one chunk of logits) */
    tr.model->logits_in_chunks = difflm_logits_in_chunks(a);
    tr.model->detect_anomaly = debug_detect_anomaly(a);
    tr.model->anomaly_nan_only = a->fp16 || a->loss_scale > 0.0f;
    setup_data_parallel(&tr);
    setup_loss_scaler(&tr); /* before a load, which may restore its state */
    tr.rng_seed = a->seed;
    int loaded = 0;
    if (a->load[0] && tr.fsdp_params) fsdp_params_materialize(tr.fsdp_params);
    if (a->load[0] && (loaded = load(&tr)) != 0) {
        if (loaded == 1) status = 0; /* --exit-on-missing-checkpoint: Megatron's sys.exit() */
        goto done;
    }
    if (a->load[0] && tr.fsdp_params) /* this rank's pieces of what was loaded */
        fsdp_params_dematerialize(tr.fsdp_params, 1);
    if (a->load[0] && tr.dopt && tr.dopt->main) { /* --bf16: each rank loaded its pieces */
        dist_opt_main_to_copy(tr.dopt); /* (FSDP: into its 16-bit shard, gathered per unit) */
        if (!tr.fsdp_params) {
            ddp_start_param_sync(tr.ddp);
            ddp_finish_param_sync(tr.ddp);
        }
    }
    gpt_model_params_to_bf16(tr.model); /* --bf16 / --fp16: from the loaded (or initial) ones */
    if (a->ckpt_convert_format[0]) { /* convert mode: save what was loaded and stop */
        status = convert_checkpoint(&tr);
        goto done;
    }
    if (setup_half(a) != 0) goto done;
    if (build_data(&tr) != 0) goto done;
    setup_optimizer(&tr);
    tr.dp_rank = pst->dp_rank;
    tr.dp_size = pst->dp_size;
    /* per-micro-batch partial recompute: stores below num_unchecked keep everything (1F1B:
     * K of them, micro-batch k takes store k mod stores: Megatron's
     * checkpoint_activations_microbatch = k mod window >= K, window = the stores in flight;
     * interleaved: the schedule takes a store of the right kind for each virtual micro-batch) */
    tr.pipe = pipeline_stores_create(tr.model, tr.num_stores, tr.num_unchecked);
    /* the model's positions: a masked-diffusion batch is padded up to them (difflm.h) */
    size_t N = (size_t)a->micro_batch_size * tr.model->cfg.seq_length;
    tr.sample = mem_alloc(MEM_OTHER, (a->seq_length + 1) * sizeof(int32_t), "sample");
    tr.tokens = mem_alloc(MEM_OTHER, N * sizeof(int32_t), "batch tokens");
    tr.labels = mem_alloc(MEM_OTHER, N * sizeof(int32_t), "batch labels");
    tr.loss_mask = mem_alloc_floats(MEM_OTHER, N, "batch loss mask");
    tr.lm = mem_alloc_floats(MEM_OTHER, a->seq_length, "sequence loss mask");
    tr.difflm = !strcmp(a->model_running_mode, "difflm-noshift");

    if (rerun_setup(&tr.rerun, a->rerun_mode, a->check_for_nan_in_loss_and_grad,
                    a->check_for_spiky_loss, err, sizeof err) != 0) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    if (monitor_start(&tr.mon, g_log_rank, tr.iteration, err, sizeof err) != 0)
        die(2, "%s", err); /* every rank stops: the others would wait for this one */
    debug_wait_for_debugger(a, pst->world_rank);
    /* the other ranks wait for rank 0 here, before their watchdogs start counting */
    if (a->debug && a->turn_on_debugpy && pst->mpi && pst->world_size > 1)
        MPI_Barrier(MPI_COMM_WORLD);
    watchdog_start(a->distributed_timeout_minutes);
    log_printf("training ...\n");
    fflush(stdout);
    double t_log = now_seconds(), loss_acc = 0.0;
    int iters_acc = 0, advanced_acc = 0, skipped_acc = 0, nan_acc = 0;
    int saved_at = -1, memory_reported = 0;
    while (tr.iteration < tr.train_iters) {
        float loss, norm;
        int bad_rank;
        if (finish_async_save(&tr, 0) != 0) goto done;
        double t_step = now_seconds();
        int stepped = train_step(&tr, &loss, &norm, &bad_rank);
        tr.train_seconds += now_seconds() - t_step;
        if (stepped < 0) { /* --rerun-mode validate_results: a persistent error */
            status = RERUN_EXIT_FAILED_VALIDATION;
            goto done;
        }
        if (!stepped && a->check_for_nan_in_loss_and_grad) {
            report_nonfinite(tr.iteration + 1, loss, norm, bad_rank);
            goto done;
        }
        tr.iteration++;
        tr.consumed_train_samples += a->global_batch_size;
        iters_acc++;
        double real_len = tr.difflm ? real_input_length(&tr, (uint32_t)(tr.iteration - 1), 1) : 0;
        if (stepped) {
            loss_acc += loss;
            tr.real_len_acc += real_len;
            advanced_acc++;
            tr.advanced = 1;
        } else { /* Megatron's counts: skipped; nan when the loss is not finite */
            skipped_acc++;
            nan_acc += !isfinite(loss);
        }
        if (a->log_memory && !memory_reported) { /* after the first iteration of this run */
            log_theoretical_memory(&tr);
            mem_report(stdout, pst->world_rank);
            log_saved_activations(&tr);
            log_pipeline_stores(&tr);
            log_tp_communication(&tr);
            log_pipeline_transfers();
            log_dp_communication(&tr);
            memory_reported = 1;
        }
        int log_now = tr.iteration % a->log_interval == 0;
        int tb_now = a->tensorboard_dir[0] && tr.iteration % a->tensorboard_log_interval == 0;
        log_extras extras = {.params_norm = NAN, .num_zeros = -1.0};
        if (log_now || tb_now) extras = compute_extras(&tr, stepped);
        /* Megatron logs the learning rate the next step will use. */
        double next_lr = lr_scheduler_get(&tr.sched, scheduler_samples(&tr));
        if (tb_now) {
            tb_values v = {.loss = loss, .lr = (float)next_lr, .grad_norm = norm, .real_len = real_len,
                           .skipped = skipped_acc};
            tensorboard_iteration(&tr, &v, &extras);
        }
        if (log_now) {
            log_counts c = {.iters = iters_acc, .advanced = advanced_acc,
                            .skipped = skipped_acc, .nan = nan_acc};
            training_log(&tr, now_seconds() - t_log, &c, loss_acc, next_lr, norm, &extras);
            rerun_report(&tr.rerun, tr.iteration);
            t_log = now_seconds();
            loss_acc = 0.0;
            tr.real_len_acc = 0.0;
            iters_acc = advanced_acc = skipped_acc = nan_acc = 0;
        }
        if (a->eval_iters > 0 && tr.iteration % a->eval_interval == 0 &&
            gpt_data_num_samples(tr.data[SPLIT_VALID], SPLIT_VALID) > 0) {
            uint64_t first = (uint64_t)(tr.iteration / a->eval_interval - 1) * a->eval_iters *
                             a->global_batch_size;
            print_eval(&tr, "validation", tr.iteration, evaluate(&tr, SPLIT_VALID, first));
            t_log = now_seconds(); /* evaluation time is not training time */
        }
        /* Megatron: persistent (--save-interval, MegaDLMs' --checkpoint-steps) before
         * non-persistent, one save per iteration */
        if (a->save[0] && ((a->save_interval > 0 && tr.iteration % a->save_interval == 0) ||
                           args_checkpoint_step(a, tr.iteration))) {
            if (save(&tr) != 0) goto done;
            saved_at = tr.iteration;
            t_log = now_seconds();
        } else if (a->save[0] && a->non_persistent_save_interval > 0 &&
                   tr.iteration % a->non_persistent_save_interval == 0) {
            if (save_non_persistent(&tr) != 0) goto done;
            t_log = now_seconds();
        }
        if (a->exit_interval > 0 && tr.iteration % a->exit_interval == 0) {
            /* Megatron's --exit-interval: save (if saving) and stop, skipping final evaluation */
            if (a->save[0] && saved_at != tr.iteration && save(&tr) != 0) goto done;
            if (finish_async_save(&tr, 1) != 0) goto done;
            log_printf("exiting program at iteration %d\n", tr.iteration);
            status = 0;
            goto done;
        }
    }
    log_pipeline_bubble(&tr);
    if (a->save[0] && saved_at != tr.iteration && save(&tr) != 0) goto done;
    if (finish_async_save(&tr, 1) != 0) goto done; /* the job ends with its checkpoint */
    if (a->eval_iters > 0) {
        if (gpt_data_num_samples(tr.data[SPLIT_VALID], SPLIT_VALID) > 0)
            print_eval(&tr, "validation", tr.iteration,
                       evaluate(&tr, SPLIT_VALID,
                                (uint64_t)(tr.iteration / a->eval_interval) * a->eval_iters *
                                    a->global_batch_size));
        if (gpt_data_num_samples(tr.data[SPLIT_TEST], SPLIT_TEST) > 0)
            print_eval(&tr, "test", tr.iteration, evaluate(&tr, SPLIT_TEST, 0));
    }
    status = 0;
done:
    trainer_free(&tr);
    return status;
}

int train_main(int argc, char **argv) {
    /* Every line leaves at once, as Megatron's print_rank_0/print_rank_last (flush=True): under
     * mpirun each rank's stdout is a pipe, and a block-buffered rank would hand the launcher
     * 4 KiB pieces that cut lines in two and interleave with other ranks' lines. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    megadlm_args a;
    args_defaults(&a);
    char err[1024];
    int rc = args_parse(&a, argc, argv, err, sizeof(err));
    if (rc == 1) return 0;
    if (rc == 0) a.world_size = parallel_world_size(); /* train's world is mpirun's */
    /* Megatron's load_args_from_checkpoint comes before validate_args */
    if (rc == 0 && a.use_checkpoint_args && a.load[0] &&
        ckpt_apply_checkpoint_args(&a, parallel_world_rank() == 0, err, sizeof err) != 0)
        rc = -1;
    /* Every rank validates the same arguments, so every rank fails together, each saying why,
     * and all exit cleanly (no rank is left waiting in a collective). */
    if (rc < 0 || args_validate(&a, err, sizeof(err)) != 0 ||
        parallel_setup_groups(a.tensor_model_parallel_size, a.pipeline_model_parallel_size,
                              a.context_parallel_size, err,
                              sizeof(err)) != 0) {
        if (parallel_world_size() > 1)
            fprintf(stderr, "[rank %d] error: %s\n", parallel_world_rank(), err);
        else
            fprintf(stderr, "error: %s\n", err);
        args_free(&a);
        return 2;
    }
    int status = pretrain(&a);
    args_free(&a);
    return status;
}
