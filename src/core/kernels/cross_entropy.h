/* Softmax cross-entropy over a (padded) vocabulary. Shapes: N rows, V classes. */
#ifndef MEGADLM_CORE_KERNELS_CROSS_ENTROPY_H
#define MEGADLM_CORE_KERNELS_CROSS_ENTROPY_H

/* losses[n] = logsumexp(logits[n,:]) - logits[n, targets[n]];  saves lse[n] = logsumexp. */
void cross_entropy_forward(float *losses, float *lse, const float *logits, const int *targets,
                           int N, int V);
/* dlogits[n,v] = (softmax(logits[n])[v] - [v == targets[n]]) * dlosses[n]   (written, not
 * accumulated). dlogits may alias logits (in place). */
void cross_entropy_backward(float *dlogits, const float *logits, const float *lse,
                            const int *targets, const float *dlosses, int N, int V);

#endif
