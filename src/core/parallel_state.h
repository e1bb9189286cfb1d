/* Process groups (Megatron's parallel_state): world = TP x CP x DP x PP, ranks ordered with
 * tensor-parallel ranks adjacent (Megatron's "tp-cp-ep-dp-pp": tp fastest, then cp, then dp,
 * then pp):
 *   world_rank = tp_rank + tp_size * (cp_rank + cp_size * (dp_rank + dp_size * pp_rank)).
 * The context-parallel ranks of a model replica hold the same weights and different tokens of
 * each sequence, so the gradient reduction runs over DP x CP (dp_cp: Megatron's
 * get_data_parallel_group(with_context_parallel=True)).
 * MPI is initialised only when the process was started by mpirun (Open MPI's environment says
 * so); otherwise this is a world of one with no MPI at all, and every communicator is trivial.
 * Internal errors go through die() (core/util/die.h), which parallel_init points at MPI_Abort:
 * a failing rank takes every rank down with its message and never leaves the others hanging. */
#ifndef MEGADLM_CORE_PARALLEL_STATE_H
#define MEGADLM_CORE_PARALLEL_STATE_H

#include <mpi.h>
#include <stddef.h>

typedef struct {
    int mpi;          /* MPI initialised (launched under mpirun) */
    int world_rank, world_size;
    int tp_rank, tp_size;
    int pp_rank, pp_size;
    int dp_rank, dp_size;
    int cp_rank, cp_size;
    int dp_cp_rank, dp_cp_size; /* dp_cp_rank = cp_rank + cp_size * dp_rank */
    MPI_Comm tp, pp, dp; /* MPI_COMM_NULL when !mpi */
    MPI_Comm cp, dp_cp;  /* context-parallel group, and DP x CP (gradient reduction) */
    MPI_Comm embedding;  /* first and last pipeline stage of this (tp, dp) position, which both
                            hold the tied word embedding; MPI_COMM_NULL elsewhere or when pp = 1 */
    /* Expert parallelism (MoE layers; parallel_setup_expert_groups): Megatron's second
     * decomposition of each pipeline stage's ranks, "tp-ep-dp-pp" with the expert
     * tensor-parallel size etp: rank within the stage = etp_rank + etp (ep_rank + ep edp_rank).
     * The ep group exchanges tokens; the edp group (same experts) sums their gradients. */
    int ep_rank, ep_size, edp_rank, edp_size, etp_size;
    MPI_Comm ep, edp;    /* MPI_COMM_NULL when !mpi */
    MPI_Comm tp_ep;      /* the expert tensor- and expert-parallel ranks of this stage and edp
                            rank, rank etp_rank + etp ep_rank (the allgather dispatcher's group) */
} parallel_state;

/* Initialises MPI if launched by mpirun. Call first thing in main. */
void parallel_init(int *argc, char ***argv);
/* World rank and size before the groups exist (0 and 1 without MPI). */
int parallel_world_rank(void);
int parallel_world_size(void);
/* Creates the TP/CP/DP/PP communicators. 0, or -1 with a message (world not divisible). */
int parallel_setup_groups(int tp_size, int pp_size, int cp_size, char *err, size_t errlen);
const parallel_state *parallel_get(void);
/* After parallel_setup_groups: the expert-parallel groups for ep_size and the expert
 * tensor-parallel size etp_size (Megatron's expert_tensor_parallel_size). 0, or -1 with a
 * message (a stage's ranks not divisible by etp x ep). */
int parallel_setup_expert_groups(int ep_size, int etp_size, char *err, size_t errlen);

/* The groups whose sums code outside core/distributed/ and core/tensor_parallel/ needs (the
 * gradient norm's partial sums), so that it holds no communicator itself. Sums across TP go
 * through tensor_parallel/mappings.h, whose regions are counted and which the TP benchmark
 * interposes. */
typedef enum { PARALLEL_GROUP_DP, PARALLEL_GROUP_PP, PARALLEL_GROUP_CP,
               PARALLEL_GROUP_DP_CP, PARALLEL_GROUP_EP, PARALLEL_GROUP_EDP } parallel_group;
/* x summed over the ranks of this rank's group (x itself without MPI or in a group of one). */
double parallel_sum_double(parallel_group group, double x);
/* Collective over the world: 0 when rc is 0 on every rank, else -1 on every rank with err
 * (errlen bytes, at most 1024 of them carried) holding the message of the lowest failing rank:
 * so that ranks that checked different data (their own shards) fail together, and one of them
 * can print the one message for all. */
int parallel_agree(int rc, char *err, size_t errlen);
/* x[n] summed elementwise over the ranks of this rank's group, in place. */
void parallel_sum_doubles(parallel_group group, double *x, size_t n);
/* This rank's index in its group and the group's size (0 and 1 without MPI). */
void parallel_group_rank(parallel_group group, int *rank, int *size);
/* Finalises MPI (if initialised). */
void parallel_finalize(void);

#endif
