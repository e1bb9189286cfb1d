/* Unit tests of src/training/arguments.c: Megatron's defaults, parsing (strict numbers,
 * negative flags, --data-path lists, refused flags), every validation rule (the message must
 * name the flags), derived values computed by hand from Megatron's formulas, --help,
 * args_print and the JSON round trip. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "core/optimizer/optimizer.h"
#include "core/optimizer/optimizer_param_scheduler.h"
#include "training/arguments.h"
#include "training/model_provider.h"
#include "training/training_setup.h"

#define BASE                                                                                  \
    "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "               \
    "--max-position-embeddings 64 --micro-batch-size 2 --train-iters 10 --lr 1e-3 "          \
    "--mock-data --vocab-size 100"

/* BASE without a training length */
#define BASE_NO_ITERS                                                                     \
    "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "            \
    "--max-position-embeddings 64 --micro-batch-size 2 --lr 1e-3 --mock-data --vocab-size 100"

static char ERR[1024];

/* Splits line at spaces into argv (argv[0] = "train") and parses into a (defaults first). */
static int parse_line(megadlm_args *a, const char *line) {
    static char buf[4096];
    char *argv[256];
    int argc = 0;
    argv[argc++] = "train";
    snprintf(buf, sizeof(buf), "%s", line);
    for (char *t = strtok(buf, " "); t && argc < 255; t = strtok(NULL, " ")) argv[argc++] = t;
    argv[argc] = NULL;
    args_defaults(a);
    ERR[0] = 0;
    return args_parse(a, argc, argv, ERR, sizeof(ERR));
}

/* parse + validate; 0 when both succeed */
static int run_line(megadlm_args *a, const char *line) {
    int rc = parse_line(a, line);
    if (rc != 0) return rc;
    return args_validate(a, ERR, sizeof(ERR));
}

static int contains(const char *s, const char *a, const char *b, const char *c) {
    return strstr(s, a) && (!b || strstr(s, b)) && (!c || strstr(s, c));
}

/* Expects line to fail (at parse or validation) with a message containing s1, s2, s3. */
#define EXPECT_ERR(line, s1, s2, s3)                                                      \
    do {                                                                                  \
        megadlm_args _a;                                                                  \
        int _rc = run_line(&_a, line);                                                    \
        CHECK(_rc == -1);                                                                 \
        CHECK(contains(ERR, s1, s2, s3));                                                 \
        if (_rc != -1 || !contains(ERR, s1, s2, s3))                                      \
            fprintf(stderr, "  line: %s\n  rc %d, message: '%s'\n", line, _rc, ERR);      \
        args_free(&_a);                                                                   \
    } while (0)

#define EXPECT_OK(a, line)                                                                \
    do {                                                                                  \
        int _rc = run_line(a, line);                                                      \
        CHECK(_rc == 0);                                                                  \
        if (_rc != 0) fprintf(stderr, "  line: %s\n  rc %d, message: '%s'\n", line, _rc, ERR); \
    } while (0)

static char *cap_buf;
static size_t cap_len;

/* Output of args_print_help / args_print as a malloc'd string (caller frees). */
static char *capture_help(void) {
    cap_buf = NULL;
    FILE *f = open_memstream(&cap_buf, &cap_len);
    if (!f) return NULL;
    args_print_help("train", f);
    fclose(f);
    return cap_buf;
}

static char *capture_print(const megadlm_args *a) {
    cap_buf = NULL;
    FILE *f = open_memstream(&cap_buf, &cap_len);
    if (!f) return NULL;
    args_print(a, f);
    fclose(f);
    return cap_buf;
}

static void test_defaults(void) {
    megadlm_args a;
    args_defaults(&a);
    CHECK(a.num_layers == 0 && a.hidden_size == 0 && a.num_attention_heads == 0);
    CHECK(a.ffn_hidden_size == 0 && a.kv_channels == 0);
    CHECK(a.group_query_attention == 0 && a.num_query_groups == 0);
    CHECK(a.max_position_embeddings == 0 && a.seq_length == 0);
    CHECK(strcmp(a.position_embedding_type, "learned_absolute") == 0);
    CHECK(a.rotary_base == 10000.0f);
    CHECK(a.rotary_percent == 1.0f);
    CHECK(strcmp(a.normalization, "LayerNorm") == 0);
    CHECK(a.norm_epsilon == 1e-5f);
    CHECK(a.qk_layernorm == 0 && a.swiglu == 0 && a.openai_gelu == 0);
    CHECK(a.add_bias_linear == 1);
    CHECK(a.bias_gelu_fusion == 1);
    CHECK(a.untie_embeddings_and_output_weights == 0);
    CHECK(a.make_vocab_size_divisible_by == 128);
    CHECK(a.init_method_std == 0.02f);
    CHECK(a.hidden_dropout == 0.1f);
    CHECK(a.attention_dropout == 0.1f);
    CHECK(a.tokenizer_type[0] == 0 && a.vocab_size == 0 && a.padded_vocab_size == 0);
    CHECK(a.mock_data == 0 && a.num_data_paths == 0 && a.data_weighted == 0);
    CHECK(strcmp(a.split, "969, 30, 1") == 0);
    CHECK(a.eod_mask_loss == 0);
    CHECK(a.micro_batch_size == 0 && a.global_batch_size == 0 && a.train_iters == 0);
    CHECK(a.seed == 1234);
    CHECK(strcmp(a.optimizer, "adam") == 0);
    CHECK(isnan(a.lr)); /* required: unset */
    CHECK(a.min_lr == 0.0f);
    CHECK(a.lr_warmup_iters == 0);
    CHECK(a.lr_warmup_fraction < 0);
    CHECK(a.lr_decay_iters == 0);
    CHECK(strcmp(a.lr_decay_style, "linear") == 0);
    CHECK(strcmp(a.lr_wsd_decay_style, "exponential") == 0);
    CHECK(a.lr_wsd_decay_iters == -1); /* None */
    CHECK(a.adam_beta1 == 0.9f);
    CHECK(a.adam_beta2 == 0.999f);
    CHECK(a.adam_eps == 1e-8f);
    CHECK(a.weight_decay == 0.01f);
    CHECK(a.clip_grad == 1.0f);
    CHECK(a.log_interval == 100);
    CHECK(a.eval_interval == 1000);
    CHECK(a.eval_iters == 100);
    CHECK(a.log_memory == 0);
    CHECK(a.save[0] == 0 && a.save_interval == 0 && a.load[0] == 0);
    CHECK(a.tensor_model_parallel_size == 1 && a.pipeline_model_parallel_size == 1);
    CHECK(a.world_size == 0); /* not given: TP x PP (train sets the launcher's) */
    CHECK(a.sequence_parallel == 0 && a.use_distributed_optimizer == 0);
    CHECK(a.num_layers_per_virtual_pipeline_stage == 0 &&
          a.virtual_pipeline_model_parallel_size == 0);
    CHECK(a.exit_interval == 0);
    args_free(&a);
}

static void test_parse_values(void) {
    megadlm_args a;
    int rc = parse_line(&a,
                        "--num-layers 12 --hidden-size=768 --num-attention-heads 12 "
                        "--ffn-hidden-size 3000 --kv-channels 64 --seq-length 1024 "
                        "--max-position-embeddings 2048 --position-embedding-type rope "
                        "--rotary-base 500000 --rotary-percent 0.5 --normalization RMSNorm "
                        "--norm-epsilon 1e-6 --qk-layernorm --swiglu --disable-bias-linear "
                        "--no-bias-gelu-fusion --untie-embeddings-and-output-weights "
                        "--make-vocab-size-divisible-by 64 --init-method-std 0.006 "
                        "--hidden-dropout 0 --attention-dropout 0.05 --tokenizer-type ByteLevel "
                        "--eod-mask-loss --micro-batch-size 4 --global-batch-size 32 "
                        "--train-iters 500 --seed 42 --lr 6e-4 --min-lr 6e-5 "
                        "--lr-decay-style cosine --lr-decay-iters 400 --lr-warmup-iters 20 "
                        "--adam-beta1 0.8 --adam-beta2 0.95 --adam-eps 1e-6 --weight-decay 0.1 "
                        "--clip-grad 0.5 --log-interval 5 --eval-interval 50 --eval-iters 7 "
                        "--log-memory --save /tmp/ck --save-interval 100 --load /tmp/old "
                        "--exit-interval 250 "
                        "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 "
                        "--data-path /data/kjv");
    CHECK(rc == 0);
    if (rc) fprintf(stderr, "  %s\n", ERR);
    CHECK(a.num_layers == 12 && a.hidden_size == 768 && a.num_attention_heads == 12);
    CHECK(a.ffn_hidden_size == 3000 && a.kv_channels == 64);
    CHECK(a.seq_length == 1024 && a.max_position_embeddings == 2048);
    CHECK(strcmp(a.position_embedding_type, "rope") == 0);
    CHECK(a.rotary_base == 500000.0f && a.rotary_percent == 0.5f);
    CHECK(strcmp(a.normalization, "RMSNorm") == 0 && a.norm_epsilon == 1e-6f);
    CHECK(a.qk_layernorm == 1 && a.swiglu == 1);
    CHECK(a.add_bias_linear == 0);   /* --disable-bias-linear */
    CHECK(a.bias_gelu_fusion == 0);  /* --no-bias-gelu-fusion */
    CHECK(a.untie_embeddings_and_output_weights == 1);
    CHECK(a.make_vocab_size_divisible_by == 64 && a.init_method_std == 0.006f);
    CHECK(a.hidden_dropout == 0.0f && a.attention_dropout == 0.05f);
    CHECK(strcmp(a.tokenizer_type, "ByteLevel") == 0 && a.eod_mask_loss == 1);
    CHECK(a.micro_batch_size == 4 && a.global_batch_size == 32 && a.train_iters == 500);
    CHECK(a.seed == 42 && a.lr == 6e-4f && a.min_lr == 6e-5f);
    CHECK(strcmp(a.lr_decay_style, "cosine") == 0 && a.lr_decay_iters == 400);
    CHECK(a.lr_warmup_iters == 20);
    CHECK(a.adam_beta1 == 0.8f && a.adam_beta2 == 0.95f && a.adam_eps == 1e-6f);
    CHECK(a.weight_decay == 0.1f && a.clip_grad == 0.5f);
    CHECK(a.log_interval == 5 && a.eval_interval == 50 && a.eval_iters == 7 && a.log_memory == 1);
    CHECK(strcmp(a.save, "/tmp/ck") == 0 && a.save_interval == 100);
    CHECK(strcmp(a.load, "/tmp/old") == 0);
    CHECK(a.exit_interval == 250);
    CHECK(a.num_data_paths == 1 && a.data_weighted == 0);
    CHECK(a.num_data_paths == 1 && strcmp(a.data_paths[0], "/data/kjv") == 0);
    CHECK(args_validate(&a, ERR, sizeof(ERR)) == 0);
    if (ERR[0]) fprintf(stderr, "  %s\n", ERR);
    args_free(&a);
    CHECK(a.num_data_paths == 0);

    /* no flags at all: nothing changes */
    char *argv0[] = {"train", NULL};
    args_defaults(&a);
    CHECK(args_parse(&a, 1, argv0, ERR, sizeof(ERR)) == 0);
    CHECK(a.log_interval == 100);

    /* --lr-warmup-fraction, --lr-wsd-*, --group-query-attention, --openai-gelu */
    rc = parse_line(&a, "--lr-warmup-fraction 0.01 --lr-wsd-decay-style cosine "
                        "--lr-wsd-decay-iters 30 --group-query-attention --num-query-groups 2 "
                        "--openai-gelu --optimizer adam --split 90,5,5");
    CHECK(rc == 0);
    CHECK(a.lr_warmup_fraction == 0.01f && a.lr_wsd_decay_iters == 30);
    CHECK(strcmp(a.lr_wsd_decay_style, "cosine") == 0);
    CHECK(a.group_query_attention == 1 && a.num_query_groups == 2 && a.openai_gelu == 1);
    CHECK(strcmp(a.split, "90,5,5") == 0);
    args_free(&a);

    /* a split with spaces, as one argv word (the way a shell passes "969, 30, 1") */
    char *argv1[] = {"train", "--split", "98, 1.5, 0.5", NULL};
    args_defaults(&a);
    CHECK(args_parse(&a, 3, argv1, ERR, sizeof(ERR)) == 0);
    CHECK(strcmp(a.split, "98, 1.5, 0.5") == 0);

    /* empty words (what "${args[@]/--mock-data/}" leaves in a shell) are skipped */
    char *argv2[] = {"train", "--num-layers", "4", "", "--data-path", "0.5", "A", "", "0.5", "B",
                     "", "--swiglu", "", NULL};
    args_defaults(&a);
    CHECK(args_parse(&a, 13, argv2, ERR, sizeof(ERR)) == 0);
    CHECK(a.num_layers == 4 && a.swiglu == 1 && a.num_data_paths == 2);
    CHECK(a.num_data_paths == 2 && strcmp(a.data_paths[1], "B") == 0);
    args_free(&a);

    /* a large seed */
    CHECK(parse_line(&a, "--seed 18446744073709551615") == 0);
    CHECK(a.seed == 18446744073709551615ULL);

    /* parsing can be repeated (getopt state is reset) */
    CHECK(parse_line(&a, "--num-layers 3") == 0 && a.num_layers == 3);
    CHECK(parse_line(&a, "--num-layers 5") == 0 && a.num_layers == 5);
}

static void test_parse_errors(void) {
    megadlm_args a;
    /* strict numbers */
    CHECK(parse_line(&a, "--num-layers abc") == -1);
    CHECK(strcmp(ERR, "--num-layers: expected an integer, found 'abc'") == 0);
    CHECK(parse_line(&a, "--num-layers 12x") == -1);
    CHECK(strcmp(ERR, "--num-layers: expected an integer, found '12x'") == 0);
    CHECK(parse_line(&a, "--num-layers 1.5") == -1);
    CHECK(strstr(ERR, "--num-layers: expected an integer, found '1.5'") != NULL);
    CHECK(parse_line(&a, "--num-layers 99999999999") == -1);
    CHECK(strstr(ERR, "--num-layers: '99999999999' is out of range (a 32-bit integer") != NULL);
    CHECK(parse_line(&a, "--seq-length -99999999999") == -1);
    CHECK(strstr(ERR, "--seq-length: '-99999999999' is out of range") != NULL);
    CHECK(parse_line(&a, "--num-layers 0") == -1);
    CHECK(strstr(ERR, "--num-layers: expected a positive integer, found '0'") != NULL);
    CHECK(parse_line(&a, "--hidden-size -64") == -1);
    CHECK(strstr(ERR, "--hidden-size: expected a positive integer") != NULL);
    CHECK(parse_line(&a, "--eval-iters -1") == -1);
    CHECK(strstr(ERR, "--eval-iters: expected a non-negative integer") != NULL);
    CHECK(parse_line(&a, "--lr 1e-3x") == -1);
    CHECK(strcmp(ERR, "--lr: expected a number, found '1e-3x'") == 0);
    CHECK(parse_line(&a, "--lr abc") == -1);
    CHECK(strstr(ERR, "--lr: expected a number, found 'abc'") != NULL);
    CHECK(parse_line(&a, "--lr nan") == -1);
    CHECK(strstr(ERR, "--lr: expected a number") != NULL);
    CHECK(parse_line(&a, "--clip-grad 1e400") == -1);
    CHECK(strstr(ERR, "--clip-grad: '1e400' is out of range (a 32-bit float") != NULL);
    /* finite as a double, not as a float (the field's type): out of range, not "not a number" */
    CHECK(parse_line(&a, "--lr 1e300") == -1);
    CHECK(strstr(ERR, "--lr: '1e300' is out of range (a 32-bit float") != NULL);
    CHECK(parse_line(&a, "--lr -1e39") == -1);
    CHECK(strstr(ERR, "--lr: '-1e39' is out of range") != NULL);
    CHECK(parse_line(&a, "--lr 1e-50") == -1); /* would round to 0 */
    CHECK(strstr(ERR, "--lr: '1e-50' is out of range") != NULL);
    CHECK(parse_line(&a, "--lr 1e-40") == 0 && a.lr > 0.0f); /* a subnormal float */
    CHECK(parse_line(&a, "--lr 0") == 0 && a.lr == 0.0f);
    CHECK(parse_line(&a, "--lr inf") == -1);
    CHECK(strstr(ERR, "--lr: expected a number, found 'inf'") != NULL);
    /* a FLOAT_NONE flag's None is a negative value: a negative one given is refused, not None */
    CHECK(parse_line(&a, "--loss-scale -2") == -1);
    CHECK(strstr(ERR, "--loss-scale: expected a positive number, found '-2'") != NULL);
    CHECK(parse_line(&a, "--lr-warmup-fraction -0.5") == -1);
    CHECK(strstr(ERR, "--lr-warmup-fraction: expected a non-negative number, found '-0.5'") != NULL);
    CHECK(parse_line(&a, "--loss-scale 8") == 0 && a.loss_scale == 8.0f);
    CHECK(parse_line(&a, "--lr=") == -1);
    CHECK(strstr(ERR, "--lr: expected a number, found ''") != NULL);
    CHECK(parse_line(&a, "--seed -1") == -1);
    CHECK(strstr(ERR, "--seed: expected a non-negative integer, found '-1'") != NULL);
    CHECK(parse_line(&a, "--seed 18446744073709551616") == -1);
    CHECK(strstr(ERR, "--seed: expected") != NULL);

    /* missing values */
    CHECK(parse_line(&a, "--num-layers 2 --lr") == -1);
    CHECK(strcmp(ERR, "--lr: expects a value") == 0);
    CHECK(parse_line(&a, "--lr --seed 3") == -1);
    CHECK(strcmp(ERR, "--lr: expects a value") == 0);
    CHECK(parse_line(&a, "--data-path --mock-data") == -1);
    CHECK(strcmp(ERR, "--data-path: expects a value") == 0);
    CHECK(parse_line(&a, "--save") == -1);
    CHECK(strcmp(ERR, "--save: expects a value") == 0);

    /* boolean flags take no value */
    CHECK(parse_line(&a, "--swiglu=1") == -1);
    CHECK(strcmp(ERR, "--swiglu: takes no value") == 0);

    /* unknown flags, abbreviations (Megatron: allow_abbrev=False), stray words */
    CHECK(parse_line(&a, "--num-layers 2 --foo") == -1);
    CHECK(strcmp(ERR, "unknown flag '--foo' (see megadlm train --help)") == 0);
    CHECK(parse_line(&a, "--foo=3") == -1);
    CHECK(strcmp(ERR, "unknown flag '--foo' (see megadlm train --help)") == 0);
    CHECK(parse_line(&a, "--num-lay 4") == -1);
    CHECK(strcmp(ERR, "unknown flag '--num-lay' (see megadlm train --help)") == 0);
    CHECK(parse_line(&a, "--swig") == -1);
    CHECK(strstr(ERR, "unknown flag '--swig'") != NULL);
    CHECK(parse_line(&a, "--lr-warmup 3") == -1); /* ambiguous prefix */
    CHECK(strstr(ERR, "unknown flag '--lr-warmup'") != NULL);
    CHECK(parse_line(&a, "-x") == -1);
    CHECK(strstr(ERR, "unknown flag '-x'") != NULL);
    CHECK(parse_line(&a, "--num-layers 2 stray") == -1);
    CHECK(strstr(ERR, "unexpected argument 'stray'") != NULL);

    /* the command name in the hint is argv[0] */
    char *argv[] = {"generate", "--bar", NULL};
    args_defaults(&a);
    CHECK(args_parse(&a, 2, argv, ERR, sizeof(ERR)) == -1);
    CHECK(strcmp(ERR, "unknown flag '--bar' (see megadlm generate --help)") == 0);

    /* too long strings */
    char longline[1200];
    snprintf(longline, sizeof(longline), "--tokenizer-type %040d", 0);
    CHECK(parse_line(&a, longline) == -1);
    CHECK(strstr(ERR, "--tokenizer-type: value longer than") != NULL);
}

static void test_refused_flags(void) {
    static const char *later[] = {
        "--tp-comm-overlap-cfg cfg.yaml",
        "--use-flash-attn",
        "--fp8-format hybrid",
    };
    for (size_t i = 0; i < sizeof(later) / sizeof(later[0]); i++) {
        megadlm_args a;
        char line[256], want[128];
        snprintf(line, sizeof(line), BASE " %s", later[i]);
        size_t n = strcspn(later[i], " =");
        snprintf(want, sizeof(want), "%.*s: not supported yet", (int)n, later[i]);
        int rc = parse_line(&a, line);
        CHECK(rc == -1);
        CHECK(strcmp(ERR, want) == 0);
        if (rc != -1 || strcmp(ERR, want)) fprintf(stderr, "  %s -> '%s'\n", later[i], ERR);
        args_free(&a);
    }
    /* the mixture-of-experts flags are real fields now (test_moe_*) */
    {
        megadlm_args m;
        CHECK(parse_line(&m, "--num-experts 8 --expert-model-parallel-size 2") == 0);
        CHECK(m.num_experts == 8 && m.expert_model_parallel_size == 2);
        args_free(&m);
    }
    /* the parallel flags are real fields now: parsed and validated with Megatron's rules
     * (test_parallel); every valid layout trains */
    megadlm_args a;
    CHECK(parse_line(&a, "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 4 "
                         "--sequence-parallel --use-distributed-optimizer "
                         "--num-layers-per-virtual-pipeline-stage 2") == 0);
    CHECK(a.tensor_model_parallel_size == 2 && a.pipeline_model_parallel_size == 4);
    CHECK(a.sequence_parallel == 1 && a.use_distributed_optimizer == 1);
    CHECK(a.num_layers_per_virtual_pipeline_stage == 2);
    CHECK(parse_line(&a, "--tensor-model-parallel-size 0") == -1);
    CHECK(strstr(ERR, "--tensor-model-parallel-size: expected a positive integer") != NULL);
    CHECK(parse_line(&a, "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1") == 0);
    /* the interleaved schedule and data parallelism are trainable */
    {
        megadlm_args b;
        CHECK(run_line(&b, BASE " --num-layers 6 --pipeline-model-parallel-size 3 "
                                "--num-layers-per-virtual-pipeline-stage 1 --global-batch-size 6") == 0);
        CHECK(b.virtual_pipeline_model_parallel_size == 2);
        args_free(&b);
        CHECK(run_line(&b, BASE " --num-layers 4 --pipeline-model-parallel-size 2 "
                                "--virtual-pipeline-model-parallel-size 2 --global-batch-size 4") == 0);
        args_free(&b);
        CHECK(run_line(&b, BASE) == 0);
        b.world_size = 2;
        b.global_batch_size = 4;
        CHECK(args_validate(&b, ERR, sizeof(ERR)) == 0 && b.data_parallel_size == 2);
        args_free(&b);
        CHECK(parse_line(&b, BASE " --tensor-model-parallel-size 2 --sequence-parallel") == 0);
        b.world_size = 4; /* TP 2 x DP 2 */
        CHECK(args_validate(&b, ERR, sizeof(ERR)) == 0 && b.data_parallel_size == 2);
        args_free(&b);
        CHECK(run_line(&b, BASE) == 0);
        args_free(&b);
    }
    /* a struct that did not come from the parser (e.g. JSON) is checked by validation too */
    megadlm_args b;
    CHECK(run_line(&b, BASE) == 0);
    b.tensor_model_parallel_size = 3;
    CHECK(args_validate(&b, ERR, sizeof(ERR)) == -1);
    CHECK(strcmp(ERR, "--num-attention-heads 4 is not divisible by --tensor-model-parallel-size 3") == 0);
    CHECK(run_line(&b, BASE) == 0);
    b.tensor_model_parallel_size = 0;
    CHECK(args_validate(&b, ERR, sizeof(ERR)) == -1);
    CHECK(strstr(ERR, "--tensor-model-parallel-size must be positive") != NULL);
    args_free(&b);
}

/* Megatron's parallel rules (arguments.py validate_args, TransformerConfig, the parallel
 * linear layers' divisions); BASE: 2 layers, h 64, 4 heads, ffn 256, seq 32, micro 2. */
/* The world as mpirun gives it to train: TP (+ SP), PP and DP take flag (--bf16: fp32
 * gradient reduction forced on; --fp16: not), the distributed optimizer is refused by name. */
static void check_half_layouts(const char *flag) {
    static const char *const layouts[] = {"--tensor-model-parallel-size 2",
                                          "--tensor-model-parallel-size 2 --sequence-parallel",
                                          "--pipeline-model-parallel-size 2", "",
                                          "--use-distributed-optimizer",
                                          "--use-distributed-optimizer --overlap-grad-reduce "
                                          "--overlap-param-gather"};
    int bf16 = strcmp(flag, "--bf16") == 0;
    megadlm_args a;
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        char line[512], want[160];
        snprintf(line, sizeof line, BASE " %s %s", flag, layouts[i]);
        snprintf(want, sizeof want, "%s with --use-distributed-optimizer: not supported yet", flag);
        /* --bf16 takes the distributed optimizer, --fp16 not yet */
        int refused = !bf16 && strstr(layouts[i], "distributed") != NULL;
        int rc = parse_line(&a, line);
        CHECK(rc == 0);
        a.world_size = refused ? 1 : 2;
        if (rc == 0) rc = args_validate(&a, ERR, sizeof ERR);
        if (refused)
            CHECK(rc == -1 && strcmp(ERR, want) == 0);
        else
            CHECK(rc == 0 && a.accumulate_allreduce_grads_in_fp32 == bf16);
        if (rc != (refused ? -1 : 0)) fprintf(stderr, "  %s -> '%s'\n", line, ERR);
        args_free(&a);
    }
}

/* --bf16: Megatron's rules (it sets accumulate_allreduce_grads_in_fp32; not with --fp16), the
 * parallel layouts and the distributed optimizer accepted. */
static void test_bf16_flag(void) {
    megadlm_args a;
    CHECK(run_line(&a, BASE) == 0 && !a.bf16 && !a.accumulate_allreduce_grads_in_fp32);
    args_free(&a);
    CHECK(run_line(&a, BASE " --bf16") == 0 && a.bf16 && a.accumulate_allreduce_grads_in_fp32);
    args_free(&a);
    CHECK(parse_line(&a, BASE " --bf16=1") == -1 && strstr(ERR, "--bf16") != NULL);
    args_free(&a);
    CHECK(run_line(&a, BASE " --bf16 --fp16") == -1 &&
          strcmp(ERR, "--fp16 and --bf16 exclude each other (one parameter type)") == 0);
    args_free(&a);
    check_half_layouts("--bf16");
}

/* --fp16 and the loss scaler's flags: Megatron's defaults (arguments.py: --initial-loss-scale
 * 2**32, --min-loss-scale 1.0, --loss-scale-window 1000, --hysteresis 2, --loss-scale None),
 * its rules (validate_args: fp16 does not force accumulate_allreduce_grads_in_fp32 and turns
 * check_for_nan_in_loss_and_grad off with dynamic scaling, not with a constant scale;
 * DynamicGradScaler's asserts), the flags a run's scaler would not read refused, the layouts
 * not built yet refused by name. */
static void test_fp16_flag(void) {
    megadlm_args a;
    EXPECT_OK(&a, BASE);
    CHECK(!a.fp16 && a.loss_scale < 0 && a.initial_loss_scale == 4294967296.0f);
    CHECK(a.min_loss_scale == 1.0f && a.loss_scale_window == 1000.0f && a.hysteresis == 2);
    CHECK(a.check_for_nan_in_loss_and_grad == 1);
    args_free(&a);
    EXPECT_OK(&a, BASE " --fp16");
    CHECK(a.fp16 && !a.bf16 && !a.accumulate_allreduce_grads_in_fp32);
    CHECK(a.check_for_nan_in_loss_and_grad == 0);
    transformer_config c = model_config_from_args(&a);
    CHECK(c.fp16 == 1 && c.bf16 == 0 && tc_half(&c) == HALF_FP16);
    args_free(&a);
    EXPECT_OK(&a, BASE " --fp16 --loss-scale 1024");
    CHECK(a.loss_scale == 1024.0f && a.check_for_nan_in_loss_and_grad == 1);
    args_free(&a);
    EXPECT_OK(&a, BASE " --bf16 --loss-scale 8"); /* Megatron: a constant scaler for bf16 too */
    args_free(&a);
    EXPECT_OK(&a, BASE " --fp16 --initial-loss-scale 65536 --min-loss-scale 0.5 "
                  "--loss-scale-window 100.0 --hysteresis 1");
    CHECK(a.initial_loss_scale == 65536.0f && a.min_loss_scale == 0.5f &&
          a.loss_scale_window == 100.0f && a.hysteresis == 1);
    args_free(&a);
    CHECK(parse_line(&a, BASE " --fp16=1") == -1 && strstr(ERR, "--fp16: takes no value"));
    args_free(&a);
    CHECK(parse_line(&a, BASE " --fp16 --hysteresis 0") == -1 &&
          strstr(ERR, "--hysteresis: expected a positive integer"));
    args_free(&a);
    EXPECT_ERR(BASE " --loss-scale 4", "--loss-scale needs --fp16 or --bf16", NULL, NULL);
    EXPECT_ERR(BASE " --fp16 --loss-scale 0", "--loss-scale must be positive", NULL, NULL);
    EXPECT_ERR(BASE " --initial-loss-scale 8", "--initial-loss-scale has no effect without --fp16",
               NULL, NULL);
    EXPECT_ERR(BASE " --bf16 --hysteresis 3", "--hysteresis has no effect without --fp16", NULL,
               NULL);
    EXPECT_ERR(BASE " --fp16 --loss-scale 8 --loss-scale-window 10",
               "--loss-scale-window has no effect with --loss-scale (a constant scale)", NULL,
               NULL);
    EXPECT_ERR(BASE " --fp16 --initial-loss-scale 0", "--initial-loss-scale must be positive",
               NULL, NULL);
    EXPECT_ERR(BASE " --fp16 --min-loss-scale -1", "--min-loss-scale must be positive", NULL,
               NULL);
    EXPECT_ERR(BASE " --fp16 --initial-loss-scale 4 --min-loss-scale 8",
               "--min-loss-scale 8 is above --initial-loss-scale 4", NULL, NULL);
    EXPECT_ERR(BASE " --fp16 --loss-scale-window 2.5",
               "--loss-scale-window must be a positive whole number", NULL, NULL);
    EXPECT_ERR(BASE " --fp16 --loss-scale-window 0",
               "--loss-scale-window must be a positive whole number", NULL, NULL);
    check_half_layouts("--fp16");
    /* generate and convert: a mixed-precision run's arguments made an fp32 run's */
    EXPECT_OK(&a, BASE " --fp16 --initial-loss-scale 65536 --hysteresis 4");
    args_fp32(&a);
    CHECK(!a.fp16 && !a.bf16 && a.initial_loss_scale == 4294967296.0f && a.hysteresis == 2);
    CHECK(args_validate(&a, ERR, sizeof ERR) == 0);
    args_free(&a);
}

static void test_parallel(void) {
    megadlm_args a;
    /* world: not given = TP x PP, DP 1; given (memory's --world-size, train's launcher) */
    EXPECT_OK(&a, BASE " --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2");
    CHECK(a.world_size == 4 && a.data_parallel_size == 1 && a.global_batch_size == 2);
    CHECK(parse_line(&a, BASE " --tensor-model-parallel-size 2") == 0);
    a.world_size = 8;
    CHECK(args_validate(&a, ERR, sizeof(ERR)) == 0);
    CHECK(a.data_parallel_size == 4 && a.global_batch_size == 8);
    CHECK(parse_line(&a, BASE " --tensor-model-parallel-size 2") == 0);
    a.world_size = 3;
    CHECK(args_validate(&a, ERR, sizeof(ERR)) == -1);
    CHECK(strcmp(ERR, "world size (3) is not divisible by --tensor-model-parallel-size 2 x "
                      "--pipeline-model-parallel-size 1") == 0);
    /* --world-size is memory's */
    {
        char *argv[] = {"memory", "--world-size", "16", NULL};
        args_defaults(&a);
        CHECK(args_parse(&a, 3, argv, ERR, sizeof(ERR)) == 0 && a.world_size == 16);
        char *targv[] = {"train", "--world-size", "16", NULL};
        args_defaults(&a);
        CHECK(args_parse(&a, 3, targv, ERR, sizeof(ERR)) == -1);
        CHECK(strcmp(ERR, "--world-size: only for `megadlm memory` and `megadlm plan` (train "
                          "takes the world size from mpirun)") == 0);
        char *pargv[] = {"plan", "--world-size", "16", NULL};
        args_defaults(&a);
        CHECK(args_parse(&a, 3, pargv, ERR, sizeof(ERR)) == 0 && a.world_size == 16);
    }
    /* tensor parallelism: heads, query groups, ffn */
    EXPECT_ERR(BASE " --tensor-model-parallel-size 3",
               "--num-attention-heads 4 is not divisible by --tensor-model-parallel-size 3", NULL,
               NULL);
    EXPECT_ERR(BASE " --group-query-attention --num-query-groups 2 --tensor-model-parallel-size 4",
               "--num-query-groups 2 is not divisible by --tensor-model-parallel-size 4", NULL, NULL);
    EXPECT_ERR(BASE " --ffn-hidden-size 102 --tensor-model-parallel-size 4",
               "--ffn-hidden-size 102 is not divisible by --tensor-model-parallel-size 4", NULL,
               NULL);
    EXPECT_OK(&a, BASE " --group-query-attention --num-query-groups 2 --tensor-model-parallel-size 2");
    /* vocabulary padding: a multiple of make-vocab-size-divisible-by x TP (101 -> 256) */
    CHECK(a.padded_vocab_size == 256);
    /* sequence parallelism: off at TP 1 (Megatron, with a warning); the sequence splits by TP */
    EXPECT_OK(&a, BASE " --sequence-parallel");
    CHECK(a.sequence_parallel == 0);
    EXPECT_OK(&a, BASE " --sequence-parallel --tensor-model-parallel-size 2");
    CHECK(a.sequence_parallel == 1);
    EXPECT_ERR(BASE " --sequence-parallel --tensor-model-parallel-size 2 --seq-length 33",
               "--sequence-parallel", "--seq-length 33", "--tensor-model-parallel-size 2");
    /* pipeline: layers divisible by PP */
    EXPECT_ERR(BASE " --pipeline-model-parallel-size 3",
               "--num-layers 2 is not divisible by --pipeline-model-parallel-size 3", NULL, NULL);
    /* interleaving: v = (L/p) / layers-per-virtual-stage; 1 is None; p > 1 (Megatron with its
     * default p2p overlap); L divisible by p x v; micro-batches divisible by p */
    const char *L12 = BASE " --num-layers 12 --pipeline-model-parallel-size 3 --global-batch-size 6";
    char line[512];
    snprintf(line, sizeof(line), "%s --num-layers-per-virtual-pipeline-stage 2", L12);
    EXPECT_OK(&a, line);
    CHECK(a.virtual_pipeline_model_parallel_size == 2);
    {
        megadlm_args b = a;
        CHECK(args_validate(&b, ERR, sizeof(ERR)) == 0); /* idempotent */
        CHECK(memcmp(&a, &b, sizeof(a)) == 0);
    }
    snprintf(line, sizeof(line), "%s --num-layers-per-virtual-pipeline-stage 4", L12);
    EXPECT_OK(&a, line);
    CHECK(a.virtual_pipeline_model_parallel_size == 0); /* one chunk: no interleaving */
    snprintf(line, sizeof(line), "%s --num-layers-per-virtual-pipeline-stage 3", L12);
    EXPECT_ERR(line, "--num-layers-per-virtual-pipeline-stage 3", "4 layers", NULL);
    snprintf(line, sizeof(line), "%s --virtual-pipeline-model-parallel-size 4", L12);
    EXPECT_OK(&a, line);
    CHECK(a.virtual_pipeline_model_parallel_size == 4);
    snprintf(line, sizeof(line), "%s --virtual-pipeline-model-parallel-size 5", L12);
    EXPECT_ERR(line, "--num-layers 12 is not divisible by --pipeline-model-parallel-size 3 x 5",
               NULL, NULL);
    snprintf(line, sizeof(line),
             "%s --virtual-pipeline-model-parallel-size 3 --num-layers-per-virtual-pipeline-stage 2",
             L12);
    EXPECT_ERR(line, "give one of --num-layers-per-virtual-pipeline-stage", NULL, NULL);
    EXPECT_OK(&a, BASE " --num-layers 12 --pipeline-model-parallel-size 2 "
                       "--num-layers-per-virtual-pipeline-stage 2 --global-batch-size 4");
    CHECK(a.virtual_pipeline_model_parallel_size == 3);
    EXPECT_ERR(BASE " --num-layers 12 --virtual-pipeline-model-parallel-size 2",
               "interleaved schedule (2 model chunks per rank)",
               "--pipeline-model-parallel-size > 1", NULL);
    EXPECT_ERR(BASE " --num-layers 12 --num-layers-per-virtual-pipeline-stage 3",
               "interleaved schedule (4 model chunks per rank)",
               "--pipeline-model-parallel-size > 1", NULL);
    EXPECT_ERR(BASE " --num-layers 6 --pipeline-model-parallel-size 2 "
                    "--virtual-pipeline-model-parallel-size 2 --global-batch-size 4",
               "--num-layers 6 is not divisible by --pipeline-model-parallel-size 2 x 2", NULL, NULL);
    /* each model chunk is a block of its own: --recompute-num-layers counts a chunk's layers */
    EXPECT_ERR(BASE " --num-layers 8 --pipeline-model-parallel-size 2 "
                    "--num-layers-per-virtual-pipeline-stage 2 --global-batch-size 4 "
                    "--recompute-granularity full --recompute-method uniform --recompute-num-layers 3",
               "--recompute-num-layers 3", "between 1 and the 2 layers of a model chunk", NULL);
    EXPECT_OK(&a, BASE " --num-layers 8 --pipeline-model-parallel-size 2 "
                       "--num-layers-per-virtual-pipeline-stage 2 --global-batch-size 4 "
                       "--recompute-granularity full --recompute-method block "
                       "--recompute-num-layers 2 --num-microbatches-with-partial-activation-checkpoints 1");
    EXPECT_ERR(BASE " --num-layers 12 --pipeline-model-parallel-size 3 "
                    "--num-layers-per-virtual-pipeline-stage 2 --global-batch-size 4",
               "number of micro-batches (2", "--pipeline-model-parallel-size 3", NULL);
    /* --distribute-saved-activations: TP > 1, full recompute, not with sequence parallelism */
    const char *FULL = " --recompute-granularity full --recompute-method uniform "
                       "--recompute-num-layers 1 --distribute-saved-activations";
    snprintf(line, sizeof(line), BASE "%s --tensor-model-parallel-size 2", FULL);
    EXPECT_OK(&a, line);
    snprintf(line, sizeof(line), BASE "%s", FULL);
    EXPECT_ERR(line, "--distribute-saved-activations needs tensor parallelism "
                     "(--tensor-model-parallel-size > 1)", NULL, NULL);
    EXPECT_ERR(BASE " --recompute-activations --distribute-saved-activations "
                    "--tensor-model-parallel-size 2",
               "--distribute-saved-activations needs --recompute-granularity full", NULL, NULL);
    snprintf(line, sizeof(line), BASE "%s --tensor-model-parallel-size 2 --sequence-parallel", FULL);
    EXPECT_ERR(line, "--distribute-saved-activations cannot be combined with --sequence-parallel",
               NULL, NULL);
    /* recompute-num-layers counts the layers of a pipeline stage */
    EXPECT_ERR(BASE " --num-layers 4 --pipeline-model-parallel-size 2 --recompute-granularity full "
                    "--recompute-method block --recompute-num-layers 3",
               "--recompute-num-layers 3", "between 1 and the 2 layers", NULL);
    /* args_print: Megatron's None for the unset virtual-pipeline sizes */
    EXPECT_OK(&a, BASE);
    char *s = capture_print(&a);
    CHECK(s && strstr(s, "  virtual_pipeline_model_parallel_size ") &&
          strstr(strstr(s, "  virtual_pipeline_model_parallel_size "), " None\n"));
    CHECK(s && strstr(s, "  sequence_parallel ") &&
          strstr(strstr(s, "  sequence_parallel "), " False\n"));
    free(s);
    args_free(&a);
}

static void test_data_path(void) {
    megadlm_args a;
    /* weighted blend, followed by another flag */
    CHECK(parse_line(&a, "--data-path 0.3 /d/p1 0.7 /d/p2 --num-layers 3") == 0);
    CHECK(a.num_data_paths == 2 && a.data_weighted == 1);
    CHECK(a.num_data_paths == 2 && strcmp(a.data_paths[0], "/d/p1") == 0 &&
          strcmp(a.data_paths[1], "/d/p2") == 0);
    CHECK(a.data_weights[0] == 0.3 && a.data_weights[1] == 0.7);
    CHECK(a.num_layers == 3);
    args_free(&a);
    /* at the end of the line, three datasets, integer weights */
    CHECK(parse_line(&a, "--num-layers 3 --data-path 1 A 2 B 3 C") == 0);
    CHECK(a.num_data_paths == 3 && a.data_weighted == 1);
    CHECK(a.num_data_paths == 3 && strcmp(a.data_paths[2], "C") == 0 && a.data_weights[2] == 3.0);
    args_free(&a);
    /* --data-path=P form; a later --data-path replaces the earlier one (argparse) */
    CHECK(parse_line(&a, "--data-path=/x/one --data-path 0.5 /y/a 0.5 /y/b") == 0);
    CHECK(a.num_data_paths == 2 && strcmp(a.data_paths[0], "/y/a") == 0);
    args_free(&a);
    /* prefixes only (Megatron's get_blend_from_list): no weights, whatever the count */
    CHECK(parse_line(&a, "--data-path P1 P2") == 0);
    CHECK(a.num_data_paths == 2 && a.data_weighted == 0);
    CHECK(strcmp(a.data_paths[0], "P1") == 0 && strcmp(a.data_paths[1], "P2") == 0);
    args_free(&a);
    CHECK(parse_line(&a, "--data-path P1 P2 P3 --num-layers 3") == 0);
    CHECK(a.num_data_paths == 3 && a.data_weighted == 0 && strcmp(a.data_paths[2], "P3") == 0);
    args_free(&a);
    /* an odd count is prefixes only, even when some look like numbers (as Megatron) */
    CHECK(parse_line(&a, "--data-path 0.3 P1 0.7") == 0);
    CHECK(a.num_data_paths == 3 && a.data_weighted == 0 && strcmp(a.data_paths[0], "0.3") == 0);
    args_free(&a);
    /* an even count mixing weights and prefixes in the weight positions: refused by name */
    CHECK(parse_line(&a, "--data-path 0.5 P1 x P2") == -1);
    CHECK(strstr(ERR, "--data-path: '0.5' (word 1) is a weight but 'x' (word 3) is not") != NULL);
    CHECK(parse_line(&a, "--data-path P1 P2 1 P3") == -1);
    CHECK(strstr(ERR, "'1' (word 3) is a weight but 'P1' (word 1) is not") != NULL);
    /* non-finite weights (Python's float reads them; Megatron would then fail) */
    CHECK(parse_line(&a, "--data-path inf P1 1 P2") == -1);
    CHECK(strstr(ERR, "--data-path: weight 'inf': expected a finite number") != NULL);
    /* negative weight, all-zero weights */
    CHECK(parse_line(&a, "--data-path -0.5 P1 1 P2") == -1);
    CHECK(strstr(ERR, "--data-path") && strstr(ERR, "negative"));
    CHECK(parse_line(&a, "--data-path 0 P1 0 P2") == -1);
    CHECK(strstr(ERR, "--data-path") && strstr(ERR, "sum to 0"));
    CHECK(a.num_data_paths == 0);
    /* full validation with a blend */
    EXPECT_OK(&a, "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
                  "--max-position-embeddings 64 --micro-batch-size 2 --train-iters 10 --lr 1e-3 "
                  "--data-path 0.3 P1 0.7 P2 --tokenizer-type ByteLevel");
    CHECK(a.num_data_paths == 2 && a.data_weighted == 1);
    args_free(&a);
    EXPECT_OK(&a, "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
                  "--max-position-embeddings 64 --micro-batch-size 2 --train-iters 10 --lr 1e-3 "
                  "--data-path P1 P2 --tokenizer-type ByteLevel");
    CHECK(a.num_data_paths == 2 && a.data_weighted == 0);
    args_free(&a);
    /* per-split lists without weights */
    EXPECT_OK(&a, "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
                  "--max-position-embeddings 64 --micro-batch-size 2 --train-iters 10 --lr 1e-3 "
                  "--train-data-path T1 T2 T3 --valid-data-path V1 V2 "
                  "--tokenizer-type ByteLevel");
    args_free(&a);
    {
        char *paths[ARGS_MAX_DATA_PATHS];
        double w[ARGS_MAX_DATA_PATHS];
        int count = 0, weighted = 1;
        CHECK(args_parse_blend("--valid-data-path", "V1 V2", paths, w, &count, &weighted, ERR,
                               sizeof ERR) == 0);
        CHECK(count == 2 && weighted == 0 && strcmp(paths[1], "V2") == 0);
        for (int i = 0; i < count; i++) free(paths[i]);
        CHECK(args_parse_blend("--test-data-path", "2 V1 x V2", paths, w, &count, &weighted,
                               ERR, sizeof ERR) == -1);
        CHECK(strstr(ERR, "--test-data-path: '2' (word 1) is a weight") != NULL);
    }
}

static void test_validation_errors(void) {
    /* required flags */
    EXPECT_ERR("--mock-data --vocab-size 10", "--num-layers", "--hidden-size", "--lr");
    EXPECT_ERR("--mock-data --vocab-size 10", "--num-attention-heads", "--seq-length",
               "--max-position-embeddings");
    EXPECT_ERR("--mock-data --vocab-size 10", "--micro-batch-size", "--train-iters", "missing");
    EXPECT_ERR("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
               "--max-position-embeddings 64 --micro-batch-size 2 --train-iters 10 "
               "--mock-data --vocab-size 100",
               "missing required flag --lr", NULL, NULL);
    /* heads */
    EXPECT_ERR(BASE " --hidden-size 100 --num-attention-heads 3",
               "--hidden-size 100 is not divisible by --num-attention-heads 3", NULL, NULL);
    EXPECT_ERR(BASE " --group-query-attention --num-query-groups 3", "--num-attention-heads 4",
               "--num-query-groups 3", "not divisible");
    EXPECT_ERR(BASE " --num-query-groups 2", "--num-query-groups", "--group-query-attention", NULL);
    /* MLP */
    EXPECT_ERR(BASE " --openai-gelu --swiglu", "--openai-gelu", "--swiglu", NULL);
    EXPECT_ERR(BASE " --hidden-size 16 --swiglu", "--swiglu", "--ffn-hidden-size", NULL);
    /* positions */
    EXPECT_ERR(BASE " --seq-length 128", "--seq-length 128", "--max-position-embeddings 64", NULL);
    EXPECT_ERR(BASE " --position-embedding-type rope --seq-length 128", "--seq-length",
               "--max-position-embeddings", NULL);
    EXPECT_ERR(BASE " --position-embedding-type rope --rotary-percent 0", "--rotary-percent",
               "(0, 1]", NULL);
    EXPECT_ERR(BASE " --position-embedding-type rope --rotary-percent 1.5", "--rotary-percent",
               "(0, 1]", NULL);
    /* kv_channels 16 * 0.3 = 4.8 -> 4 (even, fine); 16 * 0.5625 = 9 (odd) */
    EXPECT_ERR(BASE " --position-embedding-type rope --rotary-percent 0.5625", "--rotary-percent",
               "--kv-channels 16", "even");
    EXPECT_ERR(BASE " --position-embedding-type relative", "--position-embedding-type",
               "not supported yet", NULL);
    EXPECT_ERR(BASE " --position-embedding-type alibi", "--position-embedding-type", "alibi",
               "learned_absolute or rope");
    EXPECT_ERR(BASE " --normalization BatchNorm", "--normalization", "LayerNorm or RMSNorm", NULL);
    EXPECT_ERR(BASE " --norm-epsilon 0", "--norm-epsilon", NULL, NULL);
    /* dropout in [0, 1) */
    EXPECT_ERR(BASE " --hidden-dropout 1", "--hidden-dropout", "[0, 1)", NULL);
    EXPECT_ERR(BASE " --hidden-dropout -0.1", "--hidden-dropout", "[0, 1)", NULL);
    EXPECT_ERR(BASE " --attention-dropout 1.5", "--attention-dropout", "[0, 1)", NULL);
    /* parallel layout / batch */
    EXPECT_ERR(BASE " --micro-batch-size 4 --global-batch-size 6", "--global-batch-size 6",
               "--micro-batch-size 4", "not divisible");
    /* data */
    EXPECT_ERR("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
               "--max-position-embeddings 64 --micro-batch-size 2 --train-iters 10 --lr 1e-3",
               "no data: give --data-path PREFIX (or --train-data-path ...) or --mock-data", NULL, NULL);
    EXPECT_ERR(BASE " --data-path P", "--mock-data", "--data-path", "exclusive");
    EXPECT_ERR(BASE " --split 1,2,3,4", "--split", "more than 3", NULL);
    EXPECT_ERR(BASE " --split 90,x,5", "--split", "not a number", NULL);
    EXPECT_ERR(BASE " --split 90,-5,5", "--split", "negative", NULL);
    EXPECT_ERR(BASE " --split 0,0,0", "--split", "sum to 0", NULL);
    EXPECT_ERR(BASE " --split 90,,5", "--split", NULL, NULL);
    /* tokenizer */
    EXPECT_ERR("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
               "--max-position-embeddings 64 --micro-batch-size 2 --train-iters 10 --lr 1e-3 "
               "--data-path P",
               "--tokenizer-type", "required", NULL);
    EXPECT_ERR("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
               "--max-position-embeddings 64 --micro-batch-size 2 --train-iters 10 --lr 1e-3 "
               "--mock-data",
               "NullTokenizer", "--mock-data", "--vocab-size");
    EXPECT_ERR("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
               "--max-position-embeddings 64 --micro-batch-size 2 --train-iters 10 --lr 1e-3 "
               "--data-path P --tokenizer-type NullTokenizer",
               "--tokenizer-type NullTokenizer", "--vocab-size", NULL);
    EXPECT_ERR(BASE " --tokenizer-type GPT2BPETokenizer", "--tokenizer-type GPT2BPETokenizer",
               "needs --vocab-file", "--merge-file");
    EXPECT_ERR(BASE " --tokenizer-type GPT2BPETokenizer --vocab-file v.json",
               "--tokenizer-type GPT2BPETokenizer", "--merge-file", NULL);
    EXPECT_ERR(BASE " --tokenizer-type GPT2BPETokenizer --vocab-file /nonexistent/v.json "
                    "--merge-file m.txt",
               "--vocab-file /nonexistent/v.json", "No such file", NULL);
    EXPECT_ERR(BASE " --tokenizer-type HuggingFaceTokenizer", "--tokenizer-type HuggingFaceTokenizer",
               "needs --tokenizer-model", NULL);
    EXPECT_ERR(BASE " --tokenizer-type SentencePieceTokenizer", "SentencePieceTokenizer",
               "not supported yet", NULL);
    EXPECT_ERR(BASE " --tokenizer-type Whatever", "--tokenizer-type", "Whatever",
               "GPT2BPETokenizer or HuggingFaceTokenizer");
    /* learning rate */
    EXPECT_ERR(BASE " --lr-warmup-fraction 0.1 --lr-warmup-iters 3", "--lr-warmup-fraction",
               "--lr-warmup-iters", NULL);
    EXPECT_ERR(BASE " --lr-warmup-iters 10", "--lr-warmup-iters 10", "--lr-decay-iters 10", NULL);
    EXPECT_ERR(BASE " --lr-warmup-fraction 1", "--lr-warmup-fraction", NULL, NULL);
    EXPECT_ERR(BASE " --lr-decay-style WSD", "--lr-decay-style WSD", "--lr-wsd-decay-iters", NULL);
    EXPECT_ERR(BASE " --lr-decay-style WSD --lr-wsd-decay-iters 11", "--lr-wsd-decay-iters 11",
               "--lr-decay-iters 10", NULL);
    EXPECT_ERR(BASE " --lr-decay-style WSD --lr-decay-iters 5 --lr-wsd-decay-iters 6",
               "--lr-wsd-decay-iters 6", "--lr-decay-iters 5", NULL);
    EXPECT_ERR(BASE " --lr-decay-style step", "--lr-decay-style", "step", NULL);
    EXPECT_ERR(BASE " --lr-decay-style inverse_square_root", "--lr-decay-style",
               "inverse_square_root", "inverse-square-root or WSD");
    EXPECT_ERR(BASE " --lr-warmup-fraction -0.1", "--lr-warmup-fraction", "expected a non-negative number", "-0.1");
    EXPECT_ERR(BASE " --lr-warmup-init 0.01", "--lr-warmup-init 0.01", "--lr 0.001", NULL);
    EXPECT_ERR(BASE " --lr-warmup-init -1e-4", "--lr-warmup-init -0.0001", ">= 0", NULL);
    /* iteration- or sample-based (Megatron's asserts), each length in the run's unit */
    EXPECT_ERR(BASE " --train-samples 40", "--train-iters 10", "--train-samples 40", "give one");
    EXPECT_ERR(BASE " --lr-decay-samples 40", "--lr-decay-samples", "--train-iters",
               "--lr-decay-iters");
    EXPECT_ERR(BASE " --lr-warmup-samples 4", "--lr-warmup-samples", "--train-iters",
               "--lr-warmup-iters");
    EXPECT_ERR(BASE " --lr-wsd-decay-samples 4", "--lr-wsd-decay-samples", "--train-iters", NULL);
#define SAMPLES_BASE BASE_NO_ITERS " --global-batch-size 4 --train-samples 40"
    EXPECT_ERR(SAMPLES_BASE " --lr-decay-iters 5", "--lr-decay-iters", "--train-samples",
               "--lr-decay-samples");
    EXPECT_ERR(SAMPLES_BASE " --lr-warmup-iters 2", "--lr-warmup-iters", "--train-samples",
               "--lr-warmup-samples");
    EXPECT_ERR(SAMPLES_BASE " --lr-wsd-decay-iters 2", "--lr-wsd-decay-iters", "--train-samples",
               "--lr-wsd-decay-samples");
    EXPECT_ERR(SAMPLES_BASE " --lr-warmup-samples 4 --lr-warmup-fraction 0.1",
               "--lr-warmup-fraction", "--lr-warmup-samples", NULL);
    EXPECT_ERR(SAMPLES_BASE " --lr-warmup-samples 40", "--lr-warmup-samples 40",
               "--lr-decay-samples 40", "--train-samples");
    EXPECT_ERR(SAMPLES_BASE " --lr-decay-samples 30 --lr-warmup-samples 30",
               "--lr-warmup-samples 30", "--lr-decay-samples 30", NULL);
    EXPECT_ERR(SAMPLES_BASE " --lr-decay-style WSD", "--lr-decay-style WSD",
               "--lr-wsd-decay-samples", NULL);
    EXPECT_ERR(SAMPLES_BASE " --lr-decay-style WSD --lr-wsd-decay-samples 41",
               "--lr-wsd-decay-samples 41", "--lr-decay-samples 40", NULL);
    EXPECT_ERR(SAMPLES_BASE " --global-batch-size 64", "--train-samples 40",
               "--global-batch-size 64", "no iteration");
    EXPECT_ERR(SAMPLES_BASE " --train-samples 0", "--train-samples", "positive", NULL);
    EXPECT_ERR(BASE " --lr-wsd-decay-style square", "--lr-wsd-decay-style", "square", NULL);
    EXPECT_ERR(BASE " --min-lr 0.01", "--min-lr 0.01", "--lr 0.001", NULL);
    EXPECT_ERR(BASE " --min-lr -1e-5", "--min-lr", ">= 0", NULL);
    EXPECT_ERR(BASE " --lr -1", "--lr", ">= 0", NULL);
    /* optimizer */
    EXPECT_ERR(BASE " --optimizer sgd", "--optimizer sgd", "not supported yet", NULL);
    EXPECT_ERR(BASE " --optimizer lion", "--optimizer", "lion", "adam");
    EXPECT_ERR(BASE " --adam-beta1 1", "--adam-beta1", "[0, 1)", NULL);
    EXPECT_ERR(BASE " --adam-beta2 -0.5", "--adam-beta2", "[0, 1)", NULL);
    EXPECT_ERR(BASE " --adam-eps -1", "--adam-eps", NULL, NULL);
    EXPECT_ERR(BASE " --weight-decay -0.1", "--weight-decay", NULL, NULL);
    EXPECT_ERR(BASE " --clip-grad -1", "--clip-grad", ">= 0", NULL);
    /* checkpoints */
    EXPECT_ERR(BASE " --save-interval 10", "--save-interval", "--save", NULL);
    EXPECT_ERR(BASE " --exit-interval 0", "--exit-interval", "positive", NULL);
    /* eval-interval > 0 (only reachable through a struct, the parser wants a positive int) */
    {
        megadlm_args a;
        CHECK(parse_line(&a, BASE) == 0);
        a.eval_interval = 0;
        CHECK(args_validate(&a, ERR, sizeof(ERR)) == -1);
        CHECK(strstr(ERR, "--eval-interval") != NULL);
        CHECK(parse_line(&a, BASE) == 0);
        a.world_size = 3;
        a.global_batch_size = 4;
        CHECK(args_validate(&a, ERR, sizeof(ERR)) == -1);
        CHECK(contains(ERR, "--global-batch-size 4", "--micro-batch-size 2", "data-parallel size 3"));
    }
    EXPECT_ERR(BASE " --eval-interval 0", "--eval-interval", NULL, NULL);
}

static void test_derived(void) {
    megadlm_args a;
    /* plain: kv = 64/4, ffn = 4h, groups = heads, global = micro * dp, decay = train iters,
     * tokenizer NullTokenizer (mock data), padded = 101 -> 128 */
    EXPECT_OK(&a, BASE);
    CHECK(a.kv_channels == 16);
    CHECK(a.ffn_hidden_size == 256);
    CHECK(a.num_query_groups == 4);
    CHECK(a.global_batch_size == 2);
    CHECK(a.data_parallel_size == 1);
    CHECK(a.lr_decay_iters == 10);
    CHECK(strcmp(a.tokenizer_type, "NullTokenizer") == 0);
    CHECK(a.padded_vocab_size == 128);
    CHECK(a.bias_gelu_fusion == 1);
    /* sample-based: --train-iters stays None (Megatron's arguments block), the iterations are
     * train-samples // global batch, the decay defaults to --train-samples; a warmup fraction
     * of the decay in samples is the decimal's double times the samples, as Megatron's */
    {
        megadlm_args b;
        EXPECT_OK(&b, BASE_NO_ITERS " --global-batch-size 4 --train-samples 42 "
                                    "--lr-warmup-fraction 0.07");
        CHECK(b.train_iters == 0 && args_train_iters(&b) == 10 && b.lr_decay_samples == 42);
        CHECK(b.lr_decay_iters == 0);
        double w;
        int64_t d, wsd;
        args_lr_schedule_samples(&b, &w, &d, &wsd);
        CHECK(d == 42 && wsd == 0 && w == 0.07 * 42.0);
        megadlm_args c = b;
        CHECK(args_validate(&c, ERR, sizeof(ERR)) == 0 && memcmp(&b, &c, sizeof b) == 0);
        args_free(&b);
        EXPECT_OK(&b, BASE " --global-batch-size 6 --lr-warmup-fraction 0.07 --lr-decay-iters 80");
        args_lr_schedule_samples(&b, &w, &d, &wsd);  /* 33.6 samples, not 5 iterations' 30 */
        CHECK(d == 480 && w == 0.07 * 480.0 && w != (double)(0.07f * 480.0f) &&
              args_train_iters(&b) == 10);
        args_free(&b);
        EXPECT_OK(&b, BASE " --global-batch-size 6 --lr-decay-style WSD --lr-wsd-decay-iters 4");
        args_lr_schedule_samples(&b, &w, &d, &wsd);
        CHECK(d == 60 && wsd == 24 && w == 0.0);
        args_free(&b);
    }
    /* validation is idempotent (it runs again after a checkpoint's args are loaded) */
    {
        megadlm_args b = a;
        CHECK(args_validate(&b, ERR, sizeof(ERR)) == 0);
        CHECK(memcmp(&a, &b, sizeof(a)) == 0);
        CHECK(b.kv_channels == a.kv_channels && b.ffn_hidden_size == a.ffn_hidden_size &&
              b.num_query_groups == a.num_query_groups && b.padded_vocab_size == a.padded_vocab_size &&
              b.global_batch_size == a.global_batch_size && b.lr_decay_iters == a.lr_decay_iters);
    }

    /* SwiGLU: int(4*h*2/3/64)*64. h=768: 2048 exactly -> 2048. h=1024: 2730.67 -> 42*64 = 2688.
     * h=4096: 10922.67 -> 170*64 = 10880. h=64: 170.67/64 = 2.67 -> 128. */
    EXPECT_OK(&a, BASE " --hidden-size 768 --num-attention-heads 12 --swiglu");
    CHECK(a.ffn_hidden_size == 2048);
    CHECK(a.kv_channels == 64);
    CHECK(a.bias_gelu_fusion == 0); /* no GeLU with SwiGLU */
    EXPECT_OK(&a, BASE " --hidden-size 1024 --num-attention-heads 16 --swiglu");
    CHECK(a.ffn_hidden_size == 2688);
    EXPECT_OK(&a, BASE " --hidden-size 4096 --num-attention-heads 32 --swiglu");
    CHECK(a.ffn_hidden_size == 10880);
    EXPECT_OK(&a, BASE " --swiglu");
    CHECK(a.ffn_hidden_size == 128);
    /* explicit ffn and kv channels win; hidden % heads no longer required with --kv-channels */
    EXPECT_OK(&a, BASE " --swiglu --ffn-hidden-size 100");
    CHECK(a.ffn_hidden_size == 100);
    EXPECT_OK(&a, BASE " --hidden-size 100 --num-attention-heads 3 --kv-channels 32");
    CHECK(a.kv_channels == 32 && a.ffn_hidden_size == 400);

    /* Megatron: without biases there is no bias-GeLU fusion */
    EXPECT_OK(&a, BASE " --disable-bias-linear");
    CHECK(a.add_bias_linear == 0 && a.bias_gelu_fusion == 0);

    /* GQA: default one group; explicit groups */
    EXPECT_OK(&a, BASE " --group-query-attention");
    CHECK(a.num_query_groups == 1);
    EXPECT_OK(&a, BASE " --group-query-attention --num-query-groups 2");
    CHECK(a.num_query_groups == 2);

    /* padded vocabulary (Megatron's _vocab_size_with_padding of the tokenizer's vocab_size):
     * NullTokenizer 50256 -> 50257 entries -> next multiple of 128 = 393*128 = 50304;
     * divisible-by 8: 50257 -> 6283*8 = 50264; ByteLevel 257 -> 3*128 = 384; by 1 -> 257;
     * NullTokenizer 127 -> 128 entries -> 128 (already a multiple). */
    EXPECT_OK(&a, BASE " --vocab-size 50256");
    CHECK(a.padded_vocab_size == 50304);
    EXPECT_OK(&a, BASE " --vocab-size 50256 --make-vocab-size-divisible-by 8");
    CHECK(a.padded_vocab_size == 50264);
    EXPECT_OK(&a, BASE " --vocab-size 127");
    CHECK(a.padded_vocab_size == 128);
    EXPECT_OK(&a, "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
                  "--max-position-embeddings 64 --micro-batch-size 2 --train-iters 10 --lr 1e-3 "
                  "--mock-data --tokenizer-type ByteLevel");
    CHECK(a.padded_vocab_size == 384);
    EXPECT_OK(&a, BASE " --tokenizer-type ByteLevel"); /* --vocab-size 100 is not used */
    CHECK(a.padded_vocab_size == 384);
    EXPECT_OK(&a, "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
                  "--max-position-embeddings 64 --micro-batch-size 2 --train-iters 10 --lr 1e-3 "
                  "--data-path P --tokenizer-type ByteLevel --make-vocab-size-divisible-by 1");
    CHECK(a.padded_vocab_size == 257);
    args_free(&a);

    /* data parallel size from the world size the caller sets */
    CHECK(parse_line(&a, BASE) == 0);
    a.world_size = 4;
    CHECK(args_validate(&a, ERR, sizeof(ERR)) == 0);
    CHECK(a.data_parallel_size == 4 && a.global_batch_size == 8);
    CHECK(parse_line(&a, BASE " --global-batch-size 16") == 0);
    a.world_size = 4;
    CHECK(args_validate(&a, ERR, sizeof(ERR)) == 0);
    CHECK(a.global_batch_size == 16);

    /* WSD, fractions, rope that fits */
    EXPECT_OK(&a, BASE " --lr-decay-style WSD --lr-wsd-decay-iters 10 --lr-warmup-fraction 0.5");
    CHECK(a.lr_decay_iters == 10 && a.lr_wsd_decay_iters == 10);
    /* 0 annealing iterations is valid in Megatron (MegaDLMs' test script passes
     * TRAIN_ITERS / 10, 0 for short runs): the lr stays at its maximum until --lr-decay-iters */
    EXPECT_OK(&a, BASE " --lr-decay-style WSD --lr-wsd-decay-iters 0");
    CHECK(a.lr_wsd_decay_iters == 0);
    EXPECT_OK(&a, BASE " --position-embedding-type rope --rotary-percent 0.25");
    EXPECT_OK(&a, BASE " --position-embedding-type rope --seq-length 64");
    EXPECT_OK(&a, BASE " --save /tmp/x --save-interval 5 --split 1");
    EXPECT_OK(&a, BASE " --num-query-groups 4"); /* equal to the head count: what MHA derives */
}

static void test_help(void) {
    megadlm_args a;
    char *argv[] = {"train", "--num-layers", "2", "--help", NULL};
    args_defaults(&a);
    /* --help prints to stdout: send it to /dev/null for the test */
    fflush(stdout);
    FILE *saved = stdout;
    FILE *null = fopen("/dev/null", "w");
    if (null) stdout = null;
    int rc = args_parse(&a, 4, argv, ERR, sizeof(ERR));
    char *argvh[] = {"train", "-h", NULL};
    int rch = args_parse(&a, 2, argvh, ERR, sizeof(ERR));
    if (null) {
        stdout = saved;
        fclose(null);
    }
    CHECK(rc == 1);
    CHECK(rch == 1);

    char *h = capture_help();
    CHECK(h != NULL);
    if (!h) return;
    static const char *flags[] = {
        "--num-layers N", "--hidden-size N", "--ffn-hidden-size N", "--num-attention-heads N",
        "--kv-channels N", "--group-query-attention ", "--num-query-groups N",
        "--max-position-embeddings N", "--position-embedding-type TYPE", "--rotary-base X",
        "--rotary-percent X", "--normalization NORM", "--norm-epsilon X", "--qk-layernorm ",
        "--swiglu ", "--disable-bias-linear ", "--no-bias-gelu-fusion ", "--openai-gelu ",
        "--untie-embeddings-and-output-weights ", "--make-vocab-size-divisible-by N",
        "--init-method-std X", "--hidden-dropout X", "--attention-dropout X", "--data-path ",
        "--mock-data ", "--split ", "--seq-length N", "--tokenizer-type TYPE", "--vocab-size V",
        "--eod-mask-loss ", "--micro-batch-size N", "--global-batch-size N", "--train-iters N",
        "--seed N", "--optimizer NAME", "--lr X", "--min-lr X", "--lr-decay-style STYLE",
        "--lr-decay-iters N", "--lr-warmup-iters N", "--lr-warmup-fraction X",
        "--lr-wsd-decay-style STYLE", "--lr-wsd-decay-iters N", "--adam-beta1 X",
        "--adam-beta2 X", "--adam-eps X", "--weight-decay X", "--clip-grad X", "--exit-interval N",
        "--log-interval N", "--eval-interval N", "--eval-iters N", "--log-memory ", "--save DIR",
        "--save-interval N", "--load DIR", "--tensor-model-parallel-size N",
        "--pipeline-model-parallel-size N", "--help", "--sequence-parallel", "--bf16",
        "--use-distributed-optimizer ", "--num-layers-per-virtual-pipeline-stage N",
        "--virtual-pipeline-model-parallel-size V", "--world-size N",
        "--accumulate-allreduce-grads-in-fp32", "--use-flash-attn", "--num-experts E",
        "--expert-model-parallel-size N", "--moe-layer-freq N|PATTERN", "--moe-router-topk K",
    };
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
        CHECK(strstr(h, flags[i]) != NULL);
        if (!strstr(h, flags[i])) fprintf(stderr, "  help lacks '%s'\n", flags[i]);
    }
    /* defaults shown on the flag's own line */
    static const char *pairs[][2] = {
        {"--norm-epsilon", "[default: 1e-05]"},
        {"--make-vocab-size-divisible-by", "[default: 128]"},
        {"--init-method-std", "[default: 0.02]"},
        {"--hidden-dropout", "[default: 0.1]"},
        {"--attention-dropout", "[default: 0.1]"},
        {"--rotary-base", "[default: 10000.0]"},
        {"--rotary-percent", "[default: 1.0]"},
        {"--seed", "[default: 1234]"},
        {"--lr-decay-style", "[default: linear]"},
        {"--lr-wsd-decay-style", "[default: exponential]"},
        {"--adam-beta1", "[default: 0.9]"},
        {"--adam-beta2", "[default: 0.999]"},
        {"--adam-eps", "[default: 1e-08]"},
        {"--weight-decay", "[default: 0.01]"},
        {"--clip-grad", "[default: 1.0]"},
        {"--log-interval", "[default: 100]"},
        {"--eval-interval", "[default: 1000]"},
        {"--eval-iters", "[default: 100]"},
        {"--split", "[default: 969, 30, 1]"},
        {"--position-embedding-type", "[default: learned_absolute]"},
        {"--normalization", "[default: LayerNorm]"},
        {"--optimizer", "[default: adam]"},
        {"--num-layers", "[default: required]"},
        {"--lr ", "[default: required]"},
        {"--tensor-model-parallel-size", "[default: 1]"},
        {"--num-experts", "[default: none]"},
        {"--moe-layer-freq", "[default: 1]"},
        {"--moe-router-topk", "[default: 2]"},
        {"--moe-router-load-balancing-type", "[default: aux_loss]"},
        {"--moe-token-dispatcher-type", "[default: allgather]"},
        {"--moe-ffn-hidden-size", "[default: ffn-hidden-size]"},
    };
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        char key[80];
        snprintf(key, sizeof(key), "  %s", pairs[i][0]);
        const char *line = strstr(h, key);
        const char *eol = line ? strchr(line, '\n') : NULL;
        const char *d = line ? strstr(line, pairs[i][1]) : NULL;
        int ok = line && eol && d && d < eol;
        CHECK(ok);
        if (!ok) fprintf(stderr, "  help: '%s' lacks '%s'\n", pairs[i][0], pairs[i][1]);
    }
    /* groups, in order */
    const char *g1 = strstr(h, "\nmodel:"), *g2 = strstr(h, "\ndata and tokenizer:"),
               *g3 = strstr(h, "\ntraining"), *g4 = strstr(h, "\nlogging, evaluation and checkpoints:"),
               *g5 = strstr(h, "\nparallelism:"), *g6 = strstr(h, "\nmixture of experts:");
    CHECK(g1 && g2 && g3 && g4 && g5 && g6);
    CHECK(g1 < g2 && g2 < g3 && g3 < g4 && g4 < g5 && g5 < g6);
    CHECK(strstr(h, "Usage: megadlm train") != NULL);
    free(h);
}

static void test_print(void) {
    megadlm_args a;
    EXPECT_OK(&a, "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
                  "--max-position-embeddings 64 --micro-batch-size 2 --train-iters 10 --lr 1e-3 "
                  "--data-path 0.3 P1 0.7 P2 --tokenizer-type ByteLevel");
    char *s = capture_print(&a);
    CHECK(s != NULL);
    if (!s) return;
    {
        const char *hdr = "------------------------ arguments ------------------------\n";
        CHECK(strncmp(s, hdr, strlen(hdr)) == 0);
    }
    CHECK(strstr(s, "\n-------------------- end of arguments ---------------------\n") != NULL);
    /* "  name " + '.' * (48 - len(name)) + " value" */
    char want[128];
    snprintf(want, sizeof(want), "\n  num_layers %.*s 2\n", 48 - 10,
             "................................................");
    CHECK(strstr(s, want) != NULL);
    snprintf(want, sizeof(want), "\n  data_path %.*s ['0.3', 'P1', '0.7', 'P2']\n", 48 - 9,
             "................................................");
    CHECK(strstr(s, want) != NULL);
    CHECK(strstr(s, "  hidden_dropout ") && strstr(s, " 0.1\n"));
    CHECK(strstr(s, "  swiglu ") != NULL);
    CHECK(strstr(s, " False\n") != NULL && strstr(s, " True\n") != NULL);
    CHECK(strstr(s, "  lr_warmup_fraction ") != NULL);
    /* sorted by name */
    const char *p1 = strstr(s, "  adam_beta1 "), *p2 = strstr(s, "  data_path "),
               *p3 = strstr(s, "  lr "), *p4 = strstr(s, "  lr_decay_iters "),
               *p5 = strstr(s, "  world_size ");
    CHECK(p1 && p2 && p3 && p4 && p5);
    CHECK(p1 < p2 && p2 < p3 && p3 < p4 && p4 < p5);
    free(s);
    args_free(&a);
}

static void test_json(void) {
    megadlm_args a, b;
    EXPECT_OK(&a, "--num-layers 3 --hidden-size 96 --num-attention-heads 6 --seq-length 48 "
                  "--max-position-embeddings 64 --micro-batch-size 3 --global-batch-size 12 "
                  "--train-iters 77 --lr 3e-4 --min-lr 3e-5 --lr-decay-style WSD "
                  "--lr-wsd-decay-style minus_sqrt --lr-wsd-decay-iters 20 --lr-warmup-fraction 0.1 "
                  "--group-query-attention --num-query-groups 3 --position-embedding-type rope "
                  "--rotary-percent 0.5 --rotary-base 500000 --normalization RMSNorm "
                  "--norm-epsilon 1e-6 --qk-layernorm --swiglu --disable-bias-linear "
                  "--untie-embeddings-and-output-weights --make-vocab-size-divisible-by 64 "
                  "--init-method-std 0.006 --hidden-dropout 0 --attention-dropout 0.05 "
                  "--data-path 0.25 /d/a 0.75 /d/b --tokenizer-type NullTokenizer --vocab-size 1000 "
                  "--split 98,1,1 --eod-mask-loss --seed 99 --adam-beta1 0.85 --adam-beta2 0.95 "
                  "--adam-eps 1e-7 --weight-decay 0.1 --clip-grad 0.7 --log-interval 3 "
                  "--eval-interval 9 --eval-iters 2 --log-memory --save /tmp/s --save-interval 11 "
                  "--load /tmp/l --exit-interval 33");
    cJSON *j = args_to_json(&a);
    CHECK(j != NULL);
    if (!j) return;
    char *text = cJSON_PrintUnformatted(j);
    CHECK(text != NULL);
    /* floats are written as typed */
    CHECK(strstr(text, "\"attention_dropout\":0.05,") != NULL);
    CHECK(strstr(text, "\"init_method_std\":0.006,") != NULL);
    CHECK(strstr(text, "\"hidden_dropout\":0") != NULL);
    CHECK(strstr(text, "\"data_path\":[\"/d/a\",\"/d/b\"]") != NULL);
    CHECK(strstr(text, "\"data_weights\":[0.25,0.75]") != NULL);
    cJSON *j2 = cJSON_Parse(text);
    CHECK(j2 != NULL);
    args_defaults(&b);
    CHECK(args_from_json(&b, j2, ERR, sizeof(ERR)) == 0);
    if (ERR[0]) fprintf(stderr, "  %s\n", ERR);
    /* every field equal: compare the structs with the path pointers masked */
    CHECK(b.num_data_paths == 2 && b.data_weighted == 1);
    if (b.num_data_paths == 2) {
        CHECK(strcmp(b.data_paths[0], "/d/a") == 0 && strcmp(b.data_paths[1], "/d/b") == 0);
        CHECK(b.data_weights[0] == 0.25 && b.data_weights[1] == 0.75);
    }
    {
        megadlm_args x = a, y = b;
        memset(x.data_paths, 0, sizeof(x.data_paths));
        memset(y.data_paths, 0, sizeof(y.data_paths));
        CHECK(memcmp(&x, &y, sizeof(x)) == 0);
        /* field by field, so that a failure says which */
        CHECK(x.num_layers == y.num_layers && x.hidden_size == y.hidden_size);
        CHECK(x.ffn_hidden_size == y.ffn_hidden_size && x.kv_channels == y.kv_channels);
        CHECK(x.num_query_groups == y.num_query_groups && x.group_query_attention == y.group_query_attention);
        CHECK(x.rotary_percent == y.rotary_percent && x.rotary_base == y.rotary_base);
        CHECK(x.norm_epsilon == y.norm_epsilon && x.init_method_std == y.init_method_std);
        CHECK(x.attention_dropout == y.attention_dropout && x.hidden_dropout == y.hidden_dropout);
        CHECK(x.lr == y.lr && x.min_lr == y.min_lr && x.lr_warmup_fraction == y.lr_warmup_fraction);
        CHECK(x.adam_beta1 == y.adam_beta1 && x.adam_beta2 == y.adam_beta2 && x.adam_eps == y.adam_eps);
        CHECK(x.weight_decay == y.weight_decay && x.clip_grad == y.clip_grad);
        CHECK(x.seed == y.seed && x.padded_vocab_size == y.padded_vocab_size);
        CHECK(strcmp(x.lr_wsd_decay_style, y.lr_wsd_decay_style) == 0);
        CHECK(strcmp(x.save, y.save) == 0 && strcmp(x.load, y.load) == 0);
        CHECK(strcmp(x.split, y.split) == 0 && strcmp(x.tokenizer_type, y.tokenizer_type) == 0);
        CHECK(x.add_bias_linear == y.add_bias_linear && x.swiglu == y.swiglu);
        CHECK(x.log_memory == y.log_memory && x.save_interval == y.save_interval);
        CHECK(x.world_size == y.world_size && x.data_parallel_size == y.data_parallel_size);
        CHECK(y.exit_interval == 33);
    }
    /* validation of the loaded arguments gives the same values again */
    CHECK(args_validate(&b, ERR, sizeof(ERR)) == 0);
    CHECK(b.ffn_hidden_size == a.ffn_hidden_size && b.num_query_groups == 3);
    cJSON_Delete(j2);
    free(text);
    cJSON_Delete(j);
    args_free(&b);

    /* an unset --lr is null and comes back unset; a big seed survives as a string */
    args_defaults(&b);
    b.seed = 18446744073709551557ULL;
    j = args_to_json(&b);
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(j, "lr")));
    megadlm_args c;
    args_defaults(&c);
    c.lr = 1.0f;
    CHECK(args_from_json(&c, j, ERR, sizeof(ERR)) == 0);
    CHECK(isnan(c.lr) && c.seed == 18446744073709551557ULL);
    cJSON_Delete(j);

    /* only the fields present are overwritten */
    args_defaults(&c);
    c.num_layers = 7;
    j = cJSON_Parse("{\"hidden_size\": 32, \"swiglu\": true, \"data_path\": [\"/only\"], "
                    "\"data_weighted\": false}");
    CHECK(args_from_json(&c, j, ERR, sizeof(ERR)) == 0);
    CHECK(c.num_layers == 7 && c.hidden_size == 32 && c.swiglu == 1);
    CHECK(c.num_data_paths == 1 && strcmp(c.data_paths[0], "/only") == 0 && c.data_weighted == 0);
    CHECK(c.log_interval == 100);
    cJSON_Delete(j);
    /* errors name the key and leave the struct alone */
    j = cJSON_Parse("{\"num_layers\": \"x\"}");
    CHECK(args_from_json(&c, j, ERR, sizeof(ERR)) == -1);
    CHECK(strstr(ERR, "num_layers") != NULL && c.num_layers == 7);
    cJSON_Delete(j);
    j = cJSON_Parse("{\"hidden_size\": 2.5}");
    CHECK(args_from_json(&c, j, ERR, sizeof(ERR)) == -1);
    CHECK(strstr(ERR, "hidden_size") != NULL && c.hidden_size == 32);
    cJSON_Delete(j);
    j = cJSON_Parse("{\"data_path\": [\"a\", \"b\"], \"data_weights\": [1]}");
    CHECK(args_from_json(&c, j, ERR, sizeof(ERR)) == -1);
    CHECK(strstr(ERR, "data_weights") != NULL);
    CHECK(c.num_data_paths == 1 && strcmp(c.data_paths[0], "/only") == 0);
    cJSON_Delete(j);
    j = cJSON_Parse("{\"normalization\": \"LayerNormLayerNormLayerNormLayerNorm\"}");
    CHECK(args_from_json(&c, j, ERR, sizeof(ERR)) == -1);
    CHECK(strstr(ERR, "normalization") != NULL);
    cJSON_Delete(j);
    args_free(&c);
    args_free(&a);
}

/* Megatron's recompute rules; BASE has 2 layers. */
static void test_recompute(void) {
    megadlm_args a;
    EXPECT_OK(&a, BASE " --recompute-activations");
    CHECK(strcmp(a.recompute_granularity, "selective") == 0);
    args_free(&a);
    EXPECT_OK(&a, BASE " --recompute-granularity selective");
    CHECK(strcmp(a.recompute_granularity, "selective") == 0 && !a.recompute_method[0]);
    args_free(&a);
    EXPECT_OK(&a, BASE " --recompute-granularity full --recompute-method uniform "
                       "--recompute-num-layers 2");
    CHECK(strcmp(a.recompute_method, "uniform") == 0 && a.recompute_num_layers == 2);
    CHECK(args_validate(&a, ERR, sizeof(ERR)) == 0); /* idempotent */
    args_free(&a);
    EXPECT_OK(&a, BASE " --recompute-granularity full --recompute-method block "
                       "--recompute-num-layers 1");
    args_free(&a);
    EXPECT_ERR(BASE " --recompute-granularity full", "--recompute-granularity full",
               "--recompute-method", NULL);
    EXPECT_ERR(BASE " --recompute-granularity full --recompute-method uniform",
               "--recompute-num-layers", NULL, NULL);
    EXPECT_ERR(BASE " --recompute-granularity selective --recompute-method uniform",
               "--recompute-method", "selective", NULL);
    EXPECT_ERR(BASE " --recompute-granularity selective --recompute-num-layers 1",
               "--recompute-num-layers", "selective", NULL);
    EXPECT_ERR(BASE " --recompute-granularity full --recompute-method uniform "
                    "--recompute-num-layers 3",
               "--recompute-num-layers 3", "between 1 and the 2 layers", NULL);
    EXPECT_ERR(BASE " --recompute-method block --recompute-num-layers 1",
               "--recompute-granularity full", NULL, NULL);
    EXPECT_ERR(BASE " --recompute-granularity partial", "--recompute-granularity partial",
               "full or selective", NULL);
    EXPECT_ERR(BASE " --recompute-granularity full --recompute-method mixed "
                    "--recompute-num-layers 1",
               "--recompute-method mixed", "uniform or block", NULL);
    EXPECT_ERR(BASE " --recompute-activations --recompute-granularity full "
                    "--recompute-method uniform --recompute-num-layers 1",
               "--recompute-activations", "--recompute-granularity full", NULL);
    EXPECT_ERR(BASE " --recompute-granularity full --recompute-method uniform "
                    "--recompute-num-layers 1 --distribute-saved-activations",
               "--distribute-saved-activations", "--tensor-model-parallel-size", NULL);
    EXPECT_ERR(BASE " --enable-cuda-graph", "--enable-cuda-graph", NULL, NULL);
    EXPECT_ERR(BASE " --recompute-activations --enable-cuda-graph", "--enable-cuda-graph", NULL,
               NULL);
}

/* Megatron's DDP flags: real fields, its rules for --overlap-param-gather, None printed for an
 * unset --ddp-bucket-size, and a JSON round trip. */
static void test_ddp_flags(void) {
    megadlm_args a;
    CHECK(run_line(&a, BASE) == 0);
    CHECK(a.overlap_grad_reduce == 0 && a.overlap_param_gather == 0 && a.ddp_bucket_size == 0 &&
          a.accumulate_allreduce_grads_in_fp32 == 0);
    args_free(&a);
    CHECK(run_line(&a, BASE " --use-distributed-optimizer --overlap-grad-reduce "
                            "--overlap-param-gather --ddp-bucket-size 1000 "
                            "--accumulate-allreduce-grads-in-fp32") == 0);
    CHECK(a.use_distributed_optimizer && a.overlap_grad_reduce && a.overlap_param_gather &&
          a.ddp_bucket_size == 1000 && a.accumulate_allreduce_grads_in_fp32);
    cJSON *j = args_to_json(&a);
    megadlm_args b;
    args_defaults(&b);
    CHECK(args_from_json(&b, j, ERR, sizeof(ERR)) == 0);
    CHECK(b.overlap_param_gather == 1 && b.ddp_bucket_size == 1000);
    cJSON_Delete(j);
    args_free(&b);
    args_free(&a);
    static const struct {
        const char *flags, *want;
    } rules[] = {
        {" --overlap-param-gather --overlap-grad-reduce",
         "--overlap-param-gather needs --use-distributed-optimizer (Megatron: only supported "
         "with distributed optimizer)"},
        {" --overlap-param-gather --use-distributed-optimizer",
         "--overlap-param-gather needs --overlap-grad-reduce (Megatron: must use "
         "--overlap-param-gather with --overlap-grad-reduce)"},
    };
    for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++) {
        char line[512];
        snprintf(line, sizeof(line), BASE "%s", rules[i].flags);
        CHECK(run_line(&a, line) == -1);
        CHECK(strcmp(ERR, rules[i].want) == 0);
        if (strcmp(ERR, rules[i].want)) fprintf(stderr, "  %s -> '%s'\n", line, ERR);
        args_free(&a);
    }
    CHECK(parse_line(&a, BASE " --ddp-bucket-size 0") == -1);
    CHECK(strstr(ERR, "--ddp-bucket-size: expected a positive integer") != NULL);
    args_free(&a);
    /* printed as Megatron prints its None */
    CHECK(run_line(&a, BASE) == 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    args_print(&a, f);
    fclose(f);
    CHECK(strstr(buf, "  ddp_bucket_size ................................. None") != NULL);
    CHECK(strstr(buf, "  overlap_grad_reduce ............................. False") != NULL);
    free(buf);
    args_free(&a);
}

/* FSDP's flags against Megatron's validate_args: --use-megatron-fsdp sets --use-custom-fsdp,
 * the strategy defaults to optim_grads_params under FSDP, optim is the distributed optimizer,
 * no_shard plain data parallelism, torch FSDP2's refusals word for word. */
static void test_fsdp_flags(void) {
    megadlm_args a;
    EXPECT_OK(&a, BASE);
    CHECK(!a.use_custom_fsdp && !a.use_megatron_fsdp && !a.use_torch_fsdp2);
    CHECK(a.data_parallel_sharding_strategy[0] == 0 && !a.use_distributed_optimizer);
    args_free(&a);
    EXPECT_OK(&a, BASE " --use-megatron-fsdp --data-parallel-sharding-strategy optim");
    CHECK(a.use_custom_fsdp && a.use_distributed_optimizer);
    args_free(&a);
    EXPECT_OK(&a, BASE " --use-custom-fsdp --data-parallel-sharding-strategy optim "
                       "--overlap-grad-reduce --overlap-param-gather");
    CHECK(a.use_custom_fsdp && !a.use_megatron_fsdp && a.use_distributed_optimizer);
    args_free(&a);
    /* no_shard: nothing sharded, even where Megatron-FSDP v1 would switch its optimizer on */
    EXPECT_OK(&a, BASE " --use-custom-fsdp --use-distributed-optimizer "
                       "--data-parallel-sharding-strategy no_shard");
    CHECK(!a.use_distributed_optimizer);
    args_free(&a);
    EXPECT_OK(&a, BASE " --data-parallel-sharding-strategy no_shard");
    CHECK(!a.use_distributed_optimizer && !a.use_custom_fsdp);
    args_free(&a);
    EXPECT_ERR(BASE " --data-parallel-sharding-strategy no_shard --use-distributed-optimizer",
               "no_shard with --use-distributed-optimizer", NULL, NULL);
    EXPECT_ERR(BASE " --data-parallel-sharding-strategy optim", "strategy optim needs",
               "--use-megatron-fsdp", NULL);
    EXPECT_ERR(BASE " --use-custom-fsdp --data-parallel-sharding-strategy zero3",
               "--data-parallel-sharding-strategy 'zero3': expected no_shard, optim, "
               "optim_grads or optim_grads_params", NULL, NULL);
    /* optim_grads: the distributed optimizer's pieces are the gradient shards */
    EXPECT_OK(&a, BASE " --use-custom-fsdp --data-parallel-sharding-strategy optim_grads");
    CHECK(a.use_distributed_optimizer && args_fsdp_shards_grads(&a));
    args_free(&a);
    EXPECT_ERR(BASE " --use-custom-fsdp --data-parallel-sharding-strategy optim_grads "
                    "--pipeline-model-parallel-size 2",
               "optim_grads with pipeline parallelism: not supported yet", NULL, NULL);
    EXPECT_OK(&a, BASE " --use-custom-fsdp --data-parallel-sharding-strategy optim");
    CHECK(!args_fsdp_shards_grads(&a));
    args_free(&a);
    /* Megatron's default strategy under FSDP; torch FSDP2 is it */
    EXPECT_OK(&a, BASE " --use-megatron-fsdp");
    CHECK(!strcmp(a.data_parallel_sharding_strategy, "optim_grads_params"));
    CHECK(a.use_distributed_optimizer && args_fsdp_shards_grads(&a));
    args_free(&a);
    EXPECT_OK(&a, BASE " --use-torch-fsdp2 --no-gradient-accumulation-fusion "
                       "--untie-embeddings-and-output-weights");
    CHECK(!strcmp(a.data_parallel_sharding_strategy, "optim_grads_params"));
    CHECK(a.use_distributed_optimizer && args_fsdp_shards_grads(&a) && !a.use_custom_fsdp);
    /* validated again from the saved arguments (generate, convert): still valid */
    cJSON *saved = args_to_json(&a);
    megadlm_args c;
    args_defaults(&c);
    CHECK(args_from_json(&c, saved, ERR, sizeof(ERR)) == 0);
    CHECK(args_validate(&c, ERR, sizeof(ERR)) == 0);
    if (ERR[0]) fprintf(stderr, "  again: '%s'\n", ERR);
    cJSON_Delete(saved);
    args_free(&c);
    args_free(&a);
    EXPECT_OK(&a, BASE " --use-custom-fsdp --bf16");
    args_free(&a);
    EXPECT_ERR(BASE " --use-custom-fsdp --debug --detect-anomaly", "--detect-anomaly with "
               "--data-parallel-sharding-strategy optim_grads_params: not supported yet", NULL,
               NULL);
    EXPECT_ERR(BASE " --use-custom-fsdp --data-parallel-sharding-strategy optim --fp16",
               "--fp16 with FSDP", "not supported yet", NULL);
    /* torch FSDP2: Megatron's assertions */
    static const struct {
        const char *flags, *want;
    } fsdp2[] = {
        {" --pipeline-model-parallel-size 2",
         "--use-torch-fsdp2 is not supported with pipeline parallelism"},
        {" --use-distributed-optimizer", "--use-torch-fsdp2 is not supported with MCore's "
                                         "distributed optimizer"},
        {"", "--use-torch-fsdp2 is not supported with gradient accumulation fusion"},
        {" --no-gradient-accumulation-fusion",
         "--use-torch-fsdp2 requires --untie-embeddings-and-output-weights"},
        {" --no-gradient-accumulation-fusion --untie-embeddings-and-output-weights --fp16",
         "--use-torch-fsdp2 not supported with fp16 yet"},
        {" --no-gradient-accumulation-fusion --untie-embeddings-and-output-weights "
         "--data-parallel-sharding-strategy optim",
         "FSDP2's fully_shard shards parameters, gradients and optimizer state"},
        {" --use-megatron-fsdp", "exclude each other"},
    };
    for (size_t i = 0; i < sizeof fsdp2 / sizeof fsdp2[0]; i++) {
        char line[512];
        snprintf(line, sizeof line, BASE " --use-torch-fsdp2%s", fsdp2[i].flags);
        EXPECT_ERR(line, fsdp2[i].want, NULL, NULL);
    }
    /* printed and saved under their names */
    EXPECT_OK(&a, BASE " --use-megatron-fsdp --data-parallel-sharding-strategy optim");
    cJSON *j = args_to_json(&a);
    megadlm_args b;
    args_defaults(&b);
    CHECK(args_from_json(&b, j, ERR, sizeof(ERR)) == 0);
    CHECK(b.use_megatron_fsdp && b.use_custom_fsdp &&
          !strcmp(b.data_parallel_sharding_strategy, "optim"));
    cJSON_Delete(j);
    args_free(&b);
    args_free(&a);
}

/* MegaDLMs' flags */
static void test_difflm_flags(void) {
    megadlm_args a;
    EXPECT_OK(&a, BASE);
    CHECK(strcmp(a.model_running_mode, "vanilla") == 0 && strcmp(a.attention_mask_type, "causal") == 0);
    CHECK(a.difflm_varilen_prob == 0.01f && a.mask_token == -1);
    args_free(&a);
    EXPECT_OK(&a, BASE " --model-running-mode difflm-noshift --mask-token 100");
    CHECK(strcmp(a.attention_mask_type, "no_mask") == 0); /* the diffusion default */
    args_free(&a);
    EXPECT_OK(&a, BASE " --model-running-mode difflm-noshift --mask-token 100 --attention-mask-type causal");
    args_free(&a);
    EXPECT_ERR(BASE " --model-running-mode x", "--model-running-mode x", "test-forward", NULL);
    EXPECT_ERR(BASE " --model-running-mode difflm-noshift", "--mask-token", NULL, NULL);
    EXPECT_ERR(BASE " --attention-mask-type block_causal", "--attention-mask-type block_causal",
               "causal_bottom_right", NULL);
    EXPECT_ERR(BASE " --attention-mask-type top_left", "--attention-mask-type top_left", NULL, NULL);
    EXPECT_ERR(BASE " --base-model Qwen_2", "--base-model Qwen_2", "vanilla", NULL);
    EXPECT_ERR(BASE " --core-attn-implementation SDPA", "--core-attn-implementation SDPA", NULL,
               NULL);
    EXPECT_ERR(BASE " --attention-backend custom", "--attention-backend custom", NULL, NULL);
    EXPECT_ERR(BASE " --gpt-block-return-loss-and-logits", "--gpt-block-return-loss-and-logits",
               NULL, NULL);
    /* which attention each mode runs (MegaDLMs: vanilla is causal whatever the type says;
     * causal_bottom_right is causal for self-attention) */
    const struct {
        const char *flags;
        int causal;
    } attn[] = {{" --attention-mask-type no_mask", 1},
                {" --model-running-mode test-forward --attention-mask-type no_mask", 0},
                {" --model-running-mode test-forward --attention-mask-type causal_bottom_right", 1},
                {" --model-running-mode difflm-noshift --mask-token 1", 0},
                {" --model-running-mode difflm-noshift --mask-token 1 --attention-mask-type "
                 "causal_bottom_right", 1},
                {" --mask-token 3 --attention-mask-type causal --attention-backend flash "
                 "--core-attn-implementation FlexAttention --base-model vanilla", 1}};
    for (size_t i = 0; i < sizeof attn / sizeof attn[0]; i++) {
        char line[512];
        snprintf(line, sizeof line, "%s%s", BASE, attn[i].flags);
        EXPECT_OK(&a, line);
        CHECK(model_config_from_args(&a).causal == attn[i].causal);
        args_free(&a);
    }
    EXPECT_ERR(BASE " --model-running-mode difflm-noshift --mask-token 128", "--mask-token 128",
               NULL, NULL);
    EXPECT_ERR(BASE " --model-running-mode difflm-noshift --mask-token 1 --difflm-varilen-prob 2",
               "--difflm-varilen-prob", NULL, NULL);
}

/* Every value Megatron/MegaDLMs accepts for a string flag fits its field: the choices below
 * are copied from their argparse definitions and enums (arguments.py, custom_args/difflm.py,
 * AttnMaskType, the tokenizer list, RerunMode), the longest of each flag. Parsing stores them
 * (validation may still refuse a choice megadlm does not compute, by name); only a value that
 * is really too long gets "value longer than". */
static void test_string_flag_sizes(void) {
    static const char *const LONGEST[][2] = {
        {"attention-mask-type", "causal_bottom_right"},
        {"attention-mask-type", "padding_causal_bottom_right"},
        {"attention-mask-type", "block_causal"},
        {"normalization", "RMSNorm"},
        {"optimizer", "dist_muon"},
        {"lr-decay-style", "constant"},
        {"lr-wsd-decay-style", "exponential"},
        {"recompute-granularity", "selective"},
        {"recompute-method", "uniform"},
        {"tp-comm-overlap-progress", "thread"},
        {"position-embedding-type", "learned_absolute"},
        {"model-running-mode", "difflm-noshift"},
        {"tokenizer-type", "GPTSentencePieceTokenizer"},
        {"tokenizer-type", "NullMultimodalTokenizer"},
        {"rerun-mode", "report_determinism_stats"},
        {"main-params-dtype", "fp32"},
        {"moe-router-load-balancing-type", "sinkhorn_expert_choice"},
        {"moe-token-dispatcher-type", "alltoall_seq"},
        {"moe-token-drop-policy", "position"},
    };
    for (size_t i = 0; i < sizeof LONGEST / sizeof LONGEST[0]; i++) {
        char line[1024];
        megadlm_args a;
        snprintf(line, sizeof line, BASE " --%s %s", LONGEST[i][0], LONGEST[i][1]);
        int rc = parse_line(&a, line);
        CHECK(rc == 0);
        if (rc) fprintf(stderr, "  --%s %s: '%s'\n", LONGEST[i][0], LONGEST[i][1], ERR);
        args_free(&a);
    }
    megadlm_args a;
    CHECK(parse_line(&a, BASE " --attention-mask-type causal_bottom_right") == 0);
    CHECK(strcmp(a.attention_mask_type, "causal_bottom_right") == 0);
    args_free(&a);
    /* Megatron's longest decay style fits its field */
    EXPECT_OK(&a, BASE " --lr-decay-style inverse-square-root");
    CHECK(strcmp(a.lr_decay_style, "inverse-square-root") == 0);
    args_free(&a);
    /* a value that is really too long: 40 characters into a 32-byte field */
    EXPECT_ERR(BASE " --attention-mask-type causal_bottom_right_causal_bottom_righ",
               "--attention-mask-type: value longer than 31 characters", NULL, NULL);
    EXPECT_ERR(BASE " --normalization RMSNormRMSNormRMSNormRMSNormRMSNorm",
               "--normalization: value longer than 31 characters", NULL, NULL);
}

/* The flags of MegaDLMs' launch lines (examples/dlm_training/dlm_pretrain_1.7b.sh): accepted
 * with Megatron's values, their lower-precision or multi-instance choices refused by name. */
static void test_launch_line_flags(void) {
    megadlm_args a;
    EXPECT_OK(&a, BASE);
    CHECK(a.bias_dropout_fusion == 1 && a.bias_swiglu_fusion == 1 && a.masked_softmax_fusion == 1);
    CHECK(a.apply_rope_fusion == 1 && a.gradient_accumulation_fusion == 1);
    CHECK(a.no_persist_layer_norm == 0 && a.num_distributed_optimizer_instances == 1);
    CHECK(strcmp(a.rerun_mode, "disabled") == 0 && a.data_cache_path[0] == 0);
    CHECK(strcmp(a.exp_avg_sq_dtype, "fp32") == 0 && a.use_precision_aware_optimizer == 0);
    args_free(&a);
    EXPECT_OK(&a, BASE " --no-bias-dropout-fusion --no-bias-swiglu-fusion --no-bias-gelu-fusion "
                       "--no-masked-softmax-fusion --no-rope-fusion "
                       "--no-gradient-accumulation-fusion --no-persist-layer-norm");
    CHECK(a.bias_dropout_fusion == 0 && a.bias_swiglu_fusion == 0 && a.bias_gelu_fusion == 0);
    CHECK(a.masked_softmax_fusion == 0 && a.apply_rope_fusion == 0);
    CHECK(a.gradient_accumulation_fusion == 0 && a.no_persist_layer_norm == 1);
    args_free(&a);
    EXPECT_OK(&a, BASE " --use-precision-aware-optimizer --main-params-dtype=fp32 "
                       "--main-grads-dtype=fp32 --exp-avg-dtype=fp32 --exp-avg-sq-dtype=fp32 "
                       "--accumulate-allreduce-grads-in-fp32 --distributed-timeout-minutes 60");
    CHECK(a.use_precision_aware_optimizer == 1 && a.accumulate_allreduce_grads_in_fp32 == 1);
    CHECK(a.distributed_timeout_minutes == 60.0f);
    args_free(&a);
    EXPECT_ERR(BASE " --main-params-dtype fp16", "--main-params-dtype fp16", "not supported yet", NULL);
    EXPECT_ERR(BASE " --main-grads-dtype bf16", "--main-grads-dtype bf16", "not supported yet", NULL);
    EXPECT_ERR(BASE " --exp-avg-dtype fp8", "--exp-avg-dtype fp8", "not supported yet", NULL);
    EXPECT_ERR(BASE " --exp-avg-sq-dtype fp16", "--exp-avg-sq-dtype fp16", "not supported yet", NULL);
    EXPECT_ERR(BASE " --exp-avg-dtype fp64", "--exp-avg-dtype 'fp64'", "expected fp32", NULL);
    EXPECT_OK(&a, BASE " --num-distributed-optimizer-instances 1");
    args_free(&a);
    EXPECT_ERR(BASE " --num-distributed-optimizer-instances 2",
               "--num-distributed-optimizer-instances 2", "--use-distributed-optimizer", NULL);
    EXPECT_ERR(BASE " --num-distributed-optimizer-instances 2 --use-distributed-optimizer",
               "--num-distributed-optimizer-instances 2", "data-parallel size 1", NULL);
    for (int n = 1; n <= 4; n++) { /* world 4 = DP 4: N must divide it */
        char line[512];
        snprintf(line, sizeof line, BASE " --use-distributed-optimizer "
                 "--num-distributed-optimizer-instances %d", n);
        CHECK(parse_line(&a, line) == 0);
        a.world_size = 4;
        int rc = args_validate(&a, ERR, sizeof(ERR));
        CHECK(n == 3 ? rc == -1 && strstr(ERR, "does not divide the data-parallel size 4") : rc == 0);
        args_free(&a);
    }
    EXPECT_ERR(BASE " --num-distributed-optimizer-instances 0",
               "--num-distributed-optimizer-instances", "positive", NULL);
    static const char *const MODES[] = {"disabled", "validate_results", "report_stats",
                                        "report_determinism_stats"};
    for (int i = 0; i < 4; i++) {
        char line[512];
        snprintf(line, sizeof line, BASE " --rerun-mode %s", MODES[i]);
        EXPECT_OK(&a, line);
        CHECK(strcmp(a.rerun_mode, MODES[i]) == 0);
        args_free(&a);
    }
    EXPECT_ERR(BASE " --rerun-mode always", "--rerun-mode 'always'", "validate_results", NULL);
    EXPECT_OK(&a, BASE " --rerun-mode validate_results --check-for-spiky-loss");
    CHECK(a.check_for_spiky_loss == 1);
    args_free(&a);
    EXPECT_ERR(BASE " --check-for-spiky-loss", "--check-for-spiky-loss",
               "--rerun-mode validate_results", NULL);
    EXPECT_OK(&a, BASE " --data-cache-path cache/dir");
    CHECK(strcmp(a.data_cache_path, "cache/dir") == 0);
    args_free(&a);
}

/* --use-rotary-position-embeddings: Megatron's legacy form of --position-embedding-type rope
 * (validate_args sets the type to rope, whatever --position-embedding-type said). */
static void test_legacy_rope_flag(void) {
    megadlm_args a, r;
    CHECK(parse_line(&a, BASE " --use-rotary-position-embeddings") == 0);
    CHECK(a.use_rotary_position_embeddings == 1);
    CHECK(strcmp(a.position_embedding_type, "learned_absolute") == 0); /* until validation */
    CHECK(args_validate(&a, ERR, sizeof(ERR)) == 0);
    CHECK(strcmp(a.position_embedding_type, "rope") == 0);
    EXPECT_OK(&r, BASE " --position-embedding-type rope");
    { /* the same model as --position-embedding-type rope: every flag a checkpoint fixes */
        cJSON *ja = args_to_json(&a), *jr = args_to_json(&r);
        for (int i = 0; args_model_flags[i]; i++)
            CHECK(cJSON_Compare(cJSON_GetObjectItemCaseSensitive(ja, args_model_flags[i]),
                                cJSON_GetObjectItemCaseSensitive(jr, args_model_flags[i]), 1));
        cJSON_Delete(ja);
        cJSON_Delete(jr);
    }
    EXPECT_OK(&a, BASE " --position-embedding-type learned_absolute "
                  "--use-rotary-position-embeddings");
    CHECK(strcmp(a.position_embedding_type, "rope") == 0);
    /* RoPE's rules apply to it */
    EXPECT_ERR(BASE " --use-rotary-position-embeddings --rotary-percent 0", "--rotary-percent",
               NULL, NULL);
    EXPECT_ERR(BASE " --use-rotary-position-embeddings=1", "--use-rotary-position-embeddings",
               "takes no value", NULL);
    /* saved and printed under its name */
    cJSON *j = args_to_json(&a);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "use_rotary_position_embeddings")));
    cJSON_Delete(j);
    char *s = capture_print(&a);
    CHECK(s && strstr(s, "  use_rotary_position_embeddings ") && strstr(s, " True\n"));
    free(s);
    char *h = capture_help();
    CHECK(h && strstr(h, "  --use-rotary-position-embeddings ") && strstr(h, "[default: off]"));
    free(h);
}

/* Megatron's OptimizerParamScheduler.get_lr for WSD, values worked by hand from its formula:
 * warmup 10, decay 100 (in steps), max 1, min 0.1 */
static void test_wsd_schedule(void) {
    lr_scheduler s = {.max_lr = 1.0, .min_lr = 0.1, .warmup_steps = 10, .decay_steps = 100,
                      .wsd_decay_steps = 0, .style = LR_WSD, .wsd_style = WSD_EXPONENTIAL};
    CHECK(fabs(lr_scheduler_get(&s, 5) - 0.5) < 1e-12);    /* warmup: 1 x 5 / 10 */
    CHECK(fabs(lr_scheduler_get(&s, 50) - 1.0) < 1e-12);   /* stable */
    CHECK(fabs(lr_scheduler_get(&s, 100) - 1.0) < 1e-12);  /* no annealing steps */
    CHECK(fabs(lr_scheduler_get(&s, 101) - 0.1) < 1e-12);  /* past decay: min */
    s.wsd_decay_steps = 10; /* annealing from 90: r = 0.5, coeff 2 x 0.5^0.5 - 1 */
    CHECK(fabs(lr_scheduler_get(&s, 95) - (0.1 + 0.9 * 0.41421356237309515)) < 1e-12);
    CHECK(fabs(lr_scheduler_get(&s, 90) - 1.0) < 1e-12);
}

/* Megatron's get_lr with a fractional warmup (2.5 samples, from 0.2) and inverse-square-root,
 * values worked by hand from its formulas: decay 10, max 1, min 0.1 */
static void test_fraction_and_isqrt_schedule(void) {
    lr_scheduler s = {.max_lr = 1.0, .min_lr = 0.1, .init_lr = 0.2, .warmup_steps = 2.5,
                      .decay_steps = 10, .style = LR_INVERSE_SQRT};
    CHECK(fabs(lr_scheduler_get(&s, 0) - 0.2) < 1e-12);    /* the warmup's start */
    CHECK(fabs(lr_scheduler_get(&s, 1) - 0.52) < 1e-12);   /* 0.2 + 0.8 x 1 / 2.5 */
    CHECK(fabs(lr_scheduler_get(&s, 2) - 0.84) < 1e-12);   /* 0.2 + 0.8 x 2 / 2.5 */
    CHECK(fabs(lr_scheduler_get(&s, 3) - 0.9128709291752769) < 1e-12); /* sqrt(2.5 / 3) */
    CHECK(fabs(lr_scheduler_get(&s, 10) - 0.5) < 1e-12);   /* sqrt(2.5 / 10) */
    CHECK(fabs(lr_scheduler_get(&s, 11) - 0.1) < 1e-12);   /* past the decay: min */
    s.min_lr = 0.6;                                         /* sqrt(2.5 / 9) = 0.527: floor */
    CHECK(fabs(lr_scheduler_get(&s, 9) - 0.6) < 1e-12);
    s.warmup_steps = 0.0;                                   /* no warmup: Megatron's max(w, 1) */
    s.min_lr = 0.0;
    CHECK(fabs(lr_scheduler_get(&s, 0) - 1.0) < 1e-12);
    CHECK(fabs(lr_scheduler_get(&s, 4) - 0.5) < 1e-12);    /* sqrt(1 / 4) */
    s = (lr_scheduler){.max_lr = 1.0, .min_lr = 0.0, .warmup_steps = 2.5, .decay_steps = 10,
                       .style = LR_COSINE};                 /* ratio (3 - 2.5) / 7.5 = 1/15 */
    CHECK(fabs(lr_scheduler_get(&s, 3) - 0.9890738003669028) < 1e-12);
    CHECK(fabs(lr_scheduler_get(&s, 2) - 0.8) < 1e-12);    /* still warming up: 2 / 2.5 */
    megadlm_args a;
    args_defaults(&a);
    snprintf(a.lr_decay_style, sizeof a.lr_decay_style, "inverse-square-root");
    CHECK(training_lr_decay_style(&a) == LR_INVERSE_SQRT);
}

/* --context-parallel-size and --cp-comm-type: Megatron's names, the built exchange, the split
 * into 2 x CP chunks (Megatron's rule for --seq-length; difflm-noshift pads instead), the world
 * TP x PP x CP x DP. */
static void test_context_parallel_flags(void) {
    static const struct {
        const char *flags, *want; /* want: NULL = valid */
    } cases[] = {
        {"--context-parallel-size 2", NULL}, /* p2p, Megatron's default */
        {"--context-parallel-size 2 --bf16", "--cp-comm-type p2p with --bf16: not built yet"},
        {"--context-parallel-size 2 --cp-comm-type a2a", NULL},
        {"--context-parallel-size 4 --cp-comm-type a2a --tensor-model-parallel-size 2",
         "query groups (--num-query-groups / --tensor-model-parallel-size) are not divisible"},
        {"--context-parallel-size 2 --cp-comm-type a2a+p2p", "--cp-comm-type a2a+p2p: not built"},
        {"--cp-comm-type ring", "--cp-comm-type ring: expected p2p, a2a, allgather or a2a+p2p"},
        {"--context-parallel-size 2 --cp-comm-type allgather", NULL},
        {"--context-parallel-size 4 --cp-comm-type allgather", NULL},
        {"--context-parallel-size 3 --cp-comm-type allgather",
         "--seq-length 32 is not divisible by 2 x 3"},
        /* masked diffusion: its seq-length - 1 = 31 tokens are padded to 2 x CP chunks (and to
         * the sequence-parallel split), whatever the sizes */
        {"--context-parallel-size 2 --cp-comm-type allgather --model-running-mode difflm-noshift "
         "--mask-token 99", NULL},
        {"--context-parallel-size 3 --model-running-mode difflm-noshift --mask-token 99", NULL},
        {"--context-parallel-size 2 --model-running-mode difflm-noshift --mask-token 99 "
         "--tensor-model-parallel-size 2 --sequence-parallel --micro-batch-size 1", NULL},
        {"--model-running-mode difflm-noshift --mask-token 99 --tensor-model-parallel-size 2 "
         "--sequence-parallel --micro-batch-size 1", NULL},
        {"--context-parallel-size 2 --cp-comm-type allgather --use-distributed-optimizer", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        megadlm_args a;
        char line[512];
        snprintf(line, sizeof(line), BASE " %s", cases[i].flags);
        int rc = run_line(&a, line);
        int ok = cases[i].want ? rc == -1 && strstr(ERR, cases[i].want) != NULL : rc == 0;
        CHECK(ok);
        if (!ok) fprintf(stderr, "  %s -> %d '%s'\n", cases[i].flags, rc, ERR);
        args_free(&a);
    }
    /* DP = world / (TP x PP x CP); a world that does not divide is named with CP */
    static const struct {
        int world, rc, dp;
    } worlds[] = {{8, 0, 2}, {4, 0, 1}, {6, -1, 0}};
    for (size_t i = 0; i < sizeof(worlds) / sizeof(worlds[0]); i++) {
        megadlm_args a;
        CHECK(parse_line(&a, BASE " --context-parallel-size 2 --cp-comm-type allgather "
                               "--tensor-model-parallel-size 2") == 0);
        a.world_size = worlds[i].world;
        CHECK(args_validate(&a, ERR, sizeof(ERR)) == worlds[i].rc);
        if (worlds[i].rc == 0) CHECK(a.data_parallel_size == worlds[i].dp);
        if (worlds[i].rc) CHECK(strstr(ERR, "x --context-parallel-size 2") != NULL);
        args_free(&a);
    }
}

/* Choice flags (arguments.def's ARG_CHOICE entries): each value maps to its constant and back,
 * the flag's --help names every value, a value of another flag is none of this one's, and
 * validation accepts exactly the table's values (a constant read outside the parser is never
 * ARGS_CHOICE_NONE after args_validate). */
/* ---- mixture of experts (MegaDLMs' _add_moe_args) ---- */

/* BASE (2 layers, ffn 256) with 4 experts, as an MoE model needs it (no biases) */
#define MOE BASE " --num-experts 4 --disable-bias-linear"

static void test_moe_defaults(void) {
    megadlm_args a;
    args_defaults(&a);
    CHECK(a.num_experts == 0 && a.expert_model_parallel_size == 1);
    CHECK(a.expert_tensor_parallel_size == 0 && strcmp(a.moe_layer_freq, "1") == 0);
    CHECK(a.moe_ffn_hidden_size == 0 && a.moe_shared_expert_intermediate_size == 0);
    CHECK(a.moe_shared_expert_overlap == 0 && a.moe_grouped_gemm == 0);
    CHECK(a.moe_use_legacy_grouped_gemm == 0);
    CHECK(strcmp(a.moe_router_load_balancing_type, "aux_loss") == 0);
    CHECK(a.moe_router_topk == 2 && a.moe_router_pre_softmax == 0);
    CHECK(a.moe_router_topk_limited_devices == 0 && a.moe_router_topk_scaling_factor < 0);
    CHECK(a.moe_aux_loss_coeff == 0.0f && a.moe_z_loss_coeff < 0 && a.moe_input_jitter_eps < 0);
    CHECK(strcmp(a.moe_token_dispatcher_type, "allgather") == 0 && a.moe_per_layer_logging == 0);
    CHECK(a.moe_expert_capacity_factor < 0 && a.moe_pad_expert_input_to_capacity == 0);
    CHECK(strcmp(a.moe_token_drop_policy, "probs") == 0 && a.moe_layer_recompute == 0);
    CHECK(a.moe_extended_tp == 0 && a.moe_use_upcycling == 0);
    /* a dense model: nothing derived, moe_config all zero */
    EXPECT_OK(&a, BASE);
    CHECK(a.num_experts == 0 && a.expert_tensor_parallel_size == 0 && a.moe_ffn_hidden_size == 0);
    {
        transformer_config c = model_config_from_args(&a);
        moe_config zero;
        memset(&zero, 0, sizeof zero);
        CHECK(memcmp(&c.moe, &zero, sizeof zero) == 0 && !tc_moe(&c) && !tc_moe_layer(&c, 0));
    }
    /* Megatron's arguments block: None for the unset ones */
    char *s = capture_print(&a);
    CHECK(s != NULL);
    static const char *const NONE[] = {"num_experts", "expert_tensor_parallel_size",
                                       "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size",
                                       "moe_router_topk_limited_devices",
                                       "moe_router_topk_scaling_factor", "moe_z_loss_coeff",
                                       "moe_input_jitter_eps", "moe_expert_capacity_factor"};
    for (size_t i = 0; s && i < sizeof NONE / sizeof NONE[0]; i++) {
        char want[128];
        snprintf(want, sizeof want, "\n  %s %.*s None\n", NONE[i], 48 - (int)strlen(NONE[i]),
                 "................................................");
        CHECK(strstr(s, want) != NULL);
        if (!strstr(s, want)) fprintf(stderr, "  arguments block lacks '%s'\n", want + 1);
    }
    CHECK(s && strstr(s, "\n  moe_router_topk ") && strstr(s, "\n  moe_layer_freq "));
    free(s);
    args_free(&a);
    /* --num-experts 0 is Megatron's None: a dense model */
    EXPECT_OK(&a, BASE " --num-experts 0");
    CHECK(a.num_experts == 0 && model_config_from_args(&a).moe.num_experts == 0);
    args_free(&a);
    /* `megadlm memory` (and plan) share the parser */
    char *argv[] = {"memory", "--num-experts", "8", "--moe-router-topk", "1", NULL};
    args_defaults(&a);
    CHECK(args_parse(&a, 5, argv, ERR, sizeof ERR) == 0 && a.num_experts == 8 &&
          a.moe_router_topk == 1);
    args_free(&a);
}

/* Every value of the choice flags, and what each becomes in moe_config. */
static void test_moe_choices(void) {
    static const struct {
        const char *flags;
        moe_load_balancing lb;
    } LB[] = {
        {"aux_loss", MOE_LB_AUX_LOSS},
        {"seq_aux_loss", MOE_LB_SEQ_AUX_LOSS},
        {"sinkhorn", MOE_LB_SINKHORN},
        {"none", MOE_LB_NONE},
    };
    for (size_t i = 0; i < sizeof LB / sizeof LB[0]; i++) {
        megadlm_args a;
        char line[1024];
        snprintf(line, sizeof line, MOE " --moe-router-load-balancing-type %s", LB[i].flags);
        EXPECT_OK(&a, line);
        CHECK(model_config_from_args(&a).moe.load_balancing == LB[i].lb);
        args_free(&a);
    }
    EXPECT_ERR(MOE " --moe-router-load-balancing-type softmax_expert_choice",
               "--moe-router-load-balancing-type softmax_expert_choice",
               "not supported yet with --num-experts", NULL);
    EXPECT_ERR(MOE " --moe-router-load-balancing-type sinkhorn_expert_choice",
               "--moe-router-load-balancing-type sinkhorn_expert_choice",
               "not supported yet with --num-experts", NULL);
    EXPECT_ERR(MOE " --moe-router-load-balancing-type switch",
               "--moe-router-load-balancing-type 'switch'", "expected aux_loss, seq_aux_loss",
               "sinkhorn_expert_choice");
    megadlm_args a;
    EXPECT_OK(&a, MOE " --moe-token-dispatcher-type allgather");
    CHECK(model_config_from_args(&a).moe.dispatcher == MOE_DISPATCHER_ALLGATHER);
    args_free(&a);
    EXPECT_OK(&a, MOE " --moe-token-dispatcher-type alltoall");
    CHECK(model_config_from_args(&a).moe.dispatcher == MOE_DISPATCHER_ALLTOALL);
    args_free(&a);
    EXPECT_ERR(MOE " --moe-token-dispatcher-type alltoall_seq",
               "--moe-token-dispatcher-type alltoall_seq", "not supported yet with --num-experts",
               "(docs/MOE.md)");
    EXPECT_ERR(MOE " --moe-token-dispatcher-type flex", "--moe-token-dispatcher-type 'flex'",
               "expected allgather, alltoall or alltoall_seq", NULL);
    EXPECT_OK(&a, MOE);
    CHECK(model_config_from_args(&a).moe.drop_policy == MOE_DROP_PROBS);
    args_free(&a);
    EXPECT_OK(&a, MOE " --moe-token-dispatcher-type alltoall --moe-expert-capacity-factor 1.0 "
                      "--moe-token-drop-policy probs");
    CHECK(model_config_from_args(&a).moe.drop_policy == MOE_DROP_PROBS);
    args_free(&a);
    EXPECT_OK(&a, MOE " --moe-token-dispatcher-type alltoall --moe-expert-capacity-factor 1.0 "
                      "--moe-token-drop-policy position");
    CHECK(model_config_from_args(&a).moe.drop_policy == MOE_DROP_POSITION);
    args_free(&a);
    EXPECT_ERR(MOE " --moe-token-drop-policy random", "--moe-token-drop-policy 'random'",
               "expected probs or position", NULL);
}

/* Every flag given, copied into moe_config; the derived sizes; the round trip of state.json. */
static void test_moe_config(void) {
    megadlm_args a;
    CHECK(parse_line(&a, BASE " --num-experts 8 --disable-bias-linear "
                     "--expert-model-parallel-size 2 --moe-ffn-hidden-size 32 "
                     "--moe-shared-expert-intermediate-size 48 --moe-grouped-gemm "
                     "--moe-router-load-balancing-type seq_aux_loss --moe-router-topk 3 "
                     "--moe-router-pre-softmax --moe-router-topk-scaling-factor 2.5 "
                     "--moe-aux-loss-coeff 0.01 --moe-z-loss-coeff 0.001 "
                     "--moe-input-jitter-eps 0.05 --moe-token-dispatcher-type alltoall "
                     "--moe-expert-capacity-factor 1.5 --moe-pad-expert-input-to-capacity "
                     "--moe-token-drop-policy position --moe-per-layer-logging "
                     "--moe-layer-freq ([0]+[1]*1)*1") == 0);
    a.world_size = 2; /* EP 2 of the data-parallel ranks */
    CHECK(args_validate(&a, ERR, sizeof ERR) == 0);
    if (ERR[0]) fprintf(stderr, "  %s\n", ERR);
    CHECK(a.expert_tensor_parallel_size == 1 && a.moe_ffn_hidden_size == 32);
    CHECK(strcmp(a.moe_layer_freq, "([0]+[1]*1)*1") == 0); /* kept as given */
    transformer_config c = model_config_from_args(&a);
    const moe_config *m = &c.moe;
    CHECK(m->num_experts == 8 && m->ffn_hidden_size == 32 && m->shared_expert_size == 48);
    CHECK(m->topk == 3 && m->pre_softmax == 1 && m->topk_scaling_factor == 2.5f);
    CHECK(m->topk_limited_devices == 0 && m->load_balancing == MOE_LB_SEQ_AUX_LOSS);
    CHECK(m->aux_loss_coeff == 0.01f && m->z_loss_coeff == 0.001f && m->input_jitter_eps == 0.05f);
    CHECK(m->dispatcher == MOE_DISPATCHER_ALLTOALL && m->capacity_factor == 1.5f);
    CHECK(m->pad_to_capacity == 1 && m->drop_policy == MOE_DROP_POSITION);
    CHECK(m->grouped_gemm == 1 && m->shared_expert_overlap == 0 && m->layer_recompute == 0);
    CHECK(m->layer_freq == 0 && m->pattern[0] == 0 && m->pattern[1] == 1);
    CHECK(m->ep_size == 2 && m->ep_rank == 0);
    CHECK(tc_moe(&c) && !tc_moe_layer(&c, 0) && tc_moe_layer(&c, 1));
    CHECK(tc_ep(&c) == 2 && tc_experts_local(&c) == 4);
    /* the arguments block shows the pattern as given; state.json carries every field */
    char *s = capture_print(&a);
    CHECK(s && strstr(s, "  moe_layer_freq ") && strstr(s, " ([0]+[1]*1)*1\n"));
    free(s);
    cJSON *j = args_to_json(&a);
    char *text = cJSON_PrintUnformatted(j);
    CHECK(text && strstr(text, "\"moe_layer_freq\":\"([0]+[1]*1)*1\""));
    CHECK(text && strstr(text, "\"num_experts\":8,") && strstr(text, "\"moe_router_topk\":3,"));
    CHECK(text && strstr(text, "\"moe_expert_capacity_factor\":1.5,"));
    megadlm_args b;
    args_defaults(&b);
    CHECK(args_from_json(&b, j, ERR, sizeof ERR) == 0);
    {
        megadlm_args x = a, y = b;
        memset(x.data_paths, 0, sizeof x.data_paths);
        memset(y.data_paths, 0, sizeof y.data_paths);
        CHECK(memcmp(&x, &y, sizeof x) == 0);
    }
    CHECK(args_validate(&b, ERR, sizeof ERR) == 0); /* idempotent */
    CHECK(b.moe_ffn_hidden_size == 32 && b.expert_tensor_parallel_size == 1);
    free(text);
    cJSON_Delete(j);
    /* one process (a checkpoint's model rebuilt whole): no expert parallelism */
    args_one_process(&b);
    CHECK(b.expert_model_parallel_size == 1 && model_config_from_args(&b).moe.ep_size == 1);
    args_free(&b);
    args_free(&a);
    /* not given: expert ffn = ffn, expert TP = TP, every layer an MoE layer, the Nones none */
    EXPECT_OK(&a, MOE);
    CHECK(a.moe_ffn_hidden_size == 256 && a.expert_tensor_parallel_size == 1);
    c = model_config_from_args(&a);
    CHECK(c.moe.num_experts == 4 && c.moe.ffn_hidden_size == 256 && c.moe.topk == 2);
    CHECK(c.moe.layer_freq == 1 && tc_moe_layer(&c, 0) && tc_moe_layer(&c, 1));
    CHECK(c.moe.shared_expert_size == 0 && c.moe.topk_scaling_factor <= 0);
    CHECK(c.moe.z_loss_coeff < 0 && c.moe.input_jitter_eps <= 0 && c.moe.capacity_factor < 0);
    CHECK(c.moe.load_balancing == MOE_LB_AUX_LOSS && c.moe.ep_size == 1);
    CHECK(args_validate(&a, ERR, sizeof ERR) == 0 && a.moe_ffn_hidden_size == 256);
    args_free(&a);
    EXPECT_OK(&a, MOE " --moe-layer-freq 2");
    c = model_config_from_args(&a);
    CHECK(c.moe.layer_freq == 2 && tc_moe_layer(&c, 0) && !tc_moe_layer(&c, 1));
    args_free(&a);
    /* a negative capacity factor is Megatron's None (allgather then allowed) */
    EXPECT_OK(&a, MOE " --moe-expert-capacity-factor -1");
    CHECK(model_config_from_args(&a).moe.capacity_factor < 0);
    s = capture_print(&a);
    CHECK(s && strstr(s, "  moe_expert_capacity_factor ") && strstr(s, "... None\n"));
    free(s);
    args_free(&a);
    /* expert parallelism: the world divisible by EP */
    EXPECT_ERR(MOE " --expert-model-parallel-size 2", "world size (1) is not divisible by",
               "--expert-model-parallel-size 2", NULL);
}

static void check_pattern(const char *s, int layers, const char *want) {
    uint8_t p[MOE_MAX_PATTERN_LAYERS];
    int freq = -1;
    char err[1024] = "";
    int rc = args_moe_layer_pattern(s, layers, &freq, p, err, sizeof err);
    int ok = rc == 0 && freq == 0 && (int)strlen(want) == layers;
    for (int i = 0; ok && i < layers; i++) ok = p[i] == want[i] - '0';
    CHECK(ok);
    if (!ok) fprintf(stderr, "  pattern '%s' (%d layers): rc %d freq %d '%s'\n", s, layers, rc, freq, err);
}

static void check_pattern_err(const char *s, int layers, const char *want) {
    uint8_t p[MOE_MAX_PATTERN_LAYERS];
    int freq = -1;
    char err[1024] = "";
    int rc = args_moe_layer_pattern(s, layers, &freq, p, err, sizeof err);
    int ok = rc == -1 && strstr(err, "--moe-layer-freq") && strstr(err, want);
    CHECK(ok);
    if (!ok) fprintf(stderr, "  pattern '%.60s': rc %d, '%s' (wanted '%s')\n", s, rc, err, want);
}

/* --moe-layer-freq: Megatron's moe_freq_type, parsed (never evaluated) */
static void test_moe_layer_pattern(void) {
    uint8_t p[MOE_MAX_PATTERN_LAYERS];
    int freq = -1;
    CHECK(args_moe_layer_pattern("2", 4, &freq, p, ERR, sizeof ERR) == 0 && freq == 2);
    CHECK(args_moe_layer_pattern("1", 1, &freq, p, ERR, sizeof ERR) == 0 && freq == 1);
    CHECK(args_moe_layer_pattern(" 3 ", 4, &freq, p, ERR, sizeof ERR) == 0 && freq == 3);
    check_pattern("[1,0,1,0]", 4, "1010");
    check_pattern("([1]*3+[0]*1)*3", 12, "111011101110");
    check_pattern("([0]+[1]*23)", 24, "011111111111111111111111");
    check_pattern("([1]*3+[0]*2)*2", 10, "1110011100");
    check_pattern("2*[1,0]", 4, "1010");
    check_pattern("[ 1 , 0 , 1 , 0 , ]", 4, "1010");
    check_pattern("[1]*2*2+[]+[0]*0", 4, "1111");
    check_pattern("([1]+[0]*(1+1))*(2*1)", 6, "100100");
    {
        char big[16];
        snprintf(big, sizeof big, "[1,0]*%d", MOE_MAX_PATTERN_LAYERS / 2);
        uint8_t q[MOE_MAX_PATTERN_LAYERS];
        CHECK(args_moe_layer_pattern(big, MOE_MAX_PATTERN_LAYERS, &freq, q, ERR, sizeof ERR) == 0);
        CHECK(freq == 0 && q[0] == 1 && q[MOE_MAX_PATTERN_LAYERS - 1] == 0);
    }
    /* Megatron's length check, its message */
    check_pattern_err("[1,0,1]", 4, "Invalid length of moe_layer_pattern: 3, expected 4");
    check_pattern_err("[1,0,1]", 4, "current moe layer pattern: [1, 0, 1]");
    check_pattern_err("([1]*3+[0]*1)*3", 8, "Invalid length of moe_layer_pattern: 12, expected 8");
    /* entries are 0 or 1 */
    check_pattern_err("[1,0,2,0]", 4, "entry 3 is 2: expected 0 (a dense layer) or 1");
    check_pattern_err("[[1],[0]]", 2, "entry 1 is a list");
    /* not the grammar */
    check_pattern_err("([1]*", 4, "unexpected end");
    check_pattern_err("[1,0", 2, "unexpected end");
    check_pattern_err("[1,0]]", 2, "unexpected character");
    check_pattern_err("[1 0]", 2, "expected ',' or ']'");
    check_pattern_err("__import__('os')", 4, "expected a positive integer");
    check_pattern_err("[__import__('os').system('true')]", 1, "unexpected character");
    check_pattern_err("[1]*len('ab')", 2, "unexpected character");
    check_pattern_err("[True,False]", 2, "unexpected character");
    check_pattern_err("[1]*[1]", 1, "a list times a list");
    check_pattern_err("[1]+1", 1, "a list plus an integer");
    check_pattern_err("([1])[0]", 1, "unexpected character");
    check_pattern_err("[1]-[0]", 1, "unexpected character");
    check_pattern_err("(1,)", 1, "expected a positive integer"); /* no '[': an integer */
    check_pattern_err("[1]*(1,)", 1, "expected ')'");
    check_pattern_err("([1]*3)*1000000", 4, "more than 1024 entries");
    check_pattern_err("[1]*99999999999", 4, "a number too large");
    check_pattern_err("100000*100000*[1]", 4, "a number too large");
    {
        char deep[256];
        memset(deep, '(', 100);
        snprintf(deep + 100, sizeof deep - 100, "[1]");
        check_pattern_err(deep, 1, "nested too deeply");
    }
    /* an integer: positive (Megatron's int(x); 0 would divide by zero) */
    check_pattern_err("0", 4, "expected a positive integer");
    check_pattern_err("-2", 4, "expected a positive integer");
    check_pattern_err("", 4, "expected a positive integer");
    check_pattern_err("2x", 4, "expected a positive integer");
    /* through validation: --num-layers is BASE's 2 */
    megadlm_args a;
    EXPECT_OK(&a, MOE " --moe-layer-freq [1,0]");
    args_free(&a);
    EXPECT_ERR(MOE " --moe-layer-freq [1,0,1,0]", "--moe-layer-freq '[1,0,1,0]'",
               "Invalid length of moe_layer_pattern: 4, expected 2", NULL);
    EXPECT_ERR(MOE " --moe-layer-freq 0", "--moe-layer-freq '0'", "positive integer", NULL);
}

/* Megatron's rules, each message naming the flags. */
static void test_moe_rules(void) {
    megadlm_args a;
    EXPECT_ERR(MOE " --num-experts 6 --expert-model-parallel-size 4",
               "--num-experts 6 is not divisible by --expert-model-parallel-size 4",
               "Number of experts should be a multiple of expert model parallel_size.", NULL);
    EXPECT_ERR(MOE " --expert-model-parallel-size 2 --fp16", "--expert-model-parallel-size 2 with --fp16",
               "Expert parallelism is not supported with fp16 training.", NULL);
    EXPECT_ERR(MOE " --expert-model-parallel-size 2 --use-torch-fsdp2 "
                   "--untie-embeddings-and-output-weights --no-gradient-accumulation-fusion",
               "--use-torch-fsdp2 is not supported with expert parallelism",
               "--expert-model-parallel-size 2", NULL);
    EXPECT_ERR(MOE " --moe-router-topk 5", "--moe-router-topk 5", "--num-experts 4", NULL);
    EXPECT_ERR(MOE " --moe-router-topk 0", "--moe-router-topk", "positive integer", NULL);
    EXPECT_ERR(MOE " --moe-router-topk 1", "--moe-router-topk 1 needs --moe-router-pre-softmax",
               "Please use --moe-router-pre-softmax when topk is 1.", NULL);
    EXPECT_OK(&a, MOE " --moe-router-topk 1 --moe-router-pre-softmax");
    args_free(&a);
    EXPECT_OK(&a, MOE " --moe-router-topk 4");
    args_free(&a);
    EXPECT_OK(&a, MOE " --moe-router-topk 1 --moe-router-load-balancing-type sinkhorn");
    args_free(&a);
    EXPECT_ERR(MOE " --moe-router-load-balancing-type sinkhorn --moe-aux-loss-coeff 0.01",
               "--moe-router-load-balancing-type sinkhorn with --moe-aux-loss-coeff 0.01",
               "Sinkhorn routing does not support aux loss.", NULL);
    EXPECT_ERR(MOE " --moe-router-load-balancing-type none --moe-aux-loss-coeff 0.01",
               "--moe-aux-loss-coeff has no effect", "--moe-router-load-balancing-type none", NULL);
    EXPECT_OK(&a, MOE " --moe-aux-loss-coeff 0.01 --moe-z-loss-coeff 0 --moe-input-jitter-eps 0.1");
    CHECK(model_config_from_args(&a).moe.z_loss_coeff == 0.0f); /* given 0: a z-loss of 0 */
    args_free(&a);
    EXPECT_ERR(MOE " --moe-input-jitter-eps 0", "--moe-input-jitter-eps 0", "positive", NULL);
    EXPECT_ERR(MOE " --moe-input-jitter-eps -1", "--moe-input-jitter-eps", "non-negative", NULL);
    EXPECT_ERR(MOE " --moe-z-loss-coeff -1", "--moe-z-loss-coeff", "non-negative", NULL);
    EXPECT_ERR(MOE " --moe-router-topk-scaling-factor -1", "--moe-router-topk-scaling-factor",
               "non-negative", NULL);
    /* the shared expert */
    EXPECT_OK(&a, MOE " --moe-shared-expert-intermediate-size 64");
    CHECK(model_config_from_args(&a).moe.shared_expert_size == 64);
    args_free(&a);
    EXPECT_ERR(MOE " --moe-shared-expert-intermediate-size 0",
               "--moe-shared-expert-intermediate-size", "positive integer", NULL);
    CHECK(parse_line(&a, MOE) == 0);
    a.moe_shared_expert_intermediate_size = -8; /* a state.json's */
    CHECK(args_validate(&a, ERR, sizeof ERR) == -1);
    CHECK(strstr(ERR, "--moe-shared-expert-intermediate-size -8") &&
          strstr(ERR, "num_shared_experts * ffn_size_of_each_shared_expert"));
    args_free(&a);
    EXPECT_ERR(MOE " --moe-shared-expert-intermediate-size 64 --moe-shared-expert-overlap",
               "--moe-shared-expert-overlap needs --moe-token-dispatcher-type alltoall",
               "moe_shared_expert_overlap only works with alltoall token dispatcher.", NULL);
    EXPECT_ERR(MOE " --moe-shared-expert-overlap --moe-token-dispatcher-type alltoall",
               "--moe-shared-expert-overlap has no effect without",
               "--moe-shared-expert-intermediate-size", NULL);
    /* token dropping */
    EXPECT_ERR(MOE " --moe-expert-capacity-factor 1.0",
               "--moe-expert-capacity-factor needs --moe-token-dispatcher-type alltoall",
               "moe_expert_capacity_factor only works with alltoall token dispatcher", NULL);
    EXPECT_ERR(MOE " --moe-expert-capacity-factor 1.0 --moe-token-dispatcher-type alltoall "
                   "--moe-router-load-balancing-type sinkhorn",
               "--moe-expert-capacity-factor with --moe-router-load-balancing-type sinkhorn",
               "aux_loss, seq_aux_loss or none", NULL);
    EXPECT_ERR(MOE " --moe-expert-capacity-factor 1.0 --moe-token-dispatcher-type alltoall_seq",
               "--moe-token-dispatcher-type alltoall_seq", "not supported yet", NULL);
    EXPECT_OK(&a, MOE " --moe-expert-capacity-factor 0 --moe-token-dispatcher-type alltoall "
                      "--moe-router-load-balancing-type none --moe-pad-expert-input-to-capacity");
    CHECK(model_config_from_args(&a).moe.capacity_factor == 0.0f);
    args_free(&a);
    EXPECT_ERR(MOE " --moe-pad-expert-input-to-capacity",
               "--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor",
               "moe_expert_capacity_factor must be set to use moe_pad_expert_input_to_capacity",
               NULL);
    EXPECT_ERR(MOE " --moe-token-drop-policy position", "--moe-token-drop-policy position",
               "has no effect without --moe-expert-capacity-factor", NULL);
    /* device-limited routing: at most EP */
    CHECK(parse_line(&a, BASE " --num-experts 8 --disable-bias-linear "
                     "--expert-model-parallel-size 2 --moe-router-topk-limited-devices 3") == 0);
    a.world_size = 2;
    CHECK(args_validate(&a, ERR, sizeof ERR) == -1);
    CHECK(strstr(ERR, "--moe-router-topk-limited-devices 3 is larger than "
                      "--expert-model-parallel-size 2") != NULL);
    args_free(&a);
    /* upcycling writes the MoE model to --save, from the dense one of --load; what copies of
     * the dense MLP cannot make is refused */
    EXPECT_ERR(MOE " --moe-use-upcycling", "--moe-use-upcycling needs --save",
               "When using upcycling, the --save option must be specified.", NULL);
#define UP MOE " --moe-use-upcycling --save /tmp/megadlm-moe-save"
    EXPECT_ERR(UP, "--moe-use-upcycling needs --load", NULL, NULL);
    EXPECT_ERR(UP " --load /tmp/d --moe-layer-freq 2", "--moe-layer-freq 2: layer 1 would stay "
               "dense", NULL, NULL);
    EXPECT_ERR(UP " --load /tmp/d --moe-layer-freq [1,0]", "layer 1 would stay dense", NULL,
               NULL);
    EXPECT_ERR(UP " --load /tmp/d --moe-ffn-hidden-size 16", "granular upcycling", NULL, NULL);
    EXPECT_ERR(UP " --load /tmp/d --moe-shared-expert-intermediate-size 16",
               "--moe-shared-expert-intermediate-size", "no shared expert to load", NULL);
    EXPECT_ERR(UP " --load /tmp/d --use-checkpoint-args", "--use-checkpoint-args",
               "makes the model dense", NULL);
    EXPECT_OK(&a, UP " --load /tmp/d --moe-layer-freq [1,1]");
    args_free(&a);
#undef UP
    /* sizes the model keeps in an int, and the model's total (args_check_sizes) */
    EXPECT_ERR(MOE " --num-experts 1000000 --moe-ffn-hidden-size 4096 --moe-router-topk 2",
               "--num-experts 1000000 x the expert MLP width", "at most 2147483647", NULL);
    EXPECT_ERR(MOE " --num-experts 100000 --moe-ffn-hidden-size 20000 --hidden-size 65536 "
                   "--num-layers 1000", "the model", "2^60 bytes", NULL);
    EXPECT_OK(&a, MOE " --num-experts 100000 --moe-ffn-hidden-size 20000 --hidden-size 65536 "
                      "--num-layers 10"); /* 2e15 parameters: within the sizes */
    args_free(&a);
    /* a state.json's values the parser would refuse */
    CHECK(parse_line(&a, MOE) == 0);
    a.num_experts = -2;
    CHECK(args_validate(&a, ERR, sizeof ERR) == -1 && strstr(ERR, "--num-experts -2"));
    args_free(&a);
}

/* A mixture-of-experts flag without --num-experts would be ignored: refused. */
static void test_moe_flags_need_experts(void) {
    static const char *const GIVEN[] = {
        "--expert-model-parallel-size 2", "--expert-tensor-parallel-size 1",
        "--moe-layer-freq 2", "--moe-ffn-hidden-size 32",
        "--moe-shared-expert-intermediate-size 32", "--moe-shared-expert-overlap",
        "--moe-grouped-gemm", "--moe-use-legacy-grouped-gemm",
        "--moe-router-load-balancing-type sinkhorn", "--moe-router-topk 1",
        "--moe-router-pre-softmax", "--moe-router-topk-limited-devices 1",
        "--moe-router-topk-scaling-factor 1.0", "--moe-aux-loss-coeff 0.01",
        "--moe-z-loss-coeff 0.001", "--moe-input-jitter-eps 0.01",
        "--moe-token-dispatcher-type alltoall", "--moe-per-layer-logging",
        "--moe-expert-capacity-factor 1.0", "--moe-pad-expert-input-to-capacity",
        "--moe-token-drop-policy position", "--moe-layer-recompute", "--moe-extended-tp",
        "--moe-use-upcycling",
    };
    for (size_t i = 0; i < sizeof GIVEN / sizeof GIVEN[0]; i++) {
        char line[1024], want[160];
        snprintf(line, sizeof line, BASE " %s", GIVEN[i]);
        snprintf(want, sizeof want, "%.*s needs --num-experts", (int)strcspn(GIVEN[i], " "),
                 GIVEN[i]);
        EXPECT_ERR(line, want, "the model is dense", NULL);
        snprintf(line, sizeof line, BASE " --num-experts 0 %s", GIVEN[i]); /* 0: None */
        EXPECT_ERR(line, want, NULL, NULL);
    }
    /* their defaults given are no change */
    megadlm_args a;
    EXPECT_OK(&a, BASE " --expert-model-parallel-size 1 --moe-layer-freq 1 --moe-router-topk 2 "
                       "--moe-router-load-balancing-type aux_loss --moe-aux-loss-coeff 0 "
                       "--moe-token-dispatcher-type allgather --moe-token-drop-policy probs "
                       "--moe-expert-capacity-factor -1");
    args_free(&a);
}

/* What megadlm's MoE model does not build yet: each refused by name. */
static void test_moe_not_supported_yet(void) {
    static const struct {
        const char *extra, *flag;
    } NOT_YET[] = {
        {"--expert-model-parallel-size 2 --use-megatron-fsdp",
         "--use-megatron-fsdp with --expert-model-parallel-size > 1"},
        {"--expert-model-parallel-size 2 --use-custom-fsdp",
         "--use-custom-fsdp with --expert-model-parallel-size > 1"},
        {"--expert-tensor-parallel-size 2", "--expert-tensor-parallel-size 2"},
        {"--tensor-model-parallel-size 2 --sequence-parallel --expert-tensor-parallel-size 1",
         "--expert-tensor-parallel-size 1"},
        {"--moe-router-load-balancing-type softmax_expert_choice",
         "--moe-router-load-balancing-type softmax_expert_choice"},
        {"--moe-router-load-balancing-type sinkhorn_expert_choice",
         "--moe-router-load-balancing-type sinkhorn_expert_choice"},
        {"--moe-token-dispatcher-type alltoall_seq", "--moe-token-dispatcher-type alltoall_seq"},
        {"--expert-model-parallel-size 2 --use-distributed-optimizer "
         "--num-distributed-optimizer-instances 2",
         "--num-distributed-optimizer-instances > 1 with --expert-model-parallel-size > 1"},
    };
    for (size_t i = 0; i < sizeof NOT_YET / sizeof NOT_YET[0]; i++) {
        char line[1024];
        snprintf(line, sizeof line, MOE " %s", NOT_YET[i].extra);
        EXPECT_ERR(line, NOT_YET[i].flag, ": not supported yet with --num-experts (docs/MOE.md)",
                   NULL);
        /* and each of them is fine for a dense model */
        megadlm_args a;
        snprintf(line, sizeof line, BASE " %s", NOT_YET[i].extra);
        if (strstr(line, "moe-") || strstr(line, "expert-")) continue;
        int rc = parse_line(&a, line);
        if (rc == 0) {
            a.world_size = 0;
            rc = args_validate(&a, ERR, sizeof ERR);
            /* (the layouts need their ranks: only the MoE refusal must be absent) */
            CHECK(rc == 0 || !strstr(ERR, "--num-experts"));
        }
        args_free(&a);
    }
    /* Megatron's MoE layer: tensor parallelism only with sequence parallelism; no per-sequence
     * loss over a sequence split across ranks */
    EXPECT_ERR(MOE " --tensor-model-parallel-size 2", "--tensor-model-parallel-size 2 needs "
               "--sequence-parallel", NULL, NULL);
    EXPECT_ERR(MOE " --tensor-model-parallel-size 2 --sequence-parallel "
               "--moe-router-load-balancing-type seq_aux_loss", "seq_aux_loss with "
               "--tensor-model-parallel-size 2", NULL, NULL);
    EXPECT_ERR(MOE " --expert-model-parallel-size 2 --moe-router-topk-limited-devices 1 "
               "--moe-router-load-balancing-type sinkhorn --moe-aux-loss-coeff 0",
               "--moe-router-topk-limited-devices with --moe-router-load-balancing-type sinkhorn",
               NULL, NULL);
    EXPECT_ERR(MOE " --expert-model-parallel-size 2 --moe-router-topk 3 "
               "--moe-router-topk-limited-devices 1", "--moe-router-topk 3 with "
               "--moe-router-topk-limited-devices 1: the 1 chosen ranks hold 2 experts",
               NULL, NULL);
    EXPECT_ERR(MOE " --moe-use-legacy-grouped-gemm", "--moe-use-legacy-grouped-gemm needs "
               "--moe-grouped-gemm", NULL, NULL);
    EXPECT_ERR(MOE " --context-parallel-size 2 --moe-router-load-balancing-type seq_aux_loss",
               "seq_aux_loss with --context-parallel-size 2", NULL, NULL);
    /* biases */
    EXPECT_ERR(BASE " --num-experts 4", "--num-experts without --disable-bias-linear",
               "MoE layers have no biases: add --disable-bias-linear", NULL);
}

static void test_choice_table(void) {
#define ARGS_STR_(x) #x
#define ARGS_STR(x) ARGS_STR_(x)
    static const struct {
        const char *field, *help;
    } FLAGS[] = {
#define ARG_FLAG(field, type, deflt, check, config, group, flag, metavar, shown, help) \
    {#field, help},
#include "training/arguments.def"
    };
    static const struct {
        const char *field, *value;
        args_choice id;
    } CHOICES[] = {
#define ARG_CHOICE(field, name, value) {#field, value, name},
#include "training/arguments.def"
    };
    size_t nflags = sizeof FLAGS / sizeof FLAGS[0], n = sizeof CHOICES / sizeof CHOICES[0];
    CHECK(n >= 40);
    for (size_t i = 0; i < n; i++) {
        CHECK(CHOICES[i].id != ARGS_CHOICE_NONE);
        CHECK(args_choice_of(CHOICES[i].field, CHOICES[i].value) == CHOICES[i].id);
        CHECK(!strcmp(args_choice_name(CHOICES[i].id), CHOICES[i].value));
        const char *help = NULL;
        for (size_t f = 0; f < nflags; f++)
            if (!strcmp(FLAGS[f].field, CHOICES[i].field)) help = FLAGS[f].help;
        CHECK(help && strstr(help, CHOICES[i].value));
    }
    CHECK(args_choice_of("model_running_mode", "") == ARGS_CHOICE_NONE);
    CHECK(args_choice_of("model_running_mode", "full") == ARGS_CHOICE_NONE);
    CHECK(args_choice_of("recompute_granularity", "full") == ARGS_RECOMPUTE_FULL);
    CHECK(!strcmp(args_choice_name(ARGS_CHOICE_NONE), ""));
    megadlm_args a;
    args_defaults(&a);
    CHECK(ARGS_CHOICE(&a, model_running_mode) == ARGS_MODE_VANILLA);
    CHECK(ARGS_CHOICE(&a, recompute_granularity) == ARGS_CHOICE_NONE); /* "": not given */
    /* the string flags of a fixed set are choices too, their defaults among them */
    CHECK(ARGS_CHOICE(&a, base_model) == ARGS_BASE_MODEL_VANILLA);
    CHECK(ARGS_CHOICE(&a, core_attn_implementation) == ARGS_CORE_ATTN_TE);
    CHECK(ARGS_CHOICE(&a, attention_backend) == ARGS_ATTN_BACKEND_AUTO);
    CHECK(ARGS_CHOICE(&a, optimizer) == ARGS_OPTIMIZER_ADAM);
    CHECK(ARGS_CHOICE(&a, rerun_mode) == ARGS_RERUN_DISABLED);
    CHECK(ARGS_CHOICE(&a, ckpt_format) == ARGS_CKPT_FORMAT_TORCH_DIST);
    CHECK(ARGS_CHOICE(&a, non_persistent_ckpt_type) == ARGS_CHOICE_NONE); /* None */
    CHECK(ARGS_CHOICE(&a, ckpt_convert_format) == ARGS_CHOICE_NONE);     /* None */
    CHECK(ARGS_CHOICE(&a, main_params_dtype) == ARGS_MAIN_PARAMS_FP32);
    CHECK(ARGS_CHOICE(&a, main_grads_dtype) == ARGS_MAIN_GRADS_FP32);
    CHECK(ARGS_CHOICE(&a, exp_avg_dtype) == ARGS_EXP_AVG_FP32);
    CHECK(ARGS_CHOICE(&a, exp_avg_sq_dtype) == ARGS_EXP_AVG_SQ_FP32);
    CHECK(args_choice_of("rerun_mode", "report_determinism_stats") ==
          ARGS_RERUN_REPORT_DETERMINISM_STATS);
    CHECK(args_choice_of("ckpt_convert_format", "torch") == ARGS_CKPT_CONVERT_TORCH);
    CHECK(args_choice_of("ckpt_format", "torch") == ARGS_CHOICE_NONE); /* refused by name */
    char *argv[] = {"train", "--num-layers", "2", "--hidden-size", "32",
                    "--num-attention-heads", "4", "--seq-length", "16",
                    "--max-position-embeddings", "16", "--micro-batch-size", "1",
                    "--train-iters", "1", "--lr", "1e-3", "--mock-data", "--vocab-size", "100",
                    "--recompute-granularity", "fulll"};
    char err[512];
    CHECK(args_parse(&a, (int)(sizeof argv / sizeof argv[0]), argv, err, sizeof err) == 0);
    CHECK(args_validate(&a, err, sizeof err) != 0);
    CHECK(strstr(err, "--recompute-granularity fulll: expected full or selective") != NULL);
}

int main(void) {
    test_wsd_schedule();
    test_fraction_and_isqrt_schedule();
    test_ddp_flags();
    test_fsdp_flags();
    test_legacy_rope_flag();
    test_defaults();
    test_parse_values();
    test_parse_errors();
    test_refused_flags();
    test_context_parallel_flags();
    test_bf16_flag();
    test_fp16_flag();
    test_parallel();
    test_data_path();
    test_validation_errors();
    test_derived();
    test_help();
    test_print();
    test_json();
    test_recompute();
    test_difflm_flags();
    test_string_flag_sizes();
    test_launch_line_flags();
    test_choice_table();
    test_moe_defaults();
    test_moe_choices();
    test_moe_config();
    test_moe_layer_pattern();
    test_moe_rules();
    test_moe_flags_need_experts();
    test_moe_not_supported_yet();
    TEST_DONE();
}
