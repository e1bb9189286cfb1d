/* An activation store: what one micro-batch in flight keeps between its forward and its
 * backward, apart from the model (parameters, gradients, workspaces): its tokens, labels and
 * loss weights, the block's layer inputs and saved tensors (block_activations), and on the last
 * pipeline stage the head's (final norm output and statistics, logits, per-token losses).
 * gpt_model_forward / gpt_model_backward run a (model, store) pair; pipeline schedules hold one
 * store per micro-batch (model chunk, interleaved) in flight and never look inside the model
 * (core/pipeline_parallel/schedules.h).
 *
 * Pipeline stages: a stage that is not the first receives its input into `input` before
 * forward; one that is not the last leaves its output in `output`, receives the gradient w.r.t.
 * it into `grad` before backward and finds the gradient w.r.t. its input there afterwards
 * (backward updates it in place). Each is stage_floats floats. `grad` is the model's
 * residual-gradient workspace, shared by all stores, unless a schedule points it at a buffer of
 * its own (the interleaved schedule alternates two).
 *
 * With interleaving a store runs whichever model chunk activation_store_set_chunk names (its
 * parameters, global layer indices, and whether it is the pipeline's first or last stage), so
 * any store runs any chunk's micro-batch. With full recompute a store either follows the plan or
 * keeps everything (per-micro-batch partial recompute: cfg.recompute_store_unchecked). */
#ifndef MEGADLM_CORE_MODELS_ACTIVATION_STORE_H
#define MEGADLM_CORE_MODELS_ACTIVATION_STORE_H

#include <stddef.h>

#include "core/models/head_saved.h"
#include "core/transformer/transformer_block.h"
#include "core/transformer/transformer_config.h"

typedef struct activation_store {
    transformer_config cfg; /* the model's, with this store's chunk (vp_rank) and recompute kind */
    int max_batch;          /* the model's: B the buffers hold */
    int num_chunks;         /* model chunks of the rank (1 without interleaving) */
    block_activations block;

    /* pipeline stage buffers ([Ns, C] each, stage_floats floats) */
    float *input;           /* block.hidden[0] */
    float *output;          /* block.hidden[L] */
    float *grad;            /* output gradient in, input gradient out (see above) */
    size_t stage_floats;

    /* the micro-batch, for up to max_batch x seq_length tokens (N) */
    int *tokens;            /* [N] */
    int *labels;            /* [N] */
    float *loss_mask;       /* [N] per-token loss weights */
    int32_t *docs;          /* cfg.packed_docs: [3, max_batch x seq_length] the micro-batch's
                               document starts, ends and position ids (gpt_batch); else NULL */
    /* the head's saved tensors (last rank; with interleaving every store may run the last
     * chunk): lnf, lnf_mean, lnf_rstd, logits, losses, lse, from head_saved.h's table */
#define ACTIVATION_STORE_HEAD_FIELD(field, what, kept, floats) float *field;
    HEAD_SAVED_TENSORS(ACTIVATION_STORE_HEAD_FIELD)
#undef ACTIVATION_STORE_HEAD_FIELD
    int logits_rows;        /* N, or min(N, GPT_HEAD_CHUNK_ROWS) for a model whose forwards
                               run the loss-weighted rows in chunks (logits_in_chunks) */

    /* the last forward, which backward differentiates */
    int B, T;
    float loss_mask_sum;
    int head_rows;          /* >= 0: only that many rows reached the output layer (the rows of
                               nonzero loss weight, in order: gpt_batch.loss_rows_only);
                               logits, losses, lse and labels hold them; -1: all N rows */
    int head_dln;           /* head_rows >= 0 and a training forward: the head's backward ran
                               in forward; lnf holds the gradient w.r.t. the final norm output
                               ([Ns, C], reduced across TP), which is all backward reads */
    float grad_seed;        /* the d(objective)/d(loss) it ran with */
    layer_ctx ctx;
} activation_store;

/* activation_store_create (a store for a model's micro-batches) is the model's: gpt_model.h. */
void activation_store_free(activation_store *s);
/* Interleaving: the model chunk the store's next forward or backward runs. */
void activation_store_set_chunk(activation_store *s, int chunk);
/* Saved-activation bytes of the store's layer l (one model chunk's), as measured. */
size_t activation_store_layer_saved_bytes(const activation_store *s, int l);

#endif
