/* The MoE router (Megatron-core's TopKRouter, moe/router.py, and the routing functions of
 * moe/moe_utils.py): a linear gate [E, C] over each token's hidden state, then one of the
 * load-balancing kinds:
 *   aux_loss / seq_aux_loss / none: top-k routing (topk_softmax_with_capacity): post-softmax (the
 *     default) takes the k largest logits and a softmax over those k; --moe-router-pre-softmax a
 *     softmax over all E, then its k largest (not renormalised); either times
 *     --moe-router-topk-scaling-factor. aux_loss adds the Switch-Transformer balancing loss,
 *     coeff E / (N^2 k) sum_e (sum_n softmax_ne) tokens_e (tokens_e counted before dropping);
 *     seq_aux_loss DeepSeek-V2's per-sequence form of it (over the kept assignments).
 *   sinkhorn: in training, the experts are the top k of Sinkhorn-normalised exp(logits) (no
 *     gradient through the choice), the gates their sigmoid (k = 1) or softmax over all E; in
 *     evaluation the top k of those gates.
 * The z-loss (--moe-z-loss-coeff, ST-MoE) coeff mean_n logsumexp(logits_n)^2 comes first, on
 * every kind. Both losses are added the way Megatron's MoEAuxLossAutoScaler adds them: not to
 * the reported LM loss, only to the gradient, with the main loss's backward scale
 * (moe_router_backward's grad_scale). --moe-input-jitter-eps multiplies the router's input (not
 * the experts') by U(1 - eps, 1 + eps), keyed like dropout so recomputation redraws it.
 * Capacity, dropping and padding act on the router's choice: token_dispatcher.h. */
#ifndef MEGADLM_CORE_TRANSFORMER_MOE_ROUTER_H
#define MEGADLM_CORE_TRANSFORMER_MOE_ROUTER_H

#include <stdint.h>

#include "core/kernels/dropout.h"
#include "core/transformer/transformer_config.h"

/* Dropout-key site of the router's input jitter. */
#define MOE_SITE_INPUT_JITTER 4u

/* One forward's routing of N = B x T tokens to k of E experts: what forward computes and
 * backward reads (moe_layer.c allocates it per forward). */
typedef struct {
    int N, B, T, E, k;  /* N: this rank's tokens (N / TP under sequence parallelism) of the
                           micro-batch's B x T */
    int row0;           /* the first one's row in the micro-batch (sequence parallelism) */
    int partitions;     /* ranks the micro-batch's tokens are spread over (TP with sequence
                           parallelism, times CP): the losses' sums over the whole sequence,
                           Megatron's sequence_partition_group */
    float *logits;   /* [N, E] */
    float *scores;   /* [N, E] softmax over all E (sigmoid for sinkhorn with k = 1) */
    float *lse;      /* [N] logsumexp of the logits */
    int32_t *idx;    /* [N, k] the chosen experts, best first */
    float *q;        /* [N, k] post-softmax top-k: softmax over the k chosen logits (unscaled) */
    float *gate;     /* [N, k] the routing probabilities the experts' outputs are weighed by */
    float *jitter;   /* [N, C] the input jitter's factors, or NULL */
    float *xj;       /* [N, C] the jittered router input, or NULL (the input itself) */
    int32_t *tokens_per_expert; /* [E] this rank's assignments before dropping */
    float *tokens_global;       /* [E] the same summed over the partitions (aux_loss) */
    /* the losses, training forwards only (0 otherwise): the coefficient's product (what the
     * gradient sees) and the value without it (what the log shows: Megatron logs loss / coeff) */
    int has_aux, has_z;
    double aux_loss, aux_value, z_loss, z_value;
} moe_routing;

/* Allocates r's buffers for a micro-batch of B x T tokens (this rank's share of them) /
 * frees them. */
void moe_routing_alloc(moe_routing *r, const transformer_config *c, int B, int T);
void moe_routing_free(moe_routing *r);

/* Routes x [N, C] with gate weight w [E, C]. training: the losses, Sinkhorn's training choice.
 * key: the layer's dropout key (input jitter). The losses that need the kept assignments
 * (seq_aux_loss) are finished by moe_router_seq_aux_loss once they are known. */
void moe_router_forward(const transformer_config *c, const float *w, const float *x,
                        int training, dropout_key key, moe_routing *r);
/* seq_aux_loss: the per-sequence balancing loss over the kept assignments (kept [N, E] 0/1,
 * after capacity; NULL: every routed one). */
void moe_router_seq_aux_loss(const transformer_config *c, moe_routing *r, const uint8_t *kept);

/* dgate [N, k]: the gradient w.r.t. r->gate (0 where a dropped assignment). Adds the router's
 * input gradient into dx [N, C] and its weight gradient into dw [E, C]; the losses enter with
 * d(objective)/d(loss) = grad_scale (Megatron's MoEAuxLossAutoScaler scale). kept as for
 * moe_router_seq_aux_loss. */
void moe_router_backward(const transformer_config *c, const float *w, const float *x,
                         const moe_routing *r, const float *dgate, const uint8_t *kept,
                         float grad_scale, float *dx, float *dw);

#endif
