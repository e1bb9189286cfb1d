/* gemm_bf16 against gemm (fp32 sgemm) on GPT-2 124M training shapes (B*s = 1024 tokens,
 * h = 768, ffn = 3072, padded vocabulary 50304), row-major, as megadlm's linear layer calls them:
 *   qkv    fwd   out = x @ W^T     NT  M=1024 N=2304  K=768
 *   fc1    fwd                     NT  M=1024 N=3072  K=768
 *   fc2    fwd                     NT  M=1024 N=768   K=3072
 *   head   fwd                     NT  M=1024 N=50304 K=768
 *   fc1    dinp  dx += dy @ W      NN  M=1024 N=768   K=3072
 *   fc1    dwgt  dW += dy^T @ x    TN  M=3072 N=768   K=1024
 * and as --bf16 runs them: the linear layer rounds its activation operand to bf16 in chunks of
 * 166 rows (its 16 Mi-element workspace over 2 x the widest linear, the vocabulary's 50304), so
 * each product above is 7 calls with M (or K, for wgrad) = 166 (names ending in /166):
 *   qkv fwd, fc2 fwd, head fwd, head dinp (NN M=166 N=768 K=50304), head dwgt (TN M=50304 N=768
 *   K=166), fc1 dwgt.
 * For each shape: sgemm on fp32 copies of the operands, and gemm_bf16 on each of its paths that
 * runs here (oneDNN, fallback); the calls alternate (sgemm, path 1, path 2, sgemm, ...) so that
 * the noise of a shared machine hits them alike; the best call of each counts, after one
 * warm-up, over at least `seconds` and 3 calls. Threads: OMP_NUM_THREADS (OpenMP, OpenBLAS and
 * oneDNN alike).
 *
 * Built by CMake (target bf16_gemm_bench, not built by default); bench/bench_bf16_gemm.sh runs it.
 * Usage: bf16_gemm_bench [seconds=1] [only]   (only: measure the shapes whose name contains it)
 * Output: which path auto picks, then per shape `name layout M N K sgemm_ms` and for each path
 * `path_ms ratio` (ratio = gemm_bf16 time / sgemm time), then the geometric mean of the ratios. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

#include "core/kernels/bf16.h"
#include "core/kernels/gemm.h"

static bf16 *to_bf16(const float *x, size_t n) {
    bf16 *p = malloc(n * sizeof(bf16));
    if (!p) {
        perror("malloc");
        exit(1);
    }
    bf16_from_f32(p, x, n);
    return p;
}

int main(int argc, char **argv) {
    const double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    const char *only = argc > 2 ? argv[2] : "";
    const gemm_case cases[] = {
        {"qkv.fwd", 0, 1, 1024, 2304, 768, 0.0f},   {"fc1.fwd", 0, 1, 1024, 3072, 768, 0.0f},
        {"fc2.fwd", 0, 1, 1024, 768, 3072, 0.0f},   {"head.fwd", 0, 1, 1024, 50304, 768, 0.0f},
        {"fc1.dinp", 0, 0, 1024, 768, 3072, 1.0f},  {"fc1.dwgt", 1, 0, 3072, 768, 1024, 1.0f},
        {"qkv.fwd/166", 0, 1, 166, 2304, 768, 0.0f}, {"fc2.fwd/166", 0, 1, 166, 768, 3072, 0.0f},
        {"head.fwd/166", 0, 1, 166, 50304, 768, 0.0f},
        {"head.dinp/166", 0, 0, 166, 768, 50304, 1.0f},
        {"head.dwgt/166", 1, 0, 50304, 768, 166, 1.0f},
        {"fc1.dwgt/166", 1, 0, 3072, 768, 166, 1.0f},
    };
    const int ncases = (int)(sizeof cases / sizeof cases[0]);
    char err[256];
    if (gemm_bf16_init(err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    printf("# BLAS: %s | kernels %s\n", gemm_blas_config(), gemm_blas_kernels());
    printf("# auto: %s\n", gemm_bf16_describe());
    gemm_bf16_path paths[2];
    const char *names[2];
    char lines[2][256];
    int npaths = 0;
    const gemm_bf16_path all[2] = {GEMM_BF16_ONEDNN, GEMM_BF16_FALLBACK};
    for (int p = 0; p < 2; p++) {
        if (gemm_bf16_use(all[p], err, sizeof err)) {
            printf("# %s: not measured: %s\n", p == 0 ? "onednn" : "fallback", err);
            continue;
        }
        snprintf(lines[npaths], sizeof lines[npaths], "%s", gemm_bf16_describe());
        printf("# %s: %s\n", p == 0 ? "onednn" : "fallback", lines[npaths]);
        names[npaths] = p == 0 ? "onednn" : "fallback";
        paths[npaths++] = all[p];
    }
    printf("# threads %d | best call over %.1f s per shape | ratio = bf16 time / sgemm time\n",
           omp_get_max_threads(), seconds);
    printf("%-13s %-3s %5s %6s %5s %9s", "shape", "op", "M", "N", "K", "sgemm_ms");
    for (int p = 0; p < npaths; p++) printf(" %11s_ms %6s", names[p], "ratio");
    printf("\n");
    double logsum[2] = {0, 0};
    int measured = 0;
    for (int c = 0; c < ncases; c++) {
        const gemm_case *g = &cases[c];
        if (!strstr(g->name, only)) continue;
        measured++;
        /* op(A) is [M,K], op(B) is [K,N]; stored A is [K,M] when transposed, B is [N,K]. */
        const int lda = g->ta ? g->M : g->K, ldb = g->tb ? g->K : g->N;
        const size_t na = (size_t)g->M * g->K, nb = (size_t)g->K * g->N, nc = (size_t)g->M * g->N;
        float *A = bench_filled(na, 1u + c), *B = bench_filled(nb, 7u + c), *C = bench_filled(nc, 13u + c);
        bf16 *A16 = to_bf16(A, na), *B16 = to_bf16(B, nb);
        const gemm_dims d = {g->M, g->N, g->K};
        double best[3] = {1e30, 1e30, 1e30}, start = 0.0;
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
        printf("%-13s %s%s  %5d %6d %5d %9.2f", g->name, g->ta ? "T" : "N", g->tb ? "T" : "N",
               g->M, g->N, g->K, best[0] * 1e3);
        for (int p = 0; p < npaths; p++) {
            printf(" %14.2f %6.3f", best[p + 1] * 1e3, best[p + 1] / best[0]);
            logsum[p] += log(best[p + 1] / best[0]);
        }
        printf("\n");
        free(A);
        free(B);
        free(C);
        free(A16);
        free(B16);
    }
    printf("%-13s %-3s %5s %6s %5s %9s", "geomean", "", "", "", "", "");
    for (int p = 0; p < npaths; p++) printf(" %14s %6.3f", "", exp(logsum[p] / (measured ? measured : 1)));
    printf("\n");
    return 0;
}
