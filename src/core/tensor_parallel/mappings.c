#include "core/tensor_parallel/mappings.h"

#include <stdlib.h>
#include <string.h>

#include "core/parallel_state.h"
#include "core/util/alloc.h"

static tp_comm_stats g_stats;

const tp_comm_stats *tp_comm_get_stats(void) { return &g_stats; }
void tp_comm_reset_stats(void) { memset(&g_stats, 0, sizeof(g_stats)); }

/* ---- benchmark hooks: local copies instead of communication, record and replay ---- */

typedef enum { REC_ALL_REDUCE_SUM, REC_ALL_REDUCE_MAX, REC_ALL_GATHER, REC_REDUCE_SCATTER } rec_kind;
typedef struct {
    rec_kind kind;
    size_t n; /* floats: the buffer (all-reduce) or one shard (all-gather, reduce-scatter) */
} rec_entry;

static int g_local_only, g_recording;
static rec_entry *g_rec;
static size_t g_rec_len, g_rec_cap;

void tp_comm_set_local_only(int on) { g_local_only = on; }
int tp_comm_local_only(void) { return g_local_only; }

void tp_comm_set_recording(int on) {
    g_recording = on;
    if (on) g_rec_len = 0;
}

static void record(rec_kind kind, size_t n) {
    if (!g_recording) return;
    if (g_rec_len == g_rec_cap) {
        g_rec_cap = g_rec_cap ? 2 * g_rec_cap : 256;
        rec_entry *grown = xrealloc(g_rec, g_rec_cap * sizeof(*g_rec), "TP communication record");
        g_rec = grown;
    }
    g_rec[g_rec_len++] = (rec_entry){kind, n};
}

double tp_comm_replay(void) {
    const parallel_state *ps = parallel_get();
    if (!ps->mpi || ps->tp_size < 2) return 0.0;
    size_t most = 1;
    for (size_t i = 0; i < g_rec_len; i++) {
        size_t n = g_rec[i].n * (g_rec[i].kind >= REC_ALL_GATHER ? (size_t)ps->tp_size : 1);
        if (n > most) most = n;
    }
    float *a = xcalloc(most, sizeof(float), "TP check buffer"),
          *b = xcalloc(most, sizeof(float), "TP check buffer");
    MPI_Barrier(ps->tp);
    double t0 = MPI_Wtime();
    for (size_t i = 0; i < g_rec_len; i++) {
        int n = (int)g_rec[i].n;
        switch (g_rec[i].kind) {
        case REC_ALL_REDUCE_SUM:
            MPI_Allreduce(MPI_IN_PLACE, a, n, MPI_FLOAT, MPI_SUM, ps->tp);
            break;
        case REC_ALL_REDUCE_MAX:
            MPI_Allreduce(MPI_IN_PLACE, a, n, MPI_FLOAT, MPI_MAX, ps->tp);
            break;
        case REC_ALL_GATHER:
            MPI_Allgather(a, n, MPI_FLOAT, b, n, MPI_FLOAT, ps->tp);
            break;
        case REC_REDUCE_SCATTER:
            MPI_Reduce_scatter_block(b, a, n, MPI_FLOAT, MPI_SUM, ps->tp);
            break;
        }
    }
    double dt = MPI_Wtime() - t0;
    free(a);
    free(b);
    return dt;
}

/* ---- the collectives ---- */

static int tp_active(void) {
    const parallel_state *ps = parallel_get();
    return ps->mpi && ps->tp_size > 1;
}

void tp_comm_note_all_gather(size_t shard_n) {
    g_stats.all_gather_calls++;
    g_stats.all_gather_bytes += (double)shard_n * parallel_get()->tp_size * sizeof(float);
    record(REC_ALL_GATHER, shard_n);
}

void tp_comm_note_reduce_scatter(size_t shard_n) {
    g_stats.reduce_scatter_calls++;
    g_stats.reduce_scatter_bytes += (double)shard_n * parallel_get()->tp_size * sizeof(float);
    record(REC_REDUCE_SCATTER, shard_n);
}

void tp_all_reduce_sum(float *x, size_t n) {
    if (!tp_active()) return;
    record(REC_ALL_REDUCE_SUM, n);
    if (g_local_only) return;
    MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_SUM, parallel_get()->tp);
    g_stats.all_reduce_calls++;
    g_stats.all_reduce_bytes += (double)n * sizeof(float);
}

double tp_all_reduce_sum_double(double x) {
    if (!tp_active() || g_local_only) return x;
    MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, parallel_get()->tp);
    return x;
}

void tp_all_reduce_max(float *x, size_t n) {
    if (!tp_active()) return;
    record(REC_ALL_REDUCE_MAX, n);
    if (g_local_only) return;
    MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_MAX, parallel_get()->tp);
    g_stats.all_reduce_calls++;
    g_stats.all_reduce_bytes += (double)n * sizeof(float);
}

void tp_all_gather(float *full, const float *shard, size_t shard_n) {
    if (!tp_active()) {
        if (full != shard) memcpy(full, shard, shard_n * sizeof(float));
        return;
    }
    const parallel_state *ps = parallel_get();
    if (g_local_only) {
        record(REC_ALL_GATHER, shard_n);
        for (int q = 0; q < ps->tp_size; q++)
            if (full + q * shard_n != shard)
                memcpy(full + q * shard_n, shard, shard_n * sizeof(float));
        return;
    }
    MPI_Allgather(shard, (int)shard_n, MPI_FLOAT, full, (int)shard_n, MPI_FLOAT, ps->tp);
    tp_comm_note_all_gather(shard_n);
}

void tp_reduce_scatter(float *shard, const float *full, size_t shard_n) {
    if (!tp_active()) {
        if (full != shard) memcpy(shard, full, shard_n * sizeof(float));
        return;
    }
    const parallel_state *ps = parallel_get();
    if (g_local_only) {
        record(REC_REDUCE_SCATTER, shard_n);
        memcpy(shard, full + (size_t)ps->tp_rank * shard_n, shard_n * sizeof(float));
        return;
    }
    MPI_Reduce_scatter_block(full, shard, (int)shard_n, MPI_FLOAT, MPI_SUM, ps->tp);
    tp_comm_note_reduce_scatter(shard_n);
}
