#include "training/difflm.h"

#include <string.h>

#include "core/random/philox.h"

/* Philox streams of the objective: (kind, index) -> 4 x 32 bits, key = seed. */
enum { STREAM_T = 1, STREAM_MASK = 2, STREAM_FALLBACK = 3, STREAM_VARILEN = 4 };

static void draw(uint64_t seed, uint32_t kind, uint64_t a, uint32_t b, uint32_t out[4]) {
    const uint32_t key[2] = {(uint32_t)seed, 0x646c6d21u}; /* "dlm!" */
    const uint32_t ctr[4] = {b, (uint32_t)a, (uint32_t)(a >> 32), kind};
    philox4x32_10(ctr, key, out);
}

int difflm_length(uint64_t seed, uint32_t iteration, uint32_t global_microbatch, int s,
                  float varilen_prob) {
    if (varilen_prob <= 0.0f) return s;
    uint32_t r[4];
    draw(seed, STREAM_VARILEN, ((uint64_t)iteration << 32) | global_microbatch, 0, r);
    if (philox_to_uniform(r[0]) >= varilen_prob) return s;
    return 2 + (int)(r[1] % (uint32_t)(s - 1)); /* uniform in [2, s] */
}

int difflm_padded_length(int L, int B, int ranks) {
    int Lp = L;
    while (ranks > 1 && ((int64_t)B * Lp) % ranks != 0) Lp++;
    return Lp;
}

int difflm_padded_length_cp(int L, int B, int ranks, int cp) {
    if (cp <= 1) return difflm_padded_length(L, B, ranks);
    int Lp = L;
    while (Lp % (2 * cp) != 0 || (ranks > 1 && ((int64_t)B * (Lp / cp)) % ranks != 0)) Lp++;
    return Lp;
}

int difflm_model_length(const megadlm_args *a) {
    int s = a->seq_length;
    if (ARGS_CHOICE(a, model_running_mode) != ARGS_MODE_DIFFLM_NOSHIFT || s < 2) return s;
    int t = a->tensor_model_parallel_size, sp = a->sequence_parallel && t > 1 ? t : 1;
    int Lp = difflm_padded_length_cp(s - 1, a->micro_batch_size, sp, a->context_parallel_size);
    return Lp > s ? Lp : s;
}

int difflm_mask_sequence(const int32_t *sample, const float *lm, int L, int mask_token,
                         uint64_t seed, uint64_t sample_index, int32_t *noisy, int32_t *labels,
                         float *weights) {
    uint32_t r[4];
    draw(seed, STREAM_T, sample_index, 0, r);
    float t = philox_to_uniform(r[0]);
    int masked = 0;
    for (int j = 0; j < L; j++) {
        draw(seed, STREAM_MASK, sample_index, (uint32_t)j, r);
        int m = philox_to_uniform(r[0]) < t;
        labels[j] = sample[j + 1];
        noisy[j] = m ? mask_token : sample[j + 1];
        weights[j] = (float)m; /* scaled below */
        masked += m;
    }
    if (masked == 0) { /* one position at random */
        draw(seed, STREAM_FALLBACK, sample_index, 0, r);
        int j = (int)(r[0] % (uint32_t)L);
        noisy[j] = mask_token;
        weights[j] = 1.0f;
        masked = 1;
    }
    float inv_p = (float)L / (float)masked; /* 1 / p_b */
    for (int j = 0; j < L; j++) weights[j] *= inv_p * lm[j];
    return masked;
}

int difflm_logits_in_chunks(const megadlm_args *a) {
    return ARGS_CHOICE(a, model_running_mode) == ARGS_MODE_DIFFLM_NOSHIFT && !a->difflm_full_logits;
}
