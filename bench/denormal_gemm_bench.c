/* The GEMMs a diffusion step feeds denormal operands (docs/architecture/determinism.md, "Denormals"), timed
 * with normal operands and with a fraction of denormal ones, with denormals kept (IEEE gradual
 * underflow) and flushed (megadlm's default, core/util/denormals.h). Prints, per shape and
 * mode, the time ratio denormal / normal operands: a cliff when kept on CPUs that take a
 * microcode assist per denormal, 1.00 when flushed.
 *
 * usage: denormal_gemm_bench [SECONDS_PER_CASE=0.5] [DENORMAL_FRACTION=0.06] */
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "bench_util.h"
#include "core/kernels/gemm.h"
#include "core/util/denormals.h"

/* The README run's shapes (hidden 256, 4 heads of 64, s = 128, micro-batch 16, vocab 257): the
 * softmax backward's dS into dQ = dS K and dK = dS^T Q (64-row blocks), and the output layer's
 * input gradient dX = dlogits W (the logit gradients carry the denormals). */
static const gemm_case k_cases[] = {
    {"attention dQ = dS K   (64x64x128)", 0, 0, 64, 64, 128, 1.0f},
    {"attention dK = dS^T Q (64x64x128)", 1, 0, 64, 64, 128, 1.0f},
    {"output layer dX = dlogits W (2048x256x257)", 0, 0, 2048, 256, 257, 0.0f},
};
#define NUM_CASES (int)(sizeof k_cases / sizeof k_cases[0])

/* Every 1/fraction-th entry of A made denormal (2^-130 .. 2^-127 with A's signs). */
static void sprinkle(float *A, size_t n, double fraction) {
    const size_t every = fraction > 0 ? (size_t)(1.0 / fraction + 0.5) : 0;
    for (size_t i = 0; every && i < n; i += every) {
        uint32_t bits = 0x00100000u + (uint32_t)(i % 0x300000u);
        if (A[i] < 0) bits |= 0x80000000u;
        memcpy(&A[i], &bits, sizeof bits);
    }
}

/* Seconds per call, the best of repeated calls over `seconds`. */
static double time_case(const gemm_case *c, const float *A, const float *B, float *C,
                        double seconds) {
    const int lda = c->ta ? c->M : c->K, ldb = c->tb ? c->K : c->N;
    double best = 1e30, start = bench_now();
    do {
        const double t0 = bench_now();
        for (int r = 0; r < 16; r++)
            gemm((gemm_dims){c->M, c->N, c->K}, 1.0f, (gemm_in){A, lda, c->ta},
                 (gemm_in){B, ldb, c->tb}, c->beta, gemm_o(C, c->N));
        const double t = (bench_now() - t0) / 16;
        if (t < best) best = t;
    } while (bench_now() - start < seconds);
    return best;
}

int main(int argc, char **argv) {
    const double seconds = argc > 1 ? atof(argv[1]) : 0.5;
    const double fraction = argc > 2 ? atof(argv[2]) : 0.06;
    /* one thread: the attention's GEMMs run one per OpenMP thread (gemm_serial_begin) */
    gemm_set_threads(1);
    printf("%-44s %12s %12s %12s %12s\n", "GEMM (fraction of A denormal)", "kept: normal",
           "denormal", "ratio", "flushed ratio");
    for (int i = 0; i < NUM_CASES; i++) {
        const gemm_case *c = &k_cases[i];
        const size_t na = (size_t)c->M * c->K, nb = (size_t)c->K * c->N;
        float *A = bench_filled(na, 1u + i), *Ad = bench_filled(na, 1u + i);
        float *B = bench_filled(nb, 7u + i), *C = bench_filled((size_t)c->M * c->N, 9u);
        sprinkle(Ad, na, fraction);
        double t[2][2];
        for (int mode = 0; mode < 2; mode++) { /* 0: keep, 1: flush */
            denormals_apply_team(mode ? DENORMALS_FLUSH : DENORMALS_KEEP, 1);
            t[mode][0] = time_case(c, A, B, C, seconds);
            t[mode][1] = time_case(c, Ad, B, C, seconds);
        }
        printf("%-44s %10.2f us %10.2f us %12.2f %12.2f\n", c->name, 1e6 * t[0][0],
               1e6 * t[0][1], t[0][1] / t[0][0], t[1][1] / t[1][0]);
        free(A), free(Ad), free(B), free(C);
    }
    printf("(fraction of A's entries denormal: %.3f; one thread; ratio = time with those "
           "operands / time with normal ones)\n", fraction);
    return 0;
}
