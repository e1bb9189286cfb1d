/* The GPT model: its parameters from gpt_param_table, forward and backward over an activation store
 * (gpt_model.h). */
#include "core/models/gpt_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context_parallel/cp_layout.h"
#include "core/kernels/bf16.h"
#include "core/kernels/cross_entropy.h"
#include "core/kernels/linear.h"
#include "core/kernels/dropout.h"
#include "core/kernels/norm.h"
#include "core/kernels/rope.h"
#include "core/models/gpt_param_table.h"
#include "core/parallel_state.h"
#include "core/random/philox.h"
#include "core/tensor/memory.h"
#include "core/tensor_parallel/layers.h"
#include "core/tensor_parallel/mappings.h"
#include "core/tensor_parallel/parallel_linear.h"
#include "core/transformer/moe/moe_layer.h"
#include "core/threads.h"
#include "core/transformer/transformer_layer.h"
#include "core/util/alloc.h"
#include "core/util/die.h"

/* The anomaly check: the first non-finite (nan_only: NaN) element of x[0 .. n), or n. */
static size_t first_nonfinite(const float *x, size_t n, int nan_only) {
    for (size_t i = 0; i < n; i++)
        if (nan_only ? isnan(x[i]) : !isfinite(x[i])) return i;
    return n;
}

/* The gradients of [begin, end) in tensor order, then the residual-stream gradient backward
 * hands on (dres_of names what it is the gradient w.r.t.; NULL: none). Dies at the first
 * NaN/Inf, as torch's anomaly mode raises at the first backward function returning one. */
static void check_anomaly(const gpt_model *m, size_t begin, size_t end, const char *dres_of) {
    const param_set *ps = &m->params;
    for (int i = 0; i < ps->count; i++) {
        const param_tensor *t = &ps->tensors[i];
        if (t->offset < begin || t->offset >= end) continue;
        size_t k = first_nonfinite(ps->grad + t->offset, t->numel, m->anomaly_nan_only);
        if (k < t->numel)
            die(1, "%s: the gradient of %s has a non-finite value (%g at "
                   "element %zu)", m->anomaly_where, t->name, ps->grad[t->offset + k], k);
    }
    if (!dres_of || !m->anomaly_dres) return;
    size_t k = first_nonfinite(m->anomaly_dres, m->anomaly_dres_len, m->anomaly_nan_only);
    if (k < m->anomaly_dres_len)
        die(1, "%s: the gradient w.r.t. %s has a non-finite value (%g at "
               "element %zu)", m->anomaly_where, dres_of, m->anomaly_dres[k], k);
}

/* The hooks (gpt_model.h) over ranges of the flat buffers: [begin, end) has received this
 * micro-batch's last gradient contribution / is about to be read by forward. */
static void grads_done(gpt_model *m, size_t begin, size_t end, const char *dres_of) {
    if (m->detect_anomaly) check_anomaly(m, begin, end, dres_of);
    if (m->grads_done) m->grads_done(m->grads_done_user, begin, end);
}
static void params_needed(gpt_model *m, size_t begin, size_t end) {
    if (!m->params_needed) return;
    m->params_needed(m->params_needed_user, begin, end);
    /* --bf16 with an overlapped all-gather of the 16-bit copy: the range is complete now; the
     * tensors in it still pending are widened here, once per gather (the step could not: the
     * copy was in flight) */
    const param_set *ps = &m->params;
    if (!m->widen_pending) return;
    for (int i = 0; i < ps->count; i++) {
        const param_tensor *t = &ps->tensors[i];
        if (m->widen_pending[i] && t->offset >= begin && t->offset + t->numel <= end)
            gpt_model_params_widen(m, t->offset, t->offset + t->numel);
    }
}
static void params_done(gpt_model *m, size_t begin, size_t end) {
    if (m->params_done) m->params_done(m->params_done_user, begin, end);
}
/* The embedding's range is [0, layer_begin[0]), the head's (final norm, untied output layer)
 * [layer_begin[L], numel); a tied output layer is the embedding. */
static size_t head_begin(const gpt_model *m) { return m->spec.layer_begin[m->spec.num_layers]; }

/* Block callbacks: layer l (among the rank's layers) -> its range of the flat buffer. */
static void layer_grads_done(void *user, int l) {
    gpt_model *m = user;
    char what[PARAM_NAME_MAX + 16] = "a layer's input";
    if (m->detect_anomaly) { /* "decoder.layers.N" of the layer's first tensor */
        const param_set *ps = &m->params;
        for (int i = 0; i < ps->count; i++)
            if (ps->tensors[i].offset == m->spec.layer_begin[l]) {
                const char *n = ps->tensors[i].name, *dot = strchr(n, '.');
                if (dot) dot = strchr(dot + 1, '.');
                if (dot) dot = strchr(dot + 1, '.');
                snprintf(what, sizeof what, "the input of %.*s", dot ? (int)(dot - n) : 64, n);
                break;
            }
    }
    grads_done(m, m->spec.layer_begin[l], m->spec.layer_begin[l + 1], what);
}
static void layer_params_needed(void *user, int l) {
    gpt_model *m = user;
    params_needed(m, m->spec.layer_begin[l], m->spec.layer_begin[l + 1]);
}
static void layer_params_done(void *user, int l) {
    gpt_model *m = user;
    params_done(m, m->spec.layer_begin[l], m->spec.layer_begin[l + 1]);
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

/* --bf16 / --fp16: the fp32 buffer of the widened 16-bit values of every tensor but the GEMM
 * weights (norms, biases, q/k norms, learned positions), which the kernels read in fp32;
 * widened_at[i] is tensor i's offset there (SIZE_MAX: a GEMM weight, read in 16 bits). Derived
 * values, not state: category workspace. */
static void widened_alloc(gpt_model *m) {
    const param_set *ps = &m->params;
    m->widened_at = xcalloc((size_t)ps->count, sizeof(size_t), "widened parameter offsets");
    size_t n = 0;
    for (int i = 0; i < ps->count; i++) {
        m->widened_at[i] = m->spec.place[i].gemm ? SIZE_MAX : n;
        if (!m->spec.place[i].gemm) n += ps->tensors[i].numel;
    }
    m->widened = mem_alloc_floats(MEM_WORKSPACE, n ? n : 1, "widened 16-bit parameters");
    m->widen_pending = xcalloc((size_t)ps->count, 1, "widen pending flags");
}

/* 1 if the layer's pointer for this tensor points at it: every tensor but a routed expert
 * other than the rank's first (the others follow that one: moe/experts.h). */
static int binds(const gpt_model *m, const gpt_param_place *pl) {
    return pl->expert < 0 || pl->expert == tc_expert_first(&m->cfg);
}

/* Points the model (or its layer's weights) at tensor i's values, and at its gradient: fp32
 * runs read params.data; 16-bit ones a GEMM weight's 16-bit copy (its fp32 pointer stays NULL)
 * and every other tensor's widened values. l: the rank's layer holding it, or -1. */
static void place_tensor(gpt_model *m, int i, int l, int bw) {
    const gpt_param_place *pl = &m->spec.place[i];
    const param_set *ps = &m->params;
    size_t o = ps->tensors[i].offset;
    const uint16_t *h16 = ps->data_bf16 && pl->gemm ? ps->data_bf16 + o : NULL;
    float *f32 = !ps->data_bf16 ? (ps->data ? ps->data + o : NULL) /* NULL: FSDP's units */
                 : h16          ? NULL
                                : m->widened + m->widened_at[i];
    if (pl->part == GPT_PARAM_LAYER) {
        if (!binds(m, pl)) return;
        char *w = (char *)&m->block.w_all[l];
        *(float **)(w + pl->field) = f32;
        if (h16) *(const uint16_t **)(w + pl->field16) = h16;
        if (bw) *(float **)((char *)&m->block.g_all[l] + pl->field) = ps->grad ? ps->grad + o : NULL;
        return;
    }
    *part_slot(m, pl->part, 0) = f32;
    if (pl->part == GPT_PARAM_WORD_EMBEDDING) m->wte16 = h16;
    if (pl->part == GPT_PARAM_OUTPUT_LAYER) m->out_w16 = h16;
    if (bw) *part_slot(m, pl->part, 1) = ps->grad ? ps->grad + o : NULL;
}

/* Every tensor placed (place_tensor), and the tied output layer pointed at the embedding. */
static void place_all(gpt_model *m, int bw) {
    const gpt_param_table *sp = &m->spec;
    const param_set *ps = &m->params;
    for (int l = 0; l < sp->num_layers; l++)
        for (int i = sp->layer_first[l]; i < sp->layer_first[l + 1]; i++) place_tensor(m, i, l, bw);
    for (int i = 0; i < ps->count; i++)
        if (sp->place[i].part != GPT_PARAM_LAYER) place_tensor(m, i, -1, bw);
    if (!m->cfg.untie_embeddings_and_output_weights && tc_first_rank(&m->cfg)) {
        m->out_w = m->wte; /* tied: the output layer reads the word embedding */
        m->out_w16 = m->wte16;
        m->g_out_w = m->g_wte;
    }
}

/* The fp32 pointers (grad: the gradients') of the tensors in [lo, hi) set into base. */
static void set_range(gpt_model *m, size_t lo, size_t hi, float *base, int grad) {
    const gpt_param_table *sp = &m->spec;
    const param_set *ps = &m->params;
    for (int i = 0; i < ps->count; i++) {
        const param_tensor *t = &ps->tensors[i];
        if (t->offset < lo || t->offset >= hi) continue;
        float *at = base ? base + (t->offset - lo) : NULL;
        const gpt_param_place *pl = &sp->place[i];
        if (pl->part != GPT_PARAM_LAYER) {
            *part_slot(m, pl->part, grad) = at;
            continue;
        }
        if (!binds(m, pl)) continue;
        for (int l = 0; l < sp->num_layers; l++)
            if (i >= sp->layer_first[l] && i < sp->layer_first[l + 1]) {
                layer_weights *w = grad ? &m->block.g_all[l] : &m->block.w_all[l];
                *(float **)((char *)w + pl->field) = at;
            }
    }
    if (!m->cfg.untie_embeddings_and_output_weights && tc_first_rank(&m->cfg)) {
        m->out_w = m->wte; /* tied: the output layer reads the word embedding */
        m->g_out_w = m->g_wte;
    }
}

/* --bf16 / --fp16: the 16-bit pointers of the GEMM weights in [lo, hi) set into base (16-bit
 * values), every other tensor's widened fp32 values refreshed from it (kept when base is
 * NULL: they are the model's own copy, not the unit's). */
static void set_half_range(gpt_model *m, size_t lo, size_t hi, const uint16_t *base) {
    const gpt_param_table *sp = &m->spec;
    const param_set *ps = &m->params;
    for (int i = 0; i < ps->count; i++) {
        const param_tensor *t = &ps->tensors[i];
        if (t->offset < lo || t->offset >= hi) continue;
        const uint16_t *at = base ? base + (t->offset - lo) : NULL;
        const gpt_param_place *pl = &sp->place[i];
        if (!pl->gemm) {
            if (at) half_to_f32(tc_half(&m->cfg), m->widened + m->widened_at[i], at, t->numel);
            continue;
        }
        if (pl->part == GPT_PARAM_WORD_EMBEDDING) m->wte16 = at;
        if (pl->part == GPT_PARAM_OUTPUT_LAYER) m->out_w16 = at;
        if (pl->part != GPT_PARAM_LAYER || !binds(m, pl)) continue;
        for (int l = 0; l < sp->num_layers; l++)
            if (i >= sp->layer_first[l] && i < sp->layer_first[l + 1])
                *(const uint16_t **)((char *)&m->block.w_all[l] + pl->field16) = at;
    }
    if (!m->cfg.untie_embeddings_and_output_weights && tc_first_rank(&m->cfg))
        m->out_w16 = m->wte16; /* tied: the output layer reads the word embedding */
}

void gpt_model_set_data_range(void *model, size_t lo, size_t hi, void *base) {
    gpt_model *m = model;
    if (tc_half(&m->cfg))
        set_half_range(m, lo, hi, base);
    else
        set_range(m, lo, hi, base, 0);
}

void gpt_model_set_grad_range(void *model, size_t lo, size_t hi, float *base) {
    set_range(model, lo, hi, base, 1);
}

void gpt_model_set_grad(void *model, float *grad) {
    gpt_model *m = model;
    m->params.grad = grad;
    place_all(m, m->kind != GPT_MODEL_FORWARD_ONLY);
}

/* The rank's parameters as gpt_param_table_rank describes them, over flat buffers (gradients and
 * AdamW's moments as the model's kind asks); every weight pointer of the model and of its
 * layers points into them through its tensor's place. */
static void build_params(gpt_model *m) {
    const transformer_config *c = &m->cfg;
    int bw = m->kind != GPT_MODEL_FORWARD_ONLY;
    gpt_param_table *sp = &m->spec;
    gpt_param_table_rank(c, sp);
    param_set *ps = &m->params;
    *ps = sp->params; /* the spec's table; the buffers are the model's */
    if (tc_half(c)) { /* the model's 16-bit parameters; the fp32 main ones are the optimizer's */
        ps->data_bf16 = mem_alloc(MEM_PARAMS, ps->numel * sizeof(uint16_t),
                                  c->fp16 ? "fp16 parameters" : "bf16 parameters");
        if (m->kind != GPT_MODEL_TRAINING_SHARDED_OPTIMIZER) /* else the shard is the
                                                               * distributed optimizer's */
            ps->main = mem_alloc_floats(bw ? MEM_OPTIMIZER : MEM_PARAMS, ps->numel,
                                        "fp32 main parameters");
    } else {
        ps->data = mem_alloc_floats(MEM_PARAMS, ps->numel, "parameters");
    }
    if (bw) {
        ps->grad = mem_alloc_floats(MEM_GRADS, ps->numel, "gradients");
        if (m->kind == GPT_MODEL_TRAINING) { /* else the distributed optimizer holds them */
            ps->exp_avg = mem_alloc_floats(MEM_OPTIMIZER, ps->numel, "adam exp_avg");
            ps->exp_avg_sq = mem_alloc_floats(MEM_OPTIMIZER, ps->numel, "adam exp_avg_sq");
        }
    }
    if (tc_half(c)) widened_alloc(m);
    place_all(m, bw);
    m->block.layer_grads_done = layer_grads_done;
    m->block.layer_grads_done_user = m;
    m->block.layer_params_needed = layer_params_needed;
    m->block.layer_params_needed_user = m;
    m->block.layer_params_done = layer_params_done;
    m->block.layer_params_done_user = m;
}

gpt_model *gpt_model_create(const transformer_config *cfg, int max_batch, gpt_model_kind kind) {
    gpt_model *m = xcalloc(1, sizeof(gpt_model), "model");
    m->cfg = *cfg;
    m->max_batch = max_batch;
    m->kind = kind;
    m->cfg.vp_rank = 0;                   /* a store names the chunk it runs */
    m->cfg.recompute_store_unchecked = 0; /* and whether it keeps everything */
    const transformer_config *c = &m->cfg;
    int bw = kind != GPT_MODEL_FORWARD_ONLY;
    m->num_chunks = tc_vp(c);
    if (tc_moe(c)) {
        m->moe_tracker = xcalloc(1, sizeof(moe_tracker), "moe tracker");
        moe_tracker_init(m->moe_tracker, c->num_layers);
    }
    /* the block's workspaces are sized for this rank's threads (core/threads.h); no kernel
     * runs more threads than they were sized for */
    /* a rank's positions: seq-length / CP under context parallelism */
    transformer_block_init(&m->block, c, max_batch, tc_seq_local(c), bw, threads_per_rank());
    build_params(m);

    /* N tokens, Ns of them outside tensor-parallel regions */
    size_t N = (size_t)max_batch * tc_seq_local(c), C = c->hidden_size;
    size_t Ns = tc_tokens_local(c, (int)N);
    if (bw) {
        m->dlosses = mem_alloc_floats(MEM_WORKSPACE, N, "dlosses");
        m->dres = mem_alloc_floats(MEM_WORKSPACE, Ns * C, "residual gradient");
        m->demb = mem_alloc_floats(MEM_WORKSPACE, N * C, "embedding gradient");
    }
    if (tc_tp(c) > 1) { /* the vocab-parallel lookup's partial sums before the reduction */
        m->emb_partial = mem_alloc_floats(MEM_WORKSPACE, N * C, "embedding partial lookup");
        m->ce_sumexp = mem_alloc_floats(MEM_WORKSPACE, N, "cross-entropy sum of exponentials");
    }
    if (tc_cp(c) > 1) /* int32 tokens and labels share float-sized slots */
        m->cp_batch = mem_alloc_floats(MEM_OTHER, 3 * N, "context-parallel rows");
    if (c->rope) {
        size_t half = c->rot_dim / 2;
        m->rope_cos = mem_alloc_floats(MEM_OTHER, c->seq_length * half, "rope cos");
        m->rope_sin = mem_alloc_floats(MEM_OTHER, c->seq_length * half, "rope sin");
        rope_tables(m->rope_cos, m->rope_sin, c->seq_length, c->rot_dim, c->rotary_base, 0);
    }
    if (tc_half(c)) /* the linears' operand workspace; the model passes the 16-bit weights */
        linear_half_setup(tc_half(c), (int)N, gpt_model_linear_max_width(c));
    return m;
}

void gpt_model_free(gpt_model *m) {
    if (!m) return;
    transformer_block_free(&m->block);
    if (m->moe_tracker) moe_tracker_free(m->moe_tracker);
    free(m->moe_tracker);
    param_set *ps = &m->params;
    if (ps->data_bf16) linear_half_setup(HALF_NONE, 0, 0);
    mem_free_all(ps->data_bf16, m->widened, ps->data, ps->main, ps->grad, ps->exp_avg,
                 ps->exp_avg_sq);
    gpt_param_table_free(&m->spec); /* the tensor table */
    mem_free_all(m->dlosses, m->dres, m->demb, m->rope_cos, m->rope_sin, m->emb_partial,
                 m->ce_sumexp, m->cp_batch);
    free_all(m->widened_at, m->widen_pending, m);
}

int gpt_model_linear_max_width(const transformer_config *c) {
    int w = c->hidden_size;
    int widths[] = {tc_qkv_width_local(c), tc_heads_local(c) * c->kv_channels,
                    tc_fc1_width_local(c), tc_ffn_local(c), tc_vocab_local(c),
                    /* MoE: the routed and shared experts' linears (0 in a dense model) */
                    tc_moe(c) ? tc_expert_fc1_width_local(c) : 0,
                    tc_moe(c) ? tc_shared_fc1_width_local(c) : 0};
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++)
        if (widths[i] > w) w = widths[i];
    return w;
}

void gpt_model_params_to_bf16(gpt_model *m) {
    if (!m->params.data_bf16) return;
    if (m->params.main)
        half_from_f32(tc_half(&m->cfg), m->params.data_bf16, m->params.main, m->params.numel);
    gpt_model_params_widen(m, 0, m->params.numel);
}

void gpt_model_params_gathering(gpt_model *m) {
    if (m->widen_pending) memset(m->widen_pending, 1, (size_t)m->params.count);
}

void gpt_model_params_widen(gpt_model *m, size_t begin, size_t end) {
    const param_set *ps = &m->params;
    if (!ps->data_bf16) return;
    for (int i = 0; i < ps->count; i++) {
        const param_tensor *t = &ps->tensors[i];
        if (m->widened_at[i] == SIZE_MAX || t->offset + t->numel <= begin || t->offset >= end)
            continue;
        size_t b = t->offset > begin ? t->offset : begin;
        size_t e = t->offset + t->numel < end ? t->offset + t->numel : end;
        half_to_f32(tc_half(&m->cfg), m->widened + m->widened_at[i] + (b - t->offset),
                    ps->data_bf16 + b, e - b);
        if (b == t->offset && e == t->offset + t->numel) m->widen_pending[i] = 0;
    }
}

/* Tensor t's initial values into d (its numel floats). */
static void init_tensor(const gpt_model *m, const param_tensor *t, float *d, uint64_t seed) {
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

/* Under --bf16 / --fp16 the values are rounded into the 16-bit parameters and the fp32 main
 * ones are those widened, as Megatron's optimizers make their main parameters from the model's
 * (`param.detach().clone().float()`): the same whether the main parameters are whole here or
 * sharded by the distributed optimizer (which widens its pieces of the copy). */
void gpt_model_init_params(gpt_model *m, uint64_t seed) {
    param_set *ps = &m->params;
    half_kind k = tc_half(&m->cfg);
    for (int i = 0; i < ps->count; i++) {
        const param_tensor *t = &ps->tensors[i];
        float *d = ps->data ? ps->data + t->offset : ps->main ? ps->main + t->offset
                 : xmalloc(t->numel * sizeof(float), "initial parameter values");
        init_tensor(m, t, d, seed);
        if (k != HALF_NONE) {
            half_from_f32(k, ps->data_bf16 + t->offset, d, t->numel);
            if (ps->main) half_to_f32(k, ps->main + t->offset, ps->data_bf16 + t->offset, t->numel);
        }
        if (!ps->data && !ps->main) free(d);
    }
    gpt_model_params_widen(m, 0, ps->numel);
}

/* ---- activation stores ----
 * The model builds the stores for its micro-batches (gpt_model.h): their buffers are sized from
 * the model's (batch, chunks, the block's layout, the head's chunked logits). */

activation_store *activation_store_create(const gpt_model *m, int checkpointed) {
    activation_store *s = xcalloc(1, sizeof(activation_store), "activation store");
    s->head_rows = -1;
    s->cfg = m->cfg;
    s->cfg.vp_rank = 0;
    s->cfg.recompute_store_unchecked = !checkpointed;
    s->max_batch = m->max_batch;
    s->num_chunks = m->num_chunks;
    const transformer_config *c = &s->cfg;
    block_activations_alloc(&s->block, c, m->max_batch, tc_seq_local(c), &m->block);
    s->input = s->block.hidden[0];
    s->output = s->block.hidden[s->block.num_layers];
    s->grad = m->dres;
    s->stage_floats = m->block.hidden_floats;

    size_t N = (size_t)m->max_batch * tc_seq_local(c);
    s->tokens = mem_alloc(MEM_OTHER, N * sizeof(int), "tokens");
    s->labels = mem_alloc(MEM_OTHER, N * sizeof(int), "labels");
    s->loss_mask = mem_alloc_floats(MEM_OTHER, N, "loss mask");
    /* packed documents: the whole sequences' bounds and position ids (batch data, as the
     * tokens: not an activation, so --log-memory's activation bytes do not change) */
    if (c->packed_docs)
        s->docs = mem_alloc(MEM_OTHER, 3 * (size_t)m->max_batch * c->seq_length * sizeof(int32_t),
                            "document bounds");
    if (!tc_last_rank(c)) return s; /* (interleaved: every store may hold the last chunk) */
    /* masked diffusion: the head runs its rows in chunks, the logits buffer holds one */
    s->logits_rows = gpt_head_logits_rows((int)N, m->logits_in_chunks);
    const head_dims d = head_dims_of(c, N, (size_t)s->logits_rows);
#define HEAD_SAVED_ALLOC(field, what, kept, floats) \
    if (kept) s->field = mem_alloc_floats(MEM_ACTIVATIONS, (floats), what);
    HEAD_SAVED_TENSORS(HEAD_SAVED_ALLOC)
#undef HEAD_SAVED_ALLOC
    return s;
}

/* ---- forward / backward ----
 * The config of a pass is the store's (its model chunk, its recompute kind); the model's
 * differs from it in nothing else. */

/* The word (+ position) embedding: vocab-parallel under tensor parallelism. */
static vocab_parallel_embedding embedding_of(gpt_model *m) {
    return (vocab_parallel_embedding){.cfg = &m->cfg, .wte = m->wte, .wpe = m->wpe,
                                      .wte16 = m->wte16, .kind = tc_half(&m->cfg),
                                      .dwte = m->g_wte, .dwpe = m->g_wpe,
                                      .partial = m->emb_partial};
}

/* The dropout of the embedding output (Megatron applies --hidden-dropout there), keyed by this
 * rank's token rows (their global tokens under context parallelism). */
static dropout_key embedding_dropout_key(const layer_ctx *ctx, cp_rows *rows, int Ns) {
    const transformer_config *c = ctx->cfg;
    dropout_key ek = ctx->key;
    ek.site = DROPOUT_SITE_EMBEDDING;
    *rows = (cp_rows){c, ctx->T, cp_key_length(c, ctx->T, ctx->T_valid),
                      tc_sp(c) ? (int64_t)c->tp_rank * Ns : 0, Ns, c->hidden_size};
    return ek;
}

/* Copies b's document bounds and position ids (over the whole sequences: b->T x CP positions
 * each, b being a context-parallel rank's local batch) into s and points the context at them. */
static void keep_docs(activation_store *s, const gpt_batch *b) {
    layer_ctx *ctx = &s->ctx;
    ctx->doc_start = ctx->doc_end = ctx->position_ids = NULL;
    if (!b->doc_start && !b->position_ids) return;
    if (!s->docs) die(1, "internal error: a packed micro-batch on a model built without packing");
    const size_t n = (size_t)b->B * b->T * tc_cp(&s->cfg), max = (size_t)s->max_batch *
                                                                 s->cfg.seq_length;
    if (b->doc_start) {
        memcpy(s->docs, b->doc_start, n * sizeof(int32_t));
        memcpy(s->docs + max, b->doc_end, n * sizeof(int32_t));
        ctx->doc_start = s->docs;
        ctx->doc_end = s->docs + max;
    }
    if (b->position_ids) {
        memcpy(s->docs + 2 * max, b->position_ids, n * sizeof(int32_t));
        ctx->position_ids = s->docs + 2 * max;
    }
}

/* Records the micro-batch's shape, tokens and dropout key in s (backward reads them), and the
 * model's config with the store's chunk and recompute kind (the model's may have changed since
 * the store was made: a benchmark switches the TP overlap modes). */
static void begin_forward(gpt_model *m, activation_store *s, const gpt_batch *b, gpt_step step) {
    int chunk = s->cfg.vp_rank, unchecked = s->cfg.recompute_store_unchecked;
    s->cfg = m->cfg;
    s->cfg.vp_rank = chunk;
    s->cfg.recompute_store_unchecked = unchecked;
    const transformer_config *c = &s->cfg;
    if (b->B > s->max_batch || b->T > c->seq_length)
        die(1, "internal error: batch %dx%d exceeds the model's buffers %dx%d", b->B, b->T,
            s->max_batch, c->seq_length);
    s->B = b->B;
    s->T = b->T;
    memcpy(s->tokens, b->tokens, (size_t)b->B * b->T * sizeof(int));
    layer_ctx *ctx = &s->ctx;
    ctx->cfg = c;
    ctx->B = b->B;
    ctx->T = b->T;
    ctx->T_valid = b->T_valid > 0 && b->T_valid < b->T ? b->T_valid : b->T;
    ctx->training = step.training;
    ctx->key = (dropout_key){.seed = step.seed, .iteration = step.iteration,
                             .microbatch = step.microbatch, .layer = 0, .site = 0};
    ctx->rope_cos = m->rope_cos;
    ctx->rope_sin = m->rope_sin;
    ctx->inference = b->inference;
    ctx->moe_tracker = step.training ? m->moe_tracker : NULL;
    keep_docs(s, b);
}

/* First stage: embedding + dropout into the block's input. */
static void embedding_forward_into(gpt_model *m, activation_store *s) {
    const transformer_config *c = &s->cfg;
    int Ns = tc_tokens_local(c, s->B * s->T);
    params_needed(m, 0, m->spec.layer_begin[0]);
    float *h0 = s->input;
    vocab_parallel_embedding emb = embedding_of(m);
    emb.positions = s->ctx.T_valid; /* the padding past them has no learned position */
    emb.position_ids = s->ctx.position_ids;
    vocab_parallel_embedding_forward(&emb, h0, s->tokens, s->B, s->T);
    cp_rows rows;
    dropout_key ek = embedding_dropout_key(&s->ctx, &rows, Ns);
    cp_dropout_forward(rows, h0, h0, s->ctx.training ? c->hidden_dropout : 0.0f, ek);
    /* --bf16 (--fp16): the residual stream is 16-bit (Megatron's), from the embedding output on */
    half_round_f32(tc_half(c), h0, (size_t)Ns * c->hidden_size);
    params_done(m, 0, m->spec.layer_begin[0]);
}

/* The output layer's weight (the word embedding when tied): fp32, or its 16-bit copy. */
static linear_weight output_weight(const gpt_model *m) {
    return (linear_weight){m->out_w, m->out_w16};
}

/* ---- the loss-weighted rows only (gpt_batch.loss_rows_only) ----
 * Masked diffusion weighs only its masked positions, about half the rows: the output layer and
 * the cross-entropy run on those rows, gathered in order after the final norm (and after the
 * sequence-parallel all-gather). The same formula on fewer rows: the loss and the gradients of
 * the full computation to rounding (the rows left out have weight 0).
 *
 * The gathered rows go through in chunks of GPT_HEAD_CHUNK_ROWS, and a training forward runs
 * each chunk's backward at once (the gradient seed is known: gpt_batch.grad_seed), so the
 * logits buffer holds one chunk, not N rows kept until backward: logits, cross-entropy, dlogits
 * in place, the output weight's gradient, the chunk's input gradient over its input rows. Then
 * the row gradients are scattered back (zero elsewhere), reduced across TP (all-reduce, or
 * reduce-scatter under SP) and kept in s->lnf: the final norm's output is not read again, and
 * m->demb [N, C] (the gathered rows, free until the embedding's backward) is free again for
 * the other micro-batches in flight (pipeline schedules). Backward only runs the final norm's.
 * The plain gather and reduce-scatter run here, without the --tp-comm-overlap rings. */
static int head_uses_rows(const gpt_model *m, const gpt_batch *b) {
    return b->loss_rows_only && b->labels && b->loss_mask && m->demb;
}

/* dst[k] = src[i] for the rows i of nonzero weight, in order; returns their count. */
static int gather_weighted_rows(float *dst, const float *src, const float *mask, int N, int C) {
    int M = 0;
    for (int i = 0; i < N; i++)
        if (mask[i] != 0.0f) memcpy(dst + (size_t)M++ * C, src + (size_t)i * C, C * sizeof(float));
    return M;
}

/* The inverse, in place: rows [0, M) of x go to the rows of nonzero weight, the others are 0.
 * Back to front: row k moves to a row >= k that no row still to move occupies. */
static void scatter_weighted_rows(float *x, const float *mask, int N, int M, int C) {
    for (int i = N - 1, k = M; i >= 0; i--) {
        float *dst = x + (size_t)i * C;
        if (mask[i] != 0.0f && --k != i)
            memcpy(dst, x + (size_t)k * C, C * sizeof(float));
        else if (mask[i] == 0.0f)
            memset(dst, 0, C * sizeof(float));
    }
}

/* The output layer's input rows [N, C]: the final norm output, all-gathered along tokens under
 * sequence parallelism (into the layer workspace, 16-bit under --bf16 as the linears'). */
static float *head_full_input(gpt_model *m, activation_store *s, int N) {
    const transformer_config *c = &s->cfg;
    if (!tc_sp(c)) return s->lnf;
    size_t shard = (size_t)tc_tokens_local(c, N) * c->hidden_size;
    if (tc_half(c) != HALF_NONE)
        tp_all_gather_half(tc_half(c), m->block.ws.gathered, s->lnf, shard);
    else
        tp_all_gather(m->block.ws.gathered, s->lnf, shard);
    return m->block.ws.gathered;
}

/* The loss's denominator: b->denominator, else the sum of the weights (loss_forward's). */
static double loss_denominator(const gpt_batch *b, int N) {
    if (b->denominator > 0.0f) return b->denominator;
    double den = 0.0;
    for (int i = 0; i < N; i++) den += b->loss_mask ? b->loss_mask[i] : 1.0f;
    return den;
}

/* Cross-entropy of R rows of logits (vocab-parallel under TP) into losses/lse [R]. */
static void head_ce_forward(gpt_model *m, activation_store *s, float *losses, float *lse,
                            const int *labels, int R) {
    const transformer_config *c = &s->cfg;
    int V = tc_vocab_local(c);
    if (tc_tp(c) == 1)
        cross_entropy_forward(losses, lse, s->logits, labels, R, V);
    else
        vocab_parallel_cross_entropy_forward(losses, lse, m->ce_sumexp, s->logits, labels,
                                             c->tp_rank * V, V, R);
}

/* Its backward, in place: s->logits = (softmax - onehot) * dlosses. */
static void head_ce_backward(gpt_model *m, activation_store *s, const float *lse,
                             const int *labels, const float *dlosses, int R) {
    const transformer_config *c = &s->cfg;
    int V = tc_vocab_local(c);
    if (tc_tp(c) == 1)
        cross_entropy_backward(s->logits, s->logits, lse, labels, dlosses, R, V);
    else
        vocab_parallel_cross_entropy_backward(s->logits, s->logits, lse, labels,
                                              c->tp_rank * V, dlosses, V, R);
}

/* One chunk: rows [k, k + R) of the gathered rows x (m->demb). With grads, its backward too:
 * the output weight's gradient, then x's rows overwritten by their gradient (each chunk's GEMMs
 * read only its own rows, so the later chunks' inputs are intact). */
static void head_chunk(gpt_model *m, activation_store *s, int k, int R, int grads) {
    int C = s->cfg.hidden_size, V = tc_vocab_local(&s->cfg);
    float *x = m->demb + (size_t)k * C;
    linear_forward(s->logits, x, output_weight(m), NULL, R, C, V);
    head_ce_forward(m, s, s->losses + k, s->lse + k, s->labels + k, R);
    if (!grads) return;
    head_ce_backward(m, s, s->lse + k, s->labels + k, m->dlosses + k, R);
    linear_backward(NULL, m->g_out_w, NULL, s->logits, x, output_weight(m), R, C, V);
    memset(x, 0, (size_t)R * C * sizeof(float));
    linear_backward(x, NULL, NULL, s->logits, NULL, output_weight(m), R, C, V);
}

/* The gathered rows' gradient [M, C] in m->demb -> the gradient w.r.t. the final norm output,
 * summed across TP, into s->lnf: [N, C] without sequence parallelism, the rank's [Ns, C] with. */
static void head_rows_keep_dln(gpt_model *m, activation_store *s, const float *mask, int M) {
    const transformer_config *c = &s->cfg;
    int N = s->B * s->T, C = c->hidden_size;
    if (tc_tp(c) > 1 && !tc_sp(c)) tp_all_reduce_sum(m->demb, (size_t)M * C);
    scatter_weighted_rows(m->demb, mask, N, M, C);
    if (tc_sp(c))
        tp_reduce_scatter(s->lnf, m->demb, (size_t)tc_tokens_local(c, N) * C);
    else
        memcpy(s->lnf, m->demb, (size_t)N * C * sizeof(float));
}

/* The weighted rows in chunks: their losses and lse (compacted, labels too); in a training
 * forward also their gradients (the output weight's, and dln kept in s->lnf). */
static void head_rows_forward(gpt_model *m, activation_store *s, const gpt_batch *b) {
    const transformer_config *c = &s->cfg;
    int N = s->B * s->T, C = c->hidden_size;
    const float *full = head_full_input(m, s, N);
    int M = gather_weighted_rows(m->demb, full, b->loss_mask, N, C);
    /* loss = sum_i mask_i * loss_i / den: d(objective)/d(loss_i) = mask_i * seed / den */
    double den = loss_denominator(b, N);
    float inv = den > 0.0 ? (float)(b->grad_seed / den) : 0.0f;
    for (int i = 0, k = 0; i < N; i++)
        if (b->loss_mask[i] != 0.0f) {
            s->labels[k] = b->labels[i];
            m->dlosses[k++] = b->loss_mask[i] * inv;
        }
    s->head_rows = M;
    s->head_dln = s->ctx.training;
    s->grad_seed = b->grad_seed;
    for (int k = 0; k < M; k += GPT_HEAD_CHUNK_ROWS) {
        int R = M - k < GPT_HEAD_CHUNK_ROWS ? M - k : GPT_HEAD_CHUNK_ROWS;
        head_chunk(m, s, k, R, s->head_dln);
    }
    if (s->head_dln) head_rows_keep_dln(m, s, b->loss_mask, M);
}

/* The store's logits buffer holds logits_rows rows (chunked for masked diffusion). */
static void logits_fit(const activation_store *s, int rows) {
    if (rows > s->logits_rows)
        die(1, "internal error: a forward needs logits for %d rows, the store holds %d (a model "
               "built for masked-diffusion training runs every labelled forward on its "
               "loss-weighted rows only)", rows, s->logits_rows);
}

/* Without labels (sampling): logits of the rows b->logit_rows marks only. No backward follows,
 * so the rows are compacted in place in the output layer's input ([M, C] at its start). */
static void head_marked_forward(gpt_model *m, activation_store *s, const gpt_batch *b) {
    const transformer_config *c = &s->cfg;
    int N = s->B * s->T, C = c->hidden_size, M = 0;
    float *full = head_full_input(m, s, N);
    for (int i = 0; i < N; i++)
        if (b->logit_rows[i])
            memmove(full + (size_t)M++ * C, full + (size_t)i * C, C * sizeof(float));
    s->head_rows = M;
    logits_fit(s, M);
    if (M) linear_forward(s->logits, full, output_weight(m), NULL, M, C, tc_vocab_local(c));
}

/* Last stage: final norm on the token shard, gathered for the vocab-parallel output layer. */
static void head_forward_run(gpt_model *m, activation_store *s, const gpt_batch *b) {
    const transformer_config *c = &s->cfg;
    int N = s->B * s->T, Ns = tc_tokens_local(c, N), C = c->hidden_size, V = tc_vocab_local(c);
    norm_forward(c, s->lnf, s->lnf_mean, s->lnf_rstd, s->output, m->lnf_w, m->lnf_b, Ns);
    s->head_rows = -1;
    s->head_dln = 0;
    if (head_uses_rows(m, b)) {
        head_rows_forward(m, s, b);
        return;
    }
    if (b->logit_rows && !b->labels) {
        head_marked_forward(m, s, b);
        return;
    }
    logits_fit(s, N);
    tp_linear out = tp_linear_make(c, TP_LINEAR_OUTPUT, m->block.ws.gathered, NULL, NULL);
    column_parallel_linear_forward(&out, s->logits, s->lnf, output_weight(m), NULL, N, C, V);
}
static void head_forward(gpt_model *m, activation_store *s, const gpt_batch *b) {
    params_needed(m, head_begin(m), m->params.numel);
    head_forward_run(m, s, b);
    params_done(m, head_begin(m), m->params.numel);
}

/* Cross-entropy (vocab-parallel under TP) and the weighted mean of the per-token losses (over
 * the rows that reached the output layer: the others weigh 0). */
static float loss_forward(gpt_model *m, activation_store *s, const gpt_batch *b) {
    int N = s->B * s->T;
    if (b->loss_mask)
        memcpy(s->loss_mask, b->loss_mask, (size_t)N * sizeof(float));
    else
        for (int i = 0; i < N; i++) s->loss_mask[i] = 1.0f;
    if (s->head_rows < 0) { /* every row: (the weighted rows ran theirs in head_forward) */
        memcpy(s->labels, b->labels, (size_t)N * sizeof(int));
        head_ce_forward(m, s, s->losses, s->lse, s->labels, N);
    }
    double num = 0.0, den = 0.0;
    for (int i = 0, k = 0; i < N; i++) {
        if (s->head_rows < 0 || s->loss_mask[i] != 0.0f)
            num += (double)s->losses[s->head_rows >= 0 ? k++ : i] * s->loss_mask[i];
        den += s->loss_mask[i];
    }
    if (b->denominator > 0.0f) den = b->denominator;
    s->loss_mask_sum = (float)den;
    return den > 0.0 ? (float)(num / den) : 0.0f;
}

/* Context parallelism: this rank's rows of the micro-batch b (its two chunks of each
 * sequence) as a batch of T / CP rows, with the denominator of the whole micro-batch (the loss
 * of the local rows is a part of the single process's sum: Megatron all-reduces it over CP) and
 * the gradient seed times CP (Megatron's loss x CP: the gradients are averaged over DP x CP). */
static gpt_batch cp_local_batch(gpt_model *m, const gpt_batch *b) {
    const transformer_config *c = &m->cfg;
    const int cp = tc_cp(c), N = b->B * b->T, Nl = N / cp;
    if (!b->labels || b->logit_rows || b->T % (2 * cp) != 0)
        die(1, "internal error: a context-parallel forward of %d tokens per sequence%s", b->T,
            b->labels ? "" : " without labels");
    gpt_batch lb = *b;
    int32_t *tokens = (int32_t *)m->cp_batch, *labels = (int32_t *)(m->cp_batch + Nl);
    float *mask = b->loss_mask ? m->cp_batch + 2 * (size_t)Nl : NULL;
    cp_select_rows(c, b->B, b->T, tokens, b->tokens, labels, b->labels, mask, b->loss_mask);
    lb.tokens = tokens;
    lb.labels = labels;
    lb.loss_mask = mask;
    lb.T = b->T / cp;
    lb.T_valid = 0; /* set on the context from b: it counts the whole sequence */
    lb.grad_seed = b->grad_seed * (float)cp;
    if (lb.denominator <= 0.0f) {
        double den = 0.0;
        for (int i = 0; i < N; i++) den += b->loss_mask ? b->loss_mask[i] : 1.0f;
        lb.denominator = (float)den;
    }
    return lb;
}

float gpt_model_forward(gpt_model *m, activation_store *s, const gpt_batch *b, gpt_step step) {
    const transformer_config *c = &s->cfg;
    if (tc_cp(&m->cfg) > 1) {
        gpt_batch lb = cp_local_batch(m, b);
        begin_forward(m, s, &lb, step);
        s->ctx.T_valid = b->T_valid > 0 && b->T_valid < b->T ? b->T_valid : b->T;
        if (tc_first_stage(c)) embedding_forward_into(m, s);
        transformer_block_forward(&m->block, &s->block, &s->ctx);
        if (!tc_last_stage(c)) return 0.0f;
        head_forward(m, s, &lb);
        /* the whole micro-batch's loss: the sum of the ranks' parts */
        return (float)parallel_sum_double(PARALLEL_GROUP_CP, loss_forward(m, s, &lb));
    }
    begin_forward(m, s, b, step);
    if (tc_first_stage(c)) embedding_forward_into(m, s);
    /* else: the previous stage's output was received into s->input */
    transformer_block_forward(&m->block, &s->block, &s->ctx);
    if (!tc_last_stage(c)) return 0.0f; /* output in s->output */
    head_forward(m, s, b);
    return b->labels ? loss_forward(m, s, b) : 0.0f;
}

/* The head's backward over every row: cross-entropy, output layer -> dln (returned): m->demb
 * [N, C] holds this rank's part of the gradient w.r.t. the (gathered) final norm output,
 * summed across TP into dln ([Ns, C] under SP). */
static float *head_full_backward(gpt_model *m, activation_store *s, float loss_scale) {
    const transformer_config *c = &s->cfg;
    int N = s->B * s->T, C = c->hidden_size, V = tc_vocab_local(c);
    /* loss = sum_i mask_i * loss_i / sum(mask) */
    float inv = s->loss_mask_sum > 0.0f ? loss_scale / s->loss_mask_sum : 0.0f;
    for (int i = 0; i < N; i++) m->dlosses[i] = s->loss_mask[i] * inv;
    head_ce_backward(m, s, s->lse, s->labels, m->dlosses, N);
    float *dln = tc_sp(c) ? m->block.ws.dln : m->demb;
    tp_linear out = tp_linear_make(c, TP_LINEAR_OUTPUT, m->block.ws.gathered, m->demb,
                                   m->block.ws.recv);
    column_parallel_linear_backward(&out, dln, m->g_out_w, NULL, s->logits, s->lnf,
                                    output_weight(m), N, C, V);
    return dln;
}

/* The head's backward (last stage): cross-entropy, output layer (both already run in forward
 * on the weighted rows: dln is in s->lnf), final norm -> s->grad. */
static void head_backward(gpt_model *m, activation_store *s, float loss_scale) {
    const transformer_config *c = &s->cfg;
    int Ns = tc_tokens_local(c, s->B * s->T);
    float *dln;
    params_needed(m, head_begin(m), m->params.numel);
    if (s->head_rows >= 0) {
        if (!s->head_dln || s->grad_seed != loss_scale)
            die(1, "internal error: the backward of a masked-diffusion head (seed %g) that ran "
                   "%s in forward", (double)loss_scale,
                s->head_dln ? "with another seed" : "without gradients");
        dln = s->lnf;
    } else {
        dln = head_full_backward(m, s, loss_scale);
    }
    memset(s->grad, 0, (size_t)Ns * c->hidden_size * sizeof(float));
    norm_backward(c, s->grad, m->g_lnf_w, m->g_lnf_b, dln, s->output, m->lnf_w, s->lnf_mean,
                  s->lnf_rstd, Ns);
    s->head_dln = 0;
    params_done(m, head_begin(m), m->params.numel);
    grads_done(m, head_begin(m), m->params.numel, "the decoder's output (the head's backward)");
}

/* First stage: the embedding's backward from the gradient w.r.t. the block input. */
static void embedding_backward_from(gpt_model *m, activation_store *s) {
    const transformer_config *c = &s->cfg;
    int Ns = tc_tokens_local(c, s->B * s->T);
    size_t NsC = (size_t)Ns * c->hidden_size;
    params_needed(m, 0, m->spec.layer_begin[0]); /* the lookup's backward tests wpe */
    memset(m->demb, 0, NsC * sizeof(float));
    cp_rows rows;
    dropout_key ek = embedding_dropout_key(&s->ctx, &rows, Ns);
    cp_dropout_backward(rows, m->demb, s->grad, s->ctx.training ? c->hidden_dropout : 0.0f, ek);
    vocab_parallel_embedding emb = embedding_of(m);
    emb.positions = s->ctx.T_valid;
    emb.position_ids = s->ctx.position_ids;
    vocab_parallel_embedding_backward(&emb, m->demb, s->tokens, s->B, s->T);
    params_done(m, 0, m->spec.layer_begin[0]);
    grads_done(m, 0, m->spec.layer_begin[0], NULL);
}

void gpt_model_backward(gpt_model *m, activation_store *s, float loss_scale) {
    const transformer_config *c = &s->cfg;
    loss_scale *= (float)tc_cp(c); /* as the forward's seed: cp_local_batch */
    /* the routers' losses too: each CP rank's is its chunks' part of the sequence's, and the
     * gradients are averaged over DP x CP (Megatron leaves this scale out: its router losses'
     * gradients are 1/CP of one process's under context parallelism; docs/MOE.md) */
    s->ctx.moe_grad_scale = loss_scale;
    m->anomaly_dres = s->grad;
    m->anomaly_dres_len = (size_t)tc_tokens_local(c, s->B * s->T) * c->hidden_size;
    if (tc_last_stage(c)) head_backward(m, s, loss_scale);
    /* else: the next stage's gradient was received into s->grad */
    transformer_block_backward(&m->block, &s->block, &s->ctx, s->grad);
    if (tc_first_stage(c)) embedding_backward_from(m, s);
    /* else: the gradient w.r.t. the input is in s->grad */
}
