/* Linear layer, PyTorch weight layout [OC, C]. All matrix products go through gemm(). */
#include "core/kernels/linear.h"

#include "core/kernels/bf16.h"
#include "core/kernels/gemm.h"
#include "core/tensor/memory.h"
#include "core/util/die.h"

#include <omp.h>
#include <stddef.h>
#include <stdint.h>

/* --bf16 / --fp16: the format and the operand workspace */
static struct {
    half_kind kind;
    uint16_t *ws;
    size_t elems;        /* the workspace's 16-bit values */
    int max_rows, width; /* the most rows a call has; the widest row */
} g_lb;

static int chunk_rows(int max_rows, int max_width) {
    size_t per_row = 2 * (size_t)max_width;
    size_t r = LINEAR_BF16_WS_ELEMS / per_row;
    if (r < 1) r = 1;
    return (size_t)max_rows < r ? max_rows : (int)r;
}

size_t linear_bf16_workspace_bytes(int max_rows, int max_width) {
    return (size_t)chunk_rows(max_rows, max_width) * 2 * (size_t)max_width * sizeof(uint16_t);
}

void linear_half_setup(half_kind kind, int max_rows, int max_width) {
    if (g_lb.ws) mem_free(g_lb.ws);
    g_lb.kind = kind;
    g_lb.ws = NULL;
    if (kind == HALF_NONE) return;
    g_lb.max_rows = max_rows;
    g_lb.width = max_width;
    g_lb.elems = linear_bf16_workspace_bytes(max_rows, max_width) / sizeof(uint16_t);
    g_lb.ws = mem_alloc(MEM_WORKSPACE, linear_bf16_workspace_bytes(max_rows, max_width),
                        "16-bit linear operands");
}

void linear_bf16_setup(int max_rows, int max_width) {
    linear_half_setup(HALF_BF16, max_rows, max_width);
}

/* Rows per chunk of a linear of C inputs and OC outputs: as many as the workspace holds of
 * both rounded operands (backward: the output gradient [rows, OC] and the input [rows, C]),
 * so only the widest linears (the output layer) run in chunks and the others in one GEMM over
 * all rows (the GEMM libraries are faster on more rows; the fallback widens the weight once per
 * call). A function of the shapes alone: the same call always runs the same chunks, hence the
 * same bits (recomputation). */
static int chunk_rows_for(int C, int OC) {
    size_t r = g_lb.elems / ((size_t)C + (size_t)OC);
    if (r < 1) r = 1;
    return (size_t)g_lb.max_rows < r ? g_lb.max_rows : (int)r;
}

/* The weight's 16-bit values, or NULL: an fp32 weight (fp32 path). own_ws: the caller brings
 * its own operand workspace (linear_forward_in), so a parallel region is fine. */
static const uint16_t *half_weight_for(linear_weight w, int C, int OC, int own_ws) {
    if (!w.h16) return NULL;
    if (g_lb.kind == HALF_NONE)
        die(1, "internal error: a 16-bit linear weight without linear_half_setup");
    if (C > g_lb.width || OC > g_lb.width)
        die(1, "internal error: %s linear of width %d x %d over the workspace's %d",
            half_kind_name(g_lb.kind), OC, C, g_lb.width);
    if (!own_ws && omp_in_parallel())
        die(1, "internal error: %s linear inside a parallel region", half_kind_name(g_lb.kind));
    return w.h16;
}

static const uint16_t *half_weight(linear_weight w, int C, int OC) {
    return half_weight_for(w, C, OC, 0);
}

static void forward_half_ws(uint16_t *ws, float *out, const float *inp, const uint16_t *w16,
                            int N, int C, int OC);
static void backward_half_ws(uint16_t *ws, float *dinp, float *dweight, const float *dout,
                             const float *inp, const uint16_t *w16, int N, int C, int OC);

size_t linear_half_ws_elems(void) { return g_lb.elems; }

void linear_forward_in(uint16_t *ws, float *out, const float *inp, linear_weight weight, int N,
                       int C, int OC) {
    const uint16_t *w16 = half_weight_for(weight, C, OC, 1);
    if (!w16) die(1, "internal error: linear_forward_in with an fp32 weight");
    forward_half_ws(ws, out, inp, w16, N, C, OC);
}

void linear_backward_in(uint16_t *ws, float *dinp, float *dweight, const float *dout,
                        const float *inp, linear_weight weight, int N, int C, int OC) {
    const uint16_t *w16 = half_weight_for(weight, C, OC, 1);
    if (!w16) die(1, "internal error: linear_backward_in with an fp32 weight");
    backward_half_ws(ws, dinp, dweight, dout, inp, w16, N, C, OC);
}

static void forward_half(float *out, const float *inp, const uint16_t *w16, int N, int C,
                         int OC) {
    forward_half_ws(g_lb.ws, out, inp, w16, N, C, OC);
}

/* Forward rounds its input only (the weight is 16-bit already): as many rows as the workspace
 * holds of it, so a wide linear (the output layer) runs one GEMM over all its rows too. */
static int forward_rows(int C) {
    const size_t r = g_lb.elems / (size_t)C;
    return r < 1 ? 1 : r > (size_t)INT32_MAX ? INT32_MAX : (int)r;
}

static void forward_half_ws(uint16_t *ws, float *out, const float *inp, const uint16_t *w16,
                            int N, int C, int OC) {
    const half_kind k = g_lb.kind;
    const int rows = forward_rows(C);
    uint16_t *in16 = ws;
    for (int r = 0; r < N; r += rows) {
        int n = N - r < rows ? N - r : rows;
        half_from_f32(k, in16, inp + (size_t)r * C, (size_t)n * C);
        gemm_half(k, (gemm_dims){n, OC, C}, 1.0f, gemm_n_half(in16, C), gemm_t_half(w16, C), 0.0f,
                  gemm_o(out + (size_t)r * OC, OC));
    }
}

static void backward_half(float *dinp, float *dweight, const float *dout, const float *inp,
                          const uint16_t *w16, int N, int C, int OC) {
    backward_half_ws(g_lb.ws, dinp, dweight, dout, inp, w16, N, C, OC);
}

/* The blockwise backward of a linear whose rows do not fit one chunk (a large vocabulary's
 * output layer): blocks of `nb` of its OC outputs over all N rows instead of chunks of rows, each
 * block's output gradient rounded once and used by both products:
 *   dinp += dout[:, blk] @ W[blk, :]   (K = the block: long, C read and written once a block)
 *   dW[blk] += dout[:, blk]^T @ inp    (K = N: dW's rows written once, not once per chunk).
 * The GEMMs run 1.2-2x faster than on row chunks (bench/README.md). nb is a function of the
 * shapes alone: the most columns the workspace holds next to the rounded input, in equal blocks;
 * 0 where the rows fit one chunk or the workspace leaves fewer than BLOCK_MIN columns. */
#define BLOCK_MIN 256

static int block_cols(int N, int C, int OC) {
    const size_t in = (size_t)N * C;
    if (chunk_rows_for(C, OC) >= N || g_lb.elems < in + (size_t)N * BLOCK_MIN) return 0;
    const size_t cap = (g_lb.elems - in) / (size_t)N, blocks = ((size_t)OC + cap - 1) / cap;
    return (int)(((size_t)OC + blocks - 1) / blocks);
}

/* Blocks [o0, o1) of the outputs, in backward's blocks of nb (wgrad of a range of the weight's
 * rows too: with (0, OC) the same calls as backward_blocks, so the same bits). */
static void backward_blocks(uint16_t *ws, float *dinp, float *dweight, const float *dout,
                            const float *inp, const uint16_t *w16, int N, int C, int OC, int nb,
                            int o0, int o1) {
    const half_kind k = g_lb.kind;
    uint16_t *in16 = ws, *dout16 = ws + (size_t)N * C;
    if (dweight) half_from_f32(k, in16, inp, (size_t)N * C);
    for (int b0 = o0 / nb * nb; b0 < o1; b0 += nb) {
        const int lo = b0 > o0 ? b0 : o0, hi = b0 + nb < o1 ? b0 + nb : o1, n = hi - lo;
        half_from_f32_2d(k, dout16, (size_t)n, dout + lo, (size_t)OC, (size_t)N, (size_t)n);
        if (dinp)
            gemm_half(k, (gemm_dims){N, C, n}, 1.0f, gemm_n_half(dout16, n),
                      gemm_n_half(w16 + (size_t)lo * C, C), 1.0f, gemm_o(dinp, C));
        if (dweight)
            gemm_half(k, (gemm_dims){n, C, N}, 1.0f, gemm_t_half(dout16, n), gemm_n_half(in16, C),
                      1.0f, gemm_o(dweight + (size_t)lo * C, C));
    }
}

static void backward_half_ws(uint16_t *ws, float *dinp, float *dweight, const float *dout,
                             const float *inp, const uint16_t *w16, int N, int C, int OC) {
    const half_kind k = g_lb.kind;
    const int nb = block_cols(N, C, OC);
    if (nb > 0) {
        backward_blocks(ws, dinp, dweight, dout, inp, w16, N, C, OC, nb, 0, OC);
        return;
    }
    const int rows = chunk_rows_for(C, OC);
    uint16_t *dout16 = ws, *in16 = ws + (size_t)rows * OC;
    for (int r = 0; r < N; r += rows) {
        int n = N - r < rows ? N - r : rows;
        half_from_f32(k, dout16, dout + (size_t)r * OC, (size_t)n * OC);
        if (dinp)
            gemm_half(k, (gemm_dims){n, C, OC}, 1.0f, gemm_n_half(dout16, OC), gemm_n_half(w16, C),
                      1.0f, gemm_o(dinp + (size_t)r * C, C));
        if (dweight) {
            half_from_f32(k, in16, inp + (size_t)r * C, (size_t)n * C);
            gemm_half(k, (gemm_dims){OC, C, n}, 1.0f, gemm_t_half(dout16, OC),
                      gemm_n_half(in16, C), 1.0f, gemm_o(dweight, C));
        }
    }
}

/* wgrad of dweight's rows [o0, o0 + n) in the 16-bit format: the output gradient's columns
 * o0.. rounded with the tile's width as leading dimension. With (0, OC) it is backward_half's
 * wgrad call for call (same chunks, same operands), so an untiled wgrad gives the same bits
 * either way. */
static void wgrad_rows_half(float *dweight, const float *dout, const float *inp, int N, int C,
                            int OC, int o0, int n) {
    const half_kind k = g_lb.kind;
    const int nb = block_cols(N, C, OC);
    if (nb > 0) {
        backward_blocks(g_lb.ws, NULL, dweight, dout, inp, NULL, N, C, OC, nb, o0, o0 + n);
        return;
    }
    const int chunk = chunk_rows_for(C, OC); /* backward_half's chunks */
    uint16_t *dout16 = g_lb.ws, *in16 = g_lb.ws + (size_t)chunk * OC;
    for (int r = 0; r < N; r += chunk) {
        int rows = N - r < chunk ? N - r : chunk;
        for (int i = 0; i < rows; i++)
            half_from_f32(k, dout16 + (size_t)i * n, dout + (size_t)(r + i) * OC + o0, (size_t)n);
        half_from_f32(k, in16, inp + (size_t)r * C, (size_t)rows * C);
        gemm_half(k, (gemm_dims){n, C, rows}, 1.0f, gemm_t_half(dout16, n), gemm_n_half(in16, C),
                  1.0f, gemm_o(dweight + (size_t)o0 * C, C));
    }
}

void linear_backward_wgrad_rows(float *dweight, const float *dout, const float *inp,
                                linear_weight weight, int N, int C, int OC, int o0, int n) {
    const uint16_t *w16 = half_weight(weight, C, OC);
    if (w16)
        wgrad_rows_half(dweight, dout, inp, N, C, OC, o0, n);
    else
        gemm((gemm_dims){n, C, N}, 1.0f, gemm_t(dout + o0, OC), gemm_n(inp, C), 1.0f,
             gemm_o(dweight + (size_t)o0 * C, C));
}

/* out[N,OC] = inp[N,C] @ weight[OC,C]^T + bias[OC] */
void linear_forward(float *out, const float *inp, linear_weight weight, const float *bias, int N,
                    int C, int OC) {
    const uint16_t *w16 = half_weight(weight, C, OC);
    if (w16)
        forward_half(out, inp, w16, N, C, OC);
    else
        gemm((gemm_dims){N, OC, C}, 1.0f, gemm_n(inp, C), gemm_t(weight.f32, C), 0.0f,
             gemm_o(out, OC));
    if (bias) bias_add_forward(out, bias, N, OC);
}

void bias_add_forward(float *out, const float *bias, int N, int OC) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * OC;
        for (int j = 0; j < OC; j++)
            o[j] += bias[j];
    }
}

/* Column block width for the bias reduction: each block sums all N rows of its columns, so
 * the result does not depend on the thread count (deterministic). */
#define DBIAS_BLOCK 64

/* dinp[N,C] += dout[N,OC] @ weight[OC,C]
 * dweight[OC,C] += dout[N,OC]^T @ inp[N,C]
 * dbias[OC] += sum over n of dout[n,:] */
void linear_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                     linear_weight weight, int N, int C, int OC) {
    const uint16_t *w16 = (dinp || dweight) ? half_weight(weight, C, OC) : NULL;
    if (w16) {
        backward_half(dinp, dweight, dout, inp, w16, N, C, OC);
        dinp = NULL;
        dweight = NULL;
    }
    if (dinp)
        gemm((gemm_dims){N, C, OC}, 1.0f, gemm_n(dout, OC), gemm_n(weight.f32, C), 1.0f,
             gemm_o(dinp, C));
    if (dweight)
        gemm((gemm_dims){OC, C, N}, 1.0f, gemm_t(dout, OC), gemm_n(inp, C), 1.0f,
             gemm_o(dweight, C));
    if (dbias) {
        const int nblocks = (OC + DBIAS_BLOCK - 1) / DBIAS_BLOCK;
#pragma omp parallel for schedule(static)
        for (int blk = 0; blk < nblocks; blk++) {
            const int j0 = blk * DBIAS_BLOCK;
            const int w = OC - j0 < DBIAS_BLOCK ? OC - j0 : DBIAS_BLOCK;
            float acc[DBIAS_BLOCK] = {0};
            for (int n = 0; n < N; n++) {
                const float *d = dout + (size_t)n * OC + j0;
                for (int j = 0; j < w; j++)
                    acc[j] += d[j];
            }
            for (int j = 0; j < w; j++)
                dbias[j0 + j] += acc[j];
        }
    }
}
