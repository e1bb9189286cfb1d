/* `megadlm convert`: Hugging Face checkpoint interchange (docs/CHECKPOINT.md, "Hugging Face
 * interchange").
 *
 *   megadlm convert --to hf DIR OUT      the latest checkpoint of DIR -> OUT/config.json and
 *                                        OUT/model.safetensors (the checkpoint's dtype: F32,
 *                                        BF16 from --bf16 runs) in transformers' layout:
 *                                        GPT2LMHeadModel, LlamaForCausalLM, Qwen3ForCausalLM,
 *                                        or Qwen3MoeForCausalLM for mixture-of-experts models
 *   megadlm convert --from hf IN OUT     IN/config.json + IN/model.safetensors -> a megadlm
 *                                        checkpoint OUT/iter_0000000 (zero AdamW moments)
 *
 * Masked-diffusion models (difflm-noshift) go to and come from MegaDLMs' DiffLM layout
 * (convert_difflm.c), sharded or not.
 *
 * Only models whose every part exists in the target architecture are converted; anything else
 * is refused with a message naming what does not fit. The vocabulary is the padded one: HF's
 * vocab_size is megadlm's padded_vocab_size (the padding rows are kept). */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "core/util/alloc.h"
#include "core/models/gpt_param_table.h"
#include "core/tensor/memory.h"
#include "core/tensor/safetensors.h"
#include "core/util/io.h"
#include "core/util/parse.h"
#include "tools/convert_difflm.h"
#include "tools/hf_io.h"
#include "tools/hf_names.h"
#include "tools/json_fields.h"
#include "tools/tools.h"
#include "training/arguments.h"
#include "training/checkpoint_files.h"
#include "training/model_provider.h"
#include "training/theoretical_memory.h"
#include "training/tokenizer/tokenizer.h"

typedef enum { FAM_NONE = 0, FAM_GPT2, FAM_LLAMA, FAM_QWEN3, FAM_QWEN3_MOE, FAM_DIFFLM } hf_family;

/* The class transformers builds for family f (config.json's architectures), and its model_type. */
static const char *family_arch(hf_family f) {
    return f == FAM_GPT2 ? "GPT2LMHeadModel" : f == FAM_LLAMA ? "LlamaForCausalLM"
           : f == FAM_QWEN3 ? "Qwen3ForCausalLM" : f == FAM_QWEN3_MOE ? "Qwen3MoeForCausalLM"
           : "DiffLM";
}
static const char *family_type(hf_family f) {
    return f == FAM_GPT2 ? "gpt2" : f == FAM_LLAMA ? "llama" : f == FAM_QWEN3 ? "qwen3"
           : f == FAM_QWEN3_MOE ? "qwen3_moe" : "DiffLM";
}

/* ------------------------------------------------------------------ the layouts */

/* What of an MoE model does not fit Qwen3MoeForCausalLM: NULL when everything maps. Its router
 * is a softmax over all E, the top k, renormalised over those k with norm_topk_prob: Megatron's
 * post-softmax top-k (the softmax of the k largest logits, the same values); without
 * norm_topk_prob Megatron's --moe-router-pre-softmax (no scaling). Every token reaches its k
 * experts. What acts in training only (the balancing losses, the z-loss) does not matter here;
 * what changes an evaluation forward does. */
static const char *moe_misfit(const transformer_config *c) {
    const moe_config *m = &c->moe;
    if (!c->qk_layernorm)
        return "an MoE model without --qk-layernorm (Qwen3MoeForCausalLM, the Hugging Face MoE "
               "layout megadlm writes, always applies q_norm / k_norm)";
    if (m->shared_expert_size > 0)
        return "--moe-shared-expert-intermediate-size (Qwen3-MoE has no shared expert; "
               "Qwen2-MoE's is gated by a sigmoid, megadlm's is not)";
    if (m->load_balancing == MOE_LB_SINKHORN)
        return "--moe-router-load-balancing-type sinkhorn (Qwen3-MoE routes by softmax top-k)";
    if (m->topk_scaling_factor > 0.0f && m->topk_scaling_factor != 1.0f)
        return "--moe-router-topk-scaling-factor (Qwen3-MoE does not scale the gates)";
    if (m->capacity_factor >= 0.0f)
        return "--moe-expert-capacity-factor (Qwen3-MoE is dropless: every token reaches its k "
               "experts)";
    if (m->topk_limited_devices > 0)
        return "--moe-router-topk-limited-devices (Qwen3-MoE chooses among all experts)";
    if (m->input_jitter_eps > 0.0f)
        return "--moe-input-jitter-eps (megadlm jitters the router's input in evaluation too, as "
               "Megatron does; Qwen3-MoE has no jitter)";
    return NULL;
}

/* What of the model does not fit family f: NULL when everything maps. */
static const char *misfit(const transformer_config *c, const megadlm_args *a, hf_family f) {
    if (!c->causal || c->position_offset)
        return "bidirectional attention / difflm-noshift (Hugging Face causal LMs are causal)";
    if (f == FAM_GPT2) {
        if (c->normalization != NORM_LAYERNORM) return "RMSNorm (GPT-2 uses LayerNorm)";
        if (c->rope) return "RoPE (GPT-2 has learned absolute positions)";
        if (c->swiglu) return "SwiGLU (GPT-2's MLP is GELU)";
        if (c->gelu != GELU_TANH)
            return "the exact erf GELU (GPT-2's gelu_new is the tanh approximation)";
        if (!c->add_bias_linear) return "--disable-bias-linear (GPT-2's linears have biases)";
        if (c->untie_embeddings_and_output_weights)
            return "--untie-embeddings-and-output-weights (GPT-2's lm_head is tied)";
        if (c->qk_layernorm) return "--qk-layernorm (GPT-2 has none)";
        if (c->num_query_groups != c->num_attention_heads)
            return "grouped-query attention (GPT-2 is multi-head)";
        if (c->kv_channels * c->num_attention_heads != c->hidden_size)
            return "kv_channels * heads != hidden_size (GPT-2's head size is hidden/heads)";
        return NULL;
    }
    if (c->normalization != NORM_RMSNORM) return "LayerNorm (Llama/Qwen3 use RMSNorm)";
    if (!c->rope) return "learned absolute positions (Llama/Qwen3 use RoPE)";
    if (a->rotary_percent != 1.0f || c->rot_dim != c->kv_channels)
        return "--rotary-percent != 1 (Llama/Qwen3 rotate the whole head)";
    if (!c->swiglu) return "a GELU MLP (Llama/Qwen3 use SwiGLU)";
    if (c->add_bias_linear) return "biases in the linear layers (Llama/Qwen3 have none)";
    if (c->add_qkv_bias) return "--add-qkv-bias (Llama/Qwen3's attention has no bias)";
    return f == FAM_QWEN3_MOE ? moe_misfit(c) : NULL;
}

/* The whole model's tensors (core/models/gpt_param_table.h) over buffers of their own: the
 * parameters, and with_moments AdamW's two moments (zero); no model, no activations. */
static void whole_params_alloc(const transformer_config *c, int with_moments, gpt_param_table *spec,
                               param_set *ps) {
    gpt_param_table_whole(c, spec);
    *ps = spec->params;
    ps->data = mem_alloc_floats(MEM_PARAMS, ps->numel, "parameters");
    if (with_moments) {
        ps->exp_avg = mem_alloc_floats(MEM_OPTIMIZER, ps->numel, "adam exp_avg");
        ps->exp_avg_sq = mem_alloc_floats(MEM_OPTIMIZER, ps->numel, "adam exp_avg_sq");
    }
}

static void whole_params_free(gpt_param_table *spec, param_set *ps) {
    mem_free(ps->data);
    mem_free(ps->exp_avg);
    mem_free(ps->exp_avg_sq);
    gpt_param_table_free(spec);
}

/* The name map of family f (hf_names.h): Qwen3 is Llama's with q_norm / k_norm. */
static const hf_name_map *name_map(hf_family f) {
    return f == FAM_GPT2 ? &HF_MAP_GPT2 : f == FAM_DIFFLM ? &HF_MAP_DIFFLM
           : f == FAM_QWEN3_MOE ? &HF_MAP_QWEN3_MOE : &HF_MAP_LLAMA;
}

/* Qwen3MoeConfig's MoE keys. Its layer l is sparse when l is not in mlp_only_layers and
 * (l + 1) % decoder_sparse_step == 0: step 1 and the dense layers listed say any
 * --moe-layer-freq (an offset pattern such as Megatron's l % N == 0 has no step of its own).
 * router_aux_loss_coef is the balancing loss's coefficient (HF's is the Switch-Transformer
 * loss of aux_loss; with --moe-router-load-balancing-type none 0). */
static void hf_config_moe(cJSON *j, const transformer_config *c) {
    const moe_config *m = &c->moe;
    JSON_ADD(j, JNUM("num_experts", m->num_experts), JNUM("num_experts_per_tok", m->topk),
             JNUM("moe_intermediate_size", m->ffn_hidden_size),
             JBOOL("norm_topk_prob", !m->pre_softmax), JNUM("decoder_sparse_step", 1));
    cJSON *dense = cJSON_AddArrayToObject(j, "mlp_only_layers");
    for (int l = 0; l < c->num_layers; l++)
        if (!tc_moe_layer(c, l)) cJSON_AddItemToArray(dense, cJSON_CreateNumber(l));
    JSON_ADD(j, JNUM("router_aux_loss_coef", nice_float(m->load_balancing == MOE_LB_NONE
                                                            ? 0.0f : m->aux_loss_coeff)),
             JBOOL("output_router_logits", 0));
}

/* torch_dtype: the dtype of the tensors written (the checkpoint's parameters'). */
static cJSON *hf_config(const transformer_config *c, const megadlm_args *a, hf_family f,
                        ckpt_precision p) {
    cJSON *j = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(family_arch(f)));
    cJSON_AddStringToObject(j, "model_type", family_type(f));
    cJSON_AddNumberToObject(j, "vocab_size", c->padded_vocab_size);
    if (f == FAM_GPT2) {
        JSON_ADD(j, JNUM("n_positions", c->max_position_embeddings), JNUM("n_embd", c->hidden_size),
                 JNUM("n_layer", c->num_layers), JNUM("n_head", c->num_attention_heads),
                 JNUM("n_inner", c->ffn_hidden_size), JSTR("activation_function", "gelu_new"),
                 JNUM("layer_norm_epsilon", nice_float(c->norm_epsilon)),
                 JNUM("resid_pdrop", nice_float(c->hidden_dropout)),
                 JNUM("embd_pdrop", nice_float(c->hidden_dropout)),
                 JNUM("attn_pdrop", nice_float(c->attention_dropout)),
                 JBOOL("scale_attn_weights", 1), JBOOL("scale_attn_by_inverse_layer_idx", 0),
                 JBOOL("reorder_and_upcast_attn", 0));
    } else {
        JSON_ADD(j, JNUM("hidden_size", c->hidden_size),
                 JNUM("intermediate_size", c->ffn_hidden_size),
                 JNUM("num_hidden_layers", c->num_layers),
                 JNUM("num_attention_heads", c->num_attention_heads),
                 JNUM("num_key_value_heads", c->num_query_groups), JNUM("head_dim", c->kv_channels),
                 JSTR("hidden_act", "silu"),
                 JNUM("max_position_embeddings", c->max_position_embeddings),
                 JNUM("rms_norm_eps", nice_float(c->norm_epsilon)),
                 JNUM("rope_theta", nice_float(c->rotary_base)), JNULL("rope_scaling"),
                 JBOOL("attention_bias", 0),
                 JNUM("attention_dropout", nice_float(c->attention_dropout)));
        if (f == FAM_LLAMA)
            JSON_ADD(j, JBOOL("mlp_bias", 0), JNUM("pretraining_tp", 1));
        else
            JSON_ADD(j, JBOOL("use_sliding_window", 0), JNULL("sliding_window"),
                     JNUM("max_window_layers", c->num_layers));
        if (f == FAM_QWEN3_MOE) hf_config_moe(j, c);
    }
    JSON_ADD(j, JNUM("initializer_range", nice_float(c->init_method_std)),
             JBOOL("tie_word_embeddings", !c->untie_embeddings_and_output_weights),
             JSTR("torch_dtype", ckpt_precision_name(p)));
    (void)a;
    return j;
}

/* ------------------------------------------------------------------ --to hf */

static int to_hf(const char *dir, const char *out, const difflm_export_opts *eo) {
    char err[1024];
    int it;
    int rc = ckpt_read_latest(dir, &it, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "error: convert --to hf %s: %s\n", dir,
                rc == 1 ? "no latest_checkpointed_iteration.txt (not a checkpoint directory)" : err);
        return 1;
    }
    ckpt_state st = {0};
    megadlm_args a;
    args_defaults(&a);
    if (ckpt_load_state(dir, it, &st, err, sizeof err) != 0 ||
        args_from_json(&a, st.args, err, sizeof err) != 0) {
        fprintf(stderr, "error: convert --to hf %s: %s\n", dir, err);
        ckpt_state_free(&st);
        return 1;
    }
    /* the tensors are read as fp32 (a --bf16 or --fp16 run's 16-bit parameters widened
     * exactly) and written back in the dtype the checkpoint holds them in */
    args_fp32(&a);
    ckpt_state_free(&st);
    args_free(&a); /* the saved data paths are not needed here */
    /* the saved arguments were validated (derived sizes included) by the run that saved
     * them; one process. The sizes are checked again (the file may not be ours) and against
     * the tensor file before anything is allocated. */
    args_one_process(&a);
    snprintf(a.recompute_granularity, sizeof a.recompute_granularity, "%s", "");
    char model_path[PATH_MAX + 64];
    snprintf(model_path, sizeof model_path, "%s/iter_%07d/model.safetensors", dir, it);
    ckpt_precision prec;
    if (args_check_sizes(&a, err, sizeof err) != 0 ||
        ckpt_check_file_holds(model_path, theoretical_megadlm_parameter_count(&a), err,
                              sizeof err) != 0 ||
        ckpt_file_precision(model_path, &prec, err, sizeof err) != 0) {
        fprintf(stderr, "error: convert --to hf %s: state.json of iteration %d: %s\n", dir, it, err);
        args_free(&a);
        return 1;
    }
    transformer_config c = model_config_from_args(&a);
    /* an MoE model's one layout is Qwen3-MoE's: its misfits are named against it */
    hf_family f = difflm_is_model(&c, &a) ? FAM_DIFFLM
                  : tc_moe(&c) ? FAM_QWEN3_MOE
                  : (c.rope || c.normalization == NORM_RMSNORM)
                      ? (c.qk_layernorm ? FAM_QWEN3 : FAM_LLAMA)
                      : FAM_GPT2;
    const char *why = f == FAM_DIFFLM ? difflm_misfit(&c, &a) : misfit(&c, &a, f);
    if (why && f == FAM_DIFFLM) {
        fprintf(stderr, "error: convert --to hf %s: a masked-diffusion model exports as MegaDLMs' "
                        "DiffLM, which does not fit this model: %s (DiffLM needs RMSNorm, full "
                        "RoPE, SwiGLU, no biases, --qk-layernorm, --mask-token and dense "
                        "MLPs)\n", dir, why);
        return 1;
    }
    if (why) {
        fprintf(stderr, "error: convert --to hf %s: no Hugging Face architecture fits this model: "
                        "%s (GPT2LMHeadModel needs LayerNorm, learned positions, tanh GELU, "
                        "biases, tied embeddings, multi-head attention with kv_channels * heads "
                        "== hidden; LlamaForCausalLM / Qwen3ForCausalLM need RMSNorm, full RoPE, "
                        "SwiGLU, no biases; Qwen3MoeForCausalLM, for MoE models, as Qwen3 with "
                        "--qk-layernorm, no shared expert, dropless softmax top-k routing)\n",
                dir, why);
        return 1;
    }
    if (f != FAM_DIFFLM && (eo->num_output_shards != 1 || eo->code_dir)) {
        fprintf(stderr, "error: convert --to hf %s: %s: only the DiffLM export (masked-diffusion "
                        "models) takes it; this model is written as one model.safetensors for "
                        "transformers' own classes\n", dir,
                eo->code_dir ? "--hf-code-dir" : "--num-output-shards");
        return 1;
    }
    gpt_param_table spec;
    param_set ps;
    whole_params_alloc(&c, 0, &spec, &ps);
    if (ckpt_load_tensors(dir, it, &ps, 0, err, sizeof err) != 0) {
        fprintf(stderr, "error: convert --to hf: %s\n", err);
        whole_params_free(&spec, &ps);
        return 1;
    }
    out_set o = {0};
    hf_names_export(name_map(f), &c, &ps, &o);
    whole_params_free(&spec, &ps);
    if (f == FAM_DIFFLM) {
        rc = io_mkdir_p(out, 0, err, sizeof err);
        if (rc != 0) fprintf(stderr, "error: convert --to hf: %s\n", err);
        else rc = difflm_write_export(out, &c, &a, prec, &o, eo);
        out_free(&o);
        if (rc == 0)
            fprintf(stderr, "[converted %s iteration %d to %s (DiffLM, %s, vocab_size %d = the padded "
                            "vocabulary)]\n", dir, it, out, ckpt_precision_name(prec), c.padded_vocab_size);
        return rc ? 1 : 0;
    }
    for (int i = 0; i < o.n; i++) {
        int ndim = o.shapes[i][1] ? 2 : 1;
        /* 16-bit values widened and rounded back: the checkpoint's bits */
        o.d[i] = (st_tensor_desc){.name = o.names[i], .dtype = ckpt_precision_dtype(prec),
                                  .ndim = ndim, .shape = o.shapes[i], .from_f32 = o.bufs[i]};
    }
    if (io_mkdir_p(out, 0, err, sizeof err) != 0) {
        fprintf(stderr, "error: convert --to hf: %s\n", err);
        out_free(&o);
        return 1;
    }
    char path[1200];
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    st_meta meta[1] = {{"format", "pt"}};
    rc = st_write_file(path, o.d, o.n, meta, 1, err, sizeof err);
    out_free(&o);
    if (rc != 0) {
        fprintf(stderr, "error: convert --to hf: %s\n", err);
        return 1;
    }
    cJSON *j = hf_config(&c, &a, f, prec);
    char *txt = cJSON_Print(j);
    cJSON_Delete(j);
    snprintf(path, sizeof path, "%s/config.json", out);
    FILE *fp = fopen(path, "w");
    if (!fp || fprintf(fp, "%s\n", txt) < 0 || fclose(fp) != 0) {
        fprintf(stderr, "error: convert --to hf: cannot write %s: %s\n", path, strerror(errno));
        free(txt);
        return 1;
    }
    free(txt);
    fprintf(stderr, "[converted %s iteration %d to %s (%s, %s, vocab_size %d = the padded vocabulary)]\n",
            dir, it, out, family_arch(f), ckpt_precision_name(prec), c.padded_vocab_size);
    return 0;
}

/* ------------------------------------------------------------------ --from hf */

typedef struct {
    tokenizer_options tok; /* the tokenizer flags (train's names) */
    int divisible_by, seq_length;
} from_opts;

static int jint(const cJSON *j, const char *key, int *v, const char *file, int required) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!x || cJSON_IsNull(x)) {
        if (required) fprintf(stderr, "error: convert --from hf: %s: missing \"%s\"\n", file, key);
        return required ? -1 : 1;
    }
    if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < 0) {
        fprintf(stderr, "error: convert --from hf: %s: \"%s\" is not a non-negative integer\n", file, key);
        return -1;
    }
    if (x->valuedouble > INT_MAX) { /* before the conversion, which would be undefined */
        fprintf(stderr, "error: convert --from hf: %s: \"%s\" is %.17g, beyond %d\n", file, key,
                x->valuedouble, INT_MAX);
        return -1;
    }
    *v = (int)x->valuedouble;
    return 0;
}
static int jnum(const cJSON *j, const char *key, double *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!x || !cJSON_IsNumber(x)) return 1;
    *v = x->valuedouble;
    return 0;
}
static int jtrue(const cJSON *j, const char *key) {
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, key));
}
static const char *jstr(const cJSON *j, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

/* config.json as a JSON object, or NULL with why in err: cannot open or read it (the system's
 * reason), or not valid JSON (the byte where parsing stopped), or not an object. */
static cJSON *read_json(const char *path, char *err, size_t errlen) {
    size_t got;
    int open_failed;
    const char *why;
    char *buf = io_read_file(path, &got, &open_failed, &why);
    if (!buf) {
        snprintf(err, errlen, "cannot read it: %s", why);
        return NULL;
    }
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(buf, got, &end, 0);
    if (!j)
        snprintf(err, errlen, "not valid JSON (parsing stopped at byte %ld)",
                 end ? (long)(end - buf) : 0L);
    else if (!cJSON_IsObject(j))
        snprintf(err, errlen, "expected a JSON object");
    free(buf);
    if (j && !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        j = NULL;
    }
    return j;
}

static int from_hf_shards(const char *in, cJSON *j, hf_family f, const hf_shards *sh,
                          const char *out, const from_opts *op);

/* Hugging Face MoE layouts megadlm's MoE layer cannot compute, and why (NULL: not one of them). */
static const char *moe_layout_refused(const char *model_type) {
    if (!strcmp(model_type, "olmoe"))
        return "OLMoE's q_norm / k_norm are RMSNorms over the whole q / k projection (heads x "
               "head_dim); megadlm's --qk-layernorm, Megatron's, normalises each head on its own";
    if (!strcmp(model_type, "qwen2_moe"))
        return "Qwen2-MoE's shared expert is gated by sigmoid(shared_expert_gate(x)); megadlm's "
               "shared expert (Megatron's) is added ungated";
    return NULL;
}

static int from_hf(const char *in, const char *out, const from_opts *op) {
    char path[1200], err[1024];
    int rc;
    snprintf(path, sizeof path, "%s/config.json", in);
    cJSON *j = read_json(path, err, sizeof err);
    if (!j) {
        fprintf(stderr, "error: convert --from hf: %s: %s\n", path, err);
        return 1;
    }
    const char *mt = jstr(j, "model_type");
    hf_family f = FAM_NONE;
    for (hf_family g = FAM_GPT2; g < FAM_DIFFLM; g++)
        if (mt && !strcmp(mt, family_type(g))) f = g;
    const char *moe_why = mt ? moe_layout_refused(mt) : NULL;
    if (moe_why) {
        fprintf(stderr, "error: convert --from hf: %s: model_type \"%s\" does not map to megadlm: "
                        "%s\n", path, mt, moe_why);
        cJSON_Delete(j);
        return 1;
    }
    /* MegaDLMs' DiffLM: no model_type (DLMConfig has none), architectures ["DiffLM"] */
    const cJSON *arch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "architectures"), 0);
    if (f == FAM_NONE && cJSON_IsString(arch) && !strcmp(arch->valuestring, "DiffLM")) f = FAM_DIFFLM;
    if (f == FAM_NONE) {
        fprintf(stderr, "error: convert --from hf: %s: model_type %s%s%s: expected gpt2, llama, qwen3 "
                        "or qwen3_moe (or architectures [\"DiffLM\"], MegaDLMs' export)\n",
                path, mt ? "\"" : "", mt ? mt : "missing", mt ? "\"" : "");
        cJSON_Delete(j);
        return 1;
    }
    hf_shards sh;
    if (hf_shards_open(in, &sh, err, sizeof err) != 0) {
        fprintf(stderr, "error: convert --from hf: %s\n", err);
        cJSON_Delete(j);
        return 1;
    }
    rc = from_hf_shards(in, j, f, &sh, out, op);
    hf_shards_close(&sh);
    return rc;
}

/* MegaDLMs' DiffLM export always holds lm_head.weight (tie_word_embeddings false); a tied
 * megadlm model's export holds the embedding there, so lm_head bit for bit equal to
 * embed_tokens reads back as a tied model. */
static int difflm_tied(const cJSON *j, const hf_shards *sh) {
    if (jtrue(j, "tie_word_embeddings")) return 1;
    const st_entry *e = hf_find(sh, "model.embed_tokens.weight", NULL),
                   *l = hf_find(sh, "lm_head.weight", NULL);
    if (!e || !l) return 0; /* read as untied: the missing tensor is then named */
    return e->dtype == l->dtype && e->ndim == l->ndim && e->numel == l->numel &&
           !memcmp(e->shape, l->shape, sizeof e->shape) &&
           !memcmp(e->data, l->data, e->numel * st_dtype_size(e->dtype));
}

/* The model part of a DiffLM config.json (the Llama keys read by the caller). */
static const char *difflm_from_config(const cJSON *j, const hf_shards *sh, const char *path,
                                      megadlm_args *a, int *rc) {
    snprintf(a->model_running_mode, sizeof a->model_running_mode, "%s",
             args_choice_name(ARGS_MODE_DIFFLM_NOSHIFT));
    const char *mask = jstr(j, "attn_mask_type");
    /* DLMConfig's default is bidirectional; anything else makes DLMAttention causal */
    snprintf(a->attention_mask_type, sizeof a->attention_mask_type, "%s",
             !mask || !strcmp(mask, "bidirectional") ? "no_mask" : "causal");
    if (jint(j, "mask_token_id", &a->mask_token, path, 1)) *rc = -1;
    a->qk_layernorm = 1; /* DLMAttention always has q_norm / k_norm */
    a->untie_embeddings_and_output_weights = !difflm_tied(j, sh);
    if (jtrue(j, "use_mrope")) return "use_mrope (megadlm's RoPE is one-dimensional)";
    return NULL;
}

/* The MoE part of a Qwen3-MoE config.json (Qwen3MoeConfig's keys; its defaults where a key is
 * absent), after the Qwen3 keys (num_layers known). See hf_config_moe for the layer rule; HF's
 * set of sparse layers becomes an --moe-layer-freq list (any set is one). norm_topk_prob is
 * Megatron's post-softmax top-k, its absence --moe-router-pre-softmax. A model without a sparse
 * layer (num_experts 0, or every layer in mlp_only_layers) is Qwen3MoeMLP throughout: a dense
 * model. */
static const char *qwen3_moe_from_config(const cJSON *j, const char *path, megadlm_args *a,
                                         int *rc) {
    int E = 0, k = 0, F = 0, step = 1, L = a->num_layers;
    if (jint(j, "num_experts", &E, path, 1) || jint(j, "num_experts_per_tok", &k, path, 1) ||
        jint(j, "moe_intermediate_size", &F, path, 1) ||
        jint(j, "decoder_sparse_step", &step, path, 0) < 0) {
        *rc = -1;
        return NULL;
    }
    if (step < 1) return "decoder_sparse_step 0 (Qwen3MoeDecoderLayer divides by it)";
    if (L > MOE_MAX_PATTERN_LAYERS)
        return "num_hidden_layers beyond the 1024 entries of an --moe-layer-freq list";
    _Static_assert(MOE_MAX_PATTERN_LAYERS == 1024, "the message above names the limit");
    int sh = 0;
    if (jint(j, "shared_expert_intermediate_size", &sh, path, 0) < 0) *rc = -1;
    if (sh > 0) return "shared_expert_intermediate_size (a shared expert: not Qwen3-MoE's)";
    uint8_t sparse[MOE_MAX_PATTERN_LAYERS];
    for (int l = 0; l < L; l++) sparse[l] = E > 0 && (l + 1) % step == 0;
    const cJSON *dense = cJSON_GetObjectItemCaseSensitive(j, "mlp_only_layers"), *x;
    if (dense && !cJSON_IsNull(dense) && !cJSON_IsArray(dense))
        return "mlp_only_layers is not a list of layer indices";
    cJSON_ArrayForEach(x, dense) {
        if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble))
            return "mlp_only_layers holds something other than layer indices";
        /* HF tests membership: an index outside the layers changes nothing */
        if (x->valuedouble >= 0 && x->valuedouble < L) sparse[(int)x->valuedouble] = 0;
    }
    int n_sparse = 0;
    for (int l = 0; l < L; l++) n_sparse += sparse[l];
    if (n_sparse == 0) return NULL; /* dense throughout */
    a->num_experts = E;
    a->moe_router_topk = k;
    a->moe_ffn_hidden_size = F;
    const int norm = jtrue(j, "norm_topk_prob");
    if (norm && k == 1)
        return "num_experts_per_tok 1 with norm_topk_prob true (every gate 1: Megatron's "
               "post-softmax top-1, which megadlm refuses as Megatron does)";
    a->moe_router_pre_softmax = !norm;
    double c;
    a->moe_aux_loss_coeff = jnum(j, "router_aux_loss_coef", &c) ? 0.001f : (float)c;
    if (n_sparse == L) {
        snprintf(a->moe_layer_freq, sizeof a->moe_layer_freq, "1");
    } else { /* the list [s0, s1, ...] */
        size_t n = 0;
        for (int l = 0; l < L; l++)
            n += (size_t)snprintf(a->moe_layer_freq + n, sizeof a->moe_layer_freq - n, "%s%d",
                                  l ? "," : "[", sparse[l]);
        snprintf(a->moe_layer_freq + n, sizeof a->moe_layer_freq - n, "]");
    }
    return NULL;
}

static int from_hf_shards(const char *in, cJSON *j, hf_family f, const hf_shards *sh,
                          const char *out, const from_opts *op) {
    char path[1200], err[1024];
    snprintf(path, sizeof path, "%s/config.json", in);
    megadlm_args a;
    args_defaults(&a);
    int V = 0, rc = 0;
    const char *why = NULL;
    double x;
    if (f == FAM_GPT2) {
        if (jint(j, "n_layer", &a.num_layers, path, 1) || jint(j, "n_embd", &a.hidden_size, path, 1) ||
            jint(j, "n_head", &a.num_attention_heads, path, 1) ||
            jint(j, "n_positions", &a.max_position_embeddings, path, 1) ||
            jint(j, "vocab_size", &V, path, 1) || jint(j, "n_inner", &a.ffn_hidden_size, path, 0) < 0)
            rc = -1;
        /* n_inner null or absent: 4 n_embd, which args_validate derives (in 64 bits) */
        const char *act = jstr(j, "activation_function");
        if (act && strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh"))
            why = "activation_function is not gelu_new (megadlm's GPT GELU is the tanh form)";
        if (jtrue(j, "scale_attn_by_inverse_layer_idx")) why = "scale_attn_by_inverse_layer_idx";
        const cJSON *saw = cJSON_GetObjectItemCaseSensitive(j, "scale_attn_weights");
        if (cJSON_IsFalse(saw)) why = "scale_attn_weights false";
        if (cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "tie_word_embeddings")))
            why = "tie_word_embeddings false";
        a.norm_epsilon = jnum(j, "layer_norm_epsilon", &x) ? 1e-5f : (float)x;
        if (!jnum(j, "resid_pdrop", &x)) a.hidden_dropout = (float)x;
        if (!jnum(j, "attn_pdrop", &x)) a.attention_dropout = (float)x;
        if (a.num_attention_heads && a.hidden_size % a.num_attention_heads)
            why = "n_embd is not a multiple of n_head";
        a.kv_channels = a.num_attention_heads ? a.hidden_size / a.num_attention_heads : 0;
        a.bias_gelu_fusion = 1; /* with biases: Megatron's fused bias-GELU, the tanh form */
    } else {
        int kvh = 0;
        if (jint(j, "num_hidden_layers", &a.num_layers, path, 1) ||
            jint(j, "hidden_size", &a.hidden_size, path, 1) ||
            jint(j, "intermediate_size", &a.ffn_hidden_size, path, 1) ||
            jint(j, "num_attention_heads", &a.num_attention_heads, path, 1) ||
            jint(j, "max_position_embeddings", &a.max_position_embeddings, path, 1) ||
            jint(j, "vocab_size", &V, path, 1) || jint(j, "num_key_value_heads", &kvh, path, 0) < 0 ||
            jint(j, "head_dim", &a.kv_channels, path, 0) < 0)
            rc = -1;
        if (!a.kv_channels && a.num_attention_heads) a.kv_channels = a.hidden_size / a.num_attention_heads;
        if (!kvh) kvh = a.num_attention_heads;
        if (kvh != a.num_attention_heads) {
            a.group_query_attention = 1;
            a.num_query_groups = kvh;
        }
        snprintf(a.position_embedding_type, sizeof a.position_embedding_type, "rope");
        snprintf(a.normalization, sizeof a.normalization, "RMSNorm");
        a.swiglu = 1;
        a.add_bias_linear = 0;
        a.untie_embeddings_and_output_weights = !jtrue(j, "tie_word_embeddings");
        a.qk_layernorm = f == FAM_QWEN3 || f == FAM_QWEN3_MOE;
        a.norm_epsilon = jnum(j, "rms_norm_eps", &x) ? 1e-6f : (float)x;
        a.rotary_base = jnum(j, "rope_theta", &x) ? 10000.0f : (float)x;
        if (!jnum(j, "attention_dropout", &x)) a.attention_dropout = (float)x;
        a.hidden_dropout = 0.0f;
        const char *act = jstr(j, "hidden_act");
        if (act && strcmp(act, "silu")) why = "hidden_act is not silu (megadlm's SwiGLU)";
        if (jtrue(j, "attention_bias")) why = "attention_bias (megadlm's Llama/Qwen3 linears have no biases)";
        if (jtrue(j, "mlp_bias")) why = "mlp_bias (megadlm's Llama/Qwen3 linears have no biases)";
        const cJSON *rs = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
        if (rs && !cJSON_IsNull(rs)) why = "rope_scaling (megadlm's RoPE is unscaled)";
        if (jtrue(j, "use_sliding_window")) why = "use_sliding_window (megadlm's attention is full)";
        if (!jnum(j, "partial_rotary_factor", &x) && x != 1.0) why = "partial_rotary_factor != 1";
        if (f == FAM_DIFFLM) {
            const char *w = difflm_from_config(j, sh, path, &a, &rc);
            if (w) why = w;
        }
        if (f == FAM_QWEN3_MOE && !rc) {
            const char *w = qwen3_moe_from_config(j, path, &a, &rc);
            if (w) why = w;
        }
    }
    if (!jnum(j, "initializer_range", &x)) a.init_method_std = (float)x;
    cJSON_Delete(j);
    if (rc) return 1;
    if (why) {
        fprintf(stderr, "error: convert --from hf %s: does not map to megadlm: %s\n", in, why);
        return 1;
    }
    a.seq_length = op->seq_length ? op->seq_length : a.max_position_embeddings;
    /* what a checkpoint's args need to validate; `megadlm train --load` takes its own */
    a.micro_batch_size = 1;
    a.train_iters = 1;
    a.lr = 1e-4f;
    if (op->divisible_by) a.make_vocab_size_divisible_by = op->divisible_by;
    const tokenizer_options *t = &op->tok;
    snprintf(a.tokenizer_type, sizeof a.tokenizer_type, "%s", t->type ? t->type : "NullTokenizer");
    if (t->vocab_file) snprintf(a.vocab_file, sizeof a.vocab_file, "%s", t->vocab_file);
    if (t->merge_file) snprintf(a.merge_file, sizeof a.merge_file, "%s", t->merge_file);
    if (t->tokenizer_model) snprintf(a.tokenizer_model, sizeof a.tokenizer_model, "%s", t->tokenizer_model);
    if (ARGS_CHOICE(&a, tokenizer_type) == ARGS_TOKENIZER_NULL) {
        /* default: ids < V-1, end-of-document V-1 (the whole HF vocabulary) */
        a.vocab_size = t->vocab_size ? t->vocab_size : V - 1;
        if (!op->divisible_by && !t->vocab_size) a.make_vocab_size_divisible_by = V % 128 ? 1 : 128;
    }
    a.mock_data = 1; /* validation needs a data source; `train --load` gives its own */
    if (args_validate(&a, err, sizeof err) != 0) {
        fprintf(stderr, "error: convert --from hf %s: the megadlm arguments from config.json: %s\n", in, err);
        return 1;
    }
    if (a.padded_vocab_size != V) {
        fprintf(stderr,
                "error: convert --from hf %s: config.json's vocab_size is %d, the tokenizer gives a "
                "padded vocabulary of %d (give --vocab-size / --make-vocab-size-divisible-by or "
                "the tokenizer flags so that they agree)\n", in, V, a.padded_vocab_size);
        return 1;
    }
    transformer_config c = model_config_from_args(&a);
    /* the files hold at least 2 bytes a parameter the config describes (checked before the
     * allocation, the config may not match the tensors) */
    uint64_t bytes = 0;
    for (int i = 0; i < sh->n; i++) bytes += sh->f[i].map_len;
    const size_t numel = theoretical_megadlm_parameter_count(&a);
    if (bytes / 2 < numel) {
        fprintf(stderr, "error: convert --from hf %s: config.json: the weight files hold %llu bytes, "
                        "too few for the %zu parameters the config describes: the configuration "
                        "does not match the tensors\n", in, (unsigned long long)bytes, numel);
        args_free(&a);
        return 1;
    }
    gpt_param_table spec;
    param_set ps;
    whole_params_alloc(&c, 1, &spec, &ps); /* the moments stay zero */
    rc = hf_names_import(name_map(f), &c, &ps, sh);
    if (rc == 0) {
        ckpt_state st = {.iteration = 0, .consumed_train_samples = 0, .optimizer_step = 0,
                         .args = args_to_json(&a)};
        rc = ckpt_save(out, &ps, &st, 1, err, sizeof err);
        cJSON_Delete(st.args);
        if (rc != 0) fprintf(stderr, "error: convert --from hf: %s\n", err);
        else
            fprintf(stderr, "[converted %s (%s) to the megadlm checkpoint %s iteration 0]\n", in,
                    family_type(f), out);
    }
    whole_params_free(&spec, &ps);
    args_free(&a);
    return rc ? 1 : 0;
}

/* ------------------------------------------------------------------ command */

static void usage(FILE *out) {
    fprintf(out,
            "usage: megadlm convert --to hf DIR OUT [--num-output-shards N] [--hf-code-dir DIR]\n"
            "       megadlm convert --from hf IN OUT [flags]\n\n"
            "  --to hf DIR OUT       the latest checkpoint of DIR -> OUT/config.json and\n"
            "                        OUT/model.safetensors (GPT2LMHeadModel, LlamaForCausalLM,\n"
            "                        Qwen3ForCausalLM, MoE models Qwen3MoeForCausalLM;\n"
            "                        vocab_size = the padded vocabulary);\n"
            "                        masked-diffusion models (difflm-noshift) as MegaDLMs'\n"
            "                        DiffLM: config.json (auto_map), generation_config.json,\n"
            "                        the weights, the HuggingFaceTokenizer's tokenizer.json\n"
            "  --num-output-shards N DiffLM: split the weights as MegaDLMs' converter's\n"
            "                        --num_output_shards N (model-0000i-of-0000M.safetensors +\n"
            "                        model.safetensors.index.json; default 1)\n"
            "  --hf-code-dir DIR     DiffLM: copy DIR's *.py files into OUT (MegaDLMs'\n"
            "                        tools/weights_conversion/hf_configs/gptneox_1.7b_dlm:\n"
            "                        configuration_dlm.py, modeling_dlm.py, which auto_map names)\n"
            "  --from hf IN OUT      IN/config.json + IN/model.safetensors (or the shards of\n"
            "                        model.safetensors.index.json) -> megadlm checkpoint\n"
            "                        OUT (iteration 0)\n"
            "flags of --from hf (the tokenizer the checkpoint's args name):\n" TOKENIZER_OPTIONS_HELP
            "                          (default: NullTokenizer with --vocab-size HF vocab_size - 1,\n"
            "                          the end-of-document id the last)\n"
            "  --make-vocab-size-divisible-by N\n"
            "  --seq-length N          (default: max_position_embeddings)\n");
}

int convert_main(int argc, char **argv) {
    from_opts op = {0};
    const char *to = NULL, *from = NULL;
    int shards = 0; /* --num-output-shards, 0: not given */
    const char *code_dir = NULL;
    static const struct option opts[] = {
        {"to", required_argument, 0, 't'},
        {"from", required_argument, 0, 'f'},
        TOKENIZER_LONG_OPTIONS,
        {"make-vocab-size-divisible-by", required_argument, 0, 'D'},
        {"seq-length", required_argument, 0, 'S'},
        {"num-output-shards", required_argument, 0, 'N'},
        {"hf-code-dir", required_argument, 0, 'C'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    optind = 1;
    int ch;
    char err[1024];
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int tflag = tokenizer_option(&op.tok, ch, optarg, err, sizeof err);
        if (tflag > 0) continue;
        /* the same check of numbers as train's flags (positive integers) */
        if (tflag == 0 && (ch == 'D' || ch == 'S' || ch == 'N') &&
            parse_int_flag(ch == 'D'   ? "--make-vocab-size-divisible-by"
                           : ch == 'S' ? "--seq-length"
                                       : "--num-output-shards",
                           optarg, 1,
                           ch == 'D' ? &op.divisible_by : ch == 'S' ? &op.seq_length : &shards,
                           err, sizeof err))
            tflag = -1;
        if (tflag < 0) {
            fprintf(stderr, "error: convert: %s\n", err);
            return 2;
        }
        switch (ch) {
        case 't': to = optarg; break;
        case 'f': from = optarg; break;
        case 'D': case 'S': case 'N': break;
        case 'C': code_dir = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if ((!to) == (!from) || argc - optind != 2) {
        fprintf(stderr, "error: convert: give exactly one of --to hf / --from hf, then two directories\n");
        usage(stderr);
        return 2;
    }
    const char *fmt = to ? to : from;
    if (strcmp(fmt, "hf")) {
        fprintf(stderr, "error: convert: format '%s': expected hf\n", fmt);
        return 2;
    }
    if (from && (shards || code_dir)) {
        fprintf(stderr, "error: convert: %s is a flag of --to hf (--from hf reads the weights "
                        "and config.json alone)\n", shards ? "--num-output-shards" : "--hf-code-dir");
        return 2;
    }
    const difflm_export_opts eo = {.num_output_shards = shards ? shards : 1, .code_dir = code_dir};
    return to ? to_hf(argv[optind], argv[optind + 1], &eo)
              : from_hf(argv[optind], argv[optind + 1], &op);
}
