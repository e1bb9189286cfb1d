/* MT19937 (Matsumoto & Nishimura 1998) and NumPy's legacy numpy.random.RandomState.shuffle.
 *
 * Megatron builds its GPT document and shuffle indices with numpy.random.RandomState(seed).
 * shuffle(array). Reproducing those indices bit for bit needs exactly NumPy's generator and
 * algorithm, which this file transcribes:
 *   - seeding: RandomState(seed) with an integer 0 <= seed < 2^32 runs the classic
 *     init_genrand (mt[0] = seed; mt[i] = 1812433253 * (mt[i-1] ^ (mt[i-1] >> 30)) + i);
 *   - next32: the standard tempered MT19937 output;
 *   - next64 (used only for bounds >= 2^32): (next32() << 32) | next32(), first draw high;
 *   - random_interval(max): smallest all-ones mask >= max, draw (next32 or next64) & mask
 *     until the value is <= max (rejection sampling);
 *   - shuffle of a 1-D array of n elements: for i = n-1 down to 1: j = random_interval(i);
 *     swap(a[i], a[j]).
 * tests/scripts/test_megatron_format.sh checks the outputs against real NumPy. */
#ifndef MEGADLM_CORE_RANDOM_MT19937_H
#define MEGADLM_CORE_RANDOM_MT19937_H

#include <stddef.h>
#include <stdint.h>

#define MT19937_N 624

typedef struct {
    uint32_t key[MT19937_N];
    int pos;
} mt19937_state;

/* numpy.random.RandomState(seed) for an integer seed (NumPy accepts 0 <= seed < 2^32). */
void mt19937_seed(mt19937_state *st, uint32_t seed);
uint32_t mt19937_next32(mt19937_state *st);
uint64_t mt19937_next64(mt19937_state *st);
/* NumPy's random_interval: uniform integer in [0, max]. */
uint64_t mt19937_interval(mt19937_state *st, uint64_t max);

/* numpy.random.RandomState.shuffle on a 1-D array (the element type does not change the
 * sequence of draws). */
void mt19937_shuffle_i32(mt19937_state *st, int32_t *a, size_t n);
void mt19937_shuffle_i64(mt19937_state *st, int64_t *a, size_t n);

#endif
