/* Megatron-core's num_microbatches_calculator.py (ConstantNumMicroBatchesCalculator): the
 * micro-batches one data-parallel rank runs per iteration. megadlm has no batch-size ramp-up,
 * so the number is constant for the whole run; training/arguments.h's args_num_microbatches
 * applies it to the flags. */
#ifndef MEGADLM_CORE_NUM_MICROBATCHES_CALCULATOR_H
#define MEGADLM_CORE_NUM_MICROBATCHES_CALCULATOR_H

/* global_batch_size / (micro_batch_size x data_parallel_size), which the caller has checked to
 * divide exactly (both factors positive). */
int num_microbatches_calculate(int global_batch_size, int micro_batch_size,
                               int data_parallel_size);

#endif
