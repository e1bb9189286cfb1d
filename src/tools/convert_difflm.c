/* `megadlm convert --to hf` for masked-diffusion models: MegaDLMs' DiffLM export, the layout
 * its tools/weights_conversion/megatron_to_hf_te.py writes (docs/CHECKPOINT.md, "MegaDLMs'
 * DiffLM export"):
 *
 *   config.json                 the keys of MegaDLMs' hf_configs/gptneox_1.7b_dlm/config.json as
 *                               DLMConfig.save_pretrained writes them, with this model's sizes
 *   generation_config.json      the template's keys (the converter copies the template's file)
 *   model.safetensors, or model-0000i-of-0000N.safetensors + model.safetensors.index.json
 *                               split as save_pretrained(max_shard_size=...) splits them
 *   tokenizer.json (+ tokenizer_config.json, special_tokens_map.json when present)
 *
 * The Python modeling code (configuration_dlm.py, modeling_dlm.py) is not part of megadlm:
 * config.json's auto_map names it, and --hf-code-dir copies it from a MegaDLMs checkout
 * (docs/CHECKPOINT.md). */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/util/alloc.h"
#include "core/util/io.h"
#include "tools/convert_difflm.h"
#include "tools/hf_io.h"
#include "tools/json_fields.h"
#include "training/tokenizer/tokenizer.h"

int difflm_is_model(const transformer_config *c, const megadlm_args *a) {
    return !c->causal || ARGS_CHOICE(a, model_running_mode) == ARGS_MODE_DIFFLM_NOSHIFT;
}

const char *difflm_misfit(const transformer_config *c, const megadlm_args *a) {
    if (c->normalization != NORM_RMSNORM) return "LayerNorm (DiffLM's norms are RMSNorm)";
    if (!c->rope) return "learned absolute positions (DiffLM uses RoPE)";
    if (a->rotary_percent != 1.0f || c->rot_dim != c->kv_channels)
        return "--rotary-percent != 1 (DiffLM rotates the whole head)";
    if (!c->swiglu) return "a GELU MLP (DiffLM's MLP is SwiGLU)";
    if (c->add_bias_linear) return "biases in the linear layers (DiffLM's nn.Linear have bias=False)";
    if (!c->qk_layernorm)
        return "no --qk-layernorm (DiffLM's attention always applies q_norm / k_norm)";
    if (a->mask_token < 0) return "no --mask-token (DiffLM's generate needs mask_token_id)";
    if (tc_moe(c)) return "MoE layers (--num-experts: DiffLM's MLP is dense)";
    return NULL;
}

/* ------------------------------------------------------------------ config files */

/* The tokenizer's end-of-document id (eos_token_id), or -1 when the tokenizer named by the
 * checkpoint's args cannot be loaded here. */
static int eod_id(const megadlm_args *a) {
    tokenizer_options t = {.type = a->tokenizer_type[0] ? a->tokenizer_type : "NullTokenizer",
                           .vocab_size = a->vocab_size,
                           .vocab_file = a->vocab_file,
                           .merge_file = a->merge_file,
                           .tokenizer_model = a->tokenizer_model};
    char err[1024];
    tokenizer *tok = tokenizer_create_opts(&t, err, sizeof err);
    if (!tok) {
        fprintf(stderr, "warning: convert --to hf: no eos_token_id in config.json: %s\n", err);
        return -1;
    }
    int eod = tokenizer_eod(tok);
    tokenizer_free(tok);
    return eod;
}

/* config.json: DLMConfig's keys in the order of MegaDLMs' template. Not written: model_type
 * (DLMConfig has none; auto_map names the classes), head_dim unless kv_channels differs from
 * hidden/heads (DLMAttention's getattr(config, "head_dim", hidden_size // heads)). */
static cJSON *difflm_config(const transformer_config *c, const megadlm_args *a, ckpt_precision p,
                            int eos) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(j, "architectures"), cJSON_CreateString("DiffLM"));
    cJSON *am = cJSON_AddObjectToObject(j, "auto_map");
    JSON_ADD(am, JSTR("AutoConfig", "configuration_dlm.DLMConfig"),
             JSTR("AutoModelForCausalLM", "modeling_dlm.DiffLM"));
    JSON_ADD(j, JNUM("attention_dropout", nice_float(c->attention_dropout)));
    if (eos >= 0) JSON_ADD(j, JNUM("eos_token_id", eos));
    JSON_ADD(j, JSTR("hidden_act", "silu"), JNUM("hidden_size", c->hidden_size),
             JNUM("initializer_range", nice_float(c->init_method_std)),
             JNUM("intermediate_size", c->ffn_hidden_size),
             /* MegaDLMs' converter: config.max_position_embeddings = args.seq_length */
             JNUM("max_position_embeddings", c->seq_length),
             JNUM("max_window_layers", c->num_layers),
             JNUM("num_attention_heads", c->num_attention_heads),
             JNUM("num_hidden_layers", c->num_layers),
             JNUM("num_key_value_heads", c->num_query_groups),
             JNUM("rms_norm_eps", nice_float(c->norm_epsilon)),
             JNUM("rope_theta", nice_float(c->rotary_base)), JNULL("rope_scaling"),
             JNUM("sliding_window", c->seq_length),
             /* always false in MegaDLMs' export: lm_head.weight is written either way */
             JBOOL("tie_word_embeddings", 0), JSTR("torch_dtype", ckpt_precision_name(p)),
             JBOOL("use_cache", 1), JBOOL("use_mrope", 0), JBOOL("use_sliding_window", 0),
             JNUM("vocab_size", c->padded_vocab_size), JNUM("mask_token_id", a->mask_token),
             JSTR("attn_mask_type", c->causal ? "causal" : "bidirectional"));
    if ((int64_t)c->kv_channels * c->num_attention_heads != c->hidden_size)
        JSON_ADD(j, JNUM("head_dim", c->kv_channels));
    return j;
}

static int write_json_file(const char *dir, const char *file, cJSON *j) {
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    char *txt = cJSON_Print(j);
    FILE *fp = fopen(path, "w");
    int ok = txt && fp && fprintf(fp, "%s\n", txt) >= 0;
    if (fp && fclose(fp) != 0) ok = 0;
    if (!ok) fprintf(stderr, "error: convert --to hf: cannot write %s: %s\n", path, strerror(errno));
    free(txt);
    return ok ? 0 : -1;
}

/* generation_config.json: MegaDLMs' converter copies its template (do_sample false, use_cache
 * true, the tokenizer's eos); DiffLM.generate reads temperature / top_p from it. */
static int write_generation_config(const char *out, int eos) {
    cJSON *g = cJSON_CreateObject();
    JSON_ADD(g, JBOOL("do_sample", 0));
    if (eos >= 0) JSON_ADD(g, JNUM("eos_token_id", eos));
    JSON_ADD(g, JBOOL("use_cache", 1));
    int rc = write_json_file(out, "generation_config.json", g);
    cJSON_Delete(g);
    return rc;
}

/* ------------------------------------------------------------------ tokenizer files */

static int copy_file(const char *from, const char *to) {
    size_t len;
    int open_failed;
    const char *why;
    char *buf = io_read_file(from, &len, &open_failed, &why);
    if (!buf) {
        fprintf(stderr, "error: convert --to hf: cannot read %s: %s\n", from, why);
        return -1;
    }
    FILE *fp = fopen(to, "wb");
    int ok = fp && fwrite(buf, 1, len, fp) == len;
    if (fp && fclose(fp) != 0) ok = 0;
    if (!ok) fprintf(stderr, "error: convert --to hf: cannot write %s: %s\n", to, strerror(errno));
    free(buf);
    return ok ? 0 : -1;
}

/* HuggingFaceTokenizer: its tokenizer.json, and the tokenizer_config.json /
 * special_tokens_map.json next to it (what AutoTokenizer.save_pretrained writes in MegaDLMs'
 * write_tokenizer). Other tokenizers have no Hugging Face file; a note says so. */
static int copy_tokenizer(const char *out, const megadlm_args *a) {
    if (ARGS_CHOICE(a, tokenizer_type) != ARGS_TOKENIZER_HUGGINGFACE || !a->tokenizer_model[0]) {
        fprintf(stderr, "note: convert --to hf: tokenizer %s has no tokenizer.json; none is "
                        "written (AutoTokenizer.from_pretrained needs one next to the weights)\n",
                a->tokenizer_type[0] ? a->tokenizer_type : "NullTokenizer");
        return 0;
    }
    char dir[PATH_MAX], from[PATH_MAX + 64], to[PATH_MAX + 64];
    struct stat sb;
    snprintf(dir, sizeof dir, "%s", a->tokenizer_model);
    if (stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        snprintf(from, sizeof from, "%s/tokenizer.json", dir);
    } else {
        snprintf(from, sizeof from, "%s", dir);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        else snprintf(dir, sizeof dir, ".");
    }
    snprintf(to, sizeof to, "%s/tokenizer.json", out);
    if (copy_file(from, to) != 0) return -1;
    static const char *const extra[2] = {"tokenizer_config.json", "special_tokens_map.json"};
    for (int i = 0; i < 2; i++) {
        snprintf(from, sizeof from, "%s/%s", dir, extra[i]);
        snprintf(to, sizeof to, "%s/%s", out, extra[i]);
        if (stat(from, &sb) == 0 && copy_file(from, to) != 0) return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ shards */

/* MegaDLMs: max_shard_size = param_count * 2 // max(1, num_output_shards - 1), param_count
 * counting every tensor of its intermediate state dict: ours plus one rotary inv_freq
 * (head_dim / 2 values) per layer. Then huggingface_hub's split_state_dict_into_shards in
 * state_dict order: a tensor above the limit alone in a shard; otherwise a new shard starts when
 * the tensor would take the current one over the limit. */
int difflm_plan_shards(int n, const int64_t (*shapes)[2], uint64_t inv_freq_values,
                       size_t elem_bytes, int num_output_shards, int *shard_of) {
    uint64_t count = inv_freq_values;
    for (int i = 0; i < n; i++)
        count += (uint64_t)shapes[i][0] * (uint64_t)(shapes[i][1] ? shapes[i][1] : 1);
    const uint64_t max = count * 2 / (uint64_t)(num_output_shards > 2 ? num_output_shards - 1 : 1);
    /* group[i]: the shard tensor i joins, numbered as created; pos[g]: where shard g lands in
     * hub's shard_list (an oversized tensor's shard is appended at once, the one being filled
     * when it is closed) */
    int *group = xcalloc((size_t)n, sizeof *group, "the shard of each tensor"),
        *pos = xcalloc((size_t)n + 1, sizeof *pos, "the shard order");
    int groups = 0, current = -1, appended = 0;
    uint64_t current_size = 0;
    for (int i = 0; i < n; i++) {
        uint64_t sz = (uint64_t)shapes[i][0] * (uint64_t)(shapes[i][1] ? shapes[i][1] : 1) * elem_bytes;
        if (sz > max) {
            group[i] = groups;
            pos[groups++] = appended++;
            continue;
        }
        if (current >= 0 && current_size + sz > max) {
            pos[current] = appended++;
            current = -1;
        }
        if (current < 0) {
            current = groups++;
            current_size = 0;
        }
        group[i] = current;
        current_size += sz;
    }
    if (current >= 0) pos[current] = appended++;
    for (int i = 0; i < n; i++) shard_of[i] = pos[group[i]];
    free(group);
    free(pos);
    return appended;
}

static int write_shards(const char *out, const out_set *o, const int *shard_of, int shards,
                        st_dtype dt) {
    char path[PATH_MAX + 64], file[64], err[1024];
    st_meta meta[1] = {{"format", "pt"}};
    st_tensor_desc *sel = xcalloc((size_t)o->n, sizeof *sel, "a shard's tensor list");
    cJSON *index = cJSON_CreateObject(), *wm = cJSON_CreateObject();
    uint64_t total = 0;
    int rc = 0;
    for (int s = 0; s < shards && rc == 0; s++) {
        if (shards == 1) snprintf(file, sizeof file, "model.safetensors");
        else snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", s + 1, shards);
        int n = 0;
        for (int i = 0; i < o->n; i++)
            if (shard_of[i] == s) {
                sel[n++] = o->d[i];
                cJSON_AddStringToObject(wm, o->names[i], file);
                total += (uint64_t)o->shapes[i][0] * (uint64_t)(o->shapes[i][1] ? o->shapes[i][1] : 1) * st_dtype_size(dt);
            }
        snprintf(path, sizeof path, "%s/%s", out, file);
        if (st_write_file(path, sel, n, meta, 1, err, sizeof err) != 0) {
            fprintf(stderr, "error: convert --to hf: %s\n", err);
            rc = -1;
        }
    }
    free(sel);
    if (rc == 0 && shards > 1) { /* save_pretrained's index: metadata.total_size, weight_map */
        cJSON *md = cJSON_AddObjectToObject(index, "metadata");
        cJSON_AddNumberToObject(md, "total_size", (double)total);
        cJSON_AddItemToObject(index, "weight_map", wm);
        wm = NULL;
        rc = write_json_file(out, "model.safetensors.index.json", index);
    }
    cJSON_Delete(wm);
    cJSON_Delete(index);
    return rc;
}

/* --hf-code-dir: the *.py files of DIR (MegaDLMs' hf_configs/gptneox_1.7b_dlm:
 * configuration_dlm.py, modeling_dlm.py), as the converter copies its model_dir_path's files
 * (its config.json and generation_config.json are written here instead). Returns the number
 * copied, or -1. */
static int copy_code(const char *out, const char *code_dir) {
    DIR *d = opendir(code_dir);
    if (!d) {
        fprintf(stderr, "error: convert --to hf: --hf-code-dir %s: %s\n", code_dir, strerror(errno));
        return -1;
    }
    char from[PATH_MAX + 256], to[PATH_MAX + 256];
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        struct stat sb;
        snprintf(from, sizeof from, "%s/%s", code_dir, e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 3, ".py") || stat(from, &sb) || !S_ISREG(sb.st_mode))
            continue;
        snprintf(to, sizeof to, "%s/%s", out, e->d_name);
        if (copy_file(from, to) != 0) {
            closedir(d);
            return -1;
        }
        n++;
    }
    closedir(d);
    if (n == 0)
        fprintf(stderr, "error: convert --to hf: --hf-code-dir %s: no .py file (expected MegaDLMs' "
                        "configuration_dlm.py and modeling_dlm.py)\n", code_dir);
    return n ? n : -1;
}

int difflm_write_export(const char *out, const transformer_config *c, const megadlm_args *a,
                        ckpt_precision p, out_set *o, const difflm_export_opts *eo) {
    const int num_output_shards = eo->num_output_shards;
    const st_dtype dt = ckpt_precision_dtype(p);
    for (int i = 0; i < o->n; i++)
        o->d[i] = (st_tensor_desc){.name = o->names[i], .dtype = dt,
                                   .ndim = o->shapes[i][1] ? 2 : 1, .shape = o->shapes[i],
                                   .from_f32 = o->bufs[i]};
    int *shard_of = xcalloc((size_t)o->n, sizeof *shard_of, "the shard of each tensor");
    const uint64_t inv_freq = (uint64_t)c->num_layers * (uint64_t)(c->kv_channels / 2);
    const int shards = difflm_plan_shards(o->n, (const int64_t(*)[2])o->shapes, inv_freq,
                                          st_dtype_size(dt), num_output_shards, shard_of);
    int rc = write_shards(out, o, shard_of, shards, dt);
    free(shard_of);
    const int eos = rc == 0 ? eod_id(a) : -1;
    if (rc == 0) {
        cJSON *j = difflm_config(c, a, p, eos);
        rc = write_json_file(out, "config.json", j);
        cJSON_Delete(j);
    }
    if (rc == 0) rc = write_generation_config(out, eos);
    if (rc == 0) rc = copy_tokenizer(out, a);
    if (rc == 0 && eo->code_dir) rc = copy_code(out, eo->code_dir) < 0 ? -1 : 0;
    if (rc == 0 && !eo->code_dir)
        fprintf(stderr, "[DiffLM export: %d weight file%s; copy configuration_dlm.py and "
                        "modeling_dlm.py from MegaDLMs' tools/weights_conversion/hf_configs/"
                        "gptneox_1.7b_dlm into %s for trust_remote_code (or give --hf-code-dir)]\n",
                shards, shards == 1 ? "" : "s", out);
    return rc;
}
