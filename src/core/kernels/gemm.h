/* Row-major GEMM wrapper over OpenBLAS cblas_sgemm: the only place that calls BLAS.
 * C[M,N] = alpha * op(A) @ op(B) + beta * C, with op(A) [M,K] and op(B) [K,N]. Each matrix is
 * passed with its row stride as stored (in elements); an input says whether it enters
 * transposed, so a call reads like the formula: gemm(dims, a, gemm_n(A, lda), gemm_t(B, ldb),
 * b, gemm_o(C, ldc)) is C = a * A @ B^T + b * C. */
#ifndef MEGADLM_CORE_KERNELS_GEMM_H
#define MEGADLM_CORE_KERNELS_GEMM_H

typedef struct {
    int M, N, K;
} gemm_dims;

/* An input matrix: data, row stride, transposed (op = transpose) or not. */
typedef struct {
    const float *p;
    int ld;
    int trans;
} gemm_in;

/* The output matrix: data, row stride. */
typedef struct {
    float *p;
    int ld;
} gemm_out;

static inline gemm_in gemm_n(const float *p, int ld) { return (gemm_in){p, ld, 0}; }
static inline gemm_in gemm_t(const float *p, int ld) { return (gemm_in){p, ld, 1}; }
static inline gemm_out gemm_o(float *p, int ld) { return (gemm_out){p, ld}; }

void gemm(gemm_dims d, float alpha, gemm_in A, gemm_in B, float beta, gemm_out C);

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
