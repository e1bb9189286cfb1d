/* The one place that calls BLAS. Row-major throughout. Inside an OpenMP parallel region the
 * OpenMP build of OpenBLAS runs single-threaded, so callers (attention) may call gemm() from
 * every thread of their own team. */
#include "core/kernels/gemm.h"

#include <cblas.h>

/* C[M,N] = alpha * op(A) @ op(B) + beta * C;  op(A) is [M,K], op(B) is [K,N]. */
void gemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
          const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { /* BLAS would scale C by beta; do the same without touching A, B */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
        return;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
