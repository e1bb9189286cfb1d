/* Named parameter tensors over flat buffers.
 *
 * A model's parameters live in ONE contiguous float buffer (and their gradients, AdamW's
 * exp_avg and exp_avg_sq in three more of the same length), so that gradient reduction,
 * clipping and the optimizer run over flat memory and a distributed optimizer can shard it.
 * A param_tensor names a slice of those buffers with its Megatron-core name and shape. */
#ifndef MEGADLM_CORE_TENSOR_TENSOR_H
#define MEGADLM_CORE_TENSOR_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#define PARAM_NAME_MAX 96
#define PARAM_MAX_DIMS 4

typedef struct {
    char name[PARAM_NAME_MAX]; /* e.g. "decoder.layers.0.self_attention.linear_qkv.weight" */
    int ndim;
    int64_t shape[PARAM_MAX_DIMS];
    size_t numel;
    size_t offset;         /* in floats, into param_set's flat buffers */
    int weight_decay;      /* 0 for biases and norm weights (Megatron: no decay on 1-D params) */
    float init_std;        /* std of the normal init; 0 = constant init_value */
    float init_value;      /* for norms (1) and biases (0) */
    /* tensor parallelism (core/tensor_parallel/layers.h): how this rank's slice sits in the
     * whole tensor, whose shape the checkpoint stores */
    int tp_split;          /* TP_SPLIT_NONE / ROWS / COLS / ROWS_SWIGLU */
    int64_t full_shape[PARAM_MAX_DIMS];
    int tp_duplicate;      /* the same on every TP rank: counted once in the gradient norm */
    int tp_allreduce_grad; /* each TP rank holds a partial gradient: summed across TP */
    /* pipeline parallelism */
    int pp_shared_copy;    /* the last stage's copy of the tied word embedding: kept equal to the
                              first stage's by an all-reduce of gradients, saved once, counted
                              once in the gradient norm */
    int word_embedding;    /* the word embedding, or a later pipeline stage's copy of it (the
                              same tensor: the copy keeps this mark): the one tensor the
                              distributed optimizer gives a bucket of its own with PP (ddp.c);
                              found by this mark, never by its name */
    int expert_parallel;   /* a routed expert's weight under expert parallelism: the EP ranks
                              hold different experts at the same offsets, so its gradient is
                              summed over the expert-data-parallel group, and its square over
                              the EP group in norms */
    uint64_t init_stream;  /* random stream of the init: the tensor's index in the whole model,
                              so every layout initialises it with the same values */
} param_tensor;

enum { TP_SPLIT_NONE = 0, TP_SPLIT_ROWS, TP_SPLIT_COLS, TP_SPLIT_ROWS_SWIGLU };

typedef struct {
    int count;
    param_tensor *tensors;
    size_t numel;     /* total floats */
    float *data;      /* [numel] MEM_PARAMS: the fp32 parameters (fp32 runs; the optimizer steps
                         them: they are their own main parameters); NULL under --bf16 / --fp16 */
    uint16_t *data_bf16; /* [numel] --bf16 / --fp16 only: the model's 16-bit parameters in the
                            run's format (bf16, or fp16 with --fp16; MEM_PARAMS), the only ones
                            the model reads; rounded from main after every step (or, with the
                            distributed optimizer, from its shard, then all-gathered) */
    float *main;      /* [numel] --bf16 / --fp16 only: the fp32 main parameters, MEM_OPTIMIZER
                         (Megatron's optimizer keeps them); NULL in fp32 runs and with the
                         distributed optimizer (which keeps its shard of them) */
    float *grad;      /* [numel] MEM_GRADS */
    float *exp_avg;   /* [numel] MEM_OPTIMIZER (AdamW first moment) */
    float *exp_avg_sq;/* [numel] MEM_OPTIMIZER (AdamW second moment) */
} param_set;

/* The fp32 parameters an optimizer steps and a checkpoint stores as fp32: params.data in fp32
 * runs, the main parameters under --bf16 / --fp16; NULL where neither is held whole. */
static inline float *param_set_fp32(const param_set *ps) { return ps->main ? ps->main : ps->data; }

/* Index of the tensor with this name, or -1. */
int param_set_find(const param_set *ps, const char *name);

#endif
