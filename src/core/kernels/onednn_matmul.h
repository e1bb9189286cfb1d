/* oneDNN's matmul primitive for gemm_bf16 (core/kernels/gemm.h): bf16 operands, fp32 result.
 *
 * oneDNN has two ways to multiply bf16 matrices: its BLAS-like dnnl_gemm_bf16bf16f32 (one call,
 * AVX512_BF16 kernels) and the matmul primitive, which is built once per shape and picks its
 * implementation then: brgemm with the AMX tiles where the CPU has them (the "brg:avx512_core_amx"
 * implementation), AVX512_BF16 brgemm otherwise. A training step has a dozen product shapes, so
 * the primitives are kept in a cache keyed by the whole call (shape, layouts, row strides, alpha,
 * beta): built on a shape's first call, reused by every later one.
 *
 * Only oneDNN's JIT implementations are used: where oneDNN offers only its reference code for a
 * call (an unusual stride), onednn_matmul_run says so and the caller uses the BLAS-like call.
 * Serial code only (the cache is not locked): gemm_bf16 calls from inside a parallel region use
 * the BLAS-like call. Without oneDNN in the build every function here reports "not available". */
#ifndef MEGADLM_CORE_KERNELS_ONEDNN_MATMUL_H
#define MEGADLM_CORE_KERNELS_ONEDNN_MATMUL_H

#include <stddef.h>

#include "core/kernels/matrix_views.h"

/* Creates oneDNN's CPU engine and stream, once. 0, or -1 with a message. */
int onednn_matmul_init(char *err, size_t errlen);
/* C = alpha * op(A) @ op(B) + beta * C (gemm_bf16's conventions; M, N, K > 0) by a cached
 * primitive. 0 when done; 1 when oneDNN has no JIT implementation for this call (nothing was
 * written: the caller multiplies another way, and later calls of the same key say 1 at once). */
int onednn_matmul_run(gemm_dims d, float alpha, gemm_in_bf16 A, gemm_in_bf16 B, float beta,
                      gemm_out C);
/* The implementation oneDNN offered for the most recent key (e.g. "brg:avx512_core_amx"; a
 * refused one too, e.g. "ref:any"; "none offered"), or "none yet". */
const char *onednn_matmul_impl(void);
/* Primitives in the cache, and calls that had no JIT implementation (tests, the bench). */
int onednn_matmul_cached(void);
int onednn_matmul_refused(void);
/* Destroys every cached primitive (the next call of a shape builds it again). */
void onednn_matmul_clear(void);

#endif
