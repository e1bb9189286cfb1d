#include "core/optimizer/grad_scaler.h"

grad_scaler grad_scaler_constant(float scale) {
    return (grad_scaler){.dynamic = 0, .scale = scale};
}

grad_scaler grad_scaler_dynamic(float initial_scale, float min_scale, int growth_interval,
                                int hysteresis) {
    return (grad_scaler){.dynamic = 1,
                         .scale = initial_scale,
                         .min_scale = min_scale,
                         .growth_factor = 2.0f,
                         .backoff_factor = 0.5f,
                         .growth_interval = growth_interval,
                         .hysteresis = hysteresis,
                         .growth_tracker = 0,
                         .hysteresis_tracker = hysteresis};
}

void grad_scaler_update(grad_scaler *s, int found_inf) {
    if (!s->dynamic) return;
    if (found_inf) {
        s->growth_tracker = 0;
        s->hysteresis_tracker--;
        if (s->hysteresis_tracker <= 0) {
            const float backed_off = s->scale * s->backoff_factor;
            s->scale = backed_off > s->min_scale ? backed_off : s->min_scale;
        }
        return;
    }
    if (++s->growth_tracker == s->growth_interval) {
        s->growth_tracker = 0;
        s->hysteresis_tracker = s->hysteresis;
        s->scale *= s->growth_factor;
    }
}
