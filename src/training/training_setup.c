/* Megatron's setup_model_and_optimizer and what pretrain sets up around it: the model, the
 * data-parallel buckets, the distributed optimizer and FSDP, the loss scaler, the lr schedule,
 * the 16-bit GEMMs, TP communication overlap and the datasets; and the teardown. */
#include "training/training_setup.h"

#include <stdio.h>
#include <string.h>

#include "core/kernels/gemm.h"
#include "core/parallel_state.h"
#include "core/pipeline_parallel/p2p_communication.h"
#include "core/tensor/memory.h"
#include "core/tensor_parallel/comm_overlap.h"
#include "core/util/die.h"
#include "training/checkpointing.h"
#include "training/debug.h"
#include "training/on_the_fly_eval.h"
#include "training/trainer.h"
#include "training/training_log.h"
#include "training/watchdog.h"

lr_decay_style training_lr_decay_style(const megadlm_args *a) {
    switch (ARGS_CHOICE(a, lr_decay_style)) {
    case ARGS_LR_DECAY_CONSTANT: return LR_CONSTANT;
    case ARGS_LR_DECAY_COSINE: return LR_COSINE;
    case ARGS_LR_DECAY_INVERSE_SQUARE_ROOT: return LR_INVERSE_SQRT;
    case ARGS_LR_DECAY_WSD: return LR_WSD;
    default: return LR_LINEAR; /* linear, Megatron's default (validation refuses the rest) */
    }
}

lr_wsd_style training_lr_wsd_style(const megadlm_args *a) {
    switch (ARGS_CHOICE(a, lr_wsd_decay_style)) {
    case ARGS_WSD_DECAY_LINEAR: return WSD_LINEAR;
    case ARGS_WSD_DECAY_COSINE: return WSD_COSINE;
    case ARGS_WSD_DECAY_MINUS_SQRT: return WSD_MINUS_SQRT;
    default: return WSD_EXPONENTIAL; /* exponential, Megatron's default */
    }
}

void setup_optimizer(trainer *tr) {
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
                               .style = training_lr_decay_style(a),
                               .wsd_style = training_lr_wsd_style(a)};
    if (a->train_samples > 0) /* Megatron's update_train_iters says so too */
        print_rank_last("setting training iterations to %d\n", tr->train_iters);
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
    print_rank_last("> FSDP optim_grads_params: %zu parameters kept per rank; %d units gathered "
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
        print_rank_last("> distributed optimizer: %d instances of %d data-parallel ranks, each a full "
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
            print_rank_last("> FSDP %s: gradients reduce-scattered after every micro-batch's "
                       "backward, %zu elements kept per rank\n",
                       a->data_parallel_sharding_strategy, tr->fsdp->shard_numel);
        }
        if (ARGS_CHOICE(a, data_parallel_sharding_strategy) == ARGS_SHARDING_OPTIM_GRADS_PARAMS &&
            args_fsdp_shards_grads(a))
            setup_fsdp_params(tr);
        if (a->overlap_param_gather && !tr->fsdp_params) { /* (FSDP: its own prefetch) */
            m->params_needed = ddp_params_needed;
            m->params_needed_user = tr->ddp;
        }
    }
    print_rank_last("> data-parallel size %d: %d bucket%s for gradient %s%s\n", parallel_get()->dp_size,
               tr->ddp->num_buckets, tr->ddp->num_buckets == 1 ? "" : "s",
               a->use_distributed_optimizer ? "reduce-scatter" : "all-reduce",
               a->overlap_grad_reduce ? " (overlapped with backward)" : "");
}


/* --bf16 / --fp16: the 16-bit GEMM chosen now (serial code, before any parallel region), and
 * what is 16-bit in this run (docs/MEMORY.md). */
int setup_half(const megadlm_args *a) {
    const half_kind k = a->bf16 ? HALF_BF16 : a->fp16 ? HALF_FP16 : HALF_NONE;
    if (k == HALF_NONE) return 0;
    const char *f = half_kind_name(k);
    char err[256];
    if (gemm_half_init(k, err, sizeof err) != 0) {
        fprintf(stderr, "error: --%s: %s\n", f, err);
        return -1;
    }
    print_rank_last("> %s: the model's parameters (2 bytes each, a copy rounded from the fp32 main "
               "parameters after every optimizer step; norm, bias and position parameters read "
               "as their %s values widened); GEMM operands of linear_qkv, "
               "linear_proj, linear_fc1, linear_fc2 and the output layer rounded to %s, fp32 "
               "sums; linear_qkv and linear_fc1 outputs, q/k norm and RoPE outputs, attention "
               "scores, probabilities and dropped probabilities and the residual stream rounded "
               "to %s; saved for backward in %s: layer inputs, norm outputs, qkv, attention "
               "probabilities and context, residual after attention, fc1, activation output. "
               "fp32: main parameters, gradients (accumulated and reduced in fp32), Adam "
               "moments, norm statistics, softmax, cross-entropy and the loss\n", f, f, f, f, f);
    print_rank_last("> %s\n", gemm_half_describe(k));
    p2p_set_half_activations(k);
    if (a->tensor_model_parallel_size > 1 || a->pipeline_model_parallel_size > 1 ||
        a->data_parallel_size > 1) /* docs/architecture/precision.md, "Mixed precision" */
        print_rank_last("> %s communication: tensor-parallel reductions and data-parallel gradient "
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
        print_rank_last("> loss scaling: constant %.1f (gradients unscaled before clipping; a step with "
                   "a non-finite gradient is skipped)\n", (double)a->loss_scale);
    } else if (a->fp16) {
        tr->scaler = grad_scaler_dynamic(a->initial_loss_scale, a->min_loss_scale,
                                         (int)a->loss_scale_window, a->hysteresis);
        print_rank_last("> loss scaling: dynamic from %.1f (min %.1f, x2 after %d iterations without "
                   "overflow, x0.5 after %d overflows; an overflow skips the step)\n",
                   (double)a->initial_loss_scale, (double)a->min_loss_scale,
                   (int)a->loss_scale_window, a->hysteresis);
    } else {
        return;
    }
    tr->scaling = 1;
}

/* --tp-comm-overlap: the overlap engine's progress mode, and what overlaps (the log rank). */
void setup_tp_comm_overlap(const megadlm_args *a) {
    char err[1024];
    tp_progress_mode mode = ARGS_CHOICE(a, tp_comm_overlap_progress) != ARGS_TP_PROGRESS_THREAD
                                ? TP_PROGRESS_TEST
                                : TP_PROGRESS_THREAD;
    if (tp_overlap_init(mode, err, sizeof(err)) != 0)
        die(2, "--tp-comm-overlap: %s", err);
    print_rank_last("> TP communication overlap: all-gather %s, reduce-scatter %s, %s (linear_qkv "
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


/* Megatron's get_model: the provider's model, its parameters initialised from --seed, and the
 * debugging hooks. */
static void get_model(trainer *tr, const transformer_config *cfg) {
    const megadlm_args *a = tr->a;
    const parallel_state *pst = parallel_get();
    tr->model = tr->prov->model_provider(a, cfg);
    printf(" > number of parameters on (tensor, pipeline) model parallel rank (%d, %d): %zu\n",
           pst->tp_rank, pst->pp_rank, tr->model->params.numel);
    gpt_model_init_params(tr->model, a->seed);
    tr->model->detect_anomaly = debug_detect_anomaly(a);
    tr->model->anomaly_nan_only = a->fp16 || a->loss_scale > 0.0f;
}

int setup_model_and_optimizer(trainer *tr, const transformer_config *cfg) {
    const megadlm_args *a = tr->a;
    get_model(tr, cfg);
    setup_data_parallel(tr);
    setup_loss_scaler(tr); /* before a load, which may restore its state */
    tr->rng_seed = a->seed;
    int loaded = 0;
    if (a->load[0] && tr->fsdp_params) fsdp_params_materialize(tr->fsdp_params);
    if (a->load[0] && (loaded = a->moe_use_upcycling ? upcycle_checkpoint(tr)
                                                     : load_checkpoint(tr)) != 0)
        return loaded;
    if (a->load[0] && tr->fsdp_params) /* this rank's pieces of what was loaded */
        fsdp_params_dematerialize(tr->fsdp_params, 1);
    if (a->load[0] && tr->dopt && tr->dopt->main) { /* --bf16: each rank loaded its pieces */
        dist_opt_main_to_copy(tr->dopt); /* (FSDP: into its 16-bit shard, gathered per unit) */
        if (!tr->fsdp_params) {
            ddp_start_param_sync(tr->ddp);
            ddp_finish_param_sync(tr->ddp);
        }
    }
    gpt_model_params_to_bf16(tr->model); /* --bf16 / --fp16: from the loaded (or initial) ones */
    if (a->moe_use_upcycling && save_upcycled_checkpoint(tr) != 0) return -1;
    return 0;
}

/* Megatron's num samples per split: train = iters x gbs (--train-samples when sample-based:
 * get_train_valid_test_num_samples); valid = (iters / eval_interval + 1) x eval_iters x gbs;
 * test = eval_iters x gbs. */
int build_train_valid_test_datasets(trainer *tr) {
    const megadlm_args *a = tr->a;
    uint64_t gbs = a->global_batch_size;
    const uint64_t num_samples[3] = {
        a->train_samples > 0 ? (uint64_t)a->train_samples : (uint64_t)tr->train_iters * gbs,
        (uint64_t)(tr->train_iters / a->eval_interval + 1) * a->eval_iters * gbs,
        (uint64_t)a->eval_iters * gbs};
    print_rank_last("> building train, validation, and test datasets ...\n");
    if (tr->prov->datasets_provider(a, tr->tok, num_samples, tr->data) != 0) return -1;
    print_rank_last(" > datasets target sizes (minimum size):\n    train:      %llu\n"
                    "    validation: %llu\n    test:       %llu\n",
                    (unsigned long long)num_samples[0], (unsigned long long)num_samples[1],
                    (unsigned long long)num_samples[2]);
    if (gpt_data_num_samples(tr->data[SPLIT_TRAIN], SPLIT_TRAIN) == 0) {
        fprintf(stderr, "error: --split %s leaves no training samples\n", a->split);
        return -1;
    }
    return 0;
}

/* Everything pretrain built, in reverse (parts not built yet are NULL), and the TP overlap
 * engine's summary. */
void trainer_free(trainer *tr) {
    watchdog_stop();
    monitor_close(&tr->mon); /* the event file flushed, also when the run failed */
    if (tr->batch) tr->prov->batch_free(tr->batch);
    for (int k = 0; k < 3; k++) /* one object may serve several splits */
        if (tr->data[k] && (k == 0 || tr->data[k] != tr->data[k - 1]) &&
            (k < 2 || tr->data[k] != tr->data[0]))
            gpt_data_free(tr->data[k]);
    on_the_fly_eval_free(tr->otf); /* (its store is the model's: before the model) */
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
    log_moe_a2a(tr);
    gpt_model_free(tr->model);
    tokenizer_free(tr->tok);
    if (tp_overlap_ready()) {
        const tp_overlap_stats *os = tp_overlap_get_stats();
        print_rank_last("> TP communication overlapped with GEMMs: %lu ring all-gathers, %lu ring "
                   "reduce-scatters, %lu bulk all-gathers, %lu bulk reduce-scatters\n",
                   os->ring_all_gathers, os->ring_reduce_scatters, os->bulk_all_gathers,
                   os->bulk_reduce_scatters);
    }
    tp_overlap_finalize();
}

