/* Row-major GEMM wrapper over OpenBLAS cblas_sgemm: the only place that calls BLAS.
 * C[M,N] = alpha * op(A) @ op(B) + beta * C, with op = transpose when trans_* is nonzero;
 * lda/ldb/ldc are row strides (in elements) of the matrices as stored. */
#ifndef MEGADLM_CORE_KERNELS_GEMM_H
#define MEGADLM_CORE_KERNELS_GEMM_H

void gemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
          const float *B, int ldb, float beta, float *C, int ldc);

/* Calling gemm() from every thread of an OpenMP parallel region (attention does, one small
 * GEMM per (batch, head) per thread): OpenBLAS must then run single-threaded per call. The
 * OpenMP build of OpenBLAS 0.3.21 (Debian/Ubuntu) does NOT do this by itself: inside a
 * parallel region it still splits each call into nthreads chunks, and concurrent calls then
 * serialize and spin on its one shared thread buffer (measured 30x slower at 2 threads).
 * Bracket such a region with these: gemm_serial_begin() sets OpenBLAS to 1 thread and returns
 * the previous count, gemm_serial_end() restores it. Not reentrant; call from serial code. */
int gemm_serial_begin(void);
void gemm_serial_end(int saved_threads);

/* OpenBLAS's thread count outside such regions (core/threads.c decides it). */
void gemm_set_threads(int threads);
/* The BLAS library's build string and the kernel set it runs (OpenBLAS's DYNAMIC_ARCH builds
 * pick it from the CPU, or from OPENBLAS_CORETYPE): the log names it, because a product's last
 * bits depend on it. */
const char *gemm_blas_config(void);
const char *gemm_blas_kernels(void);

#endif
