/* One MoE layer (core/transformer/moe/moe_layer.h) forward and backward on seeded random
 * inputs, every input and result written as raw float32 / int32 files into a directory for
 * tests/python/moe_torch.py, which recomputes them in float64 PyTorch from Megatron-core's
 * formulas. Usage: moe_layer_run DIR key=value... (keys: below, in `opts`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../bench/bench_util.h"
#include "core/random/philox.h"
#include "core/tensor/memory.h"
#include "core/transformer/moe/moe_layer.h"

typedef struct {
    int E, k, C, F, B, T, swiglu, pre, shared, grouped, train, seed, pad, position;
    int groups, limited; /* router_only: expert-parallel groups, --moe-router-topk-limited-devices */
    float scale, aux, z, jitter, cap, gscale;
    char lb[32];
} opts;

static void parse(opts *o, int argc, char **argv) {
    *o = (opts){.E = 4, .k = 2, .C = 16, .F = 12, .B = 2, .T = 8, .train = 1, .seed = 1,
                .scale = 0, .aux = 0.01f, .z = -1, .jitter = 0, .cap = -1, .gscale = 0.5f};
    snprintf(o->lb, sizeof o->lb, "aux_loss");
    for (int i = 2; i < argc; i++) {
        char key[32];
        const char *v = bench_key_value(argv[i], key, sizeof key);
#define INT(name) if (!strcmp(key, #name)) { o->name = atoi(v); continue; }
#define FLT(name) if (!strcmp(key, #name)) { o->name = (float)atof(v); continue; }
        INT(E) INT(k) INT(C) INT(F) INT(B) INT(T) INT(swiglu) INT(pre) INT(shared) INT(grouped)
        INT(train) INT(seed) INT(pad) INT(position) INT(groups) INT(limited)
        FLT(scale) FLT(aux) FLT(z) FLT(jitter) FLT(cap) FLT(gscale)
#undef INT
#undef FLT
        if (!strcmp(key, "lb")) { snprintf(o->lb, sizeof o->lb, "%s", v); continue; }
        fprintf(stderr, "unknown option %s\n", key);
        exit(2);
    }
}

static transformer_config config_of(const opts *o) {
    transformer_config c = {0};
    c.num_layers = 1;
    c.hidden_size = o->C;
    c.ffn_hidden_size = o->F;
    c.swiglu = o->swiglu;
    c.gelu = GELU_TANH;
    c.ffn_hidden_size = o->F;
    c.moe.num_experts = o->E;
    c.moe.ffn_hidden_size = o->F;
    c.moe.shared_expert_size = o->shared;
    c.moe.topk = o->k;
    c.moe.pre_softmax = o->pre;
    c.moe.topk_scaling_factor = o->scale;
    c.moe.aux_loss_coeff = o->aux;
    c.moe.z_loss_coeff = o->z;
    c.moe.input_jitter_eps = o->jitter;
    c.moe.capacity_factor = o->cap;
    c.moe.pad_to_capacity = o->pad;
    c.moe.drop_policy = o->position ? MOE_DROP_POSITION : MOE_DROP_PROBS;
    c.moe.grouped_gemm = o->grouped;
    c.moe.layer_freq = 1;
    c.moe.topk_limited_devices = o->limited;
    c.moe.ep_size = o->groups > 1 ? o->groups : 1; /* the router's groups (router_only) */
    c.moe.load_balancing = !strcmp(o->lb, "seq_aux_loss") ? MOE_LB_SEQ_AUX_LOSS
                           : !strcmp(o->lb, "sinkhorn")   ? MOE_LB_SINKHORN
                           : !strcmp(o->lb, "none")       ? MOE_LB_NONE
                                                          : MOE_LB_AUX_LOSS;
    return c;
}

static float *randn(size_t n, float std, uint32_t stream) {
    float *p = mem_alloc_floats(MEM_OTHER, n, "moe test tensor");
    for (size_t i = 0; i < n; i += 2) {
        const uint32_t ctr[4] = {(uint32_t)i, stream, 7, 0}, key[2] = {12345u, stream};
        uint32_t out[4];
        float z0, z1;
        philox4x32_10(ctr, key, out);
        philox_normal2(out[0], out[1], &z0, &z1);
        p[i] = z0 * std;
        if (i + 1 < n) p[i + 1] = z1 * std;
    }
    return p;
}

static void put(const char *dir, const char *name, const void *p, size_t bytes) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.bin", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, bytes, f) != bytes || fclose(f)) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

/* --moe-router-topk-limited-devices: the router alone (its groups are the EP ranks, which a
 * one-process layer cannot dispatch to): forward, then backward of sum(gate x dgate) plus the
 * losses, dgate random. */
static int router_only(const char *dir, const opts *o, const transformer_config *c) {
    const size_t N = (size_t)o->B * o->T, C = o->C, E = o->E, k = o->k;
    uint32_t s = (uint32_t)o->seed * 16;
    float *x = randn(N * C, 1.0f, s), *w = randn(E * C, 0.5f, s + 1);
    float *dgate = randn(N * k, 1.0f, s + 6), *dx = randn(N * C, 0.0f, 0), *dw = randn(E * C, 0.0f, 0);
    moe_routing r;
    moe_routing_alloc(&r, c, o->B, o->T);
    moe_router_forward(c, w, x, 1, (dropout_key){.seed = 99}, &r);
    moe_router_backward(c, w, x, &r, dgate, NULL, o->gscale, dx, dw);
    put(dir, "x", x, N * C * 4);
    put(dir, "router", w, E * C * 4);
    put(dir, "dgate", dgate, N * k * 4);
    put(dir, "idx", r.idx, N * k * 4);
    put(dir, "gate", r.gate, N * k * 4);
    put(dir, "din", dx, N * C * 4);
    put(dir, "drouter", dw, E * C * 4);
    char path[1024];
    snprintf(path, sizeof path, "%s/meta.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return 1;
    fprintf(f, "{\"router_only\": 1, \"N\": %zu, \"B\": %d, \"T\": %d, \"C\": %zu, \"E\": %zu, "
               "\"k\": %zu, \"pre\": %d, \"scale\": %.9g, \"aux\": %.9g, \"z\": %.9g, "
               "\"groups\": %d, \"limited\": %d, \"lb\": \"%s\", \"gscale\": %.9g, "
               "\"aux_value\": %.17g, \"z_value\": %.17g}\n",
            N, o->B, o->T, C, E, k, o->pre, o->scale, o->aux, o->z, c->moe.ep_size, o->limited,
            o->lb, o->gscale, r.aux_value, r.z_value);
    fclose(f);
    moe_routing_free(&r);
    mem_free_all(x, w, dgate, dx, dw);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: moe_layer_run DIR key=value...\n");
        return 2;
    }
    const char *dir = argv[1];
    opts o;
    parse(&o, argc, argv);
    transformer_config c = config_of(&o);
    if (o.limited > 0) return router_only(dir, &o, &c);
    const size_t N = (size_t)o.B * o.T, C = o.C, E = o.E, F = o.F;
    const size_t FC1 = (size_t)tc_expert_fc1_width(&c), S = (size_t)o.shared;
    const size_t SFC1 = (size_t)tc_shared_fc1_width(&c);
    uint32_t s = (uint32_t)o.seed * 16;
    float *x = randn(N * C, 1.0f, s), *router = randn(E * C, 0.5f, s + 1);
    float *fc1 = randn(E * FC1 * C, 0.3f, s + 2), *fc2 = randn(E * C * F, 0.3f, s + 3);
    float *sfc1 = randn(SFC1 * C + 1, 0.3f, s + 4), *sfc2 = randn(C * S + 1, 0.3f, s + 5);
    float *dout = randn(N * C, 1.0f, s + 6), *out = randn(N * C, 0.0f, 0), *din = randn(N * C, 0.0f, 0);
    layer_weights w = {.router_w = router, .experts_fc1_w = fc1, .experts_fc2_w = fc2,
                       .shared_fc1_w = sfc1, .shared_fc2_w = sfc2};
    layer_weights g = {.router_w = randn(E * C, 0.0f, 0), .experts_fc1_w = randn(E * FC1 * C, 0.0f, 0),
                       .experts_fc2_w = randn(E * C * F, 0.0f, 0),
                       .shared_fc1_w = randn(SFC1 * C + 1, 0.0f, 0), .shared_fc2_w = randn(C * S + 1, 0.0f, 0)};
    moe_tracker tracker;
    moe_tracker_init(&tracker, 1);
    layer_ctx ctx = {.cfg = &c, .B = o.B, .T = o.T, .T_valid = o.T, .training = o.train,
                     .key = {.seed = 99, .iteration = 3, .microbatch = 1},
                     .moe_tracker = &tracker, .moe_grad_scale = o.gscale};
    moe_saved m = {0};
    layer_workspace ws = {0}; /* one process: the shared expert needs none of its buffers */
    moe_layer_forward(&ctx, 0, &w, &ws, &m, x, out);
    const moe_routing *r = &m.routing;
    put(dir, "x", x, N * C * 4);
    put(dir, "router", router, E * C * 4);
    put(dir, "fc1", fc1, E * FC1 * C * 4);
    put(dir, "fc2", fc2, E * C * F * 4);
    put(dir, "sfc1", sfc1, SFC1 * C * 4);
    put(dir, "sfc2", sfc2, C * S * 4);
    put(dir, "dout", dout, N * C * 4);
    put(dir, "out", out, N * C * 4);
    put(dir, "idx", r->idx, N * o.k * 4);
    put(dir, "gate", r->gate, N * o.k * 4);
    put(dir, "kept", m.assign.kept, N * E);
    if (r->jitter) put(dir, "jitter", r->jitter, N * C * 4);
    double tracked[MOE_LOG_COUNT];
    for (int v = 0; v < MOE_LOG_COUNT; v++) tracked[v] = tracker.recorded[v] ? tracker.values[v] : -1.0;
    int R = m.assign.R;
    long long dropped = (long long)m.assign.dropped;
    moe_layer_backward(&ctx, 0, &w, &g, &ws, &m, x, dout, din);
    put(dir, "din", din, N * C * 4);
    put(dir, "drouter", g.router_w, E * C * 4);
    put(dir, "dfc1", g.experts_fc1_w, E * FC1 * C * 4);
    put(dir, "dfc2", g.experts_fc2_w, E * C * F * 4);
    put(dir, "dsfc1", g.shared_fc1_w, SFC1 * C * 4);
    put(dir, "dsfc2", g.shared_fc2_w, C * S * 4);
    char path[1024];
    snprintf(path, sizeof path, "%s/meta.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return 1;
    fprintf(f, "{\"N\": %zu, \"B\": %d, \"T\": %d, \"C\": %zu, \"E\": %zu, \"k\": %d, \"F\": %zu, "
               "\"shared\": %zu, \"swiglu\": %d, \"pre\": %d, \"scale\": %.9g, \"aux\": %.9g, "
               "\"z\": %.9g, \"jitter\": %.9g, \"cap\": %.9g, \"pad\": %d, \"position\": %d, "
               "\"lb\": \"%s\", \"train\": %d, \"gscale\": %.9g, \"rows\": %d, \"dropped\": %lld, "
               "\"tracked\": {",
            N, o.B, o.T, C, E, o.k, F, S, o.swiglu, o.pre, o.scale, o.aux, o.z, o.jitter, o.cap,
            o.pad, o.position, o.lb, o.train, o.gscale, R, dropped);
    for (int v = 0; v < MOE_LOG_COUNT; v++)
        fprintf(f, "%s\"%s\": %.17g", v ? ", " : "", moe_log_name((moe_log_value)v), tracked[v]);
    fprintf(f, "}}\n");
    fclose(f);
    moe_tracker_free(&tracker);
    mem_free_all(x, router, fc1, fc2, sfc1, sfc2, dout, out, din, g.router_w, g.experts_fc1_w,
                 g.experts_fc2_w, g.shared_fc1_w, g.shared_fc2_w);
    return 0;
}
