#include "core/inference/gpt_inference_wrapper.h"

#include <stdlib.h>
#include <string.h>

#include "core/kernels/attention.h"
#include "core/kernels/bf16.h"
#include "core/kernels/norm.h"
#include "core/kernels/rope.h"
#include "core/tensor/memory.h"
#include "core/tensor_parallel/layers.h"
#include "core/tensor_parallel/mappings.h"
#include "core/tensor_parallel/parallel_linear.h"
#include "core/threads.h"
#include "core/transformer/mlp.h"
#include "core/transformer/moe/moe_layer.h"
#include "core/transformer/transformer_layer.h"
#include "core/util/die.h"

struct gpt_inference {
    gpt_model *m;
    int B, max_T, threads;
    /* [R, ...] buffers for R = B x max_T rows */
    float *x, *res, *ln, *mean, *rstd, *qkv, *qkv_raw, *qk_mean, *qk_rstd, *ctx, *fc1, *act,
        *branch;
    float *logits, *logits_local, *gathered; /* [R, V], [R, V/t] and the TP gather's [t, R, V/t] */
    int32_t *position_ids, *doc_start, *doc_end; /* [R] */
    attention_workspace attn;
};

gpt_inference *gpt_inference_create(gpt_model *m, int B, int max_T) {
    const transformer_config *c = &m->cfg;
    if (tc_sp(c) || tc_cp(c) > 1 || tc_pp(c) > 1 || B > m->max_batch || max_T > c->seq_length ||
        (tc_moe(c) && tc_ep(c) > 1))
        die(1, "internal error: an inference forward of %d x %d rows on a model built for %d x "
               "%d (sequence, context or pipeline parallel: %d %d %d)", B, max_T, m->max_batch,
            c->seq_length, tc_sp(c), tc_cp(c), tc_pp(c));
    gpt_inference *gi = calloc(1, sizeof *gi);
    if (!gi) die(1, "out of memory (the inference workspaces)");
    gi->m = m;
    gi->B = B;
    gi->max_T = max_T;
    gi->threads = threads_per_rank();
    size_t R = (size_t)B * max_T, C = c->hidden_size, QKV = tc_qkv_width_local(c);
    size_t heads = (size_t)tc_heads_local(c) + tc_groups_local(c);
    size_t V = c->padded_vocab_size, Vl = tc_vocab_local(c);
#define WS(field, n) gi->field = mem_alloc_floats(MEM_WORKSPACE, (n), "inference " #field)
    WS(x, R * C); WS(res, R * C); WS(ln, R * C); WS(branch, R * C);
    WS(mean, R); WS(rstd, R);
    WS(qkv, R * QKV);
    if (c->qk_layernorm) { WS(qkv_raw, R * QKV); WS(qk_mean, R * heads); WS(qk_rstd, R * heads); }
    WS(ctx, R * tc_heads_local(c) * c->kv_channels);
    WS(fc1, R * tc_fc1_width_local(c)); WS(act, R * tc_ffn_local(c));
    WS(logits_local, R * Vl);
    if (tc_tp(c) > 1) { WS(logits, R * V); WS(gathered, R * V); }
#undef WS
    gi->position_ids = mem_alloc(MEM_WORKSPACE, 3 * R * sizeof(int32_t), "inference positions");
    gi->doc_start = gi->position_ids + R;
    gi->doc_end = gi->doc_start + R;
    gi->attn.threads = gi->threads;
    gi->attn.data = mem_alloc_floats(
        MEM_WORKSPACE, attention_workspace_floats_rows(max_T, max_T, gi->threads),
        "inference attention");
    return gi;
}

void gpt_inference_free(gpt_inference *gi) {
    if (!gi) return;
    mem_free_all(gi->x, gi->res, gi->ln, gi->branch, gi->mean, gi->rstd, gi->qkv, gi->qkv_raw,
                 gi->qk_mean, gi->qk_rstd, gi->ctx, gi->fc1, gi->act, gi->logits_local,
                 gi->logits, gi->gathered, gi->position_ids, gi->attn.data);
    free(gi);
}

/* Position t of a sequence left-padded with p positions: counted from its first real token
 * (the pad positions take the first). */
static int32_t padded_position(const transformer_config *c, int t, int p) {
    return c->position_offset + (t < p ? 0 : t - p);
}

void inference_padding(const transformer_config *c, const int *pad, int B, int T,
                       int32_t *doc_start, int32_t *doc_end, int32_t *position_ids) {
    for (int b = 0; b < B; b++) {
        int p = pad ? pad[b] : 0;
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)b * T + t;
            doc_start[i] = t < p ? 0 : p;
            doc_end[i] = t < p ? p : T;
            position_ids[i] = padded_position(c, t, p);
        }
    }
}

/* The rows' embeddings (their learned positions from the first real token) into gi->x. */
static void embed_rows(gpt_inference *gi, const inference_rows *r) {
    gpt_model *m = gi->m;
    const transformer_config *c = &m->cfg;
    for (int b = 0; b < r->B; b++)
        for (int i = 0; i < r->n; i++) {
            int t = r->t0 + i, p = r->pad ? r->pad[b] : 0;
            gi->position_ids[(size_t)b * r->n + i] = padded_position(c, t, p);
        }
    vocab_parallel_embedding e = {.cfg = c, .wte = m->wte, .wpe = m->wpe, .wte16 = m->wte16,
                                  .kind = tc_half(c), .partial = m->emb_partial,
                                  .position_ids = gi->position_ids};
    vocab_parallel_embedding_forward(&e, gi->x, r->tokens, r->B, r->n);
    half_round_f32(tc_half(c), gi->x, (size_t)r->B * r->n * c->hidden_size);
}

/* Layer l's attention branch of the rows: their QKV rows (q/k norms, RoPE) into the cache, then
 * their queries against the cached keys; the projection's output in gi->branch. */
static void attention_rows_forward(gpt_inference *gi, inference_context *ic,
                                   const inference_rows *r, int l, const layer_weights *w) {
    const transformer_config *c = &gi->m->cfg;
    const int R = r->B * r->n, C = c->hidden_size, QKV = tc_qkv_width_local(c);
    const qkv_layout lay = tc_qkv_layout_local(c);
    const half_kind half = tc_half(c);
    float *proj_out = c->qk_layernorm ? gi->qkv_raw : gi->qkv;
    tp_linear qkv = tp_linear_make(c, TP_LINEAR_QKV, NULL, NULL, NULL);
    column_parallel_linear_forward(&qkv, proj_out, gi->ln, LAYER_LINEAR_W(w, qkv), w->qkv_b, R,
                                   C, QKV);
    half_round_f32(half, proj_out, (size_t)R * QKV);
    if (c->qk_layernorm) {
        qk_norm_forward(gi->qkv, (qk_norm_stats){gi->qk_mean, gi->qk_rstd}, gi->qkv_raw,
                        (qk_norm_weights){w->q_ln_w, w->q_ln_b, w->k_ln_w, w->k_ln_b}, R, lay,
                        c->normalization, c->norm_epsilon);
        half_round_f32(half, gi->qkv, (size_t)R * QKV);
    }
    if (c->rope) {
        const size_t off = (size_t)r->t0 * (c->rot_dim / 2); /* the rows' positions */
        rope_table rt = {gi->m->rope_cos + off, gi->m->rope_sin + off, c->rot_dim};
        rope_forward(gi->qkv, (qkv_batch){r->B, r->n, lay}, rt);
        half_round_f32(half, gi->qkv, (size_t)R * QKV);
    }
    inference_context_store(ic, l, gi->qkv, r->B, r->t0, r->n);
    attention_opts o = {.causal = c->causal,
                        .heads = {c->tp_rank * tc_heads_local(c), c->num_attention_heads},
                        .half = half};
    if (r->pad) o.docs = (attention_docs){gi->doc_start, gi->doc_end, r->T};
    attention_rows ar = {.q = inference_context_row(ic, l, 0, r->t0), .kv = ic->qkv[l],
                         .Tq = r->n, .Tk = r->T, .q0 = r->t0, .q_rows = ic->max_T,
                         .kv_rows = ic->max_T, .out_rows = r->n};
    attention_forward_rows(gi->ctx, (attention_probs){NULL, NULL}, ar, r->B, lay, o, gi->attn);
    tp_linear proj = tp_linear_make(c, TP_LINEAR_PROJ, NULL, gi->branch, NULL);
    row_parallel_linear_forward(&proj, gi->branch, gi->ctx, LAYER_LINEAR_W(w, proj), w->proj_b,
                                R, tc_heads_local(c) * c->kv_channels, C);
}


/* out = a + b, rounded to the run's 16-bit format (the residual stream's, transformer_layer.c) */
static void residual_add(const transformer_config *c, float *out, const float *a, const float *b,
                         size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
    half_round_f32(tc_half(c), out, n);
}

/* [M, V/t] per rank -> [M, V] in gi->logits (TP), or the local buffer itself. */
static const float *gather_vocab(gpt_inference *gi, const float *local, int M) {
    const transformer_config *c = &gi->m->cfg;
    const int t = tc_tp(c), Vl = tc_vocab_local(c), V = c->padded_vocab_size;
    if (t == 1) return local;
    tp_all_gather(gi->gathered, local, (size_t)M * Vl);
    for (int k = 0; k < t; k++)
        for (int i = 0; i < M; i++)
            memcpy(gi->logits + (size_t)i * V + (size_t)k * Vl,
                   gi->gathered + ((size_t)k * M + i) * Vl, (size_t)Vl * sizeof(float));
    return gi->logits;
}

const float *gpt_inference_full_logits(gpt_inference *gi, const activation_store *s, int M) {
    return gather_vocab(gi, s->logits, M);
}

/* The final norm and the output layer on the marked rows (compacted); returns their count. */
static int head_rows_forward(gpt_inference *gi, const inference_rows *r, const float **logits) {
    gpt_model *m = gi->m;
    const transformer_config *c = &m->cfg;
    const int R = r->B * r->n, C = c->hidden_size;
    int M = 0;
    for (int i = 0; i < R; i++)
        if (!r->logit_rows || r->logit_rows[i])
            memmove(gi->x + (size_t)M++ * C, gi->x + (size_t)i * C, (size_t)C * sizeof(float));
    if (M == 0) return 0;
    norm_forward(c, gi->ln, gi->mean, gi->rstd, gi->x, m->lnf_w, m->lnf_b, M);
    tp_linear out = tp_linear_make(c, TP_LINEAR_OUTPUT, NULL, NULL, NULL);
    column_parallel_linear_forward(&out, gi->logits_local, gi->ln,
                                   (linear_weight){m->out_w, m->out_w16}, NULL, M, C,
                                   tc_vocab_local(c));
    *logits = gather_vocab(gi, gi->logits_local, M);
    return M;
}

/* An MoE layer's MLP on the R rows: moe_layer_forward as an evaluation forward of one sequence
 * of R tokens (what it keeps for a backward released at once). Under tensor parallelism
 * without sequence parallelism every rank holds all R rows: the dispatch gathers every TP
 * rank's copy, each rank's share of the experts computes them, and the reduce-scatter hands
 * each rank the sum for its own copy (TP times the expert rows, the same result). */
static void moe_rows_forward(gpt_inference *gi, const layer_weights *w, int l, int R) {
    const transformer_config *c = &gi->m->cfg;
    layer_ctx ctx = {.cfg = c, .B = 1, .T = R, .T_valid = R, .training = 0};
    layer_workspace ws = {0};
    moe_saved m = {0};
    moe_layer_forward(&ctx, tc_layer_offset(c) + l, w, &ws, &m, gi->ln, gi->branch);
    moe_saved_release(&m);
}

int gpt_inference_forward(gpt_inference *gi, inference_context *ic, const inference_rows *r,
                          const float **logits) {
    gpt_model *m = gi->m;
    const transformer_config *c = &m->cfg;
    if (r->B > gi->B || r->T > gi->max_T || r->T > ic->max_T || r->t0 < 0 || r->n < 1 ||
        r->t0 + r->n > r->T)
        die(1, "internal error: inference rows [%d, %d) of %d x %d (workspaces for %d x %d)",
            r->t0, r->t0 + r->n, r->B, r->T, gi->B, gi->max_T);
    const int R = r->B * r->n;
    const size_t RC = (size_t)R * c->hidden_size;
    if (r->pad) {
        int32_t *scratch = gi->position_ids; /* overwritten by embed_rows below */
        inference_padding(c, r->pad, r->B, r->T, gi->doc_start, gi->doc_end, scratch);
    }
    embed_rows(gi, r);
    for (int l = 0; l < m->block.num_layers; l++) {
        const layer_weights *w = &m->block.w_all[l];
        norm_forward(c, gi->ln, gi->mean, gi->rstd, gi->x, w->ln1_w, w->ln1_b, R);
        attention_rows_forward(gi, ic, r, l, w);
        residual_add(c, gi->res, gi->x, gi->branch, RC);
        norm_forward(c, gi->ln, gi->mean, gi->rstd, gi->res, w->ln2_w, w->ln2_b, R);
        if (tc_moe_layer(c, tc_layer_offset(c) + l)) {
            moe_rows_forward(gi, w, l, R);
        } else {
            const mlp_buffers mb = {.fc1 = gi->fc1, .act = gi->act, .branch_full = gi->branch};
            mlp_forward_rows(c, w, &mb, gi->ln, gi->branch, R);
        }
        residual_add(c, gi->x, gi->res, gi->branch, RC);
    }
    *logits = NULL;
    return head_rows_forward(gi, r, logits);
}
