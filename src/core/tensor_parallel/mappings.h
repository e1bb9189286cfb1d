/* Tensor-parallel communication regions (Megatron-core's tensor_parallel/mappings.py): each TP
 * or SP transition is a named pair of conjugate operations, and only this file calls MPI for
 * them. Layers call regions by name; with one TP rank every region is a copy or nothing.
 *
 *   region                 forward                      backward
 *   copy_to_tp             identity                     all-reduce
 *   reduce_from_tp         all-reduce                   identity
 *   gather_from_sp         all-gather along tokens      reduce-scatter along tokens
 *   reduce_scatter_to_sp   reduce-scatter along tokens  all-gather along tokens
 *
 * "Along tokens": activations are [N, C] with N = b*s token rows; a sequence-parallel shard is
 * the contiguous block of N/t rows of TP rank r (rows r*N/t ..). shard_n counts floats of one
 * shard. The counters record the payload each collective moves, for the benchmark. */
#ifndef MEGADLM_CORE_TENSOR_PARALLEL_MAPPINGS_H
#define MEGADLM_CORE_TENSOR_PARALLEL_MAPPINGS_H

#include <stddef.h>

#include "core/kernels/bf16.h"

/* all-reduce (sum) in place over the TP group: reduce_from_tp forward, copy_to_tp backward */
void tp_all_reduce_sum(float *x, size_t n);
/* all-reduce (sum) of one double over the TP group (gradient-norm partial sums), and of n of
 * them in place (the MoE routers' per-layer losses) */
double tp_all_reduce_sum_double(double x);
void tp_all_reduce_sum_doubles(double *x, size_t n);
/* all-reduce (max) in place over the TP group (vocab-parallel cross-entropy) */
void tp_all_reduce_max(float *x, size_t n);
/* full[t * shard_n] = concatenation of every rank's shard (gather_from_sp forward,
 * reduce_scatter_to_sp backward) */
void tp_all_gather(float *full, const float *shard, size_t shard_n);
/* tp_all_gather with the 16-bit format `kind` (bf16 or fp16) on the wire (half the bytes):
 * every shard rounded to it, full holds the rounded values (as floats). Exact for a tensor
 * whose every reader rounds it to that format first (--bf16, --fp16: the gathered operands of
 * the linears' GEMMs). full must not overlap shard: its upper half stages the 16-bit values. */
void tp_all_gather_half(half_kind kind, float *full, const float *shard, size_t shard_n);
/* shard[shard_n] = rank r's block of the sum over ranks of full[t * shard_n]
 * (reduce_scatter_to_sp forward, gather_from_sp backward) */
void tp_reduce_scatter(float *shard, const float *full, size_t shard_n);

typedef struct {
    unsigned long all_reduce_calls, all_gather_calls, reduce_scatter_calls;
    double all_reduce_bytes, all_gather_bytes, reduce_scatter_bytes; /* payload: the full tensor */
} tp_comm_stats;
const tp_comm_stats *tp_comm_get_stats(void);
void tp_comm_reset_stats(void);
/* The overlapped forms (comm_overlap.c) count what they move here too: one all-gather or
 * reduce-scatter of shard_n floats per rank. */
void tp_comm_note_all_gather(size_t shard_n);
void tp_comm_note_reduce_scatter(size_t shard_n);
/* an all-gather of shard_n values per rank moved as bf16 or fp16 (2 bytes each) */
void tp_comm_note_all_gather_half(size_t shard_n);

/* Benchmark instrumentation (tests/tools/tp_overlap_bench.c, which replaces communication by
 * local copies and records the collectives of an iteration to replay them without compute);
 * never set by megadlm itself, where both functions are NULL and the collectives above are
 * plain MPI. observe(kind, n) sees every collective over a TP group of more than one rank,
 * plain or overlapped (comm_overlap.c's notes), with n floats: the buffer of an all-reduce,
 * one shard of an all-gather or reduce-scatter (the double all-reduce is not observed).
 * replace(kind, out, in, n) is asked before a plain collective calls MPI: non-zero means it did
 * the collective's work itself (out = in for an all-reduce; float buffers, n doubles for
 * TP_COMM_ALL_REDUCE_SUM_DOUBLE), and nothing is sent or counted. */
typedef enum {
    TP_COMM_ALL_REDUCE_SUM,
    TP_COMM_ALL_REDUCE_MAX,
    TP_COMM_ALL_GATHER,
    TP_COMM_REDUCE_SCATTER,
    TP_COMM_ALL_REDUCE_SUM_DOUBLE
} tp_comm_kind;
typedef struct {
    void (*observe)(tp_comm_kind kind, size_t n, void *user);
    int (*replace)(tp_comm_kind kind, void *out, const void *in, size_t n, void *user);
    void *user;
} tp_comm_interposer;
/* NULL removes it. */
void tp_comm_set_interposer(const tp_comm_interposer *ip);

#endif
