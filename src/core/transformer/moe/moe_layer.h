/* The MoE layer (Megatron-core's moe/moe_layer.py MoELayer): in an MoE layer's MLP slot
 * (--num-experts, --moe-layer-freq), router (router.h) -> dispatch (token_dispatcher.h) ->
 * routed experts (experts.h) -> combine, plus the shared expert on every token
 * (--moe-shared-expert-intermediate-size: an MLP of that width without biases, added after the
 * routed experts' sum, as Megatron adds it).
 *
 * What a forward keeps for backward depends on the routing (how many rows each expert gets),
 * so it is allocated by each forward (category activations) and freed by its backward, as
 * Megatron's autograd holds it: moe_saved, one per layer_saved (a recompute slot's is shared by
 * the layers that use the slot, like the slot's other buffers). */
#ifndef MEGADLM_CORE_TRANSFORMER_MOE_MOE_LAYER_H
#define MEGADLM_CORE_TRANSFORMER_MOE_MOE_LAYER_H

#include "core/transformer/layer_types.h"
#include "core/transformer/moe/router.h"
#include "core/transformer/moe/token_dispatcher.h"

/* The values Megatron's MoE tracker logs (moe_utils.save_to_aux_losses_tracker), in the order
 * its log line shows them (the order the router first records them). */
typedef enum {
    MOE_LOG_Z_LOSS = 0,
    MOE_LOG_CAPACITY_MEAN, /* MegaDLMs' topk_expert_capacity_utilization_ratio_* (aux_loss) */
    MOE_LOG_CAPACITY_MIN,
    MOE_LOG_CAPACITY_MAX,
    MOE_LOG_CAPACITY_STD,
    MOE_LOG_DROP_RATIO,    /* MegaDLMs' topk_token_drop_ratio (aux_loss with a capacity) */
    MOE_LOG_LOAD_BALANCING,
    MOE_LOG_COUNT
} moe_log_value;

/* The names the log line and TensorBoard use. */
const char *moe_log_name(moe_log_value v);

/* Per-layer sums over the micro-batches of an iteration (training forwards only); the training
 * loop scales them by 1 / micro-batches, reduces them over the pipeline and logs their mean
 * over all num_layers layers (a dense layer counts 0), as Megatron's track_moe_metrics. */
typedef struct moe_tracker {
    int num_layers;
    double *values; /* [MOE_LOG_COUNT, num_layers] */
    uint8_t recorded[MOE_LOG_COUNT];
    /* the most bytes a training forward of each layer kept for its backward (moe_saved, as the
     * tracked allocator counts them), over the run: `train --log-memory` prints it beside
     * moe_layer_saved_bytes' balanced and bound cases; not cleared */
    size_t *saved_bytes; /* [num_layers] */
} moe_tracker;

void moe_tracker_init(moe_tracker *t, int num_layers);
void moe_tracker_free(moe_tracker *t);
/* Zeroes the values and what was recorded (not saved_bytes). */
void moe_tracker_clear(moe_tracker *t);

/* One layer's MoE forward state (see above). */
typedef struct moe_saved {
    int live;
    moe_routing routing;
    moe_assignment assign;  /* this rank's tokens over every expert */
    moe_a2a_plan a2a;       /* expert parallelism, alltoall */
    moe_ag_plan ag;         /* expert parallelism, allgather */
    int R_exp;              /* the rows this rank's experts compute */
    const int32_t *exp_begin; /* [E_local + 1] their experts' rows */
    float *rows, *fc1, *act; /* the experts' input [R_exp, C], fc1 output, activation */
    float *out;             /* the expert outputs the gates weigh: [R, C] (this rank's rows,
                               returned by the all-to-all) or [R_exp, C] (allgather, local) */
    float *shared_fc1, *shared_act; /* [N, 2F_s or F_s], [N, F_s] */
} moe_saved;

/* Frees what a forward kept (nothing if none). */
void moe_saved_release(moe_saved *m);

/* ---- what an MoE layer's forward keeps: analytic (docs/MOE.md, "Memory") ----
 * The rows depend on the routing: rows_src, this rank's kept assignments; rows_exp, the rows
 * its experts compute (every EP source's, every TP rank's). */
typedef struct {
    size_t rows_src, rows_exp;
} moe_rows;
/* Bytes moe_layer_forward keeps for a micro-batch of B x T tokens (category activations)
 * when the routing gives rows r: exactly what the tracked allocator counts. */
size_t moe_layer_saved_bytes(const transformer_config *c, int B, int T, moe_rows r);
/* The rows of a balanced routing (every expert the same share of every rank's tokens, as the
 * test hook MEGADLM_MOE_BALANCED_ROUTING=1 routes them), and their upper bound (the capacity,
 * or without one every EP source's every token sent to this rank's experts). */
moe_rows moe_rows_balanced(const transformer_config *c, int B, int T);
moe_rows moe_rows_bound(const transformer_config *c, int B, int T);
/* What a forward holds for a moment beyond moe_layer_saved_bytes (category activations): the
 * alltoall dispatcher's expert outputs [R_exp, C], until the combine has returned them to their
 * source ranks (0 for the other dispatchers, whose outputs are the kept ones). */
size_t moe_layer_forward_extra_bytes(const transformer_config *c, moe_rows r);

/* out [Ns, C] = the MoE layer of in [Ns, C] (the pre-MLP norm's output: this rank's rows of
 * the B x T, N / TP under sequence parallelism). ws: the layer workspace (the shared expert's
 * tensor-parallel buffers). Records the losses in ctx->moe_tracker (training forwards). */
void moe_layer_forward(const layer_ctx *ctx, int layer_index, const layer_weights *w,
                       layer_workspace *ws, moe_saved *m, const float *in, float *out);
/* din [Ns, C] = the gradient w.r.t. in (overwritten; ws->dln in a layer), given dout (ws->branch);
 * adds the weights' gradients
 * into g; the router's losses enter with ctx->moe_grad_scale. Releases m. */
void moe_layer_backward(const layer_ctx *ctx, int layer_index, const layer_weights *w,
                        const layer_weights *g, layer_workspace *ws, moe_saved *m,
                        const float *in, const float *dout, float *din);

#endif
