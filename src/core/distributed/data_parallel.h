/* Data parallelism: every DP rank runs its own micro-batches of each global batch; the
 * gradients are averaged across the DP group in buckets by distributed_data_parallel.h. */
#ifndef MEGADLM_CORE_DISTRIBUTED_DATA_PARALLEL_H
#define MEGADLM_CORE_DISTRIBUTED_DATA_PARALLEL_H

#include "core/tensor/tensor.h"

/* Mean of x over the DP group (the logged loss). */
double dp_average(double x);

#endif
