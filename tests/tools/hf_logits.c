/* megadlm's logits for tests/scripts/test_hf_convert.sh: loads the latest checkpoint of DIR
 * with the library (as `megadlm generate` does) and runs one forward on a fixed token batch.
 *
 *   hf_logits DIR OUT.safetensors
 *
 * OUT holds "tokens" I32 [B, T] and "logits" F32 [B, T, V] (V the padded vocabulary). The
 * tokens are ((7 t + 13 b + 3) mod min(V, 97)), T = min(seq_length, 16), B = 2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/models/gpt_model.h"
#include "core/tensor/safetensors.h"
#include "training/arguments.h"
#include "training/checkpoint_files.h"
#include "training/model_provider.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: hf_logits DIR OUT.safetensors\n");
        return 2;
    }
    char err[1024];
    int it;
    ckpt_state st = {0};
    megadlm_args a;
    args_defaults(&a);
    if (ckpt_read_latest(argv[1], &it, err, sizeof err) != 0 ||
        ckpt_load_state(argv[1], it, &st, err, sizeof err) != 0 ||
        args_from_json(&a, st.args, err, sizeof err) != 0) {
        fprintf(stderr, "hf_logits: %s: %s\n", argv[1], err);
        return 1;
    }
    ckpt_state_free(&st);
    args_one_process(&a); /* every expert too: a checkpoint saved under EP holds them all */
    transformer_config c = model_config_from_args(&a);
    c.hidden_dropout = c.attention_dropout = 0.0f;
    const int B = 2, T = c.seq_length < 16 ? c.seq_length : 16, V = c.padded_vocab_size;
    const int span = V < 97 ? V : 97;
    gpt_model *m = gpt_model_create(&c, B, GPT_MODEL_FORWARD_ONLY);
    activation_store *store = activation_store_create(m, 1);
    if (ckpt_load_tensors(argv[1], it, &m->params, 0, err, sizeof err) != 0) {
        fprintf(stderr, "hf_logits: %s\n", err);
        return 1;
    }
    gpt_model_params_to_bf16(m); /* a --bf16 checkpoint's model: its bf16 copy from the load */
    int32_t *tok = malloc((size_t)B * T * sizeof(int32_t));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) tok[b * T + t] = (7 * t + 13 * b + 3) % span;
    gpt_step gs = {.seed = 1, .training = 0};
    gpt_batch batch = {.tokens = tok, .B = B, .T = T};
    gpt_model_forward(m, store, &batch, gs);
    int64_t ts[2] = {B, T}, ls[3] = {B, T, V};
    st_tensor_desc d[2] = {{"tokens", ST_I32, 2, ts, tok, NULL},
                           {"logits", ST_F32, 3, ls, store->logits, NULL}};
    if (st_write_file(argv[2], d, 2, NULL, 0, err, sizeof err) != 0) {
        fprintf(stderr, "hf_logits: %s\n", err);
        return 1;
    }
    free(tok);
    activation_store_free(store);
    gpt_model_free(m);
    args_free(&a);
    return 0;
}
