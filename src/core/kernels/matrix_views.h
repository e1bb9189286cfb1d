/* Row-major matrix views, the GEMMs' operands (core/kernels/gemm.h): in a header of their own so
 * that the GEMMs' implementations (core/kernels/onednn_matmul.h) take them without gemm.h. */
#ifndef MEGADLM_CORE_KERNELS_MATRIX_VIEWS_H
#define MEGADLM_CORE_KERNELS_MATRIX_VIEWS_H

#include "core/tensor/dtype.h"

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

/* A bf16 input matrix (bit patterns, core/tensor/dtype.h), as gemm_in. */
typedef struct {
    const bf16 *p;
    int ld;
    int trans;
} gemm_in_bf16;

static inline gemm_in_bf16 gemm_n_bf16(const bf16 *p, int ld) { return (gemm_in_bf16){p, ld, 0}; }
static inline gemm_in_bf16 gemm_t_bf16(const bf16 *p, int ld) { return (gemm_in_bf16){p, ld, 1}; }

#endif
