/* Core attention: softmax(Q K^T * scale + mask) -> dropout -> @ V, per batch and head.
 *
 * qkv is a packed QKV buffer [B, T, qkv_row_width] in Megatron's grouped layout (qkv_layout.h).
 * out[B,T,NH*HS] puts head h at columns h*HS .. h*HS+HS-1 (the input of linear_proj).
 * probs[B,NH,T,T] is the softmax output before dropout, saved for backward (masked entries 0).
 * scale = 1/sqrt(HS). causal != 0 masks key positions j > query position i; kv_len masks the
 * keys j >= kv_len for every query (a sequence padded to T: the padding's keys; the padded
 * queries still get outputs, which nothing real reads).
 * Attention dropout uses key.site = DROPOUT_SITE_ATTENTION_PROBS; the global element index of
 * probs[b,h,i,j] is (b * heads.total + heads.first + h) * T * T + i * T + j, so a tensor-parallel
 * rank holding heads heads.first .. heads.first + NH - 1 of heads.total draws the same masks as a
 * single process (which passes {0, NH}).
 * The probabilities are kept in fp32 or in bf16 (attention_probs), or not at all: backward then
 * recomputes each head's probabilities with the same code as forward (bitwise identical):
 * selective recomputation keeps only Q, K, V.
 * --bf16 (o.half; --fp16 the same in fp16): Megatron's bf16 core attention rounds the scaled scores (baddbmm's bf16
 * output), the probabilities (the softmax, computed in fp32, returns bf16) and the dropped
 * probabilities (dropout of a bf16 tensor) to bf16; so does this kernel, in forward and in the
 * recomputation alike. The GEMMs read those rounded values and Q, K, V (bf16 values already)
 * and accumulate in fp32; gradients stay fp32.
 * workspace: attention_workspace_floats(T, threads) floats, shared by forward and backward;
 * the parallel regions use at most `threads` threads (one workspace slice each), so the
 * workspace never depends on the OpenMP state at the time it was allocated. */
#ifndef MEGADLM_CORE_KERNELS_ATTENTION_H
#define MEGADLM_CORE_KERNELS_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "core/kernels/bf16.h"
#include "core/kernels/dropout.h"
#include "core/kernels/qkv_layout.h"

/* The heads a call holds within the whole model's (dropout masks are keyed by global head):
 * heads first .. first + NH - 1 of total. */
typedef struct {
    int first, total;
} head_range;

/* Packed documents (--reset-attention-mask): for sequence b and global position p,
 * start[b * stride + p] and end[b * stride + p] bound the document holding p (global positions,
 * end exclusive); a query attends only to keys of its own document (and with causal, to those
 * at or before it). Per-position bounds rather than a list of offsets: every kernel (the whole
 * sequence, context parallelism's chunks of it, the ring's blocks) asks "which keys does the
 * query at global position p see" and "which queries see the key at p", and both answers are
 * two array reads. start NULL: one document per sequence (no mask beyond causal and kv_len). */
typedef struct {
    const int32_t *start, *end;
    int stride; /* the whole sequence's length */
} attention_docs;

/* What attention does beyond the shapes: the causal mask, dropout on the probabilities, and the
 * head range that keys the dropout masks. */
typedef struct {
    int causal;
    float dropout_p;
    dropout_key key; /* site is set to DROPOUT_SITE_ATTENTION_PROBS by the kernels */
    head_range heads;
    half_kind half; /* --bf16 / --fp16: round scores, probabilities and dropped probabilities
                       to that format; HALF_NONE: fp32 */
    int kv_len;     /* keys j >= kv_len masked for every query (padding); 0 or T: none */
    attention_docs docs; /* packed documents; .start NULL: none. Blocks of queries x keys
                            that cross a document boundary are skipped, not computed */
} attention_opts;

/* The saved probabilities [B,NH,T,T]: fp32 (f32), or 16-bit storage in o.half's format (b16:
 * bf16 or fp16, written in forward
 * from the rounded fp32 values, exact; widened in backward), or neither (NULL, NULL: not
 * kept). At most one is set. */
typedef struct {
    float *f32;
    uint16_t *b16;
} attention_probs;

/* data: attention_workspace_floats(T, threads) floats for up to `threads` threads. */
typedef struct {
    float *data;
    int threads;
} attention_workspace;

size_t attention_workspace_floats(int T, int threads);
/* The same for Tq query rows against Tk keys (attention_rows). */
size_t attention_workspace_floats_rows(int Tq, int Tk, int threads);

/* out[B,T,NH*HS], probs[B,NH,T,T] (if kept) from qkv (shapes in x). */
void attention_forward(float *out, attention_probs probs, const float *qkv, qkv_batch x,
                       attention_opts o, attention_workspace ws);
/* dqkv[B,T,QKV_C] += gradient w.r.t. qkv (query, key and value columns). */
void attention_backward(float *dqkv, const float *dout, const float *qkv, attention_probs probs,
                        qkv_batch x, attention_opts o, attention_workspace ws);

/* Context parallelism (core/context_parallel/cp_attention.h): Tq query rows of each sequence,
 * at global positions q0 .. q0 + Tq - 1 (the causal mask and the dropout masks use those),
 * against all Tk keys and values of it. Rows are packed QKV rows (qkv_layout.h); row i of
 * sequence b is at q + (b * q_rows + i) * QKV_C, key/value row j at kv + (b * kv_rows + j) *
 * QKV_C, output row i at out + (b * out_rows + i) * NH * HS. kv_len in the options counts keys
 * of the whole sequence. The dropout index of probs[b,h,i,j] is that of the single process's
 * element (b, h, q0 + i, j) of a sequence of T_key tokens (Tk, or the unpadded length of a
 * padded sequence: core/context_parallel/cp_layout.h; 0: Tk). */
typedef struct {
    const float *q, *kv;
    int Tq, Tk, q0;
    int q_rows, kv_rows, out_rows;
    int T_key;
} attention_rows;

/* out (rows as above), probs [B,NH,Tq,Tk] (if kept); the workspace must hold 3 Tq Tk floats
 * per thread (attention_workspace_floats(T) does for Tq Tk <= T T). */
void attention_forward_rows(float *out, attention_probs probs, attention_rows r, int B,
                            qkv_layout lay, attention_opts o, attention_workspace ws);
/* dq (rows as r.q's: query columns) and dkv (rows as r.kv's: key and value columns) += the
 * gradients; dq and dkv may be one buffer when r.q == r.kv. */
void attention_backward_rows(float *dq, float *dkv, const float *dout, attention_rows r,
                             attention_probs probs, int B, qkv_layout lay, attention_opts o,
                             attention_workspace ws);

#endif
