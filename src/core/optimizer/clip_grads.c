/* Megatron-core's optimizer/clip_grads.py: the global gradient norm over every parallel group
 * (get_grad_norm_fp32) and the clipping by it (clip_grad_by_total_norm_fp32). */
#include "core/optimizer/clip_grads.h"

#include <math.h>

#include "core/parallel_state.h"
#include "core/tensor_parallel/mappings.h"

/* The sum of squares in double, in chunks of SUMSQ_CHUNK elements, each summed in SUMSQ_LANES
 * interleaved partial sums: the lanes fill vector registers and keep many additions in flight
 * (one running sum waits on each addition's latency: 4x slower over a GPT-2's gradients). */
#define SUMSQ_CHUNK 4096
#define SUMSQ_LANES 16

static double sumsq_chunk(const float *g, size_t n) {
    double lane[SUMSQ_LANES] = {0};
    size_t i = 0;
    for (; i + SUMSQ_LANES <= n; i += SUMSQ_LANES)
        for (int l = 0; l < SUMSQ_LANES; l++) lane[l] += (double)g[i + l] * g[i + l];
    for (; i < n; i++) lane[0] += (double)g[i] * g[i];
    double s = 0.0;
    for (int l = 0; l < SUMSQ_LANES; l++) s += lane[l];
    return s;
}

static double sumsq(const float *g, size_t n) {
    double sum = 0.0;
    const size_t chunks = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
#pragma omp parallel for reduction(+ : sum) schedule(static)
    for (size_t c = 0; c < chunks; c++) {
        const size_t b = c * SUMSQ_CHUNK;
        sum += sumsq_chunk(g + b, n - b < SUMSQ_CHUNK ? n - b : SUMSQ_CHUNK);
    }
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

