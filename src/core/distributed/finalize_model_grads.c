#include "core/distributed/finalize_model_grads.h"

#include "core/parallel_state.h"
#include "core/tensor_parallel/layers.h"

/* The tied word embedding: summed over the first and last pipeline stage of this (tp, dp)
 * position (the embedding group exists only on those ranks, with pipeline parallelism). */
static void allreduce_word_embedding_grads(param_set *ps, int tied_embedding) {
    const parallel_state *st = parallel_get();
    if (st->embedding == MPI_COMM_NULL || tied_embedding < 0) return;
    const param_tensor *t = &ps->tensors[tied_embedding];
    MPI_Allreduce(MPI_IN_PLACE, ps->grad + t->offset, (int)t->numel, MPI_FLOAT, MPI_SUM,
                  st->embedding);
}

void finalize_model_grads(ddp *d, param_set *ps, int tied_embedding) {
    if (d) ddp_finish_grad_sync(d);
    tp_allreduce_partial_grads(ps);
    allreduce_word_embedding_grads(ps, tied_embedding);
}
