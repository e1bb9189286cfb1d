/* Philox4x32-10 known answers (Random123's kat_vectors), the dropout mask built on it
 * (statistics, key packing, shard consistency, forward/backward values) and the normal
 * sampler used for parameter init. */
#include <stdint.h>
#include <string.h>

#include "core/kernels/dropout.h"
#include "core/random/philox.h"
#include "test_util.h"

static void test_known_answers(void) {
    /* Random123 tests/kat_vectors, "philox4x32 10" lines: counter words, key words, result. */
    static const uint32_t kat[3][10] = {
        {0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x6627e8d5,
         0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int t = 0; t < 3; t++) {
        uint32_t out[4], out_inline[4];
        philox4x32_10(kat[t], kat[t] + 4, out);
        philox4x32_10_inline(kat[t], kat[t] + 4, out_inline);
        for (int i = 0; i < 4; i++) {
            CHECK(out[i] == kat[t][6 + i]);
            CHECK(out_inline[i] == kat[t][6 + i]);
        }
    }
    /* philox_to_uniform: 24 high bits, [0, 1) */
    CHECK(philox_to_uniform(0) == 0.0f);
    CHECK(philox_to_uniform(0xffffffffu) < 1.0f);
    CHECK(philox_to_uniform(0x80000000u) == 0.5f);
}

static dropout_key base_key(void) {
    dropout_key k = {.seed = 1234, .iteration = 7, .microbatch = 3, .layer = 5, .site = 2};
    return k;
}

/* Keep fraction over 1e6 elements within 5 sigma of 1 - p; the mask equals the documented
 * Philox packing. */
static void test_keep_statistics(void) {
    const dropout_key key = base_key();
    const float ps[3] = {0.1f, 0.5f, 0.9f};
    const uint64_t n = 1000000;
    for (int t = 0; t < 3; t++) {
        const float p = ps[t];
        uint64_t kept = 0;
        for (uint64_t i = 0; i < n; i++)
            kept += (uint64_t)dropout_keep(key, i, p);
        const double frac = (double)kept / (double)n;
        const double sigma = sqrt((double)p * (1.0 - p) / (double)n);
        CHECK_CLOSE(frac, 1.0 - p, 0.0, 5.0 * sigma);
    }
    /* Explicit packing from dropout.h, for a few indices including > 2^32 * 4. */
    const uint64_t idx[5] = {0, 1, 6, 12345679, ((uint64_t)5 << 34) + 3};
    for (int t = 0; t < 5; t++) {
        const uint64_t g = idx[t] / 4;
        const uint32_t c[4] = {(uint32_t)g, (uint32_t)(g >> 32), (key.layer << 8) | key.site,
                               key.microbatch};
        const uint32_t k[2] = {(uint32_t)key.seed, key.iteration};
        uint32_t r[4];
        philox4x32_10(c, k, r);
        for (int pi = 0; pi < 3; pi++)
            CHECK(dropout_keep(key, idx[t], ps[pi]) ==
                  (philox_to_uniform(r[idx[t] % 4]) >= ps[pi]));
    }
    /* Boundary: kept iff uniform >= p. With p equal to an element's own uniform u it is kept,
     * with p just above u dropped; same through dropout_forward's vectorized block path. */
    for (uint64_t idx = 1000; idx < 1010; idx++) {
        const uint64_t g = idx / 4;
        const uint32_t c[4] = {(uint32_t)g, (uint32_t)(g >> 32), (key.layer << 8) | key.site,
                               key.microbatch};
        const uint32_t k[2] = {(uint32_t)key.seed, key.iteration};
        uint32_t r[4];
        philox4x32_10(c, k, r);
        const float u = philox_to_uniform(r[idx % 4]);
        CHECK(dropout_keep(key, idx, u) == 1);
        CHECK(dropout_keep(key, idx, nextafterf(u, 2.0f)) == 0);
        float one = 1.0f, y = -1.0f;
        if (u > 0.0f && u < 1.0f) {
            dropout_forward(&y, &one, 1, u, key, idx);
            CHECK(y == 1.0f / (1.0f - u));
            dropout_forward(&y, &one, 1, nextafterf(u, 2.0f), key, idx);
            CHECK(y == 0.0f);
        }
    }
    /* p = 0 keeps everything */
    for (uint64_t i = 0; i < 1000; i++)
        CHECK(dropout_keep(key, i, 0.0f));
}

/* Fraction of 8192 decisions (p = 0.5) that differ between two keys. */
static double mask_difference(dropout_key a, dropout_key b) {
    int diff = 0;
    for (uint64_t i = 0; i < 8192; i++)
        diff += dropout_keep(a, i, 0.5f) != dropout_keep(b, i, 0.5f);
    return diff / 8192.0;
}

static void test_key_fields(void) {
    const dropout_key k0 = base_key();
    dropout_key k;
    CHECK(mask_difference(k0, k0) == 0.0);
    k = k0;
    k.seed += 1;
    CHECK_CLOSE(mask_difference(k0, k), 0.5, 0.0, 0.05);
    k = k0;
    k.iteration += 1;
    CHECK_CLOSE(mask_difference(k0, k), 0.5, 0.0, 0.05);
    k = k0;
    k.microbatch += 1;
    CHECK_CLOSE(mask_difference(k0, k), 0.5, 0.0, 0.05);
    k = k0;
    k.layer += 1;
    CHECK_CLOSE(mask_difference(k0, k), 0.5, 0.0, 0.05);
    k = k0;
    k.site += 1;
    CHECK_CLOSE(mask_difference(k0, k), 0.5, 0.0, 0.05);
    /* layer and site share a word as (layer << 8) | site: (layer 5, site 2) != (layer 2, site 5) */
    dropout_key a = k0, b = k0;
    a.layer = 5;
    a.site = 2;
    b.layer = 2;
    b.site = 5;
    CHECK_CLOSE(mask_difference(a, b), 0.5, 0.0, 0.05);
    /* Shifting the index by 1 changes the mask too (not just a lane permutation). */
    int diff = 0;
    for (uint64_t i = 0; i < 8192; i++)
        diff += dropout_keep(k0, i, 0.5f) != dropout_keep(k0, i + 1, 0.5f);
    CHECK_CLOSE(diff / 8192.0, 0.5, 0.0, 0.05);
}

/* Forward/backward values, p == 0 pass-through, aliasing, and shards at unaligned offsets
 * (including the multithreaded path, n >= 32768) agreeing with the whole buffer. */
static void test_dropout_buffers(void) {
    const dropout_key key = base_key();
    const size_t n = 100003; /* odd, and large enough for the parallel path */
    const uint64_t offset = 1000000007ull;
    const float p = 0.3f, scale = 1.0f / (1.0f - p);
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    float *z = malloc(n * sizeof(float)), *res = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)((i * 2654435761u) % 1000) / 100.0f - 5.0f;
        res[i] = (float)(i % 17) - 8.0f;
    }

    dropout_forward(y, x, n, p, key, offset);
    size_t bad = 0, kept = 0;
    for (size_t i = 0; i < n; i++) {
        const int keep = dropout_keep(key, offset + i, p);
        kept += keep;
        if (y[i] != (keep ? x[i] * scale : 0.0f))
            bad++;
    }
    CHECK(bad == 0);
    CHECK_CLOSE((double)kept / n, 1.0 - p, 0.0, 0.01);

    /* shards: [0, 5), [5, 40006), [40006, n), each with its own offset */
    const size_t cut[4] = {0, 5, 40006, n};
    for (int s = 0; s < 3; s++)
        dropout_forward(z + cut[s], x + cut[s], cut[s + 1] - cut[s], p, key, offset + cut[s]);
    CHECK(memcmp(y, z, n * sizeof(float)) == 0);
    /* in place */
    memcpy(z, x, n * sizeof(float));
    dropout_forward(z, z, n, p, key, offset);
    CHECK(memcmp(y, z, n * sizeof(float)) == 0);
    /* a different offset gives a different mask */
    dropout_forward(z, x, n, p, key, offset + 1);
    CHECK(memcmp(y, z, n * sizeof(float)) != 0);

    /* backward applies the same mask, shard by shard, and accumulates (twice = 2x; exact in
     * float since 2y is exact) */
    memset(z, 0, n * sizeof(float));
    for (int rep = 0; rep < 2; rep++)
        for (int s = 0; s < 3; s++)
            dropout_backward(z + cut[s], x + cut[s], cut[s + 1] - cut[s], p, key, offset + cut[s]);
    bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += z[i] != 2.0f * y[i];
    CHECK(bad == 0);

    /* residual: out = res + dropout(x); backward dres += dout, dx += mask * dout * scale */
    residual_dropout_forward(z, res, x, n, p, key, offset);
    bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += z[i] != res[i] + y[i];
    CHECK(bad == 0);
    memcpy(z, res, n * sizeof(float)); /* out aliases residual */
    residual_dropout_forward(z, z, x, n, p, key, offset);
    bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += z[i] != res[i] + y[i];
    CHECK(bad == 0);

    /* p == 0: exact copy / pass-through, forward and backward */
    dropout_forward(z, x, n, 0.0f, key, offset);
    CHECK(memcmp(z, x, n * sizeof(float)) == 0);
    memset(z, 0, n * sizeof(float));
    dropout_backward(z, x, n, 0.0f, key, offset);
    CHECK(memcmp(z, x, n * sizeof(float)) == 0);
    residual_dropout_forward(z, res, x, n, 0.0f, key, offset);
    bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += z[i] != res[i] + x[i];
    CHECK(bad == 0);
    free(x);
    free(y);
    free(z);
    free(res);
}

static void test_fill_normal(void) {
    const uint64_t n = 1000001; /* odd: the last pair is half used */
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    philox_fill_normal(a, n, 0.02f, 42, 7);
    double sum = 0.0, sq = 0.0, mx = 0.0;
    for (uint64_t i = 0; i < n; i++) {
        sum += a[i];
        sq += (double)a[i] * a[i];
        if (fabs(a[i]) > mx)
            mx = fabs(a[i]);
    }
    const double mean = sum / n, std = sqrt(sq / n - mean * mean);
    CHECK_CLOSE(mean, 0.0, 0.0, 5.0 * 0.02 / sqrt((double)n));
    CHECK_CLOSE(std, 0.02, 5.0 / sqrt(2.0 * n), 0.0); /* std of the sample std ~ sigma/sqrt(2n) */
    CHECK(mx > 4.0 * 0.02 && mx < 6.7 * 0.02);
    /* Fraction within one sigma ~ 0.6827 */
    uint64_t in1 = 0;
    for (uint64_t i = 0; i < n; i++)
        in1 += fabs(a[i]) < 0.02;
    CHECK_CLOSE((double)in1 / n, 0.682689, 0.0, 0.003);

    /* Element i depends only on (seed, stream, i): a prefix and a different n agree. */
    philox_fill_normal(b, 1001, 0.02f, 42, 7);
    CHECK(memcmp(a, b, 1001 * sizeof(float)) == 0);
    /* ... and equals the documented construction. */
    for (uint64_t k = 0; k < 8; k++) {
        const uint64_t pair = k * 1234567 % (n / 2);
        const uint32_t c[4] = {(uint32_t)pair, (uint32_t)(pair >> 32), 7, 0};
        const uint32_t key[2] = {42, 0};
        uint32_t r[4];
        philox4x32_10(c, key, r);
        float z0, z1;
        philox_normal2(r[0], r[1], &z0, &z1);
        CHECK(a[2 * pair] == 0.02f * z0);
        CHECK(a[2 * pair + 1] == 0.02f * z1);
    }
    /* Different stream or seed: different numbers. */
    philox_fill_normal(b, 1000, 0.02f, 42, 8);
    CHECK(memcmp(a, b, 1000 * sizeof(float)) != 0);
    philox_fill_normal(b, 1000, 0.02f, 43, 7);
    CHECK(memcmp(a, b, 1000 * sizeof(float)) != 0);
    /* Box-Muller extremes stay finite. */
    float z0, z1;
    philox_normal2(0, 0, &z0, &z1);
    CHECK(isfinite(z0) && isfinite(z1));
    philox_normal2(0xffffffffu, 0xffffffffu, &z0, &z1);
    CHECK(isfinite(z0) && isfinite(z1) && fabsf(z0) < 1e-3f);
    free(a);
    free(b);
}

int main(void) {
    test_known_answers();
    test_keep_statistics();
    test_key_fields();
    test_dropout_buffers();
    test_fill_normal();
    TEST_DONE();
}
