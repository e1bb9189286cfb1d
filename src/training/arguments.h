/* Command-line arguments of `megadlm train` (and the commands that share its model flags),
 * with Megatron-LM's flag names and defaults (megatron/training/arguments.py). Parsing uses
 * getopt_long from one table that also produces --help; validation (args_validate) applies
 * Megatron's rules and derives the defaults that depend on other flags, exactly once. Modules
 * never read the command line: the trainer builds a transformer_config from these. */
#ifndef MEGADLM_TRAINING_ARGUMENTS_H
#define MEGADLM_TRAINING_ARGUMENTS_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#define ARGS_MAX_DATA_PATHS 64

typedef struct {
    /* ---- model ---- */
    int num_layers;               /* --num-layers (required) */
    int hidden_size;              /* --hidden-size (required) */
    int ffn_hidden_size;          /* --ffn-hidden-size; 0 = derive: 4h, or int(4h*2/3/64)*64 with --swiglu */
    int num_attention_heads;      /* --num-attention-heads (required) */
    int kv_channels;              /* --kv-channels; 0 = derive hidden/heads */
    int group_query_attention;    /* --group-query-attention */
    int num_query_groups;         /* --num-query-groups (default 1 when GQA; = heads otherwise, derived) */
    int max_position_embeddings;  /* --max-position-embeddings (required, as in Megatron) */
    int seq_length;               /* --seq-length (required) */
    char position_embedding_type[32]; /* --position-embedding-type learned_absolute|rope (default learned_absolute) */
    float rotary_base;            /* --rotary-base (10000) */
    float rotary_percent;         /* --rotary-percent (1.0) */
    char normalization[16];       /* --normalization LayerNorm|RMSNorm (LayerNorm) */
    float norm_epsilon;           /* --norm-epsilon (1e-5) */
    int qk_layernorm;             /* --qk-layernorm */
    int swiglu;                   /* --swiglu */
    int add_bias_linear;          /* 1 unless --disable-bias-linear */
    int bias_gelu_fusion;         /* 1 unless --no-bias-gelu-fusion; forced 0 without biases or with swiglu */
    int openai_gelu;              /* --openai-gelu */
    int untie_embeddings_and_output_weights; /* --untie-embeddings-and-output-weights */
    int make_vocab_size_divisible_by; /* --make-vocab-size-divisible-by (128) */
    float init_method_std;        /* --init-method-std (0.02) */
    float hidden_dropout;         /* --hidden-dropout (0.1) */
    float attention_dropout;      /* --attention-dropout (0.1) */

    /* ---- tokenizer / data ---- */
    char tokenizer_type[32];      /* --tokenizer-type ByteLevel|NullTokenizer|GPT2BPETokenizer|HuggingFaceTokenizer (default: NullTokenizer with --mock-data, else required) */
    int vocab_size;               /* --vocab-size (NullTokenizer, mock data) */
    char vocab_file[1024];        /* --vocab-file (GPT2BPETokenizer: vocab.json); made absolute by validation */
    char merge_file[1024];        /* --merge-file (GPT2BPETokenizer: merges.txt); made absolute by validation */
    char tokenizer_model[1024];   /* --tokenizer-model (HuggingFaceTokenizer: tokenizer.json); made absolute by validation */
    int padded_vocab_size;        /* derived: tokenizer vocab rounded up to make_vocab_size_divisible_by */
    int mock_data;                /* --mock-data */
    int num_data_paths;           /* --data-path [W1] P1 [W2 P2 ...] */
    char *data_paths[ARGS_MAX_DATA_PATHS];
    double data_weights[ARGS_MAX_DATA_PATHS];
    int data_weighted;            /* 1 when weights were given */
    char split[64];               /* --split ("969, 30, 1") */
    char train_data_path[1024];   /* --train-data-path [W1] P1 ... ("" = none): per-split data */
    char valid_data_path[1024];   /* --valid-data-path */
    char test_data_path[1024];    /* --test-data-path */
    int eod_mask_loss;            /* --eod-mask-loss */

    /* ---- training ---- */
    int micro_batch_size;         /* --micro-batch-size (required) */
    int global_batch_size;        /* --global-batch-size; 0 = derive micro * data-parallel size */
    int train_iters;              /* --train-iters (required) */
    uint64_t seed;                /* --seed (1234) */
    char optimizer[16];           /* --optimizer (adam; the only one) */
    float lr;                     /* --lr (required) */
    float min_lr;                 /* --min-lr (0) */
    int lr_warmup_iters;          /* --lr-warmup-iters (0) */
    float lr_warmup_fraction;     /* --lr-warmup-fraction (unset: < 0) */
    int lr_decay_iters;           /* --lr-decay-iters; 0 = train_iters */
    char lr_decay_style[16];      /* --lr-decay-style constant|linear|cosine|WSD (linear) */
    char lr_wsd_decay_style[16];  /* --lr-wsd-decay-style linear|cosine|exponential|minus_sqrt (exponential) */
    int lr_wsd_decay_iters;       /* --lr-wsd-decay-iters (required with WSD) */
    float adam_beta1;             /* --adam-beta1 (0.9) */
    float adam_beta2;             /* --adam-beta2 (0.999) */
    float adam_eps;               /* --adam-eps (1e-8) */
    float weight_decay;           /* --weight-decay (0.01) */
    float clip_grad;              /* --clip-grad (1.0); 0 disables */

    /* ---- logging, evaluation, checkpoints ---- */
    int log_interval;             /* --log-interval (100) */
    int eval_interval;            /* --eval-interval (1000) */
    int eval_iters;               /* --eval-iters (100) */
    int log_memory;               /* --log-memory (ours) */
    char save[512];               /* --save DIR ("" = none) */
    int save_interval;            /* --save-interval (0 = only at the end when --save is given) */
    char load[512];               /* --load DIR ("" = none) */

    /* ---- parallelism (validated with Megatron's rules; every valid layout trains) ---- */
    int tensor_model_parallel_size;   /* --tensor-model-parallel-size (1) */
    int pipeline_model_parallel_size; /* --pipeline-model-parallel-size (1) */
    int world_size;                   /* --world-size N (`megadlm memory` only); train: the
                                       * launcher's world. 0 = not given: TP x PP (DP 1) */
    int data_parallel_size;           /* derived: world / (TP x PP) */

    /* ---- run length ---- */
    int exit_interval;            /* --exit-interval N: stop (saving first when --save is given)
                                   * after an iteration divisible by N; 0 = none (Megatron's None) */
    /* ---- masked diffusion (MegaDLMs' pretrain_difflm.py) ---- */
    char model_running_mode[32];  /* --model-running-mode vanilla|difflm-noshift (vanilla) */
    int mask_token;               /* --mask-token ID (required with difflm-noshift; -1 unset) */
    char attention_mask_type[16]; /* --attention-mask-type causal|no_mask (causal; no_mask with
                                     difflm-noshift unless given) */
    float difflm_varilen_prob;    /* --difflm-varilen-prob (0.01) */
    float distributed_timeout_minutes; /* --distributed-timeout-minutes (10): a rank that makes
                                   * no progress for this long ends the job */
    int check_for_nan_in_loss_and_grad; /* 1 unless --no-check-for-nan-in-loss-and-grad: a
                                   * non-finite loss or grad norm stops the job (else the step is
                                   * skipped) */

    /* ---- activation recomputation (Megatron's names and rules) ---- */
    int recompute_activations;    /* --recompute-activations: shorthand for --recompute-granularity selective */
    char recompute_granularity[16]; /* --recompute-granularity full|selective ("" = none) */
    char recompute_method[16];    /* --recompute-method uniform|block ("" = none) */
    int recompute_num_layers;     /* --recompute-num-layers N (0 = unset) */
    int distribute_saved_activations; /* --distribute-saved-activations (needs tensor parallelism) */
    int num_microbatches_with_partial_activation_checkpoints; /* --num-microbatches-with-partial-
                                     activation-checkpoints K (-1 = unset): of the micro-batches a
                                     pipeline stage holds at once, K keep everything */
    int enable_cuda_graph;        /* --enable-cuda-graph: always refused (no CUDA graphs here) */

    /* ---- parallelism, continued (Megatron's names and rules) ---- */
    int sequence_parallel;        /* --sequence-parallel; turned off (with a note) at TP 1, as Megatron */
    int use_distributed_optimizer; /* --use-distributed-optimizer */
    int tp_comm_overlap;          /* --tp-comm-overlap (needs --sequence-parallel, TP > 1) */
    int tp_comm_overlap_ag;       /* 1 unless --disable-tp-comm-overlap-ag */
    int tp_comm_overlap_rs;       /* 1 unless --disable-tp-comm-overlap-rs */
    int tp_comm_overlap_rs_dgrad; /* --tp-comm-overlap-rs-dgrad */
    int tp_comm_bulk_dgrad;       /* 1 unless --disable-tp-comm-bulk-dgrad */
    int tp_comm_bulk_wgrad;       /* 1 unless --disable-tp-comm-bulk-wgrad */
    int tp_comm_overlap_disable_qkv; /* --tp-comm-overlap-disable-qkv */
    int tp_comm_overlap_disable_fc1; /* --tp-comm-overlap-disable-fc1 */
    int tp_comm_overlap_num_splits;  /* --tp-comm-overlap-num-splits (ours; 0 = unset:
                                        ARGS_DEFAULT_SP_PIECES, see args_sp_pieces) */
    char tp_comm_overlap_progress[16]; /* --tp-comm-overlap-progress test|thread (ours) */
    int num_layers_per_virtual_pipeline_stage; /* --num-layers-per-virtual-pipeline-stage N (0 = unset) */
    int virtual_pipeline_model_parallel_size;  /* --virtual-pipeline-model-parallel-size V; derived
                                                * from the former; 0 = None (no interleaving, also
                                                * when it comes out as 1, as Megatron) */

    /* ---- data parallelism (Megatron's DistributedDataParallelConfig flags) ---- */
    int overlap_grad_reduce;      /* --overlap-grad-reduce: bucket reductions under backward */
    int overlap_param_gather;     /* --overlap-param-gather: distributed optimizer's all-gathers
                                   * under forward (needs --use-distributed-optimizer and
                                   * --overlap-grad-reduce) */
    int ddp_bucket_size;          /* --ddp-bucket-size N parameters (0 = None: max(40M, 1M x DP)
                                   * with --overlap-grad-reduce; one bucket without) */
    int accumulate_allreduce_grads_in_fp32; /* --accumulate-allreduce-grads-in-fp32: accepted;
                                   * megadlm accumulates and reduces in fp32 always */
} megadlm_args;

/* Fills Megatron's defaults. */
void args_defaults(megadlm_args *a);

/* Parses `argv` (argv[0] is the subcommand name; parsing starts at argv[1]).
 * Returns 0 on success; 1 after printing --help to stdout (caller exits 0); -1 on error with
 * the message in err (unknown flag, missing value, malformed number, a flag of a later
 * feature: "--bf16: not supported yet", ...). `--world-size` is accepted only when argv[0] is
 * "memory". */
int args_parse(megadlm_args *a, int argc, char **argv, char *err, size_t errlen);

/* Applies Megatron's rules and derived defaults. 0, or -1 with a message naming the flags and
 * the rule in err. Run once, after parsing (and after loading a checkpoint's arguments). */
int args_validate(megadlm_args *a, char *err, size_t errlen);
/* The model's sizes (every size positive, the products the model keeps in an int at most
 * INT_MAX, the whole model and one micro-batch's activations below 2^60 bytes), in 64-bit
 * arithmetic. Part of args_validate; also for arguments read from a checkpoint's state.json
 * before anything is allocated. 0, or -1 with a message naming the flags. */
int args_check_sizes(const megadlm_args *a, char *err, size_t errlen);


/* Prints the flag table with defaults (what `megadlm train --help` shows). */
void args_print_help(const char *command, FILE *out);

/* Prints Megatron's "------------------------ arguments ------------------------" block. */
void args_print(const megadlm_args *a, FILE *out);

/* Serialises every field to JSON (checkpoint state) and back. args_from_json overwrites only
 * fields present in the object. */
cJSON *args_to_json(const megadlm_args *a);
int args_from_json(megadlm_args *a, const cJSON *obj, char *err, size_t errlen);

void args_free(megadlm_args *a); /* frees data_paths */

/* Parses a data-path list ("PREFIX" or "W1 P1 W2 P2 ...", as --train-data-path keeps it) into
 * paths (malloc'ed: free them), weights, *count, *weighted; errors name `flag`. */
int args_parse_blend(const char *flag, const char *spec, char **paths, double *weights,
                     int *count, int *weighted, char *err, size_t errlen);

/* Pieces per sequence shard in sequence parallelism's row plan (--tp-comm-overlap-num-splits):
 * the given number; unset, ARGS_DEFAULT_SP_PIECES under --tp-comm-overlap and 0 (one GEMM over
 * all rows, the fastest) without it. Kept 0 in the arguments when not given, so that a
 * checkpoint's state stays valid in any layout. */
#define ARGS_DEFAULT_SP_PIECES 2
static inline int args_sp_pieces(const megadlm_args *a) {
    if (a->tp_comm_overlap_num_splits > 0) return a->tp_comm_overlap_num_splits;
    return a->tp_comm_overlap ? ARGS_DEFAULT_SP_PIECES : 0;
}

#endif
