/* The GPT model (Megatron-core's GPTModel): embedding -> transformer block -> final norm ->
 * output layer (tied to the word embedding unless untied) -> cross-entropy with a loss mask.
 *
 * The model holds what every micro-batch shares: the parameters (one param_set of flat
 * buffers laid out from core/models/gpt_param_table.h, Megatron-core names, docs/CHECKPOINT.md), their
 * gradients and AdamW's moments, and the workspaces, allocated once in gpt_model_create for up to
 * max_batch x seq_length tokens. What one micro-batch keeps between forward and backward is an
 * activation store's (activation_store.h), also allocated once; so a training step never
 * allocates, but in an MoE layer, whose kept tensors' sizes depend on the routing: each forward
 * allocates them and its backward frees them (core/transformer/moe/moe_layer.h). */
#ifndef MEGADLM_CORE_MODELS_GPT_MODEL_H
#define MEGADLM_CORE_MODELS_GPT_MODEL_H

#include <stdint.h>

#include "core/models/activation_store.h"
#include "core/models/gpt_param_table.h"
#include "core/tensor/tensor.h"
#include "core/transformer/transformer_block.h"
#include "core/transformer/transformer_config.h"

/* What a model is built for. */
typedef enum {
    GPT_MODEL_FORWARD_ONLY,  /* parameters and forward workspaces (generation, evaluation) */
    GPT_MODEL_TRAINING,      /* also gradients, AdamW's moments and backward workspaces */
    GPT_MODEL_TRAINING_SHARDED_OPTIMIZER /* training without the moments (and under --bf16
                                          * without the fp32 main parameters): the
                                          * distributed optimizer holds its shard of them */
} gpt_model_kind;

typedef struct gpt_model {
    transformer_config cfg;
    int max_batch;        /* B the buffers were sized for */
    gpt_model_kind kind;
    param_set params;

    float *wte, *wpe, *lnf_w, *lnf_b, *out_w;     /* parameters (wpe/lnf_b/out_w may be NULL) */
    float *g_wte, *g_wpe, *g_lnf_w, *g_lnf_b, *g_out_w; /* their gradients */
    /* --bf16 / --fp16: the model reads only its 16-bit parameters. The word embedding and the
     * output layer (GEMM weights) from the 16-bit copy (wte and out_w are then NULL); the
     * tensors the kernels read in fp32 (norms, biases, learned positions: wpe, lnf_w, lnf_b
     * and the layers' like them) from `widened`, their 16-bit values widened (category
     * workspace), refreshed by gpt_model_params_widen. */
    const uint16_t *wte16, *out_w16;
    float *widened;
    size_t *widened_at; /* [params.count]: tensor i's offset in widened; SIZE_MAX: a GEMM weight */
    unsigned char *widen_pending; /* [params.count] an overlapped all-gather rewrote tensor i's
                                     16-bit values since it was last widened */
    transformer_block block;
    /* mixture of experts: the routers' losses of the training forwards since the training loop
     * last read them (moe/moe_layer.h); num_layers 0 in a dense model */
    struct moe_tracker *moe_tracker;

    /* workspaces for up to max_batch x seq_length / CP tokens (N; Ns of them outside TP
     * regions) */
    float *dlosses;       /* [N] */
    float *dres;          /* [Ns, C] residual-stream gradient (the stores' default `grad`) */
    float *demb;          /* [N, C] embedding gradient before dropout */
    float *rope_cos, *rope_sin; /* [seq_length, rot_dim/2] */
    float *emb_partial;   /* [N, C] vocab-parallel lookup before its reduction (TP only) */
    float *ce_sumexp;     /* [N] vocab-parallel cross-entropy scratch (TP only) */
    /* context parallelism: this rank's rows of the micro-batch [B, T/CP] (cp_layout.h): the
     * tokens and labels (int32, in float-sized slots) and the loss weights */
    float *cp_batch;      /* [3, N] (CP only; N counts a rank's positions) */
    /* Masked-diffusion training (every labelled forward sets gpt_batch.loss_rows_only): the
     * stores made while this is set hold logits for min(N, GPT_HEAD_CHUNK_ROWS) rows only
     * (activation_store.logits_rows); a forward that needs all N rows then dies */
    int logits_in_chunks;

    /* The rank's parameters (names, shapes, where each part's parameters sit in the flat
     * buffers: spec.layer_begin; gpt_param_table.h); params.tensors is spec's table. With
     * interleaving the rank's layers are its model chunks' in chunk order (local layer l is
     * chunk l / layers per chunk), so each chunk's parameters are one range. */
    gpt_param_table spec;
    int num_chunks;      /* model chunks of this rank (1 without interleaving) */
    /* Called during backward whenever a range of the gradient buffer has received this
     * micro-batch's last contribution (head, each layer, then the embedding, which also holds
     * a tied output layer's gradient); NULL = none. For overlapped gradient reduction. */
    void (*grads_done)(void *user, size_t begin, size_t end);
    void *grads_done_user;
    /* Called before the parameters of [begin, end) are read (the embedding, each layer, the
     * head; in forward, and again in recomputation and backward), e.g. to wait for an
     * all-gather of the distributed optimizer
     * (--overlap-param-gather); NULL = none. Under --bf16 the model then widens the range's
     * fp32-read values from the (now gathered) 16-bit copy. */
    void (*params_needed)(void *user, size_t begin, size_t end);
    void *params_needed_user;
    /* Called after the range a params_needed call asked for has been used (FSDP's
     * optim_grads_params frees the gathered parameters here, core/distributed/fsdp.h); the
     * ranges are the embedding's, a layer's or the head's, each asked for again before every
     * use: forward, recomputation, backward. NULL = none. */
    void (*params_done)(void *user, size_t begin, size_t end);
    void *params_done_user;
    /* --debug --detect-anomaly (torch.autograd.detect_anomaly's CPU meaning): backward checks
     * each range's gradients and the residual-stream gradient it hands on for NaN/Inf and
     * dies naming the first tensor where one appears after anomaly_where (set by the caller:
     * what it checks for and which iteration and micro-batch, e.g. training's
     * "--detect-anomaly: iteration 3, micro-batch 0 of data-parallel rank 0") */
    int detect_anomaly;
    int anomaly_nan_only; /* with loss scaling: an Inf is an overflow, the scaler's business
                             (torch's anomaly mode checks for NaN only) */
    char anomaly_where[128];
    const float *anomaly_dres; /* during backward: the store's residual-stream gradient */
    size_t anomaly_dres_len;
} gpt_model;

/* Lays the parameters out (gpt_param_table_rank), allocates them and what `kind` asks for, and the
 * workspaces for max_batch x cfg->seq_length tokens. Parameters are left zero: call
 * gpt_model_init_params or load a checkpoint. Forward and backward need an activation store
 * (activation_store_create). */
gpt_model *gpt_model_create(const transformer_config *cfg, int max_batch, gpt_model_kind kind);
void gpt_model_free(gpt_model *m);
/* A store for m's micro-batches: with full recompute, checkpointed = 0 makes it keep everything
 * (per-micro-batch partial recompute). Runs model chunk 0. Free it before the model. (The model
 * builds it, from its own sizes, so that activation_store.c needs nothing of the model.) */
activation_store *activation_store_create(const gpt_model *m, int checkpointed);

/* Megatron's init: normal(0, init_method_std) for weights and embeddings, std/sqrt(2L) for
 * linear_proj and linear_fc2, norms 1, biases 0. Element values depend only on (seed, tensor
 * index, element index). */
void gpt_model_init_params(gpt_model *m, uint64_t seed);

/* --bf16 / --fp16: rounds the fp32 main parameters (params.main, when the model holds them
 * whole) into the model's 16-bit copy (params.data_bf16, in the run's format: bf16 or fp16),
 * which the model reads, and refreshes the widened values (gpt_model_params_widen). Call after
 * anything writes params.main: a checkpoint load, the optimizer step (init does it). No-op in
 * fp32. */
void gpt_model_params_to_bf16(gpt_model *m);
/* Points params.grad and every gradient pointer of the model at grad (the whole flat size, or
 * NULL: no gradients held; core/distributed/fsdp.h's buffer of one backward). */
void gpt_model_set_grad(void *model, float *grad);
/* Points the model's parameter pointers of the tensors in [lo, hi) of the flat buffer at base
 * (element i at base[i - lo]; NULL: not held; FSDP's gathered parameters): fp32 values, or
 * under --bf16 / --fp16 the 16-bit copy's (the GEMM weights read in place, the others widened
 * into the model's fp32 copy of them). */
void gpt_model_set_data_range(void *model, size_t lo, size_t hi, void *base);
/* The same for their gradients (FSDP's per-unit gradient buffers). */
void gpt_model_set_grad_range(void *model, size_t lo, size_t hi, float *base);
/* --bf16 / --fp16: refreshes the widened fp32 values of the tensors in [begin, end) of the flat
 * buffer from the 16-bit copy; call after anything writes the copy there (a parameter
 * all-gather). gpt_model_params_to_bf16 does it for everything. No-op in fp32. */
void gpt_model_params_widen(gpt_model *m, size_t begin, size_t end);
/* --bf16 / --fp16 with --overlap-param-gather: the 16-bit copy is being all-gathered after the
 * step; each tensor's widened values are refreshed once, by the first forward whose
 * params_needed hook has completed the gather of its range (not on every micro-batch). */
void gpt_model_params_gathering(gpt_model *m);
/* The widest row a linear of this config reads or writes (input or output features): the bf16
 * operand workspace's row width. */
int gpt_model_linear_max_width(const transformer_config *c);

/* The loss-weighted rows (gpt_batch.loss_rows_only) go through the output layer and the
 * cross-entropy this many at a time, their backward fused into forward, so the logits buffer
 * holds this many rows, not N = b x s. 256 rows: a quarter of GPT-2 124M's micro-batch of
 * 4 x 256 tokens (masked diffusion weighs about half of them, so two chunks), large enough that
 * the output layer's GEMMs (256 x h x V/t) still run at full speed on the BLAS kernels. */
#define GPT_HEAD_CHUNK_ROWS 256

/* Rows of a store's logits buffer for micro-batches of N tokens: N, or with the head in chunks
 * (gpt_model.logits_in_chunks) min(N, GPT_HEAD_CHUNK_ROWS). */
static inline int gpt_head_logits_rows(int N, int in_chunks) {
    return in_chunks && N > GPT_HEAD_CHUNK_ROWS ? GPT_HEAD_CHUNK_ROWS : N;
}

typedef struct {
    uint64_t seed;       /* --seed */
    uint32_t iteration;  /* dropout key */
    uint32_t microbatch; /* dropout key */
    int training;        /* dropout on */
} gpt_step;

/* One micro-batch. The loss is sum(loss * loss_mask) / denominator; the masked-diffusion
 * objective weighs masked tokens by 1/p and divides by the loss-mask count. */
typedef struct {
    const int32_t *tokens;  /* [B, T] */
    const int32_t *labels;  /* [B, T], or NULL: logits only */
    const float *loss_mask; /* [B, T] per-token loss weights, or NULL: all 1 */
    float denominator;      /* <= 0: the sum of the weights (the token-averaged loss) */
    int B, T;
    int T_valid;            /* > 0 and < T: positions from T_valid on are padding, their keys
                               masked out (their loss weights must be 0); else none */
    int loss_rows_only;     /* training models with labels and a loss mask: only the rows of
                               nonzero loss weight go through the output layer and the
                               cross-entropy (masked diffusion; the same loss and gradients to
                               rounding: the others weigh 0); 0: every row */
    const uint8_t *logit_rows; /* [B, T] without labels: only the rows marked nonzero get
                               logits, in order (s->head_rows of them); NULL: every row */
    /* Packed documents (models with cfg.packed_docs), [B, T] over the whole sequences: */
    const int32_t *position_ids; /* learned-position rows (position_offset included), or NULL */
    const int32_t *doc_start, *doc_end; /* each position's document [start, end), or NULL */
    struct inference_context *inference; /* or NULL: a forward without labels also fills this
                               key/value cache with every position's rows (generation:
                               core/inference/gpt_inference_wrapper.h) */
    float grad_seed;        /* loss_rows_only, training forward: d(objective)/d(loss), the
                               loss_scale the backward will be given (Megatron's loss scale /
                               num_microbatches); the head's backward runs in forward with it */
} gpt_batch;

/* Forward of b on the store s (B <= max_batch, T <= seq_length). Returns the loss on the
 * pipeline's last stage (0 without labels, and on other stages: their output is s->output).
 * The logits stay in s->logits [B, T, V/t] until backward. With b->loss_rows_only the
 * loss-weighted rows run in chunks of GPT_HEAD_CHUNK_ROWS: a training forward (step.training)
 * already computes the output layer's weight gradient (accumulated into m->params.grad) and the
 * gradient w.r.t. the final norm output (kept in the store), with d(objective)/d(loss) =
 * b->grad_seed; an evaluation forward computes the loss only. */
float gpt_model_forward(gpt_model *m, activation_store *s, const gpt_batch *b, gpt_step step);
/* Backward of s's last forward, with d(objective)/d(loss) = loss_scale (1/num_microbatches for
 * gradient accumulation). Gradients accumulate into m->params.grad. The sums across TP, DP and
 * the embedding group that follow the last micro-batch's backward are
 * core/distributed/finalize_model_grads.h's. */
void gpt_model_backward(gpt_model *m, activation_store *s, float loss_scale);

#endif
