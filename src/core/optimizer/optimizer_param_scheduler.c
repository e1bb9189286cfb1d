#include "core/optimizer/optimizer_param_scheduler.h"

#include <math.h>

/* WSD's annealing coefficient at ratio r in [0, 1] of the annealing phase. */
static double wsd_coeff(lr_wsd_style style, double r) {
    switch (style) {
    case WSD_LINEAR: return 1.0 - r;
    case WSD_COSINE: return 0.5 * (cos(M_PI * r) + 1.0);
    case WSD_EXPONENTIAL: return 2.0 * pow(0.5, r) - 1.0;
    case WSD_MINUS_SQRT: return 1.0 - sqrt(r);
    }
    return 1.0;
}

double lr_scheduler_get(const lr_scheduler *s, int64_t num_steps) {
    double n = (double)num_steps;
    /* linear warmup from init_lr, up to and including the (fractional) warmup length */
    if (s->warmup_steps > 0 && n <= s->warmup_steps)
        return s->init_lr + (s->max_lr - s->init_lr) * n / s->warmup_steps;
    if (s->style == LR_CONSTANT) return s->max_lr;
    if (num_steps > s->decay_steps) return s->min_lr;
    if (s->style == LR_INVERSE_SQRT) {
        /* max_lr x sqrt(warmup / steps), both at least 1 so that no warmup means no division
         * by zero; never below min_lr */
        double w = s->warmup_steps > 1.0 ? s->warmup_steps : 1.0, m = n > 1.0 ? n : 1.0;
        double lr = s->max_lr * sqrt(w) / sqrt(m);
        return lr > s->min_lr ? lr : s->min_lr;
    }
    double ratio = (n - s->warmup_steps) / ((double)s->decay_steps - s->warmup_steps);
    double coeff = 1.0;
    switch (s->style) {
    case LR_LINEAR: coeff = 1.0 - ratio; break;
    case LR_COSINE: coeff = 0.5 * (cos(M_PI * ratio) + 1.0); break;
    case LR_WSD: {
        /* stable at max_lr until the annealing phase, the last wsd_decay_steps of the decay */
        int64_t anneal_start = s->decay_steps - s->wsd_decay_steps;
        if (num_steps > anneal_start)
            coeff = wsd_coeff(s->wsd_style, (double)(num_steps - anneal_start) /
                                                (double)s->wsd_decay_steps);
        break;
    }
    case LR_CONSTANT:
    case LR_INVERSE_SQRT: break; /* returned above */
    }
    return s->min_lr + coeff * (s->max_lr - s->min_lr);
}
