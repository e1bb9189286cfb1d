#include "core/num_microbatches_calculator.h"

int num_microbatches_calculate(int global_batch_size, int micro_batch_size,
                               int data_parallel_size) {
    return global_batch_size / (micro_batch_size * data_parallel_size);
}
