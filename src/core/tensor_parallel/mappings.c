#include "core/tensor_parallel/mappings.h"

#include <stdlib.h>
#include <string.h>

#include "core/kernels/bf16.h"
#include "core/parallel_state.h"

static tp_comm_stats g_stats;

const tp_comm_stats *tp_comm_get_stats(void) { return &g_stats; }
void tp_comm_reset_stats(void) { memset(&g_stats, 0, sizeof(g_stats)); }

/* The benchmark's interposer (mappings.h); NULL in every real run. */
static tp_comm_interposer g_ip;

void tp_comm_set_interposer(const tp_comm_interposer *ip) {
    g_ip = ip ? *ip : (tp_comm_interposer){0};
}

static void observe(tp_comm_kind kind, size_t n) {
    if (g_ip.observe) g_ip.observe(kind, n, g_ip.user);
}

static int replaced(tp_comm_kind kind, void *out, const void *in, size_t n) {
    return g_ip.replace && g_ip.replace(kind, out, in, n, g_ip.user);
}

/* ---- the collectives ---- */

static int tp_active(void) {
    const parallel_state *ps = parallel_get();
    return ps->mpi && ps->tp_size > 1;
}

static void count_all_gather(size_t shard_n) {
    g_stats.all_gather_calls++;
    g_stats.all_gather_bytes += (double)shard_n * parallel_get()->tp_size * sizeof(float);
}

static void count_reduce_scatter(size_t shard_n) {
    g_stats.reduce_scatter_calls++;
    g_stats.reduce_scatter_bytes += (double)shard_n * parallel_get()->tp_size * sizeof(float);
}

void tp_comm_note_all_gather(size_t shard_n) {
    count_all_gather(shard_n);
    observe(TP_COMM_ALL_GATHER, shard_n);
}

void tp_comm_note_all_gather_half(size_t shard_n) {
    g_stats.all_gather_calls++;
    g_stats.all_gather_bytes += (double)shard_n * parallel_get()->tp_size * sizeof(uint16_t);
    observe(TP_COMM_ALL_GATHER, shard_n);
}

void tp_comm_note_reduce_scatter(size_t shard_n) {
    count_reduce_scatter(shard_n);
    observe(TP_COMM_REDUCE_SCATTER, shard_n);
}

static void all_reduce(float *x, size_t n, tp_comm_kind kind) {
    if (!tp_active()) return;
    observe(kind, n);
    if (replaced(kind, x, x, n)) return;
    MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT,
                  kind == TP_COMM_ALL_REDUCE_MAX ? MPI_MAX : MPI_SUM, parallel_get()->tp);
    g_stats.all_reduce_calls++;
    g_stats.all_reduce_bytes += (double)n * sizeof(float);
}

void tp_all_reduce_sum(float *x, size_t n) { all_reduce(x, n, TP_COMM_ALL_REDUCE_SUM); }
void tp_all_reduce_max(float *x, size_t n) { all_reduce(x, n, TP_COMM_ALL_REDUCE_MAX); }

void tp_all_reduce_sum_doubles(double *x, size_t n) {
    if (!tp_active() || replaced(TP_COMM_ALL_REDUCE_SUM_DOUBLE, x, x, n)) return;
    MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_DOUBLE, MPI_SUM, parallel_get()->tp);
}

double tp_all_reduce_sum_double(double x) {
    tp_all_reduce_sum_doubles(&x, 1);
    return x;
}

/* Without tensor parallelism a gather or scatter is a copy of n floats: 1 after making it, 0
 * when there are ranks to talk to. */
static int alone_copy(float *dst, const float *src, size_t n) {
    if (tp_active()) return 0;
    if (dst != src) memcpy(dst, src, n * sizeof(float));
    return 1;
}

void tp_all_gather(float *full, const float *shard, size_t shard_n) {
    if (alone_copy(full, shard, shard_n)) return;
    observe(TP_COMM_ALL_GATHER, shard_n);
    if (replaced(TP_COMM_ALL_GATHER, full, shard, shard_n)) return;
    MPI_Allgather(shard, (int)shard_n, MPI_FLOAT, full, (int)shard_n, MPI_FLOAT,
                  parallel_get()->tp);
    count_all_gather(shard_n);
}

void tp_all_gather_half(half_kind kind, float *full, const float *shard, size_t shard_n) {
    const parallel_state *ps = parallel_get();
    if (!tp_active() || g_ip.replace) { /* one rank, or the benchmark's copies: exact as fp32 */
        tp_all_gather(full, shard, shard_n);
        return;
    }
    observe(TP_COMM_ALL_GATHER, shard_n);
    size_t n = shard_n * (size_t)ps->tp_size;
    uint16_t *stage = (uint16_t *)full + n; /* the upper half of full's bytes */
    half_from_f32(kind, stage + (size_t)ps->tp_rank * shard_n, shard, shard_n);
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, stage, (int)shard_n, MPI_UINT16_T, ps->tp);
    half_widen_staged(kind, full, n);
    g_stats.all_gather_calls++;
    g_stats.all_gather_bytes += (double)n * sizeof(uint16_t);
}

void tp_reduce_scatter(float *shard, const float *full, size_t shard_n) {
    if (alone_copy(shard, full, shard_n)) return;
    observe(TP_COMM_REDUCE_SCATTER, shard_n);
    if (replaced(TP_COMM_REDUCE_SCATTER, shard, full, shard_n)) return;
    MPI_Reduce_scatter_block(full, shard, (int)shard_n, MPI_FLOAT, MPI_SUM, parallel_get()->tp);
    count_reduce_scatter(shard_n);
}
