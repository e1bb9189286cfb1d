/* 16-bit floating-point arithmetic helpers of the kernels: rounding fp32 values to bf16 / fp16
 * in place, tiles, staged widening, and the run's 16-bit format (--bf16 / --fp16). The formats,
 * their one-value and array conversions and the rounding rules are core/tensor/dtype.h's (the
 * tensor floor: the files convert too). Loops split over the OpenMP team when large, each
 * element converted on its own, as dtype.h's. */
#ifndef MEGADLM_CORE_KERNELS_BF16_H
#define MEGADLM_CORE_KERNELS_BF16_H

#include <stddef.h>
#include <stdint.h>

#include "core/tensor/dtype.h"

/* ---------------- arrays ---------------- */

/* x[i] = the fp32 value of x[i] rounded to bf16 / fp16 (in place): where --bf16 or --fp16
 * makes a tensor 16-bit while the kernels keep computing in fp32. */
void bf16_round_f32(float *x, size_t n);
void fp16_round_f32(float *x, size_t n);

/* x[0, n) = the n bf16 values staged in x's upper half (bf16 slots n .. 2n of the buffer's
 * bytes), widened in place: the last step of a transfer that moved bf16 into an fp32 buffer
 * (--bf16's all-gathers and pipeline transfers). */
void bf16_widen_staged(float *x, size_t n);

/* A rows x cols block with row strides (in elements), for tiles of larger matrices. */
void bf16_to_f32_2d(float *dst, size_t ld_dst, const bf16 *src, size_t ld_src, size_t rows,
                    size_t cols);
void fp16_to_f32_2d(float *dst, size_t ld_dst, const fp16 *src, size_t ld_src, size_t rows,
                    size_t cols);

/* ---------------- the run's 16-bit format ----------------
 * Mixed precision (--bf16, --fp16) stores the same tensors in 16 bits and rounds at the same
 * places; only the format differs. Code that does either takes a half_kind and calls these,
 * which dispatch to the bf16_* or fp16_* function; HALF_NONE (fp32 training) makes
 * half_round_f32 a no-op and is an internal error for the conversions. */
typedef enum { HALF_NONE = 0, HALF_BF16, HALF_FP16 } half_kind;

/* "bf16", "fp16" or "fp32" (for messages and the log). */
const char *half_kind_name(half_kind kind);
void half_round_f32(half_kind kind, float *x, size_t n);
void half_from_f32(half_kind kind, uint16_t *dst, const float *src, size_t n);
void half_to_f32(half_kind kind, float *dst, const uint16_t *src, size_t n);
void half_to_f32_2d(half_kind kind, float *dst, size_t ld_dst, const uint16_t *src,
                    size_t ld_src, size_t rows, size_t cols);
/* The other way: a rows x cols block of fp32 rounded to the format (each row one conversion,
 * rows over the team when large). */
void half_from_f32_2d(half_kind kind, uint16_t *dst, size_t ld_dst, const float *src,
                      size_t ld_src, size_t rows, size_t cols);
/* bf16_widen_staged in the run's format (--bf16's and --fp16's all-gathers and pipeline
 * transfers: values already rounded to the format move exactly in 2 bytes). */
void half_widen_staged(half_kind kind, float *x, size_t n);

#endif
