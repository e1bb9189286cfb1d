/* Threads per rank: how many OpenMP threads (which OpenBLAS's OpenMP build shares) a process
 * runs, decided once at start.
 *
 *   OMP_NUM_THREADS set   the user's number, always.
 *   otherwise             the CPUs this process may run on (its affinity mask), divided among
 *                         the processes of the same node whose masks overlap it (ranks bound
 *                         to disjoint cores share nothing; unbound ranks share the whole node),
 *                         never fewer than 1.
 *
 * Without this every rank starts one thread per core of the machine: 4 ranks on 2 cores ran 8
 * spinning threads beside MPI's polling and took minutes per iteration instead of milliseconds.
 * The same shape appears on a cluster node under `mpirun -np <cores per node>`. */
#ifndef MEGADLM_CORE_THREADS_H
#define MEGADLM_CORE_THREADS_H

typedef struct {
    int threads;     /* per process, applied to OpenMP and OpenBLAS */
    int from_env;    /* OMP_NUM_THREADS decided */
    int cpus;        /* CPUs in this process's affinity mask */
    int sharing;     /* processes of this node whose affinity masks overlap this one's (>= 1) */
    int oversubscribed; /* more such processes than CPUs: 1 thread each */
} thread_plan;

/* Pure rule: the thread count for `cpus` CPUs shared by `sharing` processes. */
int threads_for_share(int cpus, int sharing);
/* Decides and applies the plan; with `mpi` (MPI is initialised: parallel_state's `mpi`), a
 * collective over MPI_COMM_WORLD (node-local ranks compare affinity masks). Call once, after
 * MPI is initialised, before any parallel region or BLAS call. The caller says whether MPI is up
 * (rather than this asking parallel_state) so that the thread plan sits below the parallel
 * state, which calls it. */
void threads_setup(int mpi);
const thread_plan *threads_plan(void);
/* The threads this process's kernels run with: the plan's once threads_setup ran, else OpenMP's
 * current maximum (programs that never set a plan: unit tests, single-process tools). Kernels
 * with per-thread workspaces are sized from it by their owner (the model) and never run more. */
int threads_per_rank(void);

#endif
