/* Megatron's training.py: pretrain (setup, train, the final evaluation), train (the loop of
 * iterations with the log, evaluations, saves and exits), train_step (forward and backward over
 * the micro-batches, gradient reductions, clipping, the optimizer) and evaluate. The model
 * family's parts come from pretrain_providers (training.h). */
#include "training/training.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context_parallel/cp_ring.h"
#include "core/distributed/data_parallel.h"
#include "core/distributed/finalize_model_grads.h"
#include "core/optimizer/clip_grads.h"
#include "core/parallel_state.h"
#include "core/tensor_parallel/mappings.h"
#include "core/util/die.h"
#include "training/debug.h"
#include "training/model_provider.h"
#include "training/on_the_fly_eval.h"
#include "training/checkpointing.h"
#include "training/trainer.h"
#include "training/training_log.h"
#include "training/training_setup.h"
#include "training/watchdog.h"

/* The schedules' forward_step / backward_step (pipeline_parallel/schedules.h) of one global
 * batch; the forward is the provider's (training.h's forward_step_args). */
typedef struct {
    trainer *tr;
    int split;
    uint64_t first; /* first sample of this global batch */
    int training;
} step_ctx;

/* d(objective)/d(loss) of a micro-batch: Megatron's loss / num_microbatches, times the loss
 * scale (schedules.py's grad_scale_func) when one runs. The same within an iteration: the
 * scaler moves after it, so a masked-diffusion forward, which runs the head's backward, uses
 * the seed its backward is given. */
static float grad_seed(const trainer *tr) {
    return tr->scaling ? tr->scaler.scale / tr->num_microbatches : 1.0f / tr->num_microbatches;
}

/* The schedule's forward_step: micro-batch k of this DP rank, by the provider's forward step. */
static float forward_step(void *user, int k, activation_store *store) {
    watchdog_progress("running a forward step");
    step_ctx *sc = user;
    trainer *tr = sc->tr;
    const megadlm_args *a = tr->a;
    uint32_t global_mb = (uint32_t)(k * tr->dp_size + tr->dp_rank);
    forward_step_args s = {.a = a, .model = tr->model, .batch = tr->batch,
                           .data = tr->data[sc->split], .split = sc->split,
                           .first = sc->first + (uint64_t)global_mb * a->micro_batch_size,
                           .iteration = (uint32_t)tr->iteration, .global_microbatch = global_mb,
                           .training = sc->training, .seed = tr->rng_seed,
                           .grad_seed = sc->training ? grad_seed(tr) : 0.0f};
    return tr->prov->forward_step(&s, store);
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
                 "--detect-anomaly: iteration %d, micro-batch %d of data-parallel rank %d",
                 tr->iteration + 1, k, tr->dp_rank);
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
        print_rank_last("Unexpected result at iteration #%d (lm loss %g, grad norm %g; "
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
        optimizer_step(ps, &tr->oc, lr, tr->optimizer_steps, tc_half(&tr->model->cfg));
    }
    /* --bf16 / --fp16: the updated main parameters (the distributed optimizer rounded its
     * pieces and gathered the copy; with --overlap-param-gather the gather is in flight and
     * the next forward widens each range as it completes: gpt_model.h's params_needed) */
    if (tr->fsdp_params) /* (FSDP widens each unit as it is gathered) */
        return 1;
    if (tr->dopt && tr->a->overlap_param_gather)
        gpt_model_params_gathering(tr->model);
    else /* the 16-bit copy is rounded (by AdamW's pass, or the distributed optimizer's pieces
          * gathered): the tensors the model reads widened from it */
        gpt_model_params_widen(tr->model, 0, ps->numel);
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


/* What train returns when every iteration ran: pretrain evaluates (any other value is the exit
 * status). */
#define TRAIN_COMPLETED (-1)

/* Megatron's train: from the loaded iteration to --train-iters, each one logged
 * (training_log), evaluated at --eval-interval, saved at the save intervals; --exit-interval
 * stops early. The final save. TRAIN_COMPLETED, or the exit status. */
static int train(trainer *tr) {
    const megadlm_args *a = tr->a;
    log_totals totals = {.t_log = now_seconds()};
    int saved_at = -1;
    while (tr->iteration < tr->train_iters) {
        float loss, norm;
        int bad_rank;
        if (finalize_async_save(tr, 0) != 0) return 1;
        double t_step = now_seconds();
        int stepped = train_step(tr, &loss, &norm, &bad_rank);
        tr->train_seconds += now_seconds() - t_step;
        if (stepped < 0) /* --rerun-mode validate_results: a persistent error */
            return RERUN_EXIT_FAILED_VALIDATION;
        if (!stepped && a->check_for_nan_in_loss_and_grad) {
            report_nonfinite(tr->iteration + 1, loss, norm, bad_rank);
            return 1;
        }
        tr->iteration++;
        tr->consumed_train_samples += a->global_batch_size;
        training_log(tr, &totals, loss, norm, stepped);
        if (a->eval_iters > 0 && tr->iteration % a->eval_interval == 0 &&
            gpt_data_num_samples(tr->data[SPLIT_VALID], SPLIT_VALID) > 0) {
            uint64_t first = (uint64_t)(tr->iteration / a->eval_interval - 1) * a->eval_iters *
                             a->global_batch_size;
            print_eval(tr, "validation", tr->iteration, evaluate(tr, SPLIT_VALID, first));
            totals.t_log = now_seconds(); /* evaluation time is not training time */
        }
        if (tr->otf && tr->iteration % a->eval_interval == 0) {
            on_the_fly_eval_run(tr->otf, tr);
            totals.t_log = now_seconds();
        }
        /* Megatron: persistent (--save-interval, MegaDLMs' --checkpoint-steps) before
         * non-persistent, one save per iteration */
        if (a->save[0] && ((a->save_interval > 0 && tr->iteration % a->save_interval == 0) ||
                           args_checkpoint_step(a, tr->iteration))) {
            if (save_checkpoint(tr) != 0) return 1;
            saved_at = tr->iteration;
            totals.t_log = now_seconds();
        } else if (a->save[0] && a->non_persistent_save_interval > 0 &&
                   tr->iteration % a->non_persistent_save_interval == 0) {
            if (save_checkpoint_non_persistent(tr) != 0) return 1;
            totals.t_log = now_seconds();
        }
        if (a->exit_interval > 0 && tr->iteration % a->exit_interval == 0) {
            /* Megatron's --exit-interval: save (if saving) and stop, skipping final evaluation */
            if (a->save[0] && saved_at != tr->iteration && save_checkpoint(tr) != 0) return 1;
            if (finalize_async_save(tr, 1) != 0) return 1;
            print_rank_last("exiting program at iteration %d\n", tr->iteration);
            return 0;
        }
    }
    log_pipeline_bubble(tr);
    if (a->save[0] && saved_at != tr->iteration && save_checkpoint(tr) != 0) return 1;
    if (finalize_async_save(tr, 1) != 0) return 1; /* the job ends with its checkpoint */
    return TRAIN_COMPLETED;
}

/* After training: Megatron's evaluation of the validation split (the samples after the last
 * in-loop evaluation's) and of the test split. */
static void evaluate_final(trainer *tr) {
    const megadlm_args *a = tr->a;
    if (a->eval_iters <= 0) return;
    if (gpt_data_num_samples(tr->data[SPLIT_VALID], SPLIT_VALID) > 0)
        print_eval(tr, "validation", tr->iteration,
                   evaluate(tr, SPLIT_VALID,
                            (uint64_t)(tr->iteration / a->eval_interval) * a->eval_iters *
                                a->global_batch_size));
    if (gpt_data_num_samples(tr->data[SPLIT_TEST], SPLIT_TEST) > 0)
        print_eval(tr, "test", tr->iteration, evaluate(tr, SPLIT_TEST, 0));
}

/* --rerun-mode's choice as the rerun state machine's mode (report_determinism_stats is
 * Megatron's RerunMode name of report_stats). */
static rerun_mode rerun_mode_of(const megadlm_args *a) {
    switch (ARGS_CHOICE(a, rerun_mode)) {
    case ARGS_RERUN_VALIDATE_RESULTS: return RERUN_VALIDATE_RESULTS;
    case ARGS_RERUN_REPORT_STATS:
    case ARGS_RERUN_REPORT_DETERMINISM_STATS: return RERUN_REPORT_STATS;
    default: return RERUN_DISABLED;
    }
}

int pretrain(megadlm_args *a, const pretrain_providers *prov) {
    trainer tr = {.a = a, .prov = prov, .train_iters = args_train_iters(a)};
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
    print_rank_last_set(pst->world_rank == pst->world_size - 1);
    if (print_rank_last_on()) args_print(a, stdout);
    if (monitor_open(&tr.mon, a, print_rank_last_on(), pst->world_rank, err, sizeof err) != 0)
        die(2, "%s", err);
    log_threads();
    const char *ring_blocking = getenv("MEGADLM_CP_RING_BLOCKING"); /* the bench's baseline */
    cp_ring_set_blocking(ring_blocking && !strcmp(ring_blocking, "1"));
    if (a->tp_comm_overlap) setup_tp_comm_overlap(a);
    transformer_config cfg = model_config_from_args(a);
    tr.num_microbatches = args_num_microbatches(a);
    /* activation stores of the micro-batches (model chunks, interleaved) in flight; with
     * per-micro-batch partial recompute, num_unchecked of them keep everything */
    tr.num_stores = schedule_stores(pst->pp_size, pst->pp_rank, cfg.vp_size, tr.num_microbatches,
                                    a->num_microbatches_with_partial_activation_checkpoints,
                                    &tr.num_unchecked);
    int loaded = setup_model_and_optimizer(&tr, &cfg);
    if (loaded != 0) {
        if (loaded == 1) status = 0; /* --exit-on-missing-checkpoint: Megatron's sys.exit() */
        goto done;
    }
    if (a->ckpt_convert_format[0]) { /* convert mode: save what was loaded and stop */
        status = convert_checkpoint(&tr);
        goto done;
    }
    if (setup_half(a) != 0) goto done;
    if (build_train_valid_test_datasets(&tr) != 0) goto done;
    setup_optimizer(&tr);
    tr.dp_rank = pst->dp_rank;
    tr.dp_size = pst->dp_size;
    /* per-micro-batch partial recompute: stores below num_unchecked keep everything (1F1B:
     * K of them, micro-batch k takes store k mod stores: Megatron's
     * checkpoint_activations_microbatch = k mod window >= K, window = the stores in flight;
     * interleaved: the schedule takes a store of the right kind for each virtual micro-batch) */
    tr.pipe = pipeline_stores_create(tr.model, tr.num_stores, tr.num_unchecked);
    tr.batch = prov->batch_create(a, tr.tok, tr.model);
    tr.difflm = ARGS_CHOICE(a, model_running_mode) == ARGS_MODE_DIFFLM_NOSHIFT;
    int otf_failed;
    tr.otf = on_the_fly_eval_create(&tr, &otf_failed, err, sizeof err);
    if (otf_failed) { /* every rank reads the same file: every rank stops here */
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }

    if (rerun_setup(&tr.rerun, rerun_mode_of(a), a->check_for_nan_in_loss_and_grad,
                    a->check_for_spiky_loss, err, sizeof err) != 0) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    if (monitor_start(&tr.mon, print_rank_last_on(), tr.iteration, err, sizeof err) != 0)
        die(2, "%s", err); /* every rank stops: the others would wait for this one */
    debug_wait_for_debugger(a, pst->world_rank);
    /* the other ranks wait for rank 0 here, before their watchdogs start counting */
    if (a->debug && a->turn_on_debugpy && pst->mpi && pst->world_size > 1)
        MPI_Barrier(MPI_COMM_WORLD);
    watchdog_start(a->distributed_timeout_minutes);
    print_rank_last("training ...\n");
    fflush(stdout);
    status = train(&tr);
    if (status == TRAIN_COMPLETED) {
        evaluate_final(&tr);
        status = 0;
    }
done:
    trainer_free(&tr);
    return status;
}
