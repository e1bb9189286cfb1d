/* The one place that calls BLAS. Row-major throughout. Callers that call gemm() from every
 * thread of their own OpenMP team (attention) bracket the region with gemm_serial_begin/end,
 * see gemm.h. */
#include "core/kernels/gemm.h"

#include <cblas.h>

/* C[M,N] = alpha * op(A) @ op(B) + beta * C;  op(A) is [M,K], op(B) is [K,N]. */
void gemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
          const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0) { /* BLAS would scale C by beta; do the same without touching A, B */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
        return;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
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
