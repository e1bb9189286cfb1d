#include "core/parallel_state.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/threads.h"
#include "core/util/die.h"
#include "core/util/error.h"

static void init_mpi(int *argc, char ***argv);

static parallel_state g = {.world_size = 1, .tp_size = 1, .pp_size = 1, .dp_size = 1,
                           .cp_size = 1, .dp_cp_size = 1,
                           .tp = MPI_COMM_NULL, .pp = MPI_COMM_NULL, .dp = MPI_COMM_NULL,
                           .cp = MPI_COMM_NULL, .dp_cp = MPI_COMM_NULL,
                           .embedding = MPI_COMM_NULL, .ep_size = 1, .edp_size = 1,
                           .etp_size = 1, .ep = MPI_COMM_NULL, .edp = MPI_COMM_NULL,
                           .tp_ep = MPI_COMM_NULL};

/* mpirun (Open MPI's ORTE/PMIx launcher) sets these; a plain start does not. */
static int launched_by_mpirun(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

void parallel_init(int *argc, char ***argv) {
    if (launched_by_mpirun()) init_mpi(argc, argv);
    threads_setup(g.mpi); /* node-local ranks share the cores (core/threads.h) */
}

static void abort_world(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

static void init_mpi(int *argc, char ***argv) {
    int provided;
    /* SERIALIZED: the TP communication thread (--tp-comm-overlap, thread progress) calls MPI
     * while the main thread computes, never at the same time (comm_overlap.h) */
    MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
    g.mpi = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &g.world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g.world_size);
    /* Any MPI error aborts the whole job (the default, made explicit). */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    /* an internal error on one rank ends every rank (core/util/die.h) */
    die_set_abort(g.world_rank, g.world_size > 1 ? abort_world : NULL);
}

int parallel_world_rank(void) { return g.world_rank; }
int parallel_world_size(void) { return g.world_size; }
const parallel_state *parallel_get(void) { return &g; }

static MPI_Comm group_comm(parallel_group group, int *rank, int *size) {
    switch (group) {
    case PARALLEL_GROUP_DP: *rank = g.dp_rank, *size = g.dp_size; return g.dp;
    case PARALLEL_GROUP_PP: *rank = g.pp_rank, *size = g.pp_size; return g.pp;
    case PARALLEL_GROUP_CP: *rank = g.cp_rank, *size = g.cp_size; return g.cp;
    case PARALLEL_GROUP_EP: *rank = g.ep_rank, *size = g.ep_size; return g.ep;
    case PARALLEL_GROUP_EDP: *rank = g.edp_rank, *size = g.edp_size; return g.edp;
    default: *rank = g.dp_cp_rank, *size = g.dp_cp_size; return g.dp_cp;
    }
}

double parallel_sum_double(parallel_group group, double x) {
    parallel_sum_doubles(group, &x, 1);
    return x;
}

void parallel_sum_doubles(parallel_group group, double *x, size_t n) {
    int rank, size;
    MPI_Comm comm = group_comm(group, &rank, &size);
    if (!g.mpi || size <= 1) return;
    for (size_t done = 0; done < n;) { /* MPI counts are int */
        int k = n - done > (size_t)INT_MAX ? INT_MAX : (int)(n - done);
        MPI_Allreduce(MPI_IN_PLACE, x + done, k, MPI_DOUBLE, MPI_SUM, comm);
        done += (size_t)k;
    }
}

void parallel_group_rank(parallel_group group, int *rank, int *size) {
    group_comm(group, rank, size);
    if (!g.mpi) *rank = 0, *size = 1;
}

int parallel_setup_groups(int tp_size, int pp_size, int cp_size, char *err, size_t errlen) {
    if (tp_size < 1 || pp_size < 1 || cp_size < 1 ||
        g.world_size % (tp_size * pp_size * cp_size) != 0) {
        snprintf(err, errlen,
                 "world size %d is not divisible by the tensor-parallel size %d x the "
                 "pipeline-parallel size %d x the context-parallel size %d",
                 g.world_size, tp_size, pp_size, cp_size);
        return -1;
    }
    int t = tp_size, c = cp_size;
    g.tp_size = t;
    g.pp_size = pp_size;
    g.cp_size = c;
    g.dp_size = g.world_size / (t * pp_size * c);
    g.tp_rank = g.world_rank % t;
    g.cp_rank = (g.world_rank / t) % c;
    g.dp_rank = (g.world_rank / (t * c)) % g.dp_size;
    g.pp_rank = g.world_rank / (t * c * g.dp_size);
    g.dp_cp_size = g.dp_size * c;
    g.dp_cp_rank = g.cp_rank + c * g.dp_rank;
    if (!g.mpi) return 0;
    int D = g.dp_size;
    /* colour = the other coordinates, key = own coordinate */
    MPI_Comm_split(MPI_COMM_WORLD, (g.pp_rank * D + g.dp_rank) * c + g.cp_rank, g.tp_rank, &g.tp);
    MPI_Comm_split(MPI_COMM_WORLD, (g.pp_rank * D + g.dp_rank) * t + g.tp_rank, g.cp_rank, &g.cp);
    MPI_Comm_split(MPI_COMM_WORLD, (g.pp_rank * c + g.cp_rank) * t + g.tp_rank, g.dp_rank, &g.dp);
    MPI_Comm_split(MPI_COMM_WORLD, (g.dp_rank * c + g.cp_rank) * t + g.tp_rank, g.pp_rank, &g.pp);
    MPI_Comm_split(MPI_COMM_WORLD, g.pp_rank * t + g.tp_rank, g.dp_cp_rank, &g.dp_cp);
    int ends = pp_size > 1 && (g.pp_rank == 0 || g.pp_rank == pp_size - 1);
    MPI_Comm_split(MPI_COMM_WORLD,
                   ends ? (g.dp_rank * c + g.cp_rank) * t + g.tp_rank : MPI_UNDEFINED, g.pp_rank,
                   &g.embedding);
    return 0;
}

int parallel_setup_expert_groups(int ep_size, int etp_size, char *err, size_t errlen) {
    const int stage = g.world_size / g.pp_size; /* ranks of a pipeline stage */
    if (ep_size < 1 || etp_size < 1 || stage % (ep_size * etp_size) != 0) {
        snprintf(err, errlen,
                 "the %d ranks of a pipeline stage are not divisible by the expert-model-parallel "
                 "size %d x the expert-tensor-parallel size %d",
                 stage, ep_size, etp_size);
        return -1;
    }
    const int r = g.world_rank % stage;
    g.etp_size = etp_size;
    g.ep_size = ep_size;
    g.edp_size = stage / (ep_size * etp_size);
    g.ep_rank = (r / etp_size) % ep_size;
    g.edp_rank = r / (etp_size * ep_size);
    if (!g.mpi) return 0;
    const int etp_rank = r % etp_size;
    MPI_Comm_split(MPI_COMM_WORLD, (g.pp_rank * g.edp_size + g.edp_rank) * etp_size + etp_rank,
                   g.ep_rank, &g.ep);
    MPI_Comm_split(MPI_COMM_WORLD, (g.pp_rank * ep_size + g.ep_rank) * etp_size + etp_rank,
                   g.edp_rank, &g.edp);
    MPI_Comm_split(MPI_COMM_WORLD, g.pp_rank * g.edp_size + g.edp_rank,
                   etp_rank + etp_size * g.ep_rank, &g.tp_ep);
    return 0;
}

int parallel_agree(int rc, char *err, size_t errlen) {
    if (!g.mpi || g.world_size == 1) return rc ? -1 : 0;
    int me = rc ? g.world_rank : g.world_size, first;
    MPI_Allreduce(&me, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first == g.world_size) return 0;
    char msg[1024] = "";
    if (g.world_rank == first) snprintf(msg, sizeof msg, "%s", err ? err : "");
    MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, first, MPI_COMM_WORLD);
    if (g.world_rank != first) err_set(err, errlen, "%s", msg);
    return -1;
}

void parallel_finalize(void) {
    if (!g.mpi) return;
    MPI_Finalize();
    g.mpi = 0;
    die_set_abort(g.world_rank, NULL); /* no MPI_Abort after MPI_Finalize */
}
