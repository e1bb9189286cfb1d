#include "tools/checkpoint_model.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "training/checkpoint_files.h"
#include "training/model_provider.h"
#include "training/theoretical_memory.h"

/* The tokenizer file flags in place of the checkpoint's paths. */
static void override_files(megadlm_args *a, const tokenizer_options *files) {
    if (!files) return;
    if (files->vocab_file) snprintf(a->vocab_file, sizeof a->vocab_file, "%s", files->vocab_file);
    if (files->merge_file) snprintf(a->merge_file, sizeof a->merge_file, "%s", files->merge_file);
    if (files->tokenizer_model)
        snprintf(a->tokenizer_model, sizeof a->tokenizer_model, "%s", files->tokenizer_model);
}

/* The checkpoint's arguments, validated for one fp32 process: 0, or 1 after the error. */
static int load_args(checkpoint_model *cm, const char *dir, const tokenizer_options *files) {
    char err[1024];
    megadlm_args *a = &cm->a;
    int rc = ckpt_read_latest(dir, &cm->iteration, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "error: --load %s: %s\n", dir,
                rc == 1 ? "no latest_checkpointed_iteration.txt (not a checkpoint directory)" : err);
        return 1;
    }
    ckpt_state st = {0};
    args_defaults(a);
    if (ckpt_load_state(dir, cm->iteration, &st, err, sizeof err) != 0 ||
        args_from_json(a, st.args, err, sizeof err) != 0) {
        fprintf(stderr, "error: --load %s: %s\n", dir, err);
        ckpt_state_free(&st);
        return 1;
    }
    ckpt_state_free(&st);
    if (args_check_sizes(a, err, sizeof err) != 0) {
        fprintf(stderr, "error: --load %s: state.json of iteration %d: %s\n", dir,
                cm->iteration, err);
        args_free(a);
        return 1;
    }
    args_fp32(a);
    override_files(a, files);
    int saved_padded = a->padded_vocab_size;
    args_validity valid = args_validate_kind(a, err, sizeof err);
    args_free(a); /* the saved data paths: only validation reads them */
    if (valid != ARGS_VALID) {
        fprintf(stderr, "error: --load %s: %s%s\n", dir, err,
                valid == ARGS_INVALID_TOKENIZER_FILE
                    ? " (the checkpoint's tokenizer file: give --vocab-file, --merge-file or "
                      "--tokenizer-model to use another copy)"
                    : "");
        return 1;
    }
    if (saved_padded && a->padded_vocab_size != saved_padded) {
        fprintf(stderr, "error: --load %s: the tokenizer gives a padded vocabulary of %d, the "
                        "checkpoint was trained with %d\n", dir, a->padded_vocab_size,
                saved_padded);
        return 1;
    }
    return 0;
}

int checkpoint_model_open(checkpoint_model *cm, const char *dir, const tokenizer_options *files) {
    memset(cm, 0, sizeof *cm);
    if (load_args(cm, dir, files) != 0) return 1;
    megadlm_args *a = &cm->a;
    char err[1024];
    tokenizer_options topts = {.type = a->tokenizer_type, .vocab_size = a->vocab_size,
                               .vocab_file = a->vocab_file, .merge_file = a->merge_file,
                               .tokenizer_model = a->tokenizer_model};
    cm->tok = tokenizer_create_opts(&topts, err, sizeof err);
    if (!cm->tok) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    cm->diffusion = ARGS_CHOICE(a, model_running_mode) == ARGS_MODE_DIFFLM_NOSHIFT;
    return 0;
}

int checkpoint_model_build(checkpoint_model *cm, const char *dir, int max_batch) {
    megadlm_args *a = &cm->a;
    char err[1024];
    /* one process: whatever layout the checkpoint was trained with, its tensors are whole */
    a->tensor_model_parallel_size = a->pipeline_model_parallel_size = 1;
    a->context_parallel_size = 1;
    a->sequence_parallel = a->distribute_saved_activations = 0;
    char model_path[PATH_MAX + 64];
    snprintf(model_path, sizeof model_path, "%s/iter_%07d/model.safetensors", dir, cm->iteration);
    if (ckpt_check_file_holds(model_path, theoretical_megadlm_parameter_count(a), err,
                              sizeof err) != 0) {
        fprintf(stderr, "error: --load %s: %s\n", dir, err);
        checkpoint_model_free(cm);
        return 1;
    }
    transformer_config cfg = model_config_from_args(a);
    cm->model = gpt_model_create(&cfg, max_batch, GPT_MODEL_FORWARD_ONLY);
    cm->store = activation_store_create(cm->model, 1);
    if (ckpt_load_tensors(dir, cm->iteration, &cm->model->params, 0, err, sizeof err) != 0 ||
        ckpt_check_finite(&cm->model->params, 0, err, sizeof err) != 0) {
        fprintf(stderr, "error: --load %s: %s\n", dir, err);
        checkpoint_model_free(cm);
        return 1;
    }
    return 0;
}

void checkpoint_model_free(checkpoint_model *cm) {
    if (cm->store) activation_store_free(cm->store);
    if (cm->model) gpt_model_free(cm->model);
    if (cm->tok) tokenizer_free(cm->tok);
    memset(cm, 0, sizeof *cm);
}
