#include "core/optimizer/grad_scaler.h"

#include <float.h>
#include <math.h>

#include "core/util/error.h"

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

float grad_scaler_inv_scale(const grad_scaler *s) { return (float)(1.0 / (double)s->scale); }

int grad_scaler_unscale(float *grad, size_t n, float inv_scale) {
    int found_inf = 0;
    const int scale = inv_scale != 1.0f;
#pragma omp parallel for schedule(static) reduction(| : found_inf)
    for (size_t i = 0; i < n; i++) {
        const float g = grad[i];
        found_inf |= !isfinite(g);
        if (scale) grad[i] = g * inv_scale;
    }
    return found_inf;
}

cJSON *grad_scaler_to_json(const grad_scaler *s) {
    if (!s->dynamic) return NULL;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "scale", (double)s->scale); /* a float: exact in a double */
    cJSON_AddNumberToObject(o, "growth_tracker", s->growth_tracker);
    cJSON_AddNumberToObject(o, "hysteresis_tracker", s->hysteresis_tracker);
    return o;
}

/* An integer in [lo, INT_MAX] stored in a JSON number. */
static int json_int(const cJSON *o, const char *key, int lo, int *out, char *err, size_t errlen) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > 2147483647.0) {
        err_set(err, errlen, "grad_scaler: expected an integer \"%s\" of at least %d", key, lo);
        return -1;
    }
    *out = (int)v->valuedouble;
    return 0;
}

int grad_scaler_from_json(grad_scaler *s, const cJSON *o, char *err, size_t errlen) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "scale");
    if (!cJSON_IsObject(o)) {
        err_set(err, errlen, "grad_scaler: expected an object");
        return -1;
    }
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0.0) || v->valuedouble > FLT_MAX ||
        (double)(float)v->valuedouble != v->valuedouble) {
        err_set(err, errlen, "grad_scaler: expected \"scale\" to be a positive finite float");
        return -1;
    }
    int growth, hysteresis;
    if (json_int(o, "growth_tracker", 0, &growth, err, errlen) ||
        json_int(o, "hysteresis_tracker", -2147483647, &hysteresis, err, errlen))
        return -1;
    s->scale = (float)v->valuedouble;
    s->growth_tracker = growth;
    s->hysteresis_tracker = hysteresis;
    return 0;
}
