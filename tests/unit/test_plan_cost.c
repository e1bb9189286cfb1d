/* `megadlm plan`'s cost model (src/training/plan_cost.c) against its terms worked out here by
 * hand from docs/PLAN.md, with the FLOPs from the paper's appendix A formulas (Korthikanti et
 * al. 2022) and the parameters from Megatron's 12h^2 + 4h per layer, not from the code under
 * test:
 *  - 530B (t 8, p 35, DP 8, micro-batch 1, global batch 2240) on the A100-80GB preset: every
 *    term (compute, TP all-gathers and reduce-scatters with sequence parallelism and the cross
 *    entropy's all-reduces, bubble, p2p,
 *    DP all-reduce, optimizer) for selective recompute, and the repeated forward collectives of
 *    full recompute; the overlaps (--tp-comm-overlap, --overlap-grad-reduce) only remove time;
 *  - context parallelism: the ring's and the all-gather's exchanges, what the ring hides, TP's
 *    collectives on s/c positions, the gradient reduction over DP x CP;
 *  - memory: the Megatron account is `megadlm memory`'s total; partial recompute adds K
 *    micro-batches' worth of the layers kept whole;
 *  - mixture of experts: the MoE FLOPs, the dispatch (alltoall and allgather), TP without the
 *    MoE layers' MLP halves, the experts' gradients over DP / EP, memory with the MoE state;
 *  - a device description survives JSON and a file, and bad keys are named. */
#include <math.h>
#include <string.h>

#include "test_util.h"
#include "training/arguments.h"
#include "training/plan_cost.h"
#include "training/plan_device.h"
#include "training/theoretical_memory.h"

static char ERR[1024];

static int setup(megadlm_args *a, const char *line) {
    static char buf[4096];
    char *argv[256];
    int argc = 0;
    argv[argc++] = "plan";
    snprintf(buf, sizeof(buf), "%s --train-iters 1 --lr 1e-4 --mock-data", line);
    for (char *t = strtok(buf, " "); t && argc < 255; t = strtok(NULL, " ")) argv[argc++] = t;
    argv[argc] = NULL;
    args_defaults(a);
    int rc = args_parse(a, argc, argv, ERR, sizeof(ERR));
    if (rc == 0) rc = args_validate(a, ERR, sizeof(ERR));
    if (rc != 0) fprintf(stderr, "  line: %s\n  error: %s\n", line, ERR);
    return rc;
}

#define M530 "--num-layers 105 --hidden-size 20480 --num-attention-heads 128 --seq-length 2048 " \
             "--max-position-embeddings 2048 --vocab-size 50256 --micro-batch-size 1 "          \
             "--global-batch-size 2240 --tensor-model-parallel-size 8 "                          \
             "--pipeline-model-parallel-size 35 --world-size 2240 --bf16 "

static void test_530b_terms(void) {
    plan_device d;
    CHECK(plan_device_preset("a100-80gb", &d) == 0);
    const double L = 105, h = 20480, s = 2048, V = 51200, B = 2240, t = 8, p = 35, dp = 8;
    const double M = B / dp, world = 2240, layers = L / p;
    const double rate = 312e12 * 0.7, nvlink = 300e9, ib = 25e9;

    megadlm_args a;
    CHECK(setup(&a, M530 "--sequence-parallel --recompute-activations") == 0);
    plan_cost c;
    plan_cost_compute(&a, &d, &c);
    /* appendix A, selective recompute */
    double hw = 72 * B * L * s * h * h * (1 + s / (3 * h) + V / (12 * h * L));
    CHECK_CLOSE(c.hardware_flops, hw, 1e-12, 0);
    CHECK_CLOSE(c.compute, hw / world / rate, 1e-12, 0);
    /* SP: per layer 6 all-gathers and 4 reduce-scatters of s x b x h bf16 values, each moving
     * 7/8 of it over NVLink; one more of each per stage for the embedding / output layer */
    double half = 7.0 / 8.0 * s * h * 2 / nvlink;
    /* and the cross entropy's 3 all-reduces of b x s fp32 values */
    double ce = 3 * 2 * 7.0 / 8.0 * s * 4 / nvlink;
    double tp = M * (((6 * layers + 1) + (4 * layers + 1)) * half + ce);
    CHECK_CLOSE(c.tp_comm, tp, 1e-12, 0);
    CHECK_CLOSE(c.bubble, (p - 1) / M * (c.compute + tp), 1e-12, 0);
    /* p2p: the 1/t shard forward and backward, in bf16, over InfiniBand, per micro-batch */
    CHECK_CLOSE(c.p2p, M * (s * h / t * 4) / ib, 1e-12, 0);
    /* DP: ring all-reduce of the first stage's fp32 gradients; Megatron's shard */
    double shard = ((L * (12 * h * h + 4 * h) + 2 * h) / p + V * h) / t;
    CHECK_CLOSE(c.dp_comm, 2 * (dp - 1) / dp * 4 * shard / ib, 1e-12, 0);
    CHECK_CLOSE(c.optimizer, shard * 38 / 2039e9, 1e-12, 0);
    CHECK_CLOSE(c.total, c.compute + tp + c.bubble + c.p2p + c.dp_comm + c.optimizer, 1e-12, 0);
    CHECK_CLOSE(c.mfu, c.model_flops / (world * 312e12 * c.total), 1e-12, 0);
    theoretical_memory m;
    theoretical_memory_compute(&a, &m);
    CHECK_CLOSE(c.memory_bytes, m.total_bytes, 0, 0);
    args_free(&a);

    /* full recompute, no SP: 4 all-reduces per layer and 2 more per recomputed layer */
    CHECK(setup(&a, M530 "--recompute-granularity full --recompute-method uniform "
                         "--recompute-num-layers 1") == 0);
    plan_cost_compute(&a, &d, &c);
    hw = 96 * B * L * s * h * h * (1 + s / (6 * h) + V / (16 * h * L));
    CHECK_CLOSE(c.hardware_flops, hw, 1e-12, 0);
    CHECK_CLOSE(c.tp_comm, M * ((4 * layers + 2 * layers + 1) * 2 * half + ce), 1e-12, 0);
    CHECK_CLOSE(c.p2p, M * (s * h / t * 4) / ib, 1e-12, 0);
    CHECK_CLOSE(c.recomputed_layers, layers, 0, 0);
    args_free(&a);

    /* overlaps only hide: --tp-comm-overlap hides all but the first of 2 pieces (under the
     * GEMMs' time, far larger); --overlap-grad-reduce at most 2/3 of one micro-batch's compute */
    CHECK(setup(&a, M530 "--sequence-parallel --recompute-activations --tp-comm-overlap "
                         "--overlap-grad-reduce") == 0);
    plan_cost_compute(&a, &d, &c);
    CHECK_CLOSE(c.tp_comm, tp / 2, 1e-12, 0);
    CHECK_CLOSE(c.tp_hidden, tp / 2, 1e-12, 0);
    double dp_all = 2 * (dp - 1) / dp * 4 * shard / ib;
    double hidden = dp_all < c.compute / M * 2 / 3 ? dp_all : c.compute / M * 2 / 3;
    CHECK_CLOSE(c.dp_hidden, hidden, 1e-12, 0);
    CHECK_CLOSE(c.dp_comm, dp_all - hidden, 1e-9, 0);
    args_free(&a);
}

/* context parallelism (22B's shapes, TP 8 x CP 2 on 16 A100s, DP 1): each rank's K and V are
 * 2 b (s/2) g d / t values; the ring (p2p, fp32) sends them once in forward and twice in
 * backward (K, V again and their gradients) and hides them under the layer's attention
 * products; the all-gather (bf16) moves (c-1)/c of c times them in forward, twice that in
 * backward, hidden nowhere, both across nodes (TP x CP = 16 ranks > 8 per node); TP's
 * collectives carry s/2 positions; the gradients are reduced over DP x CP = 2 ranks */
#define M22CP "--num-layers 48 --hidden-size 6144 --num-attention-heads 64 --seq-length 2048 " \
              "--max-position-embeddings 2048 --vocab-size 50256 --micro-batch-size 1 "         \
              "--global-batch-size 16 --tensor-model-parallel-size 8 --context-parallel-size 2 " \
              "--world-size 16 "

static void test_cp_terms(void) {
    plan_device d;
    CHECK(plan_device_preset("A100-80GB", &d) == 0);
    const double L = 48, h = 6144, s = 2048, g = 64, dk = 96, t = 8, c = 2, M = 16;
    const double nvlink = 300e9, ib = 25e9;
    megadlm_args a;
    plan_cost k;
    CHECK(setup(&a, M22CP "--cp-comm-type p2p") == 0);
    plan_cost_compute(&a, &d, &k);
    double kv = 2 * (s / c) * g * dk / t * 4; /* fp32 */
    double ring = M * L * 3 * kv / ib; /* a CP group's ranks are 8 apart: on two nodes */
    double attention = M * L * 3 * 4 * (s / c) * s * dk * g / t / (19.5e12 * 0.7);
    double hidden = ring < attention ? ring : attention;
    CHECK_CLOSE(k.cp_hidden, hidden, 1e-12, 0);
    CHECK_CLOSE(k.cp_comm, ring - hidden, 1e-9, 1e-12);
    /* TP without SP: 4 all-reduces per layer, one more each for embedding and output layer,
     * and the cross entropy's 3, all of s/2 positions */
    double half = 7.0 / 8.0 * (s / c) * h * 4 / nvlink;
    double ce = 3 * 2 * 7.0 / 8.0 * (s / c) * 4 / nvlink;
    CHECK_CLOSE(k.tp_comm, M * ((4 * L + 2) * 2 * half + ce), 1e-12, 0);
    double shard = (L * (12 * h * h + 4 * h) + 2 * h + 51200 * h) / t;
    CHECK_CLOSE(k.dp_comm, 2 * (1.0 / 2.0) * 4 * shard / ib, 1e-9, 0);
    args_free(&a);

    CHECK(setup(&a, M22CP "--cp-comm-type allgather --bf16") == 0);
    plan_cost_compute(&a, &d, &k);
    kv = 2 * (s / c) * g * dk / t * 2; /* bf16 */
    CHECK_CLOSE(k.cp_comm, M * L * 3 * ((c - 1) / c * c * kv) / ib, 1e-12, 0);
    CHECK_CLOSE(k.cp_hidden, 0.0, 0, 0);
    CHECK_CLOSE(k.total, k.compute + k.tp_comm + k.cp_comm + k.bubble + k.p2p + k.dp_comm +
                             k.optimizer, 1e-12, 0);
    args_free(&a);
}

/* partial recompute: K of the p in-flight micro-batches keep everything (Megatron account:
 * the first stage's layers without recompute instead of their inputs) */
static void test_partial_memory(void) {
    const char *base = "--num-layers 8 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
                       "--max-position-embeddings 32 --vocab-size 100 --micro-batch-size 1 "
                       "--global-batch-size 8 --pipeline-model-parallel-size 4 "
                       "--tensor-model-parallel-size 2 --world-size 8 ";
    char line[1024];
    megadlm_args full, part, none;
    snprintf(line, sizeof line, "%s--recompute-granularity full --recompute-method uniform "
             "--recompute-num-layers 1", base);
    CHECK(setup(&full, line) == 0);
    snprintf(line, sizeof line, "%s--recompute-granularity full --recompute-method uniform "
             "--recompute-num-layers 1 --num-microbatches-with-partial-activation-checkpoints 3",
             base);
    CHECK(setup(&part, line) == 0);
    CHECK(setup(&none, base) == 0);
    theoretical_memory mf, mn;
    theoretical_memory_compute(&full, &mf);
    theoretical_memory_compute(&none, &mn);
    /* 2 layers a stage: full keeps 2 x 2sbh, none keeps 2 x sbh(10 + 24/t + 5as/(ht)) */
    double sbh = 32.0 * 64, keep = 2 * sbh * (10 + 24 / 2.0 + 5 * 4 * 32 / (64 * 2.0));
    CHECK_CLOSE(mn.stage_layer_bytes, keep, 1e-12, 0);
    CHECK_CLOSE(mf.stage_layer_bytes, 2 * 2 * sbh, 1e-12, 0);
    CHECK_CLOSE(plan_memory_bytes(&part, PLAN_ACCOUNT_MEGATRON, NULL),
                mf.total_bytes + 3 * (keep - 4 * sbh), 1e-12, 0);
    /* and the megadlm account grows too (stores that keep everything) */
    CHECK(plan_memory_bytes(&part, PLAN_ACCOUNT_MEGADLM, NULL) >
          plan_memory_bytes(&full, PLAN_ACCOUNT_MEGADLM, NULL));
    args_free(&full), args_free(&part), args_free(&none);
}

/* Mixture of experts (docs/PLAN.md): a 4-layer model whose layers 0 and 2 are MoE (8 experts,
 * top 2, expert ffn 1536 against the dense 4096, SwiGLU, no shared expert) on 32 H100s: TP 2 +
 * SP, EP 8 (one expert a rank), DP 16, bf16, micro-batch 1, global batch 64 (M = 4):
 *  - FLOPs: Megatron's dense formula with each MoE layer's MLP (2 h f x 3 a token forward)
 *    replaced by the router (2 h E), the routed rows (k x 2 h f_e x 3) and no shared expert,
 *    3 passes; hardware: selective's attention scores again, or block recompute's layer 0 (an
 *    MoE layer) again;
 *  - alltoall: per MoE layer 2 exchanges forward (+ the E counts) and 2 backward of a rank's
 *    N k h bf16 values, 7/8 leaving it, across nodes (TP x EP = 16 ranks > 8 a node), and under
 *    TP the received rows all-gathered and reduce-scattered over NVLink, forward and backward;
 *    allgather: the TP x EP group's tokens gathered with their routing and reduce-scattered;
 *  - TP: an MoE layer without a shared expert drops the MLP's 3 AG + 2 RS (1 + 1 recomputed);
 *  - DP: the experts' gradients over DP / EP = 2 ranks, the rest over 16;
 *  - memory: Megatron's total + the 2 MoE layers' state at the bound for the 1 micro-batch in
 *    flight. */
#define MOE "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "     \
            "--max-position-embeddings 1024 --vocab-size 50000 --ffn-hidden-size 4096 --swiglu " \
            "--normalization RMSNorm --disable-bias-linear --num-experts 8 --moe-router-topk 2 "  \
            "--moe-ffn-hidden-size 1536 --moe-layer-freq 2 --micro-batch-size 1 "               \
            "--global-batch-size 64 --tensor-model-parallel-size 2 --sequence-parallel "         \
            "--expert-model-parallel-size 8 --world-size 32 --bf16 "

static void test_moe_terms(void) {
    plan_device d;
    CHECK(plan_device_preset("H100-80GB", &d) == 0);
    const double L = 4, h = 1024, s = 1024, heads = 16, dk = 64, f = 4096, E = 8, k = 2;
    const double fe = 1536, B = 64, t = 2, ep = 8, dp = 16, M = 4, world = 32;
    const double nvlink = 450e9, ib = 50e9, rate = 989e12 * 0.7;
    megadlm_args a;
    CHECK(setup(&a, MOE "--moe-token-dispatcher-type alltoall --recompute-activations") == 0);
    const double V = a.padded_vocab_size;
    plan_cost c;
    plan_cost_compute(&a, &d, &c);
    /* Megatron's dense formula (GQA-free, SwiGLU: f x 3/2), then the 2 MoE layers' slots */
    double dense = 12 * B * s * L * h * h * ((1 + 1 + s / h) + f / h * 1.5 + V / (2 * L * h));
    double delta = 2 * h * E + k * 2 * h * fe * 3 - 2 * h * f * 3; /* a token, forward */
    double model = dense + 3 * B * s * 2 * delta;
    CHECK_CLOSE(c.model_flops, model, 1e-12, 0);
    double hw = model + 12 * B * L * s * s * heads * dk;
    CHECK_CLOSE(c.hardware_flops, hw, 1e-12, 0);
    CHECK_CLOSE(c.compute, hw / world / rate, 1e-12, 0);
    /* a rank's rows: N = b s / t = 512 tokens x k, of h bf16 values */
    double rows = s / t * k * h * 2;
    double a2a = (ep - 1) / ep * rows / ib, counts = (ep - 1) / ep * 4 * E / ib;
    double tp_rows = (t - 1) / t * (t * rows) / nvlink; /* an all-gather or reduce-scatter */
    double fwd = 2 * a2a + counts + 2 * tp_rows, bwd = 2 * a2a + 2 * tp_rows;
    CHECK_CLOSE(c.moe_comm, M * 2 * (fwd + bwd), 1e-12, 0);
    /* TP with SP: 6 AG + 4 RS a layer, + 1 + 1 for embedding and output layer, less the MoE
     * layers' MLP halves (2 x (3 AG + 2 RS)): 20 AG, 14 RS; and the cross entropy's */
    double half = (t - 1) / t * s * h * 2 / nvlink;
    double ce = 3 * 2 * (t - 1) / t * s * 4 / nvlink;
    CHECK_CLOSE(c.tp_comm, M * ((20 + 14) * half + ce), 1e-12, 0);
    /* DP: every parameter's fp32 gradient all-reduced, the experts' (2 layers x 1 expert x
     * (fc1 2 f_e + fc2 f_e) x h / t) over DP / EP = 2 ranks, the rest over 16, across nodes */
    theoretical_memory m;
    theoretical_memory_compute(&a, &m);
    double experts = 2 * 1 * 3 * fe * h / t, shard = m.parameters_most_loaded_shard;
    double dp_all = 2 * (dp - 1) / dp * 4 * (shard - experts) / ib +
                    2 * (dp / ep - 1) / (dp / ep) * 4 * experts / ib;
    CHECK_CLOSE(c.dp_comm, dp_all, 1e-12, 0);
    CHECK_CLOSE(c.optimizer, shard * 38 / 3350e9, 1e-12, 0);
    CHECK_CLOSE(c.total, c.compute + c.tp_comm + c.moe_comm + c.dp_comm + c.optimizer, 1e-12, 0);
    /* memory: the 2 MoE layers' state kept by the 1 micro-batch in flight, at the bound */
    CHECK_CLOSE(m.moe_bytes_bound, 2 * m.moe_layer_kept_bound, 0, 0);
    CHECK(m.moe_layer_kept_bound > m.moe_layer_kept_balanced);
    CHECK_CLOSE(c.memory_bytes, m.total_bytes + 2 * m.moe_layer_kept_bound, 0, 0);
    CHECK_CLOSE(c.memory_balanced, m.total_bytes + 2 * m.moe_layer_kept_balanced, 0, 0);
    args_free(&a);

    /* allgather over the TP x EP group (16 ranks: across nodes): the tokens (N h) gathered
     * with their routing (k x 8 bytes), the outputs reduce-scattered; backward the output
     * gradients gathered, the input gradients and the gates' (k x 4 bytes) reduce-scattered */
    CHECK(setup(&a, MOE "--moe-token-dispatcher-type allgather --recompute-activations") == 0);
    plan_cost_compute(&a, &d, &c);
    double G = t * ep, N = s / t;
    double tokens = (G - 1) / G * G * N * h * 2 / ib;
    fwd = 2 * tokens + (G - 1) / G * G * N * k * 8 / ib;
    bwd = 2 * tokens + (G - 1) / G * G * N * k * 4 / ib;
    CHECK_CLOSE(c.moe_comm, M * 2 * (fwd + bwd), 1e-12, 0);
    args_free(&a);

    /* the distributed optimizer: the experts' gradients reduce-scattered and their bf16
     * parameters gathered over DP / EP ranks, the rest over DP; Adam on (shard - experts) / 16
     * + experts / 2; memory: the experts' 12 bytes over 2 ranks where Megatron's report divides
     * by 16 */
    CHECK(setup(&a, MOE "--moe-token-dispatcher-type alltoall --recompute-activations "
                        "--use-distributed-optimizer") == 0);
    plan_cost_compute(&a, &d, &c);
    theoretical_memory_compute(&a, &m);
    double e2 = dp / ep; /* the expert-data-parallel group */
    double dopt = (dp - 1) / dp * (4 + 2) * (shard - experts) / ib +
                  (e2 - 1) / e2 * (4 + 2) * experts / ib;
    CHECK_CLOSE(c.dp_comm, dopt, 1e-12, 0);
    CHECK_CLOSE(c.optimizer, ((shard - experts) / dp + experts / e2) * 38 / 3350e9, 1e-12, 0);
    CHECK_CLOSE(c.memory_bytes, m.total_bytes + 12 * experts * (ep - 1) / dp +
                                    2 * m.moe_layer_kept_bound, 1e-12, 0);
    args_free(&a);

    /* block recompute of the first layer (an MoE layer): its forward again, at its MoE FLOPs,
     * its dispatch's forward exchanges again, its attention half's 1 AG + 1 RS again */
    CHECK(setup(&a, MOE "--moe-token-dispatcher-type alltoall --recompute-granularity full "
                        "--recompute-method block --recompute-num-layers 1") == 0);
    plan_cost_compute(&a, &d, &c);
    double layer = 4 * B * s * h * h * ((1 + 1 + s / h) + f / h * 1.5); /* dense, forward */
    CHECK_CLOSE(c.hardware_flops, model + layer + B * s * delta, 1e-12, 0);
    fwd = 2 * a2a + counts + 2 * tp_rows, bwd = 2 * a2a + 2 * tp_rows;
    CHECK_CLOSE(c.moe_comm, M * (2 * (fwd + bwd) + fwd), 1e-12, 0);
    CHECK_CLOSE(c.tp_comm, M * ((21 + 15) * half + ce), 1e-12, 0);
    args_free(&a);
}

static void test_device_json(void) {
    plan_device d, back;
    CHECK(plan_device_preset("H100-80GB", &d) == 0);
    CHECK(plan_device_preset("B200", &d) == -1);
    CHECK(plan_device_preset("H100-80GB", &d) == 0);
    cJSON *o = plan_device_to_json(&d);
    CHECK(plan_device_from_json(o, &back, ERR, sizeof ERR) == 0);
    cJSON_Delete(o);
    CHECK(back.flops_bf16 == 989e12 && back.intra_bandwidth == 450e9 && back.ranks_per_node == 8);
    CHECK(back.account == PLAN_ACCOUNT_MEGATRON && !strcmp(back.name, "H100-80GB"));
    const char *path = "test_plan_cost_device.json";
    CHECK(plan_device_save(path, &d, ERR, sizeof ERR) == 0);
    CHECK(plan_device_load(path, &back, ERR, sizeof ERR) == 0 && back.memory_bandwidth == 3350e9);
    remove(path);

    o = cJSON_Parse("{\"flops_bf16\": 1e12, \"flops_fp32\": 1e12, \"memory_bytes\": 1e9, "
                    "\"memory_bandwidth\": 1e9, \"intra_node_bandwidth\": 1e9, "
                    "\"inter_node_bandwidth\": -1, \"ranks_per_node\": 1}");
    CHECK(plan_device_from_json(o, &back, ERR, sizeof ERR) == -1);
    CHECK(strstr(ERR, "\"inter_node_bandwidth\": -1 is outside [1e+06, 1e+15] bytes/s") != NULL);
    cJSON_Delete(o);
    /* positive but denormal or huge: every time would be inf (issue 27); the key, the value and
     * the bounds are named */
    const char *const OUTSIDE[][2] = {
        {"\"memory_bandwidth\": 1e-320", "\"memory_bandwidth\": 9.99989e-321 is outside [1e+06"},
        {"\"latency\": 1e308", "\"latency\": 1e+308 is outside [1e-12, 1] seconds (or 0)"},
        {"\"latency\": 1e-320", "\"latency\": 9.99989e-321 is outside"},
        {"\"flops_bf16\": 1e300", "\"flops_bf16\": 1e+300 is outside [1e+06, 1e+18] FLOP/s"},
        {"\"efficiency\": 1.5", "\"efficiency\": 1.5 is outside [0.001, 1]"},
        {"\"memory_bytes\": 5e-324", "\"memory_bytes\": 4.94066e-324 is outside"},
        {"\"elementwise_bandwidth\": 1e300", "\"elementwise_bandwidth\": 1e+300 is outside"},
        {"\"gemm_dims\": [32], \"gemm_rates_fp32\": [1e-300], \"gemm_rates_bf16\": [1e9]",
         "\"gemm_rates_fp32[0]\": 1e-300 is outside [1e+06, 1e+18] FLOP/s"},
    };
    for (size_t i = 0; i < sizeof OUTSIDE / sizeof OUTSIDE[0]; i++) {
        char text[1024];
        /* the key under test first: cJSON finds the first of a repeated key */
        snprintf(text, sizeof text, "{%s, \"flops_bf16\": 1e12, \"flops_fp32\": 1e12, "
                 "\"memory_bytes\": 1e9, \"memory_bandwidth\": 1e9, "
                 "\"intra_node_bandwidth\": 1e9, \"inter_node_bandwidth\": 1e9, "
                 "\"ranks_per_node\": 1}", OUTSIDE[i][0]);
        o = cJSON_Parse(text);
        CHECK(o != NULL);
        int rc = plan_device_from_json(o, &back, ERR, sizeof ERR);
        CHECK(rc == -1 && strstr(ERR, OUTSIDE[i][1]) != NULL);
        if (rc != -1 || !strstr(ERR, OUTSIDE[i][1]))
            fprintf(stderr, "  %s: got '%s'\n", OUTSIDE[i][0], rc ? ERR : "accepted");
        cJSON_Delete(o);
    }
    /* a measured GEMM table survives the trip; a table without rates is refused */
    o = cJSON_Parse("{\"flops_bf16\": 1e12, \"flops_fp32\": 1e12, \"memory_bytes\": 1e9, "
                    "\"memory_bandwidth\": 1e9, \"intra_node_bandwidth\": 1e9, "
                    "\"inter_node_bandwidth\": 1e9, \"ranks_per_node\": 0, \"shared\": true, "
                    "\"gemm_dims\": [32, 1024], \"gemm_rates_fp32\": [1e10, 1e11], "
                    "\"gemm_rates_bf16\": [2e10, 2e11], \"elementwise_bandwidth\": 1e9, "
                    "\"memory_account\": \"megadlm\"}");
    CHECK(plan_device_from_json(o, &back, ERR, sizeof ERR) == 0);
    cJSON_Delete(o);
    CHECK(back.gemm_points == 2 && back.gemm_dim[1] == 1024 && back.gemm_bf16[0] == 2e10);
    CHECK(back.elementwise_bandwidth == 1e9 && back.shared && back.account == PLAN_ACCOUNT_MEGADLM);
    o = plan_device_to_json(&back);
    plan_device again;
    CHECK(plan_device_from_json(o, &again, ERR, sizeof ERR) == 0 && again.gemm_fp32[1] == 1e11);
    cJSON_Delete(o);
    o = cJSON_Parse("{\"flops_bf16\": 1e12, \"flops_fp32\": 1e12, \"memory_bytes\": 1e9, "
                    "\"memory_bandwidth\": 1e9, \"intra_node_bandwidth\": 1e9, "
                    "\"inter_node_bandwidth\": 1e9, \"ranks_per_node\": 0, \"gemm_dims\": [64, 32], "
                    "\"gemm_rates_fp32\": [1e9, 1e9], \"gemm_rates_bf16\": [1e9, 1e9]}");
    CHECK(plan_device_from_json(o, &back, ERR, sizeof ERR) == -1);
    CHECK(strstr(ERR, "\"gemm_dims\": expected increasing sizes") != NULL);
    cJSON_Delete(o);
    o = cJSON_Parse("{\"flops_bf16\": 1e12}");
    CHECK(plan_device_from_json(o, &back, ERR, sizeof ERR) == -1);
    CHECK(strstr(ERR, "\"flops_fp32\": missing") != NULL);
    cJSON_Delete(o);
}

/* A shared device (a CPU node): rates and bandwidths divided among the node's ranks; a GEMM
 * table whose rates grow as the size in log-log (rate = 1e9 x n, so a GEMM of M x N x K runs
 * at 1e9 (MNK)^(1/3)); the elementwise term from megadlm's saved bytes without recompute */
static void test_shared_device(void) {
    plan_device d = {.name = "node", .flops_bf16 = 1e12, .flops_fp32 = 1e12, .efficiency = 1.0,
                     .memory_bytes = 1e10, .memory_bandwidth = 1e10, .intra_bandwidth = 1e9,
                     .inter_bandwidth = 1e9, .latency = 1e-5, .ranks_per_node = 0, .shared = 1,
                     .account = PLAN_ACCOUNT_MEGADLM, .gemm_points = 2,
                     .gemm_dim = {10, 10000}, .gemm_fp32 = {1e10, 1e13}, .gemm_bf16 = {1e10, 1e13},
                     .elementwise_bandwidth = 2e9};
    megadlm_args a;
    /* 2 layers, T = 64 tokens, h 64, 4 heads of 16, ffn 256, vocabulary 128; DP 2, M = 2 */
    CHECK(setup(&a, "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
                    "--max-position-embeddings 32 --vocab-size 100 --micro-batch-size 2 "
                    "--global-batch-size 8 --world-size 2 --make-vocab-size-divisible-by 128") == 0);
    plan_cost c;
    plan_cost_compute(&a, &d, &c);
    double T = 64, h = 64, s = 32, dh = 16, f = 256, V = 128, L = 2, heads = 4, b = 2;
    struct { double m, n, k, count; } g[] = {
        {T, 3 * h, h, L}, {s, s, dh, L * b * heads}, {s, dh, s, L * b * heads},
        {T, h, h, L}, {T, f, h, L}, {T, h, f, L}, {T, V, h, 1}};
    double flops = 0, secs = 0;
    for (int i = 0; i < 7; i++) {
        double fl = 2 * g[i].m * g[i].n * g[i].k * g[i].count;
        flops += fl;
        secs += fl / (1e9 * cbrt(g[i].m * g[i].n * g[i].k) / 2); /* half the node's rate */
    }
    CHECK_CLOSE(c.gemm_rate, flops / secs, 1e-9, 0);
    double saved = (double)theoretical_megadlm(&a).saved_activations;
    CHECK_CLOSE(c.elementwise, 2 * saved / (2e9 / 2), 1e-12, 0);
    CHECK_CLOSE(c.compute, c.hardware_flops / 2 / c.gemm_rate + c.elementwise, 1e-12, 0);
    /* DP 2 on one node: the fp32 gradients all-reduced over the node's link, 2 ring steps */
    double grads = (double)theoretical_megadlm(&a).gradients;
    CHECK_CLOSE(c.dp_comm, 2 * (0.5 * grads / 1e9 + 1e-5), 1e-12, 0);
    CHECK_CLOSE(c.optimizer, grads / 4 * 36 / (1e10 / 2), 1e-12, 0);
    CHECK(plan_ranks_per_node(&d, 2) == 2);
    args_free(&a);
}

int main(void) {
    test_shared_device();
    test_530b_terms();
    test_cp_terms();
    test_partial_memory();
    test_moe_terms();
    test_device_json();
    TEST_DONE();
}
