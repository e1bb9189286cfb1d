#include "core/distributed/data_parallel.h"

#include "core/parallel_state.h"

double dp_average(double x) {
    const parallel_state *st = parallel_get();
    if (!st->mpi || st->dp_size == 1) return x;
    MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, st->dp);
    return x / st->dp_size;
}
