/* Supervised fine-tuning objectives: sft.h. */
#include "training/sft.h"

#include "core/random/philox.h"

/* Philox streams of the SFT objective, apart from the pretraining objective's (another key). */
enum { STREAM_T = 1, STREAM_U = 2 };

static float draw(uint64_t seed, uint32_t kind, uint64_t a, uint32_t b) {
    const uint32_t key[2] = {(uint32_t)seed, 0x73667421u}; /* "sft!" */
    const uint32_t ctr[4] = {b, (uint32_t)a, (uint32_t)(a >> 32), kind};
    uint32_t r[4];
    philox4x32_10(ctr, key, r);
    return philox_to_uniform(r[0]);
}

float sft_difflm_t(uint64_t seed, uint64_t sample_index) {
    return draw(seed, STREAM_T, sample_index, 0);
}

float sft_difflm_u(uint64_t seed, uint64_t sample_index, int j) {
    return draw(seed, STREAM_U, sample_index, (uint32_t)j);
}

double sft_ar_loss_mask(const int32_t *mask, int T, float *loss_mask) {
    double sum = 0.0;
    for (int t = 0; t < T; t++) {
        loss_mask[t] = mask[t + 1] ? 1.0f : 0.0f;
        sum += loss_mask[t];
    }
    return sum;
}

int sft_difflm_mask_sequence(const int32_t *sample, const int32_t *mask, int L, int mask_token,
                             uint64_t seed, uint64_t sample_index, int32_t *noisy,
                             int32_t *labels, float *weights) {
    float p = (1.0f - SFT_DIFFLM_EPS) * sft_difflm_t(seed, sample_index) + SFT_DIFFLM_EPS;
    int answer = 0, masked = 0;
    for (int j = 0; j < L; j++) answer += mask[j + 1] != 0;
    for (int j = 0; j < L; j++) {
        int m = mask[j + 1] && sft_difflm_u(seed, sample_index, j) < p;
        labels[j] = sample[j + 1];
        noisy[j] = m ? mask_token : sample[j + 1];
        weights[j] = m ? 1.0f / (p * (float)answer) : 0.0f;
        masked += m;
    }
    return masked;
}
