/* `megadlm memory`'s formulas (src/training/theoretical_memory.c) against numbers worked out
 * here, independently, in plain arithmetic:
 *  - the paper's four models (Korthikanti et al. 2022, Table 3: 22B, 175B, 530B, 1T; s = 2048,
 *    V = 51200, t = 8, micro-batch 1): Table 2's six rows, Megatron's parameter count and
 *    weight-and-optimizer bytes, the first stage's activations, appendix A's FLOPs; and the
 *    paper's percentages (§5, §6, Figure 7): selective recomputation saves about 70% of the
 *    activations of GPT-3 175B and 65% of MT-NLG 530B, sequence parallelism + selective
 *    recomputation need about 5x less than tensor parallelism alone;
 *  - Megatron's parameter formula for GQA + SwiGLU + untied (Llama 2 7B: 6,738,415,616);
 *  - Megatron's own report as its code evaluates it (training/megatron_memory.h) on Llama 3
 *    8B (RMSNorm biases, sbh(18 + 4f/h)) and GPT-2 (where it equals megadlm's);
 *  - the distributed optimizer, pipeline in-flight micro-batches and interleaving;
 *  - megadlm's own count: for small models of both families, every recompute mode and tensor-
 *    and sequence-parallel layouts, the bytes a built model allocates (tracked allocator) equal
 *    the prediction for parameters, gradients, optimizer state and saved activations. */
#include <string.h>

#include "core/models/gpt_model.h"
#include "core/tensor/memory.h"
#include "core/transformer/activation_memory.h"
#include "test_util.h"
#include "training/arguments.h"
#include "training/difflm.h"
#include "training/megatron_memory.h"
#include "training/model_provider.h"
#include "training/theoretical_memory.h"

static char ERR[1024];

/* parse + validate a train-style line (argv[0] = "memory" so --world-size is accepted) */
static int setup(megadlm_args *a, const char *line) {
    static char buf[4096];
    char *argv[256];
    int argc = 0;
    argv[argc++] = "memory";
    snprintf(buf, sizeof(buf), "%s --train-iters 1 --lr 1e-4 --mock-data", line);
    for (char *t = strtok(buf, " "); t && argc < 255; t = strtok(NULL, " ")) argv[argc++] = t;
    argv[argc] = NULL;
    args_defaults(a);
    int rc = args_parse(a, argc, argv, ERR, sizeof(ERR));
    if (rc == 0) rc = args_validate(a, ERR, sizeof(ERR));
    if (rc != 0) fprintf(stderr, "  line: %s\n  error: %s\n", line, ERR);
    return rc;
}

/* ---- the paper's four models ---- */

typedef struct {
    const char *name;
    double nominal; /* parameters */
    int L, h, heads, t, p, gbs;
} paper_model;

/* Table 3 (micro-batch 1, data-parallel size 1: GPUs = t x p) */
static const paper_model MODELS[] = {
    {"22B", 22e9, 48, 6144, 64, 8, 1, 4},
    {"175B", 175e9, 96, 12288, 96, 8, 8, 64},
    {"530B", 530e9, 105, 20480, 128, 8, 35, 280},
    {"1T", 1e12, 128, 25600, 160, 8, 64, 512},
};
#define NMODELS (int)(sizeof(MODELS) / sizeof(MODELS[0]))

static void paper_line(char *line, size_t n, const paper_model *m, const char *extra) {
    /* NullTokenizer 50256 -> 50257 entries, padded to a multiple of 128 x 8 -> 51200 */
    snprintf(line, n,
             "--num-layers %d --hidden-size %d --num-attention-heads %d --seq-length 2048 "
             "--max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size %d "
             "--vocab-size 50256 --tensor-model-parallel-size %d "
             "--pipeline-model-parallel-size %d %s",
             m->L, m->h, m->heads, m->gbs, m->t, m->p, extra);
}

static void test_paper_models(void) {
    const double s = 2048, b = 1, V = 51200;
    for (int i = 0; i < NMODELS; i++) {
        const paper_model *pm = &MODELS[i];
        double L = pm->L, h = pm->h, a = pm->heads, t = pm->t, p = pm->p, B = pm->gbs;
        char line[1024];
        paper_line(line, sizeof(line), pm, "--sequence-parallel --recompute-activations");
        megadlm_args args;
        CHECK(setup(&args, line) == 0);
        CHECK(args.padded_vocab_size == 51200);
        CHECK(args.world_size == pm->t * pm->p && args.data_parallel_size == 1);
        theoretical_memory m;
        theoretical_memory_compute(&args, &m);

        /* Table 2, per layer, bytes */
        double sbh = s * b * h;
        double rows[TM_NUM_ROWS] = {
            sbh * (34 + 5 * a * s / h),
            sbh * (10 + 24 / t + 5 * a * s / (h * t)),
            sbh / t * (34 + 5 * a * s / h),
            sbh * (10 + 24 / t),
            34 * sbh / t,
            2 * sbh,
        };
        for (int r = 0; r < TM_NUM_ROWS; r++) CHECK_CLOSE(m.per_layer[r], rows[r], 1e-12, 0);

        /* Megatron's parameter count: per layer 12h^2 + 4h (QKV, projection, two MLP matrices;
         * two LayerNorms of weight and bias), the final LayerNorm, the tied embedding */
        double block = L * (12 * h * h + 4 * h) + 2 * h;
        double total = block + V * h;
        CHECK_CLOSE(m.parameters, total, 1e-12, 0);
        CHECK_CLOSE(m.parameters, pm->nominal, 0.03, 0); /* 22B, 175B, 530B, 1T within 3% */
        double shard = (block / p + V * h) / t;
        CHECK_CLOSE(m.parameters_most_loaded_shard, shard, 1e-12, 0);
        CHECK_CLOSE(m.weight_and_optimizer_bytes, 18 * shard, 1e-12, 0);

        /* first stage, sequence parallel + selective: L/p layers x p micro-batches in flight
         * (the global batch has at least p micro-batches) = L layers of 34sbh/t, the embedding's
         * (8sb + sbh)/t per micro-batch, and with p = 1 the output layer's 4sbh(1 + V/h)/t */
        double act = 34 * sbh / t * L + (8 * s * b + sbh) * p / t;
        if (pm->p == 1) act += 4 * sbh * (1 + V / h) / t;
        CHECK_CLOSE(m.activation_bytes, act, 1e-12, 0);
        CHECK_CLOSE(m.total_bytes, 18 * shard + act, 1e-12, 0);
        CHECK(m.stage_layers == pm->L / pm->p);
        CHECK_CLOSE(m.in_flight_microbatches, p, 0, 0);
        CHECK_CLOSE(m.per_layer_activation_bytes, 34 * sbh / t, 1e-12, 0);

        /* appendix A: model FLOPs 72BLsh^2(1 + s/6h + V/12hL); selective s/3h */
        double base = 72 * B * L * s * h * h;
        double model = base * (1 + s / (6 * h) + V / (12 * h * L));
        CHECK_CLOSE(m.model_flops_per_iteration, model, 1e-12, 0);
        CHECK_CLOSE(m.hardware_flops_per_iteration, base * (1 + s / (3 * h) + V / (12 * h * L)),
                    1e-12, 0);

        /* full recompute: 96BLsh^2(1 + s/6h + V/16hL); no recompute: hardware = model */
        paper_line(line, sizeof(line), pm,
                   "--recompute-granularity full --recompute-method uniform "
                   "--recompute-num-layers 1");
        megadlm_args full;
        CHECK(setup(&full, line) == 0);
        theoretical_memory mf;
        theoretical_memory_compute(&full, &mf);
        CHECK_CLOSE(mf.model_flops_per_iteration, model, 1e-12, 0);
        CHECK_CLOSE(mf.hardware_flops_per_iteration,
                    96 * B * L * s * h * h * (1 + s / (6 * h) + V / (16 * h * L)), 1e-12, 0);
        /* every layer keeps only its 2sbh input; the embedding and output terms are not split
         * by t without sequence parallelism, the fp32 logits are (vocab-parallel) */
        double act_full = 2 * sbh * L + (8 * s * b + sbh) * p;
        if (pm->p == 1) act_full += 4 * sbh + 4 * s * b * V / t;
        CHECK_CLOSE(mf.activation_bytes, act_full, 1e-12, 0);

        paper_line(line, sizeof(line), pm, "");
        megadlm_args none;
        CHECK(setup(&none, line) == 0);
        theoretical_memory mn;
        theoretical_memory_compute(&none, &mn);
        CHECK_CLOSE(mn.hardware_flops_per_iteration, model, 1e-12, 0);
        CHECK_CLOSE(mn.per_layer_activation_bytes, rows[TM_TENSOR_PARALLEL], 1e-12, 0);

        /* the paper's percentages */
        double selective_saves = 1 - m.per_layer[TM_TENSOR_SEQUENCE_SELECTIVE] /
                                         m.per_layer[TM_TENSOR_SEQUENCE];
        double sp_sel_factor = m.per_layer[TM_TENSOR_PARALLEL] /
                               m.per_layer[TM_TENSOR_SEQUENCE_SELECTIVE];
        double stage_factor = mn.activation_bytes / m.activation_bytes;
        printf("%-5s parameters %.4g (Megatron's formula), selective saves %.1f%%, tensor "
               "parallel / (sequence parallel + selective) = %.2fx per layer, %.2fx for the "
               "first stage; weight+optimizer %.2f MB, activation %.2f MB\n",
               pm->name, m.parameters, 100 * selective_saves, sp_sel_factor, stage_factor,
               m.weight_and_optimizer_bytes / TM_BYTES_PER_MB, m.activation_bytes / TM_BYTES_PER_MB);
        /* selective: 5as/h / (34 + 5as/h) of a layer: 80/114 = 70.2% (175B), 64/98 = 65.3% */
        if (!strcmp(pm->name, "175B")) CHECK_CLOSE(selective_saves, 0.70, 0, 0.01);
        if (!strcmp(pm->name, "530B")) CHECK_CLOSE(selective_saves, 0.65, 0, 0.01);
        /* "reduces activation memory by 5x": 4.9x to 6.2x per layer over the four models */
        CHECK(sp_sel_factor > 4.5 && sp_sel_factor < 6.5);
        CHECK(stage_factor > 4.5 && stage_factor < 6.5);
        args_free(&args);
        args_free(&full);
        args_free(&none);
    }
}

/* --bf16 on the paper's four models: Megatron's weight+optimizer bytes stay 18 per parameter
 * of the most loaded shard (its formula counts mixed precision), and megadlm's own per-layer
 * activations, written out here from docs/MEMORY.md (everything a layer keeps in 2 bytes but
 * the two LayerNorms' mean and rstd, 4 bytes each: R = 8sbh + 16sb for the layer input, ln1,
 * res1, ln2 and the statistics; S = 24sbh for Q, K, V, the context, fc1 and the activation
 * output; A = 2as^2b for the probabilities), meet or beat every row of the paper's Table 2 at
 * 2 bytes (which also counts 1-byte dropout masks megadlm regenerates). */
static void test_paper_models_bf16(void) {
    const double s = 2048, b = 1;
    for (int i = 0; i < NMODELS; i++) {
        const paper_model *pm = &MODELS[i];
        double h = pm->h, a = pm->heads, t = pm->t;
        char line[1024];
        paper_line(line, sizeof(line), pm, "--sequence-parallel --recompute-activations --bf16");
        megadlm_args args;
        CHECK(setup(&args, line) == 0);
        theoretical_memory m;
        theoretical_memory_compute(&args, &m);
        double sbh = s * b * h, R = 8 * sbh + 16 * s * b, S = 24 * sbh, A = 2 * a * s * s * b;
        double rows[TM_NUM_ROWS] = {R + S + A,       R + (S + A) / t, (R + S + A) / t,
                                    R + S / t,       (R + S) / t,     2 * sbh};
        int beaten = 0;
        for (int r = 0; r < TM_NUM_ROWS; r++) {
            CHECK_CLOSE(m.per_layer_megadlm[r], rows[r], 1e-12, 0);
            CHECK(m.per_layer_megadlm[r] <= m.per_layer[r]);
            beaten += m.per_layer_megadlm[r] < m.per_layer[r];
        }
        CHECK(beaten == TM_NUM_ROWS - 1); /* full recompute: the 2sbh input, as the paper's */
        CHECK_CLOSE(m.weight_and_optimizer_bytes, 18 * m.parameters_most_loaded_shard, 1e-12, 0);
        printf("%-5s --bf16: megadlm / paper per layer, SP + selective %.3f, no parallelism %.3f\n",
               pm->name, m.per_layer_megadlm[TM_TENSOR_SEQUENCE_SELECTIVE] /
                             m.per_layer[TM_TENSOR_SEQUENCE_SELECTIVE],
               m.per_layer_megadlm[TM_NO_PARALLELISM] / m.per_layer[TM_NO_PARALLELISM]);
        args_free(&args);
    }
}

/* ---- Megatron's formula beyond GPT-3 shapes ---- */

static void test_megatron_parameters(void) {
    /* Llama 2 7B: GQA off (32 heads), SwiGLU f = 11008, RMSNorm, untied, V = 32000:
     * per layer 3hf + 2h + 4h^2, final norm h, embedding and output 2Vh = 6,738,415,616 */
    megadlm_args a;
    CHECK(setup(&a, "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
                    "--ffn-hidden-size 11008 --swiglu --normalization RMSNorm "
                    "--untie-embeddings-and-output-weights --disable-bias-linear "
                    "--position-embedding-type rope --seq-length 4096 "
                    "--max-position-embeddings 4096 --micro-batch-size 1 --vocab-size 31999") == 0);
    CHECK(a.padded_vocab_size == 32000);
    theoretical_memory m;
    theoretical_memory_compute(&a, &m);
    CHECK_CLOSE(m.parameters, 6738415616.0, 0, 0);
    /* p = 1 and untied: the output layer on the same rank */
    CHECK_CLOSE(m.parameters_most_loaded_shard, 6738415616.0, 0, 0);
    /* megadlm builds exactly Llama's tensors here */
    CHECK(theoretical_megadlm_parameter_count(&a) == 6738415616ULL);
    args_free(&a);

    /* GQA: 8 groups of 128 channels; Megatron's attention term 2h^2 (1 + g/a) = 2.5h^2 */
    CHECK(setup(&a, "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
                    "--group-query-attention --num-query-groups 8 --ffn-hidden-size 14336 "
                    "--swiglu --normalization RMSNorm --untie-embeddings-and-output-weights "
                    "--disable-bias-linear --position-embedding-type rope --seq-length 8192 "
                    "--max-position-embeddings 8192 --micro-batch-size 1 --vocab-size 127999 "
                    "--tensor-model-parallel-size 2") == 0);
    theoretical_memory_compute(&a, &m);
    double h = 4096, f = 14336, V = 128000, L = 32;
    double layer = 2 * h * (1.5 * f + 1) + 2 * h * h * 1.25;
    CHECK_CLOSE(m.parameters, L * layer + h + 2 * V * h, 1e-15, 0); /* 8.03e9 (Llama 3 8B) */
    CHECK_CLOSE(m.parameters_most_loaded_shard, (L * layer + h + 2 * V * h) / 2, 1e-15, 0);
    args_free(&a);
}

/* ---- Megatron's own formula (training/megatron_memory.h) against hand arithmetic ---- */

static void test_megatron_formula(void) {
    /* Llama 3 8B on TP 8 with SP and selective recompute: Megatron's report counts 2h per norm
     * (RMSNorm too) and per layer sbh(18 + 4f/h) activations; megadlm counts h per RMSNorm and
     * 10sbh + 2sb(2ad + 2gd + 3f) (GQA's K and V, SwiGLU's gate) */
    megadlm_args a;
    CHECK(setup(&a, "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
                    "--group-query-attention --num-query-groups 8 --ffn-hidden-size 14336 "
                    "--swiglu --normalization RMSNorm --untie-embeddings-and-output-weights "
                    "--disable-bias-linear --position-embedding-type rope --seq-length 8192 "
                    "--max-position-embeddings 8192 --micro-batch-size 1 --global-batch-size 4 "
                    "--vocab-size 127999 --tensor-model-parallel-size 8 --sequence-parallel "
                    "--recompute-activations --world-size 8") == 0);
    const double h = 4096, f = 14336, V = 128000, L = 32, s = 8192, b = 1, t = 8;
    const double d = 128, heads = 32, g = 8;
    CHECK(a.padded_vocab_size == 128000);
    megatron_memory_report r;
    megatron_memory_compute(&a, &r);
    double params = L * (2 * h * (1.5 * f + 2) + 2.5 * h * h) + 2 * h + 2 * V * h;
    CHECK_CLOSE(r.parameters, params, 1e-15, 0);
    CHECK_CLOSE(r.parameters_most_loaded_shard, params / t, 1e-15, 0);
    CHECK_CLOSE(r.weight_and_optimizer_bytes, params / t * 18, 1e-15, 0);
    CHECK(r.has_activation);
    double act = (s * b * h * (18 + 4 * f / h) * L + 8 * s * b + s * b * h +
                  4 * s * b * h + 4 * s * b * V) / t;
    CHECK_CLOSE(r.activation_bytes, act, 1e-15, 0);
    CHECK_CLOSE(r.total_bytes, params / t * 18 + act, 1e-15, 0);
    /* megadlm's account of the same model */
    theoretical_memory m;
    theoretical_memory_compute(&a, &m);
    double mine = L * (2 * h * (1.5 * f + 1) + 2.5 * h * h) + h + 2 * V * h;
    CHECK_CLOSE(m.weight_and_optimizer_bytes, mine / t * 18, 1e-15, 0);
    double layer = (10 * s * b * h + 2 * s * b * (2 * heads * d + 2 * g * d + 3 * f)) / t;
    CHECK_CLOSE(m.activation_bytes,
                L * layer + (8 * s * b + s * b * h + 4 * s * b * h + 4 * s * b * V) / t, 1e-15, 0);
    CHECK(megatron_memory_differs(&m, &r));
    char why[512];
    megatron_memory_why(&a, &r, why, sizeof why);
    CHECK(strstr(why, "bias in every RMSNorm") && strstr(why, "no GQA") &&
          strstr(why, "no SwiGLU gate"));
    args_free(&a);

    /* the same without SP: Megatron computes no activation, and only the norms differ */
    CHECK(setup(&a, "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
                    "--group-query-attention --num-query-groups 8 --ffn-hidden-size 14336 "
                    "--swiglu --normalization RMSNorm --untie-embeddings-and-output-weights "
                    "--disable-bias-linear --position-embedding-type rope --seq-length 8192 "
                    "--max-position-embeddings 8192 --micro-batch-size 1 --vocab-size 127999 "
                    "--use-distributed-optimizer --world-size 4") == 0);
    megatron_memory_compute(&a, &r);
    CHECK(!r.has_activation && r.activation_bytes == 0 && r.total_bytes == 0);
    CHECK_CLOSE(r.weight_and_optimizer_bytes, params * (6 + 12.0 / 4), 1e-15, 0);
    megatron_memory_why(&a, &r, why, sizeof why);
    CHECK(!strcmp(why, "it counts a bias in every RMSNorm"));
    args_free(&a);

    /* GPT-2 124M on TP 2 with SP and selective recompute: the two agree to the byte */
    CHECK(setup(&a, "--num-layers 12 --hidden-size 768 --num-attention-heads 12 "
                    "--seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 4 "
                    "--global-batch-size 32 --vocab-size 50256 --tensor-model-parallel-size 2 "
                    "--sequence-parallel --recompute-activations --world-size 2") == 0);
    megatron_memory_compute(&a, &r);
    theoretical_memory_compute(&a, &m);
    CHECK_CLOSE(r.weight_and_optimizer_bytes, m.weight_and_optimizer_bytes, 1e-15, 0);
    CHECK_CLOSE(r.activation_bytes, m.activation_bytes, 1e-15, 0);
    CHECK(!megatron_memory_differs(&m, &r));
    args_free(&a);
}

/* ---- layouts: distributed optimizer, pipeline in-flight, interleaving ---- */

static void test_layouts(void) {
    const char *g = "--num-layers 16 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "
                    "--max-position-embeddings 1024 --micro-batch-size 2 --vocab-size 50256";
    char line[1024];
    megadlm_args a;
    theoretical_memory m;
    double s = 1024, b = 2, h = 1024, heads = 16, L = 16;
    double layer = s * b * h * (34 + 5 * heads * s / h);

    /* distributed optimizer on 8 ranks of TP 2: DP 4, 6 + 12/4 = 9 bytes per parameter */
    snprintf(line, sizeof(line), "%s --tensor-model-parallel-size 2 --world-size 8 "
                                 "--use-distributed-optimizer", g);
    CHECK(setup(&a, line) == 0);
    theoretical_memory_compute(&a, &m);
    CHECK(a.data_parallel_size == 4 && a.global_batch_size == 8);
    CHECK_CLOSE(m.bytes_per_parameter, 9.0, 0, 0);
    CHECK_CLOSE(m.weight_and_optimizer_bytes, 9.0 * m.parameters_most_loaded_shard, 1e-15, 0);
    /* megadlm's own: fp32 parameters and gradients whole, the two moments of ceil(n/4) */
    {
        theoretical_megadlm_bytes t = theoretical_megadlm(&a);
        size_t n = theoretical_megadlm_parameter_count(&a);
        CHECK(t.parameters == 4 * n && t.gradients == 4 * n);
        CHECK(t.optimizer == 8 * ((n + 3) / 4));
    }
    args_free(&a);
    /* the same under --bf16: Megatron's 6 + 12/DP, which megadlm allocates: bf16 parameters,
     * fp32 gradients whole, the fp32 main parameters and the two moments of ceil(n/4); and
     * without the distributed optimizer 2 + 4 + 12 */
    snprintf(line, sizeof(line), "%s --tensor-model-parallel-size 2 --world-size 8 --bf16 "
                                 "--use-distributed-optimizer", g);
    CHECK(setup(&a, line) == 0);
    theoretical_memory_compute(&a, &m);
    CHECK_CLOSE(m.bytes_per_parameter, 9.0, 0, 0);
    {
        theoretical_megadlm_bytes t = theoretical_megadlm(&a);
        size_t n = theoretical_megadlm_parameter_count(&a);
        CHECK(t.parameters == 2 * n && t.gradients == 4 * n);
        CHECK(t.optimizer == 12 * ((n + 3) / 4));
        a.use_distributed_optimizer = 0;
        t = theoretical_megadlm(&a);
        CHECK(t.parameters == 2 * n && t.gradients == 4 * n && t.optimizer == 12 * n);
    }
    args_free(&a);

    /* PP 4, 2 micro-batches per iteration: 1F1B holds min(m, p) = 2 */
    snprintf(line, sizeof(line), "%s --pipeline-model-parallel-size 4 --global-batch-size 4", g);
    CHECK(setup(&a, line) == 0);
    theoretical_memory_compute(&a, &m);
    CHECK(m.num_microbatches == 2 && m.stage_layers == 4);
    CHECK_CLOSE(m.in_flight_microbatches, 2.0, 0, 0);
    CHECK_CLOSE(m.activation_bytes, (4 * layer + 8 * s * b + s * b * h) * 2, 1e-12, 0);
    CHECK_CLOSE(m.output_layer_bytes, 0.0, 0, 0); /* on the last stage */
    args_free(&a);

    /* interleaved: p = 4, v = 2 (2 layers per virtual stage), 8 micro-batches:
     * p (1 + (p - 1)/(p v)) = 4 x 1.375 = 5.5 micro-batches of the stage's 4 layers */
    snprintf(line, sizeof(line), "%s --pipeline-model-parallel-size 4 --global-batch-size 16 "
                                 "--num-layers-per-virtual-pipeline-stage 2", g);
    CHECK(setup(&a, line) == 0);
    theoretical_memory_compute(&a, &m);
    CHECK(a.virtual_pipeline_model_parallel_size == 2 && m.stage_layers == 4);
    CHECK_CLOSE(m.in_flight_microbatches, 5.5, 1e-15, 0);
    CHECK_CLOSE(m.activation_bytes, (4 * layer + 8 * s * b + s * b * h) * 5.5, 1e-12, 0);
    args_free(&a);

    /* full recompute, block 1: the first layer of each of the stage's two model chunks keeps
     * its input, the other one everything; hardware FLOPs re-run 1 layer x 2 chunks x 4
     * stages */
    snprintf(line, sizeof(line), "%s --pipeline-model-parallel-size 4 --global-batch-size 16 "
                                 "--num-layers-per-virtual-pipeline-stage 2 "
                                 "--recompute-granularity full --recompute-method block "
                                 "--recompute-num-layers 1",
             g);
    CHECK(setup(&a, line) == 0);
    theoretical_memory_compute(&a, &m);
    CHECK_CLOSE(m.stage_layer_bytes, 2 * (2 * s * b * h) + 2 * layer, 1e-12, 0);
    {
        /* one layer's forward: 24Bsh^2(1 + s/6h) for GPT-3 shapes, B = 16 */
        double fwd = 24 * 16 * s * h * h * (1 + s / (6 * h));
        CHECK_CLOSE(m.hardware_flops_per_iteration - m.model_flops_per_iteration, 8 * fwd, 1e-12, 0);
    }
    args_free(&a);
    (void)L;
}

/* ---- megadlm: predicted == measured on built models ---- */

static const char *FAMILY[2] = {
    "--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 "
    "--max-position-embeddings 16 --micro-batch-size 2 --vocab-size 100",
    "--num-layers 4 --hidden-size 32 --num-attention-heads 4 --group-query-attention "
    "--num-query-groups 2 --ffn-hidden-size 48 --swiglu --normalization RMSNorm --qk-layernorm "
    "--disable-bias-linear --position-embedding-type rope --untie-embeddings-and-output-weights "
    "--seq-length 16 --max-position-embeddings 16 --micro-batch-size 2 --vocab-size 100",
};
static const char *MODES[] = {
    "",
    "--recompute-activations",
    "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
    "--recompute-granularity full --recompute-method uniform --recompute-num-layers 3",
    "--recompute-granularity full --recompute-method block --recompute-num-layers 2",
};
static const char *LAYOUTS[] = {
    "",
    "--tensor-model-parallel-size 2",
    "--tensor-model-parallel-size 2 --sequence-parallel",
};

static void test_megadlm_measured(void) {
    int cases = 0;
    for (int fam = 0; fam < 2; fam++)
        for (size_t md = 0; md < sizeof(MODES) / sizeof(MODES[0]); md++)
            for (size_t ly = 0; ly < sizeof(LAYOUTS) / sizeof(LAYOUTS[0]) + 1; ly++) {
                char line[1024];
                /* the extra layout: distributed saved activations (full recompute, TP 2) */
                int distribute = ly == sizeof(LAYOUTS) / sizeof(LAYOUTS[0]);
                if (distribute && strncmp(MODES[md], "--recompute-granularity full", 28)) continue;
                snprintf(line, sizeof(line), "%s %s %s", FAMILY[fam], MODES[md],
                         distribute ? "--tensor-model-parallel-size 2 "
                                      "--distribute-saved-activations"
                                    : LAYOUTS[ly]);
                megadlm_args a;
                CHECK(setup(&a, line) == 0);
                theoretical_megadlm_bytes p = theoretical_megadlm(&a);
                transformer_config c = model_config_from_args(&a);
                size_t before[MEM_NUM_CATEGORIES];
                for (int k = 0; k < MEM_NUM_CATEGORIES; k++) before[k] = mem_current(k);
                gpt_model *m = gpt_model_create(&c, a.micro_batch_size, GPT_MODEL_TRAINING);
                activation_store *st = activation_store_create(m, 1);
                size_t got[4] = {mem_current(MEM_PARAMS) - before[MEM_PARAMS],
                                 mem_current(MEM_GRADS) - before[MEM_GRADS],
                                 mem_current(MEM_OPTIMIZER) - before[MEM_OPTIMIZER],
                                 mem_current(MEM_ACTIVATIONS) - before[MEM_ACTIVATIONS]};
                size_t want[4] = {p.parameters, p.gradients, p.optimizer, p.saved_activations};
                int ok = 1;
                for (int k = 0; k < 4; k++) {
                    CHECK(got[k] == want[k]);
                    ok &= got[k] == want[k];
                }
                CHECK(m->params.numel * 4 == p.parameters);
                /* the per-layer mean `megadlm memory` reports is the block's measurement */
                theoretical_memory tm;
                theoretical_memory_compute(&a, &tm);
                double sum = 0;
                for (int l = 0; l < c.num_layers; l++)
                    sum += (double)activation_store_layer_saved_bytes(st, l);
                CHECK_CLOSE(tm.per_layer_saved_bytes_megadlm, sum / c.num_layers, 1e-15, 0);
                if (!ok)
                    fprintf(stderr, "  %s\n  measured %zu %zu %zu %zu, predicted %zu %zu %zu %zu\n",
                            line, got[0], got[1], got[2], got[3], want[0], want[1], want[2],
                            want[3]);
                activation_store_free(st);
                gpt_model_free(m);
                args_free(&a);
                cases++;
            }
    printf("megadlm predicted == measured: %d layouts x modes x families\n", cases);
}

/* Masked-diffusion training: the stores' logits hold one chunk of GPT_HEAD_CHUNK_ROWS = 256
 * rows (the head runs the loss-weighted rows that many at a time), N with --difflm-full-logits
 * and for the autoregressive objective; predicted == measured either way. b x s = 2 x 300 = 600
 * rows, vocabulary 100 padded to 128 x t (Megatron pads to a multiple of 128 x t), 128
 * columns on each rank: 4 x 256 x 128 bytes against 4 x 600 x 128. */
static void test_megadlm_difflm_logits(void) {
    const char *base = "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 300 "
                       "--max-position-embeddings 300 --micro-batch-size 2 --vocab-size 100";
    const char *modes[] = {"--model-running-mode difflm-noshift --mask-token 101",
                           "--model-running-mode difflm-noshift --mask-token 101 "
                           "--difflm-full-logits",
                           ""};
    const size_t rows[] = {256, 600, 600};
    for (int md = 0; md < 3; md++)
        for (size_t ly = 0; ly < sizeof(LAYOUTS) / sizeof(LAYOUTS[0]); ly++) {
            char line[1024];
            snprintf(line, sizeof line, "%s %s %s", base, modes[md], LAYOUTS[ly]);
            megadlm_args a;
            CHECK(setup(&a, line) == 0);
            CHECK(theoretical_megadlm_logits_rows(&a) == rows[md]);
            CHECK(theoretical_megadlm_logits_bytes(&a) == 4 * rows[md] * 128);
            theoretical_megadlm_bytes p = theoretical_megadlm(&a);
            transformer_config c = model_config_from_args(&a);
            size_t before = mem_current(MEM_ACTIVATIONS);
            gpt_model *m = gpt_model_create(&c, a.micro_batch_size, GPT_MODEL_TRAINING);
            m->logits_in_chunks = difflm_logits_in_chunks(&a);
            activation_store *st = activation_store_create(m, 1);
            CHECK(mem_current(MEM_ACTIVATIONS) - before == p.saved_activations);
            CHECK(mem_block_bytes(st->logits) == theoretical_megadlm_logits_bytes(&a));
            CHECK((size_t)st->logits_rows == rows[md]);
            activation_store_free(st);
            gpt_model_free(m);
            args_free(&a);
        }
}

/* The head's saved bytes (core/models/head_saved.h's table, which the allocator reads too, so
 * predicted == measured above cannot catch a wrong row): hand-computed for FAMILY's models,
 * N = 2 x 16 = 32 tokens, h = 32, 128 vocabulary columns a rank (100 padded to 128 x t):
 * 4 x (block output Ns h + final norm output Ns h + statistics (mean, rstd: LayerNorm; rstd:
 * RMSNorm) + logits N x 128 + per-token loss and logsumexp 2N), Ns = N / 2 under SP. */
static void test_megadlm_head_bytes(void) {
    const size_t want[2][3] = {
        {4 * (1024 + 1024 + 64 + 4096 + 64), 4 * (1024 + 1024 + 64 + 4096 + 64),
         4 * (512 + 512 + 32 + 4096 + 64)},
        {4 * (1024 + 1024 + 32 + 4096 + 64), 4 * (1024 + 1024 + 32 + 4096 + 64),
         4 * (512 + 512 + 16 + 4096 + 64)},
    };
    for (int fam = 0; fam < 2; fam++)
        for (size_t ly = 0; ly < sizeof(LAYOUTS) / sizeof(LAYOUTS[0]); ly++) {
            char line[1024];
            snprintf(line, sizeof line, "%s %s", FAMILY[fam], LAYOUTS[ly]);
            megadlm_args a;
            CHECK(setup(&a, line) == 0);
            CHECK(theoretical_megadlm_head_saved_bytes(&a) == want[fam][ly]);
            CHECK(theoretical_megadlm_logits_bytes(&a) == 4 * 32 * 128);
            args_free(&a);
        }
}

/* megadlm's rows at t = 1 are activation_memory.c's modes; at t = 2 its TP layout's. */
static void test_megadlm_rows(void) {
    for (int fam = 0; fam < 2; fam++) {
        megadlm_args a;
        CHECK(setup(&a, FAMILY[fam]) == 0);
        theoretical_memory m;
        theoretical_memory_compute(&a, &m);
        transformer_config c = model_config_from_args(&a);
        int B = a.micro_batch_size, T = a.seq_length;
        CHECK_CLOSE(m.per_layer_megadlm[TM_NO_PARALLELISM],
                    (double)activation_memory_layer_bytes(&c, B, T, 0), 0, 0);
        c.recompute_granularity = RECOMPUTE_SELECTIVE;
        CHECK_CLOSE(m.per_layer_megadlm[TM_TENSOR_SELECTIVE],
                    (double)activation_memory_layer_bytes(&c, B, T, 0), 0, 0);
        CHECK_CLOSE(m.per_layer_megadlm[TM_TENSOR_SEQUENCE_SELECTIVE],
                    (double)activation_memory_layer_bytes(&c, B, T, 0), 0, 0);
        c.recompute_granularity = RECOMPUTE_FULL;
        c.recompute_method = RECOMPUTE_UNIFORM;
        c.recompute_num_layers = 1;
        CHECK_CLOSE(m.per_layer_megadlm[TM_FULL_RECOMPUTE],
                    (double)activation_memory_layer_bytes(&c, B, T, 0), 0, 0);
        args_free(&a);
        /* t = 2 */
        char line[1024];
        snprintf(line, sizeof(line), "%s --tensor-model-parallel-size 2", FAMILY[fam]);
        CHECK(setup(&a, line) == 0);
        theoretical_memory_compute(&a, &m);
        c = model_config_from_args(&a);
        CHECK_CLOSE(m.per_layer_megadlm[TM_TENSOR_PARALLEL],
                    (double)activation_memory_layer_bytes(&c, B, T, 0), 0, 0);
        c.sequence_parallel = 1;
        CHECK_CLOSE(m.per_layer_megadlm[TM_TENSOR_SEQUENCE],
                    (double)activation_memory_layer_bytes(&c, B, T, 0), 0, 0);
        c.recompute_granularity = RECOMPUTE_SELECTIVE;
        CHECK_CLOSE(m.per_layer_megadlm[TM_TENSOR_SEQUENCE_SELECTIVE],
                    (double)activation_memory_layer_bytes(&c, B, T, 0), 0, 0);
        c.sequence_parallel = 0;
        CHECK_CLOSE(m.per_layer_megadlm[TM_TENSOR_SELECTIVE],
                    (double)activation_memory_layer_bytes(&c, B, T, 0), 0, 0);
        args_free(&a);
    }
}

int main(void) {
    test_paper_models();
    test_paper_models_bf16();
    test_megatron_parameters();
    test_megatron_formula();
    test_layouts();
    test_megadlm_rows();
    test_megadlm_measured();
    test_megadlm_difflm_logits();
    test_megadlm_head_bytes();
    TEST_DONE();
}
