/* Data parallelism (Megatron's DistributedDataParallel, without bucketing or overlap yet):
 * every DP rank runs its own micro-batches of each global batch, then the gradients are
 * averaged across the DP group so every replica takes the same optimizer step. */
#ifndef MEGADLM_CORE_DISTRIBUTED_DATA_PARALLEL_H
#define MEGADLM_CORE_DISTRIBUTED_DATA_PARALLEL_H

#include "core/tensor/tensor.h"

/* grad := mean over DP ranks of grad (all-reduce of the flat gradient buffer). */
void dp_average_grads(param_set *ps);
/* Mean of x over the DP group (the logged loss). */
double dp_average(double x);

#endif
