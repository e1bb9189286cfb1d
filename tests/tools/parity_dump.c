/* PyTorch parity, megadlm side: builds a small model of one family, saves its initial
 * weights as a checkpoint, runs one forward/backward on a fixed batch and then three training
 * steps exactly as the trainer does (training.c train_step), and writes everything the
 * independent PyTorch implementation (tests/python/torch_gpt.py) compares against.
 *
 *   parity_dump FAMILY OUTDIR [bf16|fp16]   FAMILY = gpt | llama | qwen2 (llama's with
 *                                      --add-qkv-bias, no qk-layernorm), optionally with
 *                                      _no_mask or _causal_bottom_right (the attention mask,
 *                                      MegaDLMs' test-forward); bf16 / fp16: the model
 *                                      under --bf16 / --fp16 (tests/python/torch_bf16.py
 *                                      compares that one; no loss scaling here);
 *                                      FAMILY may end in _packed: end-of-document tokens in
 *                                      the batch, --reset-position-ids and
 *                                      --reset-attention-mask (core/datasets/packing.h)
 *
 * Writes into OUTDIR:
 *   ckpt/iter_0000000/{model,optimizer}.safetensors, state.json   (ckpt_save; args = the config)
 *   batch.safetensors   tokens I32 [B,T], labels I32 [B,T], loss_mask F32 [B,T]
 *   grads.safetensors   "loss" F32 [] and the gradient of every parameter under its own name
 *   train.safetensors   "losses", "grad_norms", "lrs", "clip_coeffs" F32 [STEPS] and every
 *                       parameter after STEPS optimizer steps under its own name
 *
 * The configurations are mirrored (independently) in torch_gpt.py, which also checks them
 * against the args saved in state.json. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/datasets/packing.h"
#include "core/models/gpt_model.h"
#include "core/optimizer/optimizer.h"
#include "core/optimizer/optimizer_param_scheduler.h"
#include "core/tensor/safetensors.h"
#include "training/checkpoint_files.h"

#define STEPS 3
#define BATCH 2
#define SEQ 16
#define VOCAB 300 /* tokens drawn below this; the model's vocabulary is padded to 384 */
#define EOD (VOCAB - 1) /* the _packed families' end-of-document id (never drawn otherwise) */

typedef struct {
    const char *family;
    const char *mask_type; /* causal, causal_bottom_right or no_mask */
    transformer_config cfg;
    double rotary_percent;
    optimizer_config oc;
    double lr, min_lr;
    int warmup_iters, decay_iters;
    uint64_t seed;
    int packed; /* _packed: documents in the batch, both reset flags */
} parity_setup;

/* A family name's attention-mask suffix (MegaDLMs' --attention-mask-type, as test-forward
 * runs it: next-token labels with that mask): "_no_mask", "_causal_bottom_right" or none
 * (causal). Cuts the suffix off `base`. */
static const char *mask_suffix(const char *family, char *base, size_t size) {
    static const char *const masks[] = {"no_mask", "causal_bottom_right"};
    snprintf(base, size, "%s", family);
    for (int i = 0; i < 2; i++) {
        size_t n = strlen(base), k = strlen(masks[i]);
        if (n > k + 1 && base[n - k - 1] == '_' && !strcmp(base + n - k, masks[i])) {
            base[n - k - 1] = 0;
            return masks[i];
        }
    }
    return "causal";
}

static int make_setup(const char *family, parity_setup *s) {
    memset(s, 0, sizeof(*s));
    s->family = family;
    char base[64], unpacked[64];
    snprintf(unpacked, sizeof unpacked, "%s", family);
    size_t n = strlen(unpacked);
    if (n > 7 && !strcmp(unpacked + n - 7, "_packed")) {
        unpacked[n - 7] = 0;
        s->packed = 1;
    }
    s->mask_type = mask_suffix(unpacked, base, sizeof base);
    family = base;
    transformer_config *c = &s->cfg;
    c->num_layers = 2;
    c->hidden_size = 64;
    c->num_attention_heads = 4;
    c->seq_length = SEQ;
    c->padded_vocab_size = 384;
    c->init_method_std = 0.05f;
    c->hidden_dropout = 0.0f;
    c->attention_dropout = 0.0f;
    /* MegaDLMs' masks for self-attention (queries and keys of one length): causal and
     * causal_bottom_right are the same, no_mask is bidirectional */
    c->causal = strcmp(s->mask_type, "no_mask") != 0;
    s->rotary_percent = 1.0;
    if (!strcmp(family, "gpt")) {
        /* GPT-2: LayerNorm, learned absolute positions, tanh GELU, biases, tied output */
        c->ffn_hidden_size = 256;
        c->num_query_groups = 4;
        c->kv_channels = 16;
        c->max_position_embeddings = 32;
        c->normalization = NORM_LAYERNORM;
        c->norm_epsilon = 1e-5f;
        c->swiglu = 0;
        c->gelu = GELU_TANH;
        c->add_bias_linear = 1;
        c->rope = 0;
        c->untie_embeddings_and_output_weights = 0;
    } else if (!strcmp(family, "llama") || !strcmp(family, "qwen2")) {
        /* Llama/Qwen3: RMSNorm, RoPE, SwiGLU, GQA, qk-layernorm, no biases, untied output;
         * kv_channels 24 != hidden / heads = 16 */
        c->ffn_hidden_size = 128;
        c->num_query_groups = 2;
        c->kv_channels = 24;
        c->max_position_embeddings = SEQ;
        c->normalization = NORM_RMSNORM;
        c->norm_epsilon = 1e-6f;
        c->qk_layernorm = 1;
        c->swiglu = 1;
        c->add_bias_linear = 0;
        c->rope = 1;
        c->rotary_base = 10000.0f;
        c->untie_embeddings_and_output_weights = 1;
        if (!strcmp(family, "qwen2")) { /* Qwen2: a QKV bias, no qk-layernorm */
            c->qk_layernorm = 0;
            c->add_qkv_bias = 1;
        }
    } else {
        return -1;
    }
    c->rot_dim = (int)(c->kv_channels * s->rotary_percent);
    c->packed_docs = s->packed;
    /* clip between the gradient norms of the steps (about 5 for steps 1-2, 3-3.5 for step 3
     * with these weights and batch): clipping triggers in steps 1 and 2, not in step 3 */
    s->oc = (optimizer_config){.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                               .weight_decay = 0.1f, .clip_grad = 4.0f};
    s->lr = 3e-3;
    s->min_lr = 3e-4;
    s->warmup_iters = 1;
    s->decay_iters = 4;
    s->seed = 1234;
    return 0;
}

static cJSON *setup_json(const parity_setup *s) {
    const transformer_config *c = &s->cfg;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "family", s->family);
    cJSON_AddNumberToObject(j, "reset_position_ids", s->packed);
    cJSON_AddNumberToObject(j, "reset_attention_mask", s->packed);
    cJSON_AddNumberToObject(j, "eod", EOD);
#define NUM(key, val) cJSON_AddNumberToObject(j, key, (double)(val))
    NUM("num_layers", c->num_layers);
    NUM("hidden_size", c->hidden_size);
    NUM("ffn_hidden_size", c->ffn_hidden_size);
    NUM("num_attention_heads", c->num_attention_heads);
    NUM("num_query_groups", c->num_query_groups);
    NUM("kv_channels", c->kv_channels);
    NUM("seq_length", c->seq_length);
    NUM("max_position_embeddings", c->max_position_embeddings);
    NUM("padded_vocab_size", c->padded_vocab_size);
    cJSON_AddStringToObject(j, "normalization",
                            c->normalization == NORM_RMSNORM ? "RMSNorm" : "LayerNorm");
    NUM("norm_epsilon", c->norm_epsilon);
    NUM("qk_layernorm", c->qk_layernorm);
    NUM("swiglu", c->swiglu);
    cJSON_AddStringToObject(j, "gelu", c->gelu == GELU_TANH ? "tanh" : "erf");
    NUM("add_bias_linear", c->add_bias_linear);
    NUM("add_qkv_bias", c->add_qkv_bias);
    cJSON_AddStringToObject(j, "attention_mask_type", s->mask_type);
    cJSON_AddStringToObject(j, "position_embedding_type", c->rope ? "rope" : "learned_absolute");
    NUM("rotary_base", c->rotary_base);
    NUM("rotary_percent", s->rotary_percent);
    NUM("untie_embeddings_and_output_weights", c->untie_embeddings_and_output_weights);
    NUM("init_method_std", c->init_method_std);
    NUM("micro_batch_size", BATCH);
    NUM("global_batch_size", BATCH);
    NUM("adam_beta1", s->oc.beta1);
    NUM("adam_beta2", s->oc.beta2);
    NUM("adam_eps", s->oc.eps);
    NUM("weight_decay", s->oc.weight_decay);
    NUM("clip_grad", s->oc.clip_grad);
    NUM("lr", s->lr);
    NUM("min_lr", s->min_lr);
    NUM("lr_warmup_iters", s->warmup_iters);
    NUM("lr_decay_iters", s->decay_iters);
    cJSON_AddStringToObject(j, "lr_decay_style", "cosine");
    NUM("train_iters", STEPS);
    NUM("seed", s->seed);
#undef NUM
    return j;
}

/* Writes every parameter-shaped slice of `buf` (params or grads) under the tensor names,
 * after `extra` leading tensors. */
static int write_named(const char *path, const param_set *ps, const float *buf,
                       const st_tensor_desc *extra, int nextra) {
    int n = nextra + ps->count;
    st_tensor_desc *d = calloc((size_t)n, sizeof(*d));
    for (int i = 0; i < nextra; i++) d[i] = extra[i];
    for (int i = 0; i < ps->count; i++) {
        const param_tensor *t = &ps->tensors[i];
        d[nextra + i] = (st_tensor_desc){.name = t->name, .dtype = ST_F32, .ndim = t->ndim,
                                         .shape = t->shape, .data = buf + t->offset};
    }
    char err[1024];
    int rc = st_write_file(path, d, n, NULL, 0, err, sizeof(err));
    if (rc) fprintf(stderr, "parity_dump: %s\n", err);
    free(d);
    return rc;
}

int main(int argc, char **argv) {
    if (argc != 3 && !(argc == 4 && (!strcmp(argv[3], "bf16") || !strcmp(argv[3], "fp16")))) {
        fprintf(stderr, "usage: %s gpt|llama|qwen2[_no_mask|_causal_bottom_right] OUTDIR "
                        "[bf16|fp16]\n", argv[0]);
        return 2;
    }
    parity_setup s;
    if (make_setup(argv[1], &s)) {
        fprintf(stderr, "parity_dump: unknown family '%s' (gpt|llama|qwen2, optionally with "
                        "_no_mask or _causal_bottom_right)\n", argv[1]);
        return 2;
    }
    s.cfg.bf16 = argc == 4 && !strcmp(argv[3], "bf16");
    s.cfg.fp16 = argc == 4 && !strcmp(argv[3], "fp16");
    const char *out = argv[2];
    char path[4096], err[1024];
    const transformer_config *c = &s.cfg;
    const int B = BATCH, T = SEQ;

    gpt_model *m = gpt_model_create(c, B, GPT_MODEL_TRAINING);
    activation_store *store = activation_store_create(m, 1);
    gpt_model_init_params(m, s.seed);
    param_set *ps = &m->params;
    /* biases start at zero; give the QKV bias values so that the forward adds something */
    for (int i = 0; i < ps->count; i++)
        if (strstr(ps->tensors[i].name, "linear_qkv.bias") && c->add_qkv_bias)
            for (size_t k = 0; k < ps->tensors[i].numel; k++)
                param_set_fp32(ps)[ps->tensors[i].offset + k] = 0.1f * sinf(0.7f * (float)k + (float)i);

    /* the initial weights, through the checkpoint writer */
    snprintf(path, sizeof path, "%s/ckpt", out);
    ckpt_state st = {.iteration = 0, .consumed_train_samples = 0, .optimizer_step = 0,
                     .args = setup_json(&s)};
    if (ckpt_save(path, ps, &st, 1, err, sizeof(err)) != 0) {
        fprintf(stderr, "parity_dump: ckpt_save: %s\n", err);
        return 1;
    }
    cJSON_Delete(st.args);

    /* a fixed batch: a sample of T+1 tokens per row (repeats included), tokens = sample[:-1],
     * labels = sample[1:], some loss-mask zeros */
    int32_t tokens[BATCH * SEQ], labels[BATCH * SEQ];
    float loss_mask[BATCH * SEQ];
    for (int b = 0; b < B; b++) {
        int32_t sample[SEQ + 1];
        for (int t = 0; t <= T; t++) sample[t] = (int32_t)((b * 131 + t * t * 17 + t * 7 + 3) % 41 * 7 % VOCAB);
        for (int t = 0; t < T; t++) {
            tokens[b * T + t] = sample[t];
            labels[b * T + t] = sample[t + 1];
            loss_mask[b * T + t] = ((b * T + t) % 5 == 2 || (b == 1 && t == 0)) ? 0.0f : 1.0f;
        }
    }
    /* _packed: documents of 4, 6, 1 and 5 tokens in row 0, 9 and 7 in row 1 (the eod ends a
     * document); Megatron's position ids and document bounds from them */
    int32_t pos_ids[BATCH * SEQ], doc_start[BATCH * SEQ], doc_end[BATCH * SEQ];
    if (s.packed) {
        const int eods[] = {3, 9, 10, 16 + 8};
        for (size_t i = 0; i < sizeof eods / sizeof eods[0]; i++) {
            tokens[eods[i]] = EOD;
            if (eods[i] > 0) labels[eods[i] - 1] = EOD;
        }
        for (int b = 0; b < B; b++)
            packing_ltor(tokens + b * T, T, EOD, 1, 0, pos_ids + b * T, doc_start + b * T,
                         doc_end + b * T);
    }
    {
        int64_t shape[2] = {B, T};
        st_tensor_desc d[3] = {
            {.name = "tokens", .dtype = ST_I32, .ndim = 2, .shape = shape, .data = tokens},
            {.name = "labels", .dtype = ST_I32, .ndim = 2, .shape = shape, .data = labels},
            {.name = "loss_mask", .dtype = ST_F32, .ndim = 2, .shape = shape, .data = loss_mask},
        };
        snprintf(path, sizeof path, "%s/batch.safetensors", out);
        if (st_write_file(path, d, 3, NULL, 0, err, sizeof(err)) != 0) {
            fprintf(stderr, "parity_dump: %s\n", err);
            return 1;
        }
    }

    /* one forward + backward (loss_scale 1) from zero gradients */
    memset(ps->grad, 0, ps->numel * sizeof(float));
    gpt_step step0 = {.seed = s.seed, .iteration = 0, .microbatch = 0, .training = 0};
    gpt_batch batch = {.tokens = tokens, .labels = labels, .loss_mask = loss_mask, .B = B, .T = T};
    if (s.packed) {
        batch.position_ids = pos_ids;
        batch.doc_start = doc_start;
        batch.doc_end = doc_end;
    }
    float loss = gpt_model_forward(m, store, &batch, step0);
    gpt_model_backward(m, store, 1.0f);
    {
        st_tensor_desc d = {.name = "loss", .dtype = ST_F32, .ndim = 0, .shape = NULL,
                            .data = &loss};
        snprintf(path, sizeof path, "%s/grads.safetensors", out);
        if (write_named(path, ps, ps->grad, &d, 1)) return 1;
    }
    printf("parity_dump %s: %zu parameters in %d tensors, loss %.7f\n", s.family, ps->numel,
           ps->count, loss);

    /* STEPS training iterations as training.c's train_step does them (one micro-batch) */
    int64_t gbs = B;
    lr_scheduler sched = {.max_lr = s.lr, .min_lr = s.min_lr, .init_lr = 0.0,
                          .warmup_steps = (double)((int64_t)s.warmup_iters * gbs),
                          .decay_steps = (int64_t)s.decay_iters * gbs,
                          .wsd_decay_steps = 0,
                          .style = LR_COSINE,
                          .wsd_style = WSD_LINEAR};
    float losses[STEPS], norms[STEPS], lrs[STEPS], coeffs[STEPS];
    uint64_t consumed = 0;
    int clipped = 0;
    for (int it = 0; it < STEPS; it++) {
        memset(ps->grad, 0, ps->numel * sizeof(float));
        gpt_step step = {.seed = s.seed, .iteration = (uint32_t)it, .microbatch = 0,
                         .training = 1};
        losses[it] = gpt_model_forward(m, store, &batch, step);
        gpt_model_backward(m, store, 1.0f);
        norms[it] = optimizer_grad_norm(ps);
        optimizer_clip_grads(ps, norms[it], s.oc.clip_grad);
        float coeff = s.oc.clip_grad / (norms[it] + 1.0e-6f);
        coeffs[it] = coeff < 1.0f ? coeff : 1.0f;
        clipped += coeff < 1.0f;
        lrs[it] = (float)lr_scheduler_get(&sched, (int64_t)consumed);
        optimizer_step(ps, &s.oc, lrs[it], it + 1, HALF_NONE);
        gpt_model_params_to_bf16(m); /* the bits of train_step's fused pass (no-op in fp32) */
        consumed += gbs;
        printf("  step %d: loss %.7f grad norm %.6f (clip coeff %.4f) lr %.6e\n", it + 1,
               losses[it], norms[it], coeffs[it], lrs[it]);
    }
    if (!clipped) {
        fprintf(stderr, "parity_dump: clipping never triggered (clip_grad %.3g)\n",
                s.oc.clip_grad);
        return 1;
    }
    {
        int64_t n = STEPS;
        st_tensor_desc d[4] = {
            {.name = "losses", .dtype = ST_F32, .ndim = 1, .shape = &n, .data = losses},
            {.name = "grad_norms", .dtype = ST_F32, .ndim = 1, .shape = &n, .data = norms},
            {.name = "lrs", .dtype = ST_F32, .ndim = 1, .shape = &n, .data = lrs},
            {.name = "clip_coeffs", .dtype = ST_F32, .ndim = 1, .shape = &n, .data = coeffs},
        };
        snprintf(path, sizeof path, "%s/train.safetensors", out);
        if (write_named(path, ps, param_set_fp32(ps), d, 4)) return 1;
    }
    activation_store_free(store);
    gpt_model_free(m);
    return 0;
}
