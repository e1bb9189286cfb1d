/* gemm_bf16 against gemm (fp32 sgemm) on every bf16 GEMM of a GPT-2 124M training step with
 * --bf16 (12 layers, B*s = 1024 tokens, h = 768, ffn = 3072, padded vocabulary 50304), row-major,
 * as megadlm's linear layer calls them, with the calls each shape gets per step:
 *   forward     out = x @ W^T        NT  M=1024 N=OC K=C     (qkv 2304x768, proj 768x768,
 *   input grad  dx += dy @ W         NN  M=1024 N=C  K=OC     fc1 3072x768, fc2 768x3072:
 *   weight grad dW += dy^T @ x       TN  M=OC   N=C  K=1024   12 calls each)
 * and the output layer (50304 x 768): forward over all rows; backward in 4 blocks of 12576 of its
 * outputs over all rows (its workspace holds 327 rows of both operands, not 1024: linear.c's
 * backward_blocks); the chunk shapes it ran before (3 x 327 + 43 rows) are measured for
 * comparison with 0 calls.
 * bench/bench_bf16_gemm.sh prints the machine's measured compute peaks first (compute_peak.h):
 * each shape's rate is shown as a fraction of the bf16 peak (AMX's where it was measured, else
 * AVX512_BF16's), and the per-step total of each implementation (calls x best time) is the GEMM
 * time of one step at these rates.
 * For each shape: sgemm on fp32 copies of the operands, and gemm_bf16 on each of its paths that
 * runs here (oneDNN's matmul primitive, its BLAS-like call, the fallback); the calls alternate so
 * that the noise of a shared machine hits them alike; the best call of each counts, after one
 * warm-up, over at least `seconds` and 3 calls. Threads: OMP_NUM_THREADS (OpenMP, OpenBLAS and
 * oneDNN alike).
 *
 * Built by CMake (target bf16_gemm_bench, not built by default); bench/bench_bf16_gemm.sh runs it.
 * Usage: bf16_gemm_bench [seconds=1] [only]   (only: measure the shapes whose name contains it) */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "compute_peak.h"

#include "core/kernels/bf16.h"
#include "core/kernels/gemm.h"

#define NPATHS 3

static bf16 *to_bf16(const float *x, size_t n) {
    bf16 *p = malloc(n * sizeof(bf16));
    if (!p) {
        perror("malloc");
        exit(1);
    }
    bf16_from_f32(p, x, n);
    return p;
}

/* A shape of the step and its calls per step. */
typedef struct {
    gemm_case g;
    int calls;
} step_case;

static const step_case k_cases[] = {
    {{"qkv.fwd", 0, 1, 1024, 2304, 768, 0.0f}, 12},   {{"qkv.dinp", 0, 0, 1024, 768, 2304, 1.0f}, 12},
    {{"qkv.dwgt", 1, 0, 2304, 768, 1024, 1.0f}, 12},  {{"proj.fwd", 0, 1, 1024, 768, 768, 0.0f}, 12},
    {{"proj.dinp", 0, 0, 1024, 768, 768, 1.0f}, 12},  {{"proj.dwgt", 1, 0, 768, 768, 1024, 1.0f}, 12},
    {{"fc1.fwd", 0, 1, 1024, 3072, 768, 0.0f}, 12},   {{"fc1.dinp", 0, 0, 1024, 768, 3072, 1.0f}, 12},
    {{"fc1.dwgt", 1, 0, 3072, 768, 1024, 1.0f}, 12},  {{"fc2.fwd", 0, 1, 1024, 768, 3072, 0.0f}, 12},
    {{"fc2.dinp", 0, 0, 1024, 3072, 768, 1.0f}, 12},  {{"fc2.dwgt", 1, 0, 768, 3072, 1024, 1.0f}, 12},
    {{"head.fwd", 0, 1, 1024, 50304, 768, 0.0f}, 1},
    {{"head.dinp/blk", 0, 0, 1024, 768, 12576, 1.0f}, 4},
    {{"head.dwgt/blk", 1, 0, 12576, 768, 1024, 1.0f}, 4},
    /* before: the output layer on chunks of 327 and 43 rows (0 calls: not in the step total) */
    {{"head.fwd/327", 0, 1, 327, 50304, 768, 0.0f}, 0},
    {{"head.fwd/43", 0, 1, 43, 50304, 768, 0.0f}, 0},
    {{"head.dinp/327", 0, 0, 327, 768, 50304, 1.0f}, 0},
    {{"head.dwgt/327", 1, 0, 50304, 768, 327, 1.0f}, 0},
    {{"head.dinp/43", 0, 0, 43, 768, 50304, 1.0f}, 0},
    {{"head.dwgt/43", 1, 0, 50304, 768, 43, 1.0f}, 0},
};

/* Best seconds of sgemm (best[0]) and of each path (best[1..]) on one shape. */
static void measure(const gemm_case *g, int c, const gemm_bf16_path *paths, int npaths,
                    double seconds, double *best) {
    /* op(A) is [M,K], op(B) is [K,N]; stored A is [K,M] when transposed, B is [N,K]. */
    const int lda = g->ta ? g->M : g->K, ldb = g->tb ? g->K : g->N;
    const size_t na = (size_t)g->M * g->K, nb = (size_t)g->K * g->N, nc = (size_t)g->M * g->N;
    float *A = bench_filled(na, 1u + c), *B = bench_filled(nb, 7u + c), *C = bench_filled(nc, 13u + c);
    bf16 *A16 = to_bf16(A, na), *B16 = to_bf16(B, nb);
    const gemm_dims d = {g->M, g->N, g->K};
    char err[256];
    for (int k = 0; k <= npaths; k++) best[k] = 1e30;
    double start = 0.0;
    for (int r = 0; r <= 3 || bench_now() - start < seconds; r++) {
        if (r == 1) start = bench_now();
        for (int k = 0; k <= npaths; k++) {
            double t0 = bench_now();
            if (k == 0) {
                gemm(d, 1.0f, (gemm_in){A, lda, g->ta}, (gemm_in){B, ldb, g->tb}, g->beta,
                     gemm_o(C, g->N));
            } else {
                gemm_bf16_use(paths[k - 1], err, sizeof err);
                t0 = bench_now();
                gemm_bf16(d, 1.0f, (gemm_in_bf16){A16, lda, g->ta},
                          (gemm_in_bf16){B16, ldb, g->tb}, g->beta, gemm_o(C, g->N));
            }
            const double dt = bench_now() - t0;
            if (r > 0 && dt < best[k]) best[k] = dt; /* r == 0 is the warm-up */
        }
    }
    free(A);
    free(B);
    free(C);
    free(A16);
    free(B16);
}

/* The paths that run here, and their lines. */
static int usable_paths(gemm_bf16_path *paths, const char **names) {
    const gemm_bf16_path all[NPATHS] = {GEMM_BF16_ONEDNN_MATMUL, GEMM_BF16_ONEDNN,
                                        GEMM_BF16_FALLBACK};
    const char *all_names[NPATHS] = {"matmul", "onednn", "fallback"};
    char err[256];
    int n = 0;
    for (int p = 0; p < NPATHS; p++) {
        if (gemm_bf16_use(all[p], err, sizeof err)) {
            printf("# %s: not measured: %s\n", all_names[p], err);
            continue;
        }
        printf("# %s: %s\n", all_names[p], gemm_bf16_describe());
        names[n] = all_names[p];
        paths[n++] = all[p];
    }
    return n;
}

int main(int argc, char **argv) {
    const double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    const char *only = argc > 2 ? argv[2] : "";
    const int ncases = (int)(sizeof k_cases / sizeof k_cases[0]);
    char err[256];
    if (gemm_bf16_init(err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    printf("# BLAS: %s | kernels %s\n", gemm_blas_config(), gemm_blas_kernels());
    const peak_result p32 = peak_fp32(0.3), p512 = peak_bf16_avx512(0.3), pamx = peak_bf16_amx(0.3);
    printf("# peak fp32 %.0f GFLOP/s (%s) | bf16 AVX512_BF16 %.0f GFLOP/s (%s) | bf16 AMX %.0f "
           "GFLOP/s (%s)\n", p32.gflops, p32.why, p512.gflops, p512.why, pamx.gflops, pamx.why);
    const double peak = pamx.gflops > 0 ? pamx.gflops : p512.gflops;
    printf("# frac = the rate as a fraction of the bf16 peak (%s, %.0f GFLOP/s); sgemm's of the "
           "fp32 peak\n", pamx.gflops > 0 ? "AMX" : "AVX512_BF16", peak);
    printf("# auto: %s\n", gemm_bf16_describe());
    gemm_bf16_path paths[NPATHS];
    const char *names[NPATHS];
    const int npaths = usable_paths(paths, names);
    printf("# threads %d | best call over %.1f s per shape | ratio = bf16 time / sgemm time\n",
           omp_get_max_threads(), seconds);
    printf("%-13s %-2s %5s %5s %5s %5s %9s %5s", "shape", "op", "M", "N", "K", "calls", "sgemm_ms",
           "frac");
    for (int p = 0; p < npaths; p++) printf(" %9s_ms %5s %5s", names[p], "frac", "ratio");
    printf("\n");
    double logsum[NPATHS + 1] = {0}, step[NPATHS + 1] = {0};
    int measured = 0;
    for (int c = 0; c < ncases; c++) {
        const gemm_case *g = &k_cases[c].g;
        if (!strstr(g->name, only)) continue;
        measured++;
        double best[NPATHS + 1];
        measure(g, c, paths, npaths, seconds, best);
        const double gflop = 2.0 * g->M * g->N * g->K / 1e9;
        printf("%-13s %s%s %5d %5d %5d %5d %9.2f %5.2f", g->name, g->ta ? "T" : "N",
               g->tb ? "T" : "N", g->M, g->N, g->K, k_cases[c].calls, best[0] * 1e3,
               p32.gflops > 0 ? gflop / best[0] / p32.gflops : 0.0);
        for (int k = 0; k <= npaths; k++) step[k] += k_cases[c].calls * best[k];
        for (int p = 1; p <= npaths; p++) {
            printf(" %12.2f %5.2f %5.3f", best[p] * 1e3, peak > 0 ? gflop / best[p] / peak : 0.0,
                   best[p] / best[0]);
            logsum[p] += log(best[p] / best[0]);
        }
        printf("\n");
    }
    printf("%-13s %31s %9.1f %5s", "step (ms)", "calls x best", step[0] * 1e3, "");
    for (int p = 1; p <= npaths; p++) printf(" %12.1f %5s %5.3f", step[p] * 1e3, "", step[p] / step[0]);
    printf("\n%-13s %41s %5s", "geomean", "", "");
    for (int p = 1; p <= npaths; p++)
        printf(" %12s %5s %5.3f", "", "", exp(logsum[p] / (measured ? measured : 1)));
    printf("\n");
    return 0;
}
