#include "core/tensor_parallel/mappings.h"

#include <string.h>

#include "core/parallel_state.h"

static tp_comm_stats g_stats;

const tp_comm_stats *tp_comm_get_stats(void) { return &g_stats; }
void tp_comm_reset_stats(void) { memset(&g_stats, 0, sizeof(g_stats)); }

static int tp_active(void) {
    const parallel_state *ps = parallel_get();
    return ps->mpi && ps->tp_size > 1;
}

void tp_all_reduce_sum(float *x, size_t n) {
    if (!tp_active()) return;
    MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_SUM, parallel_get()->tp);
    g_stats.all_reduce_calls++;
    g_stats.all_reduce_bytes += (double)n * sizeof(float);
}

double tp_all_reduce_sum_double(double x) {
    if (!tp_active()) return x;
    MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, parallel_get()->tp);
    return x;
}

void tp_all_reduce_max(float *x, size_t n) {
    if (!tp_active()) return;
    MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_MAX, parallel_get()->tp);
    g_stats.all_reduce_calls++;
    g_stats.all_reduce_bytes += (double)n * sizeof(float);
}

void tp_all_gather(float *full, const float *shard, size_t shard_n) {
    if (!tp_active()) {
        if (full != shard) memcpy(full, shard, shard_n * sizeof(float));
        return;
    }
    const parallel_state *ps = parallel_get();
    MPI_Allgather(shard, (int)shard_n, MPI_FLOAT, full, (int)shard_n, MPI_FLOAT, ps->tp);
    g_stats.all_gather_calls++;
    g_stats.all_gather_bytes += (double)shard_n * ps->tp_size * sizeof(float);
}

void tp_reduce_scatter(float *shard, const float *full, size_t shard_n) {
    if (!tp_active()) {
        if (full != shard) memcpy(shard, full, shard_n * sizeof(float));
        return;
    }
    const parallel_state *ps = parallel_get();
    MPI_Reduce_scatter_block(full, shard, (int)shard_n, MPI_FLOAT, MPI_SUM, ps->tp);
    g_stats.reduce_scatter_calls++;
    g_stats.reduce_scatter_bytes += (double)shard_n * ps->tp_size * sizeof(float);
}
