/* Row-major GEMM wrapper over OpenBLAS cblas_sgemm: the only place that calls BLAS.
 * C[M,N] = alpha * op(A) @ op(B) + beta * C, with op = transpose when trans_* is nonzero;
 * lda/ldb/ldc are row strides (in elements) of the matrices as stored. */
#ifndef MEGADLM_CORE_KERNELS_GEMM_H
#define MEGADLM_CORE_KERNELS_GEMM_H

void gemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
          const float *B, int ldb, float beta, float *C, int ldc);

#endif
