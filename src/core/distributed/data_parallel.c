#include "core/distributed/data_parallel.h"

#include "core/parallel_state.h"

/* MPI counts are ints: reduce the flat buffer in chunks. */
#define DP_CHUNK ((size_t)1 << 28)

void dp_average_grads(param_set *ps) {
    const parallel_state *st = parallel_get();
    if (!st->mpi || st->dp_size == 1) return;
    for (size_t o = 0; o < ps->numel; o += DP_CHUNK) {
        size_t n = ps->numel - o < DP_CHUNK ? ps->numel - o : DP_CHUNK;
        MPI_Allreduce(MPI_IN_PLACE, ps->grad + o, (int)n, MPI_FLOAT, MPI_SUM, st->dp);
    }
    const float inv = 1.0f / (float)st->dp_size;
    float *g = ps->grad;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < ps->numel; i++) g[i] *= inv;
}

double dp_average(double x) {
    const parallel_state *st = parallel_get();
    if (!st->mpi || st->dp_size == 1) return x;
    MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, st->dp);
    return x / st->dp_size;
}
