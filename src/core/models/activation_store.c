#include "core/models/activation_store.h"

#include <stdlib.h>

#include "core/models/gpt_model.h"
#include "core/tensor/memory.h"
#include "core/util/alloc.h"
#include "core/util/die.h"

activation_store *activation_store_create(const gpt_model *m, int checkpointed) {
    activation_store *s = xcalloc(1, sizeof(activation_store), "activation store");
    s->head_rows = -1;
    s->cfg = m->cfg;
    s->cfg.vp_rank = 0;
    s->cfg.recompute_store_unchecked = !checkpointed;
    s->max_batch = m->max_batch;
    s->num_chunks = m->num_chunks;
    const transformer_config *c = &s->cfg;
    block_activations_alloc(&s->block, c, m->max_batch, tc_seq_local(c), &m->block);
    s->input = s->block.hidden[0];
    s->output = s->block.hidden[s->block.num_layers];
    s->grad = m->dres;
    s->stage_floats = m->block.hidden_floats;

    size_t N = (size_t)m->max_batch * tc_seq_local(c), C = c->hidden_size, V = tc_vocab_local(c);
    size_t Ns = tc_tokens_local(c, (int)N);
    s->tokens = mem_alloc(MEM_OTHER, N * sizeof(int), "tokens");
    s->labels = mem_alloc(MEM_OTHER, N * sizeof(int), "labels");
    s->loss_mask = mem_alloc_floats(MEM_OTHER, N, "loss mask");
    if (!tc_last_rank(c)) return s; /* (interleaved: every store may hold the last chunk) */
    s->lnf = mem_alloc_floats(MEM_ACTIVATIONS, Ns * C, "final norm output");
    if (c->normalization == NORM_LAYERNORM)
        s->lnf_mean = mem_alloc_floats(MEM_ACTIVATIONS, Ns, "final norm mean");
    s->lnf_rstd = mem_alloc_floats(MEM_ACTIVATIONS, Ns, "final norm rstd");
    /* masked diffusion: the head runs its rows in chunks, the logits buffer holds one */
    s->logits_rows = gpt_head_logits_rows((int)N, m->logits_in_chunks);
    s->logits = mem_alloc_floats(MEM_ACTIVATIONS, (size_t)s->logits_rows * V, "logits");
    s->losses = mem_alloc_floats(MEM_ACTIVATIONS, N, "per-token loss");
    s->lse = mem_alloc_floats(MEM_ACTIVATIONS, N, "logsumexp");
    return s;
}

void activation_store_free(activation_store *s) {
    if (!s) return;
    block_activations_free(&s->block);
    void *bufs[] = {s->tokens, s->labels, s->loss_mask, s->lnf,   s->lnf_mean,
                    s->lnf_rstd, s->logits, s->losses,  s->lse};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) mem_free(bufs[i]);
    free(s);
}

void activation_store_set_chunk(activation_store *s, int chunk) {
    if (chunk < 0 || chunk >= s->num_chunks)
        die(1, "internal error: model chunk %d of %d", chunk, s->num_chunks);
    s->cfg.vp_rank = chunk;
}

size_t activation_store_layer_saved_bytes(const activation_store *s, int l) {
    return block_activations_layer_saved_bytes(&s->block, l);
}
