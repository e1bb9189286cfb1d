#include "core/threads.h"

#include <mpi.h>
#include <omp.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "core/kernels/gemm.h"
#include "core/util/alloc.h"

static thread_plan g_plan = {1, 0, 1, 1, 0};
static int g_planned; /* threads_setup ran */

int threads_for_share(int cpus, int sharing) {
    if (sharing < 1) sharing = 1;
    int n = cpus / sharing;
    return n < 1 ? 1 : n;
}

/* Node-local processes (MPI's shared-memory domain) whose affinity masks overlap `mine`,
 * this one included. 1 without MPI. */
static int sharing_processes(const cpu_set_t *mine, int mpi) {
    if (!mpi) return 1;
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int n = 1, me = 0;
    MPI_Comm_size(node, &n);
    MPI_Comm_rank(node, &me);
    cpu_set_t *all = xmalloc((size_t)n * sizeof(cpu_set_t), "CPU affinity masks");
    MPI_Allgather(mine, (int)sizeof(cpu_set_t), MPI_BYTE, all, (int)sizeof(cpu_set_t), MPI_BYTE,
                  node);
    int sharing = 0;
    for (int i = 0; i < n; i++) {
        cpu_set_t both;
        CPU_AND(&both, mine, &all[i]);
        if (i == me || CPU_COUNT(&both) > 0) sharing++;
    }
    free(all);
    MPI_Comm_free(&node);
    return sharing;
}

void threads_setup(int mpi) {
    cpu_set_t mine;
    CPU_ZERO(&mine);
    if (sched_getaffinity(0, sizeof mine, &mine) != 0 || CPU_COUNT(&mine) < 1) {
        CPU_ZERO(&mine); /* unknown: behave as one CPU of our own */
        CPU_SET(0, &mine);
    }
    thread_plan p = {0};
    p.cpus = CPU_COUNT(&mine);
    /* every rank takes part in the collective, whatever its environment says */
    p.sharing = sharing_processes(&mine, mpi);
    p.oversubscribed = p.sharing > p.cpus;
    const char *env = getenv("OMP_NUM_THREADS");
    if (env && env[0]) {
        p.from_env = 1;
        p.threads = omp_get_max_threads(); /* OpenMP has parsed it (lists, bad values) */
    } else {
        p.threads = threads_for_share(p.cpus, p.sharing);
        omp_set_num_threads(p.threads);
    }
    gemm_set_threads(p.threads);
    g_plan = p;
    g_planned = 1;
}

const thread_plan *threads_plan(void) { return &g_plan; }

int threads_per_rank(void) { return g_planned ? g_plan.threads : omp_get_max_threads(); }
