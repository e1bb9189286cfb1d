/* The DiffLM export's shards for the shapes of MegaDLMs' dlm_pretrain_1.7b.sh (28 layers, hidden
 * 2048, 16 heads of 128, ffn 6144, vocabulary 50289 padded to 50304, untied) with the
 * --num_output_shards 4 its convert_ckpt step passes, against the split worked out by hand
 * from MegaDLMs' megatron_to_hf_te.py and huggingface_hub's split_state_dict_into_shards
 * (docs/CHECKPOINT.md, "Shards"):
 *
 *   param_count = 28 * (4 * 2048^2 + 2 * 128 + 3 * 6144 * 2048 + 2 * 2048 + 64 inv_freq)
 *               + 2 * 50304 * 2048 + 2048 = 1,732,897,536
 *   limit = param_count * 2 // 3 = 1,155,265,024 bytes
 *   BF16: embed 206,045,184 bytes + 8 layers of 109,060,608 = 1,078,530,048; layer 8's q/k/v/o,
 *         norms and gate_proj bring it to 1,137,250,816; up_proj (25,165,824) would pass the
 *         limit: shard 2 starts at tensor 1 + 8 * 11 + 7 = 96 (model.layers.8.mlp.up_proj).
 *         Shard 3 starts at tensor 211 (layer 19's k_proj), shard 4 at 310 (lm_head): 4 files.
 *   F32:  the limit assumes 2 bytes a value, so 7 files, starting at tensors 0, 40, 96, 152,
 *         210, 268, 310.
 * A tensor larger than the limit gets a shard of its own, placed before the one being filled
 * (checked on a small made-up list). */
#include <stdint.h>
#include <string.h>

#include "test_util.h"
#include "tools/convert_difflm.h"

enum { LAYERS = 28, H = 2048, A = 16, D = 128, F = 6144, V = 50304, N = 1 + LAYERS * 11 + 2 };

/* DiffLM's state_dict order (modeling_dlm.py) */
static int shapes_1p7b(int64_t (*s)[2]) {
    int n = 0;
#define T(a, b) (s[n][0] = (a), s[n][1] = (b), n++)
    T(V, H);
    for (int l = 0; l < LAYERS; l++) {
        T(A * D, H); T(A * D, H); T(A * D, H); T(H, A * D); /* q k v o */
        T(D, 0); T(D, 0);                                   /* q_norm k_norm */
        T(F, H); T(F, H); T(H, F);                          /* gate up down */
        T(H, 0); T(H, 0);                                   /* the two RMSNorms */
    }
    T(H, 0);
    T(V, H);
#undef T
    return n;
}

static void check_starts(const int *shard_of, int n, const int *starts, int count) {
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (i == 0 || shard_of[i] != shard_of[i - 1]) {
            CHECK(k < count && starts[k] == i);
            CHECK(shard_of[i] == k);
            k++;
        }
    }
    CHECK(k == count);
}

int main(void) {
    static int64_t s[N][2];
    static int shard_of[N];
    CHECK(shapes_1p7b(s) == N);
    const uint64_t inv_freq = (uint64_t)LAYERS * (D / 2);
    static const int bf16[] = {0, 96, 211, 310}, f32[] = {0, 40, 96, 152, 210, 268, 310};
    CHECK(difflm_plan_shards(N, (const int64_t(*)[2])s, inv_freq, 2, 4, shard_of) == 4);
    check_starts(shard_of, N, bf16, 4);
    CHECK(difflm_plan_shards(N, (const int64_t(*)[2])s, inv_freq, 4, 4, shard_of) == 7);
    check_starts(shard_of, N, f32, 7);
    /* --num_output_shards 1 and 2 both divide by 1: one BF16 file */
    CHECK(difflm_plan_shards(N, (const int64_t(*)[2])s, inv_freq, 2, 1, shard_of) == 1);
    CHECK(difflm_plan_shards(N, (const int64_t(*)[2])s, inv_freq, 2, 2, shard_of) == 1);

    /* sizes 4, 4, 30, 4 (F32 [1] ... [30]), no inv_freq, 2 shards asked: limit 42 * 2 / 1 = 84
     * bytes; 30 values = 120 bytes > 84 go alone, appended before the open shard {0, 1}, which
     * then also takes tensor 3: shard_list = [{2}, {0, 1, 3}] */
    int64_t small[4][2] = {{4, 0}, {4, 0}, {30, 0}, {4, 0}};
    int where[4];
    CHECK(difflm_plan_shards(4, (const int64_t(*)[2])small, 0, 4, 2, where) == 2);
    CHECK(where[0] == 1 && where[1] == 1 && where[2] == 0 && where[3] == 1);
    TEST_DONE();
}
