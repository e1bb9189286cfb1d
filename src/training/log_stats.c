#include "training/log_stats.h"

#include <math.h>

#include "core/kernels/bf16.h"
#include "core/parallel_state.h"
#include "core/tensor_parallel/mappings.h"

/* Megatron's filters: a TP duplicate counts on TP rank 0 only; the shared embedding copy never. */
static int counted(const param_tensor *t, int tp_rank) {
    return !((t->tp_duplicate && tp_rank != 0) || t->pp_shared_copy);
}

static double sumsq_f32(const float *x, size_t n) {
    double s = 0.0;
#pragma omp parallel for reduction(+ : s) schedule(static)
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

/* Sum of squares of a 16-bit tensor, widened in blocks (no full fp32 copy). */
static double sumsq_half(half_kind kind, const uint16_t *x, size_t n) {
    enum { BLOCK = 4096 };
    float buf[BLOCK];
    double s = 0.0;
    for (size_t i = 0; i < n; i += BLOCK) {
        size_t k = n - i < BLOCK ? n - i : BLOCK;
        half_to_f32(kind, buf, x + i, k);
        s += sumsq_f32(buf, k);
    }
    return s;
}

double log_params_norm(const gpt_model *m) {
    const param_set *ps = &m->params;
    int tp_rank = parallel_get()->tp_rank;
    half_kind kind = tc_half(&m->cfg);
    double local = 0.0, experts = 0.0;
    int any_experts = 0;
    for (int i = 0; i < ps->count; i++) {
        const param_tensor *t = &ps->tensors[i];
        if (!counted(t, tp_rank)) continue;
        double x = ps->data_bf16 ? sumsq_half(kind, ps->data_bf16 + t->offset, t->numel)
                                 : sumsq_f32(ps->data + t->offset, t->numel);
        if (t->expert_parallel) {
            experts += x;
            any_experts = 1;
        } else
            local += x;
    }
    /* every data-parallel replica holds the same parameters: the model-parallel ranks only;
     * the routed experts under expert parallelism: every EP rank's (others on each) */
    if (any_experts) local += parallel_sum_double(PARALLEL_GROUP_EP, experts);
    local = tp_all_reduce_sum_double(local);
    return sqrt(parallel_sum_double(PARALLEL_GROUP_PP, local));
}

static double zeros(const float *g, size_t n) {
    size_t z = 0;
#pragma omp parallel for reduction(+ : z) schedule(static)
    for (size_t i = 0; i < n; i++) z += g[i] == 0.0f;
    return (double)z;
}

/* Zeros of the counted tensors within [begin, end) of the flat gradient. */
static double zeros_in(const param_set *ps, size_t begin, size_t end, int tp_rank) {
    double z = 0.0;
    for (int i = 0; i < ps->count; i++) {
        const param_tensor *t = &ps->tensors[i];
        size_t lo = t->offset > begin ? t->offset : begin;
        size_t hi = t->offset + t->numel < end ? t->offset + t->numel : end;
        if (lo < hi && counted(t, tp_rank)) z += zeros(ps->grad + lo, hi - lo);
    }
    return z;
}

double log_num_zeros_in_grad(const param_set *ps, const dist_opt *dopt) {
    int tp_rank = parallel_get()->tp_rank;
    double local = 0.0;
    if (dopt) { /* each rank's pieces hold its share of the reduced gradient */
        for (int s = 0; s < dopt->num_segments; s++) /* a segment lies in one tensor */
            if (counted(&ps->tensors[dopt->segs[s].tensor], tp_rank))
                local += zeros(dist_opt_seg_grad(dopt, s), dopt->segs[s].numel);
        local = parallel_sum_double(PARALLEL_GROUP_DP_CP, local); /* the optimizer's shards */
    } else {
        local = zeros_in(ps, 0, ps->numel, tp_rank);
        double experts = 0.0; /* expert parallelism: every EP rank's experts */
        int any = 0;
        for (int i = 0; i < ps->count; i++)
            if (ps->tensors[i].expert_parallel && counted(&ps->tensors[i], tp_rank)) {
                experts += zeros(ps->grad + ps->tensors[i].offset, ps->tensors[i].numel);
                any = 1;
            }
        if (any) local += parallel_sum_double(PARALLEL_GROUP_EP, experts) - experts;
    }
    local = tp_all_reduce_sum_double(local);
    return parallel_sum_double(PARALLEL_GROUP_PP, local);
}
