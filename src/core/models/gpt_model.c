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
#include "core/tensor_parallel/layers.h"
#include "core/tensor_parallel/mappings.h"
#include "core/tensor_parallel/parallel_linear.h"
#include "core/util/alloc.h"
#include "core/transformer/transformer_layer.h"
#include "core/util/die.h"

/* ---- parameter registration ----
 * Each parameter is registered with its name, shape, init and the addresses of the pointers
 * that must point at its data and gradient once the flat buffers exist. */

typedef struct {
    param_tensor *t;
    float ***slots; /* [n][2]: &data_ptr, &grad_ptr */
    int n, cap;
    uint64_t stream; /* init stream of the next tensor (its index in the whole model) */
    int tp;         /* tensor-parallel size: local shapes are 1/tp of whole ones along the split */
    int sp;         /* sequence parallelism: replicated norms/biases get partial gradients */
} param_builder;

/* Registers a tensor of whole shape `shape`, partitioned across TP as `split`. partial_grad:
 * each TP rank computes only part of its gradient (summed across TP after backward). */
static void add_param(param_builder *pb, float **data_slot, float **grad_slot, int weight_decay,
                      float init_std, float init_value, int ndim, const int64_t *shape, int split,
                      int partial_grad, const char *name) {
    if (pb->n == pb->cap) {
        pb->cap = pb->cap ? 2 * pb->cap : 64;
        pb->t = xrealloc(pb->t, pb->cap * sizeof(param_tensor), "parameter table");
        pb->slots = xrealloc(pb->slots, pb->cap * 2 * sizeof(float **), "parameter slots");
    }
    param_tensor *p = &pb->t[pb->n];
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "%s", name);
    p->ndim = ndim;
    p->numel = 1;
    for (int i = 0; i < ndim; i++) {
        p->full_shape[i] = p->shape[i] = shape[i];
        if ((i == 0 && (split == TP_SPLIT_ROWS || split == TP_SPLIT_ROWS_SWIGLU)) ||
            (i == 1 && split == TP_SPLIT_COLS))
            p->shape[i] = shape[i] / pb->tp;
        p->numel *= (size_t)p->shape[i];
    }
    p->tp_split = pb->tp > 1 ? split : TP_SPLIT_NONE;
    p->tp_duplicate = pb->tp > 1 && split == TP_SPLIT_NONE;
    p->tp_allreduce_grad = pb->tp > 1 && partial_grad;
    p->weight_decay = weight_decay;
    p->init_std = init_std;
    p->init_value = init_value;
    p->init_stream = pb->stream++;
    pb->slots[2 * pb->n] = data_slot;
    pb->slots[2 * pb->n + 1] = grad_slot;
    pb->n++;
}

/* weight matrix [rows, cols], normal(std), decayed */
static void add_matrix(param_builder *pb, float **d, float **g, float std, int64_t rows,
                       int64_t cols, int split, const char *name) {
    int64_t shape[2] = {rows, cols};
    add_param(pb, d, g, 1, std, 0.0f, 2, shape, split, 0, name);
}

/* vector [n], constant init, not decayed: a column-parallel bias (split with its weight's
 * rows), or a replicated norm weight / row-parallel bias (partial gradients under sequence
 * parallelism, where they act on token shards) */
static void add_vector(param_builder *pb, float **d, float **g, float value, int64_t n,
                       int split, const char *name) {
    add_param(pb, d, g, 0, 0.0f, value, 1, &n, split, split == TP_SPLIT_NONE && pb->sp, name);
}

static void register_layer(param_builder *pb, const transformer_config *c, int l,
                           layer_weights *w, layer_weights *g) {
    int64_t C = c->hidden_size, QKV = tc_qkv_width(c), HS = c->kv_channels;
    int64_t CTX = (int64_t)c->num_attention_heads * HS, F = c->ffn_hidden_size;
    int64_t FC1 = tc_fc1_width(c);
    int ln = c->normalization == NORM_LAYERNORM, bias = c->add_bias_linear;
    int fc1_split = c->swiglu ? TP_SPLIT_ROWS_SWIGLU : TP_SPLIT_ROWS;
    float std = c->init_method_std;
    float out_std = std / sqrtf(2.0f * c->num_layers); /* Megatron's scaled_init_method_normal */
    char n[PARAM_NAME_MAX];
#define NAME(suffix) (snprintf(n, sizeof(n), "decoder.layers.%d.%s", l, suffix), n)
#define G(field) (g ? &g->field : NULL)
    add_vector(pb, &w->ln1_w, G(ln1_w), 1.0f, C, TP_SPLIT_NONE, NAME("input_layernorm.weight"));
    if (ln) add_vector(pb, &w->ln1_b, G(ln1_b), 0.0f, C, TP_SPLIT_NONE, NAME("input_layernorm.bias"));
    add_matrix(pb, &w->qkv_w, G(qkv_w), std, QKV, C, TP_SPLIT_ROWS,
               NAME("self_attention.linear_qkv.weight"));
    if (bias)
        add_vector(pb, &w->qkv_b, G(qkv_b), 0.0f, QKV, TP_SPLIT_ROWS,
                   NAME("self_attention.linear_qkv.bias"));
    if (c->qk_layernorm) {
        /* shared by every head, used on this rank's heads only: always partial under TP */
        int64_t hs = HS;
        add_param(pb, &w->q_ln_w, G(q_ln_w), 0, 0.0f, 1.0f, 1, &hs, TP_SPLIT_NONE, 1,
                  NAME("self_attention.q_layernorm.weight"));
        if (ln)
            add_param(pb, &w->q_ln_b, G(q_ln_b), 0, 0.0f, 0.0f, 1, &hs, TP_SPLIT_NONE, 1,
                      NAME("self_attention.q_layernorm.bias"));
        add_param(pb, &w->k_ln_w, G(k_ln_w), 0, 0.0f, 1.0f, 1, &hs, TP_SPLIT_NONE, 1,
                  NAME("self_attention.k_layernorm.weight"));
        if (ln)
            add_param(pb, &w->k_ln_b, G(k_ln_b), 0, 0.0f, 0.0f, 1, &hs, TP_SPLIT_NONE, 1,
                      NAME("self_attention.k_layernorm.bias"));
    }
    add_matrix(pb, &w->proj_w, G(proj_w), out_std, C, CTX, TP_SPLIT_COLS,
               NAME("self_attention.linear_proj.weight"));
    if (bias)
        add_vector(pb, &w->proj_b, G(proj_b), 0.0f, C, TP_SPLIT_NONE,
                   NAME("self_attention.linear_proj.bias"));
    add_vector(pb, &w->ln2_w, G(ln2_w), 1.0f, C, TP_SPLIT_NONE, NAME("pre_mlp_layernorm.weight"));
    if (ln) add_vector(pb, &w->ln2_b, G(ln2_b), 0.0f, C, TP_SPLIT_NONE, NAME("pre_mlp_layernorm.bias"));
    add_matrix(pb, &w->fc1_w, G(fc1_w), std, FC1, C, fc1_split, NAME("mlp.linear_fc1.weight"));
    if (bias) add_vector(pb, &w->fc1_b, G(fc1_b), 0.0f, FC1, fc1_split, NAME("mlp.linear_fc1.bias"));
    add_matrix(pb, &w->fc2_w, G(fc2_w), out_std, C, F, TP_SPLIT_COLS, NAME("mlp.linear_fc2.weight"));
    if (bias) add_vector(pb, &w->fc2_b, G(fc2_b), 0.0f, C, TP_SPLIT_NONE, NAME("mlp.linear_fc2.bias"));
#undef NAME
#undef G
}

/* Block callback: layer l's gradients are complete -> its range of the flat buffer. */
static void layer_grads_done(void *user, int l) {
    gpt_model *m = user;
    if (m->grads_done) m->grads_done(m->grads_done_user, m->layer_begin[l], m->layer_begin[l + 1]);
}

/* Block callback: layer l is about to run forward -> its range of the flat buffer. */
static void layer_params_needed(void *user, int l) {
    gpt_model *m = user;
    if (m->params_needed)
        m->params_needed(m->params_needed_user, m->layer_begin[l], m->layer_begin[l + 1]);
}

/* Tensors one layer registers (register_layer's order), so that every pipeline stage can give
 * its tensors the init streams they have in the whole model. */
static int tensors_per_layer(const transformer_config *c) {
    int norm = c->normalization == NORM_LAYERNORM ? 2 : 1, bias = c->add_bias_linear ? 1 : 0;
    return norm + (1 + bias) + (c->qk_layernorm ? 2 * norm : 0) + (1 + bias) + norm +
           (1 + bias) + (1 + bias);
}

/* Registers the rank's tensors in pb (first_of_layer[l]: the index of local layer l's first
 * tensor, [L]: the end). */
static void register_params(gpt_model *m, param_builder *pbp, int *first_of_layer) {
    const transformer_config *c = &m->cfg;
    int bw = m->with_backward;
    param_builder pb = *pbp;
    float std = c->init_method_std;
    /* the rank's layers chunk by chunk (one chunk without interleaving): local layer l is layer
     * l % Lc of chunk l / Lc, so each chunk's parameters are one contiguous range */
    int n_embedding = c->rope ? 1 : 2, L = tc_stage_layers(c), Lc = tc_chunk_layers(c);
    int tied = !c->untie_embeddings_and_output_weights && tc_pp(c) > 1;
    if (tc_first_rank(c)) {
        if (tied) m->tied_embedding = pb.n;
        add_matrix(&pb, &m->wte, bw ? &m->g_wte : NULL, std, c->padded_vocab_size, c->hidden_size,
                   TP_SPLIT_ROWS, "embedding.word_embeddings.weight");
        if (!c->rope) {
            int64_t shape[2] = {c->max_position_embeddings, c->hidden_size};
            /* replicated; added on token shards under sequence parallelism (partial gradients) */
            add_param(&pb, &m->wpe, bw ? &m->g_wpe : NULL, 1, std, 0.0f, 2, shape,
                      TP_SPLIT_NONE, pb.sp, "embedding.position_embeddings.weight");
        }
    }
    for (int l = 0; l < L; l++) {
        first_of_layer[l] = pb.n;
        int global = tc_chunk_layer_offset(c, l / Lc) + l % Lc;
        pb.stream = (uint64_t)n_embedding + (uint64_t)global * tensors_per_layer(c);
        register_layer(&pb, c, global, &m->block.w_all[l], bw ? &m->block.g_all[l] : NULL);
    }
    first_of_layer[L] = pb.n;
    if (tc_last_rank(c)) {
        pb.stream = (uint64_t)n_embedding + (uint64_t)c->num_layers * tensors_per_layer(c);
        add_vector(&pb, &m->lnf_w, bw ? &m->g_lnf_w : NULL, 1.0f, c->hidden_size, TP_SPLIT_NONE,
                   "decoder.final_layernorm.weight");
        if (c->normalization == NORM_LAYERNORM)
            add_vector(&pb, &m->lnf_b, bw ? &m->g_lnf_b : NULL, 0.0f, c->hidden_size,
                       TP_SPLIT_NONE, "decoder.final_layernorm.bias");
        if (c->untie_embeddings_and_output_weights) {
            add_matrix(&pb, &m->out_w, bw ? &m->g_out_w : NULL, std, c->padded_vocab_size,
                       c->hidden_size, TP_SPLIT_ROWS, "output_layer.weight");
        } else if (!tc_first_rank(c)) {
            /* tied, on another stage than the embedding: Megatron's shared copy (same name,
             * same init stream, kept equal through the embedding group) */
            pb.stream = 0;
            m->tied_embedding = pb.n;
            add_matrix(&pb, &m->out_w, bw ? &m->g_out_w : NULL, std, c->padded_vocab_size,
                       c->hidden_size, TP_SPLIT_ROWS, "embedding.word_embeddings.weight");
            pb.t[pb.n - 1].pp_shared_copy = 1;
        }
    }
    *pbp = pb;
}

static void build_params(gpt_model *m) {
    const transformer_config *c = &m->cfg;
    int bw = m->with_backward, L = tc_stage_layers(c);
    param_builder pb = {.tp = tc_tp(c), .sp = tc_sp(c)};
    int first_of_layer[L + 1];
    register_params(m, &pb, first_of_layer);

    /* Weight decay: Megatron excludes biases and 1-D (norm) parameters, which add_vector
     * marks; embeddings and the output layer are decayed. */
    param_set *ps = &m->params;
    ps->count = pb.n;
    ps->tensors = pb.t;
    ps->numel = 0;
    for (int i = 0; i < pb.n; i++) {
        pb.t[i].offset = ps->numel;
        ps->numel += pb.t[i].numel;
    }
    m->layer_begin = xcalloc((size_t)L + 1, sizeof(size_t), "layer offsets");
    for (int l = 0; l <= L; l++)
        m->layer_begin[l] = first_of_layer[l] < pb.n ? pb.t[first_of_layer[l]].offset : ps->numel;
    m->block.layer_grads_done = layer_grads_done;
    m->block.layer_grads_done_user = m;
    m->block.layer_params_needed = layer_params_needed;
    m->block.layer_params_needed_user = m;
    ps->data = mem_alloc_floats(MEM_PARAMS, ps->numel, "parameters");
    if (bw) {
        ps->grad = mem_alloc_floats(MEM_GRADS, ps->numel, "gradients");
        if (bw != 2) { /* 2: the distributed optimizer allocates its shard */
            ps->exp_avg = mem_alloc_floats(MEM_OPTIMIZER, ps->numel, "adam exp_avg");
            ps->exp_avg_sq = mem_alloc_floats(MEM_OPTIMIZER, ps->numel, "adam exp_avg_sq");
        }
    }
    for (int i = 0; i < pb.n; i++) {
        *pb.slots[2 * i] = ps->data + pb.t[i].offset;
        if (pb.slots[2 * i + 1]) *pb.slots[2 * i + 1] = ps->grad + pb.t[i].offset;
    }
    free(pb.slots);
    if (!c->untie_embeddings_and_output_weights && tc_first_rank(c)) {
        m->out_w = m->wte; /* tied: the output layer reads the word embedding */
        m->g_out_w = m->g_wte;
    }
}

int gpt_model_whole_params(const transformer_config *cfg, param_set *whole) {
    memset(whole, 0, sizeof *whole);
    gpt_model *m = calloc(1, sizeof *m);
    if (!m) return -1;
    m->cfg = *cfg;
    m->cfg.tp_size = 1;
    m->cfg.tp_rank = 0;
    m->cfg.sequence_parallel = 0;
    m->cfg.pp_size = 1;
    m->cfg.pp_rank = 0;
    m->cfg.vp_size = 1;
    m->cfg.vp_rank = 0;
    int L = m->cfg.num_layers;
    m->block.w_all = calloc((size_t)L + 1, sizeof(layer_weights)); /* slots nobody reads */
    int *first_of_layer = malloc(((size_t)L + 1) * sizeof(int));
    if (!m->block.w_all || !first_of_layer) {
        free(m->block.w_all);
        free(first_of_layer);
        free(m);
        return -1;
    }
    param_builder pb = {.tp = 1, .sp = 0};
    register_params(m, &pb, first_of_layer);
    free(pb.slots);
    free(first_of_layer);
    free(m->block.w_all);
    free(m);
    whole->count = pb.n;
    whole->tensors = pb.t;
    for (int i = 0; i < pb.n; i++) {
        pb.t[i].offset = whole->numel;
        whole->numel += pb.t[i].numel;
    }
    return 0;
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
    m->tied_embedding = -1;
    m->cfg.vp_rank = 0;
    const transformer_config *c = &m->cfg;
    m->num_chunks = tc_vp(c);
    m->rank_layers = tc_stage_layers(c);
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
    free(ps->tensors);
    free(m->layer_begin);
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
        if (m->params_needed) m->params_needed(m->params_needed_user, 0, m->layer_begin[0]);
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
    if (m->params_needed) /* final norm and an untied output layer (a tied one: above) */
        m->params_needed(m->params_needed_user, m->layer_begin[m->rank_layers], m->params.numel);
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
    if (m->grads_done) /* final norm and an untied output layer are complete */
        m->grads_done(m->grads_done_user, m->layer_begin[m->rank_layers], m->params.numel);
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
    if (m->grads_done) m->grads_done(m->grads_done_user, 0, m->layer_begin[0]);
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
