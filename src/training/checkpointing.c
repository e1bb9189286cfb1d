/* Megatron's checkpointing.py for a training run: save_checkpoint (what state.json holds: the
 * counters, the arguments, the RNG and loss scaler state; --async-save's background write and
 * its finalization; non-persistent saves; convert mode) and load_checkpoint (which checkpoint,
 * the model flags it fixes, the RNG and loss scaler state, the log lines). The files themselves
 * are checkpoint_files.c's; each rank's slices dist_checkpointing.c's. */
#include "training/checkpoint_files.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/distributed/distributed_data_parallel.h"
#include "core/distributed/fsdp.h"
#include "core/parallel_state.h"
#include "training/checkpoint_files.h"
#include "training/checkpoint_policy.h"
#include "training/dist_checkpointing.h"
#include "training/training_log.h"
#include "training/watchdog.h"

/* --log-memory: what the last checkpoint save or load moved on this rank, beside what the
 * rank holds (its slices) and the tracked buffers the checkpoint code allocated. */
static void log_checkpoint_io(const trainer *tr, const char *what, const char *verb) {
    const dist_ckpt_stats *s = dist_ckpt_last_stats();
    const param_set *ps = &tr->model->params;
    /* in the files' dtypes: the parameters in the run's precision; the moments (and, with
     * 16-bit parameters, the fp32 main parameters) F32 */
    ckpt_precision prec = dist_ckpt_precision(&tr->model->cfg);
    size_t par = ps->numel * st_dtype_size(ckpt_precision_dtype(prec));
    size_t opt = (tr->dopt ? 2 * tr->dopt->shard_numel : 2 * ps->numel) * sizeof(float) +
                 (prec == CKPT_FP32 ? 0 : ps->numel * sizeof(float));
    printf("[Rank %d] checkpoint %s | tensor files %llu bytes | %s by this rank %llu bytes in "
           "%llu runs | this rank's slices %zu bytes (parameters %zu, optimizer state %zu) | "
           "checkpoint buffers (peak) %zu bytes\n",
           parallel_world_rank(), what, (unsigned long long)s->file_bytes, verb,
           (unsigned long long)s->data_bytes, (unsigned long long)s->runs, par + opt, par, opt,
           s->buffer_peak);
    fflush(stdout);
}

/* The state.json of a save now: counters, arguments, the loss scaler's state and, unless
 * --no-save-rng, the RNG state (the streams' key). */
static ckpt_state save_state(const trainer *tr) {
    const megadlm_args *a = tr->a;
    ckpt_state st = {.iteration = tr->iteration,
                     .consumed_train_samples = tr->consumed_train_samples,
                     .optimizer_step = tr->optimizer_steps,
                     .args = args_to_json(a),
                     .grad_scaler = tr->scaling ? grad_scaler_to_json(&tr->scaler) : NULL};
    if (!a->no_save_rng) {
        st.rng_state = cJSON_CreateObject();
        char seed[32];
        snprintf(seed, sizeof seed, "%llu", (unsigned long long)tr->rng_seed);
        cJSON_AddStringToObject(st.rng_state, "seed", seed); /* a u64: exact as a string */
    }
    if (a->ckpt_convert_format[0]) { /* the converted checkpoint's args describe the run */
        cJSON_ReplaceItemInObject(st.args, "ckpt_convert_format", cJSON_CreateString(""));
        cJSON_ReplaceItemInObject(st.args, "ckpt_convert_save", cJSON_CreateString(""));
        cJSON_ReplaceItemInObject(st.args, "async_save", cJSON_CreateFalse()); /* not used */
    }
    return st;
}

/* A save that failed on this rank: the message, and -1. */
static int save_failed(int iteration, const char *dir, const char *err) {
    fprintf(stderr, "[rank %d] error: saving the checkpoint of iteration %d to %s: %s\n",
            parallel_world_rank(), iteration, dir, err);
    return -1;
}

/* What follows a committed save, synchronous or async: older non-persistent iterations
 * removed, the memory line, Megatron's log line (timing: what its brackets say), progress.txt. */
static void save_committed(trainer *tr, int iteration, const char *dir, int non_persistent,
                           uint64_t consumed, const char *timing) {
    if (non_persistent && parallel_world_rank() == 0) ckpt_remove_other_iterations(dir, iteration);
    if (tr->a->log_memory) log_checkpoint_io(tr, "save", "written");
    print_rank_last("  successfully saved checkpoint from iteration %7d to %s [ %s ]\n", iteration, dir,
               timing);
    monitor_progress_saved(&tr->mon, iteration, consumed);
    fflush(stdout);
}

/* Completes the pending --async-save write, if any: waits for this rank's writer (blocking) or,
 * not blocking, only when every rank's writer is done (Megatron's maybe_finalize_async_save).
 * Collective. 0, or -1 on a failed save (reported). */
int finalize_async_save(trainer *tr, int blocking) {
    if (!tr->pending) return 0;
    if (!blocking && !dist_ckpt_pending_done(tr->pending)) return 0;
    char err[1024], dir[PATH_MAX];
    int it = dist_ckpt_pending_iteration(tr->pending);
    snprintf(dir, sizeof dir, "%s", dist_ckpt_pending_dir(tr->pending));
    int non_persistent = tr->pending_non_persistent;
    double t0 = now_seconds();
    int rc = dist_ckpt_finish(tr->pending, err, sizeof err);
    tr->pending = NULL;
    if (rc != 0) return save_failed(it, dir, err);
    char timing[64];
    snprintf(timing, sizeof timing, "async, finalized in t %.1f ms", (now_seconds() - t0) * 1000.0);
    save_committed(tr, it, dir, non_persistent, tr->pending_consumed, timing);
    return 0;
}

/* Saves the state after this iteration into dir (--save, its non-persistent directory, or
 * the convert mode's): with --async-save a background write finalized later. model_only: no
 * optimizer state whatever --no-save-optim says (upcycling's save, Megatron's
 * save_checkpoint(..., optimizer=None)). */
static int save_to(trainer *tr, const char *dir, int non_persistent, int model_only) {
    megadlm_args *a = tr->a;
    watchdog_progress("saving a checkpoint");
    if (finalize_async_save(tr, 1) != 0) return -1; /* one save at a time, as Megatron */
    char err[1024];
    ckpt_state st = save_state(tr);
    double t0 = now_seconds();
    /* every rank writes its own slices (the distributed optimizer: its own pieces of the
     * moments) of the gathered parameters */
    if (tr->dopt) ddp_finish_param_sync(tr->ddp);
    if (tr->fsdp_params) fsdp_params_materialize(tr->fsdp_params); /* the whole parameters */
    int with_optimizer = !a->no_save_optim && !model_only, rc;
    if (a->async_save && !a->ckpt_convert_format[0]) {
        rc = dist_ckpt_save_async(dir, &tr->model->cfg, &tr->model->params, tr->dopt, &st,
                                  with_optimizer, &tr->pending, err, sizeof err);
        tr->pending_non_persistent = non_persistent;
        tr->pending_consumed = tr->consumed_train_samples;
    } else {
        rc = dist_ckpt_save(dir, &tr->model->cfg, &tr->model->params, tr->dopt, &st,
                            with_optimizer, err, sizeof(err));
    }
    if (tr->fsdp_params) fsdp_params_dematerialize(tr->fsdp_params, 0); /* (async: copied) */
    ckpt_state_free(&st);
    if (rc != 0) return save_failed(tr->iteration, dir, err);
    if (tr->pending) {
        print_rank_last("  saving checkpoint from iteration %7d to %s in the background (async) "
                   "[ t %.1f ms ]\n", tr->iteration, dir, (now_seconds() - t0) * 1000.0);
        return 0;
    }
    char timing[32];
    snprintf(timing, sizeof timing, "t %.1f ms", (now_seconds() - t0) * 1000.0);
    save_committed(tr, tr->iteration, dir, non_persistent, tr->consumed_train_samples, timing);
    return 0;
}

int save_checkpoint(trainer *tr) { return save_to(tr, tr->a->save, 0, 0); }

/* A non-persistent save (--non-persistent-save-interval): into the non-persistent directory
 * of --save, older ones removed once it is complete. */
int save_checkpoint_non_persistent(trainer *tr) {
    char dir[PATH_MAX];
    ckpt_non_persistent_dir(tr->a, tr->a->save, dir, sizeof dir);
    return save_to(tr, dir, 1, 0);
}

/* The model flags a checkpoint fixes: resuming with different values is refused. */
static const char *const *const k_model_flags = args_model_flags; /* arguments.def: MODEL */

/* skip: NULL, or a NULL-terminated list of model flags not compared. */
static int check_checkpoint_args(const megadlm_args *a, const cJSON *saved, const char *dir,
                                 const char *const *skip, char *err, size_t errlen) {
    cJSON *now = args_to_json(a);
    int rc = 0;
    for (int i = 0; k_model_flags[i]; i++) {
        int skipped = 0;
        for (int j = 0; skip && skip[j]; j++) skipped |= !strcmp(skip[j], k_model_flags[i]);
        if (skipped) continue;
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(now, k_model_flags[i]);
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(saved, k_model_flags[i]);
        if (!x || !y || cJSON_Compare(x, y, 1)) continue;
        char *xs = cJSON_PrintUnformatted(x), *ys = cJSON_PrintUnformatted(y);
        snprintf(err, errlen, "--load %.600s: the checkpoint was saved with %s = %s, this run has %s",
                 dir, k_model_flags[i], ys, xs);
        free(xs);
        free(ys);
        rc = -1;
        break;
    }
    cJSON_Delete(now);
    return rc;
}

/* Reads this rank's slices of the tensors and, unless --no-load-optim or --finetune, of the
 * optimizer state (the distributed optimizer: the moments of its own pieces only). */
static int load_tensors(trainer *tr, const char *dir, int it, char *err, size_t errlen) {
    int with_optimizer = !tr->a->no_load_optim && !tr->a->finetune;
    int rc = dist_ckpt_load_tensors(dir, it, &tr->model->cfg, &tr->model->params,
                                    tr->dopt, with_optimizer, err, errlen);
    if (tr->a->log_memory) log_checkpoint_io(tr, "load", "read");
    return rc;
}

/* The dynamic loss scaler's state from a checkpoint's (Megatron's optimizer load_state_dict:
 * a checkpoint without one, e.g. from a --bf16 or fp32 run, leaves the scaler as the flags set
 * it up; one this run has no use for is not loaded, with a warning). */
static int load_grad_scaler(trainer *tr, const cJSON *saved, const char *dir, int it, char *err,
                            size_t errlen) {
    if (!saved || !tr->scaling || !tr->scaler.dynamic) {
        if (saved)
            print_rank_last(" WARNING: the checkpoint holds a loss scaler's state; this run scales "
                       "%s: not loaded\n", tr->scaling ? "by a constant" : "no loss");
        else if (tr->scaling && tr->scaler.dynamic)
            print_rank_last(" WARNING: the checkpoint holds no loss scaler's state: starting from "
                       "--initial-loss-scale\n");
        return 0;
    }
    char why[256];
    if (grad_scaler_from_json(&tr->scaler, saved, why, sizeof why) == 0) return 0;
    snprintf(err, errlen, "%.600s/iter_%07d/state.json: %s", dir, it, why);
    return -1;
}

/* Megatron's RNG state: unless --no-load-rng or --finetune, the streams continue with the
 * checkpoint's key (absent: saved with --no-save-rng, --seed's). */
static int load_rng(trainer *tr, const cJSON *rng, const char *dir, int it, char *err,
                    size_t errlen) {
    if (!rng || tr->a->no_load_rng || tr->a->finetune) return 0;
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(rng, "seed");
    char *end = NULL;
    unsigned long long v = cJSON_IsString(seed) ? strtoull(seed->valuestring, &end, 10) : 0;
    if (!end || end == seed->valuestring || *end || seed->valuestring[0] == '-') {
        snprintf(err, errlen, "%.600s/iter_%07d/state.json: expected \"rng_state\" to be "
                 "{\"seed\": \"<unsigned integer>\"}", dir, it);
        return -1;
    }
    if (v != tr->rng_seed)
        print_rank_last(" > loading checkpoint: the RNG state's seed %llu (dropout and masking) "
                   "replaces --seed %llu (--no-load-rng keeps --seed)\n", v,
                   (unsigned long long)tr->rng_seed);
    tr->rng_seed = v;
    return 0;
}

/* Loads the checkpoint ckpt_select picks (the latest of --load, a newer non-persistent one,
 * or --ckpt-step's). 0 ok (or nothing to load), 1 nothing to load under
 * --exit-on-missing-checkpoint, -1 error. */
int load_checkpoint(trainer *tr) {
    megadlm_args *a = tr->a;
    char err[1024];
    ckpt_choice ch;
    int rc = ckpt_select(a, &ch, print_rank_last_on(), err, sizeof err);
    if (rc == 1) {
        print_rank_last(" WARNING: could not find the metadata file %s/latest_checkpointed_iteration.txt\n"
               "    will not load any checkpoints and will start from random\n",
               a->load);
        if (a->exit_on_missing_checkpoint) {
            print_rank_last(">> '--exit-on-missing-checkpoint' set ... exiting. <<\n");
            return 1;
        }
        return 0;
    }
    const char *dir = ch.dir;
    int it = ch.iteration;
    ckpt_state st = {0};
    if (rc < 0 || ckpt_load_state(dir, it, &st, err, sizeof(err)) != 0 ||
        check_checkpoint_args(a, st.args, dir, NULL, err, sizeof(err)) != 0 ||
        load_rng(tr, st.rng_state, dir, it, err, sizeof err) != 0 ||
        load_tensors(tr, dir, it, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: loading checkpoint: %s\n", err);
        ckpt_state_free(&st);
        return -1;
    }
    /* Megatron: --finetune starts at iteration 0 with no consumed samples; without the
     * optimizer state AdamW and the lr schedule (here: its samples, scheduler_samples) start
     * from step 0, with zero moments */
    if (!a->finetune) {
        tr->iteration = st.iteration;
        tr->consumed_train_samples = st.consumed_train_samples;
    }
    tr->optimizer_steps = a->no_load_optim || a->finetune ? 0 : st.optimizer_step;
    rc = load_grad_scaler(tr, st.grad_scaler, dir, it, err, sizeof err);
    ckpt_state_free(&st);
    if (rc != 0) {
        fprintf(stderr, "error: loading checkpoint: %s\n", err);
        return -1;
    }
    if (dist_ckpt_last_conversion()[0]) print_rank_last("%s\n", dist_ckpt_last_conversion());
    tr->loaded = 1;
    const parallel_state *pst = parallel_get(); /* the logging rank's, as Megatron's line */
    print_rank_last("  successfully loaded checkpoint from %s [ t %d/%d, p %d/%d ] at iteration %d\n",
               dir, pst->tp_rank + 1, pst->tp_size, pst->pp_rank + 1, pst->pp_size,
               tr->iteration);
    return 0;
}


/* ---- Megatron's --moe-use-upcycling (training.py's setup_model_and_optimizer,
 *      moe/upcycling_utils.py) ---- */

/* The MoE model flags a dense checkpoint's args cannot match: not compared (args_validate's
 * upcycling rules tie the MoE model to the dense one: every layer MoE, each expert the dense
 * MLP's size, no shared expert). */
static const char *const k_upcycled_flags[] = {"num_experts", "moe_layer_freq",
                                               "moe_ffn_hidden_size",
                                               "moe_shared_expert_intermediate_size", NULL};

/* The dense tensor an MoE model tensor is read from (upcycling_utils'
 * _covert_to_moe_state_dict): every routed expert's linear_fc1 / linear_fc2 is a copy of the
 * dense layer's mlp.linear_fc1 / linear_fc2 (nothing scaled or split), the router is not read
 * (NULL: it keeps the MoE model's initial values), every other tensor is its own name. */
static const char *upcycled_source(const char *name, char *buf, size_t len) {
    static const char experts[] = ".mlp.experts.local_experts.";
    if (strstr(name, ".mlp.router.")) return NULL;
    const char *e = strstr(name, experts);
    if (!e) return name;
    const char *rest = strchr(e + sizeof experts - 1, '.'); /* after the expert's index */
    if (!rest) return name;
    snprintf(buf, len, "%.*s.mlp%s", (int)(e - name), name, rest);
    return buf;
}

/* The checkpoint to upcycle must be a dense one. */
static int check_dense(const cJSON *saved, const char *dir, int it, char *err, size_t errlen) {
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(saved, "num_experts");
    if (!cJSON_IsNumber(e) || e->valuedouble <= 0) return 0;
    snprintf(err, errlen, "--load %.600s iteration %d is already a mixture-of-experts model "
             "(num_experts %g): upcycling turns a dense checkpoint into one (Megatron: "
             "\"Upcycling should only be set for the first run when converting the dense "
             "model. All subsequent runs should remove this flag.\")", dir, it, e->valuedouble);
    return -1;
}

int upcycle_checkpoint(trainer *tr) {
    megadlm_args *a = tr->a;
    char err[1024];
    int it;
    int rc = ckpt_read_latest(a->save, &it, err, sizeof err);
    if (rc == 0)
        snprintf(err, sizeof err, "--save %.600s already holds a checkpoint (iteration %d): "
                 "\"The upcycling destination directory already exists. Please check if "
                 "--moe-use-upcycling is mistakenly enabled. Upcycling should only be set for "
                 "the first run when converting the dense model. All subsequent runs should "
                 "remove this flag.\" (Megatron)", a->save, it);
    ckpt_choice ch;
    ckpt_state st = {0};
    if (rc == 1) rc = ckpt_select(a, &ch, print_rank_last_on(), err, sizeof err);
    else rc = -1;
    if (rc == 1)
        snprintf(err, sizeof err, "--load %.600s holds no checkpoint to upcycle", a->load);
    /* the model only (Megatron's upcycling sets --no-load-optim and --no-load-rng), from a
     * dense checkpoint whose model flags are this run's but the MoE ones */
    if (rc != 0 || ckpt_load_state(ch.dir, ch.iteration, &st, err, sizeof err) != 0 ||
        check_dense(st.args, ch.dir, ch.iteration, err, sizeof err) != 0 ||
        check_checkpoint_args(a, st.args, ch.dir, k_upcycled_flags, err, sizeof err) != 0 ||
        dist_ckpt_load_renamed(ch.dir, ch.iteration, &tr->model->cfg, &tr->model->params,
                               tr->dopt, upcycled_source, err, sizeof err) != 0) {
        fprintf(stderr, "error: --moe-use-upcycling: %s\n", err);
        ckpt_state_free(&st);
        return -1;
    }
    ckpt_state_free(&st);
    if (dist_ckpt_last_conversion()[0]) print_rank_last("%s\n", dist_ckpt_last_conversion());
    /* Megatron then trains from iteration 0 with a fresh optimizer and LR schedule (the
     * iteration it saves the upcycled model as, 1, is not kept). It keeps the dense run's
     * consumed_train_samples for its data sampler; megadlm's schedule is a function of the
     * consumed samples, so they restart too (the data from its first sample, as Megatron's
     * --finetune reads it). */
    tr->iteration = 0;
    tr->consumed_train_samples = 0;
    tr->optimizer_steps = 0;
    tr->loaded = 1;
    print_rank_last("  upcycled the dense checkpoint %s iteration %d: %d experts per MoE layer, "
                    "each a copy of the layer's MLP; the routers from --seed\n", ch.dir,
                    ch.iteration, a->num_experts);
    return 0;
}

int save_upcycled_checkpoint(trainer *tr) {
    tr->iteration = 1; /* Megatron's args.iteration = 1; save_checkpoint(...) */
    int rc = save_to(tr, tr->a->save, 0, 1);
    tr->iteration = 0;
    if (rc == 0) print_rank_last("Upcycled checkpoint saved to %s\n", tr->a->save);
    return rc;
}

/* Megatron's --ckpt-convert-format: the loaded checkpoint written again, into
 * --ckpt-convert-save/FMT, in megadlm's format (the only one it writes: `torch`, which Megatron
 * writes as PyTorch pickles, gets it too, so that `megadlm convert --to hf` and MegaDLMs'
 * .../ckptstep_N/torch layout find a checkpoint there); without training. */
int convert_checkpoint(trainer *tr) {
    megadlm_args *a = tr->a;
    if (!tr->loaded) {
        fprintf(stderr, "error: --ckpt-convert-format %s: no checkpoint in --load %s to "
                "convert\n", a->ckpt_convert_format, a->load);
        return 1;
    }
    char dir[PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s/%s", a->ckpt_convert_save, a->ckpt_convert_format) >=
        (int)sizeof dir) {
        fprintf(stderr, "error: --ckpt-convert-save %s: path too long\n", a->ckpt_convert_save);
        return 1;
    }
    if (save_to(tr, dir, 0, 0) != 0) return 1;
    print_rank_last("> converted checkpoint: torch_dist -> %s: iteration %d of %s written to %s in "
               "megadlm's format (safetensors; %s, %s)\n", a->ckpt_convert_format,
               tr->iteration, a->load, dir,
               a->no_save_optim ? "model only, no optimizer state" : "with the optimizer state",
               a->no_save_rng ? "no RNG state" : "with the RNG state");
    return 0;
}

