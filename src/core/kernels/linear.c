/* Linear layer, PyTorch weight layout [OC, C]. All matrix products go through gemm(). */
#include "core/kernels/linear.h"

#include "core/kernels/gemm.h"

#include <stddef.h>

/* out[N,OC] = inp[N,C] @ weight[OC,C]^T + bias[OC] */
void linear_forward(float *out, const float *inp, const float *weight, const float *bias, int N,
                    int C, int OC) {
    gemm((gemm_dims){N, OC, C}, 1.0f, gemm_n(inp, C), gemm_t(weight, C), 0.0f, gemm_o(out, OC));
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
                     const float *weight, int N, int C, int OC) {
    if (dinp)
        gemm((gemm_dims){N, C, OC}, 1.0f, gemm_n(dout, OC), gemm_n(weight, C), 1.0f,
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
