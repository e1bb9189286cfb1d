/* The linear layer's 16-bit path (--bf16 / --fp16, core/kernels/linear.h): a weight given by its
 * 16-bit copy multiplies in the format linear_half_setup named (the weight's 16-bit values,
 * activation operand rounded to that format) with fp32 sums; forward, dgrad and wgrad are checked against
 * double sums of the operands rounded to that format (rounding to the other one misses the
 * bound by far) within fp32's summation bound, in one chunk and in chunks of 2 rows, on both
 * bf16 GEMM paths that run here and on fp16 (wgrad also in tiles of the weight's rows,
 * linear_backward_wgrad_rows); repeated calls give the same bits; an fp32 weight (with the
 * setup or without it) takes the fp32 path unchanged. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/kernels/bf16.h"
#include "core/kernels/embedding.h"
#include "core/kernels/gemm.h"
#include "core/kernels/linear.h"
#include "core/random/philox.h"
#include "test_util.h"

enum { N = 7, C = 24, OC = 19 };

static half_kind g_kind; /* the format of this run */

static float r16(float x) {
    return g_kind == HALF_FP16 ? fp16_to_float(fp16_from_float(x))
                               : bf16_to_float(bf16_from_float(x));
}

/* the reference: sum over k < K of r16(a[k * sa]) * r16(b[k * sb]) in double, and its magnitude */
static double ref_dot(const float *a, size_t sa, const float *b, size_t sb, int K, double *mag) {
    double s = 0, m = 0;
    for (int k = 0; k < K; k++) {
        const double p = (double)r16(a[k * sa]) * r16(b[k * sb]);
        s += p;
        m += fabs(p);
    }
    *mag = m;
    return s;
}

/* max over the result of |got - want| / (K * 2^-23 * sum |a||b| + tiny): <= 1 passes */
static int within(const float *got, const double *want, const double *mag, int n, int K) {
    int bad = 0;
    for (int i = 0; i < n; i++) {
        double tol = (K + 2) * ldexp(1.0, -23) * mag[i] + 1e-30;
        if (fabs(got[i] - want[i]) > tol) bad++;
    }
    return bad;
}

static void run(int max_width, const char *what) {
    /* the parameter buffer: weight [OC, C], then bias [OC]; its 16-bit copy; one fp32 copy of the
     * weight */
    size_t numel = (size_t)OC * C + OC;
    float *par = malloc(numel * sizeof(float)), *wout = malloc((size_t)OC * C * sizeof(float));
    uint16_t *par16 = malloc(numel * sizeof(uint16_t));
    float *inp = malloc((size_t)N * C * sizeof(float)), *dout = malloc((size_t)N * OC * sizeof(float));
    philox_fill_normal(par, numel, 1.0f, 1, 0);
    philox_fill_normal(inp, (size_t)N * C, 1.0f, 1, 1);
    philox_fill_normal(dout, (size_t)N * OC, 1.0f, 1, 2);
    memcpy(wout, par, (size_t)OC * C * sizeof(float));
    half_from_f32(g_kind, par16, par, numel);
    const float *w = par, *b = par + (size_t)OC * C;
    /* the 16-bit weight only: the path must not read fp32 values */
    const linear_weight w16 = {NULL, par16};

    linear_half_setup(g_kind, N, max_width);
    float out[N * OC], out2[N * OC], din[N * C], dw[OC * C], din2[N * C], dw2[OC * C];
    linear_forward(out, inp, w16, b, N, C, OC);
    linear_forward(out2, inp, w16, b, N, C, OC);
    CHECK(memcmp(out, out2, sizeof out) == 0);
    memset(din, 0, sizeof din);
    memset(dw, 0, sizeof dw);
    linear_backward(din, dw, NULL, dout, inp, w16, N, C, OC);
    memset(din2, 0, sizeof din2);
    memset(dw2, 0, sizeof dw2);
    linear_backward(din2, dw2, NULL, dout, inp, w16, N, C, OC);
    CHECK(memcmp(din, din2, sizeof din) == 0 && memcmp(dw, dw2, sizeof dw) == 0);

    /* references: double sums of the operands rounded to the format */
    double want[N * OC], mag[N * OC], wdin[N * C], mdin[N * C], wdw[OC * C], mdw[OC * C];
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double m;
            want[n * OC + o] = ref_dot(&inp[n * C], 1, &w[o * C], 1, C, &m) + b[o];
            mag[n * OC + o] = m + fabs(b[o]);
        }
    for (int n = 0; n < N; n++)
        for (int k = 0; k < C; k++)
            wdin[n * C + k] = ref_dot(&dout[n * OC], 1, &w[k], C, OC, &mdin[n * C + k]);
    for (int o = 0; o < OC; o++)
        for (int k = 0; k < C; k++)
            wdw[o * C + k] = ref_dot(&dout[o], OC, &inp[k], C, N, &mdw[o * C + k]);
    int bf = within(out, want, mag, N * OC, C), bd = within(din, wdin, mdin, N * C, OC),
        bw = within(dw, wdw, mdw, OC * C, N);
    printf("%s: forward %d, dgrad %d, wgrad %d outside the bound\n", what, bf, bd, bw);
    CHECK(bf == 0 && bd == 0 && bw == 0);

    /* wgrad in tiles of dw's rows (the TP overlap's wgrad under communication): the same
     * bound, each tile on the bf16 path; one tile of all rows is linear_backward's wgrad */
    float dwt[OC * C], dw1[OC * C];
    memset(dwt, 0, sizeof dwt);
    for (int o = 0; o < OC; o += 5)
        linear_backward_wgrad_rows(dwt, dout, inp, w16, N, C, OC, o, OC - o < 5 ? OC - o : 5);
    int bt = within(dwt, wdw, mdw, OC * C, N);
    printf("%s: wgrad in tiles of 5 rows: %d outside the bound\n", what, bt);
    CHECK(bt == 0);
    memset(dw1, 0, sizeof dw1);
    linear_backward_wgrad_rows(dw1, dout, inp, w16, N, C, OC, 0, OC);
    CHECK(memcmp(dw1, dw, sizeof dw) == 0);
    /* not the fp32 result: the operands were rounded */
    linear_half_setup(HALF_NONE, 0, 0);
    float f32[N * OC];
    linear_forward(f32, inp, linear_w32(w), b, N, C, OC);
    CHECK(memcmp(f32, out, sizeof f32) != 0);

    /* an fp32 weight with the setup on: the fp32 path, bit for bit */
    linear_half_setup(g_kind, N, max_width);
    float o1[N * OC];
    linear_forward(o1, inp, linear_w32(wout), b, N, C, OC);
    CHECK(memcmp(o1, f32, sizeof o1) == 0);
    /* and its wgrad tiles: the fp32 GEMM on the tile, as linear_backward's with one tile */
    float dwf[OC * C], dwf1[OC * C];
    memset(dwf, 0, sizeof dwf);
    memset(dwf1, 0, sizeof dwf1);
    linear_backward(NULL, dwf, NULL, dout, inp, linear_w32(wout), N, C, OC);
    linear_backward_wgrad_rows(dwf1, dout, inp, linear_w32(wout), N, C, OC, 0, OC);
    CHECK(memcmp(dwf, dwf1, sizeof dwf) == 0);
    CHECK(memcmp(dwf, dw, sizeof dwf) != 0);
    linear_half_setup(HALF_NONE, 0, 0);
    free(par);
    free(wout);
    free(par16);
    free(inp);
    free(dout);
}

/* The 16-bit word-embedding lookup (the model's word embedding under --bf16 / --fp16): each
 * row's 16-bit values widened, plus the position row in fp32 */
static void embedding_half(void) {
    enum { V = 5, T = 3, E = 6, P = 4 };
    float wte[V * E], wpe[P * E], out[2 * T * E];
    uint16_t wte16[V * E];
    int tokens[2 * T] = {4, 0, 2, 2, 1, 3};
    philox_fill_normal(wte, V * E, 1.0f, 2, 0);
    philox_fill_normal(wpe, P * E, 1.0f, 2, 1);
    half_from_f32(g_kind, wte16, wte, V * E);
    embedding_forward_half(out, tokens, g_kind, wte16, wpe, 2, T, E, 1);
    int bad = 0;
    for (int bt = 0; bt < 2 * T; bt++)
        for (int i = 0; i < E; i++)
            bad += out[bt * E + i] != r16(wte[tokens[bt] * E + i]) + wpe[(1 + bt % T) * E + i];
    embedding_forward_half(out, tokens, g_kind, wte16, NULL, 2, T, E, 0);
    for (int bt = 0; bt < 2 * T; bt++)
        for (int i = 0; i < E; i++) bad += out[bt * E + i] != r16(wte[tokens[bt] * E + i]);
    printf("%s embedding lookup: %d elements off\n", half_kind_name(g_kind), bad);
    CHECK(bad == 0);
}

/* A linear whose rows do not fit one chunk (N = 7 rows of C = 1 input and OC = 2.5 M outputs:
 * the workspace, 16 Mi values, holds 6 rows of both operands): backward runs in 2 blocks of the
 * outputs over all rows (linear.c's backward_blocks). dgrad (K = OC, summed over both blocks)
 * and wgrad against double sums of the rounded operands; wgrad of all rows by
 * linear_backward_wgrad_rows is linear_backward's bit for bit, and in 3 tiles whose edges fall
 * inside the blocks within the same bound; forward over all rows in one GEMM within its bound. */
static void blockwise(void) {
    enum { BN = 7, BC = 1 };
    const int OCB = 2500000;
    float *w = malloc(sizeof(float) * OCB), *dout = malloc(sizeof(float) * BN * OCB);
    uint16_t *w16 = malloc(sizeof(uint16_t) * OCB);
    float *dw = calloc(OCB, sizeof(float)), *dwt = calloc(OCB, sizeof(float)),
          *dw1 = calloc(OCB, sizeof(float)), *out = malloc(sizeof(float) * BN * OCB);
    float inp[BN * BC], din[BN * BC] = {0};
    philox_fill_normal(w, OCB, 1.0f, 2, 0);
    philox_fill_normal(dout, (size_t)BN * OCB, 1.0f, 2, 1);
    philox_fill_normal(inp, BN * BC, 1.0f, 2, 2);
    half_from_f32(g_kind, w16, w, OCB);
    const linear_weight lw = {NULL, w16};
    linear_half_setup(g_kind, BN, (int)(LINEAR_BF16_WS_ELEMS / 4));
    linear_backward(din, dw, NULL, dout, inp, lw, BN, BC, OCB);
    int bd = 0, bw = 0, bt = 0, bf = 0;
    for (int n = 0; n < BN; n++) {
        double mag;
        const double sum = ref_dot(&dout[(size_t)n * OCB], 1, w, 1, OCB, &mag);
        bd += within(&din[n], &sum, &mag, 1, OCB);
    }
    /* wgrad in 3 tiles: edges at 1/3 and 2/3 of OC, inside the blocks of OC / 2 */
    const int t1 = OCB / 3, t2 = 2 * OCB / 3;
    linear_backward_wgrad_rows(dwt, dout, inp, lw, BN, BC, OCB, 0, t1);
    linear_backward_wgrad_rows(dwt, dout, inp, lw, BN, BC, OCB, t1, t2 - t1);
    linear_backward_wgrad_rows(dwt, dout, inp, lw, BN, BC, OCB, t2, OCB - t2);
    linear_backward_wgrad_rows(dw1, dout, inp, lw, BN, BC, OCB, 0, OCB);
    for (int o = 0; o < OCB; o++) {
        double mag;
        const double sum = ref_dot(&dout[o], OCB, inp, 1, BN, &mag);
        bw += within(&dw[o], &sum, &mag, 1, BN);
        bt += within(&dwt[o], &sum, &mag, 1, BN);
    }
    linear_forward(out, inp, lw, NULL, BN, BC, OCB);
    for (size_t i = 0; i < (size_t)BN * OCB; i++) {
        const double want = (double)r16(inp[i / OCB]) * r16(w[i % OCB]), mag = fabs(want);
        bf += within(&out[i], &want, &mag, 1, BC);
    }
    printf("%s blockwise backward (N %d, OC %d): dgrad %d, wgrad %d, wgrad in 3 tiles %d, "
           "forward %d outside the bound\n", half_kind_name(g_kind), BN, OCB, bd, bw, bt, bf);
    CHECK(bd == 0 && bw == 0 && bt == 0 && bf == 0);
    CHECK(memcmp(dw1, dw, sizeof(float) * OCB) == 0);
    linear_half_setup(HALF_NONE, 0, 0);
    free(w);
    free(dout);
    free(w16);
    free(dw);
    free(dwt);
    free(dw1);
    free(out);
}

int main(void) {
    char err[256];
    const char *paths[] = {"onednn", "onednn-matmul", "fallback"};
    const gemm_bf16_path ids[] = {GEMM_BF16_ONEDNN, GEMM_BF16_ONEDNN_MATMUL, GEMM_BF16_FALLBACK};
    CHECK(gemm_bf16_init(err, sizeof err) == 0);
    g_kind = HALF_BF16;
    embedding_half();
    for (int p = 0; p < 3; p++) {
        if (gemm_bf16_use(ids[p], err, sizeof err) != 0) {
            printf("%s: not available here (%s)\n", paths[p], err);
            continue;
        }
        char what[64];
        snprintf(what, sizeof what, "%s, one chunk", paths[p]);
        run(OC > C ? OC : C, what);
        /* a width this large leaves rows for 2 per chunk: N = 7 rows in 4 chunks */
        snprintf(what, sizeof what, "%s, chunks of %d rows", paths[p],
                 (int)(LINEAR_BF16_WS_ELEMS / (2 * (LINEAR_BF16_WS_ELEMS / 4))));
        run((int)(LINEAR_BF16_WS_ELEMS / 4), what);
        blockwise();
    }
    /* fp16: the converted tiles whatever MEGADLM_BF16_GEMM chose */
    g_kind = HALF_FP16;
    CHECK(gemm_half_init(HALF_FP16, err, sizeof err) == 0);
    run(OC > C ? OC : C, "fp16, one chunk");
    run((int)(LINEAR_BF16_WS_ELEMS / 4), "fp16, chunks of 2 rows");
    blockwise();
    embedding_half();
    TEST_DONE();
}
