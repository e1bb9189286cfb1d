/* The GPT model (Megatron-core's GPTModel): embedding -> transformer block -> final norm ->
 * output layer (tied to the word embedding unless untied) -> cross-entropy with a loss mask.
 *
 * All parameters live in one param_set (flat buffers, Megatron-core names, see
 * docs/CHECKPOINT.md); all activations and workspaces are allocated once, in gpt_model_create,
 * for up to max_batch x seq_length tokens, so a training step never allocates. */
#ifndef MEGADLM_CORE_MODELS_GPT_MODEL_H
#define MEGADLM_CORE_MODELS_GPT_MODEL_H

#include <stdint.h>

#include "core/models/gpt_spec.h"
#include "core/tensor/tensor.h"
#include "core/transformer/transformer_block.h"
#include "core/transformer/transformer_config.h"

typedef struct {
    transformer_config cfg;
    int max_batch;        /* B the buffers were sized for */
    int with_backward;    /* grads, optimizer state and backward workspaces allocated (2: no
                           * optimizer state: the distributed optimizer holds it, sharded) */
    param_set params;

    float *wte, *wpe, *lnf_w, *lnf_b, *out_w;     /* parameters (wpe/lnf_b/out_w may be NULL) */
    float *g_wte, *g_wpe, *g_lnf_w, *g_lnf_b, *g_out_w; /* their gradients */
    transformer_block block;

    /* buffers for up to max_batch x seq_length tokens (N) */
    int *tokens;          /* [N] */
    int *labels;          /* [N] */
    float *loss_mask;     /* [N] */
    float *lnf;           /* [N, C] final norm output (saved) */
    float *lnf_mean, *lnf_rstd; /* [N] */
    float *logits;        /* [N, V] (holds dlogits during backward) */
    float *losses, *lse;  /* [N] per-token loss, logsumexp */
    float *dlosses;       /* [N] */
    float *dres;          /* [N, C] residual-stream gradient (one of dres_slot) */
    float *dres_slot[2];  /* its buffers: [1] only with interleaving (workspace) */
    float *stage_recv;    /* [Ns, C] interleaving: a chunk's input received before the chunk
                           * has a store (workspace) */
    float *demb;          /* [N, C] embedding gradient before dropout */
    float *rope_cos, *rope_sin; /* [seq_length, rot_dim/2] */
    float *emb_partial;   /* [N, C] vocab-parallel lookup before its reduction (TP only) */
    float *ce_sumexp;     /* [N] vocab-parallel cross-entropy scratch (TP only) */

    /* The rank's parameters (names, shapes, where each part's parameters sit in the flat
     * buffers: spec.layer_begin; gpt_spec.h); params.tensors is spec's table. With
     * interleaving the rank's layers are its model chunks' in chunk order (local layer l is
     * chunk l / layers per chunk), so each chunk's parameters are one range. */
    gpt_spec spec;
    int num_chunks;      /* model chunks of this rank (1 without interleaving) */
    /* Called during backward whenever a range of the gradient buffer has received this
     * micro-batch's last contribution (head, each layer, then the embedding, which also holds
     * a tied output layer's gradient); NULL = none. For overlapped gradient reduction. */
    void (*grads_done)(void *user, size_t begin, size_t end);
    void *grads_done_user;
    /* Called during forward before the parameters of [begin, end) are read (the embedding,
     * each layer, the head), e.g. to wait for an all-gather of the distributed optimizer
     * (--overlap-param-gather); NULL = none. */
    void (*params_needed)(void *user, size_t begin, size_t end);
    void *params_needed_user;

    int replica;          /* an activation store sharing its owner's parameters (pipelines) */

    /* the last forward call, which backward differentiates */
    int B, T;
    float loss_mask_sum;
    layer_ctx ctx;
} gpt_model;

/* Builds names/shapes, allocates parameters (and, with_backward, gradients, AdamW state (not
 * with with_backward = 2, for the distributed optimizer, which allocates its shard) and
 * backward workspaces) and activations for max_batch x cfg->seq_length. Parameters are left
 * zero: call gpt_model_init_params or load a checkpoint. */
gpt_model *gpt_model_create(const transformer_config *cfg, int max_batch, int with_backward);
void gpt_model_free(gpt_model *m);
/* One more activation store for a micro-batch in flight (pipeline schedules hold several): its
 * own layer inputs, saved tensors, tokens and head buffers; parameters, gradients, optimizer
 * state, workspaces and recompute slots are the owner's. With full recompute, checkpointed = 0
 * makes this store keep everything (per-micro-batch partial recompute). Free it with
 * gpt_model_free before the owner. */
gpt_model *gpt_model_replica(const gpt_model *owner, int checkpointed);

/* Megatron's init: normal(0, init_method_std) for weights and embeddings, std/sqrt(2L) for
 * linear_proj and linear_fc2, norms 1, biases 0. Element values depend only on (seed, tensor
 * index, element index). */
void gpt_model_init_params(gpt_model *m, uint64_t seed);

typedef struct {
    uint64_t seed;       /* --seed */
    uint32_t iteration;  /* dropout key */
    uint32_t microbatch; /* dropout key */
    int training;        /* dropout on */
} gpt_step;

/* tokens/labels/loss_mask [B, T] (labels and loss_mask may be NULL: logits only).
 * Returns the token-averaged loss sum(loss * mask) / sum(mask) (0 without labels).
 * Logits of the last call stay in m->logits [B, T, V] until backward. */
float gpt_model_forward(gpt_model *m, const int32_t *tokens, const int32_t *labels,
                        const float *loss_mask, int B, int T, gpt_step step);
/* The same with per-token loss weights and the denominator given: loss =
 * sum(loss * weights) / denominator (denominator <= 0: sum(weights)). The masked-diffusion
 * objective weighs masked tokens by 1/p and divides by the loss-mask count. */
float gpt_model_forward_weighted(gpt_model *m, const int32_t *tokens, const int32_t *labels,
                                 const float *weights, float denominator, int B, int T,
                                 gpt_step step);
/* Backward of the last forward, with d(objective)/d(loss) = loss_scale (1/num_microbatches for
 * gradient accumulation). Gradients accumulate into m->params.grad. */
void gpt_model_backward(gpt_model *m, float loss_scale);
/* The sums across TP, DP and the embedding group that follow the last micro-batch's backward
 * are core/distributed/finalize_model_grads.h's. */

/* Pipeline stages. A stage that is not the first reads its input from gpt_model_stage_input
 * (receive the previous stage's output there before forward); one that is not the last leaves
 * its output in gpt_model_stage_output, takes the gradient w.r.t. it in
 * gpt_model_stage_output_grad (receive before backward) and leaves the gradient w.r.t. its
 * input in gpt_model_stage_input_grad. Each is gpt_model_stage_floats floats. Only the last
 * stage computes a loss (forward returns 0 elsewhere). */
size_t gpt_model_stage_floats(const gpt_model *m);
/* Interleaved schedule: a store runs whichever model chunk it is set to (its parameters, layer
 * indices, and whether it is the pipeline's first or last stage: cfg.vp_rank); the gradient
 * w.r.t. the chunk's output / input lives in one of two buffers shared by all stores
 * (gpt_model_grad_slot), chosen with gpt_model_use_grad_slot before backward, so the next
 * backward's output gradient can arrive while the last one's input gradient is sent; the next
 * chunk input arrives in gpt_model_stage_recv_buffer (the owner's, with backward), copied to a
 * store's input when the store is taken. */
void gpt_model_set_chunk(gpt_model *m, int chunk);
float *gpt_model_grad_slot(gpt_model *m, int slot);
void gpt_model_use_grad_slot(gpt_model *m, int slot);
float *gpt_model_stage_recv_buffer(gpt_model *m);
float *gpt_model_stage_input(gpt_model *m);
float *gpt_model_stage_output(gpt_model *m);
float *gpt_model_stage_output_grad(gpt_model *m);
float *gpt_model_stage_input_grad(gpt_model *m);

#endif
