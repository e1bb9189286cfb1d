#include "training/model_provider.h"

#include <string.h>

#include "core/parallel_state.h"
#include "training/difflm.h"

/* The mixture-of-experts fields (arguments.def's moe group, validated by args_validate_moe):
 * Megatron's None (0, or a negative float) is moe_config's "none" of each field. A dense model
 * (no --num-experts) leaves moe_config all zero. */
static void moe_config_from_args(const megadlm_args *a, moe_config *m) {
    if (a->num_experts <= 0) return;
    m->num_experts = a->num_experts;
    m->ffn_hidden_size = a->moe_ffn_hidden_size;
    m->shared_expert_size = a->moe_shared_expert_intermediate_size; /* 0: none */
    m->topk = a->moe_router_topk;
    m->pre_softmax = a->moe_router_pre_softmax;
    m->topk_scaling_factor = a->moe_router_topk_scaling_factor; /* <= 0: none */
    m->topk_limited_devices = a->moe_router_topk_limited_devices; /* 0: none */
    switch (ARGS_CHOICE(a, moe_router_load_balancing_type)) {
    case ARGS_MOE_LB_SEQ_AUX_LOSS: m->load_balancing = MOE_LB_SEQ_AUX_LOSS; break;
    case ARGS_MOE_LB_SINKHORN: m->load_balancing = MOE_LB_SINKHORN; break;
    case ARGS_MOE_LB_NONE: m->load_balancing = MOE_LB_NONE; break;
    default: m->load_balancing = MOE_LB_AUX_LOSS; /* the expert-choice ones: refused */
    }
    m->aux_loss_coeff = a->moe_aux_loss_coeff;
    m->z_loss_coeff = a->moe_z_loss_coeff;         /* < 0: none */
    m->input_jitter_eps = a->moe_input_jitter_eps; /* <= 0: none */
    m->dispatcher = ARGS_CHOICE(a, moe_token_dispatcher_type) == ARGS_MOE_DISPATCHER_ALLTOALL
                        ? MOE_DISPATCHER_ALLTOALL
                        : MOE_DISPATCHER_ALLGATHER; /* alltoall_seq: refused */
    m->capacity_factor = a->moe_expert_capacity_factor; /* < 0: none (dropless) */
    m->pad_to_capacity = a->moe_pad_expert_input_to_capacity;
    m->drop_policy = ARGS_CHOICE(a, moe_token_drop_policy) == ARGS_MOE_DROP_POSITION
                         ? MOE_DROP_POSITION
                         : MOE_DROP_PROBS;
    m->grouped_gemm = a->moe_grouped_gemm;
    m->shared_expert_overlap = a->moe_shared_expert_overlap;
    m->layer_recompute = a->moe_layer_recompute;
    /* validation parsed the pattern already: it cannot fail here (if it did, no MoE layer) */
    char err[512];
    if (args_moe_layer_pattern(a->moe_layer_freq, a->num_layers, &m->layer_freq, m->pattern, err,
                               sizeof err) != 0) {
        m->layer_freq = 0;
        memset(m->pattern, 0, sizeof m->pattern);
    }
    m->ep_size = a->expert_model_parallel_size;
    /* this rank's place in the expert-parallel group (parallel_setup_expert_groups) */
    m->ep_rank = m->ep_size > 1 ? parallel_get()->ep_rank : 0;
}

transformer_config model_config_from_args(const megadlm_args *a) {
    transformer_config c;
    memset(&c, 0, sizeof(c));
    /* the flags with a field of the same name (arguments.def's COPY entries) */
#define ARG_FLAG(field, type, deflt, check, config, ...) ARGS_COPY_##config(c.field = a->field;)
#define ARG_FIELD(field, type, deflt, check, config) ARGS_COPY_##config(c.field = a->field;)
#include "training/arguments.def"
    /* the converted ones (CODE) */
    c.normalization =
        ARGS_CHOICE(a, normalization) == ARGS_NORM_RMSNORM ? NORM_RMSNORM : NORM_LAYERNORM;
    /* Megatron-core: the fused bias-GELU (tanh approximation) when bias_gelu_fusion holds,
     * --openai-gelu is the tanh form too; otherwise torch's exact erf GELU. */
    c.gelu = (a->openai_gelu || a->bias_gelu_fusion) ? GELU_TANH : GELU_ERF;
    /* masked diffusion pads its seq-length - 1 tokens to what CP / SP split evenly */
    c.seq_length = difflm_model_length(a);
    c.rope = ARGS_CHOICE(a, position_embedding_type) == ARGS_PE_ROPE;
    c.rot_dim = (int)(a->kv_channels * a->rotary_percent);
    /* MegaDLMs: vanilla runs causal_bottom_right whatever --attention-mask-type says
     * (vanilla_forward); difflm-noshift and test-forward run the type given, where
     * causal_bottom_right and causal are one mask for self-attention (queries and keys the same
     * length) and no_mask is bidirectional */
    c.causal = ARGS_CHOICE(a, model_running_mode) == ARGS_MODE_VANILLA ||
               ARGS_CHOICE(a, attention_mask_type) != ARGS_MASK_NO_MASK;
    /* difflm-noshift drops the first token and looks up learned positions from 1 (MegaDLMs'
     * unshift keeps position_ids[:, 1:]); RoPE starts at 0 either way */
    c.position_offset =
        ARGS_CHOICE(a, model_running_mode) == ARGS_MODE_DIFFLM_NOSHIFT && !c.rope ? 1 : 0;
    c.packed_docs = a->reset_position_ids || a->reset_attention_mask;
    if (ARGS_CHOICE(a, recompute_granularity) == ARGS_RECOMPUTE_SELECTIVE)
        c.recompute_granularity = RECOMPUTE_SELECTIVE;
    else if (ARGS_CHOICE(a, recompute_granularity) == ARGS_RECOMPUTE_FULL)
        c.recompute_granularity = RECOMPUTE_FULL;
    c.recompute_method = ARGS_CHOICE(a, recompute_method) == ARGS_RECOMPUTE_BLOCK
                             ? RECOMPUTE_BLOCK
                             : RECOMPUTE_UNIFORM;
    /* this process's place in the tensor-parallel group (set up by parallel_setup_groups) */
    c.tp_size = a->tensor_model_parallel_size;
    c.tp_rank = c.tp_size > 1 ? parallel_get()->tp_rank : 0;
    c.sequence_parallel = a->sequence_parallel && c.tp_size > 1;
    c.tp_comm_overlap = a->tp_comm_overlap && c.sequence_parallel;
    c.tp_comm_overlap_num_splits = args_sp_pieces(a);
    c.cp_size = a->context_parallel_size;
    c.cp_rank = c.cp_size > 1 ? parallel_get()->cp_rank : 0;
    c.cp_ring = c.cp_size > 1 && ARGS_CHOICE(a, cp_comm_type) == ARGS_CP_COMM_P2P;
    c.cp_a2a = c.cp_size > 1 && ARGS_CHOICE(a, cp_comm_type) == ARGS_CP_COMM_A2A;
    c.pp_size = a->pipeline_model_parallel_size;
    c.pp_rank = c.pp_size > 1 ? parallel_get()->pp_rank : 0;
    c.vp_size = a->virtual_pipeline_model_parallel_size; /* 0: no interleaving */
    moe_config_from_args(a, &c.moe);
    return c;
}

double model_flops_per_iteration(const megadlm_args *a, int64_t batch_size) {
    double h = a->hidden_size, s = a->seq_length, L = a->num_layers;
    double heads = a->num_attention_heads, groups = a->num_query_groups;
    double q_ratio = (double)a->kv_channels * heads / h;
    double gated = a->swiglu ? 1.5 : 1.0;
    /* MegaDLMs' MoE terms: every layer's MLP at --ffn-hidden-size times the experts a token is
     * routed to, plus the shared expert (its formula counts neither --moe-layer-freq nor
     * --moe-ffn-hidden-size nor the router: the numbers it logs) */
    double routed_to = a->num_experts > 0 ? a->moe_router_topk : 1.0;
    double shared = a->num_experts > 0 ? a->moe_shared_expert_intermediate_size : 0.0;
    return 12.0 * (double)batch_size * s * L * h * h *
           ((1.0 + groups / heads + s / h) * q_ratio + (a->ffn_hidden_size / h) * routed_to * gated +
            (shared / h) * gated + a->padded_vocab_size / (2.0 * L * h));
}
