/* Driver of bench/bench_tp_comm_overlap.sh: times training iterations of one GPT model under
 * tensor + sequence parallelism (TP = every rank) with the TP communication overlapped in
 * different ways, all in one run, the modes interleaved round by round so that machine noise
 * hits them alike.
 *
 *   mpirun -np T tp_overlap_bench ROUNDS ITERS <megadlm train flags ...>
 *
 * The train flags (model shape, --tensor-model-parallel-size T, --sequence-parallel,
 * --tp-comm-overlap [--tp-comm-overlap-progress ...]) are parsed and validated as `megadlm train`
 * does. An iteration is the forward and backward of one micro-batch of random tokens, the TP
 * gradient finalisation and an AdamW step at learning rate 0 (the same work every time).
 * Modes:
 *   no_overlap     plain collectives
 *   overlap        every overlap the flags enable (ag, rs, bulk dgrad/wgrad or rs-dgrad)
 *   ag_only, rs_only, bulk_only   one kind of overlap at a time
 *   compute_only   every TP collective replaced by a local copy (no communication)
 *   comm_only      the collectives of one no_overlap iteration replayed back to back
 * Output (rank 0): `mode NAME median_ms X min_ms Y` per mode: the slowest rank's time per
 * iteration, median and minimum over the rounds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/distributed/finalize_model_grads.h"
#include "core/models/gpt_model.h"
#include "core/optimizer/optimizer.h"
#include "core/parallel_state.h"
#include "core/tensor_parallel/comm_overlap.h"
#include "core/tensor_parallel/mappings.h"
#include "core/util/alloc.h"
#include "core/util/die.h"
#include "training/arguments.h"
#include "training/model_provider.h"

/* ---- the instrumentation of the TP collectives (mappings.h's interposer) ----
 * compute_only: every plain collective becomes a local copy (an all-gather copies the own shard
 * into every slot, a reduce-scatter keeps the own rows, all-reduces do nothing), so a step runs
 * its compute without communication; its numbers are meaningless.
 * Recording: each collective's kind and size is appended to a list; replay() runs that list
 * back to back (communication without compute) and returns the seconds it took. */
typedef struct {
    tp_comm_kind kind;
    size_t n; /* floats: the buffer (all-reduce) or one shard (all-gather, reduce-scatter) */
} rec_entry;

static struct {
    int local_only, recording;
    rec_entry *rec;
    size_t len, cap;
} g;

static void observe(tp_comm_kind kind, size_t n, void *user) {
    (void)user;
    if (!g.recording) return;
    if (g.len == g.cap) {
        g.cap = g.cap ? 2 * g.cap : 256;
        g.rec = xrealloc(g.rec, g.cap * sizeof(*g.rec), "TP communication record");
    }
    g.rec[g.len++] = (rec_entry){kind, n};
}

static int replace(tp_comm_kind kind, void *out, const void *in, size_t n, void *user) {
    (void)user;
    if (!g.local_only) return 0;
    const parallel_state *ps = parallel_get();
    float *o = out;
    const float *i = in;
    if (kind == TP_COMM_ALL_GATHER) {
        for (int q = 0; q < ps->tp_size; q++)
            if (o + q * n != i) memcpy(o + q * n, i, n * sizeof(float));
    } else if (kind == TP_COMM_REDUCE_SCATTER) {
        memcpy(o, i + (size_t)ps->tp_rank * n, n * sizeof(float));
    }
    return 1;
}

static void set_recording(int on) {
    g.recording = on;
    if (on) g.len = 0;
}

static double replay(void) {
    const parallel_state *ps = parallel_get();
    if (!ps->mpi || ps->tp_size < 2) return 0.0;
    size_t most = 1;
    for (size_t i = 0; i < g.len; i++) {
        size_t n = g.rec[i].n * (g.rec[i].kind == TP_COMM_ALL_GATHER ||
                                         g.rec[i].kind == TP_COMM_REDUCE_SCATTER
                                     ? (size_t)ps->tp_size
                                     : 1);
        if (n > most) most = n;
    }
    float *a = xcalloc(most, sizeof(float), "TP check buffer"),
          *b = xcalloc(most, sizeof(float), "TP check buffer");
    MPI_Barrier(ps->tp);
    double t0 = MPI_Wtime();
    for (size_t i = 0; i < g.len; i++) {
        int n = (int)g.rec[i].n;
        switch (g.rec[i].kind) {
        case TP_COMM_ALL_REDUCE_SUM:
            MPI_Allreduce(MPI_IN_PLACE, a, n, MPI_FLOAT, MPI_SUM, ps->tp);
            break;
        case TP_COMM_ALL_REDUCE_MAX:
            MPI_Allreduce(MPI_IN_PLACE, a, n, MPI_FLOAT, MPI_MAX, ps->tp);
            break;
        case TP_COMM_ALL_GATHER:
            MPI_Allgather(a, n, MPI_FLOAT, b, n, MPI_FLOAT, ps->tp);
            break;
        case TP_COMM_REDUCE_SCATTER:
            MPI_Reduce_scatter_block(b, a, n, MPI_FLOAT, MPI_SUM, ps->tp);
            break;
        case TP_COMM_ALL_REDUCE_SUM_DOUBLE: break; /* not observed */
        }
    }
    double dt = MPI_Wtime() - t0;
    free(a);
    free(b);
    return dt;
}

/* ---- the modes ---- */

enum { NO_OVERLAP, OVERLAP, AG_ONLY, RS_ONLY, BULK_ONLY, COMPUTE_ONLY, COMM_ONLY, NUM_MODES };
static const char *MODE_NAMES[NUM_MODES] = {"no_overlap", "overlap",      "ag_only",  "rs_only",
                                            "bulk_only",  "compute_only", "comm_only"};

static void set_mode(transformer_config *c, const megadlm_args *a, int mode) {
    c->tp_comm_overlap = mode != NO_OVERLAP && mode != COMPUTE_ONLY;
    c->tp_comm_overlap_ag = mode == OVERLAP ? a->tp_comm_overlap_ag : mode == AG_ONLY;
    c->tp_comm_overlap_rs = mode == OVERLAP ? a->tp_comm_overlap_rs : mode == RS_ONLY;
    c->tp_comm_overlap_rs_dgrad = mode == OVERLAP && a->tp_comm_overlap_rs_dgrad;
    c->tp_comm_bulk_dgrad = mode == OVERLAP ? a->tp_comm_bulk_dgrad : mode == BULK_ONLY;
    c->tp_comm_bulk_wgrad = mode == OVERLAP ? a->tp_comm_bulk_wgrad : mode == BULK_ONLY;
    g.local_only = mode == COMPUTE_ONLY; /* tp_comm_overlap is off: every collective is plain */
    /* the plain modes run megadlm's plain default (one GEMM over all rows), the overlapped ones
     * the row plan's pieces (parallel_linear.c) */
    c->tp_comm_overlap_num_splits = c->tp_comm_overlap ? args_sp_pieces(a) : 0;
}

static void iteration(gpt_model *m, activation_store *st, const megadlm_args *a,
                      const gpt_batch *batch, const optimizer_config *oc, int it) {
    gpt_step step = {.seed = a->seed, .iteration = (uint32_t)it, .training = 1};
    memset(m->params.grad, 0, m->params.numel * sizeof(float));
    gpt_model_forward(m, st, batch, step);
    gpt_model_backward(m, st, 1.0f);
    finalize_model_grads(NULL, &m->params, m->spec.tied_embedding);
    optimizer_step(&m->params, oc, 0.0f, it + 1, HALF_NONE);
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

int main(int argc, char **argv) {
    parallel_init(&argc, &argv);
    if (argc < 4) {
        fprintf(stderr, "usage: mpirun -np T %s ROUNDS ITERS <megadlm train flags>\n", argv[0]);
        return 2;
    }
    int rounds = atoi(argv[1]), iters = atoi(argv[2]);
    megadlm_args a;
    args_defaults(&a);
    char err[1024];
    argv[2] = argv[0];
    int rc = args_parse(&a, argc - 2, argv + 2, err, sizeof(err));
    if (rc == 0) a.world_size = parallel_world_size();
    if (rc != 0 || args_validate(&a, err, sizeof(err)) ||
        parallel_setup_groups(a.tensor_model_parallel_size, 1, 1, err, sizeof(err)))
        die(2, "%s", err);
    if (!a.tp_comm_overlap) die(2, "give --tp-comm-overlap (and its switches)");
    tp_comm_set_interposer(&(tp_comm_interposer){.observe = observe, .replace = replace});
    tp_progress_mode pm =
        ARGS_CHOICE(&a, tp_comm_overlap_progress) == ARGS_TP_PROGRESS_THREAD ? TP_PROGRESS_THREAD
                                                                             : TP_PROGRESS_TEST;
    if (tp_overlap_init(pm, err, sizeof(err))) die(2, "%s", err);

    transformer_config cfg = model_config_from_args(&a);
    gpt_model *m = gpt_model_create(&cfg, a.micro_batch_size, GPT_MODEL_TRAINING);
    activation_store *st = activation_store_create(m, 1);
    gpt_model_init_params(m, a.seed);
    int N = a.micro_batch_size * a.seq_length;
    int *tokens = malloc(N * sizeof(int)), *labels = malloc(N * sizeof(int));
    float *mask = malloc(N * sizeof(float));
    srand(1234); /* the same tokens on every rank */
    for (int i = 0; i < N; i++) {
        tokens[i] = rand() % a.vocab_size;
        labels[i] = rand() % a.vocab_size;
        mask[i] = 1.0f;
    }
    optimizer_config oc = {.beta1 = a.adam_beta1, .beta2 = a.adam_beta2, .eps = a.adam_eps,
                           .weight_decay = a.weight_decay};
    const parallel_state *ps = parallel_get();
    gpt_batch batch = {.tokens = tokens, .labels = labels, .loss_mask = mask,
                       .B = a.micro_batch_size, .T = a.seq_length};

    /* warm-up, and the collectives of one plain iteration for comm_only */
    set_mode(&m->cfg, &a, NO_OVERLAP);
    iteration(m, st, &a, &batch, &oc, 0);
    set_recording(1);
    iteration(m, st, &a, &batch, &oc, 0);
    set_recording(0);
    set_mode(&m->cfg, &a, OVERLAP);
    iteration(m, st, &a, &batch, &oc, 0);

    double *t = calloc((size_t)NUM_MODES * rounds, sizeof(double));
    for (int r = 0; r < rounds; r++) {
        for (int mode = 0; mode < NUM_MODES; mode++) {
            set_mode(&m->cfg, &a, mode);
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int i = 0; i < iters; i++) {
                if (mode == COMM_ONLY)
                    replay();
                else
                    iteration(m, st, &a, &batch, &oc, r * iters + i);
            }
            double dt = (MPI_Wtime() - t0) / iters, slowest = 0;
            MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            t[mode * rounds + r] = slowest;
        }
    }
    if (ps->world_rank == 0) {
        for (int mode = 0; mode < NUM_MODES; mode++) {
            double *x = t + mode * rounds;
            qsort(x, rounds, sizeof(double), cmp_double);
            printf("mode %s median_ms %.2f min_ms %.2f\n", MODE_NAMES[mode],
                   1e3 * x[rounds / 2], 1e3 * x[0]);
        }
    }
    tp_comm_set_interposer(NULL);
    free(g.rec);
    free(t);
    free(tokens);
    free(labels);
    free(mask);
    activation_store_free(st);
    gpt_model_free(m);
    tp_overlap_finalize();
    args_free(&a);
    parallel_finalize();
    return 0;
}
