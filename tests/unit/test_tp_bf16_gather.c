/* The last step of the 16-bit all-gathers and pipeline transfers (--bf16, --fp16;
 * bf16_widen_staged and half_widen_staged, kernels/bf16.h): n bf16 or fp16 values staged in the
 * upper half of an fp32 buffer are widened in place into its n floats. Checked for lengths
 * around the widening's block (1024) and for one that is not a multiple of it: every float is
 * the widened value of the 16-bit pattern that was staged for it (bf16: the pattern as the top
 * half of the fp32 bits; fp16: a few patterns written out by hand, and every pattern against
 * the one-value widening), including signed zeros, infinities and NaNs; the staging itself,
 * through tp_all_gather_half with one rank, falls back to the fp32 copy. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/kernels/bf16.h"
#include "core/tensor_parallel/mappings.h"
#include "test_util.h"

/* A bf16 pattern that differs from element to element and covers every exponent and sign. */
static bf16 pattern(size_t i) { return (bf16)((i * 40503u + 17u) & 0xffffu); }

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static void check_widen(size_t n) {
    float *full = malloc(n * sizeof(float));
    bf16 *stage = (bf16 *)full + n, *copy = malloc(n * sizeof(bf16));
    for (size_t i = 0; i < n; i++) copy[i] = stage[i] = pattern(i);
    bf16_widen_staged(full, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t want_bits = (uint32_t)copy[i] << 16; /* bf16 is the top half of an fp32 */
        float want;
        memcpy(&want, &want_bits, sizeof want);
        if (!same_bits(full[i], want)) bad++;
    }
    printf("n = %zu: %zu values not widened from their staged bf16\n", n, bad);
    CHECK(bad == 0);
    free(full);
    free(copy);
}

/* fp16 staged: the widened floats are fp16_to_float of the staged patterns (every one of the
 * 65536 patterns when n is large enough), and known values come out as written. */
static void check_widen_fp16(size_t n) {
    float *full = malloc(n * sizeof(float));
    fp16 *stage = (fp16 *)full + n, *copy = malloc(n * sizeof(fp16));
    for (size_t i = 0; i < n; i++) copy[i] = stage[i] = pattern(i);
    if (n >= 4) { /* 1.0, -2.0, 65504 (the largest), 2^-24 (the smallest subnormal) */
        copy[0] = stage[0] = 0x3c00;
        copy[1] = stage[1] = 0xc000;
        copy[2] = stage[2] = 0x7bff;
        copy[3] = stage[3] = 0x0001;
    }
    half_widen_staged(HALF_FP16, full, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += !same_bits(full[i], fp16_to_float(copy[i]));
    if (n >= 4)
        CHECK(full[0] == 1.0f && full[1] == -2.0f && full[2] == 65504.0f &&
              full[3] == 0x1p-24f);
    printf("fp16, n = %zu: %zu values not widened from their staged fp16\n", n, bad);
    CHECK(bad == 0);
    free(full);
    free(copy);
}

int main(void) {
    const size_t lengths[] = {1, 2, 1023, 1024, 1025, 2048, 5000, 70001};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        check_widen(lengths[i]);
        check_widen_fp16(lengths[i]);
    }

    /* one rank (no MPI): the shard is copied as it is, as tp_all_gather does */
    float shard[5] = {1.0f, 1.00390625f + 1e-6f, -3.3f, 0.0f, 1e-30f}, full[5];
    tp_all_gather_half(HALF_BF16, full, shard, 5);
    CHECK(memcmp(full, shard, sizeof shard) == 0);
    memset(full, 0, sizeof full);
    tp_all_gather_half(HALF_FP16, full, shard, 5);
    CHECK(memcmp(full, shard, sizeof shard) == 0);
    TEST_DONE();
}
