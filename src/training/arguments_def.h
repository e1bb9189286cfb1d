/* Every flag of `megadlm train` (and `megadlm memory`), one entry each: the one place a flag
 * is defined. Megatron derives its flags and its TransformerConfig copy from one dataclass;
 * here this list generates
 *   - the megadlm_args fields and their defaults (arguments.h, args_defaults),
 *   - the getopt_long table and --help (arguments.c: OPTIONS, in this order within a group),
 *   - args_print (Megatron's arguments block) and the checkpoint's JSON state (args_to_json,
 *     args_from_json: every field, under its name),
 *   - the flags a checkpoint fixes (args_model_flags: resuming with other values is refused),
 *   - the plain copies into transformer_config (model_config_from_args).
 * Rules that relate flags stay code: args_validate in arguments.c.
 *
 * The entries (a file that includes this one defines the ones it uses, the rest expand to
 * nothing, and all five are undefined at the end: no include guard, by design):
 *
 *   ARG_FLAG(field, TYPE, default, CHECK, CONFIG,
 *            group, "flag", "METAVAR", "default shown", "help")
 *       field     the megadlm_args field (and the JSON key and the args_print name)
 *       TYPE      a row of the type table below: the C type, how the value parses, how it
 *                 prints and goes to JSON
 *       default   the value args_defaults gives (a C initializer)
 *       CHECK     MODEL: shapes the model: --load refuses a checkpoint saved with another
 *                 value; RUN: free to change on resume
 *       CONFIG    COPY: copied as is into transformer_config's field of the same name;
 *                 CODE: model_config_from_args converts it by hand; NONE: not in the config
 *       group     the --help section (G_*, arguments.c)
 *       "flag"    the flag without "--"; TRUE sets the field to 1, FALSE (Megatron's
 *                 store_false: --disable-*, --no-*) to 0
 *       "METAVAR" the value's name in --help (NULL for TRUE/FALSE)
 *       "default shown"  --help's [default: ...] (NULL: the default value, formatted)
 *   ARG_ALIAS(field, TYPE, group, "flag", "METAVAR", "default shown", "help")
 *       one more flag for a field defined above (e.g. the negative form of a TRUE flag)
 *   ARG_FIELD(field, TYPE, default, CHECK, CONFIG)
 *       a field without a flag: derived by args_validate, saved and printed all the same
 *   ARG_OPTION(KIND, group, "flag", "METAVAR", "default shown", "help")
 *       a flag handled by its own code (--data-path: the data_paths arrays; --help)
 *   ARG_LATER("flag")
 *       a flag of a later feature: refused with "--flag: not supported yet"
 *
 * Adding a flag: one ARG_FLAG line here, and its rules (ranges, flags it needs or excludes)
 * in args_validate; a CONFIG of COPY needs the transformer_config field of the same name. */

/* The type table: (C type, array size, parsing kind, print/JSON type, unset prints None).
 * POS_NONE and FLOAT_NONE print Megatron's None for 0 and for a negative value. */
#ifndef MEGADLM_TRAINING_ARGUMENTS_DEF_TYPES
#define MEGADLM_TRAINING_ARGUMENTS_DEF_TYPES
#define ARGS_T_INT (int, , K_INT, T_INT, 0)
#define ARGS_T_POS (int, , K_POS, T_INT, 0)
#define ARGS_T_POS_NONE (int, , K_POS, T_INT, 1)
#define ARGS_T_NONNEG (int, , K_NONNEG, T_INT, 0)
#define ARGS_T_U64 (uint64_t, , K_U64, T_U64, 0)
#define ARGS_T_FLOAT (float, , K_FLOAT, T_FLOAT, 0)
#define ARGS_T_FLOAT_NONE (float, , K_FLOAT, T_FLOAT, 1)
#define ARGS_T_TRUE (int, , K_TRUE, T_BOOL, 0)
#define ARGS_T_FALSE (int, , K_FALSE, T_BOOL, 0)
#define ARGS_T_STR16 (char, [16], K_STR, T_STR, 0)
#define ARGS_T_STR32 (char, [32], K_STR, T_STR, 0)
#define ARGS_T_STR64 (char, [64], K_STR, T_STR, 0)
#define ARGS_T_STR512 (char, [512], K_STR, T_STR, 0)
#define ARGS_T_STR1024 (char, [1024], K_STR, T_STR, 0)
#define ARGS_T_BLEND1024 (char, [1024], K_DATA_STR, T_STR, 0) /* the words of --data-path */
#define ARGS_CALL_(m, args) m args
#define ARGS_CTYPE_(t, dim, kind, json, none) t
#define ARGS_DIM_(t, dim, kind, json, none) dim
#define ARGS_KIND_(t, dim, kind, json, none) kind
#define ARGS_JSON_(t, dim, kind, json, none) json
#define ARGS_NONE_(t, dim, kind, json, none) none
#define ARGS_CTYPE(T) ARGS_CALL_(ARGS_CTYPE_, ARGS_T_##T)
#define ARGS_DIM(T) ARGS_CALL_(ARGS_DIM_, ARGS_T_##T)
#define ARGS_KIND(T) ARGS_CALL_(ARGS_KIND_, ARGS_T_##T)
#define ARGS_JSON(T) ARGS_CALL_(ARGS_JSON_, ARGS_T_##T)
#define ARGS_NONE(T) ARGS_CALL_(ARGS_NONE_, ARGS_T_##T)
/* the CHECK and CONFIG columns: ARGS_IF_##CHECK(x) is x for MODEL, ARGS_COPY_##CONFIG(x) for
 * COPY */
#define ARGS_IF_MODEL(...) __VA_ARGS__
#define ARGS_IF_RUN(...)
#define ARGS_COPY_COPY(...) __VA_ARGS__
#define ARGS_COPY_CODE(...)
#define ARGS_COPY_NONE(...)
#endif

#ifndef ARG_FLAG
#define ARG_FLAG(field, type, deflt, check, config, group, flag, metavar, shown, help)
#endif
#ifndef ARG_ALIAS
#define ARG_ALIAS(field, type, group, flag, metavar, shown, help)
#endif
#ifndef ARG_FIELD
#define ARG_FIELD(field, type, deflt, check, config)
#endif
#ifndef ARG_OPTION
#define ARG_OPTION(kind, group, flag, metavar, shown, help)
#endif
#ifndef ARG_LATER
#define ARG_LATER(flag)
#endif

/* ---- model (Megatron: network size, regularization, initialization) ---- */
ARG_FLAG(num_layers, POS, 0, MODEL, COPY,
         G_MODEL, "num-layers", "N", "required", "Number of transformer layers.")
ARG_FLAG(hidden_size, POS, 0, MODEL, COPY,
         G_MODEL, "hidden-size", "N", "required", "Transformer hidden size.")
ARG_FLAG(ffn_hidden_size, POS, 0, MODEL, COPY,
         G_MODEL, "ffn-hidden-size", "N",
         "4*hidden-size; int(4*hidden-size*2/3/64)*64 with --swiglu",
         "Feed-forward network hidden size.") /* 0 = derive */
ARG_FLAG(num_attention_heads, POS, 0, MODEL, COPY,
         G_MODEL, "num-attention-heads", "N", "required", "Number of attention heads.")
ARG_FLAG(kv_channels, POS, 0, MODEL, COPY, /* 0 = derive */
         G_MODEL, "kv-channels", "N", "hidden-size / num-attention-heads",
         "Projection dimension of each attention head.")
ARG_FLAG(group_query_attention, TRUE, 0, RUN, NONE,
         G_MODEL, "group-query-attention", NULL, "off",
         "Use grouped-query attention (with --num-query-groups).")
ARG_FLAG(num_query_groups, POS, 0, MODEL, COPY, /* 0 = derive */
         G_MODEL, "num-query-groups", "N", "1 with --group-query-attention",
         "Number of key/value groups; needs --group-query-attention.")
ARG_FLAG(max_position_embeddings, POS, 0, MODEL, COPY,
         G_MODEL, "max-position-embeddings", "N", "required",
         "Maximum number of positions (size of the learned position table).")
ARG_FLAG(position_embedding_type, STR32, "learned_absolute", MODEL, CODE,
         G_MODEL, "position-embedding-type", "TYPE", NULL, "learned_absolute or rope.")
ARG_FLAG(rotary_base, FLOAT, 10000.0f, RUN, COPY,
         G_MODEL, "rotary-base", "X", NULL, "Base of the rotary embedding frequencies.")
ARG_FLAG(rotary_percent, FLOAT, 1.0f, RUN, CODE,
         G_MODEL, "rotary-percent", "X", NULL,
         "Fraction of each head's dimensions that get rotary embeddings, in (0, 1].")
ARG_FLAG(normalization, STR16, "LayerNorm", MODEL, CODE,
         G_MODEL, "normalization", "NORM", NULL, "LayerNorm or RMSNorm.")
ARG_FLAG(norm_epsilon, FLOAT, 1e-5f, RUN, COPY,
         G_MODEL, "norm-epsilon", "X", NULL, "Epsilon of LayerNorm / RMSNorm.")
ARG_FLAG(qk_layernorm, TRUE, 0, MODEL, COPY,
         G_MODEL, "qk-layernorm", NULL, "off",
         "Normalize queries and keys (per head) before attention.")
ARG_FLAG(swiglu, TRUE, 0, MODEL, COPY,
         G_MODEL, "swiglu", NULL, "off", "Gated linear unit with SiLU instead of GeLU in the MLP.")
ARG_FLAG(add_bias_linear, FALSE, 1, MODEL, COPY,
         G_MODEL, "disable-bias-linear", NULL, "biases on", "No biases in the linear layers.")
ARG_FLAG(bias_gelu_fusion, FALSE, 1, RUN, CODE, /* forced 0 without biases, with swiglu */
         G_MODEL, "no-bias-gelu-fusion", NULL, "fusion on",
         "Do not fuse the bias add into GeLU (off anyway without biases or with --swiglu).")
ARG_FLAG(openai_gelu, TRUE, 0, RUN, CODE,
         G_MODEL, "openai-gelu", NULL, "off", "OpenAI's tanh approximation of GeLU.")
ARG_FLAG(untie_embeddings_and_output_weights, TRUE, 0, MODEL, COPY,
         G_MODEL, "untie-embeddings-and-output-weights", NULL, "tied",
         "Separate output layer instead of the transposed input embedding.")
ARG_FLAG(make_vocab_size_divisible_by, POS, 128, RUN, NONE,
         G_MODEL, "make-vocab-size-divisible-by", "N", NULL,
         "Pad the vocabulary to a multiple of this (times the tensor-parallel size).")
ARG_FLAG(init_method_std, FLOAT, 0.02f, RUN, COPY,
         G_MODEL, "init-method-std", "X", NULL,
         "Standard deviation of the normal weight initialization.")
ARG_FLAG(hidden_dropout, FLOAT, 0.1f, RUN, COPY,
         G_MODEL, "hidden-dropout", "X", NULL,
         "Dropout probability on the hidden state, in [0, 1).")
ARG_FLAG(attention_dropout, FLOAT, 0.1f, RUN, COPY,
         G_MODEL, "attention-dropout", "X", NULL,
         "Dropout probability on the attention probabilities, in [0, 1).")

/* masked diffusion (MegaDLMs' pretrain_difflm.py) */
ARG_FLAG(model_running_mode, STR32, "vanilla", RUN, CODE,
         G_MODEL, "model-running-mode", "MODE", NULL,
         "vanilla (autoregressive) or difflm-noshift (masked diffusion, MegaDLMs).")
ARG_FLAG(mask_token, NONNEG, -1, RUN, NONE, /* -1: not given */
         G_MODEL, "mask-token", "ID", "none",
         "Token id that replaces masked positions (difflm-noshift).")
ARG_FLAG(attention_mask_type, STR16, "", RUN, CODE, /* "": derived by the mode */
         G_MODEL, "attention-mask-type", "TYPE", "causal; no_mask with difflm-noshift",
         "causal or no_mask (bidirectional).")
ARG_FLAG(difflm_varilen_prob, FLOAT, 0.01f, RUN, NONE,
         G_MODEL, "difflm-varilen-prob", "X", NULL,
         "difflm-noshift with no_mask: probability that a micro-batch is cut to a random length "
         "in [2, seq-length].")

/* ---- data and tokenizer ---- */
ARG_FLAG(train_data_path, BLEND1024, "", RUN, NONE,
         G_DATA, "train-data-path", "[W1] P1 [W2 P2 ...]", "none",
         "Datasets of the training split alone (instead of --data-path and --split).")
ARG_FLAG(valid_data_path, BLEND1024, "", RUN, NONE,
         G_DATA, "valid-data-path", "[W1] P1 [W2 P2 ...]", "none",
         "Datasets of the validation split alone.")
ARG_FLAG(test_data_path, BLEND1024, "", RUN, NONE,
         G_DATA, "test-data-path", "[W1] P1 [W2 P2 ...]", "none",
         "Datasets of the test split alone.")
ARG_OPTION(DATA,
           G_DATA, "data-path", "[W1] P1 [W2 P2 ...]", "none",
           "Indexed dataset prefix (PREFIX.bin/.idx), or weight/prefix pairs to blend.")
ARG_FLAG(mock_data, TRUE, 0, RUN, NONE,
         G_DATA, "mock-data", NULL, "off", "Train on generated data instead of --data-path.")
ARG_FLAG(split, STR64, "969, 30, 1", RUN, NONE,
         G_DATA, "split", "A,B,C", NULL, "Train, validation, test proportions of the documents.")
ARG_FLAG(seq_length, POS, 0, RUN, COPY,
         G_DATA, "seq-length", "N", "required", "Sequence length of each sample.")
ARG_FLAG(tokenizer_type, STR32, "", RUN, NONE,
         G_DATA, "tokenizer-type", "TYPE", "NullTokenizer with --mock-data, else required",
         "ByteLevel, NullTokenizer, GPT2BPETokenizer or HuggingFaceTokenizer.")
ARG_FLAG(vocab_size, POS, 0, RUN, NONE,
         G_DATA, "vocab-size", "V", "none",
         "NullTokenizer: ids are < V, end-of-document is V (vocabulary V+1).")
ARG_FLAG(vocab_file, STR1024, "", RUN, NONE, /* the files: made absolute by validation */
         G_DATA, "vocab-file", "FILE", "none",
         "GPT2BPETokenizer: the vocabulary (vocab.json, token -> id).")
ARG_FLAG(merge_file, STR1024, "", RUN, NONE,
         G_DATA, "merge-file", "FILE", "none", "GPT2BPETokenizer: the BPE merges (merges.txt).")
ARG_FLAG(tokenizer_model, STR1024, "", RUN, NONE,
         G_DATA, "tokenizer-model", "FILE", "none",
         "HuggingFaceTokenizer: a Hugging Face tokenizer.json (byte-level BPE).")
ARG_FIELD(padded_vocab_size, INT, 0, MODEL, COPY) /* the tokenizer's vocabulary, padded */
ARG_FLAG(eod_mask_loss, TRUE, 0, RUN, NONE,
         G_DATA, "eod-mask-loss", NULL, "off", "No loss on end-of-document tokens.")

/* ---- training ---- */
ARG_FLAG(micro_batch_size, POS, 0, RUN, NONE,
         G_TRAIN, "micro-batch-size", "N", "required",
         "Samples per forward/backward pass on one data-parallel rank.")
ARG_FLAG(global_batch_size, POS, 0, RUN, NONE, /* 0 = derive */
         G_TRAIN, "global-batch-size", "N", "micro-batch-size * data-parallel size",
         "Samples per optimizer step (gradient accumulation over micro-batches).")
ARG_FLAG(train_iters, POS, 0, RUN, NONE,
         G_TRAIN, "train-iters", "N", "required", "Number of optimizer steps.")
ARG_FLAG(seed, U64, 1234, RUN, NONE,
         G_TRAIN, "seed", "N", NULL, "Random seed.")
ARG_FLAG(optimizer, STR16, "adam", RUN, NONE,
         G_TRAIN, "optimizer", "NAME", NULL, "adam (AdamW with decoupled weight decay).")
ARG_FLAG(lr, FLOAT, NAN, RUN, NONE, /* NaN: not given (prints None) */
         G_TRAIN, "lr", "X", "required", "Peak learning rate.")
ARG_FLAG(min_lr, FLOAT, 0.0f, RUN, NONE,
         G_TRAIN, "min-lr", "X", NULL, "Learning rate floor of the decay.")
ARG_FLAG(lr_decay_style, STR16, "linear", RUN, NONE,
         G_TRAIN, "lr-decay-style", "STYLE", NULL, "constant, linear, cosine or WSD.")
ARG_FLAG(lr_decay_iters, POS, 0, RUN, NONE, /* 0 = derive */
         G_TRAIN, "lr-decay-iters", "N", "train-iters",
         "Iterations over which the learning rate decays.")
ARG_FLAG(lr_warmup_iters, NONNEG, 0, RUN, NONE,
         G_TRAIN, "lr-warmup-iters", "N", NULL, "Iterations of linear warmup.")
ARG_FLAG(lr_warmup_fraction, FLOAT_NONE, -1.0f, RUN, NONE,
         G_TRAIN, "lr-warmup-fraction", "X", "none",
         "Warmup as a fraction of --lr-decay-iters (instead of --lr-warmup-iters).")
ARG_FLAG(lr_wsd_decay_style, STR16, "exponential", RUN, NONE,
         G_TRAIN, "lr-wsd-decay-style", "STYLE", NULL,
         "Annealing of WSD: exponential, linear, cosine or minus_sqrt.")
ARG_FLAG(lr_wsd_decay_iters, POS, 0, RUN, NONE,
         G_TRAIN, "lr-wsd-decay-iters", "N", "required with --lr-decay-style WSD",
         "Iterations of the WSD annealing phase.")
ARG_FLAG(adam_beta1, FLOAT, 0.9f, RUN, NONE,
         G_TRAIN, "adam-beta1", "X", NULL, "Adam beta1, in [0, 1).")
ARG_FLAG(adam_beta2, FLOAT, 0.999f, RUN, NONE,
         G_TRAIN, "adam-beta2", "X", NULL, "Adam beta2, in [0, 1).")
ARG_FLAG(adam_eps, FLOAT, 1e-8f, RUN, NONE,
         G_TRAIN, "adam-eps", "X", NULL, "Adam epsilon.")
ARG_FLAG(weight_decay, FLOAT, 0.01f, RUN, NONE,
         G_TRAIN, "weight-decay", "X", NULL, "Decoupled weight decay coefficient.")
ARG_FLAG(clip_grad, FLOAT, 1.0f, RUN, NONE,
         G_TRAIN, "clip-grad", "X", NULL, "Clip the global gradient L2 norm (0: no clipping).")
ARG_FLAG(exit_interval, POS, 0, RUN, NONE, /* 0 = none (Megatron's None) */
         G_TRAIN, "exit-interval", "N", "none",
         "Stop after an iteration divisible by N (saving first when --save is given).")
ARG_FLAG(distributed_timeout_minutes, FLOAT, 10.0f, RUN, NONE,
         G_TRAIN, "distributed-timeout-minutes", "X", NULL,
         "A rank that makes no progress (a micro-batch step, a collective) for this long ends the "
         "job on every rank, naming itself.")
ARG_FLAG(check_for_nan_in_loss_and_grad, TRUE, 1, RUN, NONE,
         G_TRAIN, "check-for-nan-in-loss-and-grad", NULL, "on",
         "Stop, on every rank, when the loss or the reduced gradient norm of an iteration is NaN "
         "or infinite, naming the iteration and the first rank that saw it.")
ARG_ALIAS(check_for_nan_in_loss_and_grad, FALSE,
          G_TRAIN, "no-check-for-nan-in-loss-and-grad", NULL, "check on",
          "Skip such an iteration instead (parameters and optimizer state untouched), counted in "
          "the log's skipped and nan iterations.")

/* ---- logging, evaluation, checkpoints ---- */
ARG_FLAG(log_interval, POS, 100, RUN, NONE,
         G_LOG, "log-interval", "N", NULL, "Iterations between log lines.")
ARG_FLAG(eval_interval, POS, 1000, RUN, NONE,
         G_LOG, "eval-interval", "N", NULL, "Iterations between validation runs.")
ARG_FLAG(eval_iters, NONNEG, 100, RUN, NONE,
         G_LOG, "eval-iters", "N", NULL, "Batches per validation run (0: no evaluation).")
ARG_FLAG(log_memory, TRUE, 0, RUN, NONE,
         G_LOG, "log-memory", NULL, "off", "Log allocator memory use (megadlm's own flag).")
ARG_FLAG(save, STR512, "", RUN, NONE,
         G_LOG, "save", "DIR", "none", "Directory to save checkpoints to.")
ARG_FLAG(save_interval, POS, 0, RUN, NONE,
         G_LOG, "save-interval", "N", "at the end only",
         "Iterations between checkpoints; needs --save.")
ARG_FLAG(load, STR512, "", RUN, NONE,
         G_LOG, "load", "DIR", "none", "Directory to resume from.")

/* ---- activation recomputation (Megatron's names and rules) ---- */
ARG_FLAG(recompute_activations, TRUE, 0, RUN, NONE, /* folded into the granularity */
         G_RECOMPUTE, "recompute-activations", NULL, "off",
         "Selective recomputation of the core attention (= --recompute-granularity selective).")
ARG_FLAG(recompute_granularity, STR16, "", RUN, CODE,
         G_RECOMPUTE, "recompute-granularity", "full|selective", "none",
         "full: keep only each checkpointed chunk's input and re-run its forward in backward; "
         "selective: keep Q, K, V and re-run the core attention.")
ARG_FLAG(recompute_method, STR16, "", RUN, CODE,
         G_RECOMPUTE, "recompute-method", "uniform|block", "none",
         "full only. uniform: layers in chunks of --recompute-num-layers, each chunk "
         "checkpointed; block: only the first --recompute-num-layers layers checkpointed.")
ARG_FLAG(recompute_num_layers, POS, 0, RUN, COPY,
         G_RECOMPUTE, "recompute-num-layers", "N", "none",
         "full only: layers per chunk (uniform) or layers checkpointed (block).")
ARG_FLAG(num_microbatches_with_partial_activation_checkpoints, NONNEG, -1, RUN, NONE, /* None */
         G_RECOMPUTE, "num-microbatches-with-partial-activation-checkpoints", "K", "none",
         "With full recompute: of the micro-batches a pipeline stage holds at once (Megatron's "
         "rule: window of warm-up + 1), K keep all activations and the rest are checkpointed.")
ARG_FLAG(distribute_saved_activations, TRUE, 0, RUN, COPY,
         G_RECOMPUTE, "distribute-saved-activations", NULL, "off",
         "Split checkpointed inputs across tensor-parallel ranks (needs tensor parallelism).")
ARG_FLAG(enable_cuda_graph, TRUE, 0, RUN, NONE,
         G_RECOMPUTE, "enable-cuda-graph", NULL, "off",
         "Refused: there are no CUDA graphs on CPUs.")

/* ---- parallelism (Megatron's rules in args_validate; `train` and `megadlm memory` accept
 *      the same layouts) ---- */
ARG_FLAG(tensor_model_parallel_size, POS, 1, RUN, CODE,
         G_PAR, "tensor-model-parallel-size", "N", NULL,
         "Tensor parallelism: heads, query groups, ffn and vocabulary split across N ranks "
         "(train: run N ranks under mpirun).")
ARG_FLAG(pipeline_model_parallel_size, POS, 1, RUN, CODE,
         G_PAR, "pipeline-model-parallel-size", "N", NULL,
         "Pipeline parallelism: the layers split into N stages (1F1B schedule; train: run N ranks "
         "under mpirun).")
ARG_FLAG(sequence_parallel, TRUE, 0, RUN, CODE, /* turned off at TP 1 */
         G_PAR, "sequence-parallel", NULL, "off",
         "Norms, dropouts and residuals split along the sequence across the tensor-parallel ranks "
         "(off at tensor-parallel size 1, as Megatron).")
ARG_FLAG(tp_comm_overlap, TRUE, 0, RUN, CODE,
         G_PAR, "tp-comm-overlap", NULL, "off",
         "Overlap the sequence-parallel all-gathers and reduce-scatters with the GEMMs that need "
         "them (needs --sequence-parallel and --tensor-model-parallel-size > 1).")
ARG_FLAG(tp_comm_overlap_ag, FALSE, 1, RUN, COPY,
         G_PAR, "disable-tp-comm-overlap-ag", NULL, "overlap on",
         "--tp-comm-overlap: all-gathers (linear_qkv/linear_fc1 inputs, linear_proj/linear_fc2 "
         "output gradients) not overlapped.")
ARG_FLAG(tp_comm_overlap_rs, FALSE, 1, RUN, COPY,
         G_PAR, "disable-tp-comm-overlap-rs", NULL, "overlap on",
         "--tp-comm-overlap: reduce-scatters of linear_proj/linear_fc2 outputs not overlapped.")
ARG_FLAG(tp_comm_overlap_rs_dgrad, TRUE, 0, RUN, COPY,
         G_PAR, "tp-comm-overlap-rs-dgrad", NULL, "off",
         "--tp-comm-overlap: the input-gradient reduce-scatter of linear_qkv/linear_fc1 pipelined "
         "with their dgrad GEMM (replaces the bulk overlaps).")
ARG_FLAG(tp_comm_bulk_dgrad, FALSE, 1, RUN, COPY,
         G_PAR, "disable-tp-comm-bulk-dgrad", NULL, "overlap on",
         "--tp-comm-overlap: the input all-gather for wgrad not run under the dgrad GEMM.")
ARG_FLAG(tp_comm_bulk_wgrad, FALSE, 1, RUN, COPY,
         G_PAR, "disable-tp-comm-bulk-wgrad", NULL, "overlap on",
         "--tp-comm-overlap: the dgrad reduce-scatter not run under the wgrad GEMM.")
ARG_FLAG(tp_comm_overlap_disable_qkv, TRUE, 0, RUN, COPY,
         G_PAR, "tp-comm-overlap-disable-qkv", NULL, "off",
         "--tp-comm-overlap: no all-gather or rs-dgrad overlap for linear_qkv.")
ARG_FLAG(tp_comm_overlap_disable_fc1, TRUE, 0, RUN, COPY,
         G_PAR, "tp-comm-overlap-disable-fc1", NULL, "off",
         "--tp-comm-overlap: no all-gather or rs-dgrad overlap for linear_fc1.")
ARG_FLAG(tp_comm_overlap_num_splits, POS, 0, RUN, CODE, /* 0 = unset: args_sp_pieces */
         G_PAR, "tp-comm-overlap-num-splits", "N", ARGS_STR(ARGS_DEFAULT_SP_PIECES) " with overlap",
         "Sequence parallelism (ours): pieces per sequence shard; --tp-comm-overlap sends them "
         "round the ring, each piece's GEMM running while the next travels. Without it, given: "
         "the GEMMs run per piece too (the overlapped run's bits); not given: one GEMM.")
ARG_FLAG(tp_comm_overlap_progress, STR16, "", RUN, NONE,
         G_PAR, "tp-comm-overlap-progress", "MODE", "thread",
         "--tp-comm-overlap (ours): who drives MPI during GEMMs: test (the computing thread, "
         "between GEMM tiles) or thread (a communication thread).")
ARG_FLAG(use_distributed_optimizer, TRUE, 0, RUN, NONE,
         G_PAR, "use-distributed-optimizer", NULL, "off",
         "Optimizer state sharded across data-parallel ranks (reduce-scatter of gradients, "
         "all-gather of parameters).")
ARG_FLAG(overlap_grad_reduce, TRUE, 0, RUN, NONE,
         G_PAR, "overlap-grad-reduce", NULL, "off",
         "Start each gradient bucket's data-parallel reduction during the last micro-batch's "
         "backward, as soon as the bucket is complete.")
ARG_FLAG(overlap_param_gather, TRUE, 0, RUN, NONE,
         G_PAR, "overlap-param-gather", NULL, "off",
         "Distributed optimizer: overlap the parameter all-gather with the next forward (needs "
         "--use-distributed-optimizer and --overlap-grad-reduce).")
ARG_FLAG(ddp_bucket_size, POS_NONE, 0, RUN, NONE,
         G_PAR, "ddp-bucket-size", "N",
         "max(40000000, 1000000 x data-parallel size) with --overlap-grad-reduce",
         "Parameters per gradient bucket (without --overlap-grad-reduce: one bucket, as Megatron).")
ARG_FLAG(accumulate_allreduce_grads_in_fp32, TRUE, 0, RUN, NONE,
         G_PAR, "accumulate-allreduce-grads-in-fp32", NULL, "off",
         "Accepted: gradients are accumulated and reduced in fp32 always.")
ARG_FLAG(num_layers_per_virtual_pipeline_stage, POS_NONE, 0, RUN, NONE,
         G_PAR, "num-layers-per-virtual-pipeline-stage", "N", "none",
         "Interleaved pipeline schedule: layers per virtual stage (model chunk); the rank's "
         "(--num-layers / PP) layers make v = (layers / PP) / N chunks.")
ARG_FLAG(virtual_pipeline_model_parallel_size, POS_NONE, 0, RUN, CODE, /* derived; 1 -> 0 */
         G_PAR, "virtual-pipeline-model-parallel-size", "V", "none",
         "Interleaved pipeline schedule: model chunks per pipeline rank (v; --num-layers "
         "divisible by PP x v, micro-batches by PP).")
ARG_FLAG(world_size, POS, 0, RUN, NONE,
         G_PAR, "world-size", "N", "TP x PP",
         "`megadlm memory` only: the job's number of ranks (train takes it from mpirun).")
         /* train: the launcher's world; 0 = not given: TP x PP (DP 1) */
ARG_FIELD(data_parallel_size, INT, 1, RUN, NONE) /* world / (TP x PP) */
ARG_OPTION(HELP,
           G_COUNT, "help", NULL, NULL, "Print this help and exit.")

/* ---- features of later releases: refused, never silently accepted ---- */
ARG_LATER("bf16") ARG_LATER("fp16") ARG_LATER("tp-comm-overlap-cfg")
ARG_LATER("context-parallel-size") ARG_LATER("expert-model-parallel-size")
ARG_LATER("num-experts") ARG_LATER("use-flash-attn") ARG_LATER("fp8-format")

#undef ARG_FLAG
#undef ARG_ALIAS
#undef ARG_FIELD
#undef ARG_OPTION
#undef ARG_LATER
