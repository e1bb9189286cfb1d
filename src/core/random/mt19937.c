#include "core/random/mt19937.h"

#include <string.h>

#define MT_M 397
#define MATRIX_A 0x9908b0dfU
#define UPPER_MASK 0x80000000U
#define LOWER_MASK 0x7fffffffU

void mt19937_seed(mt19937_state *st, uint32_t seed) {
    for (int pos = 0; pos < MT19937_N; pos++) {
        st->key[pos] = seed;
        seed = 1812433253U * (seed ^ (seed >> 30)) + (uint32_t)pos + 1U;
    }
    st->pos = MT19937_N;
}

static void mt19937_gen(mt19937_state *st) {
    uint32_t y;
    int i;
    for (i = 0; i < MT19937_N - MT_M; i++) {
        y = (st->key[i] & UPPER_MASK) | (st->key[i + 1] & LOWER_MASK);
        st->key[i] = st->key[i + MT_M] ^ (y >> 1) ^ (-(y & 1U) & MATRIX_A);
    }
    for (; i < MT19937_N - 1; i++) {
        y = (st->key[i] & UPPER_MASK) | (st->key[i + 1] & LOWER_MASK);
        st->key[i] = st->key[i + (MT_M - MT19937_N)] ^ (y >> 1) ^ (-(y & 1U) & MATRIX_A);
    }
    y = (st->key[MT19937_N - 1] & UPPER_MASK) | (st->key[0] & LOWER_MASK);
    st->key[MT19937_N - 1] = st->key[MT_M - 1] ^ (y >> 1) ^ (-(y & 1U) & MATRIX_A);
    st->pos = 0;
}

uint32_t mt19937_next32(mt19937_state *st) {
    if (st->pos == MT19937_N) mt19937_gen(st);
    uint32_t y = st->key[st->pos++];
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680U;
    y ^= (y << 15) & 0xefc60000U;
    y ^= (y >> 18);
    return y;
}

uint64_t mt19937_next64(mt19937_state *st) {
    uint64_t hi = mt19937_next32(st);
    uint64_t lo = mt19937_next32(st);
    return (hi << 32) | lo;
}

uint64_t mt19937_interval(mt19937_state *st, uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max, value;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    mask |= mask >> 32;
    if (max <= 0xffffffffULL) {
        while ((value = (mt19937_next32(st) & mask)) > max) {
        }
    } else {
        while ((value = (mt19937_next64(st) & mask)) > max) {
        }
    }
    return value;
}

/* The shuffle of both element types: the draws depend only on n, the swap moves `elem` bytes. */
static void shuffle(mt19937_state *st, void *a, size_t n, size_t elem) {
    unsigned char *p = a, t[sizeof(int64_t)];
    for (size_t i = n > 0 ? n - 1 : 0; i >= 1; i--) {
        size_t j = (size_t)mt19937_interval(st, i);
        memcpy(t, p + j * elem, elem);
        memcpy(p + j * elem, p + i * elem, elem);
        memcpy(p + i * elem, t, elem);
    }
}

void mt19937_shuffle_i32(mt19937_state *st, int32_t *a, size_t n) { shuffle(st, a, n, sizeof *a); }

void mt19937_shuffle_i64(mt19937_state *st, int64_t *a, size_t n) { shuffle(st, a, n, sizeof *a); }
