/* Word (+ learned absolute position) embedding. */
#ifndef MEGADLM_CORE_KERNELS_EMBEDDING_H
#define MEGADLM_CORE_KERNELS_EMBEDDING_H

#include <stdint.h>

#include "core/kernels/bf16.h"

/* out[B,T,C] = wte[tokens[b,t], :] + (wpe ? wpe[pos_offset + t, :] : 0) */
void embedding_forward(float *out, const int *tokens, const float *wte, const float *wpe, int B,
                       int T, int C, int pos_offset);
/* The same with the word embedding in 16 bits (kind's format), each row widened to fp32. */
void embedding_forward_half(float *out, const int *tokens, half_kind kind, const uint16_t *wte16,
                            const float *wpe, int B, int T, int C, int pos_offset);
/* dwte[tokens[b,t], :] += dout[b,t,:];  dwpe[pos_offset + t, :] += dout[b,t,:] (dwpe may be NULL) */
void embedding_backward(float *dwte, float *dwpe, const float *dout, const int *tokens, int B,
                        int T, int C, int pos_offset);

#endif
