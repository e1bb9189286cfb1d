/* `megadlm plan <train's model and batch flags> --world-size N --device D [--memory-per-rank
 * SIZE] [--memory-reserve X] [--top K] [--all] [--json]`: the layouts that fit a memory budget,
 * fastest first. Every candidate is a line of train flags put through the same args_parse and
 * args_validate as `megadlm train` (a layout train would refuse is never listed); its memory is
 * `megadlm memory`'s figure and its time the cost model of training/plan_cost.c (docs/PLAN.md).
 * A layout flag the user gives fixes that dimension; the others are searched. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/util/alloc.h"
#include "core/parallel_state.h"
#include "tools/json_fields.h"
#include "tools/tools.h"
#include "training/arguments.h"
#include "training/plan_cost.h"
#include "core/util/parse.h"
#include "training/plan_device.h"

#define MAX_WORDS 512
#define CAND_WORDS 32 /* the most searched words of one candidate: 29 */

/* ---- plan's own flags ---- */

typedef struct {
    const char *device, *device_file, *device_cache;
    const char *memory_per_rank, *memory_reserve;
    int json, all, fp32, calibrate, top;
    const char *account; /* NULL: the device's */
} plan_opts;

static int parse_size(const char *s, double *out) {
    char *end;
    double x = strtod(s, &end);
    if (end == s || !isfinite(x) || x <= 0.0) return -1;
    static const struct {
        const char *unit;
        double scale;
    } U[] = {{"", 1.0},         {"B", 1.0},         {"KB", 1e3},          {"MB", 1e6},
             {"GB", 1e9},       {"TB", 1e12},       {"KiB", 1024.0},      {"MiB", 1048576.0},
             {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
    for (size_t i = 0; i < sizeof U / sizeof U[0]; i++)
        if (!strcmp(end, U[i].unit)) {
            *out = x * U[i].scale;
            return 0;
        }
    return -1;
}

static void print_plan_help(void) {
    printf("\n`megadlm plan` takes train's model and batch flags (--train-iters, --lr and the data "
           "source may be\nleft out) and lists the layouts that fit, fastest first "
           "(docs/PLAN.md). A layout flag given\n(--tensor-model-parallel-size, "
           "--pipeline-model-parallel-size, --virtual-pipeline-model-parallel-size,\n"
           "--sequence-parallel, --tp-comm-overlap, the --recompute-* flags, --micro-batch-size, "
           "--use-distributed-optimizer,\n--overlap-grad-reduce, --bf16/--fp16) fixes that "
           "dimension; the others are searched.\n");
    printf("(--context-parallel-size and --cp-comm-type fix context parallelism likewise; with "
           "--num-experts,\n--expert-model-parallel-size and --moe-token-dispatcher-type fix expert "
           "parallelism.)\n");
    printf("  %-44s %s\n", "--world-size N", "Ranks to plan for (required).");
    printf("  %-44s %s\n", "--device NAME",
           "A preset (A100-80GB, H100-80GB) or this-cpu (measured once, then read back).");
    printf("  %-44s %s\n", "--device-file F", "A device description in JSON (docs/PLAN.md).");
    printf("  %-44s %s\n", "--device-cache F",
           "this-cpu's saved calibration [default: $XDG_CACHE_HOME/megadlm/device-this-cpu.json].");
    printf("  %-44s %s\n", "--calibrate", "this-cpu: measure again (and save) even when saved.");
    printf("  %-44s %s\n", "--memory-per-rank SIZE",
           "Memory of one rank, e.g. 80GB, 80GiB [default: the device's].");
    printf("  %-44s %s\n", "--memory-reserve X",
           "Kept free for fragmentation and workspace: a share (10%) or a size (4GiB) [default: 10%].");
    printf("  %-44s %s\n", "--memory-account megatron|megadlm",
           "Memory figure: Megatron's theoretical report or megadlm train's bytes [default: the device's].");
    printf("  %-44s %s\n", "--fp32", "Plan fp32 only (default: fp32 and --bf16 unless --bf16/--fp16 is given).");
    printf("  %-44s %s\n", "--top K", "Print the K fastest [default: 10; 0: all].");
    printf("  %-44s %s\n", "--all", "Also list the configurations that do not fit (after those that do).");
    printf("  %-44s %s\n", "--json", "One JSON object instead of the table.");
}

/* Takes plan's flags out of argv into o; the rest (train's flags) go to words. */
static int split_args(int argc, char **argv, plan_opts *o, char **words, int *nwords, char *err,
                      size_t errlen) {
    static const char *const WITH_VALUE[] = {"--device", "--device-file", "--device-cache",
                                             "--memory-per-rank", "--memory-reserve", "--top",
                                             "--memory-account", NULL};
    *nwords = 0;
    words[(*nwords)++] = "plan";
    o->top = 10;
    o->memory_reserve = "10%";
    for (int i = 1; i < argc; i++) {
        const char *w = argv[i];
        if (!strcmp(w, "--json")) { o->json = 1; continue; }
        if (!strcmp(w, "--all")) { o->all = 1; continue; }
        if (!strcmp(w, "--fp32")) { o->fp32 = 1; continue; }
        if (!strcmp(w, "--calibrate")) { o->calibrate = 1; continue; }
        int k = -1;
        const char *inline_value = NULL; /* --flag=value */
        for (int j = 0; WITH_VALUE[j]; j++) {
            size_t len = strlen(WITH_VALUE[j]);
            if (!strncmp(w, WITH_VALUE[j], len) && (w[len] == 0 || w[len] == '=')) {
                k = j;
                if (w[len] == '=') inline_value = w + len + 1;
            }
        }
        if (k < 0) {
            if (*nwords >= MAX_WORDS - CAND_WORDS - 1) {
                snprintf(err, errlen, "too many arguments");
                return -1;
            }
            words[(*nwords)++] = argv[i];
            continue;
        }
        if (!inline_value && i + 1 >= argc) {
            snprintf(err, errlen, "%s: expects a value", w);
            return -1;
        }
        const char *v = inline_value ? inline_value : argv[++i];
        const char **slot[] = {&o->device, &o->device_file, &o->device_cache, &o->memory_per_rank,
                               &o->memory_reserve, NULL, &o->account};
        if (k == 5) {
            if (parse_int_flag("--top", v, 0, &o->top, err, errlen)) return -1;
        } else {
            *slot[k] = v;
        }
    }
    words[*nwords] = NULL;
    return 0;
}

/* ---- the device and the budget ---- */

static int resolve_device(const plan_opts *o, plan_device *d, char *err, size_t errlen) {
    if (o->device && o->device_file) {
        snprintf(err, errlen, "--device and --device-file: give one");
        return -1;
    }
    if (o->device_file) return plan_device_load(o->device_file, d, err, errlen);
    if (!o->device) {
        snprintf(err, errlen, "--device NAME or --device-file F: expected one (presets: %s; "
                 "this-cpu)", plan_device_preset_names());
        return -1;
    }
    if (plan_device_preset(o->device, d) == 0) return 0;
    if (strcmp(o->device, "this-cpu") != 0) {
        snprintf(err, errlen, "--device %s: expected one of %s, this-cpu", o->device,
                 plan_device_preset_names());
        return -1;
    }
    char path[4096];
    if (o->device_cache) snprintf(path, sizeof path, "%s", o->device_cache);
    else if (plan_device_cache_path(path, sizeof path)) {
        snprintf(err, errlen, "--device this-cpu: neither XDG_CACHE_HOME nor HOME is set; give "
                 "--device-cache F");
        return -1;
    }
    /* every rank decides alike: the file is read before anyone writes it */
    FILE *f = o->calibrate ? NULL : fopen(path, "r");
    if (f) {
        fclose(f);
        return plan_device_load(path, d, err, errlen);
    }
    plan_device_calibrate(d);
    if (parallel_world_rank() == 0) {
        if (plan_device_save(path, d, err, errlen)) return -1;
        fprintf(stderr, "plan: this-cpu measured and saved to %s\n", path);
    }
    return 0;
}

static int memory_budget(const plan_opts *o, const plan_device *d, int world, double *total,
                         double *usable, char *err, size_t errlen) {
    *total = d->shared ? d->memory_bytes / plan_ranks_per_node(d, world) : d->memory_bytes;
    if (o->memory_per_rank && parse_size(o->memory_per_rank, total)) {
        snprintf(err, errlen, "--memory-per-rank %s: expected a size such as 80GB, 80GiB, 512MiB",
                 o->memory_per_rank);
        return -1;
    }
    const char *r = o->memory_reserve;
    size_t n = strlen(r);
    double reserve;
    if (n > 1 && r[n - 1] == '%') {
        char *end;
        double pct = strtod(r, &end);
        if (end != r + n - 1 || !(pct >= 0.0 && pct < 100.0)) {
            snprintf(err, errlen, "--memory-reserve %s: expected a share from 0%% to 99%%", r);
            return -1;
        }
        reserve = *total * pct / 100.0;
    } else if (!strcmp(r, "0")) {
        reserve = 0.0;
    } else if (parse_size(r, &reserve) || reserve >= *total) {
        snprintf(err, errlen, "--memory-reserve %s: expected a share (10%%) or a size below the "
                 "memory per rank (4GiB)", r);
        return -1;
    }
    *usable = *total - reserve;
    return 0;
}

/* ---- the search ---- */

/* The dimensions a user's flag fixes */
typedef struct {
    int tp, pp, cp, cpt, ep, disp, vp, sp, tpo, recompute, mbs, dopt, ogr, precision;
} fixed_dims;

static int has_flag(char **words, int n, const char *flag) {
    size_t len = strlen(flag);
    for (int i = 1; i < n; i++)
        if (!strncmp(words[i], flag, len) && (words[i][len] == 0 || words[i][len] == '='))
            return 1;
    return 0;
}

static fixed_dims find_fixed(char **w, int n, const plan_opts *o) {
    fixed_dims f;
    f.tp = has_flag(w, n, "--tensor-model-parallel-size");
    f.pp = has_flag(w, n, "--pipeline-model-parallel-size");
    f.cp = has_flag(w, n, "--context-parallel-size");
    f.cpt = has_flag(w, n, "--cp-comm-type");
    f.ep = has_flag(w, n, "--expert-model-parallel-size");
    f.disp = has_flag(w, n, "--moe-token-dispatcher-type");
    f.vp = has_flag(w, n, "--virtual-pipeline-model-parallel-size") ||
           has_flag(w, n, "--num-layers-per-virtual-pipeline-stage");
    f.sp = has_flag(w, n, "--sequence-parallel");
    f.tpo = has_flag(w, n, "--tp-comm-overlap");
    f.recompute = has_flag(w, n, "--recompute-activations") ||
                  has_flag(w, n, "--recompute-granularity") ||
                  has_flag(w, n, "--recompute-method") || has_flag(w, n, "--recompute-num-layers") ||
                  has_flag(w, n, "--num-microbatches-with-partial-activation-checkpoints");
    f.mbs = has_flag(w, n, "--micro-batch-size");
    f.dopt = has_flag(w, n, "--use-distributed-optimizer");
    f.ogr = has_flag(w, n, "--overlap-grad-reduce");
    f.precision = has_flag(w, n, "--bf16") || has_flag(w, n, "--fp16") || o->fp32;
    return f;
}

/* One legal configuration: what the table and --json print (a few hundred bytes: the paper's
 * searches list 10^5 of them) */
typedef struct {
    int t, p, v, d, cp, sp, tpo, mbs, M, dopt, ogr;
    char cp_comm_type[32];
    int ep;               /* expert-parallel size (1: dense or none) */
    char dispatcher[32];  /* --moe-token-dispatcher-type, "-" where none is used */
    int recompute_num_layers, partial; /* partial: K, or -1 */
    char granularity[32], method[32], precision[8];
    int full_recompute; /* --recompute-granularity full */
    plan_cost c;
    int fits;
    char *layout; /* the searched flags */
} row;

static void row_from_args(row *r, const megadlm_args *a) {
    r->t = a->tensor_model_parallel_size;
    r->p = a->pipeline_model_parallel_size;
    r->v = a->virtual_pipeline_model_parallel_size > 1 ? a->virtual_pipeline_model_parallel_size : 1;
    r->d = a->data_parallel_size;
    r->cp = a->context_parallel_size > 1 ? a->context_parallel_size : 1;
    snprintf(r->cp_comm_type, sizeof r->cp_comm_type, "%s", r->cp > 1 ? a->cp_comm_type : "-");
    r->ep = a->num_experts > 0 ? a->expert_model_parallel_size : 1;
    /* one process with neither EP nor TP dispatches locally: the flag changes nothing */
    int dispatched = a->num_experts > 0 && (r->ep > 1 || r->t > 1);
    snprintf(r->dispatcher, sizeof r->dispatcher, "%s",
             dispatched ? a->moe_token_dispatcher_type : "-");
    r->sp = a->sequence_parallel;
    r->tpo = a->tp_comm_overlap;
    r->mbs = a->micro_batch_size;
    r->M = args_num_microbatches(a);
    r->dopt = a->use_distributed_optimizer;
    r->ogr = a->overlap_grad_reduce;
    r->recompute_num_layers = a->recompute_num_layers;
    r->partial = a->num_microbatches_with_partial_activation_checkpoints;
    snprintf(r->granularity, sizeof r->granularity, "%s",
             a->recompute_granularity[0] ? a->recompute_granularity : "none");
    snprintf(r->method, sizeof r->method, "%s", a->recompute_method);
    r->full_recompute = ARGS_CHOICE(a, recompute_granularity) == ARGS_RECOMPUTE_FULL;
    snprintf(r->precision, sizeof r->precision, "%s", a->bf16 ? "bf16" : a->fp16 ? "fp16" : "fp32");
}

typedef struct {
    char **base;
    int nbase;
    fixed_dims fixed;
    const plan_opts *o;
    const plan_device *d;
    double usable;
    row *rows;
    int nrows, cap;
    long refused;
    const megadlm_args *model; /* the base flags, parsed only */
} search;

/* Parses and validates base + cand as train would; 0 with *a filled, or -1 */
static int parse_candidate(search *s, char **cand, int ncand, megadlm_args *a) {
    char *argv[MAX_WORDS];
    int argc = 0;
    for (int i = 0; i < s->nbase; i++) argv[argc++] = s->base[i];
    for (int i = 0; i < ncand; i++) argv[argc++] = cand[i];
    argv[argc] = NULL;
    char err[1024];
    args_defaults(a);
    int rc = args_parse(a, argc, argv, err, sizeof err);
    if (rc != 0) {
        args_free(a);
        return -1;
    }
    /* what only training needs: not used here (as `megadlm memory`) */
    if (isnan(a->lr)) a->lr = a->min_lr;
    if (a->train_iters == 0 && a->train_samples == 0) a->train_iters = INT_MAX;
    if (!a->mock_data && a->num_data_paths == 0) a->mock_data = 1;
    if (args_validate(a, err, sizeof err) != 0) {
        args_free(a);
        return -1;
    }
    return 0;
}

/* Evaluates base + cand into *r (its memory, time and fit; no layout string yet): 0, or -1
 * when train's rules refuse it (counted). */
static int eval_candidate(search *s, char **cand, int ncand, row *r) {
    megadlm_args a;
    if (parse_candidate(s, cand, ncand, &a)) {
        s->refused++;
        return -1;
    }
    row_from_args(r, &a);
    plan_cost_compute(&a, s->d, &r->c);
    r->fits = r->c.memory_bytes <= s->usable;
    r->layout = NULL;
    args_free(&a);
    return 0;
}

/* Lists r, an evaluated candidate, with the searched flags cand as its layout. */
static void keep_row(search *s, const row *r, char **cand, int ncand) {
    if (s->nrows == s->cap) {
        int cap = s->cap ? 2 * s->cap : 256;
        s->rows = xrealloc(s->rows, sizeof(row) * (size_t)cap, "the plan's rows");
        s->cap = cap;
    }
    char layout[1024];
    size_t off = 0;
    layout[0] = 0;
    for (int i = 0; i < ncand && off < sizeof layout; i++)
        off += (size_t)snprintf(layout + off, sizeof layout - off, "%s%s", i ? " " : "", cand[i]);
    char *copy = strdup(layout);
    if (!copy) return;
    s->rows[s->nrows] = *r;
    s->rows[s->nrows++].layout = copy;
}

static void add_candidate(search *s, char **cand, int ncand) {
    row r;
    if (eval_candidate(s, cand, ncand, &r) == 0) keep_row(s, &r, cand, ncand);
}

/* Candidate words are built into a small pool of strings */
typedef struct {
    char *w[CAND_WORDS];
    char buf[CAND_WORDS][32];
    int n;
} cand_words;

static void push(cand_words *c, const char *flag) { c->w[c->n++] = (char *)flag; }
static void push_int(cand_words *c, const char *flag, int v) {
    push(c, flag);
    snprintf(c->buf[c->n], sizeof c->buf[c->n], "%d", v);
    c->w[c->n] = c->buf[c->n];
    c->n++;
}

/* Each recompute choice on top of c, then the remaining dimensions */
typedef struct {
    int t, p, v, d, cp, chunk, in_flight;
} layout;

static void search_rest(search *s, cand_words *c, const layout *l, int block_n);

/* 1, 2, 4, ... below in_flight - 1, then in_flight - 1, then in_flight (the end) */
static int next_partial(int K, int in_flight) {
    if (2 * K < in_flight - 1) return 2 * K;
    return K < in_flight - 1 ? in_flight - 1 : in_flight;
}

static void search_recompute(search *s, cand_words *c, const layout *l) {
    if (s->fixed.recompute) {
        search_rest(s, c, l, -1);
        return;
    }
    int n0 = c->n;
    search_rest(s, c, l, -1); /* none */
    push(c, "--recompute-activations");
    search_rest(s, c, l, -1);
    c->n = n0;
    for (int n = 1; n <= l->chunk; n++) {
        /* uniform: every layer recomputed; chunks of n layers keep one input each */
        if (l->chunk % n != 0) continue;
        push(c, "--recompute-granularity"), push(c, "full"), push(c, "--recompute-method");
        push(c, "uniform"), push_int(c, "--recompute-num-layers", n);
        search_rest(s, c, l, -1);
        c->n = n0;
    }
    /* block: the first n layers of a chunk recomputed, the rest keep everything; n is chosen
     * per micro-batch size, optimizer and precision (add_block), the word after
     * --recompute-num-layers holding it */
    push(c, "--recompute-granularity"), push(c, "full"), push(c, "--recompute-method");
    push(c, "block"), push_int(c, "--recompute-num-layers", l->chunk);
    search_rest(s, c, l, c->n - 1);
    c->n = n0;
    /* per-micro-batch partial recompute (pipelines): K of the in-flight micro-batches keep
     * everything; K = 1, 2, 4, ... and in-flight - 1 */
    for (int K = 1; K < l->in_flight; K = next_partial(K, l->in_flight)) {
        push(c, "--recompute-granularity"), push(c, "full"), push(c, "--recompute-method");
        push(c, "uniform"), push_int(c, "--recompute-num-layers", 1);
        push_int(c, "--num-microbatches-with-partial-activation-checkpoints", K);
        search_rest(s, c, l, -1);
        c->n = n0;
    }
}

/* Full block recomputation of n layers of each chunk, n = 1 .. chunk, the other words fixed
 * (c, whose word block_n holds n): the more layers recomputed, the less memory is kept and the
 * more compute is spent, so memory falls and time rises with n (both accounts; checked over
 * every n by tests/scripts/test_hostile_round3.sh). The one row worth listing is the smallest n
 * that fits: a larger n fits too but is slower, a smaller one does not fit. It is found by
 * bisection, log2(chunk) evaluations instead of chunk, which keeps the search's time and
 * memory from growing with the layers; when no n fits, n = chunk (the least memory) is listed. */
static void add_block(search *s, cand_words *c, int block_n, int chunk) {
    row r;
    snprintf(c->buf[block_n], sizeof c->buf[block_n], "%d", chunk);
    if (eval_candidate(s, c->w, c->n, &r) != 0) return;
    if (r.fits) {
        int lo = 1, hi = chunk; /* hi fits; below lo nothing does */
        row fit = r;
        while (lo < hi) {
            int mid = lo + (hi - lo) / 2;
            snprintf(c->buf[block_n], sizeof c->buf[block_n], "%d", mid);
            if (eval_candidate(s, c->w, c->n, &r) == 0 && r.fits) hi = mid, fit = r;
            else lo = mid + 1;
        }
        r = fit;
        snprintf(c->buf[block_n], sizeof c->buf[block_n], "%d", hi);
    }
    keep_row(s, &r, c->w, c->n);
}

/* micro-batch size, distributed optimizer, overlapped reduction, precision; then the
 * candidate, or with block_n >= 0 the block recomputation's n (add_block) */
static void search_rest(search *s, cand_words *c, const layout *l, int block_n) {
    int n0 = c->n;
    int per_replica = s->model->global_batch_size / l->d;
    int mb_lo = 1, mb_hi = per_replica;
    if (s->fixed.mbs) mb_lo = mb_hi = 0;
    for (int b = mb_lo; b <= mb_hi; b++) {
        if (b > 0 && per_replica % b != 0) continue;
        int n1 = c->n;
        if (b > 0) push_int(c, "--micro-batch-size", b);
        for (int dopt = 0; dopt <= (!s->fixed.dopt && l->d > 1); dopt++)
            for (int ogr = 0; ogr <= (!s->fixed.ogr && l->d > 1); ogr++)
                for (int bf = 0; bf <= !s->fixed.precision; bf++) {
                    int n2 = c->n;
                    if (dopt) push(c, "--use-distributed-optimizer");
                    if (ogr) push(c, "--overlap-grad-reduce");
                    if (bf) push(c, "--bf16");
                    /* context parallelism's exchange, unless given: the ring (Megatron's
                     * default, its transfers under the attention) in fp32, the all-gather in
                     * 16-bit runs (the ring is fp32 only); a2a only when given */
                    if (l->cp > 1 && !s->fixed.cpt) {
                        int half = bf || (s->fixed.precision && (s->model->bf16 || s->model->fp16));
                        push(c, "--cp-comm-type"), push(c, half ? "allgather" : "p2p");
                    }
                    if (block_n >= 0) add_block(s, c, block_n, l->chunk);
                    else add_candidate(s, c->w, c->n);
                    c->n = n2;
                }
        c->n = n1;
    }
    c->n = n0;
}

/* The virtual pipeline, sequence parallelism and its overlap on top of c (the layout's words),
 * then the rest */
static void search_chunks(search *s, cand_words *c, int t, int p, int cp) {
    const megadlm_args *m = s->model;
    int d = m->world_size / (t * p * cp);
    int L = m->num_layers;
    int global = m->global_batch_size;
    int n0 = c->n;
    int v_hi = (!s->fixed.vp && p > 1 && L % p == 0) ? L / p : 1;
    for (int v = 1; v <= v_hi; v++) {
        if (v > 1 && (L / p) % v != 0) continue;
        /* given: v itself, or the layers per virtual stage (v = L / p / N, derived by train's
         * validation, which the base flags have not been through) */
        int fixed_v = m->virtual_pipeline_model_parallel_size > 1 ? m->virtual_pipeline_model_parallel_size : 1;
        int per_stage = m->num_layers_per_virtual_pipeline_stage;
        if (per_stage > 0 && L / p / per_stage > 1) fixed_v = L / p / per_stage;
        int vv = s->fixed.vp ? fixed_v : v;
        if (v > 1) push_int(c, "--virtual-pipeline-model-parallel-size", v);
        layout l = {t, p, vv, d, cp, L / p / vv, p};
        if (l.chunk < 1) l.chunk = 1;
        /* 1F1B: the first stage holds min(p, M) micro-batches at the smallest micro-batch */
        if (global / d < l.in_flight) l.in_flight = global / d;
        /* with --num-experts train refuses TP without SP (Megatron's MoE layer) and
         * --tp-comm-overlap (not yet): not searched (given, they are tried and refused) */
        int moe = m->num_experts > 0, sp_lo = moe && t > 1 && !s->fixed.sp;
        for (int sp = sp_lo; sp <= (t > 1 && !s->fixed.sp); sp++)
            for (int tpo = 0; tpo <= (!s->fixed.tpo && !moe && (sp || s->fixed.sp)); tpo++) {
                int n1 = c->n;
                if (sp) push(c, "--sequence-parallel");
                if (tpo) push(c, "--tp-comm-overlap");
                search_recompute(s, c, &l);
                c->n = n1;
            }
        c->n = n0;
    }
}

/* --moe-token-dispatcher-type, unless given: both with EP > 1 or TP > 1 (in one process of
 * neither the tokens stay local and the flag changes nothing: not searched), alltoall alone
 * when a given flag needs it (--moe-expert-capacity-factor, Megatron's rule;
 * --moe-shared-expert-overlap), then on any layout since train refuses allgather with them.
 * Returns how many choices it put in out (0: push nothing). */
static int dispatcher_choices(const search *s, int t, int ep, const char **out) {
    const megadlm_args *m = s->model;
    if (m->num_experts <= 0 || s->fixed.disp) return 0;
    if (m->moe_expert_capacity_factor >= 0.0f || m->moe_shared_expert_overlap) {
        out[0] = "alltoall";
        return 1;
    }
    if (ep <= 1 && t <= 1) return 0;
    out[0] = "allgather", out[1] = "alltoall";
    return 2;
}

static void search_layout(search *s, int t, int p, int cp, int ep) {
    cand_words c = {.n = 0};
    if (!s->fixed.tp) push_int(&c, "--tensor-model-parallel-size", t);
    if (!s->fixed.pp) push_int(&c, "--pipeline-model-parallel-size", p);
    if (!s->fixed.cp && cp > 1) push_int(&c, "--context-parallel-size", cp);
    if (!s->fixed.ep && ep > 1) push_int(&c, "--expert-model-parallel-size", ep);
    const char *disp[2];
    int n = dispatcher_choices(s, t, ep, disp);
    if (n == 0) {
        search_chunks(s, &c, t, p, cp);
        return;
    }
    int n0 = c.n;
    for (int i = 0; i < n; i++) {
        push(&c, "--moe-token-dispatcher-type"), push(&c, disp[i]);
        search_chunks(s, &c, t, p, cp);
        c.n = n0;
    }
}

/* Expert-parallel sizes of a layout whose data-parallel size is d: with --num-experts, the
 * divisors of d that divide the experts (EP ranks are carved out of the data-parallel ones;
 * train refuses context parallelism with MoE, so d = world / (t p)), or the one given; 1
 * for a dense model */
static void search_experts(search *s, int t, int p, int cp) {
    const megadlm_args *m = s->model;
    int d = m->world_size / (t * p * cp);
    if (m->num_experts <= 0 || s->fixed.ep) { /* (a given EP that d does not take: refused) */
        search_layout(s, t, p, cp, m->num_experts > 0 ? m->expert_model_parallel_size : 1);
        return;
    }
    for (int ep = 1; ep <= d; ep++)
        if (d % ep == 0 && m->num_experts % ep == 0) search_layout(s, t, p, cp, ep);
}

static void search_all(search *s) {
    const megadlm_args *m = s->model;
    int world = m->world_size;
    for (int t = 1; t <= world; t++) {
        if (world % t) continue;
        if (s->fixed.tp && t != m->tensor_model_parallel_size) continue;
        if (!s->fixed.tp && m->num_attention_heads % t) continue;
        for (int p = 1; p <= world / t; p++) {
            if ((world / t) % p) continue;
            if (s->fixed.pp && p != m->pipeline_model_parallel_size) continue;
            if (!s->fixed.pp && m->num_layers % p) continue;
            for (int cp = 1; cp <= world / (t * p); cp++) {
                if ((world / (t * p)) % cp) continue;
                if (s->fixed.cp && cp != (m->context_parallel_size > 1 ? m->context_parallel_size : 1))
                    continue;
                /* Megatron's 2 x CP chunks of --seq-length (masked diffusion pads its
                 * sequence to them: any CP) */
                if (!s->fixed.cp && cp > 1 && m->seq_length % (2 * cp) &&
                    ARGS_CHOICE(m, model_running_mode) != ARGS_MODE_DIFFLM_NOSHIFT)
                    continue;
                /* train refuses context parallelism with --num-experts (not yet) */
                if (!s->fixed.cp && cp > 1 && m->num_experts > 0) continue;
                search_experts(s, t, p, cp);
            }
        }
    }
}

/* ---- output ---- */

static int by_fit_then_time(const void *x, const void *y) {
    const row *a = x, *b = y;
    if (a->fits != b->fits) return b->fits - a->fits;
    if (a->c.total != b->c.total) return a->c.total < b->c.total ? -1 : 1;
    return a->c.memory_bytes < b->c.memory_bytes ? -1 : a->c.memory_bytes > b->c.memory_bytes;
}

static void recompute_text(const row *r, char *out, size_t n) {
    if (!r->full_recompute) snprintf(out, n, "%s", r->granularity);
    else if (r->partial > 0)
        snprintf(out, n, "full %s %d, %d kept", r->method, r->recompute_num_layers, r->partial);
    else snprintf(out, n, "full %s %d", r->method, r->recompute_num_layers);
}

#define GIB_F (1024.0 * 1024.0 * 1024.0)

/* The user's train words (without --world-size) and the searched ones: a line for mpirun */
static void train_line(const search *s, const row *r, char *out, size_t n) {
    size_t off = 0;
    for (int i = 1; i < s->nbase && off < n; i++) {
        if (!strcmp(s->base[i], "--world-size")) {
            i++;
            continue;
        }
        if (!strncmp(s->base[i], "--world-size=", 13)) continue;
        off += (size_t)snprintf(out + off, n - off, "%s%s", off ? " " : "", s->base[i]);
    }
    if (off < n) snprintf(out + off, n - off, "%s%s", off && r->layout[0] ? " " : "", r->layout);
}

static void print_header(const search *s, const plan_device *d, double total, int fitting) {
    const megadlm_args *m = s->model;
    int moe = m->num_experts > 0;
    printf("megadlm plan: %d layers, hidden %d, %d heads, sequence %d, global batch %d on %d "
           "ranks\n", m->num_layers, m->hidden_size, m->num_attention_heads, m->seq_length,
           m->global_batch_size, m->world_size);
    if (moe)
        printf("mixture of experts: %d experts, top %d, expert ffn %d; memory counts the MoE "
               "layers' routing-dependent state at its bound (no routing needs more), each "
               "row's second line at a balanced routing\n",
               m->num_experts, m->moe_router_topk,
               m->moe_ffn_hidden_size > 0 ? m->moe_ffn_hidden_size : m->ffn_hidden_size);
    printf("device %s: %.1f TFLOP/s 16-bit, %.1f TFLOP/s fp32 (x %.2f sustained), %.1f GB/s "
           "memory, links %.1f / %.1f GB/s within / between nodes%s\n",
           d->name, d->flops_bf16 / 1e12, d->flops_fp32 / 1e12, d->efficiency,
           d->memory_bandwidth / 1e9, d->intra_bandwidth / 1e9, d->inter_bandwidth / 1e9,
           d->shared ? " (the node's, shared by its ranks)" : " (per rank)");
    printf("memory per rank %.2f GiB, %.2f GiB usable after the reserve (%s account: %s)\n",
           total / GIB_F, s->usable / GIB_F,
           d->account == PLAN_ACCOUNT_MEGADLM ? "megadlm" : "megatron",
           d->account == PLAN_ACCOUNT_MEGADLM ? "what train allocates, --log-memory"
                                              : "Megatron's theoretical memory, first stage");
    printf("%d legal configurations (%ld refused by train's rules), %d fit; fastest first "
           "(seconds per iteration):\n\n", s->nrows, s->refused, fitting);
    printf("%4s %3s %3s %3s %3s %4s ", "#", "TP", "CP", "PP", "VP", "DP");
    if (moe) printf("%3s %-9s ", "EP", "dispatch");
    printf("%3s %3s %-22s %4s %5s %4s %4s %5s %9s %4s %10s %10s %10s %10s ", "SP", "TPO",
           "recompute", "mbs", "M", "dopt", "ogr", "prec", "mem GiB", "fits", "time", "compute",
           "tp comm", "cp comm");
    if (moe) printf("%10s ", "moe comm");
    printf("%10s %10s %10s %10s %6s %6s\n", "bubble", "p2p", "dp comm", "optim", "MFU", "HFU");
}

static void print_row(int i, const row *r, int moe) {
    char rc[48];
    recompute_text(r, rc, sizeof rc);
    printf("%4d %3d %3d %3d %3d %4d ", i + 1, r->t, r->cp, r->p, r->v, r->d);
    if (moe) printf("%3d %-9s ", r->ep, r->dispatcher);
    printf("%3s %3s %-22s %4d %5d %4s %4s %5s %9.2f %4s %10.4g %10.4g %10.4g %10.4g ",
           r->sp ? "on" : "-", r->tpo ? "on" : "-", rc, r->mbs, r->M, r->dopt ? "on" : "-",
           r->ogr ? "on" : "-", r->precision, r->c.memory_bytes / GIB_F, r->fits ? "yes" : "NO",
           r->c.total, r->c.compute, r->c.tp_comm, r->c.cp_comm);
    if (moe) printf("%10.4g ", r->c.moe_comm);
    printf("%10.4g %10.4g %10.4g %10.4g %5.1f%% %5.1f%%\n", r->c.bubble, r->c.p2p,
           r->c.dp_comm, r->c.optimizer, 100.0 * r->c.mfu, 100.0 * r->c.hfu);
    printf("       %s", r->layout[0] ? r->layout : "(the flags as given)");
    if (moe) printf("  [memory at a balanced routing %.2f GiB]", r->c.memory_balanced / GIB_F);
    printf("\n");
}

static cJSON *row_json(const search *s, int i, const row *r) {
    cJSON *o = cJSON_CreateObject();
    char rc[48], line[8192];
    recompute_text(r, rc, sizeof rc);
    train_line(s, r, line, sizeof line);
    JSON_ADD(o, JNUM("rank", i + 1), JNUM("tensor_model_parallel_size", r->t),
             JNUM("pipeline_model_parallel_size", r->p),
             JNUM("virtual_pipeline_model_parallel_size", r->v),
             JNUM("data_parallel_size", r->d), JNUM("context_parallel_size", r->cp),
             JSTR("cp_comm_type", r->cp_comm_type),
             JNUM("expert_model_parallel_size", r->ep),
             JSTR("moe_token_dispatcher_type", r->dispatcher), JBOOL("sequence_parallel", r->sp),
             JBOOL("tp_comm_overlap", r->tpo), JSTR("recompute_granularity", r->granularity),
             JSTR("recompute_method", r->method),
             JNUM("recompute_num_layers", r->recompute_num_layers),
             JNUM("num_microbatches_with_partial_activation_checkpoints", r->partial),
             JSTR("recompute", rc), JNUM("micro_batch_size", r->mbs),
             JNUM("num_microbatches", r->M), JBOOL("use_distributed_optimizer", r->dopt),
             JBOOL("overlap_grad_reduce", r->ogr), JSTR("precision", r->precision),
             JNUM("memory_bytes", r->c.memory_bytes),
             JNUM("memory_bytes_moe_balanced", r->c.memory_balanced), JBOOL("fits", r->fits));
    cJSON *t = cJSON_AddObjectToObject(o, "seconds_per_iteration");
    JSON_ADD(t, JNUM("total", r->c.total), JNUM("compute", r->c.compute),
             JNUM("elementwise", r->c.elementwise), JNUM("tp_comm", r->c.tp_comm),
             JNUM("tp_comm_hidden", r->c.tp_hidden), JNUM("cp_comm", r->c.cp_comm),
             JNUM("cp_comm_hidden", r->c.cp_hidden), JNUM("moe_comm", r->c.moe_comm),
             JNUM("bubble", r->c.bubble),
             JNUM("p2p", r->c.p2p), JNUM("dp_comm", r->c.dp_comm),
             JNUM("dp_comm_hidden", r->c.dp_hidden), JNUM("optimizer", r->c.optimizer));
    JSON_ADD(o, JNUM("model_flops_per_iteration", r->c.model_flops),
             JNUM("hardware_flops_per_iteration", r->c.hardware_flops),
             JNUM("gemm_flops_per_second_per_rank", r->c.gemm_rate), JNUM("mfu", r->c.mfu),
             JNUM("hfu", r->c.hfu), JSTR("layout_flags", r->layout), JSTR("train_flags", line));
    return o;
}

static void report(const search *s, const plan_device *d, double total) {
    int fitting = 0;
    for (int i = 0; i < s->nrows; i++) fitting += s->rows[i].fits;
    int shown = s->o->all ? s->nrows : fitting;
    if (s->o->top > 0 && s->o->top < shown) shown = s->o->top;
    if (s->o->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "device", plan_device_to_json(d));
        cJSON_AddNumberToObject(o, "world_size", s->model->world_size);
        cJSON_AddNumberToObject(o, "memory_per_rank_bytes", total);
        cJSON_AddNumberToObject(o, "memory_usable_bytes", s->usable);
        cJSON_AddNumberToObject(o, "legal", s->nrows);
        cJSON_AddNumberToObject(o, "refused", (double)s->refused);
        cJSON_AddNumberToObject(o, "fitting", fitting);
        cJSON *arr = cJSON_AddArrayToObject(o, "configurations");
        for (int i = 0; i < shown; i++) cJSON_AddItemToArray(arr, row_json(s, i, &s->rows[i]));
        char *str = cJSON_PrintUnformatted(o);
        printf("%s\n", str);
        free(str);
        cJSON_Delete(o);
        return;
    }
    print_header(s, d, total, fitting);
    for (int i = 0; i < shown; i++) print_row(i, &s->rows[i], s->model->num_experts > 0);
    if (shown > 0) {
        char line[8192];
        train_line(s, &s->rows[0], line, sizeof line);
        printf("\nthe fastest as train flags:\n  %s\n", line);
    } else {
        printf("nothing fits: see --all for the smallest memory of each layout\n");
    }
}

/* ---- main ---- */

/* Why nothing is legal: train's words on the flags as given (at micro-batch 1 when the
 * micro-batch size is searched) */
static void explain_none(search *s, char *err, size_t errlen) {
    cand_words c = {.n = 0};
    if (!s->fixed.mbs) push_int(&c, "--micro-batch-size", 1);
    char *argv[MAX_WORDS];
    int argc = 0;
    for (int i = 0; i < s->nbase; i++) argv[argc++] = s->base[i];
    for (int i = 0; i < c.n; i++) argv[argc++] = c.w[i];
    argv[argc] = NULL;
    megadlm_args a;
    args_defaults(&a);
    if (args_parse(&a, argc, argv, err, errlen) == 0) {
        if (isnan(a.lr)) a.lr = a.min_lr;
        if (a.train_iters == 0 && a.train_samples == 0) a.train_iters = INT_MAX;
        if (!a.mock_data && a.num_data_paths == 0) a.mock_data = 1;
        if (args_validate(&a, err, errlen) == 0)
            snprintf(err, errlen, "the search found no layout of %d ranks", s->model->world_size);
    }
    args_free(&a);
}

static int plan_fail(const char *msg) {
    if (parallel_world_rank() == 0) fprintf(stderr, "error: %s\n", msg);
    return 2;
}

int plan_main(int argc, char **argv) {
    plan_opts o = {0};
    char *words[MAX_WORDS];
    int nwords;
    char err[1024];
    if (split_args(argc, argv, &o, words, &nwords, err, sizeof err)) return plan_fail(err);

    megadlm_args model;
    args_defaults(&model);
    int rc = args_parse(&model, nwords, words, err, sizeof err);
    if (rc == 1) {
        print_plan_help();
        return 0;
    }
    if (rc < 0) return plan_fail(err);
    if (model.world_size <= 0) return plan_fail("--world-size N: expected the number of ranks to plan for");
    if (model.global_batch_size <= 0)
        return plan_fail("--global-batch-size: required (the plan keeps it and searches the "
                         "micro-batch size)");
    if (o.account && strcmp(o.account, "megatron") && strcmp(o.account, "megadlm")) {
        snprintf(err, sizeof err, "--memory-account %s: expected megatron or megadlm", o.account);
        return plan_fail(err);
    }

    plan_device d;
    if (resolve_device(&o, &d, err, sizeof err)) return plan_fail(err);
    if (o.account) d.account = !strcmp(o.account, "megadlm") ? PLAN_ACCOUNT_MEGADLM : PLAN_ACCOUNT_MEGATRON;
    double total;
    search s = {.base = words, .nbase = nwords, .o = &o, .d = &d, .model = &model};
    if (memory_budget(&o, &d, model.world_size, &total, &s.usable, err, sizeof err))
        return plan_fail(err);
    s.fixed = find_fixed(words, nwords, &o);
    if (parallel_world_rank() == 0) {
        search_all(&s);
        qsort(s.rows, (size_t)s.nrows, sizeof(row), by_fit_then_time);
        if (s.nrows == 0) {
            /* say why: train's words on the flags as given */
            explain_none(&s, err, sizeof err);
            fprintf(stderr, "error: no legal layout: %s\n", err);
            free(s.rows);
            args_free(&model);
            return 2;
        }
        report(&s, &d, total);
    }
    for (int i = 0; i < s.nrows; i++) free(s.rows[i].layout);
    free(s.rows);
    args_free(&model);
    return 0;
}
