/* Megatron's own theoretical memory report, as its code computes it
 * (megatron/training/theoretical_memory_usage.py in MegaDLMs' Megatron: report_theoretical_memory,
 * compute_weight_and_optimizer_memory, compute_activation_memory), beside megadlm's account
 * (theoretical_memory.h), which corrects it where a model is not GPT-3-shaped:
 *  - parameters: Megatron counts two parameters per hidden unit in every norm (LayerNorm's
 *    weight and bias), RMSNorm included; megadlm counts RMSNorm's one;
 *  - bytes per parameter: 18, or 6 + 12/DP with the distributed optimizer, whatever FSDP
 *    strategy shards more; megadlm divides what the strategy shards;
 *  - activations, computed only with sequence parallelism and selective recompute: per layer
 *    sbh(18 + 4f/h), i.e. Q, K, V and the attention output at the hidden width and no SwiGLU
 *    gate, and the whole sequence under context parallelism; megadlm counts the real widths
 *    (GQA's K and V, kv-channels, SwiGLU's gate) and s/CP positions.
 * `megadlm memory` (and `train --log-memory`) print megadlm's line and, when Megatron's shows
 * other numbers, Megatron's beside it (docs/MEMORY.md). */
#ifndef MEGADLM_TRAINING_MEGATRON_MEMORY_H
#define MEGADLM_TRAINING_MEGATRON_MEMORY_H

#include <stddef.h>
#include <stdio.h>

#include "training/arguments.h"
#include "training/theoretical_memory.h"

typedef struct {
    double parameters;                   /* the whole model */
    double parameters_most_loaded_shard; /* (block/p + embedding [+ output when untied, p=1])/t */
    double bytes_per_parameter;          /* 18, or 6 + 12/DP with the distributed optimizer */
    double weight_and_optimizer_bytes;
    int has_activation; /* Megatron computes activations only for SP + selective recompute */
    double activation_bytes; /* 0 without */
    double total_bytes;      /* 0 without */
} megatron_memory_report;

/* Megatron's formulas on validated arguments, as its code evaluates them. */
void megatron_memory_compute(const megadlm_args *a, megatron_memory_report *out);

/* 1 when Megatron's line (MB to two decimals, as both print them) shows a number other than
 * megadlm's line does. */
int megatron_memory_differs(const theoretical_memory *m, const megatron_memory_report *r);

/* Why the two differ for these arguments, in words ("" when nothing applies). */
void megatron_memory_why(const megadlm_args *a, const megatron_memory_report *r, char *buf,
                         size_t n);

/* megadlm's line, "Theoretical memory footprints: weight and optimizer=X MB, activation=Y MB,
 * total=Z MB", then, when Megatron's formula shows other numbers, Megatron's line labelled as
 * such with the reasons. */
void megatron_memory_print_footprints(FILE *out, const megadlm_args *a,
                                      const theoretical_memory *m);

#endif
