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

/* all-reduce (sum) in place over the TP group: reduce_from_tp forward, copy_to_tp backward */
void tp_all_reduce_sum(float *x, size_t n);
/* all-reduce (sum) of one double over the TP group (gradient-norm partial sums) */
double tp_all_reduce_sum_double(double x);
/* all-reduce (max) in place over the TP group (vocab-parallel cross-entropy) */
void tp_all_reduce_max(float *x, size_t n);
/* full[t * shard_n] = concatenation of every rank's shard (gather_from_sp forward,
 * reduce_scatter_to_sp backward) */
void tp_all_gather(float *full, const float *shard, size_t shard_n);
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

/* Benchmark only (bench/bench_tp_comm_overlap.sh): with local_only on, every collective above
 * becomes a local copy (an all-gather copies the own shard into every slot, a reduce-scatter
 * keeps the own rows, all-reduces do nothing), so a step runs its compute without
 * communication; its numbers are meaningless. With recording on, each collective's kind and
 * size is appended to a list; tp_comm_replay runs that list back to back (communication with
 * no compute) and returns the seconds it took. */
void tp_comm_set_local_only(int on);
int tp_comm_local_only(void);
void tp_comm_set_recording(int on);
double tp_comm_replay(void);

#endif
