/* The kernels' vectorized expf and sigmoid (core/kernels/simd_math.h) against the C library
 * over their whole range, and with NaN and infinities: NaN propagates, infinities saturate,
 * and nothing reaches undefined behaviour (tests/CMakeLists.txt builds this test with UBSan
 * where the compiler has it, so a left shift of a negative value or a NaN converted to an
 * integer ends the test). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/kernels/simd_math.h"
#include "test_util.h"

/* The fixed-lane order the sums promise, written out one element at a time (no vectors): lane
 * i % 16 accumulates element i, then lanes 0..7 += 8..15, 0..3 += 4..7, 0..1 += 2..3, 0 += 1. */
static float lane_order(const float *x, int n, int kind, float m) {
    float acc[16] = {0};
    for (int i = 0; i < n; i++) {
        float t = kind == 0 ? x[i] : kind == 1 ? (x[i] - m) * (x[i] - m) : simd_expf(x[i] - m);
        acc[i % 16] = acc[i % 16] + t;
    }
    for (int w = 8; w > 0; w /= 2)
        for (int j = 0; j < w; j++) acc[j] = acc[j] + acc[j + w];
    return acc[0];
}

/* simd_sum / simd_sum_sq / simd_sum_exp give exactly that order's bits, whatever the vector
 * width the compiler chose (so x86-64-v3 and AVX-512 builds agree); a reassociating compiler or
 * a changed lane count fails this on inputs whose sum depends on the order. */
static void fixed_lane_sums(void) {
    static float x[1000];
    uint32_t s = 12345;
    for (int i = 0; i < 1000; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * (i % 7 == 0 ? 1e4f : 1.0f);
    }
    int bad = 0;
    for (int n = 0; n <= 1000; n += n < 40 ? 1 : 97) {
        bad += simd_sum(x, n) != lane_order(x, n, 0, 0.0f);
        bad += simd_sum_sq(x, n, 0.25f) != lane_order(x, n, 1, 0.25f);
        bad += simd_sum_exp(x, n, 5000.0f) != lane_order(x, n, 2, 5000.0f);
    }
    CHECK(bad == 0);
    /* the order matters on these inputs: a plain left-to-right sum differs */
    float seq = 0.0f;
    for (int i = 0; i < 1000; i++) seq += x[i];
    CHECK(seq != simd_sum(x, 1000));
    CHECK(simd_max(x, 1000) >= x[0] && simd_max(x, 0) == -INFINITY);
}

int main(void) {
    fixed_lane_sums();
    /* finite arguments: within 2e-7 relative of libm where the result is normal */
    for (float x = -87.0f; x <= 88.0f; x += 0.0137f) CHECK_CLOSE(simd_expf(x), expf(x), 2e-7, 0.0);
    /* the documented saturation and flush to zero */
    CHECK(simd_expf(1000.0f) == simd_expf(88.0f));
    CHECK(simd_expf(-1000.0f) == 0.0f);
    /* infinities saturate like large values, NaN propagates */
    volatile float inf = INFINITY, nan = NAN;
    CHECK(simd_expf(inf) == simd_expf(88.0f));
    CHECK(simd_expf(-inf) == 0.0f);
    CHECK(isnan(simd_expf(nan)));
    CHECK(isnan(simd_expf(-nan)));
    CHECK(isnan(simd_sigmoidf(nan)));
    CHECK(simd_sigmoidf(inf) == 1.0f);
    CHECK(simd_sigmoidf(-inf) == simd_sigmoidf(-100.0f) && simd_sigmoidf(-inf) < 1e-37f); /* 1/(1+e^88) */
    for (float x = -20.0f; x <= 20.0f; x += 0.031f)
        CHECK_CLOSE(simd_sigmoidf(x), 1.0 / (1.0 + exp(-(double)x)), 4e-7, 0.0);
    TEST_DONE();
}
