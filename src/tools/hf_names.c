/* The Hugging Face name maps (hf_names.h): the tables, and the one driver that walks a table in
 * either direction. */
#include "tools/hf_names.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/kernels/qkv_layout.h"
#include "core/util/alloc.h"
#include "core/util/die.h"

#define N_ROWS(rows) ((int)(sizeof(rows) / sizeof((rows)[0])))

/* ------------------------------------------------------------------ the tables */

/* GPT2LMHeadModel (transformers' modeling_gpt2.py, its named_parameters order). Its linears are
 * Conv1D, stored [in, out]; lm_head is tied (no tensor of its own). */
static const hf_name_row GPT2_PRE[] = {
    {"transformer.wte.weight", "embedding.word_embeddings.weight", HF_COPY, 0, HF_DIM_V, HF_DIM_H, 0},
    {"transformer.wpe.weight", "embedding.position_embeddings.weight", HF_COPY, 0, HF_DIM_POS, HF_DIM_H, 0},
};
static const hf_name_row GPT2_LAYER[] = {
    {"ln_1.weight", "input_layernorm.weight", HF_COPY, 0, HF_DIM_H, HF_DIM_NONE, 0},
    {"ln_1.bias", "input_layernorm.bias", HF_COPY, 0, HF_DIM_H, HF_DIM_NONE, 0},
    {"attn.c_attn.weight", "self_attention.linear_qkv.weight", HF_QKV_CONV1D, 0, HF_DIM_H, HF_DIM_3H, 0},
    {"attn.c_attn.bias", "self_attention.linear_qkv.bias", HF_QKV_CONV1D, 0, HF_DIM_3H, HF_DIM_NONE, 0},
    {"attn.c_proj.weight", "self_attention.linear_proj.weight", HF_TRANSPOSE, 0, HF_DIM_H, HF_DIM_H, 0},
    {"attn.c_proj.bias", "self_attention.linear_proj.bias", HF_COPY, 0, HF_DIM_H, HF_DIM_NONE, 0},
    {"ln_2.weight", "pre_mlp_layernorm.weight", HF_COPY, 0, HF_DIM_H, HF_DIM_NONE, 0},
    {"ln_2.bias", "pre_mlp_layernorm.bias", HF_COPY, 0, HF_DIM_H, HF_DIM_NONE, 0},
    {"mlp.c_fc.weight", "mlp.linear_fc1.weight", HF_TRANSPOSE, 0, HF_DIM_H, HF_DIM_FFN, 0},
    {"mlp.c_fc.bias", "mlp.linear_fc1.bias", HF_COPY, 0, HF_DIM_FFN, HF_DIM_NONE, 0},
    {"mlp.c_proj.weight", "mlp.linear_fc2.weight", HF_TRANSPOSE, 0, HF_DIM_FFN, HF_DIM_H, 0},
    {"mlp.c_proj.bias", "mlp.linear_fc2.bias", HF_COPY, 0, HF_DIM_H, HF_DIM_NONE, 0},
};
static const hf_name_row GPT2_POST[] = {
    {"transformer.ln_f.weight", "decoder.final_layernorm.weight", HF_COPY, 0, HF_DIM_H, HF_DIM_NONE, 0},
    {"transformer.ln_f.bias", "decoder.final_layernorm.bias", HF_COPY, 0, HF_DIM_H, HF_DIM_NONE, 0},
};
const hf_name_map HF_MAP_GPT2 = {"GPT2LMHeadModel", "transformer.h.",
                                 GPT2_PRE, GPT2_LAYER, GPT2_POST,
                                 N_ROWS(GPT2_PRE), N_ROWS(GPT2_LAYER), N_ROWS(GPT2_POST)};

/* LlamaForCausalLM / Qwen3ForCausalLM (modeling_llama.py, modeling_qwen3.py): nn.Linear
 * [out, in] as Megatron's, no biases. */
static const hf_name_row LLAMA_PRE[] = {
    {"model.embed_tokens.weight", "embedding.word_embeddings.weight", HF_COPY, 0, HF_DIM_V, HF_DIM_H, 0},
};
static const hf_name_row LLAMA_LAYER[] = {
    {"input_layernorm.weight", "input_layernorm.weight", HF_COPY, 0, HF_DIM_H, HF_DIM_NONE, 0},
    {"self_attn.q_proj.weight", "self_attention.linear_qkv.weight", HF_QKV_PART, 0, HF_DIM_Q, HF_DIM_H, 0},
    {"self_attn.k_proj.weight", "self_attention.linear_qkv.weight", HF_QKV_PART, 1, HF_DIM_KV, HF_DIM_H, 0},
    {"self_attn.v_proj.weight", "self_attention.linear_qkv.weight", HF_QKV_PART, 2, HF_DIM_KV, HF_DIM_H, 0},
    {"self_attn.o_proj.weight", "self_attention.linear_proj.weight", HF_COPY, 0, HF_DIM_H, HF_DIM_Q, 0},
    {"self_attn.q_norm.weight", "self_attention.q_layernorm.weight", HF_COPY, 0, HF_DIM_HEAD, HF_DIM_NONE, HF_IF_QK_NORM},
    {"self_attn.k_norm.weight", "self_attention.k_layernorm.weight", HF_COPY, 0, HF_DIM_HEAD, HF_DIM_NONE, HF_IF_QK_NORM},
    {"post_attention_layernorm.weight", "pre_mlp_layernorm.weight", HF_COPY, 0, HF_DIM_H, HF_DIM_NONE, 0},
    {"mlp.gate_proj.weight", "mlp.linear_fc1.weight", HF_GLU_CHUNK, 0, HF_DIM_FFN, HF_DIM_H, 0},
    {"mlp.up_proj.weight", "mlp.linear_fc1.weight", HF_GLU_CHUNK, 1, HF_DIM_FFN, HF_DIM_H, 0},
    {"mlp.down_proj.weight", "mlp.linear_fc2.weight", HF_COPY, 0, HF_DIM_H, HF_DIM_FFN, 0},
};
static const hf_name_row LLAMA_POST[] = {
    {"model.norm.weight", "decoder.final_layernorm.weight", HF_COPY, 0, HF_DIM_H, HF_DIM_NONE, 0},
    {"lm_head.weight", "output_layer.weight", HF_COPY, 0, HF_DIM_V, HF_DIM_H, HF_IF_UNTIED},
};
const hf_name_map HF_MAP_LLAMA = {"LlamaForCausalLM", "model.layers.",
                                  LLAMA_PRE, LLAMA_LAYER, LLAMA_POST,
                                  N_ROWS(LLAMA_PRE), N_ROWS(LLAMA_LAYER), N_ROWS(LLAMA_POST)};

/* Qwen3MoeForCausalLM (modeling_qwen3_moe.py), in its modules' order: Qwen3's attention (q_norm
 * / k_norm always), then the layer's MLP, then the two norms. The MLP of an MoE layer is
 * Qwen3MoeSparseMoeBlock: gate [E, h] (Megatron's router) and per expert a SwiGLU MLP of
 * moe_intermediate_size (the expert's linear_fc1 rows [gate; up], as the dense MLP's); a dense
 * layer's is Qwen3MoeMLP of intermediate_size, Llama's names. */
static const hf_name_row QWEN3_MOE_LAYER[] = {
    {"self_attn.q_proj.weight", "self_attention.linear_qkv.weight", HF_QKV_PART, 0, HF_DIM_Q, HF_DIM_H, 0},
    {"self_attn.k_proj.weight", "self_attention.linear_qkv.weight", HF_QKV_PART, 1, HF_DIM_KV, HF_DIM_H, 0},
    {"self_attn.v_proj.weight", "self_attention.linear_qkv.weight", HF_QKV_PART, 2, HF_DIM_KV, HF_DIM_H, 0},
    {"self_attn.o_proj.weight", "self_attention.linear_proj.weight", HF_COPY, 0, HF_DIM_H, HF_DIM_Q, 0},
    {"self_attn.q_norm.weight", "self_attention.q_layernorm.weight", HF_COPY, 0, HF_DIM_HEAD, HF_DIM_NONE, 0},
    {"self_attn.k_norm.weight", "self_attention.k_layernorm.weight", HF_COPY, 0, HF_DIM_HEAD, HF_DIM_NONE, 0},
    {"mlp.gate_proj.weight", "mlp.linear_fc1.weight", HF_GLU_CHUNK, 0, HF_DIM_FFN, HF_DIM_H, HF_IF_DENSE_LAYER},
    {"mlp.up_proj.weight", "mlp.linear_fc1.weight", HF_GLU_CHUNK, 1, HF_DIM_FFN, HF_DIM_H, HF_IF_DENSE_LAYER},
    {"mlp.down_proj.weight", "mlp.linear_fc2.weight", HF_COPY, 0, HF_DIM_H, HF_DIM_FFN, HF_IF_DENSE_LAYER},
    {"mlp.gate.weight", "mlp.router.weight", HF_COPY, 0, HF_DIM_EXPERTS, HF_DIM_H, HF_IF_MOE_LAYER},
    {"mlp.experts.#.gate_proj.weight", "mlp.experts.local_experts.#.linear_fc1.weight", HF_GLU_CHUNK,
     0, HF_DIM_MOE_FFN, HF_DIM_H, HF_IF_MOE_LAYER | HF_PER_EXPERT},
    {"mlp.experts.#.up_proj.weight", "mlp.experts.local_experts.#.linear_fc1.weight", HF_GLU_CHUNK,
     1, HF_DIM_MOE_FFN, HF_DIM_H, HF_IF_MOE_LAYER | HF_PER_EXPERT},
    {"mlp.experts.#.down_proj.weight", "mlp.experts.local_experts.#.linear_fc2.weight", HF_COPY,
     0, HF_DIM_H, HF_DIM_MOE_FFN, HF_IF_MOE_LAYER | HF_PER_EXPERT},
    {"input_layernorm.weight", "input_layernorm.weight", HF_COPY, 0, HF_DIM_H, HF_DIM_NONE, 0},
    {"post_attention_layernorm.weight", "pre_mlp_layernorm.weight", HF_COPY, 0, HF_DIM_H, HF_DIM_NONE, 0},
};
const hf_name_map HF_MAP_QWEN3_MOE = {"Qwen3MoeForCausalLM", "model.layers.",
                                      LLAMA_PRE, QWEN3_MOE_LAYER, LLAMA_POST, N_ROWS(LLAMA_PRE),
                                      N_ROWS(QWEN3_MOE_LAYER), N_ROWS(LLAMA_POST)};

/* MegaDLMs' DiffLM (modeling_dlm.py): Llama's names in its module registration order (self_attn
 * q/k/v/o_proj, q_norm, k_norm, mlp, then the two norms), q_norm / k_norm always, lm_head always
 * (MegaDLMs' converter without --untieembed writes the embedding there). No q/k/v bias rows:
 * DiffLM builds the projections with bias=False and MegaDLMs' converter has its q/k/v_proj.bias
 * lines commented out; one would be an HF_QKV_PART row of shape [Q] / [KV] on linear_qkv.bias. */
static const hf_name_row DIFFLM_LAYER[] = {
    {"self_attn.q_proj.weight", "self_attention.linear_qkv.weight", HF_QKV_PART, 0, HF_DIM_Q, HF_DIM_H, 0},
    {"self_attn.k_proj.weight", "self_attention.linear_qkv.weight", HF_QKV_PART, 1, HF_DIM_KV, HF_DIM_H, 0},
    {"self_attn.v_proj.weight", "self_attention.linear_qkv.weight", HF_QKV_PART, 2, HF_DIM_KV, HF_DIM_H, 0},
    {"self_attn.o_proj.weight", "self_attention.linear_proj.weight", HF_COPY, 0, HF_DIM_H, HF_DIM_Q, 0},
    {"self_attn.q_norm.weight", "self_attention.q_layernorm.weight", HF_COPY, 0, HF_DIM_HEAD, HF_DIM_NONE, 0},
    {"self_attn.k_norm.weight", "self_attention.k_layernorm.weight", HF_COPY, 0, HF_DIM_HEAD, HF_DIM_NONE, 0},
    {"mlp.gate_proj.weight", "mlp.linear_fc1.weight", HF_GLU_CHUNK, 0, HF_DIM_FFN, HF_DIM_H, 0},
    {"mlp.up_proj.weight", "mlp.linear_fc1.weight", HF_GLU_CHUNK, 1, HF_DIM_FFN, HF_DIM_H, 0},
    {"mlp.down_proj.weight", "mlp.linear_fc2.weight", HF_COPY, 0, HF_DIM_H, HF_DIM_FFN, 0},
    {"input_layernorm.weight", "input_layernorm.weight", HF_COPY, 0, HF_DIM_H, HF_DIM_NONE, 0},
    {"post_attention_layernorm.weight", "pre_mlp_layernorm.weight", HF_COPY, 0, HF_DIM_H, HF_DIM_NONE, 0},
};
static const hf_name_row DIFFLM_POST[] = {
    {"model.norm.weight", "decoder.final_layernorm.weight", HF_COPY, 0, HF_DIM_H, HF_DIM_NONE, 0},
    {"lm_head.weight", "output_layer.weight", HF_COPY, 0, HF_DIM_V, HF_DIM_H, HF_IF_UNTIED},
    {"lm_head.weight", "embedding.word_embeddings.weight", HF_COPY, 0, HF_DIM_V, HF_DIM_H, HF_IF_TIED_EXPORT},
};
const hf_name_map HF_MAP_DIFFLM = {"DiffLM", "model.layers.",
                                   LLAMA_PRE, DIFFLM_LAYER, DIFFLM_POST,
                                   N_ROWS(LLAMA_PRE), N_ROWS(DIFFLM_LAYER), N_ROWS(DIFFLM_POST)};

/* ------------------------------------------------------------------ the driver */

static int64_t dim_of(hf_dim d, const transformer_config *c) {
    switch (d) {
    case HF_DIM_NONE: return 0;
    case HF_DIM_H: return c->hidden_size;
    case HF_DIM_3H: return 3 * (int64_t)c->hidden_size;
    case HF_DIM_V: return c->padded_vocab_size;
    case HF_DIM_POS: return c->max_position_embeddings;
    case HF_DIM_FFN: return c->ffn_hidden_size;
    case HF_DIM_HEAD: return c->kv_channels;
    case HF_DIM_Q: return (int64_t)c->num_attention_heads * c->kv_channels;
    case HF_DIM_KV: return (int64_t)c->num_query_groups * c->kv_channels;
    case HF_DIM_EXPERTS: return c->moe.num_experts;
    case HF_DIM_MOE_FFN: return c->moe.ffn_hidden_size;
    }
    return 0;
}

/* layer: the global layer a layer row is resolved for (-1: a row outside the layers) */
static int row_applies(const hf_name_row *r, const transformer_config *c, int layer,
                       int exporting) {
    const int untied = c->untie_embeddings_and_output_weights;
    if ((r->when & HF_IF_DENSE_LAYER) && layer >= 0 && tc_moe_layer(c, layer)) return 0;
    if ((r->when & HF_IF_MOE_LAYER) && (layer < 0 || !tc_moe_layer(c, layer))) return 0;
    if ((r->when & HF_IF_QK_NORM) && !c->qk_layernorm) return 0;
    if ((r->when & HF_IF_UNTIED) && !untied) return 0;
    if ((r->when & HF_IF_TIED_EXPORT) && (untied || !exporting)) return 0;
    return 1;
}

/* One row of a table resolved for layer `layer` (-1: a row outside the layers). */
typedef struct {
    char hf[192], mg[192];
    int ndim;
    int64_t d0, d1;
    size_t numel;
    float *param; /* the megadlm parameter's values */
} hf_row_at;

/* A row's name with its '#' (HF_PER_EXPERT rows) replaced by expert e. */
static void expert_name(char *dst, size_t n, const char *row, int e) {
    const char *h = strchr(row, '#');
    if (!h) snprintf(dst, n, "%s", row);
    else snprintf(dst, n, "%.*s%d%s", (int)(h - row), row, e, h + 1);
}

static void resolve(const hf_name_map *m, const hf_name_row *r, int layer, int expert,
                    const transformer_config *c, const param_set *ps, hf_row_at *x) {
    char hf[128], mg[128];
    expert_name(hf, sizeof hf, r->hf, expert);
    expert_name(mg, sizeof mg, r->mg, expert);
    if (layer < 0) {
        snprintf(x->hf, sizeof x->hf, "%s", hf);
        snprintf(x->mg, sizeof x->mg, "%s", mg);
    } else {
        snprintf(x->hf, sizeof x->hf, "%s%d.%s", m->layer_prefix, layer, hf);
        snprintf(x->mg, sizeof x->mg, "decoder.layers.%d.%s", layer, mg);
    }
    x->ndim = r->d1 == HF_DIM_NONE ? 1 : 2;
    x->d0 = dim_of(r->d0, c);
    x->d1 = dim_of(r->d1, c);
    x->numel = (size_t)x->d0 * (size_t)(x->ndim == 2 ? x->d1 : 1);
    const int i = param_set_find(ps, x->mg);
    /* the misfit checks of convert.c leave only models that hold every parameter a row names */
    if (i < 0) die(1, "internal error: %s: no parameter %s for %s", m->name, x->mg, x->hf);
    x->param = ps->data + ps->tensors[i].offset;
}

/* Row of megadlm's grouped linear_qkv (qkv_layout.h) for (part 0 q / 1 k / 2 v, head within
 * its kind, channel r): Hugging Face keeps q, k and v as three separate matrices (GPT-2: three
 * column blocks). Each row holds L values: hidden_size for the weight, 1 for the bias. */
static int64_t qkv_row(const transformer_config *c, int part, int head, int r) {
    const qkv_layout l = tc_qkv_layout(c);
    size_t off = part == 0   ? qkv_query_offset(l, head)
                 : part == 1 ? qkv_key_offset(l, head)
                             : qkv_value_offset(l, head);
    return (int64_t)off + r;
}

/* HF_QKV_PART: the part's heads x kv_channels rows of L values, in HF's order. */
static void qkv_part(const transformer_config *c, int part, float *hf, float *mg, size_t L,
                     int to_hf) {
    const int heads = part == 0 ? c->num_attention_heads : c->num_query_groups,
              d = c->kv_channels;
    for (int hd = 0; hd < heads; hd++)
        for (int r = 0; r < d; r++) {
            float *h = hf + ((size_t)hd * d + r) * L,
                  *g = mg + (size_t)qkv_row(c, part, hd, r) * L;
            memcpy(to_hf ? h : g, to_hf ? g : h, L * sizeof(float));
        }
}

/* HF_QKV_CONV1D: column col of the [L, 3h] Conv1D (L = h, or 1 for the bias [3h]) is q, k or
 * v's channel col % h: one grouped linear_qkv row of L values. */
static void qkv_conv1d(const transformer_config *c, float *hf, float *mg, size_t L, int to_hf) {
    const int h = c->hidden_size, d = c->kv_channels;
    for (int col = 0; col < 3 * h; col++) {
        const int part = col / h, within = col % h;
        const int64_t row = qkv_row(c, part, within / d, within % d);
        for (size_t i = 0; i < L; i++) {
            float *x = hf + i * 3 * (size_t)h + col, *y = mg + (size_t)row * L + i;
            if (to_hf) *x = *y;
            else *y = *x;
        }
    }
}

/* HF_TRANSPOSE: HF [in, out] <-> megadlm [out, in]. */
static void transpose(float *hf, float *mg, size_t in, size_t out, int to_hf) {
    for (size_t r = 0; r < out; r++)
        for (size_t i = 0; i < in; i++) {
            float *x = hf + i * out + r, *y = mg + r * in + i;
            if (to_hf) *x = *y;
            else *y = *x;
        }
}

/* Moves row r's values between the HF tensor hf and megadlm's parameter, in the direction
 * to_hf says. */
static void move(const hf_name_row *r, const hf_row_at *x, const transformer_config *c,
                 float *hf, int to_hf) {
    const size_t L = x->ndim == 2 ? (size_t)x->d1 : 1;
    float *mg = x->param;
    switch (r->op) {
    case HF_COPY:
    case HF_GLU_CHUNK: {
        float *chunk = mg + (size_t)r->part * x->numel; /* HF_COPY's part is 0 */
        memcpy(to_hf ? hf : chunk, to_hf ? chunk : hf, x->numel * sizeof(float));
        return;
    }
    case HF_TRANSPOSE: transpose(hf, mg, (size_t)x->d0, L, to_hf); return;
    case HF_QKV_PART: qkv_part(c, r->part, hf, mg, L, to_hf); return;
    case HF_QKV_CONV1D:
        /* a linear_qkv row holds d0 = h values for the weight [h, 3h], 1 for the bias [3h] */
        qkv_conv1d(c, hf, mg, x->ndim == 2 ? (size_t)x->d0 : 1, to_hf);
        return;
    }
}

/* Calls fn on every row of m that applies, in the map's order, the layer rows once per layer. */
typedef int (*row_fn)(const hf_name_row *r, const hf_row_at *x, void *ctx);

/* One part's rows for layer `layer` (-1: outside the layers): a run of HF_PER_EXPERT rows is
 * walked once per routed expert, expert after expert. */
static int walk_rows(const hf_name_map *m, const hf_name_row *rows, int n, int layer,
                     const transformer_config *c, const param_set *ps, int exporting, row_fn fn,
                     void *ctx) {
    hf_row_at x;
    for (int i = 0; i < n;) {
        const int per_expert = (rows[i].when & HF_PER_EXPERT) != 0;
        int j = i + 1;
        while (per_expert && j < n && (rows[j].when & HF_PER_EXPERT)) j++;
        for (int e = 0; e < (per_expert ? c->moe.num_experts : 1); e++)
            for (int k = i; k < j; k++) {
                if (!row_applies(&rows[k], c, layer, exporting)) continue;
                resolve(m, &rows[k], layer, e, c, ps, &x);
                if (fn(&rows[k], &x, ctx) != 0) return -1;
            }
        i = j;
    }
    return 0;
}

static int walk(const hf_name_map *m, const transformer_config *c, const param_set *ps,
                int exporting, row_fn fn, void *ctx) {
    if (walk_rows(m, m->pre, m->n_pre, -1, c, ps, exporting, fn, ctx) != 0) return -1;
    for (int l = 0; l < c->num_layers; l++)
        if (walk_rows(m, m->layer, m->n_layer, l, c, ps, exporting, fn, ctx) != 0) return -1;
    return walk_rows(m, m->post, m->n_post, -1, c, ps, exporting, fn, ctx);
}

typedef struct {
    const transformer_config *c;
    out_set *o;
    const hf_shards *sh;
    float *tmp;     /* import: an HF tensor that is not read in place */
    size_t tmp_len; /* its floats (the largest such tensor) */
} walk_ctx;

static int export_row(const hf_name_row *r, const hf_row_at *x, void *ctx) {
    walk_ctx *w = ctx;
    move(r, x, w->c, out_add(w->o, x->hf, x->ndim, x->d0, x->d1), 1);
    return 0;
}

void hf_names_export(const hf_name_map *m, const transformer_config *c, const param_set *ps,
                     out_set *o) {
    walk_ctx w = {.c = c, .o = o};
    walk(m, c, ps, 1, export_row, &w);
}

/* The largest HF tensor a row reads into the buffer (every op but a copy rearranges). */
static int size_row(const hf_name_row *r, const hf_row_at *x, void *ctx) {
    walk_ctx *w = ctx;
    if (r->op != HF_COPY && r->op != HF_GLU_CHUNK && x->numel > w->tmp_len) w->tmp_len = x->numel;
    return 0;
}

static int import_row(const hf_name_row *r, const hf_row_at *x, void *ctx) {
    walk_ctx *w = ctx;
    if (r->op == HF_COPY || r->op == HF_GLU_CHUNK) /* straight into the parameter */
        return hf_read(w->sh, x->hf, x->ndim, x->d0, x->d1, x->param + (size_t)r->part * x->numel);
    if (hf_read(w->sh, x->hf, x->ndim, x->d0, x->d1, w->tmp) != 0) return -1;
    move(r, x, w->c, w->tmp, 0);
    return 0;
}

int hf_names_import(const hf_name_map *m, const transformer_config *c, param_set *ps,
                    const hf_shards *sh) {
    walk_ctx w = {.c = c, .sh = sh};
    walk(m, c, ps, 0, size_row, &w);
    w.tmp = xcalloc(w.tmp_len ? w.tmp_len : 1, sizeof(float),
                    "the conversion buffer (the largest tensor)");
    const int rc = walk(m, c, ps, 0, import_row, &w);
    free(w.tmp);
    return rc;
}
