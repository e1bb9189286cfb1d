/* Context parallelism's sequence split (Megatron's get_batch_on_this_cp_rank): a sequence of T
 * tokens is cut into 2 CP chunks of L = T / (2 CP); rank r keeps chunks r and 2 CP - 1 - r, in
 * that order, as its T_local = 2 L rows. With causal attention that balances the work (an early
 * chunk attends to few keys, its partner to many); bidirectional (no_mask) attention needs no
 * balancing, and uses the same split all the same (as Megatron, which splits every batch so):
 * one layout for both masks.
 *
 * Everything keyed by token (learned positions, RoPE angles, dropout masks, the loss) uses the
 * global position of a local row, so a context-parallel run computes what one process does.
 * Without context parallelism (cp_size <= 1) every function is the identity. */
#ifndef MEGADLM_CORE_CONTEXT_PARALLEL_CP_LAYOUT_H
#define MEGADLM_CORE_CONTEXT_PARALLEL_CP_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "core/kernels/dropout.h"
#include "core/kernels/rope.h"
#include "core/transformer/transformer_config.h"

/* Global chunk index (0 .. 2 CP - 1) of this rank's local chunk k (0 or 1). */
static inline int cp_chunk(const transformer_config *c, int k) {
    return k == 0 ? c->cp_rank : 2 * tc_cp(c) - 1 - c->cp_rank;
}

/* Position in the whole sequence of local row t of a sequence of T_local rows. */
static inline int cp_position(const transformer_config *c, int T_local, int t) {
    if (tc_cp(c) == 1) return t;
    const int L = T_local / 2, k = t / L;
    return cp_chunk(c, k) * L + (t - k * L);
}

/* Global flat token (b * T_key + position) of local flat token n = b * T_local + t. T_key: the
 * sequence length the dropout masks are keyed by (below). */
static inline int64_t cp_global_token(const transformer_config *c, int T_local, int T_key,
                                      int64_t n) {
    const int64_t b = n / T_local;
    return b * (int64_t)T_key + cp_position(c, T_local, (int)(n % T_local));
}

/* Local rows from n on that are consecutive globally too (the rest of n's chunk). */
static inline int64_t cp_run(const transformer_config *c, int T_local, int64_t n) {
    if (tc_cp(c) == 1) return INT64_MAX;
    const int L = T_local / 2;
    return L - (n % T_local) % L;
}

/* Rows [first, first + rows) of a [B * T_local, C] activation (first: the rank's first row,
 * its sequence-parallel shard's), whose dropout masks are the global tokens'. T_key: the
 * sequence length of the dropout index. A masked-diffusion micro-batch of length L (seq-length
 * - 1, or a random length) is padded to a multiple of 2 CP and of the sequence-parallel split
 * (training/difflm.h); its masks are keyed by L, the length one process runs unpadded, so the
 * real tokens draw the single process's masks (the padding's rows draw others' keys: nothing
 * real reads them). Unpadded: T_local x CP. */
typedef struct {
    const transformer_config *cfg;
    int T_local, T_key;
    int64_t first;
    int rows, C;
} cp_rows;

/* T_key of a micro-batch of T_local rows per rank whose first T_valid positions are real (of
 * T_local x CP): T_valid, so a padded sequence's real tokens, with or without context
 * parallelism (sequence parallelism pads too), draw the masks one process draws unpadded. */
static inline int cp_key_length(const transformer_config *c, int T_local, int T_valid) {
    const int whole = T_local * tc_cp(c);
    return T_valid > 0 && T_valid < whole ? T_valid : whole;
}

/* dropout.h's four functions on those rows, each run of consecutive global tokens keyed by its
 * global element index (one call without context parallelism). */
void cp_dropout_forward(cp_rows r, float *out, const float *inp, float p, dropout_key key);
void cp_dropout_backward(cp_rows r, float *dinp, const float *dout, float p, dropout_key key);
void cp_residual_dropout_forward(cp_rows r, float *out, const float *residual, const float *x,
                                 float p, dropout_key key);
void cp_residual_dropout_backward(cp_rows r, float *dresidual, float *dx, const float *dout,
                                  float p, dropout_key key);

/* The micro-batch's tokens, labels and loss weights [B, T] -> this rank's [B, T / CP] rows
 * (its two chunks of each sequence). Any pointer may be NULL (skipped). */
void cp_select_rows(const transformer_config *c, int B, int T, int32_t *tokens_local,
                    const int32_t *tokens, int32_t *labels_local, const int32_t *labels,
                    float *mask_local, const float *mask);

/* RoPE on a [B, T_local, QKV] buffer of local rows (angles of their global positions; r's
 * tables cover the whole sequence). */
void cp_rope_forward(const transformer_config *c, float *qkv, qkv_batch x, rope_table r);
void cp_rope_backward(const transformer_config *c, float *dqkv, qkv_batch x, rope_table r);

#endif
