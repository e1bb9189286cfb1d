/* Core attention one key/value block at a time, merged exactly by log-sum-exp: the kernel of
 * context parallelism's ring (--cp-comm-type p2p, core/context_parallel/cp_ring.h), where a
 * rank sees the keys and values of the sequence one rank's rows at a time.
 *
 * A block is Lq query rows at global positions q0 + i against Lk key rows at global positions
 * k0 + j. Row i attends to the keys j with k0 + j <= q0 + i (causal) and k0 + j < kv (padding);
 * a block where no row attends to any key is skipped. With the block's scores S = Q K^T scale,
 * its log-sum-exp lse_b[i] = log sum_j exp(S_ij) over the unmasked keys and its output
 * O_b = dropout(exp(S - lse_b)) V, the running output and log-sum-exp of a row merge as
 *   lse' = log(exp(lse) + exp(lse_b)),  out' = out exp(lse - lse') + O_b exp(lse_b - lse'),
 * which after every block is the single process's dropout(softmax(S)) V (dropout scales single
 * elements: it commutes with the merge). The dropout masks are the single process's: element
 * (b, h, q0 + i, k0 + j) of a sequence of T_key tokens (attention.h's index).
 *
 * Backward recomputes a block's probabilities from the row's final log-sum-exp
 * (P = exp(S - lse)) and uses D_i = sum_c dO_ic O_ic (= sum_j Pu_ij dPu_ij, dropout included):
 *   dV += Pu^T dO,  dS = P (mask(dO V^T) - D),  dQ += scale dS K,  dK += scale dS^T Q.
 * fp32 only (the ring's merge has no place for the 16-bit roundings of attention.h). */
#ifndef MEGADLM_CORE_KERNELS_ATTENTION_BLOCK_H
#define MEGADLM_CORE_KERNELS_ATTENTION_BLOCK_H

#include <stddef.h>

#include "core/kernels/attention.h"

/* The block's rows: q (Lq rows of each sequence b at q + (b * q_rows + i) * QKV_C), kv (Lk rows
 * at kv + (b * kv_rows + j) * QKV_C); their global positions; kv_len and T_key as in
 * attention_rows. */
typedef struct {
    const float *q, *kv;
    int q_rows, kv_rows;
    int Lq, Lk, q0, k0;
    int kv_len, T_key;
} attention_block;

/* Floats of workspace per thread for blocks of Lq x Lk (HS channels). */
size_t attention_block_workspace_floats(int Lq, int Lk, int HS);

/* Merges the block into out (Lq rows of each sequence at out + (b * out_rows + i) * NH * HS)
 * and lse ([B, NH, lse_rows]: row i of (b, h) at (b * NH + h) * lse_rows + i); out 0 and lse
 * -INFINITY before the first block. ws: attention_block_workspace_floats per thread. */
void attention_block_forward(float *out, int out_rows, float *lse, int lse_rows,
                             attention_block blk, int B, qkv_layout lay, attention_opts o,
                             attention_workspace ws);
/* D [B, NH, lse_rows] = rowsum(dout * out) per head (the block backward's D). */
void attention_block_delta(float *D, const float *dout, const float *out, int out_rows, int Lq,
                           int B, qkv_layout lay, int lse_rows);
/* dq (query columns, rows as blk.q's) and dkv (key and value columns, rows as blk.kv's) += the
 * block's gradients, from the final lse and D. */
void attention_block_backward(float *dq, float *dkv, const float *dout, int out_rows,
                              const float *lse, const float *D, int lse_rows,
                              attention_block blk, int B, qkv_layout lay, attention_opts o,
                              attention_workspace ws);

#endif
