#include "tools/generate_model.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "core/parallel_state.h"
#include "core/util/error.h"
#include "training/checkpoint_files.h"
#include "training/dist_checkpointing.h"
#include "training/model_provider.h"
#include "training/theoretical_memory.h"

/* The world is the tensor-parallel group, and every dimension tensor parallelism splits is
 * divisible by its size. Every rank checks the same values: they fail together. */
static int check_layout(const megadlm_args *a, int tp, char *err, size_t errlen) {
    int world = parallel_world_size();
    if (tp != world) {
        char run[64] = "in one process";
        if (tp > 1) snprintf(run, sizeof run, "under mpirun -np %d", tp);
        err_set(err, errlen,
                "--tensor-model-parallel-size %d: expected the number of ranks, %d (generate "
                "splits the model over all of its ranks, one tensor-parallel group: give "
                "--tensor-model-parallel-size %d, or run it %s)",
                tp, world, world, run);
        return -1;
    }
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

gpt_model *generate_model_load(const megadlm_args *saved, const generate_model_spec *spec,
                               char *err, size_t errlen) {
    const char *load = spec->load;
    const int iteration = spec->iteration, tp_size = spec->tp_size;
    if (check_layout(saved, tp_size, err, errlen) != 0) return NULL;
    /* the layout of this run, whatever the checkpoint's was (the files hold whole tensors):
     * tensor parallelism only, no sequence parallelism (a sampler's few rows gain nothing
     * from splitting them) */
    megadlm_args a = *saved; /* a shallow copy: only the model's fields are read */
    a.tensor_model_parallel_size = 1;
    a.pipeline_model_parallel_size = 1;
    a.virtual_pipeline_model_parallel_size = 0;
    a.context_parallel_size = 1;
    a.sequence_parallel = 0;
    a.tp_comm_overlap = 0;
    a.distribute_saved_activations = 0;
    /* before allocating a model read from state.json: its file must hold that many values */
    char model_path[PATH_MAX + 64];
    snprintf(model_path, sizeof model_path, "%s/iter_%07d/model.safetensors", load, iteration);
    char why[1024];
    if (ckpt_check_file_holds(model_path, theoretical_megadlm_parameter_count(&a), why,
                              sizeof why) != 0) {
        err_set(err, errlen, "--load %s: %s", load, why);
        return NULL;
    }
    if (parallel_setup_groups(tp_size, 1, 1, err, errlen) != 0) return NULL;
    a.tensor_model_parallel_size = tp_size;
    transformer_config cfg = model_config_from_args(&a);
    cfg.packed_docs = spec->packed_docs;
    gpt_model *m = gpt_model_create(&cfg, spec->max_batch, GPT_MODEL_FORWARD_ONLY);
    /* each rank reads only its slices; the load agrees on its status across ranks, and so
     * must the finiteness of the slices, which differ from rank to rank */
    int rc = dist_ckpt_load_tensors(load, iteration, &m->cfg, &m->params, NULL, 0, why,
                                    sizeof why);
    if (rc == 0) {
        int bad = ckpt_check_finite(&m->params, 0, why, sizeof why);
        if (bad && tp_size > 1) /* its element index counts in the slice */
            err_set(why + strlen(why), sizeof why - strlen(why),
                    " in tensor-parallel rank %d's slice", cfg.tp_rank);
        rc = parallel_agree(bad, why, sizeof why);
    }
    if (rc != 0) {
        err_set(err, errlen, "--load %s: %s", load, why);
        gpt_model_free(m);
        return NULL;
    }
    return m;
}
