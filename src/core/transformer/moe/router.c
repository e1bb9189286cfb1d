#include "core/transformer/moe/router.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/kernels/gemm.h"
#include "core/parallel_state.h"
#include "core/random/philox.h"
#include "core/tensor/memory.h"
#include "core/tensor_parallel/mappings.h"
#include "core/util/die.h"

void moe_routing_alloc(moe_routing *r, const transformer_config *c, int B, int T) {
    memset(r, 0, sizeof(*r));
    const size_t N = (size_t)tc_tokens_local(c, B * T), E = (size_t)c->moe.num_experts;
    const size_t k = (size_t)c->moe.topk;
    r->partitions = (tc_sp(c) ? tc_tp(c) : 1) * tc_cp(c);
    r->row0 = tc_sp(c) ? c->tp_rank * (int)N : 0;
    const size_t C = (size_t)c->hidden_size;
    r->N = (int)N;
    r->B = B;
    r->T = T;
    r->E = (int)E;
    r->k = (int)k;
    r->logits = mem_alloc_floats(MEM_ACTIVATIONS, N * E, "moe router logits");
    r->scores = mem_alloc_floats(MEM_ACTIVATIONS, N * E, "moe router scores");
    r->lse = mem_alloc_floats(MEM_ACTIVATIONS, N, "moe router logsumexp");
    r->idx = mem_alloc(MEM_ACTIVATIONS, N * k * sizeof(int32_t), "moe router top-k");
    r->q = mem_alloc_floats(MEM_ACTIVATIONS, N * k, "moe router top-k softmax");
    r->gate = mem_alloc_floats(MEM_ACTIVATIONS, N * k, "moe routing probabilities");
    r->tokens_per_expert = mem_alloc(MEM_ACTIVATIONS, E * sizeof(int32_t), "moe tokens per expert");
    r->tokens_global = mem_alloc_floats(MEM_ACTIVATIONS, E, "moe tokens per expert (all ranks)");
    if (c->moe.input_jitter_eps > 0.0f) {
        r->jitter = mem_alloc_floats(MEM_ACTIVATIONS, N * C, "moe router input jitter");
        r->xj = mem_alloc_floats(MEM_ACTIVATIONS, N * C, "moe router jittered input");
    }
}

void moe_routing_free(moe_routing *r) {
    mem_free_all(r->logits, r->scores, r->lse, r->idx, r->q, r->gate, r->tokens_per_expert,
                 r->tokens_global, r->jitter, r->xj);
    memset(r, 0, sizeof(*r));
}

/* ---- forward ---- */

/* jitter[i] = U(1 - eps, 1 + eps) for element i of the [N, C] input, from the layer's key. */
static void draw_jitter(float *jitter, size_t n, float eps, dropout_key key) {
    const uint32_t k2[2] = {(uint32_t)key.seed, key.iteration};
#pragma omp parallel for schedule(static)
    for (size_t g = 0; g < (n + 3) / 4; g++) {
        uint32_t ctr[4] = {(uint32_t)g, (uint32_t)((uint64_t)g >> 32),
                           (key.layer << 8) | MOE_SITE_INPUT_JITTER, key.microbatch};
        uint32_t out[4];
        philox4x32_10(ctr, k2, out);
        for (size_t j = 0; j < 4 && 4 * g + j < n; j++)
            jitter[4 * g + j] = (1.0f - eps) + 2.0f * eps * philox_to_uniform(out[j]);
    }
}

/* scores = softmax(logits) row by row (sigmoid elementwise when `sigmoid`), lse the rows'
 * logsumexp. */
static void scores_forward(moe_routing *r, int sigmoid) {
    const int E = r->E;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < r->N; n++) {
        const float *l = r->logits + (size_t)n * E;
        float *s = r->scores + (size_t)n * E;
        float mx = l[0];
        for (int e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
        double sum = 0.0;
        for (int e = 0; e < E; e++) sum += exp((double)l[e] - mx);
        r->lse[n] = (float)(mx + log(sum));
        for (int e = 0; e < E; e++)
            s[e] = sigmoid ? 1.0f / (1.0f + expf(-l[e])) : (float)(exp((double)l[e] - mx) / sum);
    }
}

/* The k largest of v[E] (ties: the lower index first), best first. */
static void top_k(const float *v, int E, int k, int32_t *idx) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int i = 0; i < j; i++) taken |= idx[i] == e;
            if (!taken && (best < 0 || v[e] > v[best])) best = e;
        }
        idx[j] = best;
    }
}

/* Sinkhorn normalisation of exp(logits) (Megatron's moe_utils.sinkhorn, tolerance 1e-4), into
 * out [N, E]; d0 [N], d1 [E], d1_old [E] scratch. */
static void sinkhorn(const float *logits, int N, int E, float *out) {
    double *d0 = malloc((size_t)N * sizeof(double)), *d1 = malloc((size_t)E * 2 * sizeof(double));
    if (!d0 || !d1) die(1, "out of memory: moe sinkhorn (%d x %d)", N, E);
    double *d1_old = d1 + E;
    const double eps = 1e-8;
    for (int e = 0; e < E; e++) d1[e] = d1_old[e] = 1.0;
    for (int n = 0; n < N; n++) d0[n] = 1.0;
    double error = 1e9;
    while (error > 1e-4) {
        for (int n = 0; n < N; n++) {
            double s = 0.0;
            for (int e = 0; e < E; e++) s += d1[e] * exp((double)logits[(size_t)n * E + e]);
            d0[n] = (1.0 / N) / (s + eps);
        }
        error = 0.0;
        for (int e = 0; e < E; e++) {
            double s = 0.0;
            for (int n = 0; n < N; n++) s += d0[n] * exp((double)logits[(size_t)n * E + e]);
            d1[e] = (1.0 / E) / (s + eps);
            error += fabs(d1_old[e] - d1[e]);
            d1_old[e] = d1[e];
        }
        error /= E;
    }
    for (int n = 0; n < N; n++)
        for (int e = 0; e < E; e++)
            out[(size_t)n * E + e] = (float)(d1[e] * exp((double)logits[(size_t)n * E + e]) * d0[n]);
    free(d0);
    free(d1);
}

/* --moe-router-topk-limited-devices M (Megatron's device_limited_topk, DeepSeek-V2): the
 * experts in EP groups of E / EP (one per expert-parallel rank), each group scored by its best
 * expert, the M best groups (ties: the lower group), then the top k among their experts only.
 * Megatron fills the other experts with 0.0 before its topk, which with post-softmax routing
 * (logits, which may be negative) can still pick them; megadlm never does (their value is
 * -infinity here), as the flag describes. */
static void limited_top_k(const transformer_config *c, const float *v, int E, int k,
                          int32_t *idx) {
    const int G = tc_ep(c), per = E / G, M = c->moe.topk_limited_devices;
    float best[G], masked[E];
    int32_t groups[G];
    for (int g = 0; g < G; g++) {
        best[g] = v[g * per];
        for (int e = 1; e < per; e++) best[g] = v[g * per + e] > best[g] ? v[g * per + e] : best[g];
    }
    top_k(best, G, M, groups);
    for (int e = 0; e < E; e++) masked[e] = -INFINITY;
    for (int j = 0; j < M; j++)
        for (int e = 0; e < per; e++) masked[groups[j] * per + e] = v[groups[j] * per + e];
    top_k(masked, E, k, idx);
}

/* Test hook MEGADLM_MOE_BALANCED_ROUTING=1: token g of the micro-batch (its row) goes to
 * experts g k, g k + 1, ... (mod E), whatever its logits: every expert gets the same share of
 * every rank's tokens (when its tokens x k divide by E), the case `train --log-memory`'s
 * balanced prediction describes. The gates are computed as usual for those experts. */
static int balanced_hook(void) {
    const char *v = getenv("MEGADLM_MOE_BALANCED_ROUTING");
    return v && !strcmp(v, "1");
}

/* Top-k routing: idx, q (post-softmax) and gate. */
static void topk_forward(const transformer_config *c, moe_routing *r) {
    const int E = r->E, k = r->k, pre = c->moe.pre_softmax, hook = balanced_hook();
    const float scale = c->moe.topk_scaling_factor > 0.0f ? c->moe.topk_scaling_factor : 1.0f;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < r->N; n++) {
        const float *l = r->logits + (size_t)n * E, *s = r->scores + (size_t)n * E;
        int32_t *idx = r->idx + (size_t)n * k;
        float *q = r->q + (size_t)n * k, *g = r->gate + (size_t)n * k;
        if (hook) /* distinct experts, the largest logit first as top_k orders them */
            for (int j = 0; j < k; j++) idx[j] = (int32_t)(((size_t)(r->row0 + n) * k + j) % E);
        else if (c->moe.topk_limited_devices > 0)
            limited_top_k(c, pre ? s : l, E, k, idx);
        else
            top_k(pre ? s : l, E, k, idx);
        if (hook && !pre) /* q's reference: the largest chosen logit */
            for (int j = 1; j < k; j++)
                if (l[idx[j]] > l[idx[0]]) {
                    int32_t t = idx[0];
                    idx[0] = idx[j];
                    idx[j] = t;
                }
        if (pre) {
            for (int j = 0; j < k; j++) g[j] = s[idx[j]] * scale;
            continue;
        }
        double sum = 0.0; /* idx[0] holds the largest logit */
        for (int j = 0; j < k; j++) sum += exp((double)l[idx[j]] - l[idx[0]]);
        for (int j = 0; j < k; j++) {
            q[j] = (float)(exp((double)l[idx[j]] - l[idx[0]]) / sum);
            g[j] = q[j] * scale;
        }
    }
}

/* Sinkhorn routing: training chooses by the normalised scores, evaluation by the gates. */
static void sinkhorn_forward(moe_routing *r, int training) {
    const int E = r->E, k = r->k;
    float *norm = training ? malloc((size_t)r->N * E * sizeof(float)) : NULL;
    if (training && !norm) die(1, "out of memory: moe sinkhorn");
    if (training) sinkhorn(r->logits, r->N, E, norm);
    for (int n = 0; n < r->N; n++) {
        const float *s = r->scores + (size_t)n * E;
        int32_t *idx = r->idx + (size_t)n * k;
        top_k(training ? norm + (size_t)n * E : s, E, k, idx);
        for (int j = 0; j < k; j++) r->gate[(size_t)n * k + j] = s[idx[j]];
    }
    free(norm);
}

/* aux_loss: coeff E / (N^2 k) sum_e (sum_n scores_ne) tokens_e, N and tokens_e over the
 * whole micro-batch (summed over the partitions; the scores' sum stays this rank's: Megatron's
 * switch_load_balancing_loss_func, whose partial losses add up over the ranks). */
static void aux_loss_forward(const transformer_config *c, moe_routing *r) {
    const int E = r->E;
    for (int e = 0; e < E; e++) r->tokens_global[e] = (float)r->tokens_per_expert[e];
    if (tc_sp(c)) tp_all_reduce_sum(r->tokens_global, (size_t)E);
    if (tc_cp(c) > 1) { /* the sequence's other chunks */
        double counts[E];
        for (int e = 0; e < E; e++) counts[e] = r->tokens_global[e];
        parallel_sum_doubles(PARALLEL_GROUP_CP, counts, (size_t)E);
        for (int e = 0; e < E; e++) r->tokens_global[e] = (float)counts[e];
    }
    double sum = 0.0;
    for (int e = 0; e < E; e++) {
        double p = 0.0;
        for (int n = 0; n < r->N; n++) p += r->scores[(size_t)n * E + e];
        sum += p * r->tokens_global[e];
    }
    const double N = (double)r->N * r->partitions;
    r->aux_value = sum * E / (N * N * r->k);
    r->aux_loss = r->aux_value * c->moe.aux_loss_coeff;
    r->has_aux = 1;
}

void moe_router_forward(const transformer_config *c, const float *w, const float *x,
                        int training, dropout_key key, moe_routing *r) {
    const int N = r->N, E = r->E, C = c->hidden_size;
    const float *in = x;
    if (r->jitter) { /* Megatron jitters in evaluation too (apply_input_jitter) */
        key.site = MOE_SITE_INPUT_JITTER;
        draw_jitter(r->jitter, (size_t)N * C, c->moe.input_jitter_eps, key);
        for (size_t i = 0; i < (size_t)N * C; i++) r->xj[i] = x[i] * r->jitter[i];
        in = r->xj;
    }
    gemm((gemm_dims){N, E, C}, 1.0f, gemm_n(in, C), gemm_t(w, C), 0.0f, gemm_o(r->logits, E));
    const int sink = c->moe.load_balancing == MOE_LB_SINKHORN;
    scores_forward(r, sink && r->k == 1);
    r->has_aux = r->has_z = 0;
    r->aux_loss = r->aux_value = r->z_loss = r->z_value = 0.0;
    if (training && c->moe.z_loss_coeff >= 0.0f) {
        double z = 0.0;
        for (int n = 0; n < N; n++) z += (double)r->lse[n] * r->lse[n];
        r->z_value = z / N; /* Megatron divides the coefficient by the partitions */
        r->z_loss = r->z_value * c->moe.z_loss_coeff / r->partitions;
        r->has_z = 1;
    }
    if (sink)
        sinkhorn_forward(r, training);
    else
        topk_forward(c, r);
    memset(r->tokens_per_expert, 0, (size_t)E * sizeof(int32_t));
    for (size_t i = 0; i < (size_t)N * r->k; i++) r->tokens_per_expert[r->idx[i]]++;
    if (training && c->moe.load_balancing == MOE_LB_AUX_LOSS) aux_loss_forward(c, r);
}

/* seq_aux_loss over the kept assignments: per sequence b,
 * sum_e (count_be / (T k / E)) mean_t scores_bte, averaged over b, times coeff. */
void moe_router_seq_aux_loss(const transformer_config *c, moe_routing *r, const uint8_t *kept) {
    const int E = r->E, T = r->T;
    double total = 0.0;
    for (int b = 0; b < r->B; b++)
        for (int e = 0; e < E; e++) {
            double count = 0.0, p = 0.0;
            for (int t = 0; t < T; t++) {
                size_t n = (size_t)b * T + t;
                count += kept[n * E + e];
                p += r->scores[n * E + e];
            }
            total += count / ((double)T * r->k / E) * (p / T);
        }
    r->aux_value = total / r->B;
    r->aux_loss = r->aux_value * c->moe.aux_loss_coeff;
    r->has_aux = 1;
}

/* ---- backward ---- */

/* dlogits for one token n: the gate's path and the losses', through the softmax (or the
 * sigmoid) of the scores. ds [E] scratch. */
static void token_backward(const transformer_config *c, const moe_routing *r, int n,
                           const float *dgate, const float *loss_ds, float grad_scale,
                           double *ds, float *dlogits) {
    const int E = r->E, k = r->k;
    const float *s = r->scores + (size_t)n * E, *l = r->logits + (size_t)n * E;
    const int32_t *idx = r->idx + (size_t)n * k;
    const float scale = c->moe.topk_scaling_factor > 0.0f ? c->moe.topk_scaling_factor : 1.0f;
    const int sink = c->moe.load_balancing == MOE_LB_SINKHORN;
    for (int e = 0; e < E; e++) ds[e] = loss_ds ? loss_ds[(size_t)n * E + e] : 0.0;
    for (int e = 0; e < E; e++) dlogits[e] = 0.0f;
    if (!sink && !c->moe.pre_softmax) { /* softmax over the k chosen logits */
        const float *q = r->q + (size_t)n * k;
        double dot = 0.0;
        for (int j = 0; j < k; j++) dot += (double)q[j] * dgate[j] * scale;
        for (int j = 0; j < k; j++) dlogits[idx[j]] = (float)(q[j] * (dgate[j] * scale - dot));
    } else
        for (int j = 0; j < k; j++) ds[idx[j]] += (double)dgate[j] * (sink ? 1.0f : scale);
    if (sink && k == 1) { /* sigmoid gates: no loss reads the scores */
        for (int e = 0; e < E; e++) dlogits[e] += (float)(ds[e] * s[e] * (1.0 - s[e]));
    } else {
        double dot = 0.0;
        for (int e = 0; e < E; e++) dot += ds[e] * s[e];
        for (int e = 0; e < E; e++) dlogits[e] += (float)(s[e] * (ds[e] - dot));
    }
    if (r->has_z) { /* d/dlogit of coeff mean lse^2 = coeff 2 lse / N softmax */
        const double zc = grad_scale * (double)c->moe.z_loss_coeff / r->partitions * 2.0 *
                          r->lse[n] / r->N;
        for (int e = 0; e < E; e++) dlogits[e] += (float)(zc * exp((double)l[e] - r->lse[n]));
    }
}

/* The balancing losses' gradient w.r.t. the scores [N, E] (NULL: none). */
static float *loss_scores_grad(const transformer_config *c, const moe_routing *r,
                               const uint8_t *kept, float grad_scale) {
    if (!r->has_aux || c->moe.aux_loss_coeff == 0.0f) return NULL;
    const int E = r->E, N = r->N, T = r->T;
    float *ds = malloc((size_t)N * E * sizeof(float));
    if (!ds) die(1, "out of memory: moe router backward");
    const double coeff = (double)c->moe.aux_loss_coeff * grad_scale;
    if (c->moe.load_balancing == MOE_LB_AUX_LOSS) {
        const double Nt = (double)N * r->partitions;
        for (int e = 0; e < E; e++) {
            float g = (float)(coeff * E * r->tokens_global[e] / (Nt * Nt * r->k));
            for (int n = 0; n < N; n++) ds[(size_t)n * E + e] = g;
        }
        return ds;
    }
    for (int b = 0; b < r->B; b++) /* seq_aux_loss */
        for (int e = 0; e < E; e++) {
            double count = 0.0;
            for (int t = 0; t < T; t++) count += kept[((size_t)b * T + t) * E + e];
            float g = (float)(coeff * count / ((double)T * r->k / E) / T / r->B);
            for (int t = 0; t < T; t++) ds[((size_t)b * T + t) * E + e] = g;
        }
    return ds;
}

void moe_router_backward(const transformer_config *c, const float *w, const float *x,
                         const moe_routing *r, const float *dgate, const uint8_t *kept,
                         float grad_scale, float *dx, float *dw) {
    const int N = r->N, E = r->E, C = c->hidden_size, k = r->k;
    float *dlogits = mem_alloc_floats(MEM_WORKSPACE, (size_t)N * E, "moe router dlogits");
    float *loss_ds = loss_scores_grad(c, r, kept, grad_scale);
#pragma omp parallel
    {
        double *ds = malloc((size_t)E * sizeof(double));
        if (!ds) die(1, "out of memory: moe router backward");
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++)
            token_backward(c, r, n, dgate + (size_t)n * k, loss_ds, grad_scale, ds,
                           dlogits + (size_t)n * E);
        free(ds);
    }
    free(loss_ds);
    const float *in = r->xj ? r->xj : x;
    gemm((gemm_dims){E, C, N}, 1.0f, gemm_t(dlogits, E), gemm_n(in, C), 1.0f, gemm_o(dw, C));
    if (!r->jitter) {
        gemm((gemm_dims){N, C, E}, 1.0f, gemm_n(dlogits, E), gemm_n(w, C), 1.0f, gemm_o(dx, C));
    } else {
        float *dxj = mem_alloc_floats(MEM_WORKSPACE, (size_t)N * C, "moe router dinput");
        gemm((gemm_dims){N, C, E}, 1.0f, gemm_n(dlogits, E), gemm_n(w, C), 0.0f, gemm_o(dxj, C));
        for (size_t i = 0; i < (size_t)N * C; i++) dx[i] += dxj[i] * r->jitter[i];
        mem_free(dxj);
    }
    mem_free(dlogits);
}
