/* Command-line arguments of `megadlm train` (and the commands that share its model flags),
 * with Megatron-LM's flag names and defaults (megatron/training/arguments.py). Every flag is
 * one entry of training/arguments.def, which generates the fields, the defaults, getopt_long's
 * table, --help, args_print and the JSON state; validation (args_validate) applies
 * Megatron's rules and derives the defaults that depend on other flags, exactly once. Modules
 * never read the command line: the trainer builds a transformer_config from these. */
#ifndef MEGADLM_TRAINING_ARGUMENTS_H
#define MEGADLM_TRAINING_ARGUMENTS_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#define ARGS_MAX_DATA_PATHS 64

/* The fields of every flag (training/arguments.def: name, type, default and meaning), then
 * the --data-path list. */
typedef struct {
#define ARG_FLAG(field, type, ...) ARGS_CTYPE(type) field ARGS_DIM(type);
#define ARG_FIELD(field, type, ...) ARGS_CTYPE(type) field ARGS_DIM(type);
#include "training/arguments.def"
    int num_data_paths;           /* --data-path [W1] P1 [W2 P2 ...] */
    char *data_paths[ARGS_MAX_DATA_PATHS];
    double data_weights[ARGS_MAX_DATA_PATHS];
    int data_weighted;            /* 1 when weights were given */
} megadlm_args;

/* The values of the choice flags (arguments.def's ARG_CHOICE entries: ARGS_MODE_DIFFLM_NOSHIFT,
 * ARGS_RECOMPUTE_FULL, ...). The fields keep the strings (what state.json saves and
 * args_print shows); code outside the parser reads them as these constants, through
 * ARGS_CHOICE. */
typedef enum {
    ARGS_CHOICE_NONE = 0, /* "" (not given) or a value that is not one of the field's choices */
#define ARG_CHOICE(field, name, value) name,
#include "training/arguments.def"
} args_choice;
/* The constant of `value` among the choices of the field named `field` (ARGS_CHOICE_NONE when
 * it is none of them). */
args_choice args_choice_of(const char *field, const char *value);
/* The choice a flag holds: ARGS_CHOICE(a, recompute_granularity) == ARGS_RECOMPUTE_FULL */
#define ARGS_CHOICE(a, field) args_choice_of(#field, (a)->field)
/* The string of a choice constant (what the flag takes), "" for ARGS_CHOICE_NONE. */
const char *args_choice_name(args_choice c);

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
/* args_validate's failures, told apart for a caller that words them differently (generate
 * points at its overrides when a checkpoint's tokenizer file is missing): a tokenizer file
 * (--vocab-file, --merge-file, --tokenizer-model) that is not given, cannot be read or is not
 * a tokenizer, or any other rule. */
typedef enum {
    ARGS_VALID = 0,
    ARGS_INVALID = -1,
    ARGS_INVALID_TOKENIZER_FILE = -2,
} args_validity;
/* args_validate, returning which kind of failure (the message is the same). */
args_validity args_validate_kind(megadlm_args *a, char *err, size_t errlen);
/* The model's sizes (every size positive, the products the model keeps in an int at most
 * INT_MAX, the whole model and one micro-batch's activations below 2^60 bytes), in 64-bit
 * arithmetic. Part of args_validate; also for arguments read from a checkpoint's state.json
 * before anything is allocated. 0, or -1 with a message naming the flags. */
int args_check_sizes(const megadlm_args *a, char *err, size_t errlen);

/* After args_validate: the iterations to train, --train-iters or, sample-based, Megatron's
 * update_train_iters: --train-samples // --global-batch-size (a partial last batch is not
 * trained). */
int args_train_iters(const megadlm_args *a);
/* After args_validate: the micro-batches one data-parallel rank runs per iteration,
 * --global-batch-size / (--micro-batch-size x data-parallel size) (Megatron's
 * get_num_microbatches; core/num_microbatches_calculator.h). */
int args_num_microbatches(const megadlm_args *a);
/* After args_validate: the ranks one gradient reduction spans, DP x CP (the data-parallel group
 * with context parallelism): what the distributed optimizer shards over (before
 * --num-distributed-optimizer-instances splits it), as Megatron's data_parallel_group with
 * with_context_parallel=True. */
int args_grad_reduce_ranks(const megadlm_args *a);
/* The double of the shortest decimal that reads back as x: the value the user wrote (any
 * decimal of up to 6 significant digits), which Megatron holds as a Python float where
 * megadlm's field holds x. The lr schedule computes from these, so that its doubles, and the
 * log's learning rate, are Megatron's. */
double args_decimal(float x);
/* After args_validate: the lr schedule's lengths in samples, as Megatron's
 * get_optimizer_param_scheduler makes them: warmup (fractional with --lr-warmup-fraction),
 * decay, and WSD's annealing (0 when not given). */
void args_lr_schedule_samples(const megadlm_args *a, double *warmup, int64_t *decay,
                              int64_t *wsd_decay);


/* Prints the flag table with defaults (what `megadlm train --help` shows). */
void args_print_help(const char *command, FILE *out);

/* Prints Megatron's "------------------------ arguments ------------------------" block. */
void args_print(const megadlm_args *a, FILE *out);

/* Serialises every field to JSON (checkpoint state) and back. args_from_json overwrites only
 * fields present in the object. */
cJSON *args_to_json(const megadlm_args *a);
int args_from_json(megadlm_args *a, const cJSON *obj, char *err, size_t errlen);

void args_free(megadlm_args *a); /* frees data_paths */

/* Is iteration one of --checkpoint-steps (validated by args_validate)? */
int args_checkpoint_step(const megadlm_args *a, int iteration);

/* FSDP (after args_validate): the strategy keeps only a shard of the gradients on each
 * data-parallel rank (optim_grads, optim_grads_params). */
int args_fsdp_shards_grads(const megadlm_args *a);

/* Makes the arguments an fp32 run's: --bf16, --fp16 and the loss scaler's flags back to their
 * defaults (generate and convert read a mixed-precision checkpoint's fp32 main parameters). */
void args_fp32(megadlm_args *a);
/* a's layout made one process holding every tensor whole, as a checkpoint's files hold them
 * (a saved run's model rebuilt to count, load, convert or sample it): no tensor, pipeline
 * (virtual too), context or expert parallelism, no sequence parallelism, TP overlap or
 * distributed saved activations. */
void args_one_process(megadlm_args *a);

/* The fields a checkpoint fixes (arguments.def's MODEL entries, NULL-terminated): resuming
 * with other values is refused. */
extern const char *const args_model_flags[];

/* Parses a data-path list ("PREFIX" or "W1 P1 W2 P2 ...", as --train-data-path keeps it) into
 * paths (malloc'ed: free them), weights, *count, *weighted; errors name `flag`. */
int args_parse_blend(const char *flag, const char *spec, char **paths, double *weights,
                     int *count, int *weighted, char *err, size_t errlen);

/* --moe-layer-freq as Megatron's moe_freq_type reads it, without evaluating anything: an
 * integer N > 0 (*freq = N: layer i, from 0, is an MoE layer when i % N == 0; pattern
 * untouched), or a Python list expression of 0 and 1 (list literals, parentheses, + joining
 * lists, * repeating one by an integer: "([1]*3+[0]*1)*3") that must give exactly num_layers
 * entries (*freq = 0, pattern[0 .. num_layers) filled with them). pattern holds
 * MOE_MAX_PATTERN_LAYERS entries (core/transformer/transformer_config.h). 0, or -1 with a
 * message naming the flag in err. */
int args_moe_layer_pattern(const char *s, int num_layers, int *freq, uint8_t *pattern,
                           char *err, size_t errlen);

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
