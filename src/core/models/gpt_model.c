#include "core/models/gpt_model.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/kernels/cross_entropy.h"
#include "core/kernels/dropout.h"
#include "core/kernels/linear.h"
#include "core/kernels/norm.h"
#include "core/kernels/rope.h"
#include "core/random/philox.h"
#include "core/tensor/memory.h"
#include "core/threads.h"
#include "core/models/gpt_spec.h"
#include "core/tensor_parallel/layers.h"
#include "core/tensor_parallel/mappings.h"
#include "core/tensor_parallel/parallel_linear.h"
#include "core/util/alloc.h"
#include "core/transformer/transformer_layer.h"
#include "core/util/die.h"

/* The hooks (gpt_model.h) over ranges of the flat buffers: [begin, end) has received this
 * micro-batch's last gradient contribution / is about to be read by forward. */
static void grads_done(gpt_model *m, size_t begin, size_t end) {
    if (m->grads_done) m->grads_done(m->grads_done_user, begin, end);
}
static void params_needed(gpt_model *m, size_t begin, size_t end) {
    if (m->params_needed) m->params_needed(m->params_needed_user, begin, end);
}
/* The embedding's range is [0, layer_begin[0]), the head's (final norm, untied output layer)
 * [layer_begin[L], numel); a tied output layer is the embedding. */
static size_t head_begin(const gpt_model *m) { return m->spec.layer_begin[m->spec.num_layers]; }

/* Block callbacks: layer l (among the rank's layers) -> its range of the flat buffer. */
static void layer_grads_done(void *user, int l) {
    gpt_model *m = user;
    grads_done(m, m->spec.layer_begin[l], m->spec.layer_begin[l + 1]);
}
static void layer_params_needed(void *user, int l) {
    gpt_model *m = user;
    params_needed(m, m->spec.layer_begin[l], m->spec.layer_begin[l + 1]);
}

/* Where the model keeps a pointer to a tensor of `part` (not a layer's), or to its gradient. */
static float **part_slot(gpt_model *m, gpt_param_part part, int grad) {
    switch (part) {
    case GPT_PARAM_WORD_EMBEDDING: return grad ? &m->g_wte : &m->wte;
    case GPT_PARAM_POSITION_EMBEDDING: return grad ? &m->g_wpe : &m->wpe;
    case GPT_PARAM_FINAL_NORM_WEIGHT: return grad ? &m->g_lnf_w : &m->lnf_w;
    case GPT_PARAM_FINAL_NORM_BIAS: return grad ? &m->g_lnf_b : &m->lnf_b;
    case GPT_PARAM_OUTPUT_LAYER: return grad ? &m->g_out_w : &m->out_w;
    default: die(1, "internal error: parameter part %d has no model slot", (int)part);
    }
    return NULL;
}

/* The rank's parameters as gpt_spec_rank describes them, over flat buffers (gradients and
 * AdamW's moments as the model's kind asks); every weight pointer of the model and of its
 * layers points into them through its tensor's place. */
static void build_params(gpt_model *m) {
    const transformer_config *c = &m->cfg;
    int bw = m->with_backward;
    gpt_spec *sp = &m->spec;
    gpt_spec_rank(c, sp);
    param_set *ps = &m->params;
    *ps = sp->params; /* the spec's table; the buffers are the model's */
    ps->data = mem_alloc_floats(MEM_PARAMS, ps->numel, "parameters");
    if (bw) {
        ps->grad = mem_alloc_floats(MEM_GRADS, ps->numel, "gradients");
        if (bw != 2) { /* 2: the distributed optimizer allocates its shard */
            ps->exp_avg = mem_alloc_floats(MEM_OPTIMIZER, ps->numel, "adam exp_avg");
            ps->exp_avg_sq = mem_alloc_floats(MEM_OPTIMIZER, ps->numel, "adam exp_avg_sq");
        }
    }
    for (int l = 0; l < sp->num_layers; l++)
        for (int i = sp->layer_first[l]; i < sp->layer_first[l + 1]; i++) {
            size_t field = sp->place[i].field, o = ps->tensors[i].offset;
            *(float **)((char *)&m->block.w_all[l] + field) = ps->data + o;
            if (bw) *(float **)((char *)&m->block.g_all[l] + field) = ps->grad + o;
        }
    for (int i = 0; i < ps->count; i++) {
        if (sp->place[i].part == GPT_PARAM_LAYER) continue;
        *part_slot(m, sp->place[i].part, 0) = ps->data + ps->tensors[i].offset;
        if (bw) *part_slot(m, sp->place[i].part, 1) = ps->grad + ps->tensors[i].offset;
    }
    if (!c->untie_embeddings_and_output_weights && tc_first_rank(c)) {
        m->out_w = m->wte; /* tied: the output layer reads the word embedding */
        m->g_out_w = m->g_wte;
    }
    m->block.layer_grads_done = layer_grads_done;
    m->block.layer_grads_done_user = m;
    m->block.layer_params_needed = layer_params_needed;
    m->block.layer_params_needed_user = m;
}

/* What one micro-batch in flight keeps outside the block: its tokens and labels, and on the
 * last stage the head's saved tensors. */
static void alloc_store(gpt_model *m) {
    const transformer_config *c = &m->cfg;
    size_t N = (size_t)m->max_batch * c->seq_length, C = c->hidden_size, V = tc_vocab_local(c);
    size_t Ns = tc_tokens_local(c, (int)N);
    m->tokens = mem_alloc(MEM_OTHER, N * sizeof(int), "tokens");
    m->labels = mem_alloc(MEM_OTHER, N * sizeof(int), "labels");
    m->loss_mask = mem_alloc_floats(MEM_OTHER, N, "loss mask");
    if (!tc_last_rank(c)) return; /* (interleaved: every store may hold the last chunk) */
    m->lnf = mem_alloc_floats(MEM_ACTIVATIONS, Ns * C, "final norm output");
    if (c->normalization == NORM_LAYERNORM)
        m->lnf_mean = mem_alloc_floats(MEM_ACTIVATIONS, Ns, "final norm mean");
    m->lnf_rstd = mem_alloc_floats(MEM_ACTIVATIONS, Ns, "final norm rstd");
    m->logits = mem_alloc_floats(MEM_ACTIVATIONS, N * V, "logits");
    m->losses = mem_alloc_floats(MEM_ACTIVATIONS, N, "per-token loss");
    m->lse = mem_alloc_floats(MEM_ACTIVATIONS, N, "logsumexp");
}

static void free_store(gpt_model *m) {
    void *bufs[] = {m->tokens, m->labels, m->loss_mask, m->lnf,   m->lnf_mean,
                    m->lnf_rstd, m->logits, m->losses,  m->lse};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) mem_free(bufs[i]);
}

gpt_model *gpt_model_create(const transformer_config *cfg, int max_batch, int with_backward) {
    gpt_model *m = xcalloc(1, sizeof(gpt_model), "model");
    m->cfg = *cfg;
    m->max_batch = max_batch;
    m->with_backward = with_backward;
    m->cfg.vp_rank = 0;
    const transformer_config *c = &m->cfg;
    m->num_chunks = tc_vp(c);
    /* the block's workspaces are sized for this rank's threads (core/threads.h); no kernel
     * runs more threads than they were sized for */
    transformer_block_init(&m->block, c, max_batch, c->seq_length, with_backward,
                           threads_per_rank());
    build_params(m);
    alloc_store(m);

    /* N tokens, Ns of them outside tensor-parallel regions */
    size_t N = (size_t)max_batch * c->seq_length, C = c->hidden_size;
    size_t Ns = tc_tokens_local(c, (int)N);
    if (with_backward) {
        m->dlosses = mem_alloc_floats(MEM_WORKSPACE, N, "dlosses");
        m->dres = m->dres_slot[0] = mem_alloc_floats(MEM_WORKSPACE, Ns * C, "residual gradient");
        /* the interleaved schedule receives the next backward's output gradient while the
         * last one's input gradient is still being sent: a second buffer */
        if (tc_vp(c) > 1) {
            m->dres_slot[1] = mem_alloc_floats(MEM_WORKSPACE, Ns * C, "residual gradient (2)");
            /* ... and takes a chunk's input before it has a store for it */
            m->stage_recv = mem_alloc_floats(MEM_WORKSPACE, Ns * C, "received stage input");
        }
        m->demb = mem_alloc_floats(MEM_WORKSPACE, N * C, "embedding gradient");
    }
    if (tc_tp(c) > 1) { /* the vocab-parallel lookup's partial sums before the reduction */
        m->emb_partial = mem_alloc_floats(MEM_WORKSPACE, N * C, "embedding partial lookup");
        m->ce_sumexp = mem_alloc_floats(MEM_WORKSPACE, N, "cross-entropy sum of exponentials");
    }
    if (c->rope) {
        size_t half = c->rot_dim / 2;
        m->rope_cos = mem_alloc_floats(MEM_OTHER, c->seq_length * half, "rope cos");
        m->rope_sin = mem_alloc_floats(MEM_OTHER, c->seq_length * half, "rope sin");
        rope_tables(m->rope_cos, m->rope_sin, c->seq_length, c->rot_dim, c->rotary_base, 0);
    }
    return m;
}

gpt_model *gpt_model_replica(const gpt_model *owner, int checkpointed) {
    gpt_model *m = xmalloc(sizeof(gpt_model), "activation store");
    *m = *owner; /* parameters, workspaces, tables: shared */
    m->replica = 1;
    m->cfg.recompute_store_unchecked = !checkpointed;
    transformer_block_init_replica(&m->block, &m->cfg, m->max_batch, m->cfg.seq_length,
                                   &owner->block);
    alloc_store(m);
    return m;
}

void gpt_model_free(gpt_model *m) {
    if (!m) return;
    transformer_block_free(&m->block);
    free_store(m);
    if (m->replica) {
        free(m);
        return;
    }
    param_set *ps = &m->params;
    mem_free(ps->data);
    mem_free(ps->grad);
    mem_free(ps->exp_avg);
    mem_free(ps->exp_avg_sq);
    gpt_spec_free(&m->spec); /* the tensor table */
    void *bufs[] = {m->dlosses,  m->dres_slot[0], m->dres_slot[1], m->stage_recv, m->demb,
                    m->rope_cos, m->rope_sin,     m->emb_partial,  m->ce_sumexp};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) mem_free(bufs[i]);
    free(m);
}

void gpt_model_init_params(gpt_model *m, uint64_t seed) {
    param_set *ps = &m->params;
    for (int i = 0; i < ps->count; i++) {
        const param_tensor *t = &ps->tensors[i];
        float *d = ps->data + t->offset;
        if (t->init_std > 0.0f && t->tp_split == TP_SPLIT_NONE) {
            philox_fill_normal(d, t->numel, t->init_std, seed, t->init_stream);
        } else if (t->init_std > 0.0f) {
            /* a TP slice gets the values the whole tensor has there */
            size_t len = t->numel / (size_t)t->shape[0];
            for (int64_t r = 0; r < t->shape[0]; r++)
                philox_fill_normal_range(d + (size_t)r * len,
                                         tp_shard_row_start(t, m->cfg.tp_rank, tc_tp(&m->cfg), r),
                                         len, t->init_std, seed, t->init_stream);
        } else {
            for (size_t k = 0; k < t->numel; k++) d[k] = t->init_value;
        }
    }
}

/* ---- forward / backward ---- */

static void final_norm_forward(const transformer_config *c, gpt_model *m, const float *h, int Ns) {
    norm_forward(c, m->lnf, m->lnf_mean, m->lnf_rstd, h, m->lnf_w, m->lnf_b, Ns);
}

static void final_norm_backward(const transformer_config *c, gpt_model *m, float *dh,
                                const float *dout, const float *h, int Ns) {
    norm_backward(c, dh, m->g_lnf_w, m->g_lnf_b, dout, h, m->lnf_w, m->lnf_mean, m->lnf_rstd,
                  Ns);
}

/* The word (+ position) embedding: vocab-parallel under tensor parallelism. */
static vocab_parallel_embedding embedding_of(gpt_model *m) {
    return (vocab_parallel_embedding){.cfg = &m->cfg, .wte = m->wte, .wpe = m->wpe,
                                      .dwte = m->g_wte, .dwpe = m->g_wpe,
                                      .partial = m->emb_partial};
}

float gpt_model_forward(gpt_model *m, const int32_t *tokens, const int32_t *labels,
                        const float *loss_mask, int B, int T, gpt_step step) {
    return gpt_model_forward_weighted(m, tokens, labels, loss_mask, 0.0f, B, T, step);
}

float gpt_model_forward_weighted(gpt_model *m, const int32_t *tokens, const int32_t *labels,
                                 const float *weights, float denominator, int B, int T,
                                 gpt_step step) {
    const transformer_config *c = &m->cfg;
    if (B > m->max_batch || T > c->seq_length)
        die(1, "internal error: batch %dx%d exceeds the model's buffers %dx%d", B, T,
            m->max_batch, c->seq_length);
    int N = B * T, Ns = tc_tokens_local(c, N), C = c->hidden_size, V = tc_vocab_local(c);
    m->B = B;
    m->T = T;
    memcpy(m->tokens, tokens, (size_t)N * sizeof(int));
    layer_ctx *ctx = &m->ctx;
    ctx->cfg = c;
    ctx->B = B;
    ctx->T = T;
    ctx->training = step.training;
    ctx->key = (dropout_key){.seed = step.seed, .iteration = step.iteration,
                             .microbatch = step.microbatch, .layer = 0, .site = 0};
    ctx->rope_cos = m->rope_cos;
    ctx->rope_sin = m->rope_sin;

    if (tc_first_stage(c)) {
        /* embedding + dropout (Megatron applies --hidden-dropout to the embedding output) */
        params_needed(m, 0, m->spec.layer_begin[0]);
        float *h0 = m->block.hidden[0];
        vocab_parallel_embedding emb = embedding_of(m);
        vocab_parallel_embedding_forward(&emb, h0, m->tokens, B, T);
        dropout_key ek = ctx->key;
        ek.site = DROPOUT_SITE_EMBEDDING;
        uint64_t off = tc_sp(c) ? (uint64_t)c->tp_rank * Ns * C : 0;
        dropout_forward(h0, h0, (size_t)Ns * C, step.training ? c->hidden_dropout : 0.0f, ek, off);
    } /* else: the previous stage's output was received into gpt_model_stage_input(m) */

    transformer_block_forward(&m->block, ctx);
    if (!tc_last_stage(c)) return 0.0f; /* output in gpt_model_stage_output(m) */

    /* final norm on the token shard, gathered for the vocab-parallel output layer */
    params_needed(m, head_begin(m), m->params.numel);
    final_norm_forward(c, m, m->block.hidden[m->block.num_layers], Ns);
    tp_linear out = tp_linear_make(c, TP_LINEAR_OUTPUT, m->block.ws.gathered, NULL, NULL);
    column_parallel_linear_forward(&out, m->logits, m->lnf, m->out_w, NULL, N, C, V);

    if (!labels) return 0.0f;
    memcpy(m->labels, labels, (size_t)N * sizeof(int));
    if (weights)
        memcpy(m->loss_mask, weights, (size_t)N * sizeof(float));
    else
        for (int i = 0; i < N; i++) m->loss_mask[i] = 1.0f;
    if (tc_tp(c) == 1)
        cross_entropy_forward(m->losses, m->lse, m->logits, m->labels, N, V);
    else
        vocab_parallel_cross_entropy_forward(m->losses, m->lse, m->ce_sumexp, m->logits,
                                             m->labels, c->tp_rank * V, V, N);
    double num = 0.0, den = 0.0;
    for (int i = 0; i < N; i++) {
        num += (double)m->losses[i] * m->loss_mask[i];
        den += m->loss_mask[i];
    }
    if (denominator > 0.0f) den = denominator;
    m->loss_mask_sum = (float)den;
    return den > 0.0 ? (float)(num / den) : 0.0f;
}

/* The head's backward (last stage): cross-entropy, output layer, final norm -> m->dres. */
static void head_backward(gpt_model *m, float loss_scale) {
    const transformer_config *c = &m->cfg;
    int N = m->B * m->T, Ns = tc_tokens_local(c, N), C = c->hidden_size, V = tc_vocab_local(c);
    size_t NsC = (size_t)Ns * C;

    /* loss = sum_i mask_i * loss_i / sum(mask) */
    float inv = m->loss_mask_sum > 0.0f ? loss_scale / m->loss_mask_sum : 0.0f;
    for (int i = 0; i < N; i++) m->dlosses[i] = m->loss_mask[i] * inv;
    if (tc_tp(c) == 1)
        cross_entropy_backward(m->logits, m->logits, m->lse, m->labels, m->dlosses, N, V);
    else
        vocab_parallel_cross_entropy_backward(m->logits, m->logits, m->lse, m->labels,
                                              c->tp_rank * V, m->dlosses, V, N);

    /* output layer (dlogits now in m->logits): m->demb [N, C] holds this rank's part of the
     * gradient w.r.t. the (gathered) final norm output, summed across TP into dln [Ns, C] */
    float *dln = tc_sp(c) ? m->block.ws.dln : m->demb;
    tp_linear out = tp_linear_make(c, TP_LINEAR_OUTPUT, m->block.ws.gathered, m->demb,
                                   m->block.ws.recv);
    column_parallel_linear_backward(&out, dln, m->g_out_w, NULL, m->logits, m->lnf, m->out_w, N,
                                    C, V);
    memset(m->dres, 0, NsC * sizeof(float));
    final_norm_backward(c, m, m->dres, dln, m->block.hidden[m->block.num_layers], Ns);
    grads_done(m, head_begin(m), m->params.numel);
}

void gpt_model_backward(gpt_model *m, float loss_scale) {
    const transformer_config *c = &m->cfg;
    int B = m->B, T = m->T, N = B * T, Ns = tc_tokens_local(c, N), C = c->hidden_size;
    size_t NsC = (size_t)Ns * C;
    const layer_ctx *ctx = &m->ctx;

    if (tc_last_stage(c)) head_backward(m, loss_scale);
    /* else: the next stage's gradient was received into gpt_model_stage_output_grad(m) */

    transformer_block_backward(&m->block, ctx, m->dres);
    if (!tc_first_stage(c)) return; /* gradient w.r.t. the input in gpt_model_stage_input_grad */

    memset(m->demb, 0, NsC * sizeof(float));
    dropout_key ek = ctx->key;
    ek.site = DROPOUT_SITE_EMBEDDING;
    uint64_t off = tc_sp(c) ? (uint64_t)c->tp_rank * Ns * C : 0;
    dropout_backward(m->demb, m->dres, NsC, ctx->training ? c->hidden_dropout : 0.0f, ek, off);
    vocab_parallel_embedding emb = embedding_of(m);
    vocab_parallel_embedding_backward(&emb, m->demb, m->tokens, B, T);
    grads_done(m, 0, m->spec.layer_begin[0]);
}

void gpt_model_set_chunk(gpt_model *m, int chunk) {
    if (chunk < 0 || chunk >= m->num_chunks)
        die(1, "internal error: model chunk %d of %d", chunk, m->num_chunks);
    m->cfg.vp_rank = chunk;
    transformer_block_bind(&m->block, chunk);
}

float *gpt_model_grad_slot(gpt_model *m, int slot) { return m->dres_slot[slot]; }
float *gpt_model_stage_recv_buffer(gpt_model *m) { return m->stage_recv; }
void gpt_model_use_grad_slot(gpt_model *m, int slot) { m->dres = m->dres_slot[slot]; }

size_t gpt_model_stage_floats(const gpt_model *m) { return m->block.hidden_floats; }
float *gpt_model_stage_input(gpt_model *m) { return m->block.hidden[0]; }
float *gpt_model_stage_output(gpt_model *m) { return m->block.hidden[m->block.num_layers]; }
float *gpt_model_stage_output_grad(gpt_model *m) { return m->dres; }
float *gpt_model_stage_input_grad(gpt_model *m) { return m->dres; }
