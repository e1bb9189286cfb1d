/* What one transformer layer keeps for backward: one table of saved tensors (docs/MEMORY.md,
 * "Per layer") that generates the layer_saved struct, its allocation and freeing
 * (transformer_layer.c) and the analytic count of its bytes (activation_memory.c), so the three
 * cannot drift apart. The paper-based count in training/theoretical_memory.c is written
 * independently and checks this one. */
#ifndef MEGADLM_CORE_TRANSFORMER_LAYER_SAVED_H
#define MEGADLM_CORE_TRANSFORMER_LAYER_SAVED_H

#include <stddef.h>
#include <stdint.h>

#include "core/transformer/transformer_config.h"

/* The sizes the table is written in, for a micro-batch of B x T tokens. N = B*T tokens;
 * Ns = N/t under sequence parallelism (else N); QKV, NH, NG, F, FC1 are this rank's
 * tensor-parallel shares (the whole model's with one rank). */
typedef struct {
    size_t B, T, N, Ns, C, QKV, NH, NG, HS, F, FC1;
    size_t Tk; /* keys per query: T, or T x CP (a rank's T positions attend to the whole
                  sequence under context parallelism) */
    int layernorm;    /* LayerNorm (mean and rstd) rather than RMSNorm (rstd) */
    int qk_layernorm; /* --qk-layernorm */
    int probs;        /* attention probabilities kept (not with selective recompute) */
    int ring;         /* context parallelism's ring: no probabilities, their log-sum-exp */
    int moe;          /* an MoE layer: no dense MLP tensors (moe/moe_layer.h keeps its own) */
    half_kind half;   /* --bf16 / --fp16: the table's b16 tensors are stored in this format
                         (2 bytes); HALF_NONE: fp32 */
} layer_dims;

static inline layer_dims layer_dims_of(const transformer_config *c, int B, int T) {
    layer_dims d;
    d.B = (size_t)B;
    d.T = (size_t)T;
    d.Tk = (size_t)T * (size_t)tc_cp(c);
    d.N = (size_t)B * T;
    d.Ns = (size_t)tc_tokens_local(c, B * T);
    d.C = (size_t)c->hidden_size;
    d.QKV = (size_t)tc_qkv_width_local(c);
    d.NH = (size_t)tc_heads_local(c);
    d.NG = (size_t)tc_groups_local(c);
    d.HS = (size_t)c->kv_channels;
    d.F = (size_t)tc_ffn_local(c);
    d.FC1 = (size_t)tc_fc1_width_local(c);
    d.layernorm = c->normalization == NORM_LAYERNORM;
    d.qk_layernorm = c->qk_layernorm;
    d.probs = c->recompute_granularity != RECOMPUTE_SELECTIVE;
    d.ring = tc_cp(c) > 1 && c->cp_ring;
    d.half = tc_half(c);
    d.moe = 0;
    return d;
}

/* The dims of global layer l's saved tensors (-1: a recompute slot, which any layer may use:
 * the dense layer's). */
static inline layer_dims layer_dims_of_layer(const transformer_config *c, int B, int T, int l) {
    layer_dims d = layer_dims_of(c, B, T);
    d.moe = l >= 0 && tc_moe_layer(c, l);
    return d;
}

/* How a saved tensor is stored (the table's b16 column). */
enum {
    SAVED_F32 = 0,        /* fp32 */
    SAVED_B16_VIEW = 1,   /* --bf16: bf16 storage (field##_b16) behind the fp32 view the layer
                             workspace shares among all layers (`field` points to it): forward
                             computes into the view and packs it (layer_saved_pack), backward
                             unpacks it first */
    SAVED_B16_KERNEL = 2, /* --bf16: bf16 storage only (`field` NULL), which its kernel writes
                             and reads itself (the attention probabilities) */
};

/* X(field, what, kept, floats, b16): every saved tensor in allocation order; `kept`,
 * `floats` and `b16` (a SAVED_* value) are expressions over a layer_dims named d, `what` names
 * the allocation. Nothing that reads a bf16 tensor sees a difference: forward rounds it where
 * it is made (linear_qkv's and linear_fc1's outputs, the q/k norm's and RoPE's: attention.c,
 * mlp.c; the residual stream after each residual add: transformer_layer.c; the probabilities:
 * core/kernels/attention.c), or reads it only through GEMMs, which round their inputs (the
 * norm outputs, the context, the activation output). Still fp32: the statistics (mean, rstd),
 * which Megatron keeps in fp32 too. The layer input (hidden[l], the block's) holds bf16 values
 * in fp32 storage so far (docs/MEMORY.md, "bf16"). Under --fp16 (d.half) "bf16" reads "fp16":
 * the same tensors, the same places. */
#define LAYER_SAVED_B16 (d.half ? SAVED_B16_VIEW : SAVED_F32)
#define LAYER_SAVED_TENSORS(X)                                                                     \
    /* norm1 output = linear_qkv input [Ns, C] (gathered to [N, C] before the GEMM under SP) */    \
    X(ln1, "ln1", 1, d.Ns * d.C, LAYER_SAVED_B16)                                                  \
    X(ln1_mean, "ln1_mean", d.layernorm, d.Ns, 0)                                                  \
    X(ln1_rstd, "ln1_rstd", 1, d.Ns, 0)                                                            \
    /* linear_qkv output before the q/k norm [N, QKV]; the norm's statistics [N, NH + NG] */       \
    X(qkv_raw, "qkv_raw", d.qk_layernorm, d.N * d.QKV, LAYER_SAVED_B16)                            \
    X(qk_mean, "qk_mean", d.qk_layernorm && d.layernorm, d.N * (d.NH + d.NG), 0)                   \
    X(qk_rstd, "qk_rstd", d.qk_layernorm, d.N * (d.NH + d.NG), 0)                                  \
    /* Q, K (after q/k norm and RoPE) and V [N, QKV] */                                            \
    X(qkv, "qkv", 1, d.N * d.QKV, LAYER_SAVED_B16)                                                 \
    /* softmax output before attention dropout [B, NH, T, T]; NULL with selective recompute        \
     * (backward recomputes it) */                                                                 \
    X(probs, "attention probs", d.probs && !d.ring, d.B * d.NH * d.T * d.Tk,                       \
      d.half ? SAVED_B16_KERNEL : SAVED_F32)                                                       \
    /* context parallelism's ring (cp_ring.h): the rows' log-sum-exp [B, NH, T] instead */        \
    X(cp_lse, "attention log-sum-exp (context-parallel ring)", d.ring, d.B * d.NH * d.T, 0)       \
    /* attention output = linear_proj input [N, NH*HS] */                                          \
    X(ctx, "attention context", 1, d.N * d.NH * d.HS, LAYER_SAVED_B16)                             \
    /* residual after attention = norm2 input [Ns, C] */                                           \
    X(res1, "residual after attention", 1, d.Ns * d.C, LAYER_SAVED_B16)                            \
    /* norm2 output = linear_fc1 input [Ns, C] */                                                  \
    X(ln2, "ln2", 1, d.Ns * d.C, LAYER_SAVED_B16)                                                  \
    X(ln2_mean, "ln2_mean", d.layernorm, d.Ns, 0)                                                  \
    X(ln2_rstd, "ln2_rstd", 1, d.Ns, 0)                                                            \
    /* linear_fc1 output = activation input [N, FC1]; activation output = fc2 input [N, F] */      \
    X(fc1, "fc1 output", !d.moe, d.N * d.FC1, LAYER_SAVED_B16)                                     \
    X(act, "activation output", !d.moe, d.N * d.F, LAYER_SAVED_B16)

/* One layer's saved buffers (NULL where the table does not keep a tensor). */
typedef struct {
#define LAYER_SAVED_FIELD(field, what, kept, floats, b16) \
    float *field;                                        \
    uint16_t *field##_b16;
    LAYER_SAVED_TENSORS(LAYER_SAVED_FIELD)
#undef LAYER_SAVED_FIELD
    size_t bytes; /* total bytes of the buffers above */
    struct moe_saved *moe; /* an MoE model's: what an MoE layer's forward keeps (allocated by
                              each forward, moe/moe_layer.h); NULL in a dense model */
} layer_saved;

/* Bytes of the tensors the table keeps for d (4 each, 2 for b16 ones). */
static inline size_t layer_saved_bytes(layer_dims d) {
    size_t bytes = 0;
#define LAYER_SAVED_COUNT(field, what, kept, n, b16) \
    bytes += (kept) ? (size_t)(n) * ((b16) ? 2 : 4) : 0;
    LAYER_SAVED_TENSORS(LAYER_SAVED_COUNT)
#undef LAYER_SAVED_COUNT
    return bytes;
}

#endif
