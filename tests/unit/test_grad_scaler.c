/* The loss scaler against Megatron-core's DynamicGradScaler / ConstantGradScaler rules
 * (optimizer/grad_scaler.py), on sequences worked out by hand from those rules:
 * an overflow resets the growth count and uses one unit of hysteresis; with none left (<= 0)
 * the scale halves on every overflow, never below min_scale; growth_interval clean steps in a
 * row double it and restore the hysteresis.
 * The unscale step against PyTorch's _amp_foreach_non_finite_check_and_unscale_ (found_inf
 * from the values before scaling, each multiplied by Megatron's inv_scale = 1/scale rounded from
 * double, untouched when it is 1), and the state a checkpoint keeps (Megatron's state_dict). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/optimizer/grad_scaler.h"
#include "test_util.h"

/* Feeds found_inf[i] and checks the scale after each update. */
static void run(grad_scaler *s, const int *found_inf, const float *want, int n) {
    for (int i = 0; i < n; i++) {
        grad_scaler_update(s, found_inf[i]);
        if (s->scale != want[i])
            fprintf(stderr, "step %d (found_inf %d): scale %g, expected %g\n", i, found_inf[i],
                    (double)s->scale, (double)want[i]);
        CHECK(s->scale == want[i]);
    }
}

static void test_unscale(void) {
    /* inv_scale: 1/scale in double, then rounded (1/3 rounds down in float) */
    grad_scaler t = grad_scaler_constant(3.0f);
    CHECK(grad_scaler_inv_scale(&t) == (float)(1.0 / 3.0));
    grad_scaler big = grad_scaler_dynamic(4294967296.0f, 1.0f, 1000, 2);
    CHECK(grad_scaler_inv_scale(&big) == 0x1p-32f);

    /* finite values, large ones too: scaled, no overflow found */
    enum { n = 300000 }; /* past the threads' split */
    float *g = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) g[i] = (float)((double)i - 1000.0) * 0x1p100f;
    CHECK(grad_scaler_unscale(g, n, 0x1p-32f) == 0);
    int exact = 1;
    for (size_t i = 0; i < n; i++) exact &= g[i] == (float)((double)i - 1000.0) * 0x1p68f;
    CHECK(exact);
    /* one inf, -inf or NaN anywhere: found (and the rest still scaled) */
    const float bad[] = {INFINITY, -INFINITY, NAN};
    const size_t at[] = {0, n - 1, 123457};
    for (int k = 0; k < 3; k++) {
        for (size_t i = 0; i < n; i++) g[i] = 2.0f;
        g[at[k]] = bad[k];
        CHECK(grad_scaler_unscale(g, n, 0.5f) == 1);
        CHECK(g[at[k] == 0 ? 1 : 0] == 1.0f);
    }
    /* found_inf reads the values before scaling: a finite value that a scale below 1 makes
     * overflow is not an overflow (PyTorch's rule) */
    g[0] = 3e38f;
    CHECK(grad_scaler_unscale(g, 1, 4.0f) == 0 && isinf(g[0]));
    /* inv_scale 1: untouched, bit for bit (the sign of zero, a NaN's payload) */
    const uint32_t bits[] = {0x80000000u, 0x7fc12345u, 0x3f800001u};
    memcpy(g, bits, sizeof bits);
    CHECK(grad_scaler_unscale(g, 3, 1.0f) == 1 && memcmp(g, bits, sizeof bits) == 0);
    free(g);
}

static void test_state(void) {
    grad_scaler s = grad_scaler_dynamic(65536.0f, 1.0f, 5, 3);
    const int inf[] = {1, 0, 0}; /* hysteresis 2 left, growth count 2 */
    for (int i = 0; i < 3; i++) grad_scaler_update(&s, inf[i]);
    cJSON *o = grad_scaler_to_json(&s);
    CHECK(o != NULL);
    char *text = cJSON_PrintUnformatted(o);
    CHECK(strcmp(text, "{\"scale\":65536,\"growth_tracker\":2,\"hysteresis_tracker\":2}") == 0);
    free(text);
    grad_scaler r = grad_scaler_dynamic(4.0f, 1.0f, 5, 3);
    char err[256];
    CHECK(grad_scaler_from_json(&r, o, err, sizeof err) == 0);
    CHECK(r.scale == 65536.0f && r.growth_tracker == 2 && r.hysteresis_tracker == 2);
    /* and it goes on as the original does */
    for (int i = 0; i < 3; i++) {
        grad_scaler_update(&s, 0);
        grad_scaler_update(&r, 0);
    }
    CHECK(r.scale == 131072.0f && s.scale == r.scale && r.hysteresis_tracker == 3);
    cJSON_Delete(o);
    /* the constant scaler keeps nothing */
    grad_scaler c = grad_scaler_constant(8.0f);
    CHECK(grad_scaler_to_json(&c) == NULL);
    /* malformed states are refused, naming the key; the scaler is left as it was */
    static const char *const bad[][2] = {
        {"{\"scale\":0,\"growth_tracker\":0,\"hysteresis_tracker\":2}", "\"scale\""},
        {"{\"scale\":1e39,\"growth_tracker\":0,\"hysteresis_tracker\":2}", "\"scale\""},
        {"{\"scale\":0.1,\"growth_tracker\":0,\"hysteresis_tracker\":2}", "\"scale\""},
        {"{\"scale\":2,\"growth_tracker\":-1,\"hysteresis_tracker\":2}", "\"growth_tracker\""},
        {"{\"scale\":2,\"growth_tracker\":1.5,\"hysteresis_tracker\":2}", "\"growth_tracker\""},
        {"{\"scale\":2,\"growth_tracker\":1}", "\"hysteresis_tracker\""},
        {"[1]", "expected an object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cJSON *b = cJSON_Parse(bad[i][0]);
        grad_scaler x = grad_scaler_dynamic(4.0f, 1.0f, 5, 3);
        int rc = grad_scaler_from_json(&x, b, err, sizeof err);
        CHECK(rc == -1 && strstr(err, bad[i][1]) && x.scale == 4.0f && x.growth_tracker == 0);
        if (rc != -1 || !strstr(err, bad[i][1])) fprintf(stderr, "  %s: '%s'\n", bad[i][0], err);
        cJSON_Delete(b);
    }
    /* a negative hysteresis count (overflows past the backoff) is a state Megatron reaches */
    cJSON *neg = cJSON_Parse("{\"scale\":2,\"growth_tracker\":0,\"hysteresis_tracker\":-4}");
    CHECK(grad_scaler_from_json(&r, neg, err, sizeof err) == 0 && r.hysteresis_tracker == -4);
    cJSON_Delete(neg);
}

int main(void) {
    test_unscale();
    test_state();
    /* Megatron's defaults: initial 2^32, min 1, window 1000, hysteresis 2: the first overflow
     * only uses hysteresis, the second halves. */
    grad_scaler d = grad_scaler_dynamic(4294967296.0f, 1.0f, 1000, 2);
    {
        const int inf[] = {1, 1, 1, 0};
        const float want[] = {4294967296.0f, 2147483648.0f, 1073741824.0f, 1073741824.0f};
        run(&d, inf, want, 4);
        CHECK(d.growth_tracker == 1 && d.hysteresis_tracker == -1);
    }
    /* window 3, hysteresis 2, from 1024: growth after 3 clean steps restores the hysteresis,
     * so the next single overflow does not back off; an overflow in the middle of a clean run
     * restarts the count. */
    grad_scaler g = grad_scaler_dynamic(1024.0f, 1.0f, 3, 2);
    {
        const int inf[] = {0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0};
        const float want[] = {1024, 1024, 2048, 2048, 2048, 2048, 1024, 512,
                              512,  512,  1024, 1024, 1024, 2048};
        run(&g, inf, want, 14);
    }
    /* the floor: min_scale 4 from 16, hysteresis 1: 8, 4, 4, 4 */
    grad_scaler m = grad_scaler_dynamic(16.0f, 4.0f, 100, 1);
    {
        const int inf[] = {1, 1, 1, 1};
        const float want[] = {8, 4, 4, 4};
        run(&m, inf, want, 4);
    }
    /* constant: never moves */
    grad_scaler c = grad_scaler_constant(128.0f);
    {
        const int inf[] = {1, 1, 1, 0, 0, 0};
        const float want[] = {128, 128, 128, 128, 128, 128};
        run(&c, inf, want, 6);
    }
    TEST_DONE();
}
