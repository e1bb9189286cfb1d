/* What the model head (final norm -> output layer -> cross-entropy) keeps for backward on the
 * last pipeline stage: one table of saved tensors (docs/MEMORY.md, "Outside the layers") that
 * generates the activation store's head fields (activation_store.h), their allocation
 * (activation_store_create, gpt_model.c) and freeing (activation_store.c), and the count of
 * their bytes the memory report reads (training/theoretical_memory.c), as layer_saved.h does
 * for a transformer layer. */
#ifndef MEGADLM_CORE_MODELS_HEAD_SAVED_H
#define MEGADLM_CORE_MODELS_HEAD_SAVED_H

#include <stddef.h>

#include "core/transformer/transformer_config.h"

/* The sizes the table is written in, for a micro-batch of N tokens on this rank. */
typedef struct {
    size_t N;           /* tokens: B x T (T a rank's positions under context parallelism) */
    size_t Ns;          /* N / t under sequence parallelism (the final norm is outside the
                           tensor-parallel region), else N */
    size_t C;           /* hidden size */
    size_t V;           /* this rank's vocabulary columns (padded vocabulary / t) */
    size_t logits_rows; /* N, or the chunk of rows a chunked head runs at a time
                           (gpt_head_logits_rows) */
    int layernorm;      /* LayerNorm (mean and rstd) rather than RMSNorm (rstd) */
} head_dims;

static inline head_dims head_dims_of(const transformer_config *c, size_t N, size_t logits_rows) {
    head_dims d;
    d.N = N;
    d.Ns = (size_t)tc_tokens_local(c, (int)N);
    d.C = (size_t)c->hidden_size;
    d.V = (size_t)tc_vocab_local(c);
    d.logits_rows = logits_rows;
    d.layernorm = c->normalization == NORM_LAYERNORM;
    return d;
}

/* X(field, what, kept, floats): every saved fp32 tensor of the head in allocation order; `kept`
 * and `floats` are expressions over a head_dims named d, `what` names the allocation. */
#define HEAD_SAVED_TENSORS(X)                                                                      \
    /* final norm output [Ns, C]; after a forward that ran the head's backward (the chunked        \
     * head, activation_store.head_dln) the gradient w.r.t. it */                                  \
    X(lnf, "final norm output", 1, d.Ns * d.C)                                                     \
    X(lnf_mean, "final norm mean", d.layernorm, d.Ns)                                              \
    X(lnf_rstd, "final norm rstd", 1, d.Ns)                                                        \
    /* [logits_rows, V] this rank's vocabulary columns (dlogits during backward) */                \
    X(logits, "logits", 1, d.logits_rows * d.V)                                                    \
    /* per-token loss and logsumexp [N] */                                                         \
    X(losses, "per-token loss", 1, d.N)                                                            \
    X(lse, "logsumexp", 1, d.N)

/* Bytes of the tensors the table keeps for d. */
static inline size_t head_saved_bytes(head_dims d) {
    size_t bytes = 0;
#define HEAD_SAVED_COUNT(field, what, kept, n) bytes += (kept) ? (size_t)(n) * sizeof(float) : 0;
    HEAD_SAVED_TENSORS(HEAD_SAVED_COUNT)
#undef HEAD_SAVED_COUNT
    return bytes;
}

#endif
