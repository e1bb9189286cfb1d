/* Core attention under context parallelism, --cp-comm-type p2p (Megatron's default: the ring of
 * Transformer Engine's context-parallel attention). Each rank holds the query, key and value
 * rows of its two chunks of every sequence (cp_layout.h). In CP steps, step s computes the
 * local queries against the keys and values of rank r - s (its two chunks: 4 blocks, of which
 * causal attention skips the fully masked and masks the diagonal ones), merging each block into
 * the output with its log-sum-exp (core/kernels/attention_block.h: exact, dropout on global
 * positions); meanwhile those keys and values travel on to rank r + 1 and the next ones arrive
 * from rank r - 1 (nonblocking MPI posted before the step's compute, progressed between its
 * blocks). Backward runs the same ring from the kept output and log-sum-exp [B, NH, T/CP]: the
 * probabilities are recomputed block by block, never kept whole, and each rank's key/value
 * gradient accumulator travels with its keys and values, arriving at its owner after CP hops.
 *
 * Saved per layer: the log-sum-exp (layer_saved.h: cp_lse) instead of the [T/CP, T]
 * probabilities. Workspace: two buffers of a rank's QKV rows for the ring (and two key/value
 * gradient accumulators in backward). fp32 only (args_validate refuses --bf16 / --fp16). */
#ifndef MEGADLM_CORE_CONTEXT_PARALLEL_CP_RING_H
#define MEGADLM_CORE_CONTEXT_PARALLEL_CP_RING_H

#include "core/kernels/attention.h"
#include "core/transformer/transformer_config.h"

/* out[B, T_local, NH*HS] and lse [B, NH, T_local] from this rank's qkv [B, T_local, QKV]. */
void cp_ring_forward(const transformer_config *c, float *out, float *lse, const float *qkv,
                     qkv_batch x, attention_opts o, attention_workspace ws);
/* dqkv[B, T_local, QKV] += the gradient w.r.t. this rank's rows, from out and lse (forward's). */
void cp_ring_backward(const transformer_config *c, float *dqkv, const float *dout,
                      const float *out, const float *lse, const float *qkv, qkv_batch x,
                      attention_opts o, attention_workspace ws);

/* What the ring's transfers cost since the start: steps run, seconds of block compute with
 * transfers outstanding, seconds spent waiting for transfers after it (exposed), and bytes
 * sent. hidden fraction = 1 - exposed / (exposed + hidden), where hidden is the transfers' time
 * a blocking run would have spent (bench/bench_context_parallel.sh measures it). */
typedef struct {
    unsigned long steps;
    double compute_s, wait_s, blocking_s;
    double bytes;
} cp_ring_stats;
const cp_ring_stats *cp_ring_get_stats(void);
/* 1: every transfer blocking, before the step's compute (what the overlap hides; the bench's
 * baseline). 0: overlapped (the default). */
void cp_ring_set_blocking(int blocking);

/* Floats of a layer's attention workspace per thread for the ring's blocks. */
size_t cp_ring_workspace_floats(const transformer_config *c, int T_local, int threads);

#endif
