/* Which checkpoint to load, where non-persistent ones go: see checkpoint_policy.h. */
#include "training/checkpoint_policy.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "core/util/error.h"
#include "core/util/io.h"
#include "training/checkpoint_files.h"
#include "training/theoretical_memory.h"

void ckpt_non_persistent_dir(const megadlm_args *a, const char *base, char *out, size_t len) {
    if (a->non_persistent_global_ckpt_dir[0])
        snprintf(out, len, "%s", a->non_persistent_global_ckpt_dir);
    else
        snprintf(out, len, "%s/non_persistent", base);
}

/* Counts what a Megatron checkpoint directory holds: torch_dist's files, the legacy format's
 * per-rank directories. */
typedef struct {
    int metadata, common, distcp, mp_rank, state;
} foreign_files;

static void scan_dir(const char *path, foreign_files *f) {
    memset(f, 0, sizeof *f);
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        size_t l = strlen(n);
        f->metadata += !strcmp(n, "metadata.json") || !strcmp(n, ".metadata");
        f->common += !strcmp(n, "common.pt");
        f->distcp += l > 7 && !strcmp(n + l - 7, ".distcp");
        f->mp_rank += !strncmp(n, "mp_rank_", 8);
        f->state += !strcmp(n, "state.json");
    }
    closedir(d);
}

int ckpt_check_foreign(const char *dir, int iteration, char *err, size_t errlen) {
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/iter_%07d", dir, iteration) >= (int)sizeof path) return 0;
    foreign_files f;
    scan_dir(path, &f);
    if (f.state) return 0;
    if (f.metadata || f.common || f.distcp) {
        err_set(err, errlen,
                "%s: a Megatron torch_dist checkpoint (found%s%s, %d *.distcp files): megadlm "
                "cannot read PyTorch distributed checkpoints; convert it with Megatron's tools "
                "to Hugging Face (MegaDLMs: examples/dlm_training/ckpt_conversion.sh, then its "
                "Hugging Face converter) and import that with `megadlm convert --from hf IN OUT`",
                path, f.metadata ? " metadata.json" : "", f.common ? " common.pt" : "", f.distcp);
        return -1;
    }
    if (f.mp_rank) {
        err_set(err, errlen,
                "%s: a Megatron torch checkpoint (%d mp_rank_* directories of PyTorch pickles): "
                "megadlm cannot read PyTorch pickles; convert it to Hugging Face with Megatron's "
                "tools and import that with `megadlm convert --from hf IN OUT`",
                path, f.mp_rank);
        return -1;
    }
    return 0;
}

/* The latest iteration of dir's tracker: 0 and *it, 1 none, -1 malformed. */
static int latest(const char *dir, int *it, char *err, size_t errlen) {
    *it = -1;
    return ckpt_read_latest(dir, it, err, errlen);
}

int ckpt_select(const megadlm_args *a, ckpt_choice *c, int verbose, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    int it, np_it = -1, rc;
    char np_dir[PATH_MAX];
    if (a->non_persistent_ckpt_type[0]) {
        ckpt_non_persistent_dir(a, a->load, np_dir, sizeof np_dir);
        if ((rc = latest(np_dir, &np_it, err, errlen)) < 0) return -1;
        if (rc == 1 && verbose)
            printf("WARNING: could not find the metadata file %s/latest_checkpointed_iteration.txt"
                   "\n    will not load any non-persistent checkpoint\n", np_dir);
    }
    if ((rc = latest(a->load, &it, err, errlen)) < 0) return -1;
    if (np_it >= 0 && np_it >= it) { /* Megatron: the non-persistent one wins ties */
        snprintf(c->dir, sizeof c->dir, "%s", np_dir);
        c->iteration = np_it;
        c->non_persistent = 1;
        if (verbose)
            printf("Loading from a non-persistent checkpoint (non-persistent iter %d)\n", np_it);
        return ckpt_check_foreign(c->dir, c->iteration, err, errlen);
    }
    if (np_it >= 0 && verbose)
        printf("WARNING: non-persistent checkpoints are older than persistent checkpoint\n");
    if (a->ckpt_step >= 0) it = a->ckpt_step;
    if (it < 0) return 1;
    snprintf(c->dir, sizeof c->dir, "%s", a->load);
    c->iteration = it;
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/iter_%07d", a->load, it);
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        if (a->ckpt_step >= 0)
            err_set(err, errlen, "--ckpt-step %d: %s: no such checkpoint directory", it, path);
        else
            err_set(err, errlen, "%s: no such checkpoint directory (the tracker names "
                    "iteration %d)", path, it);
        return -1;
    }
    return ckpt_check_foreign(c->dir, c->iteration, err, errlen);
}


/* Is name "iter_" followed by digits only (a complete iteration directory)? */
static int iteration_of(const char *name) {
    if (strncmp(name, "iter_", 5) || !name[5]) return -1;
    long v = 0;
    for (const char *p = name + 5; *p; p++) {
        if (*p < '0' || *p > '9' || v > 99999999) return -1;
        v = v * 10 + (*p - '0');
    }
    return (int)v;
}

void ckpt_remove_other_iterations(const char *dir, int keep) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    char path[PATH_MAX];
    while ((de = readdir(d)) != NULL) {
        int it = iteration_of(de->d_name);
        if (it < 0 || it == keep) continue;
        if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path) continue;
        io_rm_rf(path);
    }
    closedir(d);
}

/* Megatron's load_args_from_checkpoint: _set_arg without force (taken only when the command
 * line left it unset, here: at its default) ... */
static const char *const k_unless_given[] = {"num_layers", "hidden_size", "ffn_hidden_size",
                                             "seq_length", "num_attention_heads", "kv_channels",
                                             "max_position_embeddings", "ckpt_format", NULL};
/* ... and with force (always taken), those megadlm has. */
static const char *const k_forced[] = {
    "num_query_groups", "group_query_attention", "position_embedding_type", "rotary_base",
    "rotary_percent", "add_bias_linear", "swiglu", "untie_embeddings_and_output_weights",
    "normalization", "attention_dropout", "hidden_dropout", "qk_layernorm",
    "make_vocab_size_divisible_by", "norm_epsilon", "num_experts", "moe_layer_freq",
    "moe_ffn_hidden_size", "moe_router_topk", "moe_token_dispatcher_type",
    "moe_router_pre_softmax", "moe_grouped_gemm", "moe_shared_expert_intermediate_size",
    "tokenizer_type", "tokenizer_model", "vocab_size", NULL};

/* Copies saved[name] into a when it is there; prints Megatron's line when it changes a. */
static int take_arg(megadlm_args *a, const cJSON *saved, const char *name, int force,
                    int verbose, char *err, size_t errlen) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(saved, name);
    cJSON *now = args_to_json(a);
    megadlm_args d;
    args_defaults(&d);
    cJSON *dflt = args_to_json(&d);
    const cJSON *cur = cJSON_GetObjectItemCaseSensitive(now, name);
    int given = cur && !cJSON_Compare(cur, cJSON_GetObjectItemCaseSensitive(dflt, name), 1);
    int change = v && (force || !given) && !(cur && cJSON_Compare(cur, v, 1));
    int rc = 0;
    if (change) {
        cJSON *one = cJSON_CreateObject();
        cJSON_AddItemToObject(one, name, cJSON_Duplicate(v, 1));
        rc = args_from_json(a, one, err, errlen);
        cJSON_Delete(one);
        if (rc == 0 && verbose) {
            char *text = cJSON_IsString(v) ? NULL : cJSON_PrintUnformatted(v);
            printf("Setting %s to %s from checkpoint\n", name, text ? text : v->valuestring);
            free(text);
        }
    } else if (!v && verbose) {
        printf("Checkpoint did not provide arguments %s\n", name);
    }
    cJSON_Delete(now);
    cJSON_Delete(dflt);
    args_free(&d);
    return rc;
}

/* The sizes a saved model shape must have (a state.json of this program always holds them
 * positive, derived ones included); 0 would read as "not given" and be reported as a missing
 * flag of the command line. */
static const char *const k_sizes[] = {"num_layers", "hidden_size", "ffn_hidden_size",
                                      "num_attention_heads", "kv_channels", "num_query_groups",
                                      "max_position_embeddings", "seq_length", NULL};

static int check_saved_sizes(const cJSON *saved, char *err, size_t errlen) {
    for (int i = 0; k_sizes[i]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(saved, k_sizes[i]);
        if (cJSON_IsNumber(v) && !(v->valuedouble >= 1.0)) {
            err_set(err, errlen, "%s is %g: expected a positive size", k_sizes[i],
                    v->valuedouble);
            return -1;
        }
    }
    return 0;
}

int ckpt_apply_checkpoint_args(megadlm_args *a, int verbose, char *err, size_t errlen) {
    ckpt_choice c;
    int rc = ckpt_select(a, &c, 0, err, errlen);
    if (rc < 0) return -1;
    if (rc == 1) {
        if (verbose)
            printf("Checkpoint not found to provide arguments, using provided arguments.\n");
        return 0;
    }
    ckpt_state st;
    if (ckpt_load_state(c.dir, c.iteration, &st, err, errlen)) return -1;
    if (!st.args) {
        if (verbose)
            printf("Checkpoint provided does not have arguments saved, using provided "
                   "arguments.\n");
        ckpt_state_free(&st);
        return 0;
    }
    rc = check_saved_sizes(st.args, err, errlen);
    for (int i = 0; rc == 0 && k_unless_given[i]; i++)
        rc = take_arg(a, st.args, k_unless_given[i], 0, verbose, err, errlen);
    for (int i = 0; rc == 0 && k_forced[i]; i++)
        rc = take_arg(a, st.args, k_forced[i], 1, verbose, err, errlen);
    if (rc) {
        char why[1024];
        snprintf(why, sizeof why, "%s", err);
        err_set(err, errlen, "%s/iter_%07d/state.json: %s", c.dir, c.iteration, why);
    }
    ckpt_state_free(&st);
    return rc;
}

int ckpt_check_checkpoint_args_fit(const megadlm_args *a, char *err, size_t errlen) {
    ckpt_choice c;
    int rc = ckpt_select(a, &c, 0, err, errlen);
    if (rc != 0) return rc < 0 ? -1 : 0;
    char path[PATH_MAX + 64], why[1024];
    snprintf(path, sizeof path, "%s/iter_%07d/model.safetensors", c.dir, c.iteration);
    /* the file holds whole tensors: count them for one rank of every parallel size */
    megadlm_args whole = *a;
    args_one_process(&whole);
    if (ckpt_check_file_holds(path, theoretical_megadlm_parameter_count(&whole), why,
                              sizeof why) == 0)
        return 0;
    err_set(err, errlen, "--use-checkpoint-args: %s (the model's shape came from %s/iter_%07d/"
            "state.json)", why, c.dir, c.iteration);
    return -1;
}
