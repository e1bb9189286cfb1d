/* Row-major GEMM wrapper over OpenBLAS cblas_sgemm (and oneDNN's bf16 GEMM, gemm_bf16 below):
 * the only place that calls BLAS.
 * C[M,N] = alpha * op(A) @ op(B) + beta * C, with op(A) [M,K] and op(B) [K,N]. Each matrix is
 * passed with its row stride as stored (in elements); an input says whether it enters
 * transposed, so a call reads like the formula: gemm(dims, a, gemm_n(A, lda), gemm_t(B, ldb),
 * b, gemm_o(C, ldc)) is C = a * A @ B^T + b * C. */
#ifndef MEGADLM_CORE_KERNELS_GEMM_H
#define MEGADLM_CORE_KERNELS_GEMM_H

#include <stddef.h>

#include "core/kernels/bf16.h"
#include "core/kernels/matrix_views.h"

void gemm(gemm_dims d, float alpha, gemm_in A, gemm_in B, float beta, gemm_out C);

/* ---------------- bf16 operands, fp32 result ----------------
 *
 * gemm_bf16: C[M,N] = alpha * op(A) @ op(B) + beta * C with A and B in bf16 (core/kernels/bf16.h)
 * and C in fp32, the products accumulated in fp32 (every bf16 x bf16 product is exact in fp32,
 * so the result is the fp32-accumulated product of the bf16 values). Same conventions as gemm():
 * row strides as stored, beta = 0 does not read C (NaNs there do not propagate), K = 0 scales C.
 * Three implementations, chosen at run time (never by the compiler's -march):
 *   matmul    oneDNN's matmul primitive, one per call shape, cached (core/kernels/onednn_matmul.h):
 *             brgemm on the AMX tiles where oneDNN may use them, AVX512_BF16 brgemm otherwise;
 *             calls from inside a parallel region, and shapes oneDNN has only reference code
 *             for, take the BLAS-like call below;
 *   oneDNN    libdnnl's dnnl_gemm_bf16bf16f32, on CPUs whose bf16 instructions oneDNN uses
 *             (AVX512_BF16, AMX: it reports them, AMX only once the OS has granted it);
 *   fallback  A and B widened to fp32 into a fixed workspace (each once per call where it
 *             fits, in tiles otherwise), then cblas_sgemm per tile, over the whole K where
 *             the workspace allows (else K steps that depend on the shape only): the result
 *             is OpenBLAS's sgemm of the widened values up to the order of the fp32 sums.
 * (Debian's OpenBLAS 0.3.21 is built without BUILD_BFLOAT16: it exports no cblas_sbgemm, only
 * its internal support_avx512_bf16 probe, so OpenBLAS cannot be the bf16 path.)
 * auto takes oneDNN's BLAS-like call where the CPU has bf16 units (on AVX512_BF16 it runs at the
 * measured VDPBF16PS peak and faster than matmul; where oneDNN has AMX a first measurement found
 * matmul no faster: bench/bench_bf16_gemm.sh prints both against the measured tile peak), the
 * fallback elsewhere.
 * The environment variable MEGADLM_BF16_GEMM = auto (default) | onednn-matmul | onednn |
 * fallback forces one.
 * Callable from every thread of a parallel region like gemm() (bracket it with
 * gemm_serial_begin/end); oneDNN then runs each call on its calling thread (its OpenMP runtime
 * is libgomp, ours: it sees it is inside a parallel region). */
void gemm_bf16(gemm_dims d, float alpha, gemm_in_bf16 A, gemm_in_bf16 B, float beta, gemm_out C);

typedef enum {
    GEMM_BF16_AUTO = 0, /* oneDNN where the CPU has bf16 units and oneDNN runs, else fallback */
    GEMM_BF16_FALLBACK,
    GEMM_BF16_ONEDNN,        /* oneDNN's BLAS-like dnnl_gemm_bf16bf16f32 */
    GEMM_BF16_ONEDNN_MATMUL, /* oneDNN's matmul primitive, cached per shape (onednn_matmul.h) */
} gemm_bf16_path;

/* Picks the implementation from MEGADLM_BF16_GEMM and allocates the fallback's workspace, once
 * (later calls return at once): call it from serial code before the first gemm_bf16 (which
 * otherwise does it itself, ending the job on a bad value) so that a training step does not
 * allocate. 0, or -1 with a message: an unknown value, or onednn forced where it cannot run. */
int gemm_bf16_init(char *err, size_t errlen);
/* Uses `path` from now on (tests, benchmarks; AUTO decides again); serial code only.
 * 0, or -1 with a message if it cannot run here (oneDNN not built in, or not on this CPU). */
int gemm_bf16_use(gemm_bf16_path path, char *err, size_t errlen);
/* The implementation in use (FALLBACK, ONEDNN or ONEDNN_MATMUL; initializes if needed). */
gemm_bf16_path gemm_bf16_current(void);
/* One line for the log, e.g. "bf16 GEMM: oneDNN 2.6.3 dnnl_gemm_bf16bf16f32 (CPU ISA
 * avx512_core_amx; auto)" or "bf16 GEMM: fp32 sgemm on converted tiles (auto: no AVX512_BF16
 * or AMX)". */
const char *gemm_bf16_describe(void);
/* Bytes of the fallback's workspace (0 until it is allocated): for the memory report. */
size_t gemm_bf16_workspace_bytes(void);
/* Tests: the fallback uses at most `floats` of its workspace per call (at least 2 * 256; 0:
 * all of it), so that small shapes cross the edges of its tiles. */
void gemm_bf16_limit_workspace(size_t floats);
/* 1 if this build has oneDNN (whether or not it runs on this CPU). */
int gemm_bf16_onednn_built(void);

/* ---------------- 16-bit operands of the run's format ----------------
 *
 * gemm_half: gemm_bf16 for HALF_BF16; for HALF_FP16 the same product of IEEE fp16 operands
 * (bit patterns, core/kernels/bf16.h), always by the fallback's method: tiles converted to fp32,
 * cblas_sgemm per tile (every fp16 x fp16 product is exact in fp32 too: 11-bit significands,
 * and the smallest product of subnormals, 2^-48, is a normal fp32). oneDNN's GEMM API has no
 * fp16 operands, and MEGADLM_BF16_GEMM does not apply to fp16. Same conventions and callers as
 * gemm_bf16. */
typedef gemm_in_bf16 gemm_in_half;
static inline gemm_in_half gemm_n_half(const uint16_t *p, int ld) {
    return (gemm_in_half){p, ld, 0};
}
static inline gemm_in_half gemm_t_half(const uint16_t *p, int ld) {
    return (gemm_in_half){p, ld, 1};
}

void gemm_half(half_kind kind, gemm_dims d, float alpha, gemm_in_half A, gemm_in_half B,
               float beta, gemm_out C);
/* gemm_bf16_init for HALF_BF16; for HALF_FP16 allocates the tiles' workspace once. Serial
 * code, before the first gemm_half (which otherwise does it itself). 0, or -1 with a message. */
int gemm_half_init(half_kind kind, char *err, size_t errlen);
/* gemm_bf16_describe for HALF_BF16; for HALF_FP16 "fp16 GEMM: fp32 sgemm on converted tiles
 * (...)". */
const char *gemm_half_describe(half_kind kind);

/* Calling gemm() from every thread of an OpenMP parallel region (attention does, one small
 * GEMM per (batch, head) per thread): OpenBLAS must then run single-threaded per call. The
 * OpenMP build of OpenBLAS 0.3.21 (Debian/Ubuntu) does NOT do this by itself: inside a
 * parallel region it still splits each call into nthreads chunks, and concurrent calls then
 * serialize and spin on its one shared thread buffer (measured 30x slower at 2 threads).
 * Bracket such a region with these: gemm_serial_begin() sets OpenBLAS to 1 thread and returns
 * the previous count, gemm_serial_end() restores it; OpenMP's own thread count stays as it was
 * (OpenBLAS's openblas_set_num_threads sets it as well, which made every bracketed region run
 * on one thread until this was noticed). Not reentrant; call from serial code. */
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
