/* Megatron-core's optimizer/clip_grads.py: the global gradient norm over every parallel group
 * (get_grad_norm_fp32) and the clipping by it (clip_grad_by_total_norm_fp32). */
#include "core/optimizer/clip_grads.h"

#include <math.h>

#include "core/parallel_state.h"
#include "core/tensor_parallel/mappings.h"

static double sumsq(const float *g, size_t n) {
    double sum = 0.0;
#pragma omp parallel for reduction(+ : sum) schedule(static)
    for (size_t i = 0; i < n; i++) sum += (double)g[i] * g[i];
    return sum;
}

double optimizer_grad_sumsq(const param_set *ps, size_t begin, size_t end) {
    return optimizer_grad_sumsq_at(ps, ps->grad + begin, begin, end);
}

double optimizer_grad_sumsq_at(const param_set *ps, const float *g, size_t begin, size_t end) {
    int tp_rank = parallel_get()->tp_rank;
    double total = 0.0;
    size_t run = begin; /* start of the current run of counted tensors */
    for (int i = 0; i < ps->count; i++) {
        const param_tensor *t = &ps->tensors[i];
        size_t lo = t->offset > begin ? t->offset : begin;
        size_t hi = t->offset + t->numel < end ? t->offset + t->numel : end;
        if (lo >= hi) continue;
        if ((t->tp_duplicate && tp_rank != 0) || t->pp_shared_copy) {
            if (lo > run) total += sumsq(g + (run - begin), lo - run);
            run = hi;
        }
    }
    if (end > run) total += sumsq(g + (run - begin), end - run);
    return total;
}

/* Expert parallelism: the sum of squares of the routed experts' gradients (each EP rank holds
 * other experts), summed over the EP group; 0 without experts. */
static double experts_sumsq(const param_set *ps) {
    double s = 0.0;
    int any = 0;
    for (int i = 0; i < ps->count; i++)
        if (ps->tensors[i].expert_parallel) {
            s += sumsq(ps->grad + ps->tensors[i].offset, ps->tensors[i].numel);
            any = 1;
        }
    return any ? parallel_sum_double(PARALLEL_GROUP_EP, s) : 0.0;
}

float optimizer_grad_norm(const param_set *ps) {
    /* Model parallel: each rank sums its own tensors and slices (optimizer_grad_sumsq counts
     * TP duplicates and the shared embedding copy once); the sums are added over the TP and PP
     * groups. The experts under expert parallelism: their own sum over the EP group. */
    double all = optimizer_grad_sumsq(ps, 0, ps->numel), experts = 0.0;
    for (int i = 0; i < ps->count; i++)
        if (ps->tensors[i].expert_parallel)
            experts += sumsq(ps->grad + ps->tensors[i].offset, ps->tensors[i].numel);
    double local = tp_all_reduce_sum_double(all - experts + experts_sumsq(ps));
    return (float)sqrt(parallel_sum_double(PARALLEL_GROUP_PP, local));
}

void optimizer_clip_grads(param_set *ps, float grad_norm, float clip_grad) {
    if (clip_grad <= 0.0f) return;
    float coeff = clip_grad / (grad_norm + 1.0e-6f);
    if (coeff >= 1.0f) return;
    float *g = ps->grad;
    size_t n = ps->numel;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) g[i] *= coeff;
}

