/* The parameter description (core/models/gpt_param_table.h), without any buffer:
 *  - the whole model: tensor i has init_stream i, in Megatron-core's order and names;
 *  - every rank of every layout (TP, PP, interleaving; tied or untied, both model families):
 *    its tensors are whole-model tensors with their streams, names and whole shapes; the
 *    stages together hold each whole tensor exactly once (the last stage's copy of a tied
 *    embedding aside, which has the embedding's stream); TP slices divide the whole shape;
 *  - gpt_param_table_rank_numel, the constant-time count, equals the rank's table. */
#include <string.h>

#include "core/models/gpt_param_table.h"
#include "fixture.h"
#include "test_util.h"

/* 8 layers (for every pipeline and interleaving layout below); padded vocabulary 64 (63 tokens
 * and the mock data's EOD) */
#define GPT2_FLAGS                                                                         \
    "--num-layers 8 --hidden-size 32 --ffn-hidden-size 128 --num-attention-heads 4 "       \
    "--seq-length 12 --max-position-embeddings 16 --vocab-size 63 "                        \
    "--make-vocab-size-divisible-by 64 --init-method-std 0.02 --hidden-dropout 0 "         \
    "--attention-dropout 0"
static transformer_config gpt2_config(void) { return fixture_config(GPT2_FLAGS); }
static transformer_config llama_config(void) {
    return fixture_config(GPT2_FLAGS " --normalization RMSNorm --swiglu --ffn-hidden-size 48 "
                          "--group-query-attention --num-query-groups 2 --qk-layernorm "
                          "--disable-bias-linear --position-embedding-type rope "
                          "--untie-embeddings-and-output-weights");
}

static void check_whole(const transformer_config *c, int per_layer) {
    gpt_param_table w;
    gpt_param_table_whole(c, &w);
    const param_set *p = &w.params;
    size_t offset = 0;
    for (int i = 0; i < p->count; i++) {
        CHECK(p->tensors[i].init_stream == (uint64_t)i);
        CHECK(p->tensors[i].offset == offset);
        offset += p->tensors[i].numel;
    }
    CHECK(offset == p->numel && gpt_param_table_rank_numel(c) == p->numel);
    CHECK(!strcmp(p->tensors[0].name, "embedding.word_embeddings.weight"));
    int emb = c->rope ? 1 : 2;
    CHECK(w.num_layers == c->num_layers && w.layer_first[0] == emb);
    for (int l = 0; l < c->num_layers; l++) {
        CHECK(w.layer_first[l + 1] - w.layer_first[l] == per_layer);
        CHECK(!strncmp(p->tensors[w.layer_first[l]].name, "decoder.layers.", 15));
        CHECK(w.place[w.layer_first[l]].layer == l);
    }
    CHECK(!strcmp(p->tensors[w.layer_first[c->num_layers]].name, "decoder.final_layernorm.weight"));
    CHECK(w.tied_embedding == -1);
    gpt_param_table_free(&w);
}

/* Every rank of the layout (tp, pp, vp). */
static void check_layout(transformer_config c, int tp, int pp, int vp) {
    gpt_param_table w;
    gpt_param_table_whole(&c, &w);
    int n = w.params.count, tied = !c.untie_embeddings_and_output_weights && pp > 1;
    int held[256] = {0};
    CHECK(n <= 256);
    c.tp_size = tp;
    c.pp_size = pp;
    c.vp_size = vp;
    c.sequence_parallel = tp > 1;
    for (int t = 0; t < tp; t++) {
        memset(held, 0, sizeof held);
        for (int r = 0; r < pp; r++) {
            c.tp_rank = t;
            c.pp_rank = r;
            gpt_param_table s;
            gpt_param_table_rank(&c, &s);
            CHECK(gpt_param_table_rank_numel(&c) == s.params.numel);
            size_t offset = 0;
            for (int i = 0; i < s.params.count; i++) {
                const param_tensor *p = &s.params.tensors[i];
                CHECK(p->offset == offset);
                offset += p->numel;
                CHECK(p->init_stream < (uint64_t)n);
                const param_tensor *q = &w.params.tensors[p->init_stream];
                CHECK(!strcmp(p->name, q->name) && p->ndim == q->ndim);
                size_t numel = 1;
                for (int d = 0; d < p->ndim; d++) {
                    CHECK(p->full_shape[d] == q->shape[d]);
                    CHECK(p->shape[d] == q->shape[d] || p->shape[d] * tp == q->shape[d]);
                    numel *= (size_t)p->shape[d];
                }
                CHECK(numel == p->numel);
                if (p->pp_shared_copy) {
                    CHECK(tied && r == pp - 1 && i == s.tied_embedding && p->init_stream == 0);
                    continue;
                }
                held[p->init_stream]++;
            }
            CHECK(offset == s.params.numel);
            if (tied && (r == 0 || r == pp - 1))
                CHECK(s.tied_embedding >= 0 &&
                      !strcmp(s.params.tensors[s.tied_embedding].name,
                              "embedding.word_embeddings.weight"));
            else
                CHECK(s.tied_embedding == -1);
            /* the word embedding (and the last stage's copy of a tied one) carries the mark
             * the distributed optimizer finds it by; no other tensor does */
            for (int i = 0; i < s.params.count; i++)
                CHECK(s.params.tensors[i].word_embedding ==
                      !strcmp(s.params.tensors[i].name, "embedding.word_embeddings.weight"));
            /* each model chunk's layers are one range, in the chunk's order */
            int Lc = c.num_layers / (pp * (vp > 1 ? vp : 1));
            for (int l = 0; l < s.num_layers; l++) {
                int g = ((l / Lc) * pp + r) * Lc + l % Lc;
                CHECK(s.place[s.layer_first[l]].layer == g);
                CHECK(s.layer_begin[l] == s.params.tensors[s.layer_first[l]].offset);
                CHECK(s.layer_begin[l + 1] >= s.layer_begin[l]);
            }
            gpt_param_table_free(&s);
        }
        for (int k = 0; k < n; k++) CHECK(held[k] == 1);
    }
    gpt_param_table_free(&w);
}

int main(void) {
    transformer_config g = gpt2_config(), l = llama_config();
    /* gpt2: 2 norms x (weight, bias), qkv, proj, fc1, fc2 with biases */
    check_whole(&g, 12);
    /* llama: 2 RMSNorm weights, qkv, q/k norm weights, proj, fc1, fc2 */
    check_whole(&l, 8);
    transformer_config tied_llama = l;
    tied_llama.untie_embeddings_and_output_weights = 0;
    const transformer_config *fams[] = {&g, &l, &tied_llama};
    const int layouts[][3] = {{1, 1, 1}, {2, 1, 1}, {1, 2, 1}, {2, 2, 1}, {1, 4, 1},
                              {1, 2, 2}, {2, 2, 2}, {1, 4, 2}, {2, 2, 4}};
    for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++)
        for (size_t k = 0; k < sizeof layouts / sizeof layouts[0]; k++)
            check_layout(*fams[f], layouts[k][0], layouts[k][1], layouts[k][2]);
    TEST_DONE();
}
