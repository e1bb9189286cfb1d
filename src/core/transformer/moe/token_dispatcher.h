/* Token dispatch (Megatron-core's moe/token_dispatcher.py and the capacity part of
 * moe_utils.topk_softmax_with_capacity): which (token, expert) assignments the experts compute,
 * and the permutation of the tokens' rows into expert-major order and back.
 *
 * Capacity (--moe-expert-capacity-factor f): each expert takes at most
 * ceil(N k / E x f) of a rank's N tokens (Megatron's get_capacity, on the tokens routed on this
 * rank; capped at N: a capacity of N or more drops nothing, where Megatron's topk would fail).
 * Which ones (--moe-token-drop-policy): `probs` keeps those of the largest routing
 * probabilities, `position` the earliest in Megatron's token order (sequence position first,
 * then the micro-batch's sequences: its [s, b] layout). With --moe-pad-expert-input-to-capacity
 * every expert computes exactly its capacity, the free places filled with tokens not routed to
 * it (gate 0: they add nothing and get no gradient; the lowest token indices, where Megatron's
 * topk picks among equal zeros in its own order). Without a capacity every routed assignment
 * is kept (dropless).
 *
 * The permutation (Megatron's permute / unpermute): expert e's rows are its kept tokens in token
 * order, experts in order; unpermute adds each row times its gate back into its token's row,
 * in that order. */
#ifndef MEGADLM_CORE_TRANSFORMER_MOE_TOKEN_DISPATCHER_H
#define MEGADLM_CORE_TRANSFORMER_MOE_TOKEN_DISPATCHER_H

#include <stdint.h>

#include "core/transformer/moe/router.h"
#include "core/transformer/transformer_config.h"

/* The assignments of one forward, expert-major. */
typedef struct {
    int R;                 /* rows */
    int E;
    int32_t *expert_begin; /* [E + 1] expert e's rows are [expert_begin[e], expert_begin[e + 1]) */
    int32_t *token;        /* [R] the token of each row */
    int32_t *slot;         /* [R] n k + j: the gate (routing.gate) it is weighed by; -1: padding */
    uint8_t *kept;         /* [N, E] 1 where an assignment routed to e is kept (not padding) */
    int capacity;          /* per expert, or -1 without one */
    int64_t dropped;       /* routed assignments dropped */
} moe_assignment;

/* The capacity of each expert for N routed tokens (-1: none). */
int moe_capacity(const transformer_config *c, int N);

/* Builds a's rows from the routing (capacity, dropping, padding); allocates a's arrays. */
void moe_assign(const transformer_config *c, const moe_routing *r, moe_assignment *a);
void moe_assignment_free(moe_assignment *a);

/* rows[R, C] = x[token of each row] */
void moe_permute(const moe_assignment *a, const float *x, int C, float *rows);
/* out[N, C] += gate x rows (each row into its token's, in row order); gate [N, k] the routing's
 * (a row's slot indexes it). */
void moe_unpermute(const moe_assignment *a, const float *gate, const float *rows, int C,
                   float *out);
/* Backward of moe_unpermute: drows[R, C] = gate x dout[token]; dgate[N, k] = <dout[token],
 * rows> at each kept row's slot (zeroed first: dropped assignments get 0). drows may be rows. */
void moe_unpermute_backward(const moe_assignment *a, const float *gate, int N, int k,
                            const float *rows, const float *dout, int C, float *drows,
                            float *dgate);
/* Backward of moe_permute: dx[token] += drows (row order). */
void moe_permute_backward(const moe_assignment *a, const float *drows, int C, float *dx);


/* ---- expert parallelism (this rank's experts: tc_experts_local from tc_expert_first) ---- */

/* --moe-token-dispatcher-type alltoall (Megatron's MoEAlltoAllTokenDispatcher): a rank's
 * permuted rows go to the EP ranks holding their experts (its expert-major order is already
 * destination order), arrive grouped by source, and are regrouped by local expert (Megatron's
 * sort_chunks_by_idxs); the experts' outputs take the way back, and the gates are applied at
 * the source (moe_unpermute). */
typedef struct {
    int ep, el, tp;
    int R_recv;           /* rows this rank receives from the EP ranks */
    int R_exp;            /* rows its experts compute: R_recv, or under tensor parallelism
                             every TP rank's R_recv (Megatron gathers them over the expert TP
                             group: each rank holds a share of every local expert) */
    int *send_counts, *send_displs, *recv_counts, *recv_displs; /* [ep] in rows */
    int32_t *from;        /* [ep x el] rows source s sends for local expert e: from[s el + e] */
    int32_t *tp_rows;     /* [tp x el] rows TP rank t received for local expert e */
    int32_t *local_begin; /* [el + 1] local expert e's rows among the R_exp, regrouped */
} moe_a2a_plan;

/* Exchanges the rows' counts per expert (collective over the EP group). */
void moe_a2a_plan_make(const transformer_config *c, const moe_assignment *a, moe_a2a_plan *p);
void moe_a2a_plan_free(moe_a2a_plan *p);
/* Work to run while a dispatch's all-to-all is in flight (--moe-shared-expert-overlap: the
 * shared expert): called with step 0, 1, ... until it returns 0, the exchange advanced
 * (MPI_Test) between steps, since the MPI library moves a nonblocking collective's bytes only
 * inside MPI calls. NULL: none. */
typedef struct {
    int (*step)(void *user, int step);
    void *user;
} moe_overlap;

/* send [a->R, C] (this rank's rows, expert-major) -> recv [R_exp, C] (local-expert-major;
 * under TP every TP rank's rows, all-gathered); runs `overlap`'s work during the exchange. */
void moe_a2a_dispatch(const moe_a2a_plan *p, const float *send, float *recv, int C,
                      moe_overlap overlap);

/* The all-to-all's time on this rank since the start (Megatron has no counter; `train` logs it
 * at the end, bench/bench_moe_overlap.sh reads it). */
typedef struct {
    unsigned long exchanges;    /* all-to-alls of rows (dispatches and combines) */
    double blocking_s;          /* in exchanges with nothing to overlap */
    double overlapped_s;        /* compute run while an exchange was in flight */
    double wait_s;              /* waiting for such an exchange after that compute */
} moe_a2a_stats;
const moe_a2a_stats *moe_a2a_get_stats(void);
/* The way back: recv [R_exp, C] (local-expert-major; under TP partial sums, reduce-scattered)
 * -> send [a->R, C]. */
void moe_a2a_combine(const moe_a2a_plan *p, const float *recv, float *send, int C);

/* --moe-token-dispatcher-type allgather (Megatron's MoEAllGatherTokenDispatcher): every EP
 * rank's tokens and routing are all-gathered; each rank's experts compute their rows of all of
 * them and weigh them by their gates; a reduce-scatter sums each token's experts back to its
 * rank. Under tensor parallelism over the TP x EP ranks (each computes its share of its experts:
 * the reduce-scatter also sums the shares). No capacity (Megatron's rule: capacity needs
 * alltoall). */
typedef struct {
    int tp;
    int ep, N, k;        /* ep: the ranks gathered over (EP, or TP x EP: Megatron's tp_ep group,
                            under tensor parallelism); N: one rank's tokens */
    float *gate;         /* [ep N, k] gathered gates */
    int32_t *idx;        /* [ep N, k] gathered choices */
    moe_assignment full; /* over the gathered tokens, every expert */
    moe_assignment local; /* this rank's experts' rows of `full` (rebased views, not owned) */
} moe_ag_plan;

/* Gathers r's choices and gates (collective over the EP group) and assigns the rows. */
void moe_ag_plan_make(const transformer_config *c, const moe_routing *r, moe_ag_plan *p);
void moe_ag_plan_free(moe_ag_plan *p);
/* all[ep N, C] = every EP rank's x [N, C]. */
void moe_ag_gather(const moe_ag_plan *p, const float *x, float *all, int C);
/* out[N, C] += this rank's share of the sum over EP ranks of part [ep N, C]. */
void moe_ag_reduce_scatter(const moe_ag_plan *p, const float *part, float *out, int C);
/* The same for gate gradients: dgate[N, k] = the sum of part [ep N, k]'s share. */
void moe_ag_reduce_scatter_gates(const moe_ag_plan *p, const float *part, float *dgate);

#endif
