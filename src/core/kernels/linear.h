/* Linear layer with PyTorch's weight layout [out_features, in_features].
 * Shapes: N rows (tokens), C input features, OC output features. */
#ifndef MEGADLM_CORE_KERNELS_LINEAR_H
#define MEGADLM_CORE_KERNELS_LINEAR_H

/* out[N,OC] = inp[N,C] @ weight[OC,C]^T + bias[OC]   (bias may be NULL; out is overwritten) */
void linear_forward(float *out, const float *inp, const float *weight, const float *bias, int N,
                    int C, int OC);
/* dinp[N,C] += dout[N,OC] @ weight[OC,C];  dweight[OC,C] += dout^T @ inp;
 * dbias[OC] += sum_n dout[n,:]   (dinp, dbias may be NULL) */
void linear_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                     const float *inp, const float *weight, int N, int C, int OC);

/* out[N,OC] += bias[OC] (row-parallel layers add their bias after the reduction). */
void bias_add_forward(float *out, const float *bias, int N, int OC);

#endif
