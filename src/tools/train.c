/* `megadlm train`: Megatron's pretrain_gpt.py. The GPT family's parts of a training job (the
 * model provider, the datasets, the batch of a micro-batch and its forward step, with MegaDLMs'
 * masked-diffusion batch for --model-running-mode difflm-noshift), handed to the
 * model-agnostic loop of training/training.c, and the command's entry point. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/datasets/gpt_data.h"
#include "core/datasets/packing.h"
#include "core/models/gpt_model.h"
#include "core/parallel_state.h"
#include "core/tensor/memory.h"
#include "core/util/alloc.h"
#include "core/util/die.h"
#include "tools/tools.h"
#include "training/arguments.h"
#include "training/checkpoint_policy.h"
#include "training/difflm.h"
#include "training/sft.h"
#include "training/training.h"
#include "training/training_log.h"

/* The buffers of one micro-batch (the model's positions: a masked-diffusion batch is padded up
 * to them, difflm.h). */
typedef struct {
    int32_t *sample;   /* [seq_length + 1] */
    float *lm;         /* [seq_length] one sequence's loss mask (difflm) */
    int32_t *tokens;   /* [micro_batch_size * the model's seq_length] */
    int32_t *labels;
    float *loss_mask;
    int32_t *mask;     /* [seq_length + 1] the sample's loss mask (--sft), else NULL */
    int eod;
    int difflm;        /* --model-running-mode difflm-noshift */
    /* packed documents (core/datasets/packing.h), [micro_batch_size * the model's seq_length]
     * each: learned-position rows (--reset-position-ids), document bounds (attention reset) */
    int32_t *position_ids, *doc_start, *doc_end;
    int reset_positions, reset_attention;
} gpt_batch_buffers;

static void *batch_create(const megadlm_args *a, const tokenizer *tok, const gpt_model *m) {
    gpt_batch_buffers *bb = xcalloc(1, sizeof *bb, "batch buffers");
    size_t N = (size_t)a->micro_batch_size * m->cfg.seq_length;
    bb->sample = mem_alloc(MEM_OTHER, (a->seq_length + 1) * sizeof(int32_t), "sample");
    bb->tokens = mem_alloc(MEM_OTHER, N * sizeof(int32_t), "batch tokens");
    bb->labels = mem_alloc(MEM_OTHER, N * sizeof(int32_t), "batch labels");
    bb->loss_mask = mem_alloc_floats(MEM_OTHER, N, "batch loss mask");
    bb->lm = mem_alloc_floats(MEM_OTHER, a->seq_length, "sequence loss mask");
    if (a->sft) bb->mask = mem_alloc(MEM_OTHER, (a->seq_length + 1) * sizeof(int32_t), "mask");
    bb->eod = tokenizer_eod(tok);
    bb->difflm = ARGS_CHOICE(a, model_running_mode) == ARGS_MODE_DIFFLM_NOSHIFT;
    bb->reset_positions = a->reset_position_ids;
    /* (a masked-diffusion batch packs only with both flags: arguments.c refuses the mask
     * alone, as MegaDLMs packs only with both) */
    bb->reset_attention = a->reset_attention_mask;
    if (bb->reset_positions || bb->reset_attention) {
        bb->position_ids = mem_alloc(MEM_OTHER, N * sizeof(int32_t), "batch position ids");
        bb->doc_start = mem_alloc(MEM_OTHER, N * sizeof(int32_t), "batch document starts");
        bb->doc_end = mem_alloc(MEM_OTHER, N * sizeof(int32_t), "batch document ends");
    }
    return bb;
}

static void batch_free(void *batch) {
    gpt_batch_buffers *bb = batch;
    mem_free_all(bb->sample, bb->tokens, bb->labels, bb->loss_mask, bb->lm, bb->mask);
    mem_free_all(bb->position_ids, bb->doc_start, bb->doc_end);
    free(bb);
}

/* Reads sample `index` of the step's split into bb->sample. An id outside the vocabulary ends
 * every rank (only the rank that reads it may see it, e.g. one data-parallel replica). */
static void read_sample(const forward_step_args *s, uint64_t index) {
    gpt_batch_buffers *bb = s->batch;
    char err[1024];
    if ((bb->mask ? gpt_data_get_sft(s->data, s->split, index, bb->sample, bb->mask, err,
                                     sizeof err)
                  : gpt_data_get(s->data, s->split, index, bb->sample, err, sizeof err)) != 0)
        die(1, "%s (was it preprocessed with another tokenizer? check --tokenizer-type, "
               "--vocab-size and the tokenizer files)", err);
}

/* Fills the micro-batch whose first sample is global sample s->first of the split:
 * tokens = sample[:-1], labels = sample[1:], loss mask 1 (0 on eod tokens with --eod-mask-loss,
 * as Megatron's get_ltor_masks_and_position_ids; --sft: the response labels, training/sft.h).
 * Returns the loss's denominator: 0 (the mask's sum), or with --sft that sum, at least 1. */
static float get_batch(const forward_step_args *s) {
    const megadlm_args *a = s->a;
    gpt_batch_buffers *bb = s->batch;
    int T = a->seq_length, eod = bb->eod;
    double response = 0.0;
    for (int b = 0; b < a->micro_batch_size; b++) {
        read_sample(s, s->first + b);
        if (bb->mask) response += sft_ar_loss_mask(bb->mask, T, bb->loss_mask + b * T);
        for (int t = 0; t < T; t++) {
            int i = b * T + t;
            bb->tokens[i] = bb->sample[t];
            bb->labels[i] = bb->sample[t + 1];
            if (!bb->mask)
                bb->loss_mask[i] = (a->eod_mask_loss && bb->sample[t] == eod) ? 0.0f : 1.0f;
        }
        if (bb->position_ids)
            packing_ltor(bb->tokens + (size_t)b * T, T, eod, bb->reset_positions,
                         s->model->cfg.position_offset, bb->position_ids + (size_t)b * T,
                         bb->doc_start + (size_t)b * T, bb->doc_end + (size_t)b * T);
    }
    /* a micro-batch of prompts only has no response label: loss 0, not 0 / 0 */
    return bb->mask ? (float)(response > 1.0 ? response : 1.0) : 0.0f;
}

/* The packed-document fields of a batch (NULL where the flags ask for none). */
static void batch_docs(const gpt_batch_buffers *bb, gpt_batch *b) {
    b->position_ids = bb->reset_positions ? bb->position_ids : NULL;
    b->doc_start = bb->reset_attention ? bb->doc_start : NULL;
    b->doc_end = bb->reset_attention ? bb->doc_end : NULL;
}

/* The masked-diffusion batch (training/difflm.h): L = R - 1 unshifted tokens per sequence
 * with masked positions replaced, labels, weights m/p * loss mask, in rows of Lp >= L tokens
 * (positions L .. Lp-1 padding: --mask-token, weight 0); returns the loss's denominator:
 * sum(loss mask), or with --sft the micro-batch size (LLaDA's SFT objective, training/sft.h). */
static float get_difflm_batch(const forward_step_args *s, int L, int Lp) {
    const megadlm_args *a = s->a;
    gpt_batch_buffers *bb = s->batch;
    int eod = bb->eod;
    double denominator = 0.0;
    for (int b = 0; b < a->micro_batch_size; b++) {
        read_sample(s, s->first + b);
        for (int j = 0; j < L; j++) { /* Megatron's loss mask of label j (token j is eod) */
            bb->lm[j] = (a->eod_mask_loss && bb->sample[j] == eod) ? 0.0f : 1.0f;
            denominator += bb->lm[j];
        }
        size_t row = (size_t)b * Lp;
        if (bb->mask) /* LLaDA's SFT (training/sft.h) */
            sft_difflm_mask_sequence(bb->sample, bb->mask, L, a->mask_token, s->seed,
                                     s->first + b, bb->tokens + row, bb->labels + row,
                                     bb->loss_mask + row);
        else
            difflm_mask_sequence(bb->sample, bb->lm, L, a->mask_token, s->seed, s->first + b,
                                 bb->tokens + row, bb->labels + row, bb->loss_mask + row);
        if (bb->position_ids)
            packing_difflm(bb->sample, L, Lp, eod, bb->reset_positions, bb->position_ids + row,
                           bb->doc_start + row, bb->doc_end + row);
        for (int j = L; j < Lp; j++) {
            bb->tokens[row + j] = bb->labels[row + j] = a->mask_token;
            bb->loss_mask[row + j] = 0.0f;
        }
    }
    /* LLaDA's SFT: each sequence is normalised by its answer length, then averaged */
    return bb->mask ? (float)a->micro_batch_size : (float)denominator;
}

/* Ranks a micro-batch's tokens are split across outside the tensor-parallel regions: the
 * tensor-parallel size under sequence parallelism, else 1. */
static int sp_ranks(const gpt_model *m) {
    const transformer_config *c = &m->cfg;
    return tc_sp(c) ? tc_tp(c) : 1;
}

/* Megatron's forward_step (pretrain_gpt.py): the batch, then the model's forward and loss. */
static float forward_step(const forward_step_args *s, activation_store *store) {
    const megadlm_args *a = s->a;
    gpt_batch_buffers *bb = s->batch;
    gpt_step step = {.seed = s->seed,
                     .iteration = s->training ? s->iteration : 0,
                     .microbatch = s->training ? s->global_microbatch : 0,
                     .training = s->training};
    if (bb->difflm) {
        /* variable length: training only, with bidirectional attention (as MegaDLMs) */
        float varilen = s->training && !s->model->cfg.causal && !a->sft ? a->difflm_varilen_prob
                                                                         : 0.0f;
        int L = difflm_length(s->seed, s->iteration, s->global_microbatch, a->seq_length,
                              varilen) - 1;
        int Lp = difflm_padded_length_cp(L, a->micro_batch_size, sp_ranks(s->model),
                                         a->context_parallel_size);
        gpt_batch b = {.tokens = bb->tokens, .labels = bb->labels, .loss_mask = bb->loss_mask,
                       .denominator = get_difflm_batch(s, L, Lp),
                       .B = a->micro_batch_size, .T = Lp, .T_valid = L,
                       .loss_rows_only = !a->difflm_full_logits,
                       .grad_seed = s->grad_seed};
        batch_docs(bb, &b);
        return gpt_model_forward(s->model, store, &b, step);
    }
    float denominator = get_batch(s);
    gpt_batch b = {.tokens = bb->tokens, .labels = bb->labels, .loss_mask = bb->loss_mask,
                   .denominator = denominator, .B = a->micro_batch_size, .T = a->seq_length};
    batch_docs(bb, &b);
    return gpt_model_forward(s->model, store, &b, step);
}

/* Megatron's model_provider (pretrain_gpt.py): the GPT model of the flags, for training. */
static gpt_model *model_provider(const megadlm_args *a, const transformer_config *cfg) {
    print_rank_last("building GPT model ...\n");
    gpt_model *m = gpt_model_create(cfg, a->micro_batch_size,
                                    a->use_distributed_optimizer
                                        ? GPT_MODEL_TRAINING_SHARDED_OPTIMIZER
                                        : GPT_MODEL_TRAINING);
    /* masked diffusion: the head runs its loss-weighted rows in chunks (stores made later hold
     * one chunk of logits) */
    m->logits_in_chunks = difflm_logits_in_chunks(a);
    return m;
}

/* A split holds fewer samples than the run reads only when it is a blend without weights
 * (one epoch of each dataset): Megatron's single-pass data loader would stop with
 * StopIteration when it runs out, mid-run; say so before training instead. */
static int check_split_size(const char *flag, const gpt_data *d, int s, uint64_t wanted) {
    static const char *const NAMES[3] = {"train", "valid", "test"};
    static const char *const WHY[3] = {
        "--train-iters x --global-batch-size, or --train-samples",
        "(--train-iters / --eval-interval + 1) x --eval-iters x --global-batch-size",
        "--eval-iters x --global-batch-size"};
    uint64_t have = gpt_data_num_samples(d, s);
    if (have == 0 || have >= wanted) return 0; /* 0: a split --split leaves out */
    fprintf(stderr,
            "error: %s: the %s split holds %llu samples (no weights: one epoch of each "
            "dataset, as Megatron) but the run reads %llu (%s); Megatron's data loader would "
            "run out mid-run. Give weights (W1 P1 W2 P2 ...) to draw more epochs, or read "
            "fewer samples\n",
            flag, NAMES[s], (unsigned long long)have, (unsigned long long)wanted, WHY[s]);
    return -1;
}

/* A failed dataset build as the user hears it: the flag that gave the input at fault (the
 * data's messages describe the input, not the flag), then the message; paths_flag: the flag
 * that named the datasets; split_flag: the one that gave the split weights (NULL: the weights
 * are this provider's, and a split its sequences cannot fill is the datasets' fault). */
static void report_data_error(gpt_data_fault fault, const char *paths_flag,
                              const char *split_flag, const char *msg) {
    const char *flag = paths_flag, *hint = "";
    switch (fault) {
    case GPT_DATA_FAULT_SPLIT: flag = split_flag ? split_flag : paths_flag; break;
    case GPT_DATA_FAULT_SAMPLES: hint = " (lower --train-iters or --global-batch-size)"; break;
    case GPT_DATA_FAULT_SEQ_LENGTH: flag = "--seq-length"; break;
    case GPT_DATA_FAULT_SEED: flag = "--seed"; break;
    case GPT_DATA_FAULT_MOCK: flag = "--mock-data"; break;
    case GPT_DATA_FAULT_CACHE: flag = "--data-cache-path"; break;
    default: break;
    }
    fprintf(stderr, "error: %s: %s%s\n", flag, msg, hint);
}

/* A cached index of --data-cache-path that cannot be read back: rebuilt, and said so. */
static void data_cache_stale(void *ctx, const char *why) {
    (void)ctx;
    fprintf(stderr, "warning: --data-cache-path: %s; rebuilding the indices\n", why);
}

/* --train-data-path / --valid-data-path / --test-data-path: each split from its own datasets,
 * all of whose documents go to that split (Megatron's blend_per_split). */
static int build_split_data(const megadlm_args *a, const gpt_data_config *dc,
                            gpt_data *data[3]) {
    const char *flags[3] = {"--train-data-path", "--valid-data-path", "--test-data-path"};
    const char *specs[3] = {a->train_data_path, a->valid_data_path, a->test_data_path};
    const char *all_to[3] = {"1,0,0", "0,1,0", "0,0,1"};
    char err[1024];
    for (int k = 0; k < 3; k++) {
        gpt_data_config c = *dc;
        char *paths[ARGS_MAX_DATA_PATHS];
        double w[ARGS_MAX_DATA_PATHS];
        int count = 0, weighted = 0;
        const char *spec = specs[k][0] ? specs[k] : a->train_data_path;
        if (args_parse_blend(flags[k], spec, paths, w, &count, &weighted, err, sizeof(err))) {
            fprintf(stderr, "error: %s\n", err);
            return -1;
        }
        c.num_paths = count;
        c.data_paths = (const char **)paths;
        /* one prefix is one GPTDataset here even with a weight (Megatron's blend_per_split
         * branch tests len(prefixes) == 1 alone; --data-path's tests the weights too) */
        c.weights = weighted && count > 1 ? w : NULL;
        c.split = all_to[k];
        for (int j = 0; j < 3; j++)
            if (j != k) c.num_samples[j] = 0;
        if (!specs[k][0]) c.num_samples[k] = 0; /* no such split: nothing to build */
        gpt_data_fault fault;
        data[k] = gpt_data_build(&c, &fault, err, sizeof(err));
        for (int i = 0; i < count; i++) free(paths[i]);
        if (!data[k]) {
            report_data_error(fault, flags[k], NULL, err);
            return -1;
        }
        if (check_split_size(flags[k], data[k], k, c.num_samples[k]) != 0) return -1;
    }
    return 0;
}

/* Megatron's train_valid_test_datasets_provider (pretrain_gpt.py): GPT datasets of the sizes
 * pretrain asks for, from --data-path split by --split, or from the per-split paths. */
static int datasets_provider(const megadlm_args *a, const tokenizer *tok,
                             const uint64_t num_samples[3], gpt_data *data[3]) {
    gpt_data_config dc = {
        .mock = a->mock_data,
        .num_paths = a->num_data_paths,
        .data_paths = (const char **)a->data_paths,
        .weights = a->data_weighted ? a->data_weights : NULL,
        .split = a->split,
        .seq_length = a->seq_length,
        .seed = a->seed,
        .vocab_size = tokenizer_vocab_size(tok),
        .eod = tokenizer_eod(tok),
        .num_samples = {num_samples[0], num_samples[1], num_samples[2]},
        .cache_dir = a->data_cache_path,
        .log = print_rank_last_on() ? stdout : NULL,
        .cache_stale = data_cache_stale,
        .sft = a->sft,
        .sft_padded = ARGS_CHOICE(a, sft_padding) != ARGS_SFT_PACKED,
        .sft_pad_mask = ARGS_CHOICE(a, sft_padding) == ARGS_SFT_EOS,
    };
    if (a->data_cache_path[0] && a->mock_data)
        print_rank_last(" > --data-cache-path %s: mock data has no indices to cache\n",
                        a->data_cache_path);
    char err[1024];
    if (a->train_data_path[0]) return build_split_data(a, &dc, data);
    gpt_data_fault fault;
    gpt_data *d = gpt_data_build(&dc, &fault, err, sizeof(err)); /* one source split by --split */
    if (!d) {
        report_data_error(fault, "--data-path", "--split", err);
        return -1;
    }
    data[0] = data[1] = data[2] = d;
    for (int s = 0; s < 3; s++)
        if (check_split_size("--data-path", d, s, dc.num_samples[s]) != 0) return -1;
    return 0;
}

int train_main(int argc, char **argv) {
    /* Every line leaves at once, as Megatron's print_rank_0/print_rank_last (flush=True): under
     * mpirun each rank's stdout is a pipe, and a block-buffered rank would hand the launcher
     * 4 KiB pieces that cut lines in two and interleave with other ranks' lines. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    megadlm_args a;
    args_defaults(&a);
    char err[1024];
    int rc = args_parse(&a, argc, argv, err, sizeof(err));
    if (rc == 1) return 0;
    if (rc == 0) a.world_size = parallel_world_size(); /* train's world is mpirun's */
    /* Megatron's load_args_from_checkpoint comes before validate_args */
    if (rc == 0 && a.use_checkpoint_args && a.load[0] &&
        ckpt_apply_checkpoint_args(&a, parallel_world_rank() == 0, err, sizeof err) != 0)
        rc = -1;
    /* Every rank validates the same arguments, so every rank fails together, each saying why,
     * and all exit cleanly (no rank is left waiting in a collective). */
    if (rc < 0 || args_validate(&a, err, sizeof(err)) != 0 ||
        (a.use_checkpoint_args && a.load[0] &&
         ckpt_check_checkpoint_args_fit(&a, err, sizeof err) != 0) ||
        parallel_setup_groups(a.tensor_model_parallel_size, a.pipeline_model_parallel_size,
                              a.context_parallel_size, err,
                              sizeof(err)) != 0 ||
        (a.num_experts > 0 &&
         parallel_setup_expert_groups(a.expert_model_parallel_size,
                                      a.expert_tensor_parallel_size, err, sizeof err) != 0)) {
        if (parallel_world_size() > 1)
            fprintf(stderr, "[rank %d] error: %s\n", parallel_world_rank(), err);
        else
            fprintf(stderr, "error: %s\n", err);
        args_free(&a);
        return 2;
    }
    pretrain_providers gpt = {.model_provider = model_provider,
                              .datasets_provider = datasets_provider,
                              .batch_create = batch_create,
                              .batch_free = batch_free,
                              .forward_step = forward_step};
    int status = pretrain(&a, &gpt);
    args_free(&a);
    return status;
}
