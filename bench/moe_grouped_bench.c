/* The two schedules of the routed experts (core/transformer/moe/experts.h) timed against each
 * other on one MoE layer: the loop over experts (each GEMM on all threads) and
 * --moe-grouped-gemm (one parallel region over the experts, each expert's GEMMs on one thread).
 * For one shape: moe_layer_forward + moe_layer_backward (router, dispatch, experts, combine) and
 * the experts alone (moe_experts_forward / moe_experts_backward on the rows of one routing), the
 * two variants alternating (loop, grouped, then grouped, loop, ...) for `rounds` rounds after
 * one untimed round, so that a shared machine's noise hits both alike; medians per variant.
 * Before timing, both variants run the layer once from zeroed gradients and the output, the
 * input gradient and every weight gradient are compared bit for bit (memcmp; experts.h says
 * when the schedules give the same bits), with the largest difference where they do not.
 *
 * Threads: OMP_NUM_THREADS (OpenMP and OpenBLAS alike, as megadlm's threads_setup applies
 * them); denormals flushed, megadlm's default.
 *
 * Built by CMake (target moe_grouped_bench, not built by default); bench/bench_moe.sh runs it.
 * Usage: moe_grouped_bench [key=value...]
 *   C=1024 F=256 E=64 k=8 N=1024   hidden, --moe-ffn-hidden-size, experts, top-k, tokens
 *   swiglu=1 rounds=5 seed=1
 *   skew=0   routing imbalance: every token gets skew x one shared random direction added to its
 *            noise, so the router prefers some experts (0: balanced up to sampling noise)
 *   header=1 print the column header first; rows=1 print every expert's row count; parts=1
 *            print the medians of the layer's forward and backward and the experts' apart
 *   only=0|1 time the loop (0) or the grouped schedule (1) alone, for a profiler (perf stat,
 *            perf record): no bit check, and one line of medians
 * Output: one line per shape (see `header`). */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "bench_util.h"

#include "core/kernels/gemm.h"
#include "core/random/philox.h"
#include "core/tensor/memory.h"
#include "core/transformer/moe/experts.h"
#include "core/transformer/moe/moe_layer.h"
#include "core/util/denormals.h"

typedef struct {
    int C, F, E, k, N, swiglu, rounds, seed, header, rows, parts, only;
    float skew;
} opts;

static void parse(opts *o, int argc, char **argv) {
    *o = (opts){.C = 1024, .F = 256, .E = 64, .k = 8, .N = 1024, .swiglu = 1, .rounds = 5,
                .seed = 1, .header = 0, .only = -1, .skew = 0.0f};
    for (int i = 1; i < argc; i++) {
        char key[32];
        const char *v = bench_key_value(argv[i], key, sizeof key);
#define INT(name) if (!strcmp(key, #name)) { o->name = atoi(v); continue; }
        INT(C) INT(F) INT(E) INT(k) INT(N) INT(swiglu) INT(rounds) INT(seed) INT(header) INT(rows) INT(parts) INT(only)
#undef INT
        if (!strcmp(key, "skew")) { o->skew = (float)atof(v); continue; }
        fprintf(stderr, "unknown option %s\n", key);
        exit(2);
    }
    if (o->C < 1 || o->F < 1 || o->E < 1 || o->k < 1 || o->k > o->E || o->N < 1 || o->rounds < 1) {
        fprintf(stderr, "bad shape\n");
        exit(2);
    }
}

static transformer_config config_of(const opts *o, int grouped) {
    transformer_config c = {0};
    c.num_layers = 1;
    c.hidden_size = o->C;
    c.ffn_hidden_size = o->F;
    c.swiglu = o->swiglu;
    c.gelu = GELU_TANH;
    c.moe.num_experts = o->E;
    c.moe.ffn_hidden_size = o->F;
    c.moe.topk = o->k;
    c.moe.aux_loss_coeff = 0.01f;
    c.moe.z_loss_coeff = -1;
    c.moe.capacity_factor = -1;
    c.moe.grouped_gemm = grouped;
    c.moe.layer_freq = 1;
    c.moe.load_balancing = MOE_LB_AUX_LOSS;
    return c;
}

static void fill_randn(float *p, size_t n, float std, uint32_t stream) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i += 2) {
        const uint32_t ctr[4] = {(uint32_t)i, (uint32_t)(i >> 32), stream, 0};
        const uint32_t key[2] = {12345u, stream};
        uint32_t out[4];
        float z0, z1;
        philox4x32_10(ctr, key, out);
        philox_normal2(out[0], out[1], &z0, &z1);
        p[i] = z0 * std;
        if (i + 1 < n) p[i + 1] = z1 * std;
    }
}

static float *randn(size_t n, float std, uint32_t stream) {
    float *p = mem_alloc_floats(MEM_OTHER, n ? n : 1, "moe bench tensor");
    fill_randn(p, n, std, stream);
    return p;
}

static float *zeros(size_t n) {
    float *p = mem_alloc_floats(MEM_OTHER, n ? n : 1, "moe bench tensor");
    memset(p, 0, (n ? n : 1) * sizeof(float));
    return p;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The parts timed, per variant and round. */
enum { LAYER_FWD, LAYER_BWD, LAYER_ALL, EXP_FWD, EXP_BWD, EXP_ALL, PARTS };

int main(int argc, char **argv) {
    opts o;
    parse(&o, argc, argv);
    const int threads = omp_get_max_threads();
    gemm_set_threads(threads);
    denormals_apply_team(DENORMALS_FLUSH, threads);

    transformer_config cfg[2] = {config_of(&o, 0), config_of(&o, 1)};
    const transformer_config *c0 = &cfg[0];
    const size_t N = (size_t)o.N, C = (size_t)o.C, E = (size_t)o.E, F = (size_t)o.F;
    const size_t FC1 = (size_t)tc_expert_fc1_width(c0);
    const uint32_t s = (uint32_t)o.seed * 16;
    const float wstd = 1.0f / sqrtf((float)C), fstd = 1.0f / sqrtf((float)F);

    /* tokens: unit normal noise + skew x one direction shared by all tokens */
    float *x = randn(N * C, 1.0f, s), *dir = randn(C, o.skew, s + 7);
    for (size_t i = 0; i < N * C; i++) x[i] += dir[i % C];
    layer_weights w = {.router_w = randn(E * C, wstd, s + 1),
                       .experts_fc1_w = randn(E * FC1 * C, wstd, s + 2),
                       .experts_fc2_w = randn(E * C * F, fstd, s + 3)};
    layer_weights g = {.router_w = zeros(E * C), .experts_fc1_w = zeros(E * FC1 * C),
                       .experts_fc2_w = zeros(E * C * F)};
    float *dout = randn(N * C, 1.0f, s + 6), *out = zeros(N * C), *din = zeros(N * C);
    moe_tracker tracker;
    moe_tracker_init(&tracker, 1);
    layer_ctx ctx[2];
    layer_workspace ws = {0}; /* one process: the layer needs none of its buffers */
    for (int v = 0; v < 2; v++)
        ctx[v] = (layer_ctx){.cfg = &cfg[v], .B = 1, .T = o.N, .T_valid = o.N, .training = 1,
                             .key = {.seed = 99, .iteration = 3, .microbatch = 1},
                             .moe_tracker = &tracker, .moe_grad_scale = 1.0f};

    /* the bits: the layer once per variant from zeroed gradients */
    const size_t n_fc1 = E * FC1 * C, n_fc2 = E * C * F;
    float *ref[5] = {zeros(N * C), zeros(N * C), zeros(E * C), zeros(n_fc1), zeros(n_fc2)};
    const size_t ref_n[5] = {N * C, N * C, E * C, n_fc1, n_fc2};
    const char *ref_name[5] = {"out", "din", "drouter", "dfc1", "dfc2"};
    char differ[128] = "";
    double worst = 0; /* the largest max |difference| / max |value| of a tensor */
    for (int v = 0; v < 2 && o.only < 0; v++) {
        memset(g.router_w, 0, E * C * sizeof(float));
        memset(g.experts_fc1_w, 0, n_fc1 * sizeof(float));
        memset(g.experts_fc2_w, 0, n_fc2 * sizeof(float));
        moe_saved m = {0};
        moe_layer_forward(&ctx[v], 0, &w, &ws, &m, x, out);
        moe_layer_backward(&ctx[v], 0, &w, &g, &ws, &m, x, dout, din);
        const float *got[5] = {out, din, g.router_w, g.experts_fc1_w, g.experts_fc2_w};
        for (int t = 0; t < 5; t++) {
            if (v == 0)
                memcpy(ref[t], got[t], ref_n[t] * sizeof(float));
            else if (memcmp(ref[t], got[t], ref_n[t] * sizeof(float))) {
                snprintf(differ + strlen(differ), sizeof differ - strlen(differ), "%s%s",
                         differ[0] ? "," : "", ref_name[t]);
                double dmax = 0, vmax = 0;
                for (size_t i = 0; i < ref_n[t]; i++) {
                    dmax = fmax(dmax, fabs((double)ref[t][i] - got[t][i]));
                    vmax = fmax(vmax, fabs((double)ref[t][i]));
                }
                worst = fmax(worst, vmax > 0 ? dmax / vmax : dmax);
            }
        }
    }

    /* the experts alone: the rows of one routing, kept */
    moe_saved keep = {0};
    moe_layer_forward(&ctx[0], 0, &w, &ws, &keep, x, out);
    const size_t R = (size_t)keep.R_exp;
    const moe_expert_rows rows_of = {o.E, keep.exp_begin};
    int rmin = o.N * o.k, rmax = 0;
    for (int e = 0; e < o.E; e++) {
        const int n = keep.exp_begin[e + 1] - keep.exp_begin[e];
        rmin = n < rmin ? n : rmin;
        rmax = n > rmax ? n : rmax;
    }
    if (o.rows) {
        printf("# rows per expert:");
        for (int e = 0; e < o.E; e++) printf(" %d", keep.exp_begin[e + 1] - keep.exp_begin[e]);
        printf("\n");
    }
    float *efc1 = zeros(R * FC1), *eact = zeros(R * F), *eout = zeros(R * C);
    float *edact = zeros(R * FC1), *edfc1 = zeros(R * FC1), *edrows = zeros(R * C);
    float *edy = randn(R * C, 1.0f, s + 8);
    const moe_expert_weights ew = {linear_w32(w.experts_fc1_w), linear_w32(w.experts_fc2_w)};
    const moe_expert_weights eg = {linear_w32(g.experts_fc1_w), linear_w32(g.experts_fc2_w)};

    double *t[2][PARTS];
    for (int v = 0; v < 2; v++)
        for (int p = 0; p < PARTS; p++) t[v][p] = calloc((size_t)o.rounds, sizeof(double));
    for (int r = -1; r < o.rounds; r++) { /* round -1: warm-up */
        for (int i = 0; i < 2; i++) {
            const int v = (r & 1) ? 1 - i : i;
            if (o.only >= 0 && v != o.only) continue;
            moe_saved m = {0};
            double t0 = bench_now();
            moe_layer_forward(&ctx[v], 0, &w, &ws, &m, x, out);
            double t1 = bench_now();
            moe_layer_backward(&ctx[v], 0, &w, &g, &ws, &m, x, dout, din);
            double t2 = bench_now();
            moe_experts_forward(&cfg[v], ew, rows_of, keep.rows, efc1, eact, eout);
            double t3 = bench_now();
            moe_experts_backward(&cfg[v], ew, eg, rows_of, keep.rows, efc1, eact, edy, edact,
                                 edfc1, edrows);
            double t4 = bench_now();
            if (r < 0) continue;
            t[v][LAYER_FWD][r] = t1 - t0, t[v][LAYER_BWD][r] = t2 - t1;
            t[v][LAYER_ALL][r] = t2 - t0;
            t[v][EXP_FWD][r] = t3 - t2, t[v][EXP_BWD][r] = t4 - t3, t[v][EXP_ALL][r] = t4 - t2;
        }
    }
    double med[2][PARTS], best[2][PARTS]; /* median() sorts: best is then the first */
    for (int v = 0; v < 2; v++)
        for (int p = 0; p < PARTS; p++) {
            med[v][p] = 1e3 * median(t[v][p], o.rounds);
            best[v][p] = 1e3 * t[v][p][0];
        }
    if (o.only >= 0) {
        const int v = o.only;
        printf("%-7s %d threads C %d F %d E %d k %d N %d skew %.1f: median ms layer fwd %.1f bwd "
               "%.1f, experts fwd %.1f bwd %.1f\n", v ? "grouped" : "loop", threads, o.C, o.F,
               o.E, o.k, o.N, o.skew, med[v][LAYER_FWD], med[v][LAYER_BWD], med[v][EXP_FWD],
               med[v][EXP_BWD]);
        return 0;
    }
    /* the experts' GEMM FLOPs: forward fc1 + fc2, backward twice that */
    const double gflop = 3.0 * 2.0 * (double)R * (double)C * (double)(FC1 + F) * 1e-9;

    if (o.header) {
        printf("# BLAS: %s; kernels %s; %d threads (OpenMP and OpenBLAS); denormals flushed\n",
               gemm_blas_config(), gemm_blas_kernels(), threads);
        printf("%-40s | %-32s | %-32s | %-13s | %-11s |\n", "",
               "layer fwd+bwd: median ms, x", "experts fwd+bwd: median ms, x", "experts x",
               "experts");
        printf("%-3s %-4s %-4s %-3s %-2s %-4s %-4s %-9s | %7s %7s %7s %7s | %7s %7s %7s %7s "
               "| %6s %6s | %-11s | %s\n",
               "thr", "C", "F", "E", "k", "N", "skew", "rows/e", "loop", "grouped", "x med",
               "x best", "loop", "grouped", "x med", "x best", "fwd", "bwd", "GFLOP/s l/g",
               "bits loop vs grouped");
    }
    char rows_range[32], bits[160];
    snprintf(rows_range, sizeof rows_range, "%d-%d", rmin, rmax);
    if (differ[0])
        snprintf(bits, sizeof bits, "DIFFER: %s (max |diff| / max |value| %.1e)", differ, worst);
    else
        snprintf(bits, sizeof bits, "identical");
    printf("%-3d %-4d %-4d %-3d %-2d %-4d %-4.1f %-9s | %7.1f %7.1f %6.2fx %6.2fx | %7.1f %7.1f "
           "%6.2fx %6.2fx | %5.2fx %5.2fx | %5.0f %5.0f | %s\n",
           threads, o.C, o.F, o.E, o.k, o.N, o.skew, rows_range, med[0][LAYER_ALL],
           med[1][LAYER_ALL], med[0][LAYER_ALL] / med[1][LAYER_ALL],
           best[0][LAYER_ALL] / best[1][LAYER_ALL], med[0][EXP_ALL], med[1][EXP_ALL],
           med[0][EXP_ALL] / med[1][EXP_ALL], best[0][EXP_ALL] / best[1][EXP_ALL],
           med[0][EXP_FWD] / med[1][EXP_FWD], med[0][EXP_BWD] / med[1][EXP_BWD],
           gflop / (1e-3 * med[0][EXP_ALL]), gflop / (1e-3 * med[1][EXP_ALL]), bits);
    if (o.parts)
        for (int v = 0; v < 2; v++)
            printf("#   %-7s ms: layer fwd %.1f bwd %.1f; experts fwd %.1f bwd %.1f\n",
                   v ? "grouped" : "loop", med[v][LAYER_FWD], med[v][LAYER_BWD], med[v][EXP_FWD],
                   med[v][EXP_BWD]);
    fflush(stdout);
    moe_saved_release(&keep);
    moe_tracker_free(&tracker);
    return 0;
}
