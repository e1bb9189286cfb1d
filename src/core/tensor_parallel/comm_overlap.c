#include "core/tensor_parallel/comm_overlap.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/kernels/bf16.h"
#include "core/parallel_state.h"
#include "core/tensor/memory.h"
#include "core/tensor_parallel/mappings.h"
#include "core/util/die.h"

/* One transfer. It is posted once its `after` flag is set (-1: at once) and sets its `done`
 * flag when complete (-1: none). Flags and ops live in tables that are reset whenever no call
 * is in progress. */
typedef enum { OP_SEND, OP_RECV, OP_IALLGATHER } op_kind;
typedef struct {
    op_kind kind;
    int peer, tag, count;
    const void *sbuf;
    void *rbuf;
    int after, done;
    int state; /* 0 waiting, 1 posted, 2 complete */
    MPI_Request req;
    MPI_Datatype type; /* MPI_FLOAT, or MPI_UINT16_T for bf16 / fp16 (16-bit all-gathers) */
} ov_op;

#define MAX_OPS 1024
#define MAX_FLAGS 1024
#define MAX_TAG 30000
/* thread mode: sleep between polls that moved nothing (the sockets' buffers keep the link
 * busy for far longer; polling more often costs the GEMMs CPU time) */
#define POLL_SLEEP_NS 200000L
/* test mode: a GEMM under communication is cut into tiles of at least MIN_TILE_ROWS rows,
 * about TILES_PER_PIECE of them (each tile re-packs the whole weight matrix in OpenBLAS, so
 * smaller tiles cost more than they gain) */
#define TILES_PER_PIECE 4
#define MIN_TILE_ROWS 128

static struct {
    int ready;
    tp_progress_mode mode;
    MPI_Comm comm;
    int rank, size;
    ov_op ops[MAX_OPS];
    int nops, pending; /* ops in the table, ops not yet complete */
    atomic_int flag[MAX_FLAGS];
    int nflags;
    int active; /* calls in progress (a bulk operation counts until its wait) */
    int tag_seq;
    tp_overlap_stats stats;
    /* thread mode */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work, changed;
    int stop;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER,
       .work = PTHREAD_COND_INITIALIZER,
       .changed = PTHREAD_COND_INITIALIZER};

/* The ring's 16-bit staging buffer (--bf16, --fp16): the pieces travel and arrive here, and
 * each is widened into the fp32 gathered rows when it has arrived. Not the gathered buffer's
 * upper half (as the plain and bulk all-gathers stage): pieces arrive in ring order, and
 * widening one would overwrite others still in flight. Grown on demand, category workspace. */
static struct {
    uint16_t *buf;
    size_t n;
} g_stage;

static int threaded(void) { return g.mode == TP_PROGRESS_THREAD; }
static void lock(void) {
    if (threaded()) pthread_mutex_lock(&g.mu);
}
static void unlock(void) {
    if (threaded()) pthread_mutex_unlock(&g.mu);
}

static void post(ov_op *op) {
    switch (op->kind) {
    case OP_SEND:
        MPI_Isend(op->sbuf, op->count, op->type, op->peer, op->tag, g.comm, &op->req);
        break;
    case OP_RECV:
        MPI_Irecv(op->rbuf, op->count, op->type, op->peer, op->tag, g.comm, &op->req);
        break;
    case OP_IALLGATHER:
        MPI_Iallgather(op->sbuf, op->count, op->type, op->rbuf, op->count, op->type, g.comm,
                       &op->req);
        break;
    }
    op->state = 1;
}

/* Posts what may be posted (in table order, so sends and receives go out in the order the
 * algorithms add them), then tests everything posted with one MPI_Testsome (one pass of Open
 * MPI's progress engine, however many transfers are in flight). Returns whether anything
 * changed. Caller holds the lock in thread mode. */
static int progress(void) {
    static MPI_Request reqs[MAX_OPS];
    static int which[MAX_OPS], done[MAX_OPS];
    int changed = 0, n = 0;
    for (int i = 0; i < g.nops && g.pending > 0; i++) {
        ov_op *op = &g.ops[i];
        if (op->state == 0 && (op->after < 0 || atomic_load(&g.flag[op->after]))) {
            post(op);
            changed = 1;
        }
        if (op->state == 1) {
            reqs[n] = op->req;
            which[n++] = i;
        }
    }
    if (n == 0) return changed;
    int count = 0;
    MPI_Testsome(n, reqs, &count, done, MPI_STATUSES_IGNORE);
    for (int j = 0; j < count && count != MPI_UNDEFINED; j++) {
        ov_op *op = &g.ops[which[done[j]]];
        op->state = 2;
        op->req = MPI_REQUEST_NULL;
        g.pending--;
        if (op->done >= 0) atomic_store(&g.flag[op->done], 1);
        changed = 1;
    }
    return changed;
}

static void *progress_thread(void *unused) {
    (void)unused;
    struct timespec nap = {0, POLL_SLEEP_NS};
    pthread_mutex_lock(&g.mu);
    while (!g.stop) {
        if (g.pending == 0) {
            pthread_cond_wait(&g.work, &g.mu);
            continue;
        }
        int changed = progress();
        if (changed) pthread_cond_broadcast(&g.changed);
        pthread_mutex_unlock(&g.mu);
        if (!changed) nanosleep(&nap, NULL);
        pthread_mutex_lock(&g.mu);
    }
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

int tp_overlap_init(tp_progress_mode mode, char *err, size_t errlen) {
    const parallel_state *ps = parallel_get();
    if (g.ready) return 0;
    if (!ps->mpi || ps->tp_size < 2) {
        snprintf(err, errlen, "TP communication overlap needs more than one tensor-parallel rank");
        return -1;
    }
    int provided = 0;
    MPI_Query_thread(&provided);
    if (mode == TP_PROGRESS_THREAD && provided < MPI_THREAD_SERIALIZED) {
        snprintf(err, errlen, "the communication thread needs MPI_THREAD_SERIALIZED; this MPI "
                              "provides less (use the test progress mode)");
        return -1;
    }
    MPI_Comm_dup(ps->tp, &g.comm);
    MPI_Comm_rank(g.comm, &g.rank);
    MPI_Comm_size(g.comm, &g.size);
    g.mode = mode;
    g.stop = 0;
    memset(&g.stats, 0, sizeof(g.stats));
    if (mode == TP_PROGRESS_THREAD) pthread_create(&g.thread, NULL, progress_thread, NULL);
    g.ready = 1;
    return 0;
}

void tp_overlap_finalize(void) {
    if (!g.ready) return;
    if (threaded()) {
        pthread_mutex_lock(&g.mu);
        g.stop = 1;
        pthread_cond_signal(&g.work);
        pthread_mutex_unlock(&g.mu);
        pthread_join(g.thread, NULL);
    }
    MPI_Comm_free(&g.comm);
    mem_free(g_stage.buf);
    g_stage.buf = NULL;
    g_stage.n = 0;
    g.ready = 0;
}

int tp_overlap_ready(void) { return g.ready; }
const tp_overlap_stats *tp_overlap_get_stats(void) { return &g.stats; }

void tp_overlap_poll(void) {
    if (!threaded() && g.pending > 0) progress();
}

int tp_overlap_tile_rows(int rows) {
    if (!g.ready || threaded()) return rows;
    int tile = (rows + TILES_PER_PIECE - 1) / TILES_PER_PIECE;
    return tile < MIN_TILE_ROWS ? MIN_TILE_ROWS : tile;
}

/* ---- tables (caller holds the lock in thread mode) ---- */

static void begin_call(void) {
    lock();
    if (g.active == 0) { /* nothing outstanding: start the tables afresh */
        g.nops = 0;
        g.nflags = 0;
    }
    g.active++;
}

static int new_flag(void) {
    if (g.nflags >= MAX_FLAGS) die(1, "TP overlap: more than %d flags", MAX_FLAGS);
    atomic_store(&g.flag[g.nflags], 0);
    return g.nflags++;
}

static int add_op(MPI_Datatype type, op_kind kind, int peer, int tag, int count,
                  const void *sbuf, void *rbuf, int after, int done) {
    if (g.nops >= MAX_OPS) die(1, "TP overlap: more than %d transfers", MAX_OPS);
    ov_op *op = &g.ops[g.nops];
    *op = (ov_op){kind, peer, tag, count, sbuf, rbuf, after, done, 0, MPI_REQUEST_NULL, type};
    g.pending++;
    return g.nops++;
}

/* Releases the lock after adding ops and gets them moving. */
static void start_ops(void) {
    if (threaded()) {
        pthread_cond_signal(&g.work);
        pthread_mutex_unlock(&g.mu);
    } else {
        progress();
    }
}

static int tags(int n) { /* n consecutive tags, the same sequence on every rank */
    if (g.tag_seq + n > MAX_TAG) g.tag_seq = 0;
    int base = g.tag_seq;
    g.tag_seq += n;
    return base;
}

static void wait_flag(int f) {
    if (threaded()) {
        pthread_mutex_lock(&g.mu);
        while (!atomic_load(&g.flag[f])) pthread_cond_wait(&g.changed, &g.mu);
        pthread_mutex_unlock(&g.mu);
    } else {
        while (!atomic_load(&g.flag[f])) progress();
    }
}

static void set_flag(int f) {
    atomic_store(&g.flag[f], 1);
    if (!threaded()) progress();
}

static int ops_complete(int first, int end) {
    for (int i = first; i < end; i++)
        if (g.ops[i].state != 2) return 0;
    return 1;
}

/* Waits for ops [first, end) and ends the call. */
static void end_call(int first, int end) {
    lock();
    if (threaded()) {
        while (!ops_complete(first, end)) pthread_cond_wait(&g.changed, &g.mu);
    } else {
        while (!ops_complete(first, end)) progress();
    }
    g.active--;
    unlock();
}

/* ---- algorithms ---- */

int tp_pieces(int Ns, int pieces) {
    if (pieces < 1) pieces = 1;
    return pieces > Ns ? (Ns > 0 ? Ns : 1) : pieces;
}

void tp_piece_rows(int Ns, int pieces, int i, int *lo, int *n) {
    *lo = (int)((long)Ns * i / pieces);
    *n = (int)((long)Ns * (i + 1) / pieces) - *lo;
}

void tp_for_each_piece(int t, int Ns, int pieces, tp_rows_fn fn, void *user) {
    pieces = tp_pieces(Ns, pieces);
    for (int q = 0; q < t; q++)
        for (int i = 0; i < pieces; i++) {
            int lo, n;
            tp_piece_rows(Ns, pieces, i, &lo, &n);
            fn(user, q * Ns + lo, n);
        }
}

static uint16_t *ring_stage(size_t n) {
    if (n > g_stage.n) {
        mem_free(g_stage.buf);
        g_stage.buf = mem_alloc(MEM_WORKSPACE, n * sizeof(uint16_t),
                                "16-bit ring all-gather staging");
        g_stage.n = n;
    }
    return g_stage.buf;
}

/* The ring all-gather of tp_ring_allgather_compute; with stage (kind's 16-bit values, t * Ns *
 * C elements) the shards travel in that format and each arrived piece is widened into gathered
 * before fn reads it. */
static void ring_allgather(float *gathered, const float *local, int Ns, int C, int pieces,
                           tp_rows_fn fn, void *user, half_kind kind, uint16_t *stage) {
    int t = g.size, r = g.rank, left = (r + t - 1) % t, right = (r + 1) % t;
    size_t row = (size_t)C;
    pieces = tp_pieces(Ns, pieces);
    if (gathered + r * Ns * row != local)
        memcpy(gathered + r * Ns * row, local, (size_t)Ns * row * sizeof(float));
    MPI_Datatype type = stage ? MPI_UINT16_T : MPI_FLOAT;
    size_t esize = stage ? sizeof(uint16_t) : sizeof(float);
    char *wire = stage ? (char *)stage : (char *)gathered; /* where pieces travel from and to */
    if (stage) {
        half_from_f32(kind, stage + r * Ns * row, local, (size_t)Ns * row);
        tp_comm_note_all_gather_half((size_t)Ns * C);
    } else {
        tp_comm_note_all_gather((size_t)Ns * C);
    }
    g.stats.ring_all_gathers++;

    begin_call();
    int first = g.nops, tag0 = tags((t - 1) * pieces), got0 = g.nflags;
    for (int k = 1; k < t; k++) /* got(k, i) */
        for (int i = 0; i < pieces; i++) new_flag();
    /* step k: receive the shard of rank r - k from the left, pass the shard of rank r - k + 1
     * (own at k = 1, received at step k - 1 otherwise) to the right */
    for (int k = 1; k < t; k++) {
        int from = (r - k + t) % t, pass = (r - k + 1 + t) % t;
        for (int i = 0; i < pieces; i++) {
            int lo, n, tag = tag0 + (k - 1) * pieces + i;
            tp_piece_rows(Ns, pieces, i, &lo, &n);
            add_op(type, OP_RECV, left, tag, n * C, NULL,
                   wire + ((size_t)from * Ns + lo) * row * esize, -1, got0 + (k - 1) * pieces + i);
            add_op(type, OP_SEND, right, tag, n * C, wire + ((size_t)pass * Ns + lo) * row * esize,
                   NULL, k == 1 ? -1 : got0 + (k - 2) * pieces + i, -1);
        }
    }
    int end = g.nops;
    start_ops();

    for (int i = 0; i < pieces; i++) { /* the own shard, in the plan's pieces */
        int lo, n;
        tp_piece_rows(Ns, pieces, i, &lo, &n);
        fn(user, r * Ns + lo, n);
    }
    for (int k = 1; k < t; k++) {
        int from = (r - k + t) % t;
        for (int i = 0; i < pieces; i++) {
            int lo, n;
            tp_piece_rows(Ns, pieces, i, &lo, &n);
            wait_flag(got0 + (k - 1) * pieces + i);
            size_t at = ((size_t)from * Ns + lo) * row;
            if (stage) half_to_f32(kind, gathered + at, stage + at, (size_t)n * row);
            fn(user, from * Ns + lo, n);
        }
    }
    end_call(first, end);
}

void tp_ring_allgather_compute(float *gathered, const float *local, int Ns, int C, int pieces,
                               tp_rows_fn fn, void *user) {
    ring_allgather(gathered, local, Ns, C, pieces, fn, user, HALF_NONE, NULL);
}

void tp_ring_allgather_compute_half(half_kind kind, float *gathered, const float *local, int Ns,
                                    int C, int pieces, tp_rows_fn fn, void *user) {
    uint16_t *stage = ring_stage((size_t)g.size * Ns * C);
    ring_allgather(gathered, local, Ns, C, pieces, fn, user, kind, stage);
}

void tp_compute_ring_reduce_scatter(float *out_local, float *partial, float *recv, int Ns, int C,
                                    int pieces, tp_rows_fn fn, void *user) {
    int t = g.size, r = g.rank, left = (r + t - 1) % t, right = (r + 1) % t;
    size_t row = (size_t)C;
    pieces = tp_pieces(Ns, pieces);
    tp_comm_note_reduce_scatter((size_t)Ns * C);
    g.stats.ring_reduce_scatters++;

    begin_call();
    int first = g.nops, tag0 = tags((t - 1) * pieces);
    int ready0 = g.nflags;
    for (int k = 0; k < t - 1; k++) /* ready(k, i): piece i of step k may leave */
        for (int i = 0; i < pieces; i++) new_flag();
    int got0 = g.nflags;
    for (int k = 1; k < t; k++) /* got(k, i): piece i of step k has arrived */
        for (int i = 0; i < pieces; i++) new_flag();
    /* step k handles the chunk of rank r - 1 - k: it arrives from the left holding the sum of
     * the k ranks before this one (k >= 1), this rank adds its partial and passes it right
     * (k < t - 1); at k = t - 1 the chunk is this rank's own and the sum is complete */
    for (int k = 0; k < t; k++) {
        int c = ((r - 1 - k) % t + t) % t;
        for (int i = 0; i < pieces; i++) {
            int lo, n, tag = tag0 + k * pieces + i;
            tp_piece_rows(Ns, pieces, i, &lo, &n);
            if (k >= 1)
                add_op(MPI_FLOAT, OP_RECV, left, tag - pieces, n * C, NULL,
                       recv + ((size_t)(k - 1) * Ns + lo) * row, -1, got0 + (k - 1) * pieces + i);
            if (k < t - 1)
                add_op(MPI_FLOAT, OP_SEND, right, tag, n * C, partial + ((size_t)c * Ns + lo) * row, NULL,
                       ready0 + k * pieces + i, -1);
        }
    }
    int end = g.nops;
    start_ops();

    for (int k = 0; k < t; k++) {
        int c = ((r - 1 - k) % t + t) % t;
        for (int i = 0; i < pieces; i++) {
            int lo, n;
            tp_piece_rows(Ns, pieces, i, &lo, &n);
            fn(user, c * Ns + lo, n);
            float *mine = partial + ((size_t)c * Ns + lo) * row;
            if (k >= 1) {
                wait_flag(got0 + (k - 1) * pieces + i);
                const float *in = recv + ((size_t)(k - 1) * Ns + lo) * row;
                size_t m = (size_t)n * row;
#pragma omp parallel for schedule(static)
                for (size_t j = 0; j < m; j++) mine[j] += in[j];
            }
            if (k < t - 1) set_flag(ready0 + k * pieces + i);
        }
    }
    memcpy(out_local, partial + (size_t)r * Ns * row, (size_t)Ns * row * sizeof(float));
    end_call(first, end);
}

/* A bulk operation in flight: its ops, and for a reduce-scatter what tp_bulk_wait sums. */
#define MAX_BULK 8
typedef struct {
    int first, end;
    float *widen;        /* 16-bit all-gather: the gathered buffer, staged in its upper half */
    size_t widen_n;
    float *local;        /* reduce-scatter: the result */
    const float *own;    /* reduce-scatter: this rank's partial of its own chunk */
    const float *recv;   /* reduce-scatter: the other ranks' partials, t - 1 chunks */
    size_t shard_n;
    half_kind kind;      /* 16-bit all-gather: the staged values' format */
} bulk_op;
static bulk_op g_bulk[MAX_BULK];

static int bulk_slot(void) {
    for (int h = 0; h < MAX_BULK; h++)
        if (g_bulk[h].end == 0) return h;
    die(1, "TP overlap: more than %d bulk operations in flight", MAX_BULK);
}

/* MPI_Iallgather: Open MPI's nonblocking all-gather moves the same bytes as the blocking one */
int tp_bulk_allgather_start(float *gathered, const float *local, size_t shard_n) {
    tp_comm_note_all_gather(shard_n);
    g.stats.bulk_all_gathers++;
    begin_call();
    int h = bulk_slot();
    g_bulk[h] = (bulk_op){0};
    g_bulk[h].first =
        add_op(MPI_FLOAT, OP_IALLGATHER, -1, 0, (int)shard_n, local, gathered, -1, -1);
    g_bulk[h].end = g_bulk[h].first + 1;
    start_ops();
    return h;
}

/* In place in the upper half of gathered (as tp_all_gather_half), widened by tp_bulk_wait. */
int tp_bulk_allgather_start_half(half_kind kind, float *gathered, const float *local,
                                 size_t shard_n) {
    size_t n = shard_n * (size_t)g.size;
    uint16_t *stage = (uint16_t *)gathered + n;
    half_from_f32(kind, stage + (size_t)g.rank * shard_n, local, shard_n);
    tp_comm_note_all_gather_half(shard_n);
    g.stats.bulk_all_gathers++;
    begin_call();
    int h = bulk_slot();
    g_bulk[h] = (bulk_op){0};
    g_bulk[h].first = add_op(MPI_UINT16_T, OP_IALLGATHER, -1, 0, (int)shard_n, MPI_IN_PLACE,
                             stage, -1, -1);
    g_bulk[h].end = g_bulk[h].first + 1;
    g_bulk[h].widen = gathered;
    g_bulk[h].widen_n = n;
    g_bulk[h].kind = kind;
    start_ops();
    return h;
}

/* Point-to-point, not MPI_Ireduce_scatter_block: Open MPI's nonblocking reduce-scatter
 * (libnbc) moves about 2.5 times the bytes of the blocking one for two ranks (measured: 43 ms
 * vs 17 ms for 2 MB per rank at 1 Gbit/s). Every rank sends each other rank its partial of that
 * rank's chunk; the wait adds the t - 1 received partials to the own one, in ring order from
 * the left neighbour (two ranks: own + other, the same sum as MPI's). */
int tp_bulk_reduce_scatter_start(float *local, const float *full, float *recv, size_t shard_n) {
    int t = g.size, r = g.rank;
    tp_comm_note_reduce_scatter(shard_n);
    g.stats.bulk_reduce_scatters++;
    begin_call();
    int h = bulk_slot(), tag = tags(1);
    g_bulk[h] = (bulk_op){g.nops, 0, NULL, 0, local, full + (size_t)r * shard_n, recv, shard_n,
                          HALF_NONE};
    for (int k = 1; k < t; k++) {
        int from = (r - k + t) % t, to = (r + k) % t;
        add_op(MPI_FLOAT, OP_RECV, from, tag, (int)shard_n, NULL, recv + (size_t)(k - 1) * shard_n,
               -1, -1);
        add_op(MPI_FLOAT, OP_SEND, to, tag, (int)shard_n, full + (size_t)to * shard_n, NULL, -1,
               -1);
    }
    g_bulk[h].end = g.nops;
    start_ops();
    return h;
}

void tp_bulk_wait(int h) {
    end_call(g_bulk[h].first, g_bulk[h].end);
    if (g_bulk[h].widen) half_widen_staged(g_bulk[h].kind, g_bulk[h].widen, g_bulk[h].widen_n);
    if (g_bulk[h].local) {
        float *out = g_bulk[h].local;
        const float *own = g_bulk[h].own, *recv = g_bulk[h].recv;
        size_t n = g_bulk[h].shard_n;
        int others = g.size - 1;
#pragma omp parallel for schedule(static)
        for (size_t j = 0; j < n; j++) {
            float acc = own[j];
            for (int k = 0; k < others; k++) acc += recv[(size_t)k * n + j];
            out[j] = acc;
        }
    }
    g_bulk[h].end = 0;
}
