/* Fully sharded data parallelism's gradient shard (Megatron-FSDP's optim_grads and
 * optim_grads_params; --data-parallel-sharding-strategy): each data-parallel rank keeps only its
 * pieces of the gradient buckets (core/distributed/distributed_data_parallel.h: the distributed
 * optimizer's pieces) across the iteration, not the whole gradient.
 *
 * Per micro-batch:
 *   fsdp_backward_begin  a whole-size gradient buffer (category gradients) is allocated,
 *                        zeroed, and the model's gradient pointers are set into it;
 *   (backward)           as the plain path; with --overlap-grad-reduce each bucket's
 *                        reduce-scatter starts as soon as the bucket is complete (the hook is
 *                        armed on every micro-batch, not only on the last);
 *   fsdp_backward_end    the remaining reduce-scatters (scaled by 1/DP, as Megatron), the
 *                        tensor-parallel sums of partial gradients (finalize_model_grads' step
 *                        2), then this rank's pieces are added into the shard and the buffer
 *                        is freed.
 * The shard therefore holds the sum over micro-batches of the DP-averaged gradients, which is
 * plain DP's gradient up to the order of the sums (losses within 1e-5, not bitwise). The shard
 * is laid out as the distributed optimizer's state (bucket order, piece by piece), so segment s
 * of the optimizer finds its gradients at grad_shard + segs[s].state. Its size is
 * ceil(N / DP) elements, as the optimizer state's, whatever this rank's pieces add up to.
 *
 * Between micro-batches and iterations the model holds no gradient buffer (params.grad is
 * NULL). Under optim_grads_params the shard is the same, but fsdp_params fills it unit by unit
 * (below) and no whole-size buffer is made. Pipeline parallelism is refused by the arguments
 * (its tied-embedding sum would need the whole gradient of the embedding). */
#ifndef MEGADLM_CORE_DISTRIBUTED_FSDP_H
#define MEGADLM_CORE_DISTRIBUTED_FSDP_H

#include <mpi.h>
#include <stddef.h>

#include "core/distributed/distributed_data_parallel.h"
#include "core/tensor/tensor.h"

typedef struct {
    ddp *ddp;
    param_set *ps;
    size_t shard_numel;   /* ceil(N / DP) */
    float *grad_shard;    /* [shard_numel] MEM_GRADS: this rank's pieces, bucket order */
    size_t *piece_at;     /* [num_buckets] where bucket b's piece starts in grad_shard */
    /* re-points the model's gradient pointers at a buffer (NULL: none) */
    void (*set_grad)(void *user, float *grad);
    void *set_grad_user;
    unsigned long microbatches; /* backward passes reduced */
} fsdp_grads;

/* ---- optim_grads_params: the parameters sharded too ----
 *
 * Each rank keeps only its pieces of the fp32 parameters (`shard`, category parameters, laid
 * out as the gradient shard and the optimizer state: the distributed optimizer updates it in
 * place, there is no other main copy). Under --bf16 the shard holds the pieces of the 16-bit
 * copy the model reads (2 bytes each), which the distributed optimizer rounds its fp32 main
 * pieces into after each step (Megatron-FSDP's bf16 parameter shard beside fp32 main
 * parameters: 18/DP bytes per parameter); the 16-bit units are gathered and the model widens
 * the fp32-read tensors (norms, biases, positions) of a unit when it arrives. The model's parameters come in units: the embedding
 * ([0, layer 0)), each layer, the head (final norm and untied output layer; with tied
 * embeddings the embedding's range too, which the output layer reads). Before a unit is used
 * (the model's params_needed hook: forward, recomputation, backward) its pieces are
 * all-gathered from every rank into a buffer of its own (category parameters) and the model's
 * pointers set into it; after the use (params_done) the buffer is freed and the pointers
 * cleared. The backward gathers each layer again (in reverse), a recomputed layer once more.
 *
 * Prefetch (--overlap-param-gather): when a unit is needed, the next one in the direction of
 * travel (forward: the next layer; backward: the previous) is started with MPI_Iallgatherv,
 * so it travels while this unit computes; the next params_needed waits for it. At most two
 * units are gathered at once (the one in use and the one coming); a prefetched unit that is
 * not the one asked for next (recomputation changes direction) is dropped. What the waits
 * cost is measured (exposed seconds) beside the blocking gathers of a run without prefetch.
 *
 * Anything that reads the whole parameters (checkpoints, --log-params-norm) brackets itself
 * with fsdp_params_materialize / fsdp_params_dematerialize. */
typedef struct {
    size_t lo, hi;        /* a range of the flat buffer within one bucket */
    size_t buf_at;        /* where it lands in its unit's buffer */
    int *counts, *displs; /* [DP] every rank's elements of it, displs from buf_at */
    size_t send_at;       /* this rank's elements in the shard */
} fsdp_part;

typedef struct {
    int num_ranges;
    size_t lo[2], hi[2];  /* its ranges of the flat buffer (the tied head has two) */
    size_t numel;
    int num_parts;
    fsdp_part *parts;
    MPI_Request *reqs;    /* [num_parts] */
    void *buf;            /* [numel] gathered (or arriving), NULL when free */
    int in_flight, in_use;
    float *gbuf;          /* [numel] its gradients during a backward (MEM_GRADS), or NULL */
    float **grecv;        /* [num_parts] this rank's reduce-scattered elements of each part */
    MPI_Request *greqs;   /* [num_parts] those reduce-scatters in flight */
    int g_in_flight;
} fsdp_unit;

typedef struct {
    unsigned long needed;        /* params_needed calls */
    unsigned long blocking;      /* gathers run at need (no prefetch, or a miss) */
    unsigned long prefetched;    /* gathers started ahead */
    unsigned long prefetch_used; /* prefetched units that were the next asked for */
    double bytes;                /* bytes received by this rank's gathers */
    double exposed_seconds;      /* time params_needed spent gathering or waiting */
    size_t peak_gathered_bytes;  /* the most bytes of gathered units at once */
    unsigned long reduced;       /* units whose gradients were reduce-scattered */
    size_t peak_grad_bytes;      /* the most bytes of unit gradient buffers at once */
} fsdp_param_stats;

typedef struct {
    ddp *ddp;
    param_set *ps;
    size_t shard_numel;     /* ceil(N / DP) */
    int half;               /* --bf16: the model's parameters are 16-bit */
    size_t es;              /* bytes per element: 4, or 2 under --bf16 */
    void *shard;            /* [shard_numel] MEM_PARAMS: this rank's pieces of the parameters
                             * the model reads (fp32; under --bf16 the 16-bit copy, which the
                             * distributed optimizer rounds its fp32 main pieces into) */
    size_t *piece_at;       /* [num_buckets] where bucket b's piece starts in the shard */
    int num_units;
    fsdp_unit *units;       /* forward order */
    int prefetch;           /* --overlap-param-gather */
    int last, dir;          /* the last unit asked for, the direction of travel */
    size_t gathered_bytes;
    void (*set_data)(void *user, size_t lo, size_t hi, void *base);
    void *set_data_user;
    /* per-unit gradients (fsdp_params_shard_grads) */
    fsdp_grads *grads;      /* the gradient shard they are reduce-scattered into */
    void (*set_grad)(void *user, size_t lo, size_t hi, float *base);
    int reduce_nonblocking; /* --overlap-grad-reduce */
    int training, backward; /* inside a training step / a micro-batch's backward */
    int head_unit;          /* the head's unit (it may take gradients in forward), or -1 */
    size_t grad_bytes;
    fsdp_param_stats stats;
} fsdp_params;

/* Takes over ps->data (the initialised whole parameters): keeps this rank's pieces and frees
 * the rest. bounds[0..num_layers]: the layers' ranges (bounds[0] = the embedding's end,
 * bounds[num_layers] = the head's start); tied: the head reads the embedding's range. */
fsdp_params *fsdp_params_create(param_set *ps, ddp *d, const size_t *bounds, int num_layers,
                                int tied, int prefetch,
                                void (*set_data)(void *, size_t, size_t, void *), void *user);
void fsdp_params_free(fsdp_params *f);
/* The model's params_needed / params_done hooks (user = the fsdp_params). */
void fsdp_params_needed(void *user, size_t begin, size_t end);
void fsdp_params_done(void *user, size_t begin, size_t end);
/* Frees every prefetched unit (before the optimizer step changes the shard, and after an
 * evaluation). */
void fsdp_params_drop(fsdp_params *f);
/* ps->data whole again (all-gathered), until fsdp_params_dematerialize, which first takes
 * this rank's pieces back into the shard when keep is set (a checkpoint load wrote them). */
void fsdp_params_materialize(fsdp_params *f);
void fsdp_params_dematerialize(fsdp_params *f, int keep);

/* optim_grads_params' gradients, per unit instead of fsdp_grads' whole-size buffer: in a
 * backward (fsdp_params_backward) a unit's params_needed also allocates and zeroes its gradient
 * buffer and points the model's gradient pointers into it (set_grad); the model's grads_done
 * hook (fsdp_params_grads_done) reports the unit complete: it is scaled by 1/DP, its partial
 * tensor-parallel gradients summed across TP, and reduce-scattered over the same parts as the
 * gather (nonblocking with --overlap-grad-reduce, completed at the next hook or at the end of
 * the backward), this rank's elements added into the gradient shard and the buffer freed. The
 * head's unit takes its buffer in a training forward too (masked diffusion's chunked head
 * computes its weight gradient there). A tied embedding's gradient arrives twice, from the
 * head's unit and from the embedding's: both are added into the shard. */
void fsdp_params_shard_grads(fsdp_params *f, fsdp_grads *g, int nonblocking,
                             void (*set_grad)(void *, size_t, size_t, float *));
/* A training step begins (1) or ends (0): the head's unit may take gradients in forward. */
void fsdp_params_training(fsdp_params *f, int on);
/* A micro-batch's backward begins (1) or ends (0: every reduction in flight completed). */
void fsdp_params_backward(fsdp_params *f, int on);
/* The model's grads_done hook (user = the fsdp_params). */
void fsdp_params_grads_done(void *user, size_t begin, size_t end);

/* Takes over ps's gradients: frees ps->grad (set_grad(user, NULL) is called) and allocates the
 * shard. d must reduce-scatter (use_distributed_optimizer). */
fsdp_grads *fsdp_grads_create(param_set *ps, ddp *d, void (*set_grad)(void *, float *),
                              void *user);
void fsdp_grads_free(fsdp_grads *f);

/* Start of an iteration: the shard zeroed. */
void fsdp_grads_zero(fsdp_grads *f);
void fsdp_backward_begin(fsdp_grads *f);
void fsdp_backward_end(fsdp_grads *f);

#endif
