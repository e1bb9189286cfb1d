/* Core attention: softmax(Q K^T * scale + mask) -> dropout -> @ V, per batch and head.
 *
 * qkv is a packed QKV buffer [B, T, qkv_row_width] in Megatron's grouped layout (qkv_layout.h).
 * out[B,T,NH*HS] puts head h at columns h*HS .. h*HS+HS-1 (the input of linear_proj).
 * probs[B,NH,T,T] is the softmax output before dropout, saved for backward (masked entries 0).
 * scale = 1/sqrt(HS). causal != 0 masks key positions j > query position i.
 * Attention dropout uses key.site = DROPOUT_SITE_ATTENTION_PROBS; the global element index of
 * probs[b,h,i,j] is (b * heads.total + heads.first + h) * T * T + i * T + j, so a tensor-parallel
 * rank holding heads heads.first .. heads.first + NH - 1 of heads.total draws the same masks as a
 * single process (which passes {0, NH}).
 * probs may be NULL in forward (nothing kept) and in backward, which then recomputes each
 * head's probabilities with the same code as forward (bitwise identical): selective
 * recomputation keeps only Q, K, V.
 * workspace: attention_workspace_floats(T, threads) floats, shared by forward and backward;
 * the parallel regions use at most `threads` threads (one workspace slice each), so the
 * workspace never depends on the OpenMP state at the time it was allocated. */
#ifndef MEGADLM_CORE_KERNELS_ATTENTION_H
#define MEGADLM_CORE_KERNELS_ATTENTION_H

#include <stddef.h>

#include "core/kernels/dropout.h"
#include "core/kernels/qkv_layout.h"

/* The heads a call holds within the whole model's (dropout masks are keyed by global head):
 * heads first .. first + NH - 1 of total. */
typedef struct {
    int first, total;
} head_range;

/* What attention does beyond the shapes: the causal mask, dropout on the probabilities, and the
 * head range that keys the dropout masks. */
typedef struct {
    int causal;
    float dropout_p;
    dropout_key key; /* site is set to DROPOUT_SITE_ATTENTION_PROBS by the kernels */
    head_range heads;
} attention_opts;

/* data: attention_workspace_floats(T, threads) floats for up to `threads` threads. */
typedef struct {
    float *data;
    int threads;
} attention_workspace;

size_t attention_workspace_floats(int T, int threads);

/* out[B,T,NH*HS], probs[B,NH,T,T] (may be NULL) from qkv (shapes in x). */
void attention_forward(float *out, float *probs, const float *qkv, qkv_batch x, attention_opts o,
                       attention_workspace ws);
/* dqkv[B,T,QKV_C] += gradient w.r.t. qkv (query, key and value columns). */
void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *probs,
                        qkv_batch x, attention_opts o, attention_workspace ws);

#endif
