/* cblas_sgemm throughput on the GEMM shapes of a GPT-2 124M MLP (B*s = 1024 tokens, h = 768,
 * ffn = 3072), row-major, fp32, in the three layouts megadlm's linear layer uses:
 *   fwd    out  = x  @ W^T      NT  M=1024 N=3072 K=768
 *   dinp   dx  += dy @ W        NN  M=1024 N=768  K=3072
 *   dwgt   dW  += dy^T @ x      TN  M=3072 N=768  K=1024
 * plus the plain NN 1024x768x3072 product (M=1024, N=3072, K=768) that is the bench's reference
 * rate. Each case: one warm-up call, then timed calls until at least `seconds` have passed (and
 * at least 5 calls); the best call counts, since the machine is shared and other loads only ever
 * slow a call down. The mean rate over the timed calls is printed too: what the library
 * sustains back to back on this machine, the fair yardstick for a training step's GEMMs when a
 * shared machine's best call is a burst the step cannot hold. Threads: OpenBLAS's own default (OMP_NUM_THREADS, else all cores).
 *
 * Build: gcc -O2 -fopenmp -I/usr/include/x86_64-linux-gnu/openblas-openmp sgemm_bench.c
 *            -L/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas -o sgemm_bench
 * Usage: sgemm_bench [seconds=1]    Output: one line per case,
 *        `name layout M N K best_gflops mean_gflops`. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench_util.h"

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    const gemm_case cases[] = {
        {"ref", 0, 0, 1024, 3072, 768, 0.0f},  /* the 1024x768x3072 reference product */
        {"fwd", 0, 1, 1024, 3072, 768, 0.0f},  /* linear forward, W is [OC, C] */
        {"dinp", 0, 0, 1024, 768, 3072, 1.0f}, /* linear backward, input gradient */
        {"dwgt", 1, 0, 3072, 768, 1024, 1.0f}, /* linear backward, weight gradient */
    };
    printf("# %s | threads %d | best call over %.1f s per case\n", openblas_get_config(),
           openblas_get_num_threads(), seconds);
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const gemm_case *g = &cases[c];
        /* op(A) is [M,K], op(B) is [K,N]; stored A is [K,M] when transposed, B is [N,K]. */
        int lda = g->ta ? g->M : g->K, ldb = g->tb ? g->K : g->N;
        float *A = bench_filled((size_t)g->M * g->K, 1u + c);
        float *B = bench_filled((size_t)g->K * g->N, 7u + c);
        float *C = bench_filled((size_t)g->M * g->N, 13u + c);
        double best = 1e30, start = 0.0, total = 0.0;
        int timed = 0;
        for (int r = 0; r <= 5 || bench_now() - start < seconds; r++) {
            if (r == 1) start = bench_now();
            double t0 = bench_now();
            cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans,
                        g->tb ? CblasTrans : CblasNoTrans, g->M, g->N, g->K, 1.0f, A, lda, B,
                        ldb, g->beta, C, g->N);
            double dt = bench_now() - t0;
            if (r == 0) continue; /* the warm-up */
            if (dt < best) best = dt;
            total += dt;
            timed++;
        }
        double flop = 2.0 * g->M * g->N * g->K;
        printf("%s %s%s %d %d %d %.1f %.1f\n", g->name, g->ta ? "T" : "N", g->tb ? "T" : "N", g->M,
               g->N, g->K, flop / best / 1e9, flop * timed / total / 1e9);
        free(A);
        free(B);
        free(C);
    }
    return 0;
}
