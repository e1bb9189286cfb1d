#include "training/plan_cost.h"

#include <math.h>
#include <string.h>

#include "core/pipeline_parallel/schedules.h"
#include "core/transformer/moe/token_dispatcher.h"
#include "core/transformer/transformer_config.h"
#include "training/model_provider.h"
#include "training/theoretical_memory.h"

/* ---- the layout's shape ---- */

/* A mixture-of-experts model's shape for the cost model (docs/PLAN.md); on 0: dense */
typedef struct {
    int on, alltoall, shared; /* MoE; --moe-token-dispatcher-type alltoall; a shared expert */
    double E, ep, el;         /* experts, expert-parallel size, experts per rank */
    double rows_per_token;    /* expert rows a token makes at a balanced routing: k (--moe-router-
                                 topk), fewer where a capacity drops, E x capacity / N padded */
    double layers;            /* MoE layers of the model */
    double recomputed;        /* ... whose forward full recompute runs again (whole model) */
    double expert_params;     /* the first stage's expert parameters on a rank (their gradients
                                 are reduced over DP / EP ranks, the others over DP) */
} moe_shape;

typedef struct {
    double t, p, d, v;  /* tensor, pipeline, data-parallel sizes; model chunks per rank */
    double c;           /* context-parallel size: a rank holds s / c positions of a sequence */
    double M;           /* micro-batches per iteration (per data-parallel replica) */
    double stage_layers;
    double in_flight;   /* micro-batches the first stage holds (theoretical_memory) */
    double partial;     /* of those, kept whole under partial recompute (0 without) */
    int half;           /* --bf16 / --fp16: 16-bit values on the wire and 16-bit GEMMs */
    int rpn;            /* ranks per node */
    theoretical_memory m; /* `megadlm memory`'s account of these arguments, computed once */
    moe_shape e;
} shape;

int plan_ranks_per_node(const plan_device *d, int world_size) {
    if (d->ranks_per_node <= 0 || d->ranks_per_node > world_size) return world_size;
    return d->ranks_per_node;
}

static int full_recompute(const megadlm_args *a) {
    return ARGS_CHOICE(a, recompute_granularity) == ARGS_RECOMPUTE_FULL;
}

/* The same arguments with recomputation off: what partial recompute's unchecked micro-batches
 * cost (Megatron's theoretical report does not count them; composing the two reports does). */
static megadlm_args without_recompute(const megadlm_args *a) {
    megadlm_args b = *a;
    b.recompute_granularity[0] = 0;
    b.recompute_method[0] = 0;
    b.recompute_num_layers = 0;
    b.num_microbatches_with_partial_activation_checkpoints = -1;
    b.distribute_saved_activations = 0;
    return b;
}

/* MoE layers among the layers full recompute runs again (the whole model: every layer with
 * uniform, the first n of each chunk of every stage with block) */
static double moe_recomputed(const megadlm_args *a, const transformer_config *c) {
    if (!full_recompute(a)) return 0.0;
    int p = a->pipeline_model_parallel_size, v = tc_vp(c), chunk = c->num_layers / (p * v);
    int n = ARGS_CHOICE(a, recompute_method) == ARGS_RECOMPUTE_BLOCK
                ? (a->recompute_num_layers < chunk ? a->recompute_num_layers : chunk)
                : chunk;
    double count = 0.0;
    for (int j = 0; j < v * p; j++) /* chunk j of the model: (model chunk, stage) in order */
        for (int l = 0; l < n; l++) count += tc_moe_layer(c, j * chunk + l);
    return count;
}

static moe_shape moe_shape_of(const megadlm_args *a, const theoretical_memory *m) {
    moe_shape e = {0};
    if (a->num_experts <= 0) return e;
    transformer_config c = model_config_from_args(a);
    c.pp_size = a->pipeline_model_parallel_size;
    if (c.pp_size <= 1) c.vp_size = 0;
    e.on = 1;
    e.alltoall = ARGS_CHOICE(a, moe_token_dispatcher_type) == ARGS_MOE_DISPATCHER_ALLTOALL;
    e.shared = a->moe_shared_expert_intermediate_size > 0;
    e.E = a->num_experts;
    e.ep = a->expert_model_parallel_size;
    e.el = e.E / e.ep;
    /* a balanced routing's rows (moe_rows_balanced without its whole-number share): each
     * expert N k / E of a rank's N tokens, at most its capacity, exactly it when padded */
    int N = tc_tokens_local(&c, a->micro_batch_size * tc_seq_local(&c));
    double share = (double)N * a->moe_router_topk / e.E;
    int cap = moe_capacity(&c, N);
    if (cap >= 0) share = c.moe.pad_to_capacity ? cap : fmin(share, (double)cap);
    e.rows_per_token = e.E * share / N;
    for (int l = 0; l < a->num_layers; l++) e.layers += tc_moe_layer(&c, l);
    e.recomputed = moe_recomputed(a, &c);
    /* each local expert: fc1 [F_e (2 F_e with SwiGLU) / t, h], fc2 [h, F_e / t] */
    e.expert_params = m->moe_layers_first_stage * e.el * (double)a->hidden_size *
                      a->moe_ffn_hidden_size * (a->swiglu ? 3.0 : 2.0) /
                      a->tensor_model_parallel_size;
    return e;
}

static shape layout_shape(const megadlm_args *a, const plan_device *d) {
    shape s;
    theoretical_memory_compute(a, &s.m);
    const theoretical_memory *m = &s.m;
    s.t = a->tensor_model_parallel_size;
    s.p = a->pipeline_model_parallel_size;
    s.d = a->data_parallel_size;
    s.c = a->context_parallel_size > 1 ? a->context_parallel_size : 1;
    s.v = a->virtual_pipeline_model_parallel_size > 1 ? a->virtual_pipeline_model_parallel_size : 1;
    s.M = m->num_microbatches;
    s.stage_layers = m->stage_layers;
    s.in_flight = m->in_flight_microbatches;
    int K = a->num_microbatches_with_partial_activation_checkpoints;
    s.partial = full_recompute(a) && K > 0 ? fmin((double)K, s.in_flight) : 0.0;
    s.half = a->bf16 || a->fp16;
    s.rpn = plan_ranks_per_node(d, a->world_size);
    s.e = moe_shape_of(a, m);
    return s;
}

/* ---- memory: `megadlm memory`'s figures ---- */

/* Megatron's report, plus the MoE layers' state (at the bound; *balanced at a balanced
 * routing) that `megadlm memory` adds beside it */
static double megatron_memory(const megadlm_args *a, double *balanced) {
    theoretical_memory m;
    theoretical_memory_compute(a, &m);
    /* Megatron's report divides the distributed optimizer's 12 bytes by DP alone, but its
     * optimizer shards over DP x CP (the data-parallel group with context parallelism): the
     * plan counts what runs */
    double cp = (double)args_grad_reduce_ranks(a) / a->data_parallel_size;
    if (cp > 1.0 && a->use_distributed_optimizer && !a->use_custom_fsdp && !a->use_torch_fsdp2)
        m.total_bytes -= m.parameters_most_loaded_shard * 12.0 / a->data_parallel_size * (1.0 - 1.0 / cp);
    /* MoE: the experts' optimizer shards over DP / EP ranks (the report divides by DP), and
     * the layers' routing-dependent state */
    double bound = m.total_bytes + m.moe_expert_optimizer_bytes + m.moe_bytes_bound;
    *balanced = m.total_bytes + m.moe_expert_optimizer_bytes + m.moe_bytes_balanced;
    int K = a->num_microbatches_with_partial_activation_checkpoints;
    if (!full_recompute(a) || K <= 0) return bound;
    /* K of the first stage's in-flight micro-batches keep every activation, and the state of
     * every MoE layer */
    megadlm_args none = without_recompute(a);
    theoretical_memory mn;
    theoretical_memory_compute(&none, &mn);
    double k = fmin((double)K, m.in_flight_microbatches);
    double moe = k * (mn.moe_layers_kept_per_microbatch - m.moe_layers_kept_per_microbatch);
    double layers = k * (mn.stage_layer_bytes - m.stage_layer_bytes);
    *balanced += layers + moe * m.moe_layer_kept_balanced;
    return bound + layers + moe * m.moe_layer_kept_bound;
}

double plan_memory_bytes(const megadlm_args *a, plan_account account, double *balanced) {
    double ignored;
    if (!balanced) balanced = &ignored;
    if (account == PLAN_ACCOUNT_MEGATRON) return megatron_memory(a, balanced);
    /* the largest pipeline stage of what `train --log-memory` predicts (and measures) */
    theoretical_megadlm_peak pk = theoretical_megadlm_most_loaded(a);
    *balanced = pk.balanced;
    return pk.bound;
}

/* ---- FLOPs ---- */

/* Forward FLOPs per token of a layer's MLP slot: the dense MLP (2 h f, twice with SwiGLU's
 * gate, for fc1; 2 h f for fc2), or an MoE layer's router (2 h E), routed experts on the
 * token's rows (rows_per_token of them at --moe-ffn-hidden-size) and shared expert */
static double dense_mlp_forward(const megadlm_args *a) {
    return 2.0 * a->hidden_size * (double)a->ffn_hidden_size * (a->swiglu ? 3.0 : 2.0);
}

static double moe_mlp_forward(const megadlm_args *a, const moe_shape *e) {
    double h = a->hidden_size, gated = a->swiglu ? 3.0 : 2.0;
    return 2.0 * h * e->E + e->rows_per_token * 2.0 * h * a->moe_ffn_hidden_size * gated +
           2.0 * h * a->moe_shared_expert_intermediate_size * gated;
}

/* Model and hardware FLOPs of the job. `megadlm memory`'s are MegaDLMs' (every layer's MLP
 * times --moe-router-topk: what training logs), so for an MoE model the plan takes Megatron's
 * dense formula and puts each MoE layer's MLP slot in place of its dense MLP (3 passes), in
 * the recomputed forwards too (`megadlm memory` re-runs the dense layer's FLOPs there), and
 * with --moe-layer-recompute one more forward of every MoE layer's slot. */
static double job_flops(const megadlm_args *a, const theoretical_memory *m, const moe_shape *e,
                        double *model) {
    *model = m->model_flops_per_iteration;
    if (!e->on) return m->hardware_flops_per_iteration;
    megadlm_args dense = *a;
    dense.num_experts = 0;
    double tokens = (double)a->global_batch_size * a->seq_length;
    double delta = moe_mlp_forward(a, e) - dense_mlp_forward(a);
    *model = model_flops_per_iteration(&dense, a->global_batch_size) +
             3.0 * tokens * e->layers * delta;
    double hw = *model + (m->hardware_flops_per_iteration - m->model_flops_per_iteration) +
                tokens * e->recomputed * delta;
    if (a->moe_layer_recompute) hw += tokens * e->layers * moe_mlp_forward(a, e);
    return hw;
}

/* Hardware FLOPs of the job; partial recompute: the stage's unchecked share runs no second
 * forward (the first stage's share: the slowest stage sets the pace) */
static double hardware_flops(const megadlm_args *a, const shape *s, double *model) {
    double hw = job_flops(a, &s->m, &s->e, model);
    if (s->partial <= 0.0) return hw;
    megadlm_args none = without_recompute(a);
    theoretical_memory mn;
    theoretical_memory_compute(&none, &mn);
    moe_shape en = s->e;
    en.recomputed = 0.0;
    double ignored, hw_none = job_flops(&none, &mn, &en, &ignored);
    double kept = s->partial / s->in_flight;
    return hw - kept * (hw - hw_none);
}

/* Layers of a stage whose forward runs again, per micro-batch (full recompute) */
static double recomputed_layers(const megadlm_args *a, const shape *s) {
    if (!full_recompute(a)) return 0.0;
    double chunk = s->stage_layers / s->v;
    double n = ARGS_CHOICE(a, recompute_method) == ARGS_RECOMPUTE_BLOCK
                   ? fmin((double)a->recompute_num_layers, chunk) * s->v
                   : s->stage_layers;
    return n * (1.0 - (s->partial > 0.0 ? s->partial / s->in_flight : 0.0));
}

/* ... of which MoE layers (the mean over the stages) */
static double recomputed_moe_layers(const shape *s) {
    return s->e.recomputed / s->p * (1.0 - (s->partial > 0.0 ? s->partial / s->in_flight : 0.0));
}

/* ---- communication ---- */

/* One all-gather or reduce-scatter of `bytes` (the whole tensor) over n ranks in a ring:
 * (n - 1)/n of it leaves each rank, in n - 1 steps. An all-reduce is two of these. */
static double ring_half(double bytes, double n, double bw, double latency) {
    if (n <= 1.0) return 0.0;
    return (n - 1.0) / n * bytes / bw + (n - 1.0) * latency;
}

/* Tensor parallel, per micro-batch on one stage. Megatron's layer: 2 all-reduces in forward
 * (attention and MLP outputs) and 2 in backward (their inputs' gradients); with sequence
 * parallelism each becomes an all-gather and a reduce-scatter, and backward gathers the
 * linear_qkv / linear_fc1 inputs again for the weight gradient (only the shard was saved):
 * forward 2 AG + 2 RS, backward 4 AG + 2 RS... counted as 6 AG + 4 RS per layer. A recomputed
 * layer repeats its forward's. The embedding and output layer add one all-reduce per stage (two
 * without pipelining). An MoE layer without a shared expert has no MLP half (3 AG + 2 RS; its
 * forward's 1 + 1): its tokens travel in the MoE term; a shared expert is the dense MLP's, once
 * more per MoE layer under --moe-layer-recompute. */
static double tp_per_microbatch(const megadlm_args *a, const plan_device *d, const shape *s,
                                double recomputed, double recomputed_moe) {
    if (s->t <= 1.0) return 0.0;
    double N = (double)a->micro_batch_size * a->seq_length / s->c * a->hidden_size;
    double bw = s->t <= s->rpn ? d->intra_bandwidth : d->inter_bandwidth;
    /* Megatron moves 16-bit values in 16-bit runs; megadlm gathers in 16 bits but reduces in
     * fp32 (core/tensor_parallel/comm_overlap.h) */
    double gather_b = s->half ? 2.0 : 4.0;
    double reduce_b = d->account == PLAN_ACCOUNT_MEGADLM ? 4.0 : gather_b;
    double ag = ring_half(N * gather_b, s->t, bw, d->latency);
    double rs = ring_half(N * reduce_b, s->t, bw, d->latency);
    double L = s->stage_layers, extra = s->p > 1.0 ? 1.0 : 2.0;
    /* MLP halves an MoE layer drops (< 0) or adds: mlp_fwd forward ones (1 AG + 1 RS with
     * SP), mlp_bwd backward ones (2 AG + 1 RS) */
    double moe_layers = s->e.on ? s->e.layers / s->p : 0.0, mlp_fwd = 0.0, mlp_bwd = 0.0;
    if (s->e.on && !s->e.shared) mlp_fwd = -(moe_layers + recomputed_moe), mlp_bwd = -moe_layers;
    if (s->e.on && s->e.shared && a->moe_layer_recompute) mlp_fwd = moe_layers;
    /* the vocabulary-parallel cross entropy: 3 all-reduces of b x s fp32 values (max, sum of
     * exponentials, target logit) */
    double ce = 3.0 * 2.0 * ring_half(4.0 * a->micro_batch_size * a->seq_length / s->c, s->t,
                                      bw, d->latency);
    if (a->sequence_parallel)
        return (6.0 * L + 2.0 * recomputed + extra + mlp_fwd + 2.0 * mlp_bwd) * ag +
               (4.0 * L + 2.0 * recomputed + extra + mlp_fwd + mlp_bwd) * rs + ce;
    return (4.0 * L + 2.0 * recomputed + extra + mlp_fwd + mlp_bwd) * 2.0 * rs + ce;
}

/* Expert parallelism's token exchange per micro-batch on a stage (docs/PLAN.md, "moe comm").
 * A rank's rows: its N tokens (b s, / t with sequence parallelism) x rows_per_token, of h
 * values. alltoall: forward sends them to the EP ranks holding their experts and takes the
 * outputs back, backward the same two ways for their gradients: (EP - 1)/EP of them leave a
 * rank each time; the forward first exchanges the per-expert counts (E values); under TP the
 * received rows are all-gathered over TP and the partial outputs reduce-scattered back, in
 * forward and in backward. allgather: the TP x EP group's tokens all-gathered with their
 * routing (a gate and an index per choice: 8 bytes) and the outputs reduce-scattered, in
 * forward; the output gradients all-gathered and the input and gate gradients reduce-scattered
 * in backward. A recomputed MoE layer repeats its forward's, and every MoE layer once more
 * under --moe-layer-recompute. megadlm moves fp32 (its dispatch buffers), Megatron 16-bit
 * values in 16-bit runs. EP's ranks are t apart: the TP x EP span decides the link. */
static double moe_per_microbatch(const megadlm_args *a, const plan_device *d, const shape *s,
                                 double recomputed_moe) {
    const moe_shape *e = &s->e;
    if (!e->on || (e->ep <= 1.0 && s->t <= 1.0)) return 0.0;
    double N = (double)a->micro_batch_size * a->seq_length / (a->sequence_parallel ? s->t : 1.0);
    double bytes_v = s->half && d->account != PLAN_ACCOUNT_MEGADLM ? 2.0 : 4.0;
    double rows = N * e->rows_per_token * a->hidden_size * bytes_v;
    double span = s->t * e->ep, lat = d->latency;
    double bw = span <= s->rpn ? d->intra_bandwidth : d->inter_bandwidth;
    double fwd, bwd;
    if (e->alltoall) {
        double bw_tp = s->t <= s->rpn ? d->intra_bandwidth : d->inter_bandwidth;
        double a2a = ring_half(rows, e->ep, bw, lat);
        double counts = ring_half(4.0 * e->E, e->ep, bw, lat);
        double tp = ring_half(s->t * rows, s->t, bw_tp, lat); /* an AG or an RS */
        fwd = 2.0 * a2a + counts + 2.0 * tp;
        bwd = 2.0 * a2a + 2.0 * tp;
    } else {
        double k = a->moe_router_topk;
        double tokens = ring_half(span * N * a->hidden_size * bytes_v, span, bw, lat);
        fwd = 2.0 * tokens + ring_half(span * N * k * 8.0, span, bw, lat);
        bwd = 2.0 * tokens + ring_half(span * N * k * 4.0, span, bw, lat);
    }
    double layers = e->layers / s->p;
    double again = recomputed_moe + (a->moe_layer_recompute ? layers : 0.0);
    return layers * (fwd + bwd) + again * fwd;
}

/* Pipeline sends per iteration: each micro-batch's activation forward and its gradient
 * backward across a stage boundary, once per model chunk; Megatron splits them over the
 * tensor-parallel ranks (scatter-gather; the sequence shard with SP) */
static double p2p_time(const megadlm_args *a, const plan_device *d, const shape *s) {
    if (s->p <= 1.0) return 0.0;
    double N = (double)a->micro_batch_size * a->seq_length / s->c * a->hidden_size / s->t;
    double fwd_b = s->half ? 2.0 : 4.0;
    double bwd_b = d->account == PLAN_ACCOUNT_MEGADLM ? 4.0 : fwd_b;
    double bw = s->t * s->c * s->d * s->p <= s->rpn ? d->intra_bandwidth : d->inter_bandwidth;
    return s->M * s->v * ((N * (fwd_b + bwd_b)) / bw + 2.0 * d->latency);
}

/* Data parallel, per iteration: the fp32 gradients all-reduced (ring), or reduce-scattered and
 * the parameters all-gathered with the distributed optimizer; over DP x CP (Megatron's
 * data-parallel group with context parallelism), the experts' (`experts` of the rank's
 * parameters) over the expert-data-parallel group of DP / EP ranks, which spans as many ranks.
 * *gather: the all-gather part. */
static double dp_time(const megadlm_args *a, const plan_device *d, const shape *s,
                      double params_rank, double experts, double *gather) {
    *gather = 0.0;
    double n = s->d * s->c, n_e = s->e.on ? s->d / s->e.ep : n;
    if (n <= 1.0) return 0.0;
    double bw = s->t * n <= s->rpn ? d->intra_bandwidth : d->inter_bandwidth;
    double dense = params_rank - experts, param_b = s->half ? 2.0 : 4.0;
    double rs = ring_half(4.0 * dense, n, bw, d->latency);
    double rs_e = experts > 0.0 ? ring_half(4.0 * experts, n_e, bw, d->latency) : 0.0;
    if (!a->use_distributed_optimizer) return 2.0 * rs + 2.0 * rs_e;
    *gather = ring_half(dense * param_b, n, bw, d->latency);
    if (experts > 0.0) *gather += ring_half(experts * param_b, n_e, bw, d->latency);
    return rs + rs_e + *gather;
}

/* Context parallel, per micro-batch on one stage: the keys and values a layer exchanges among
 * the c ranks of its group (this rank's s / c positions of its query groups: 2 b (s/c) g d / t
 * values), per --cp-comm-type:
 *   p2p        a ring of c - 1 steps in forward (K, V), 2 (c - 1) in backward (K, V again, and
 *              their gradients travelling back); fp32 only;
 *   allgather  K, V all-gathered in forward and again in backward, their gradients
 *              reduce-scattered;
 *   a2a        all-to-all of Q, K, V to a head split and of the context back, in forward, and
 *              of their gradients in backward: (c - 1)/c of each leaves a rank.
 * A recomputed layer repeats its forward's. *attention: the seconds of the layer's attention
 * products on this rank (scores and context, forward and backward), what the ring can hide. */
static double cp_per_microbatch(const megadlm_args *a, const plan_device *d, const shape *s,
                                double recomputed, double rate, double *attention) {
    *attention = 0.0;
    if (s->c <= 1.0) return 0.0;
    double b = a->micro_batch_size, sq = a->seq_length, dk = a->kv_channels;
    double g = a->num_query_groups, heads = a->num_attention_heads, L = s->stage_layers;
    double bytes_v = s->half ? 2.0 : 4.0;
    double kv = 2.0 * b * (sq / s->c) * g * dk / s->t * bytes_v; /* this rank's K and V */
    double bw = s->t * s->c <= s->rpn ? d->intra_bandwidth : d->inter_bandwidth;
    double fwd = 0.0, bwd = 0.0;
    if (ARGS_CHOICE(a, cp_comm_type) == ARGS_CP_COMM_ALLGATHER) {
        fwd = ring_half(kv * s->c, s->c, bw, d->latency);
        bwd = 2.0 * fwd; /* gathered again, gradients reduce-scattered */
    } else if (ARGS_CHOICE(a, cp_comm_type) == ARGS_CP_COMM_A2A) {
        double q = b * (sq / s->c) * heads * dk / s->t * bytes_v; /* Q, and the context */
        double moved = (s->c - 1.0) / s->c * (kv + 2.0 * q);
        fwd = moved / bw + (s->c - 1.0) * d->latency;
        bwd = fwd;
    } else { /* p2p */
        double step = kv / bw + d->latency;
        fwd = (s->c - 1.0) * step;
        bwd = 2.0 * fwd;
    }
    /* scores and context: 2 x 2 b (s/c) s d FLOPs per head, backward twice the forward */
    double att_flops = 3.0 * 4.0 * b * (sq / s->c) * sq * dk * heads / s->t;
    *attention = (L + recomputed) * att_flops / rate;
    return L * (fwd + bwd) + recomputed * fwd;
}

static double params_on_rank(const megadlm_args *a, const shape *s, plan_account account) {
    if (account == PLAN_ACCOUNT_MEGADLM) return (double)theoretical_megadlm(a).gradients / 4.0;
    return s->m.parameters_most_loaded_shard;
}

/* ---- the iteration ---- */

static double peak_per_rank(const plan_device *d, const shape *s) {
    double peak = s->half ? d->flops_bf16 : d->flops_fp32;
    return d->shared ? peak / s->rpn : peak;
}

/* The sustained rate of one rank for a GEMM of `dim` = (M N K)^(1/3): the device's table in
 * log-log, clamped at its ends; without one the peak x efficiency */
static double rate_at(const plan_device *d, const shape *s, double dim) {
    double flat = peak_per_rank(d, s) * d->efficiency;
    int n = d->gemm_points;
    if (n <= 0) return flat;
    const double *r = s->half ? d->gemm_bf16 : d->gemm_fp32;
    double share = d->shared ? 1.0 / s->rpn : 1.0;
    if (dim <= d->gemm_dim[0]) return r[0] * share * d->efficiency;
    if (dim >= d->gemm_dim[n - 1]) return r[n - 1] * share * d->efficiency;
    int i = 0;
    while (i + 2 < n && dim > d->gemm_dim[i + 1]) i++;
    double f = log(dim / d->gemm_dim[i]) / log(d->gemm_dim[i + 1] / d->gemm_dim[i]);
    return exp(log(r[i]) + f * (log(r[i + 1]) - log(r[i]))) * share * d->efficiency;
}

/* FLOPs and time of one GEMM of m x n x k, `count` times */
static void gemm_add(const plan_device *d, const shape *s, double m, double n, double k,
                     double count, double *flops, double *seconds) {
    double f = 2.0 * m * n * k * count;
    *flops += f;
    *seconds += f / rate_at(d, s, cbrt(m * n * k));
}

/* The GEMMs of a stage's MoE layers (the mean count per stage) for one micro-batch: the
 * router on the rank's token shard, each local expert's fc1 and fc2 on its rows at a balanced
 * routing (the T tokens of the TP group x rows per token, over the experts of a rank), the
 * shared expert as the dense MLP */
static void moe_gemms(const megadlm_args *a, const plan_device *d, const shape *s, double T,
                      double *flops, double *sec) {
    const moe_shape *e = &s->e;
    double h = a->hidden_size, t = s->t, Lm = e->layers / s->p, gate = a->swiglu ? 2.0 : 1.0;
    double fe = a->moe_ffn_hidden_size, fs = a->moe_shared_expert_intermediate_size;
    double rows = T * e->rows_per_token / e->el;
    gemm_add(d, s, a->sequence_parallel ? T / t : T, e->E, h, Lm, flops, sec); /* router */
    gemm_add(d, s, rows, fe * gate / t, h, Lm * e->el, flops, sec);           /* expert fc1 */
    gemm_add(d, s, rows, h, fe / t, Lm * e->el, flops, sec);                  /* expert fc2 */
    if (fs <= 0.0) return;
    gemm_add(d, s, T, fs * gate / t, h, Lm, flops, sec); /* shared expert fc1 */
    gemm_add(d, s, T, h, fs / t, Lm, flops, sec);        /* shared expert fc2 */
}

/* A rank's rate over the GEMMs of one micro-batch on a stage (backward's have the same sizes,
 * transposed): each layer's QKV, scores, context, projection and MLP at this rank's widths
 * (an MoE layer's router and experts in place of the MLP), and the output layer's share (1/p
 * of it per stage on average) */
static double effective_rate(const megadlm_args *a, const plan_device *d, const shape *s) {
    if (d->gemm_points <= 0) return peak_per_rank(d, s) * d->efficiency;
    double T = (double)a->micro_batch_size * a->seq_length / s->c, h = a->hidden_size, t = s->t;
    double sq = a->seq_length, sk = sq / s->c, dk = a->kv_channels, heads = a->num_attention_heads;
    double g = a->num_query_groups, f = a->ffn_hidden_size * (a->swiglu ? 2.0 : 1.0);
    double flops = 0.0, sec = 0.0, L = s->stage_layers;
    double Ld = s->e.on ? L - s->e.layers / s->p : L; /* dense MLPs */
    gemm_add(d, s, T, (heads + 2.0 * g) * dk / t, h, L, &flops, &sec);          /* QKV */
    gemm_add(d, s, sk, sq, dk, L * a->micro_batch_size * heads / t, &flops, &sec); /* scores */
    gemm_add(d, s, sk, dk, sq, L * a->micro_batch_size * heads / t, &flops, &sec); /* context */
    gemm_add(d, s, T, h, heads * dk / t, L, &flops, &sec);                       /* projection */
    if (Ld > 0.0) {
        gemm_add(d, s, T, f / t, h, Ld, &flops, &sec);                  /* fc1 */
        gemm_add(d, s, T, h, a->ffn_hidden_size / t, Ld, &flops, &sec); /* fc2 */
    }
    if (s->e.on) moe_gemms(a, d, s, T, &flops, &sec);
    gemm_add(d, s, T, a->padded_vocab_size / t, h, 1.0 / s->p, &flops, &sec);    /* logits */
    return flops / sec;
}

/* Work outside the GEMMs per iteration on a rank: the bytes a stage saves per micro-batch
 * without recomputation (megadlm's; an MoE layer's state at a balanced routing with them:
 * routing, permutation, activation), once more for the recomputed layers, and the attention
 * probabilities once more under selective recompute (softmax and dropout run again), at the
 * device's elementwise bandwidth */
static double elementwise_time(const megadlm_args *a, const plan_device *d, const shape *s,
                               double recomputed) {
    if (d->elementwise_bandwidth <= 0.0) return 0.0;
    megadlm_args none = without_recompute(a);
    double bytes = (double)theoretical_megadlm_rank(&none, 0, 1, 0).saved_activations;
    if (s->e.on) bytes += s->e.layers / s->p * s->m.moe_layer_kept_balanced;
    double again = recomputed / s->stage_layers * bytes;
    if (ARGS_CHOICE(a, recompute_granularity) == ARGS_RECOMPUTE_SELECTIVE) {
        const theoretical_memory *m = &s->m;
        int sp = a->sequence_parallel;
        double keep = m->per_layer_megadlm[sp ? TM_TENSOR_SEQUENCE : TM_TENSOR_PARALLEL];
        double sel = m->per_layer_megadlm[sp ? TM_TENSOR_SEQUENCE_SELECTIVE : TM_TENSOR_SELECTIVE];
        again = s->stage_layers * (keep - sel);
    }
    double bw = d->shared ? d->elementwise_bandwidth / s->rpn : d->elementwise_bandwidth;
    return s->M * (bytes + again) / bw;
}

/* --tp-comm-overlap: the collectives travel in pieces under the GEMMs that need them; the
 * first piece of each cannot be hidden, and nothing is hidden beyond the GEMMs' own time */
static void tp_overlap(const megadlm_args *a, double compute, plan_cost *c) {
    c->tp_hidden = 0.0;
    if (!a->tp_comm_overlap || c->tp_comm <= 0.0) return;
    double pieces = args_sp_pieces(a) > 0 ? args_sp_pieces(a) : 1.0;
    c->tp_hidden = fmin(c->tp_comm * (1.0 - 1.0 / pieces), compute);
    c->tp_comm -= c->tp_hidden;
}

/* --overlap-grad-reduce: bucket reductions run during the last micro-batch's backward (2/3 of
 * its compute); --overlap-param-gather: the gather during the next forward (1/3) */
static void dp_overlap(const megadlm_args *a, const shape *s, double compute, double gather,
                       plan_cost *c) {
    c->dp_hidden = 0.0;
    double per_mb = compute / s->M;
    if (a->overlap_grad_reduce)
        c->dp_hidden += fmin(c->dp_comm - gather, per_mb * 2.0 / 3.0);
    if (a->overlap_param_gather) c->dp_hidden += fmin(gather, per_mb / 3.0);
    c->dp_comm -= c->dp_hidden;
}

void plan_cost_compute(const megadlm_args *a, const plan_device *d, plan_cost *c) {
    memset(c, 0, sizeof(*c));
    shape s = layout_shape(a, d);
    double world = a->world_size;
    c->memory_bytes = plan_memory_bytes(a, d->account, &c->memory_balanced);
    c->hardware_flops = hardware_flops(a, &s, &c->model_flops);
    double peak = peak_per_rank(d, &s);
    c->gemm_rate = effective_rate(a, d, &s);
    c->recomputed_layers = recomputed_layers(a, &s);
    double recomputed_moe = recomputed_moe_layers(&s);
    c->elementwise = elementwise_time(a, d, &s, c->recomputed_layers);
    c->compute = c->hardware_flops / world / c->gemm_rate + c->elementwise;

    c->tp_comm = s.M * tp_per_microbatch(a, d, &s, c->recomputed_layers, recomputed_moe);
    tp_overlap(a, c->compute, c);
    double attention;
    c->cp_comm = s.M * cp_per_microbatch(a, d, &s, c->recomputed_layers, c->gemm_rate, &attention);
    /* the ring's transfers travel under the attention products of the step before */
    c->cp_hidden = ARGS_CHOICE(a, cp_comm_type) == ARGS_CP_COMM_P2P
                       ? fmin(c->cp_comm, s.M * attention)
                       : 0.0;
    c->cp_comm -= c->cp_hidden;
    c->moe_comm = s.M * moe_per_microbatch(a, d, &s, recomputed_moe);
    if (s.p > 1.0)
        c->bubble = (s.p - 1.0) / (s.v * s.M) * (c->compute + c->tp_comm + c->cp_comm + c->moe_comm);
    c->p2p = p2p_time(a, d, &s);

    double params = params_on_rank(a, &s, d->account), gather;
    c->dp_comm = dp_time(a, d, &s, params, s.e.expert_params, &gather);
    dp_overlap(a, &s, c->compute, gather, c);

    /* Adam: read parameter, gradient and both moments, write parameter and moments (28 bytes
     * in fp32), plus the 16-bit copy (2), the gradient norm's read (4) and the gradients'
     * zeroing (4), on the optimizer's share of the parameters (the experts' over DP / EP) */
    double n_opt = params;
    if (a->use_distributed_optimizer)
        n_opt = s.e.on ? (params - s.e.expert_params) / (s.d * s.c) +
                             s.e.expert_params / (s.d / s.e.ep)
                       : params / (s.d * s.c);
    double bw = d->shared ? d->memory_bandwidth / s.rpn : d->memory_bandwidth;
    c->optimizer = n_opt * (s.half ? 38.0 : 36.0) / bw;

    c->total = c->compute + c->tp_comm + c->cp_comm + c->moe_comm + c->bubble + c->p2p +
               c->dp_comm + c->optimizer;
    c->mfu = c->model_flops / (world * peak * c->total);
    c->hfu = c->hardware_flops / (world * peak * c->total);
}
