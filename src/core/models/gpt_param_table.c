#include "core/models/gpt_param_table.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/transformer/transformer_layer.h"
#include "core/util/alloc.h"

/* ---- the description: the whole model's tensors in order ----
 * A builder either records tensors (whole shapes, init_stream = index) or, with count_only,
 * only adds up the elements a rank of TP size tp holds of them, per part. */

typedef struct {
    const transformer_config *cfg;
    int count_only, tp;
    size_t numel[GPT_PARAM_OUTPUT_LAYER + 1]; /* count_only: per part */
    param_tensor *t;
    gpt_param_place *place;
    int n, cap;
} builder;

typedef struct {
    const char *name;
    int ndim;
    int64_t rows, cols; /* cols unused for vectors */
    int weight_decay;
    float init_std;     /* > 0: normal(0, std); else the constant init_value */
    float init_value;
} tensor_desc;

/* 1 if this rank holds routed expert e of cfg (its expert-parallel rank's). */
static int expert_local(const transformer_config *c, int e) {
    return e < 0 || e / tc_experts_local(c) == tc_ep_rank(c);
}

static void add(builder *b, gpt_param_place pl, tensor_desc d) {
    size_t numel = (size_t)d.rows * (size_t)(d.ndim == 2 ? d.cols : 1);
    if (b->count_only) { /* a split tensor divides evenly across TP (args_validate) */
        if (!expert_local(b->cfg, pl.expert)) return;
        b->numel[pl.part] += pl.split == TP_SPLIT_NONE ? numel : numel / (size_t)b->tp;
        return;
    }
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 64;
        b->t = xrealloc(b->t, (size_t)b->cap * sizeof(param_tensor), "parameter table");
        b->place = xrealloc(b->place, (size_t)b->cap * sizeof(gpt_param_place), "parameter places");
    }
    param_tensor *p = &b->t[b->n];
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "%s", d.name);
    p->ndim = d.ndim;
    p->shape[0] = p->full_shape[0] = d.rows;
    if (d.ndim == 2) p->shape[1] = p->full_shape[1] = d.cols;
    p->numel = numel;
    p->weight_decay = d.weight_decay;
    p->init_std = d.init_std;
    p->init_value = d.init_value;
    p->init_stream = (uint64_t)b->n;
    p->word_embedding = pl.part == GPT_PARAM_WORD_EMBEDDING;
    b->place[b->n++] = pl;
}

/* Weight matrix [rows, cols]: normal(std), decayed. */
static void matrix(builder *b, gpt_param_place pl, const char *name, int64_t rows, int64_t cols,
                   float std) {
    add(b, pl, (tensor_desc){name, 2, rows, cols, 1, std, 0.0f});
}

/* Vector [n]: constant init, not decayed (Megatron decays no bias or 1-D parameter). A
 * column-parallel bias is split with its weight's rows; a replicated norm weight or
 * row-parallel bias acts on token shards under sequence parallelism. */
static void vector(builder *b, gpt_param_place pl, const char *name, int64_t n, float value) {
    if (pl.split == TP_SPLIT_NONE && pl.grad == GPT_GRAD_WHOLE) pl.grad = GPT_GRAD_PARTIAL_WITH_SP;
    add(b, pl, (tensor_desc){name, 1, n, 0, 0, 0.0f, value});
}

static gpt_param_place part(gpt_param_part p, int split) {
    int gemm = p == GPT_PARAM_WORD_EMBEDDING || p == GPT_PARAM_OUTPUT_LAYER;
    return (gpt_param_place){.part = p, .layer = -1, .split = split, .gemm = gemm, .expert = -1};
}

static void describe_embedding(builder *b, const transformer_config *c) {
    matrix(b, part(GPT_PARAM_WORD_EMBEDDING, TP_SPLIT_ROWS), "embedding.word_embeddings.weight",
           c->padded_vocab_size, c->hidden_size, c->init_method_std);
    if (!c->rope) { /* replicated; added on token shards under sequence parallelism */
        gpt_param_place pl = part(GPT_PARAM_POSITION_EMBEDDING, TP_SPLIT_NONE);
        pl.grad = GPT_GRAD_PARTIAL_WITH_SP;
        matrix(b, pl, "embedding.position_embeddings.weight", c->max_position_embeddings,
               c->hidden_size, c->init_method_std);
    }
}

/* An MoE layer's MLP (Megatron-core's names, SequentialMLP's per-expert ones): the router, every
 * routed expert's linear_fc1 then every one's linear_fc2 (so that each kind is contiguous
 * over a rank's experts), the shared expert. No biases (args_validate). */
static void describe_moe_mlp(builder *b, const transformer_config *c, int l, float std,
                             float out_std) {
    const int64_t C = c->hidden_size, E = c->moe.num_experts;
    char n[PARAM_NAME_MAX];
    gpt_param_place router = {.part = GPT_PARAM_LAYER, .layer = l, .expert = -1,
                              .field = offsetof(layer_weights, router_w), .split = TP_SPLIT_NONE,
                              .grad = GPT_GRAD_PARTIAL_WITH_SP};
    snprintf(n, sizeof(n), "decoder.layers.%d.mlp.router.weight", l);
    matrix(b, router, n, E, C, std);
    const struct {
        size_t field, field16;
        const char *suffix;
        int64_t rows, cols;
        float std;
    } kinds[2] = {{offsetof(layer_weights, experts_fc1_w), offsetof(layer_weights, experts_fc1_w16),
                   "linear_fc1", tc_expert_fc1_width(c), C, std},
                  {offsetof(layer_weights, experts_fc2_w), offsetof(layer_weights, experts_fc2_w16),
                   "linear_fc2", C, c->moe.ffn_hidden_size, out_std}};
    /* each expert split over TP as the dense MLP (the expert tensor-parallel size is TP) */
    const int splits[2] = {c->swiglu ? TP_SPLIT_ROWS_SWIGLU : TP_SPLIT_ROWS, TP_SPLIT_COLS};
    for (int k = 0; k < 2; k++)
        for (int e = 0; e < E; e++) {
            gpt_param_place pl = {.part = GPT_PARAM_LAYER, .layer = l, .field = kinds[k].field,
                                  .split = splits[k], .gemm = 1,
                                  .field16 = kinds[k].field16, .expert = e};
            snprintf(n, sizeof(n), "decoder.layers.%d.mlp.experts.local_experts.%d.%s.weight", l,
                     e, kinds[k].suffix);
            matrix(b, pl, n, kinds[k].rows, kinds[k].cols, kinds[k].std);
        }
    if (c->moe.shared_expert_size <= 0) return;
    const int fc1_split = c->swiglu ? TP_SPLIT_ROWS_SWIGLU : TP_SPLIT_ROWS;
    gpt_param_place fc1 = {.part = GPT_PARAM_LAYER, .layer = l, .expert = -1, .gemm = 1,
                           .field = offsetof(layer_weights, shared_fc1_w), .split = fc1_split,
                           .field16 = offsetof(layer_weights, shared_fc1_w16)};
    gpt_param_place fc2 = fc1;
    fc2.field = offsetof(layer_weights, shared_fc2_w);
    fc2.field16 = offsetof(layer_weights, shared_fc2_w16);
    fc2.split = TP_SPLIT_COLS;
    snprintf(n, sizeof(n), "decoder.layers.%d.mlp.shared_experts.linear_fc1.weight", l);
    matrix(b, fc1, n, tc_shared_fc1_width(c), C, std);
    snprintf(n, sizeof(n), "decoder.layers.%d.mlp.shared_experts.linear_fc2.weight", l);
    matrix(b, fc2, n, C, c->moe.shared_expert_size, out_std);
}

/* Layer l's tensors, in layer_weights' order (core/transformer/transformer_layer.h). */
static void describe_layer(builder *b, const transformer_config *c, int l) {
    int64_t C = c->hidden_size, QKV = tc_qkv_width(c), HS = c->kv_channels;
    int64_t CTX = (int64_t)c->num_attention_heads * HS, F = c->ffn_hidden_size;
    int64_t FC1 = tc_fc1_width(c);
    int ln = c->normalization == NORM_LAYERNORM, bias = c->add_bias_linear;
    int fc1_split = c->swiglu ? TP_SPLIT_ROWS_SWIGLU : TP_SPLIT_ROWS;
    float std = c->init_method_std;
    float out_std = std / sqrtf(2.0f * c->num_layers); /* Megatron's scaled_init_method_normal */
    char n[PARAM_NAME_MAX];
#define NAME(suffix) (snprintf(n, sizeof(n), "decoder.layers.%d.%s", l, suffix), n)
#define AT(f, how) \
    ((gpt_param_place){.part = GPT_PARAM_LAYER, .layer = l, .field = offsetof(layer_weights, f), \
                       .split = (how), .expert = -1})
#define GEMM_AT(f, how) \
    ((gpt_param_place){.part = GPT_PARAM_LAYER, .layer = l,                                   \
                       .field = offsetof(layer_weights, f##_w), .split = (how), .gemm = 1,    \
                       .field16 = offsetof(layer_weights, f##_w16), .expert = -1})
    vector(b, AT(ln1_w, TP_SPLIT_NONE), NAME("input_layernorm.weight"), C, 1.0f);
    if (ln) vector(b, AT(ln1_b, TP_SPLIT_NONE), NAME("input_layernorm.bias"), C, 0.0f);
    matrix(b, GEMM_AT(qkv, TP_SPLIT_ROWS), NAME("self_attention.linear_qkv.weight"), QKV, C, std);
    /* Megatron: bias=add_bias_linear or add_qkv_bias */
    if (bias || c->add_qkv_bias)
        vector(b, AT(qkv_b, TP_SPLIT_ROWS), NAME("self_attention.linear_qkv.bias"), QKV, 0.0f);
    if (c->qk_layernorm) {
        /* shared by every head, used on this rank's heads only: always partial under TP */
        const struct {
            size_t field;
            const char *suffix;
            int is_bias;
        } qk[] = {{offsetof(layer_weights, q_ln_w), "self_attention.q_layernorm.weight", 0},
                  {offsetof(layer_weights, q_ln_b), "self_attention.q_layernorm.bias", 1},
                  {offsetof(layer_weights, k_ln_w), "self_attention.k_layernorm.weight", 0},
                  {offsetof(layer_weights, k_ln_b), "self_attention.k_layernorm.bias", 1}};
        for (int i = 0; i < 4; i++) {
            if (qk[i].is_bias && !ln) continue; /* RMSNorm has no bias */
            gpt_param_place pl = {.part = GPT_PARAM_LAYER, .layer = l, .field = qk[i].field,
                                  .split = TP_SPLIT_NONE, .grad = GPT_GRAD_PARTIAL, .expert = -1};
            vector(b, pl, NAME(qk[i].suffix), HS, qk[i].is_bias ? 0.0f : 1.0f);
        }
    }
    matrix(b, GEMM_AT(proj, TP_SPLIT_COLS), NAME("self_attention.linear_proj.weight"), C, CTX,
           out_std);
    if (bias) vector(b, AT(proj_b, TP_SPLIT_NONE), NAME("self_attention.linear_proj.bias"), C, 0.0f);
    vector(b, AT(ln2_w, TP_SPLIT_NONE), NAME("pre_mlp_layernorm.weight"), C, 1.0f);
    if (ln) vector(b, AT(ln2_b, TP_SPLIT_NONE), NAME("pre_mlp_layernorm.bias"), C, 0.0f);
    if (tc_moe_layer(c, l)) {
        describe_moe_mlp(b, c, l, std, out_std);
        return;
    }
    matrix(b, GEMM_AT(fc1, fc1_split), NAME("mlp.linear_fc1.weight"), FC1, C, std);
    if (bias) vector(b, AT(fc1_b, fc1_split), NAME("mlp.linear_fc1.bias"), FC1, 0.0f);
    matrix(b, GEMM_AT(fc2, TP_SPLIT_COLS), NAME("mlp.linear_fc2.weight"), C, F, out_std);
    if (bias) vector(b, AT(fc2_b, TP_SPLIT_NONE), NAME("mlp.linear_fc2.bias"), C, 0.0f);
#undef NAME
#undef AT
#undef GEMM_AT
}

/* Final norm and an untied output layer. */
static void describe_head(builder *b, const transformer_config *c) {
    vector(b, part(GPT_PARAM_FINAL_NORM_WEIGHT, TP_SPLIT_NONE), "decoder.final_layernorm.weight",
           c->hidden_size, 1.0f);
    if (c->normalization == NORM_LAYERNORM)
        vector(b, part(GPT_PARAM_FINAL_NORM_BIAS, TP_SPLIT_NONE), "decoder.final_layernorm.bias",
               c->hidden_size, 0.0f);
    if (c->untie_embeddings_and_output_weights)
        matrix(b, part(GPT_PARAM_OUTPUT_LAYER, TP_SPLIT_ROWS), "output_layer.weight",
               c->padded_vocab_size, c->hidden_size, c->init_method_std);
}

/* ---- a rank's selection ---- */

/* Appends whole tensor w, as this rank holds it (TP slice, TP flags), to s's tables. */
static void take(gpt_param_table *s, int *cap, const param_tensor *w, gpt_param_place pl,
                 const transformer_config *c) {
    if (!expert_local(c, pl.expert)) return; /* another expert-parallel rank's */
    if (s->params.count == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        s->params.tensors =
            xrealloc(s->params.tensors, (size_t)*cap * sizeof(param_tensor), "parameter table");
        s->place = xrealloc(s->place, (size_t)*cap * sizeof(gpt_param_place), "parameter places");
    }
    int tp = tc_tp(c), i = s->params.count++;
    param_tensor *p = &s->params.tensors[i];
    *p = *w;
    p->numel = 1;
    for (int d = 0; d < p->ndim; d++) {
        if ((d == 0 && (pl.split == TP_SPLIT_ROWS || pl.split == TP_SPLIT_ROWS_SWIGLU)) ||
            (d == 1 && pl.split == TP_SPLIT_COLS))
            p->shape[d] = w->full_shape[d] / tp;
        p->numel *= (size_t)p->shape[d];
    }
    p->tp_split = tp > 1 ? pl.split : TP_SPLIT_NONE;
    p->tp_duplicate = tp > 1 && pl.split == TP_SPLIT_NONE;
    p->expert_parallel = pl.expert >= 0 && tc_ep(c) > 1;
    p->tp_allreduce_grad =
        tp > 1 && (pl.grad == GPT_GRAD_PARTIAL || (pl.grad == GPT_GRAD_PARTIAL_WITH_SP && tc_sp(c)));
    p->offset = s->params.numel;
    s->params.numel += p->numel;
    s->place[i] = pl;
}

/* The whole model's tensor table; first[g]: index of layer g's first tensor, first[L]: of the
 * head's. */
static void describe_whole(const transformer_config *c, builder *b, int *first) {
    describe_embedding(b, c);
    for (int g = 0; g < c->num_layers; g++) {
        first[g] = b->n;
        describe_layer(b, c, g);
    }
    first[c->num_layers] = b->n;
    describe_head(b, c);
}

void gpt_param_table_rank(const transformer_config *c, gpt_param_table *s) {
    memset(s, 0, sizeof(*s));
    builder w = {.cfg = c};
    int *first = xcalloc((size_t)c->num_layers + 1, sizeof(int), "layer table");
    describe_whole(c, &w, first);
    int L = tc_stage_layers(c), Lc = tc_chunk_layers(c), cap = 0;
    int tied = !c->untie_embeddings_and_output_weights && tc_pp(c) > 1;
    s->num_layers = L;
    s->layer_first = xcalloc((size_t)L + 1, sizeof(int), "layer table");
    s->layer_begin = xcalloc((size_t)L + 1, sizeof(size_t), "layer offsets");
    s->tied_embedding = -1;
    if (tc_first_rank(c))
        for (int i = 0; i < first[0]; i++) {
            if (tied && w.place[i].part == GPT_PARAM_WORD_EMBEDDING)
                s->tied_embedding = s->params.count;
            take(s, &cap, &w.t[i], w.place[i], c);
        }
    /* the rank's layers chunk by chunk, so that each chunk's parameters are one range */
    for (int l = 0; l < L; l++) {
        s->layer_first[l] = s->params.count;
        int g = tc_chunk_layer_offset(c, l / Lc) + l % Lc;
        for (int i = first[g]; i < first[g + 1]; i++) take(s, &cap, &w.t[i], w.place[i], c);
    }
    s->layer_first[L] = s->params.count;
    if (tc_last_rank(c)) {
        for (int i = first[c->num_layers]; i < w.n; i++) take(s, &cap, &w.t[i], w.place[i], c);
        if (tied && !tc_first_rank(c)) {
            /* tied, on another stage than the embedding: Megatron's shared copy (same name,
             * same init stream, kept equal through the embedding group) */
            for (int i = 0; i < first[0]; i++)
                if (w.place[i].part == GPT_PARAM_WORD_EMBEDDING) {
                    s->tied_embedding = s->params.count;
                    take(s, &cap, &w.t[i], part(GPT_PARAM_OUTPUT_LAYER, TP_SPLIT_ROWS), c);
                    s->params.tensors[s->tied_embedding].pp_shared_copy = 1;
                }
        }
    }
    for (int l = 0; l <= L; l++)
        s->layer_begin[l] = s->layer_first[l] < s->params.count
                                ? s->params.tensors[s->layer_first[l]].offset
                                : s->params.numel;
    free(first);
    free(w.t);
    free(w.place);
}

/* cfg without tensor, pipeline or interleaving parallelism. */
static transformer_config whole_config(const transformer_config *cfg) {
    transformer_config c = *cfg;
    c.tp_size = 1;
    c.tp_rank = 0;
    c.sequence_parallel = 0;
    c.pp_size = 1;
    c.pp_rank = 0;
    c.vp_size = 1;
    c.vp_rank = 0;
    c.moe.ep_size = 1;
    c.moe.ep_rank = 0;
    return c;
}

void gpt_param_table_whole(const transformer_config *cfg, gpt_param_table *spec) {
    transformer_config c = whole_config(cfg);
    gpt_param_table_rank(&c, spec);
}

void gpt_param_table_free(gpt_param_table *s) {
    free(s->params.tensors);
    free(s->place);
    free(s->layer_first);
    free(s->layer_begin);
    memset(s, 0, sizeof(*s));
}

size_t gpt_param_table_rank_numel(const transformer_config *c) {
    builder b = {.cfg = c, .count_only = 1, .tp = tc_tp(c)};
    describe_embedding(&b, c);
    describe_head(&b, c);
    size_t embedding = b.numel[GPT_PARAM_WORD_EMBEDDING] + b.numel[GPT_PARAM_POSITION_EMBEDDING];
    size_t head = b.numel[GPT_PARAM_FINAL_NORM_WEIGHT] + b.numel[GPT_PARAM_FINAL_NORM_BIAS] +
                  b.numel[GPT_PARAM_OUTPUT_LAYER];
    /* two kinds of layer: dense and MoE (--moe-layer-freq), each described once */
    int L = tc_stage_layers(c), Lc = tc_chunk_layers(c), moe_layer = -1, dense_layer = -1, n_moe = 0;
    for (int l = 0; l < L; l++) {
        int g = tc_chunk_layer_offset(c, l / Lc) + l % Lc;
        if (tc_moe_layer(c, g)) {
            n_moe++;
            moe_layer = g;
        } else
            dense_layer = g;
    }
    size_t n = 0;
    if (dense_layer >= 0) {
        describe_layer(&b, c, dense_layer);
        n += (size_t)(L - n_moe) * b.numel[GPT_PARAM_LAYER];
        b.numel[GPT_PARAM_LAYER] = 0;
    }
    if (moe_layer >= 0) {
        describe_layer(&b, c, moe_layer);
        n += (size_t)n_moe * b.numel[GPT_PARAM_LAYER];
    }
    int tied = !c->untie_embeddings_and_output_weights && tc_pp(c) > 1;
    if (tc_first_rank(c)) n += embedding;
    if (tc_last_rank(c)) n += head;
    if (tc_last_rank(c) && tied && !tc_first_rank(c)) n += b.numel[GPT_PARAM_WORD_EMBEDDING];
    return n;
}
