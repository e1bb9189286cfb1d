/* Core attention over packed documents (--reset-attention-mask) against the same sequence
 * length unpacked: forward + backward of src/core/kernels/attention.c on one sequence of S
 * tokens holding DOCS documents of S / DOCS tokens (packed) or one document (unpacked), causal
 * (GPT) and bidirectional (difflm-noshift). Prints per mask the best time over the repetitions
 * of each, their ratio, and the FLOP ratio of the exact masks (sum of squared document lengths
 * over S^2: 1 / DOCS for both masks) next to the ratio of the FLOPs the kernel's 64-row query
 * blocks compute (a causal block computes its rows' keys up to its last row).
 *
 * usage: attention_packing_bench [S=2048] [DOCS=16] [HEADS=4] [HS=64] [REPS=5] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "core/kernels/attention.h"

#define BLOCK 64 /* the kernel's query block (attention.c ATT_BLOCK) */

/* Score entries the kernel computes for documents of length len (each a multiple of BLOCK). */
static double computed_entries(int S, int len, int causal) {
    double e = 0.0;
    for (int d = 0; d < S / len; d++)
        for (int i0 = 0; i0 < len; i0 += BLOCK) e += (double)BLOCK * (causal ? i0 + BLOCK : len);
    return e;
}

static double time_pass(float *qkv, float *out, float *dqkv, float *dout, attention_probs pr,
                        qkv_batch x, attention_opts o, attention_workspace ws, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        memset(dqkv, 0, (size_t)x.T * qkv_row_width(x.layout) * sizeof(float));
        const double t0 = bench_now();
        attention_forward(out, pr, qkv, x, o, ws);
        attention_backward(dqkv, dout, qkv, pr, x, o, ws);
        const double t = bench_now() - t0;
        if (t < best) best = t;
    }
    return best;
}

int main(int argc, char **argv) {
    const int S = argc > 1 ? atoi(argv[1]) : 2048, DOCS = argc > 2 ? atoi(argv[2]) : 16;
    const int NH = argc > 3 ? atoi(argv[3]) : 4, HS = argc > 4 ? atoi(argv[4]) : 64;
    const int reps = argc > 5 ? atoi(argv[5]) : 5;
    if (S <= 0 || DOCS <= 0 || S % DOCS || (S / DOCS) % BLOCK) {
        fprintf(stderr, "attention_packing_bench: S / DOCS must be a multiple of %d\n", BLOCK);
        return 2;
    }
    const qkv_batch x = {1, S, {NH, NH, HS}};
    const size_t W = qkv_row_width(x.layout);
    float *qkv = bench_filled((size_t)S * W, 1), *dout = bench_filled((size_t)S * NH * HS, 2);
    float *out = malloc((size_t)S * NH * HS * sizeof(float));
    float *dqkv = malloc((size_t)S * W * sizeof(float));
    float *probs = malloc((size_t)NH * S * S * sizeof(float));
    attention_workspace ws = {malloc(attention_workspace_floats(S, 1) * sizeof(float)), 1};
    int32_t *start = malloc(S * sizeof(int32_t)), *end = malloc(S * sizeof(int32_t));
    const int len = S / DOCS;
    for (int t = 0; t < S; t++) {
        start[t] = t / len * len;
        end[t] = start[t] + len;
    }
    printf("attention forward + backward, one sequence of %d tokens, %d heads of %d, fp32, "
           "probabilities kept, 1 thread, best of %d\n", S, NH, HS, reps);
    printf("%-14s %12s %12s %8s %14s %16s\n", "mask", "unpacked ms", "packed ms", "ratio",
           "FLOP ratio", "computed ratio");
    for (int causal = 1; causal >= 0; causal--) {
        attention_opts o = {.causal = causal, .heads = {0, NH}};
        attention_probs pr = {probs, NULL};
        const double tu = time_pass(qkv, out, dqkv, dout, pr, x, o, ws, reps);
        o.docs = (attention_docs){start, end, S};
        const double tp = time_pass(qkv, out, dqkv, dout, pr, x, o, ws, reps);
        const double flops = 1.0 / DOCS;
        const double computed = computed_entries(S, len, causal) / computed_entries(S, S, causal);
        printf("%-14s %12.2f %12.2f %8.4f %14.4f %16.4f\n",
               causal ? "causal" : "bidirectional", 1e3 * tu, 1e3 * tp, tp / tu, flops, computed);
    }
    free(qkv); free(dout); free(out); free(dqkv); free(probs); free(ws.data); free(start);
    free(end);
    return 0;
}
