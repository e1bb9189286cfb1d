/* Cost of sequence parallelism's row plan (src/core/tensor_parallel/comm_overlap.h): every GEMM
 * over the gathered token rows runs once per piece of each rank's shard, with or without
 * --tp-comm-overlap, so that both paths make the same BLAS calls and get the same bits on any
 * BLAS. Against one GEMM over all rows, each piece re-packs the weight matrix.
 *
 * For each linear of a GPT layer at TP = t (this rank's columns/rows), forward (NT) and input
 * gradient (NN) are timed as one call over N rows and as t * pieces calls over the pieces; the
 * modes alternate call by call so that machine noise hits them alike, and the best of each
 * counts. Row-major, fp32, OpenBLAS as megadlm links it.
 *
 * Usage: row_plan_bench N H FFN VOCAB T PIECES [seconds=1]
 * Output: `linear pass whole_ms plan_ms ratio` per case and the total ratio. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static float *filled(size_t n) {
    float *p = malloc(n * sizeof(float));
    if (!p) { perror("malloc"); exit(1); }
    for (size_t i = 0; i < n; i++) p[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    return p;
}

/* forward: out[rows, OC] = in[rows, C] @ w[OC, C]^T; dgrad: din[rows, C] += dout[rows, OC] @ w */
static void pass(int dgrad, int row0, int rows, int C, int OC, const float *x, const float *w,
                 float *y) {
    if (!dgrad)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, OC, C, 1.0f,
                    x + (size_t)row0 * C, C, w, C, 0.0f, y + (size_t)row0 * OC, OC);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, C, OC, 1.0f,
                    x + (size_t)row0 * OC, OC, w, C, 1.0f, y + (size_t)row0 * C, C);
}

static double timed(int dgrad, int plan, int N, int t, int pieces, int C, int OC, const float *x,
                    const float *w, float *y) {
    double t0 = now();
    if (!plan) {
        pass(dgrad, 0, N, C, OC, x, w, y);
    } else {
        int Ns = N / t;
        for (int q = 0; q < t; q++)
            for (int i = 0; i < pieces; i++) {
                int lo = (int)((long)Ns * i / pieces), hi = (int)((long)Ns * (i + 1) / pieces);
                pass(dgrad, q * Ns + lo, hi - lo, C, OC, x, w, y);
            }
    }
    return now() - t0;
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: row_plan_bench N H FFN VOCAB T PIECES [seconds]\n");
        return 2;
    }
    int N = atoi(argv[1]), H = atoi(argv[2]), F = atoi(argv[3]), V = atoi(argv[4]);
    int t = atoi(argv[5]), pieces = atoi(argv[6]);
    double seconds = argc > 7 ? atof(argv[7]) : 1.0;
    /* (name, C = input width, OC = output width) of this rank's part of each linear */
    struct { const char *name; int C, OC; } lin[] = {
        {"linear_qkv", H, 3 * H / t}, {"linear_proj", H / t, H}, {"linear_fc1", H, F / t},
        {"linear_fc2", F / t, H},     {"output_layer", H, V / t}};
    printf("# N=%d tokens, h=%d, ffn=%d, vocab=%d, TP=%d, %d pieces per shard | %s\n", N, H, F, V,
           t, pieces, openblas_get_config());
    double total[2] = {0, 0};
    for (size_t l = 0; l < sizeof lin / sizeof *lin; l++) {
        int C = lin[l].C, OC = lin[l].OC;
        float *w = filled((size_t)OC * C);
        float *x = filled((size_t)N * (C > OC ? C : OC)), *y = filled((size_t)N * (C > OC ? C : OC));
        for (int dgrad = 0; dgrad < 2; dgrad++) {
            double best[2] = {1e30, 1e30}, t0 = now();
            int calls = 0;
            timed(dgrad, 0, N, t, pieces, C, OC, x, w, y); /* warm-up */
            while (now() - t0 < seconds || calls < 5) {
                for (int plan = 0; plan < 2; plan++) {
                    double s = timed(dgrad, plan, N, t, pieces, C, OC, x, w, y);
                    if (s < best[plan]) best[plan] = s;
                }
                calls++;
            }
            total[0] += best[0];
            total[1] += best[1];
            printf("%-12s %-7s whole %8.3f ms  plan %8.3f ms  ratio %.3f\n", lin[l].name,
                   dgrad ? "dgrad" : "forward", 1e3 * best[0], 1e3 * best[1], best[1] / best[0]);
        }
        free(w), free(x), free(y);
    }
    printf("all          both    whole %8.3f ms  plan %8.3f ms  ratio %.3f\n", 1e3 * total[0],
           1e3 * total[1], total[1] / total[0]);
    return 0;
}
