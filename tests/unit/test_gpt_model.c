/* Whole-model checks: finite differences of the loss w.r.t. sampled parameters (both model
 * families, dropout on), gradient-accumulation equivalence, determinism of the counter-based
 * dropout, and no allocation during training steps. */
#include <math.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/models/gpt_model.h"
#include "core/optimizer/optimizer.h"
#include "core/random/philox.h"
#include "core/tensor/memory.h"
#include "fixture.h"
#include "test_util.h"

/* GPT-2-like: init std large enough that every path matters; padded vocabulary 64 (63 tokens
 * and the mock data's EOD) */
#define GPT2_FLAGS                                                                         \
    "--num-layers 2 --hidden-size 32 --ffn-hidden-size 128 --num-attention-heads 4 "       \
    "--seq-length 12 --max-position-embeddings 16 --vocab-size 63 "                        \
    "--make-vocab-size-divisible-by 64 --init-method-std 0.2 --hidden-dropout 0.1 "        \
    "--attention-dropout 0.1"
/* Llama-like on top, without its QK layernorm: kv_channels 12 (!= hidden / heads) and partial
 * rotary (8 of the 12 channels) */
#define LLAMA_ARCH_FLAGS                                                                   \
    GPT2_FLAGS " --normalization RMSNorm --swiglu --ffn-hidden-size 48 "                   \
               "--group-query-attention --num-query-groups 2 --kv-channels 12 "            \
               "--disable-bias-linear --position-embedding-type rope --rotary-base 10000 " \
               "--rotary-percent 0.6666667 --untie-embeddings-and-output-weights"

static transformer_config gpt2_config(void) { return fixture_config(GPT2_FLAGS); }
static transformer_config llama_config(void) {
    return fixture_config(LLAMA_ARCH_FLAGS " --qk-layernorm");
}
/* Qwen2 (--disable-bias-linear --add-qkv-bias): a bias on linear_qkv alone. */
static transformer_config qwen2_config(void) {
    return fixture_config(LLAMA_ARCH_FLAGS " --add-qkv-bias");
}

/* --add-qkv-bias: linear_qkv.bias in every layer, no other linear bias. */
static void check_qkv_bias_tensors(transformer_config c) {
    gpt_model *m = gpt_model_create(&c, 1, GPT_MODEL_TRAINING);
    int qkv = 0, other = 0;
    for (int i = 0; i < m->params.count; i++) {
        const param_tensor *t = &m->params.tensors[i];
        if (strstr(t->name, "linear_qkv.bias")) {
            qkv++;
            CHECK(t->numel == (size_t)tc_qkv_width(&c));
        } else if (strstr(t->name, "linear_") && strstr(t->name, ".bias")) {
            other++;
        }
    }
    printf("qwen2: %d linear_qkv biases, %d other linear biases\n", qkv, other);
    CHECK(qkv == c.num_layers && other == 0);
    gpt_model_free(m);
}

static void make_batch(int32_t *tok, int32_t *lab, float *mask, int N, int V, uint64_t seed) {
    for (int i = 0; i < N; i++) {
        uint32_t ctr[4] = {(uint32_t)i, 0, 0, 0}, key[2] = {(uint32_t)seed, 1}, r[4];
        philox4x32_10(ctr, key, r);
        tok[i] = (int32_t)(r[0] % V);
        lab[i] = (int32_t)(r[1] % V);
        mask[i] = (r[2] % 5 == 0) ? 0.0f : 1.0f;
    }
}

/* Forward of one micro-batch (tokens, labels, loss mask [B, T]) on the store s. */
static float forward(gpt_model *m, activation_store *s, const int32_t *tok, const int32_t *lab,
                     const float *mask, int B, int T, gpt_step step) {
    gpt_batch b = {.tokens = tok, .labels = lab, .loss_mask = mask, .B = B, .T = T};
    return gpt_model_forward(m, s, &b, step);
}

/* Central differences of the loss for sampled parameters vs the analytic gradient. */
static void check_finite_differences(transformer_config c, const char *family) {
    int B = 2, T = c.seq_length, N = B * T;
    gpt_model *m = gpt_model_create(&c, B, GPT_MODEL_TRAINING);
    activation_store *s = activation_store_create(m, 1);
    gpt_model_init_params(m, 42);
    int32_t tok[64], lab[64];
    float mask[64];
    make_batch(tok, lab, mask, N, c.padded_vocab_size - 5, 7);
    gpt_step step = {.seed = 3, .iteration = 1, .microbatch = 0, .training = 1};
    param_set *ps = &m->params;
    memset(ps->grad, 0, ps->numel * sizeof(float));
    forward(m, s, tok, lab, mask, B, T, step);
    gpt_model_backward(m, s, 1.0f);

    /* For every tensor, probe its largest-gradient element and one pseudo-random element.
     * float32 forward: step 1e-2 on O(0.2) weights; loss differences are ~1e-4 absolute, so
     * accept |fd - g| <= 2e-3 * max|grad of tensor| + 2e-4. A wrong backward is off by O(g). */
    int worst_failures = test_failures;
    for (int t = 0; t < ps->count; t++) {
        const param_tensor *pt = &ps->tensors[t];
        float *w = ps->data + pt->offset, *g = ps->grad + pt->offset;
        size_t imax = 0;
        float gmax = 0.0f;
        for (size_t i = 0; i < pt->numel; i++)
            if (fabsf(g[i]) > gmax) gmax = fabsf(g[i]), imax = i;
        size_t probes[2] = {imax, (size_t)(t * 7919u + 13u) % pt->numel};
        for (int k = 0; k < 2; k++) {
            size_t i = probes[k];
            float orig = w[i], h = 1e-2f;
            w[i] = orig + h;
            double lp = forward(m, s, tok, lab, mask, B, T, step);
            w[i] = orig - h;
            double lm = forward(m, s, tok, lab, mask, B, T, step);
            w[i] = orig;
            double fd = (lp - lm) / (2.0 * h);
            double tol = 2e-3 * gmax + 2e-4;
            test_checks++;
            if (fabs(fd - g[i]) > tol) {
                fprintf(stderr, "%s: %s[%zu]: analytic %.6g, finite difference %.6g (tol %.2g)\n",
                        family, pt->name, i, g[i], fd, tol);
                test_failures++;
            }
        }
    }
    printf("%s: finite differences over %d tensors: %s\n", family, ps->count,
           test_failures == worst_failures ? "ok" : "FAILED");
    activation_store_free(s);
    gpt_model_free(m);
}

/* One micro-batch of 4 vs two of 2 with loss_scale 1/2: same gradients (to rounding). */
static void check_grad_accumulation(transformer_config c, const char *family) {
    c.hidden_dropout = c.attention_dropout = 0.0f; /* masks depend on the micro-batch index */
    int T = c.seq_length;
    gpt_model *big = gpt_model_create(&c, 4, GPT_MODEL_TRAINING);
    gpt_model *small = gpt_model_create(&c, 2, GPT_MODEL_TRAINING);
    activation_store *sb = activation_store_create(big, 1), *ss = activation_store_create(small, 1);
    gpt_model_init_params(big, 5);
    gpt_model_init_params(small, 5);
    int32_t tok[4 * 16], lab[4 * 16];
    float mask[4 * 16];
    make_batch(tok, lab, mask, 4 * T, c.padded_vocab_size, 11);
    for (int i = 0; i < 4 * T; i++) mask[i] = 1.0f; /* equal token counts per micro-batch */
    gpt_step step = {.seed = 1, .iteration = 1, .training = 1};
    memset(big->params.grad, 0, big->params.numel * sizeof(float));
    float loss_big = forward(big, sb, tok, lab, mask, 4, T, step);
    gpt_model_backward(big, sb, 1.0f);
    memset(small->params.grad, 0, small->params.numel * sizeof(float));
    float loss_small = 0.0f;
    for (int mb = 0; mb < 2; mb++) {
        step.microbatch = mb;
        loss_small += 0.5f * forward(small, ss, tok + mb * 2 * T, lab + mb * 2 * T,
                                     mask + mb * 2 * T, 2, T, step);
        gpt_model_backward(small, ss, 0.5f);
    }
    CHECK_CLOSE(loss_small, loss_big, 1e-6, 0);
    double maxdiff = 0.0, maxref = 0.0;
    for (size_t i = 0; i < big->params.numel; i++) {
        maxdiff = fmax(maxdiff, fabs(big->params.grad[i] - small->params.grad[i]));
        maxref = fmax(maxref, fabs(big->params.grad[i]));
    }
    printf("%s: gradient accumulation max |diff| / max |grad| = %.3g\n", family, maxdiff / maxref);
    CHECK(maxdiff <= 1e-5 * maxref);
    activation_store_free(sb);
    activation_store_free(ss);
    gpt_model_free(big);
    gpt_model_free(small);
}

/* Dropout masks are a function of the key: the same key gives the same bits, another
 * iteration a different loss; and training steps allocate nothing. */
static void check_determinism_and_no_alloc(transformer_config c) {
    int B = 2, T = c.seq_length, N = B * T;
    gpt_model *m = gpt_model_create(&c, B, GPT_MODEL_TRAINING);
    activation_store *s = activation_store_create(m, 1);
    gpt_model_init_params(m, 9);
    int32_t tok[64], lab[64];
    float mask[64];
    make_batch(tok, lab, mask, N, c.padded_vocab_size, 3);
    gpt_step step = {.seed = 77, .iteration = 5, .microbatch = 1, .training = 1};
    float a = forward(m, s, tok, lab, mask, B, T, step);
    float b = forward(m, s, tok, lab, mask, B, T, step);
    CHECK(memcmp(&a, &b, sizeof(float)) == 0);
    step.iteration = 6;
    float d = forward(m, s, tok, lab, mask, B, T, step);
    CHECK(a != d);
    step.training = 0;
    float e1 = forward(m, s, tok, lab, mask, B, T, step);
    step.iteration = 99;
    float e2 = forward(m, s, tok, lab, mask, B, T, step);
    CHECK(e1 == e2); /* no dropout outside training */

    optimizer_config oc = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                           .clip_grad = 1.0f};
    unsigned long before = mem_alloc_count();
    size_t peak = mem_total_peak();
    for (int it = 1; it <= 3; it++) {
        memset(m->params.grad, 0, m->params.numel * sizeof(float));
        step.training = 1;
        step.iteration = it;
        forward(m, s, tok, lab, mask, B, T, step);
        gpt_model_backward(m, s, 1.0f);
        float norm = optimizer_grad_norm(&m->params);
        optimizer_clip_grads(&m->params, norm, oc.clip_grad);
        optimizer_step(&m->params, &oc, 1e-3f, it, HALF_NONE);
    }
    CHECK(mem_alloc_count() == before);
    CHECK(mem_total_peak() == peak);
    activation_store_free(s);
    gpt_model_free(m);
}

/* Saved bytes per layer == the table of docs/MEMORY.md, written out here independently. Under
 * --bf16 (--fp16) everything but the norms' statistics is bf16 (fp16). */
static void check_saved_bytes(transformer_config c, int B, const char *family) {
    gpt_model *m = gpt_model_create(&c, B, GPT_MODEL_TRAINING);
    activation_store *st = activation_store_create(m, 1);
    size_t s = c.seq_length, b = B, N = s * b, h = c.hidden_size, a = c.num_attention_heads;
    size_t g = c.num_query_groups, d = c.kv_channels, f = c.ffn_hidden_size;
    size_t Q = g * (a / g + 2) * d;
    int ln = c.normalization == NORM_LAYERNORM;
    size_t halves = N * h + N * a * d + N * h + N * f        /* ln1, ctx, ln2, act */
                    + (c.qk_layernorm ? N * Q : 0) + N * Q   /* qkv_raw, qkv */
                    + N * f * (c.swiglu ? 2 : 1)             /* fc1 */
                    + N * h                                  /* res1 */
                    + N * h                                  /* hidden[l] */
                    + a * s * s * b;                         /* probs */
    size_t floats = (ln ? N : 0) + N                         /* ln1's mean, rstd */
                    + (c.qk_layernorm ? (ln ? N * (a + g) : 0) + N * (a + g) : 0) /* q/k stats */
                    + (ln ? N : 0) + N;                      /* ln2's mean, rstd */
    size_t bytes = 4 * floats + (c.bf16 || c.fp16 ? 2 : 4) * halves;
    for (int l = 0; l < c.num_layers; l++)
        CHECK(activation_store_layer_saved_bytes(st, l) == bytes);
    if (!c.bf16 && !c.fp16 && !c.qk_layernorm && ln && a == g && d * a == h && f == 4 * h)
        CHECK(bytes == 64 * s * b * h + 4 * a * s * s * b + 16 * s * b);
    printf("%s%s: saved activations per layer %zu bytes\n", family,
           c.bf16 ? " --bf16" : c.fp16 ? " --fp16" : "", bytes);
    activation_store_free(st);
    gpt_model_free(m);
}

static transformer_config with_bf16(transformer_config c) {
    c.bf16 = 1;
    return c;
}

static transformer_config with_fp16(transformer_config c) {
    c.fp16 = 1;
    return c;
}

/* The backward's "gradients done" ranges tile the flat buffer exactly once, head first and
 * embedding last, and every gradient element they cover is final when reported. */
static size_t g_covered, g_calls, g_prev_begin;
static int g_order_ok = 1;
static gpt_model *g_model;
static float *g_snapshot;
static void on_done(void *user, size_t begin, size_t end) {
    (void)user;
    if (g_calls > 0 && end != g_prev_begin) g_order_ok = 0; /* backward order: ranges descend */
    g_prev_begin = begin;
    g_covered += end - begin;
    g_calls++;
    memcpy(g_snapshot + begin, g_model->params.grad + begin, (end - begin) * sizeof(float));
}
static void check_grads_done_hook(transformer_config c) {
    int B = 2, T = c.seq_length;
    gpt_model *m = g_model = gpt_model_create(&c, B, GPT_MODEL_TRAINING);
    activation_store *s = activation_store_create(m, 1);
    gpt_model_init_params(m, 3);
    g_snapshot = calloc(m->params.numel, sizeof(float));
    m->grads_done = on_done;
    int32_t tok[64], lab[64];
    float mask[64];
    make_batch(tok, lab, mask, B * T, c.padded_vocab_size, 5);
    gpt_step step = {.seed = 1, .iteration = 1, .training = 1};
    memset(m->params.grad, 0, m->params.numel * sizeof(float));
    forward(m, s, tok, lab, mask, B, T, step);
    gpt_model_backward(m, s, 1.0f);
    CHECK(g_covered == m->params.numel);
    CHECK(g_calls == (size_t)c.num_layers + 2);
    CHECK(g_order_ok && g_prev_begin == 0);
    CHECK(memcmp(g_snapshot, m->params.grad, m->params.numel * sizeof(float)) == 0);
    free(g_snapshot);
    activation_store_free(s);
    gpt_model_free(m);
    g_covered = g_calls = g_prev_begin = 0;
}

/* --debug --detect-anomaly: backward dies at the first non-finite gradient, naming the tensor
 * (here layer 0's linear_fc2.weight, poisoned in the gradient buffer: the head's and layer
 * 1's results are finite, so the check must get as far as layer 0); a clean backward passes.
 * The dying run is a child forked before this process has started any thread (a forked
 * child has none of its parent's threads): called first in main. */
static void anomaly_run(transformer_config c, int poison) {
    c.hidden_dropout = c.attention_dropout = 0.0f;
    int B = 1, T = c.seq_length;
    gpt_model *m = gpt_model_create(&c, B, GPT_MODEL_TRAINING);
    activation_store *s = activation_store_create(m, 1);
    gpt_model_init_params(m, 4);
    m->detect_anomaly = 1;
    snprintf(m->anomaly_where, sizeof m->anomaly_where, "iteration 7, micro-batch 0");
    int32_t tok[16], lab[16];
    float mask[16];
    make_batch(tok, lab, mask, B * T, c.padded_vocab_size, 5);
    gpt_step step = {.seed = 1, .iteration = 1, .training = 1};
    memset(m->params.grad, 0, m->params.numel * sizeof(float));
    for (int i = 0; i < m->params.count && poison; i++)
        if (!strcmp(m->params.tensors[i].name, "decoder.layers.0.mlp.linear_fc2.weight"))
            m->params.grad[m->params.tensors[i].offset + 3] = NAN;
    forward(m, s, tok, lab, mask, B, T, step);
    gpt_model_backward(m, s, 1.0f);
    activation_store_free(s);
    gpt_model_free(m);
}

static void check_detect_anomaly(transformer_config c) {
    int pipefd[2];
    CHECK(pipe(pipefd) == 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) { /* the child dies in backward, its stderr into the pipe */
        dup2(pipefd[1], 2);
        close(pipefd[0]);
        anomaly_run(c, 1);
        _exit(0);
    }
    close(pipefd[1]);
    char msg[1024] = "";
    size_t len = 0;
    ssize_t r;
    while (len < sizeof msg - 1 && (r = read(pipefd[0], msg + len, sizeof msg - 1 - len)) > 0)
        len += (size_t)r;
    msg[len] = 0;
    close(pipefd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    printf("detect-anomaly: child exit %d: %s", WIFEXITED(status) ? WEXITSTATUS(status) : -1, msg);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) != 0);
    /* the caller's words first, then the tensor's (the flag is training's to name) */
    CHECK(strstr(msg, "iteration 7, micro-batch 0: the gradient of "
                      "decoder.layers.0.mlp.linear_fc2.weight has a non-finite value") != NULL);
    anomaly_run(c, 0); /* finite: must not die */
}

int main(void) {
    check_detect_anomaly(llama_config()); /* first: it forks */
    check_grads_done_hook(gpt2_config());
    check_grads_done_hook(llama_config());
    check_saved_bytes(gpt2_config(), 3, "gpt2");
    check_saved_bytes(llama_config(), 2, "llama");
    check_saved_bytes(with_bf16(gpt2_config()), 3, "gpt2");
    check_saved_bytes(with_bf16(llama_config()), 2, "llama");
    check_saved_bytes(with_fp16(gpt2_config()), 3, "gpt2");
    check_saved_bytes(with_fp16(llama_config()), 2, "llama");
    check_finite_differences(gpt2_config(), "gpt2");
    check_finite_differences(llama_config(), "llama");
    check_qkv_bias_tensors(qwen2_config());
    check_finite_differences(qwen2_config(), "qwen2 (--add-qkv-bias)");
    transformer_config bidirectional = qwen2_config();
    bidirectional.causal = 0; /* --attention-mask-type no_mask */
    check_finite_differences(bidirectional, "qwen2 no_mask");
    /* difflm-noshift with learned positions: bidirectional, positions looked up from 1 */
    transformer_config gpt2_dlm = gpt2_config();
    gpt2_dlm.causal = 0;
    gpt2_dlm.position_offset = 1;
    check_finite_differences(gpt2_dlm, "gpt2 no_mask, learned positions from 1");
    check_grad_accumulation(gpt2_config(), "gpt2");
    check_grad_accumulation(llama_config(), "llama");
    check_determinism_and_no_alloc(gpt2_config());
    check_determinism_and_no_alloc(llama_config());
    check_determinism_and_no_alloc(with_bf16(gpt2_config()));
    check_determinism_and_no_alloc(with_bf16(llama_config()));
    check_determinism_and_no_alloc(with_fp16(gpt2_config()));
    check_determinism_and_no_alloc(with_fp16(llama_config()));
    TEST_DONE();
}
