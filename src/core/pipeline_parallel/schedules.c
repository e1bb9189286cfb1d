#include "core/pipeline_parallel/schedules.h"

#include "core/parallel_state.h"
#include "core/pipeline_parallel/p2p_communication.h"

int schedule_num_stores(int pp_size, int pp_rank, int num_microbatches) {
    if (pp_size <= 1) return 1;
    int in_flight = pp_size - pp_rank;
    return in_flight < num_microbatches ? in_flight : num_microbatches;
}

static double no_pipelining(gpt_model **stores, int M, const pipeline_steps *s) {
    double loss = 0.0;
    for (int k = 0; k < M; k++) {
        loss += s->forward_step(s->user, k, stores[0]);
        s->backward_step(s->user, k, stores[0]);
    }
    return loss;
}

/* Megatron's forward_backward_pipelining_without_interleaving. */
static double one_f_one_b(gpt_model **stores, int num_stores, int M, const pipeline_steps *s) {
    const parallel_state *ps = parallel_get();
    int warmup = ps->pp_size - ps->pp_rank - 1;
    if (warmup > M) warmup = M;
    int remaining = M - warmup;
    size_t n = gpt_model_stage_floats(stores[0]);
    double loss = 0.0;
#define STORE(k) stores[(k) % num_stores]

    for (int k = 0; k < warmup; k++) {
        p2p_recv_forward(gpt_model_stage_input(STORE(k)), n);
        loss += s->forward_step(s->user, k, STORE(k));
        p2p_send_forward(gpt_model_stage_output(STORE(k)), n);
    }
    if (remaining > 0) p2p_recv_forward(gpt_model_stage_input(STORE(warmup)), n);
    for (int i = 0; i < remaining; i++) {
        int f = warmup + i, b = i; /* forward of micro-batch f, backward of the oldest, b */
        loss += s->forward_step(s->user, f, STORE(f));
        p2p_send_forward_recv_backward(gpt_model_stage_output(STORE(f)),
                                       gpt_model_stage_output_grad(STORE(b)), n);
        s->backward_step(s->user, b, STORE(b));
        if (i == remaining - 1)
            p2p_send_backward(gpt_model_stage_input_grad(STORE(b)), n);
        else
            p2p_send_backward_recv_forward(gpt_model_stage_input_grad(STORE(b)),
                                           gpt_model_stage_input(STORE(f + 1)), n);
    }
    for (int b = remaining; b < M; b++) { /* cool-down */
        p2p_recv_backward(gpt_model_stage_output_grad(STORE(b)), n);
        s->backward_step(s->user, b, STORE(b));
        p2p_send_backward(gpt_model_stage_input_grad(STORE(b)), n);
    }
#undef STORE
    return loss;
}

double forward_backward(gpt_model **stores, int num_stores, int num_microbatches,
                        const pipeline_steps *steps) {
    if (parallel_get()->pp_size <= 1) return no_pipelining(stores, num_microbatches, steps);
    return one_f_one_b(stores, num_stores, num_microbatches, steps);
}

double forward_only(gpt_model **stores, int num_microbatches, const pipeline_steps *s) {
    size_t n = gpt_model_stage_floats(stores[0]);
    double loss = 0.0;
    for (int k = 0; k < num_microbatches; k++) {
        p2p_recv_forward(gpt_model_stage_input(stores[0]), n);
        loss += s->forward_step(s->user, k, stores[0]);
        p2p_send_forward(gpt_model_stage_output(stores[0]), n);
    }
    return loss;
}
