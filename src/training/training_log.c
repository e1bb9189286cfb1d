/* Megatron's training_log and the reports around it: the log line, TensorBoard's scalars,
 * evaluate_and_print_results' lines, the --log-memory reports (theoretical against measured
 * memory, pipeline stores and transfers, TP and DP communication), threads and kernels, and
 * print_rank_last. */
#include "training/training_log.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/context_parallel/cp_ring.h"
#include "core/kernels/blas_kernels.h"
#include "core/kernels/gemm.h"
#include "core/parallel_state.h"
#include "core/pipeline_parallel/p2p_communication.h"
#include "core/tensor/memory.h"
#include "core/tensor_parallel/mappings.h"
#include "core/util/alloc.h"
#include "core/transformer/moe/token_dispatcher.h"
#include "core/threads.h"
#include "core/transformer/activation_memory.h"
#include "core/util/denormals.h"
#include "training/difflm.h"
#include "training/log_stats.h"
#include "training/megatron_memory.h"
#include "training/model_provider.h"
#include "training/theoretical_memory.h"
#include "training/trainer.h"

static int g_log_rank = 1;

void print_rank_last_set(int on) { g_log_rank = on; }

int print_rank_last_on(void) { return g_log_rank; }

void print_rank_last(const char *fmt, ...) {
    if (!g_log_rank) return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
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

void print_eval(trainer *tr, const char *what, int iteration, float loss) {
    char line[512];
    int n = snprintf(line, sizeof(line), " %s loss at iteration %d | ", what, iteration);
    eval_key(tr, line, sizeof line, &n, "lm loss", loss);
    if (tr->difflm) eval_key(tr, line, sizeof line, &n, "real input length",
                             real_input_length(tr, 0, 0));
    char dashes[520]; /* one longer than the line, as Megatron's */
    memset(dashes, '-', n + 1);
    dashes[n + 1] = '\0';
    print_rank_last("%s\n%s\n%s\n", dashes, line, dashes);
    monitor_flush(&tr->mon);
    fflush(stdout);
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

/* Megatron's track_moe_metrics, every iteration (collective over the pipeline): the per-layer
 * sums of the micro-batches' router values, summed over the pipeline stages (each holds its
 * layers), times 1 / micro-batches, their mean over all layers (dense ones count 0) added to
 * the interval's totals and written to TensorBoard (--moe-per-layer-logging: each layer's
 * too, as moe/<name>_layer_<i>); then cleared. */
static void moe_metrics(trainer *tr, log_totals *t) {
    moe_tracker *mt = tr->model->moe_tracker;
    if (!mt) return;
    const int L = mt->num_layers;
    /* the values and which were recorded (a stage without MoE layers records nothing), summed
     * over the pipeline in one collective */
    const size_t nv = (size_t)MOE_LOG_COUNT * L;
    double *sums = xmalloc((nv + MOE_LOG_COUNT) * sizeof(double), "moe metrics");
    memcpy(sums, mt->values, nv * sizeof(double));
    for (int v = 0; v < MOE_LOG_COUNT; v++) sums[nv + v] = mt->recorded[v];
    parallel_sum_doubles(PARALLEL_GROUP_PP, sums, nv + MOE_LOG_COUNT);
    memcpy(mt->values, sums, nv * sizeof(double));
    const double *seen = sums + nv;
    /* Megatron's reduce_group of the balancing loss (TP x CP): the ranks' partial losses (their
     * token shards) add up */
    double *lb = &mt->values[(size_t)MOE_LOG_LOAD_BALANCING * L];
    if (tc_sp(&tr->model->cfg)) tp_all_reduce_sum_doubles(lb, (size_t)L);
    if (tc_cp(&tr->model->cfg) > 1) parallel_sum_doubles(PARALLEL_GROUP_CP, lb, (size_t)L);
    const double scale = 1.0 / tr->num_microbatches;
    for (int v = 0; v < MOE_LOG_COUNT; v++) {
        if (seen[v] == 0.0) continue;
        const double *x = mt->values + (size_t)v * L;
        double mean = 0.0;
        for (int l = 0; l < L; l++) mean += x[l] * scale;
        mean /= L;
        t->moe[v] += mean;
        t->moe_seen[v] = 1;
        if (!tr->a->tensorboard_dir[0]) continue;
        const char *name = moe_log_name((moe_log_value)v);
        monitor_scalar(&tr->mon, name, mean, tr->iteration);
        for (int l = 0; tr->a->moe_per_layer_logging && l < L; l++) {
            char tag[128];
            snprintf(tag, sizeof tag, "moe/%s_layer_%d", name, l);
            monitor_scalar(&tr->mon, tag, x[l] * scale, tr->iteration);
        }
    }
    moe_tracker_clear(mt);
    free(sums);
}

/* The interval's MoE fields of the log line (Megatron: each total over the advanced
 * iterations, shown when positive), then reset. */
static void moe_fields(log_totals *t, int advanced, char *out, size_t len) {
    size_t k = 0;
    out[0] = '\0';
    for (int v = 0; v < MOE_LOG_COUNT && k < len; v++) {
        double avg = t->moe[v] / (advanced > 1 ? advanced : 1);
        if (t->moe_seen[v] && avg > 0.0)
            k += (size_t)snprintf(out + k, len - k, " %s: %.6E |", moe_log_name((moe_log_value)v), avg);
        t->moe[v] = 0.0;
    }
}

/* The log line of the interval that ends now. */
static void log_line(trainer *tr, double elapsed_s, const log_counts *c, double loss_sum,
                     double lr, float grad_norm, const log_extras *x, const char *moe) {
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
    print_rank_last(" [%s] iteration %8d/%8d | consumed samples: %12llu | elapsed time per iteration (ms): "
           "%.1f |%s learning rate: %.6E | global batch "
           "size: %5d |%s%s loss scale: %.1f |%s%s%s number of skipped "
           "iterations: %3d | number of nan iterations: %3d |\n",
           when, tr->iteration, tr->train_iters, (unsigned long long)tr->consumed_train_samples,
           per_iter * 1000.0, thr, lr, a->global_batch_size, loss, moe,
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
void report_nonfinite(int iteration, float loss, float norm, int first_rank) {
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

/* MoE layers: what a training forward kept for its backward (allocated per forward: its rows
 * depend on the routing), the most measured so far beside the balanced routing's count and the
 * bound (moe_layer_saved_bytes; docs/MOE.md, "Memory"). */
static void log_moe_saved(const gpt_model *m, int B, int T, int rank) {
    if (!m->moe_tracker) return;
    for (int j = 0; j < m->num_chunks; j++)
        for (int l = 0; l < m->block.num_layers; l++) {
            int g = tc_chunk_layer_offset(&m->cfg, j) + l;
            if (!tc_moe_layer(&m->cfg, g)) continue;
            printf("[Rank %d] moe layer %d kept per micro-batch (bytes) | measured %zu | "
                   "balanced %zu | bound %zu |\n", rank, g, m->moe_tracker->saved_bytes[g],
                   moe_layer_saved_bytes(&m->cfg, B, T, moe_rows_balanced(&m->cfg, B, T)),
                   moe_layer_saved_bytes(&m->cfg, B, T, moe_rows_bound(&m->cfg, B, T)));
        }
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
    log_moe_saved(m, B, T, rank);
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


/* What the data-parallel reduction did so far (per rank, --log-memory: after the first
 * iteration and at the end): bucket reductions the backward hook started (overlap), those
 * started after backward, those the hook's progress calls saw complete before backward ended;
 * time per iteration in the hook and in the wait after backward (the exposed part). With the
 * distributed optimizer, parameter all-gathers started nonblocking and completed in forward. */
void log_dp_communication(const trainer *tr) {
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
void log_pipeline_bubble(const trainer *tr) {
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
        print_rank_last("> denormals: flushed to zero (FTZ and DAZ) in %d of %d compute threads "
                   "(%s=keep keeps them)\n", flushing, threads, DENORMALS_ENV);
    else
        print_rank_last("> denormals: kept (%s=keep) in %d of %d compute threads\n", DENORMALS_ENV,
                   threads - flushing, threads);
}

/* Threads per rank (core/threads.h) and the BLAS kernels, for the whole job: the log rank
 * prints the range over all ranks and says once if any node has more processes than CPUs. */
void log_threads(void) {
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
        print_rank_last("> threads per rank: %s (OpenMP and OpenBLAS; from OMP_NUM_THREADS)\n", range);
    else if (over)
        print_rank_last("> threads per rank: %s (OpenMP and OpenBLAS): more processes than CPUs on a "
                   "node (%d processes share %d CPUs), 1 thread each; set OMP_NUM_THREADS to "
                   "choose\n", range, sharing, cpus);
    else
        print_rank_last("> threads per rank: %s (OpenMP and OpenBLAS; %d CPU%s in this rank's "
                   "affinity mask, shared by %d process%s)\n", range, cpus, cpus == 1 ? "" : "s",
                   sharing, sharing == 1 ? "" : "es");
    print_rank_last("> BLAS: %s\n", blas_kernels_line());
    log_denormals(tp->threads);
    const char *better = blas_kernels_missed();
    if (better && !getenv("OPENBLAS_CORETYPE"))
        print_rank_last(" WARNING: OpenBLAS did not recognise this CPU and runs its %s kernels, which "
                   "use no AVX2; the CPU can run %s's (several times faster GEMMs): set "
                   "OPENBLAS_CORETYPE=%s\n", gemm_blas_kernels(), better, better);
}


/* Context parallelism's ring (--cp-comm-type p2p): its transfers and how much of them the
 * attention compute hid (core/context_parallel/cp_ring.h). MEGADLM_CP_RING_BLOCKING=1 runs every
 * transfer blocking before its step's compute: the baseline bench/bench_context_parallel.sh
 * measures the hidden fraction against. */
void log_moe_a2a(const trainer *tr) {
    if (!tr->model || !tc_moe(&tr->model->cfg) || tc_ep(&tr->model->cfg) <= 1) return;
    const moe_a2a_stats *st = moe_a2a_get_stats();
    if (!st->exchanges) return;
    print_rank_last("> MoE all-to-all (this rank): %lu exchanges, %.4f s blocking, %.4f s of "
                    "shared-expert compute with exchanges in flight, %.4f s waiting for them "
                    "after it\n",
                    st->exchanges, st->blocking_s, st->overlapped_s, st->wait_s);
}

void log_cp_ring(const trainer *tr) {
    if (!tr->model) return; /* setup failed before the model existed */
    const transformer_config *c = &tr->model->cfg;
    if (tc_cp(c) <= 1 || !c->cp_ring) return;
    const cp_ring_stats *st = cp_ring_get_stats();
    print_rank_last("> CP ring (this rank): %lu steps, %.1f MB sent, %.4f s of attention compute with "
               "transfers in flight, %.4f s waiting for transfers after it, %.4f s of blocking "
               "transfers\n",
               st->steps, st->bytes / 1e6, st->compute_s, st->wait_s, st->blocking_s);
}


/* --log-memory, after the first iteration of this run: the theoretical and measured memory,
 * the pipeline's stores and transfers, the communication of TP and DP. */
static void report_memory(const trainer *tr) {
    log_theoretical_memory(tr);
    mem_report(stdout, parallel_world_rank());
    log_saved_activations(tr);
    log_pipeline_stores(tr);
    log_tp_communication(tr);
    log_pipeline_transfers();
    log_dp_communication(tr);
}

void training_log(trainer *tr, log_totals *t, float loss, float norm, int stepped) {
    const megadlm_args *a = tr->a;
    t->iters++;
    double real_len = tr->difflm ? real_input_length(tr, (uint32_t)(tr->iteration - 1), 1) : 0;
    if (stepped) {
        t->loss += loss;
        tr->real_len_acc += real_len;
        t->advanced++;
        tr->advanced = 1;
    } else { /* Megatron's counts: skipped; nan when the loss is not finite */
        t->skipped++;
        t->nan += !isfinite(loss);
    }
    moe_metrics(tr, t);
    if (a->log_memory && !t->memory_reported) {
        report_memory(tr);
        t->memory_reported = 1;
    }
    int log_now = tr->iteration % a->log_interval == 0;
    int tb_now = a->tensorboard_dir[0] && tr->iteration % a->tensorboard_log_interval == 0;
    log_extras extras = {.params_norm = NAN, .num_zeros = -1.0};
    if (log_now || tb_now) extras = compute_extras(tr, stepped);
    /* Megatron logs the learning rate the next step will use. */
    double next_lr = lr_scheduler_get(&tr->sched, scheduler_samples(tr));
    if (tb_now) {
        tb_values v = {.loss = loss, .lr = (float)next_lr, .grad_norm = norm,
                       .real_len = real_len, .skipped = t->skipped};
        tensorboard_iteration(tr, &v, &extras);
    }
    if (log_now) {
        log_counts c = {.iters = t->iters, .advanced = t->advanced, .skipped = t->skipped,
                        .nan = t->nan};
        char moe[512];
        moe_fields(t, t->advanced, moe, sizeof moe);
        log_line(tr, now_seconds() - t->t_log, &c, t->loss, next_lr, norm, &extras, moe);
        rerun_report(&tr->rerun, tr->iteration);
        t->t_log = now_seconds();
        t->loss = 0.0;
        tr->real_len_acc = 0.0;
        t->iters = t->advanced = t->skipped = t->nan = 0;
    }
}
