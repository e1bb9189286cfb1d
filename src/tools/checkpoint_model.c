#include "tools/checkpoint_model.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "core/parallel_state.h"
#include "core/util/error.h"
#include "training/checkpoint_files.h"
#include "training/dist_checkpointing.h"
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
static int load_args(checkpoint_model *cm, const char *tool, const char *dir,
                     const tokenizer_options *files) {
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
        fprintf(stderr, "error: --load %s: %s%s%s%s\n", dir, err,
                valid == ARGS_INVALID_TOKENIZER_FILE
                    ? " (the checkpoint's tokenizer file: give "
                    : "",
                valid == ARGS_INVALID_TOKENIZER_FILE ? tool : "",
                valid == ARGS_INVALID_TOKENIZER_FILE
                    ? " --vocab-file, --merge-file or --tokenizer-model to use another copy)"
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

int checkpoint_model_open(checkpoint_model *cm, const char *tool, const char *dir,
                          const tokenizer_options *files) {
    memset(cm, 0, sizeof *cm);
    if (load_args(cm, tool, dir, files) != 0) return 1;
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

/* Every dimension tensor parallelism splits is divisible by its size. Every rank checks the
 * same values: they fail together. */
static int check_layout(const megadlm_args *a, int tp, char *err, size_t errlen) {
    const struct {
        const char *what, *why;
        int n;
    } split[] = {
        {"--num-attention-heads", "each rank computes whole heads", a->num_attention_heads},
        {"--num-query-groups", "each rank holds whole key/value groups", a->num_query_groups},
        {"--ffn-hidden-size", "linear_fc1 and linear_fc2 are split along it", a->ffn_hidden_size},
        /* fixed by the training run: its --vocab-size padded to a multiple of
         * --make-vocab-size-divisible-by x its own TP size */
        {"padded vocabulary", "the embedding and the output layer are split along it",
         a->padded_vocab_size},
    };
    for (size_t i = 0; i < sizeof split / sizeof split[0]; i++)
        if (split[i].n % tp != 0) {
            err_set(err, errlen,
                    "--tensor-model-parallel-size %d: the checkpoint's %s (%d) is not "
                    "divisible by it (%s)",
                    tp, split[i].what, split[i].n, split[i].why);
            return -1;
        }
    return 0;
}

/* This rank's model and its slices of the parameters, loaded and checked finite: NULL with
 * the message in err on every rank when any rank fails. */
static gpt_model *load_model(const megadlm_args *saved, const char *dir, int iteration,
                             const checkpoint_model_layout *l, char *err, size_t errlen) {
    if (check_layout(saved, l->tp_size, err, errlen) != 0) return NULL;
    /* the layout of this run, whatever the checkpoint's was (the files hold whole tensors):
     * tensor parallelism only, no sequence parallelism (a sampler's few rows gain nothing
     * from splitting them) */
    megadlm_args a = *saved; /* a shallow copy: only the model's fields are read */
    args_one_process(&a);
    a.bf16 = l->bf16; /* the checkpoint's precision was put aside by load_args */
    /* before allocating a model read from state.json: its file must hold that many values */
    char model_path[PATH_MAX + 64];
    snprintf(model_path, sizeof model_path, "%s/iter_%07d/model.safetensors", dir, iteration);
    char why[1024];
    if (ckpt_check_file_holds(model_path, theoretical_megadlm_parameter_count(&a), why,
                              sizeof why) != 0) {
        err_set(err, errlen, "--load %s: %s", dir, why);
        return NULL;
    }
    a.tensor_model_parallel_size = l->tp_size;
    transformer_config cfg = model_config_from_args(&a);
    cfg.packed_docs = l->packed_docs;
    gpt_model *m = gpt_model_create(&cfg, l->max_batch, GPT_MODEL_FORWARD_ONLY);
    /* each rank reads only its slices; the load agrees on its status across ranks, and so
     * must the finiteness of the slices, which differ from rank to rank */
    int rc = dist_ckpt_load_tensors(dir, iteration, &m->cfg, &m->params, NULL, 0, why,
                                    sizeof why);
    if (rc == 0) gpt_model_params_to_bf16(m); /* --bf16: the copy the GEMMs read */
    if (rc == 0) {
        int bad = ckpt_check_finite(&m->params, 0, why, sizeof why);
        if (bad && l->tp_size > 1) /* its element index counts in the slice */
            err_set(why + strlen(why), sizeof why - strlen(why),
                    " in tensor-parallel rank %d's slice", cfg.tp_rank);
        rc = parallel_agree(bad, why, sizeof why);
    }
    if (rc != 0) {
        err_set(err, errlen, "--load %s: %s", dir, why);
        gpt_model_free(m);
        return NULL;
    }
    return m;
}

int checkpoint_model_build(checkpoint_model *cm, const char *dir,
                           const checkpoint_model_layout *layout) {
    char err[1024];
    cm->model = load_model(&cm->a, dir, cm->iteration, layout, err, sizeof err);
    if (!cm->model) {
        /* every rank holds the same message: printed once */
        if (parallel_world_rank() == 0) fprintf(stderr, "error: %s\n", err);
        checkpoint_model_free(cm);
        return 1;
    }
    cm->store = activation_store_create(cm->model, 1);
    return 0;
}

void checkpoint_model_free(checkpoint_model *cm) {
    if (cm->store) activation_store_free(cm->store);
    if (cm->model) gpt_model_free(cm->model);
    if (cm->tok) tokenizer_free(cm->tok);
    memset(cm, 0, sizeof *cm);
}
