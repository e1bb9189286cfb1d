/* Counter-based dropout. Whether element i is kept is a pure function of
 * (seed, iteration, micro-batch, layer, site, global element index), computed with Philox:
 *   key     = {(uint32) seed, iteration}
 *   counter = {(uint32) g, (uint32) (g >> 32), (layer << 8) | site, microbatch},  g = index / 4
 * taking 32-bit lane index % 4 of the output. Element kept iff uniform >= p; kept
 * elements are scaled by 1 / (1 - p). Masks are never stored: backward regenerates them.
 * `offset` is the global index of element 0 of the buffer, so a shard of a larger tensor
 * (sequence or tensor parallelism) draws the same mask as the whole tensor would. */
#ifndef MEGADLM_CORE_KERNELS_DROPOUT_H
#define MEGADLM_CORE_KERNELS_DROPOUT_H

#include <stddef.h>
#include <stdint.h>

/* Dropout sites within a layer (the `site` field of the key). */
enum {
    DROPOUT_SITE_EMBEDDING = 0,
    DROPOUT_SITE_ATTENTION_PROBS = 1,
    DROPOUT_SITE_ATTENTION_OUT = 2, /* after linear_proj, before the residual add */
    DROPOUT_SITE_MLP_OUT = 3,       /* after linear_fc2, before the residual add */
};

typedef struct {
    uint64_t seed;
    uint32_t iteration;
    uint32_t microbatch;
    uint32_t layer;
    uint32_t site;
} dropout_key;

/* 1 if element `global_index` is kept, else 0. */
int dropout_keep(dropout_key key, uint64_t global_index, float p);

/* out[i] = keep(offset+i) ? inp[i] / (1-p) : 0.  p == 0 copies. out may alias inp. */
void dropout_forward(float *out, const float *inp, size_t n, float p, dropout_key key,
                     uint64_t offset);
/* dinp[i] += keep(offset+i) ? dout[i] / (1-p) : 0 */
void dropout_backward(float *dinp, const float *dout, size_t n, float p, dropout_key key,
                      uint64_t offset);

/* Residual branch: out[i] = residual[i] + dropout(x)[i]. out may alias residual. */
void residual_dropout_forward(float *out, const float *residual, const float *x, size_t n,
                              float p, dropout_key key, uint64_t offset);
/* dresidual[i] += dout[i];  dx[i] += keep ? dout[i] / (1-p) : 0.  Either may be NULL. */
void residual_dropout_backward(float *dresidual, float *dx, const float *dout, size_t n, float p,
                               dropout_key key, uint64_t offset);

#endif
