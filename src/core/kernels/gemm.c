/* The one place that calls BLAS. Row-major throughout. Callers that call gemm() from every
 * thread of their own OpenMP team (attention) bracket the region with gemm_serial_begin/end,
 * see gemm.h. */
#include "core/kernels/gemm.h"

#include <cblas.h>

/* C[M,N] = alpha * op(A) @ op(B) + beta * C;  op(A) is [M,K], op(B) is [K,N]. */
void gemm(gemm_dims d, float alpha, gemm_in A, gemm_in B, float beta, gemm_out C) {
    if (d.M <= 0 || d.N <= 0)
        return;
    if (d.K <= 0) { /* BLAS would scale C by beta; do the same without touching A, B */
        for (int i = 0; i < d.M; i++)
            for (int j = 0; j < d.N; j++) {
                float *c = C.p + (size_t)i * C.ld + j;
                *c = beta == 0.0f ? 0.0f : beta * *c;
            }
        return;
    }
    cblas_sgemm(CblasRowMajor, A.trans ? CblasTrans : CblasNoTrans,
                B.trans ? CblasTrans : CblasNoTrans, d.M, d.N, d.K, alpha, A.p, A.ld, B.p, B.ld,
                beta, C.p, C.ld);
}

int gemm_serial_begin(void) {
    const int saved = openblas_get_num_threads();
    if (saved != 1)
        openblas_set_num_threads(1);
    return saved;
}

void gemm_serial_end(int saved_threads) {
    if (saved_threads != 1)
        openblas_set_num_threads(saved_threads);
}

void gemm_set_threads(int threads) { openblas_set_num_threads(threads < 1 ? 1 : threads); }
const char *gemm_blas_config(void) { return openblas_get_config(); }
const char *gemm_blas_kernels(void) { return openblas_get_corename(); }
