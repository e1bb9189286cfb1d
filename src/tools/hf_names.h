/* The Hugging Face name maps of `megadlm convert` (docs/CHECKPOINT.md, "Hugging Face
 * interchange"): one declarative table per layout, each row one HF tensor: its name, the
 * megadlm (Megatron) parameter it comes from, the operation between the two layouts and the
 * HF shape. The same table drives --to hf (hf_names_export), --from hf (hf_names_import) and
 * MegaDLMs' DiffLM export, so the directions cannot drift apart. The row order is the order
 * transformers' state_dict lists the tensors in (for DiffLM it decides the shards). */
#ifndef MEGADLM_TOOLS_HF_NAMES_H
#define MEGADLM_TOOLS_HF_NAMES_H

#include "core/models/gpt_param_table.h"
#include "tools/hf_io.h"

/* How an HF tensor is made of a megadlm parameter (and back). */
typedef enum {
    HF_COPY,       /* the same values in the same layout */
    HF_GLU_CHUNK,  /* chunk `part` of Megatron's stacked SwiGLU linear_fc1 rows [gate; up]
                      (MegaDLMs' convert_ffn: 0 gate_proj, 1 up_proj) */
    HF_TRANSPOSE,  /* GPT-2's Conv1D weight [in, out] = the linear weight [out, in] transposed */
    HF_QKV_PART,   /* q_proj / k_proj / v_proj (part 0 / 1 / 2): that part's rows, head by head,
                      out of Megatron's grouped linear_qkv layout (core/kernels/qkv_layout.h) */
    HF_QKV_CONV1D, /* GPT-2's c_attn: the grouped linear_qkv rows as Conv1D columns q | k | v
                      (weight [h, 3h] transposed; bias [3h]) */
} hf_op;

/* The sizes an HF shape is written in. */
typedef enum {
    HF_DIM_NONE = 0, /* no second dimension: a 1-D tensor */
    HF_DIM_H,        /* hidden_size */
    HF_DIM_3H,       /* 3 x hidden_size (GPT-2's fused q | k | v) */
    HF_DIM_V,        /* padded_vocab_size */
    HF_DIM_POS,      /* max_position_embeddings */
    HF_DIM_FFN,      /* ffn_hidden_size */
    HF_DIM_HEAD,     /* kv_channels (the q/k norms' width) */
    HF_DIM_Q,        /* num_attention_heads x kv_channels */
    HF_DIM_KV,       /* num_query_groups x kv_channels */
    HF_DIM_EXPERTS,  /* --num-experts (the router's rows) */
    HF_DIM_MOE_FFN,  /* a routed expert's ffn size (--moe-ffn-hidden-size) */
} hf_dim;

/* When a row applies (0: always). */
enum {
    HF_IF_QK_NORM = 1,     /* --qk-layernorm (Qwen3's q_norm / k_norm) */
    HF_IF_UNTIED = 2,      /* --untie-embeddings-and-output-weights */
    HF_IF_TIED_EXPORT = 4, /* tied embeddings, --to hf only (DiffLM's lm_head holds the
                              embedding; --from hf reads a tied model without it) */
    HF_IF_DENSE_LAYER = 8, /* the layer's MLP is dense (every layer of a dense model) */
    HF_IF_MOE_LAYER = 16,  /* the layer is an MoE layer (tc_moe_layer) */
    HF_PER_EXPERT = 32,    /* once per routed expert: the '#' of both names is the expert's
                              index; a run of such rows is walked expert by expert (HF's order:
                              experts.0's tensors, then experts.1's) */
};

typedef struct {
    const char *hf; /* HF name (a layer row: after the family's layer prefix and index) */
    const char *mg; /* megadlm's parameter name (a layer row: after "decoder.layers.N.") */
    hf_op op;
    int part;       /* HF_GLU_CHUNK's chunk, HF_QKV_PART's part */
    hf_dim d0, d1;  /* the HF tensor's shape [d0] (d1 HF_DIM_NONE) or [d0, d1] */
    int when;       /* HF_IF_* */
} hf_name_row;

/* A family's map: the rows before the layers, each layer's, the rows after them. */
typedef struct {
    const char *name;         /* for messages */
    const char *layer_prefix; /* the HF name of layer N's rows: prefix, N, ".", row name */
    const hf_name_row *pre, *layer, *post;
    int n_pre, n_layer, n_post;
} hf_name_map;

/* transformers' GPT2LMHeadModel; LlamaForCausalLM and Qwen3ForCausalLM (q_norm / k_norm with
 * --qk-layernorm); Qwen3MoeForCausalLM (modeling_qwen3_moe.py: its MoE layers' gate and
 * per-expert MLPs, its dense layers Qwen3's MLP); MegaDLMs' DiffLM (modeling_dlm.py). */
extern const hf_name_map HF_MAP_GPT2, HF_MAP_LLAMA, HF_MAP_QWEN3_MOE, HF_MAP_DIFFLM;

/* Appends every HF tensor of map m, in its order, made from the whole model's parameters ps. */
void hf_names_export(const hf_name_map *m, const transformer_config *c, const param_set *ps,
                     out_set *o);
/* Reads every HF tensor of map m from sh into ps: 0, or -1 with a message on stderr naming the
 * first tensor (in the map's order) that is missing or misshapen. */
int hf_names_import(const hf_name_map *m, const transformer_config *c, param_set *ps,
                    const hf_shards *sh);

#endif
