/* Checkpoints of any parallel layout, each rank writing and reading only its slices: see
 * dist_checkpointing.h. */
#include "training/dist_checkpointing.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "core/models/gpt_param_table.h"
#include "core/parallel_state.h"
#include "core/tensor/memory.h"
#include "core/tensor_parallel/layers.h"
#include "core/util/die.h"
#include "core/util/error.h"
#include "core/util/io.h"

static dist_ckpt_stats g_stats;
const dist_ckpt_stats *dist_ckpt_last_stats(void) { return &g_stats; }
static char g_note[512];
const char *dist_ckpt_last_conversion(void) { return g_note; }

ckpt_precision dist_ckpt_precision(const transformer_config *cfg) {
    return cfg->bf16 ? CKPT_BF16 : cfg->fp16 ? CKPT_FP16 : CKPT_FP32;
}

/* ---- crc32 of a tensor written (or read) in slices by several ranks ----
 * zlib's crc32 is affine over GF(2). With G(x) the register after x starting from zero, without
 * the final inversion (crc32_z(~0, x) ^ ~0): crc(x) = G(x) ^ crc(0^|x|), G(a || b) =
 * A^|b| G(a) ^ G(b), where A^m (crc32_combine(u, 0, m)) appends m zero bytes, and G of zeros is
 * 0. A tensor whose bytes are cut into runs held by different ranks therefore has
 * G = XOR over its runs of A^(bytes after the run) G(run): each rank XORs the terms of its
 * runs, one XOR reduction adds the ranks up, and crc = crc32_combine(~0, G, n) ^ ~0. */
static uint32_t crc_linear(const void *p, size_t n) {
    return (uint32_t)crc32_z(0xffffffffUL, (const Bytef *)p, n) ^ 0xffffffffu;
}
static uint32_t crc_shift(uint32_t g, uint64_t zeros) {
    return zeros ? (uint32_t)crc32_combine(g, 0, (z_off_t)zeros) : g;
}
static uint32_t crc_final(uint32_t g, uint64_t n) {
    return n ? (uint32_t)crc32_combine(0xffffffffUL, g, (z_off_t)n) ^ 0xffffffffu : 0;
}

/* Every rank's status becomes the worst one: -1 if any rank failed, with the message of the
 * lowest failing rank. Collective over the world (a barrier). */
static int agree(int rc, char *err, size_t errlen) { return parallel_agree(rc, err, errlen); }

/* ---- the layout: the whole model's tensors and where they are in the files ---- */

/* File tensor kf = g * n + k is whole tensor k of group g (checkpoint_precision.h: 0 the
 * model file's parameters, then the optimizer file's exp_avg, exp_avg_sq and, with 16-bit
 * parameters, fp32_param), in file g ? 1 : 0. */
typedef struct {
    param_set whole;  /* the whole model's tensors (whole shapes), tensor k = init stream k */
    int *local_of;    /* [whole.count] this rank's tensor holding whole tensor k, or -1 */
    ckpt_precision prec; /* the run's: the model file's dtype, and whether fp32_param is saved */
    int nfiles;       /* 1, or 2 with the optimizer file */
    int ngroups;      /* 1 (model file only), 3, or 4 with the fp32 main parameters */
    uint64_t size[2]; /* file sizes */
    uint64_t header_bytes[2];
    uint64_t *at;     /* [ngroups * n] absolute offset of each file tensor's data (saving) */
} layout;

static void layout_free(layout *L) {
    mem_free(L->whole.tensors);
    mem_free(L->local_of);
    mem_free(L->at);
    memset(L, 0, sizeof *L);
}

static int file_of(int group) { return group == CKPT_GROUP_PARAMS ? 0 : 1; }
/* The bytes of file tensor kf. */
static uint64_t kf_bytes(const layout *L, int kf) {
    int n = L->whole.count;
    return (uint64_t)L->whole.tensors[kf % n].numel * st_dtype_size(ckpt_group_dtype(kf / n, L->prec));
}

/* Builds the layout from the config alone (the same on every rank) and maps this rank's
 * tensors into it. with_files: also the files' headers and offsets (saving). */
static int layout_make(layout *L, const char *dir, int iteration, const transformer_config *cfg,
                       const param_set *local, int with_optimizer, int with_files, char *err,
                       size_t errlen) {
    memset(L, 0, sizeof *L);
    L->prec = dist_ckpt_precision(cfg);
    gpt_param_table spec;
    gpt_param_table_whole(cfg, &spec);
    param_set w = spec.params;
    L->whole = w;
    L->whole.tensors = mem_alloc(MEM_OTHER, ((size_t)w.count + 1) * sizeof(param_tensor),
                                 "checkpoint layout (tensor list)");
    memcpy(L->whole.tensors, w.tensors, (size_t)w.count * sizeof(param_tensor));
    gpt_param_table_free(&spec);
    int n = L->whole.count;
    L->local_of = mem_alloc(MEM_OTHER, ((size_t)n + 1) * sizeof(int), "checkpoint layout (map)");
    for (int k = 0; k < n; k++) L->local_of[k] = -1;
    for (int i = 0; i < local->count; i++) {
        const param_tensor *t = &local->tensors[i];
        if (t->pp_shared_copy) continue; /* the first stage's tensor is the one saved */
        uint64_t k = t->init_stream;
        const param_tensor *wt = k < (uint64_t)n ? &L->whole.tensors[k] : NULL;
        int same = wt && strcmp(wt->name, t->name) == 0 && wt->ndim == t->ndim &&
                   L->local_of[k] < 0;
        for (int d = 0; same && d < t->ndim; d++) same = wt->shape[d] == t->full_shape[d];
        if (!same) {
            err_set(err, errlen,
                    "%s: internal error: tensor %s (init stream %llu) is not the whole model's",
                    dir, t->name, (unsigned long long)k);
            layout_free(L);
            return -1;
        }
        L->local_of[k] = i;
    }
    L->nfiles = with_optimizer ? 2 : 1;
    int g0, g1;
    ckpt_file_groups(L->nfiles - 1, L->prec, &g0, &g1);
    L->ngroups = g1;
    if (!with_files) return 0;
    uint32_t *zeros = mem_alloc(MEM_OTHER, (CKPT_GROUPS * (size_t)n + 1) * sizeof(uint32_t),
                                "checkpoint crc32 placeholders");
    L->at = mem_alloc(MEM_OTHER, ((size_t)L->ngroups * n + 1) * sizeof(uint64_t),
                      "checkpoint file offsets");
    int rc = 0;
    for (int f = 0; f < L->nfiles && rc == 0; f++) {
        char path[PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/iter_%07d/%s.safetensors", dir, iteration,
                 f ? "optimizer" : "model");
        ckpt_file_groups(f, L->prec, &g0, &g1);
        uint64_t *at = L->at + (size_t)g0 * n; /* the file's tensors, in file order */
        uint8_t *header = NULL;
        uint64_t header_bytes, buffer_bytes;
        rc = ckpt_file_header(path, &L->whole, f, L->prec, zeros, &header, &header_bytes, at,
                              &buffer_bytes, err, errlen);
        free(header);
        if (rc) break;
        for (size_t k = 0; k < (size_t)(g1 - g0) * n; k++) at[k] += header_bytes;
        L->size[f] = header_bytes + buffer_bytes;
        L->header_bytes[f] = header_bytes;
    }
    mem_free(zeros);
    if (rc) layout_free(L);
    return rc;
}

/* ---- runs: a slice as pieces contiguous in the whole tensor ---- */

typedef int (*run_fn)(void *user, size_t whole_at, size_t local_at, size_t n);

/* Calls fn for elements [e0, e1) (local row-major order) of this rank's slice t, cut into
 * maximal pieces contiguous in the whole tensor: fn(whole element index, local element index,
 * count), in increasing order of both. */
static int for_each_run(const param_tensor *t, int tp_rank, int tp, size_t e0, size_t e1,
                        run_fn fn, void *user) {
    if (e0 >= e1) return 0;
    if (t->ndim == 0 || t->tp_split == TP_SPLIT_NONE || t->tp_split == TP_SPLIT_ROWS)
        return fn(user, (t->ndim ? tp_shard_row_start(t, tp_rank, tp, 0) : 0) + e0, e0, e1 - e0);
    size_t rl = t->numel / (size_t)t->shape[0]; /* a local row: contiguous in the whole too */
    size_t pw = 0, pl = 0, pn = 0;              /* the pending run */
    for (size_t row = e0 / rl; row * rl < e1; row++) {
        size_t lo = row * rl > e0 ? row * rl : e0, hi = (row + 1) * rl < e1 ? (row + 1) * rl : e1;
        size_t w = tp_shard_row_start(t, tp_rank, tp, (int64_t)row) + (lo - row * rl);
        if (pn && pw + pn == w && pl + pn == lo) {
            pn += hi - lo;
            continue;
        }
        if (pn && fn(user, pw, pl, pn)) return -1;
        pw = w;
        pl = lo;
        pn = hi - lo;
    }
    return pn ? fn(user, pw, pl, pn) : 0;
}

/* Does this rank write (and, loading, verify) the parameter t? Its moments (without the
 * distributed optimizer)? */
static int tp_owner(const param_tensor *t, const parallel_state *ps) {
    return !t->pp_shared_copy && (t->tp_split != TP_SPLIT_NONE || ps->tp_rank == 0);
}
static int owns_replica(const param_tensor *t, const parallel_state *ps) {
    /* a routed expert under expert parallelism: replica 0 of its expert-data-parallel group
     * (each EP rank holds other experts) */
    if (t->expert_parallel) return tp_owner(t, ps) && ps->edp_rank == 0;
    return tp_owner(t, ps) && ps->dp_rank == 0 && ps->cp_rank == 0;
}

/* ---- saving ---- */

typedef struct {
    int fd;
    const char *path, *name;
    uint64_t base;        /* file offset of the whole tensor's first byte */
    uint64_t bytes;       /* the whole tensor's bytes */
    const char *src;      /* the value of local element e0 */
    size_t es;            /* bytes per element */
    size_t e0;
    uint32_t *g;          /* this tensor's crc share */
    char *err;
    size_t errlen;
} write_ctx;

static int write_run(void *user, size_t whole_at, size_t local_at, size_t n) {
    write_ctx *c = user;
    const char *p = c->src + (local_at - c->e0) * c->es;
    uint64_t off = (uint64_t)whole_at * c->es, bytes = (uint64_t)n * c->es;
    if (io_pwrite_all(c->fd, p, bytes, c->base + off) != 0) {
        err_set(c->err, c->errlen, "%s: tensor %s: write failed: %s", c->path, c->name,
                strerror(errno));
        return -1;
    }
    *c->g ^= crc_shift(crc_linear(p, bytes), c->bytes - off - bytes);
    g_stats.data_bytes += bytes;
    g_stats.runs++;
    return 0;
}

/* Group g's buffer on this rank (whole slices): the model's parameters in the run's
 * precision, the moments, or the fp32 main parameters. */
static const char *group_buffer(int g, const layout *L, const param_set *local) {
    const void *bufs[CKPT_GROUPS] = {ckpt_model_params(local, L->prec), local->exp_avg,
                                     local->exp_avg_sq, param_set_fp32(local)};
    return bufs[g];
}

/* Are group g's tensors the distributed optimizer's pieces (rather than whole slices)? The
 * moments, and under --bf16 (dopt->main) the fp32 main parameters, which a load also fills
 * from the model file's parameters when it takes them (an F32 file, or no optimizer state);
 * the 16-bit copy is saved as whole slices (gathered) and made from the pieces after a load. */
static int dopt_group(int g, const dist_opt *dopt, int loading) {
    if (!dopt) return 0;
    if (g == CKPT_GROUP_EXP_AVG || g == CKPT_GROUP_EXP_AVG_SQ) return 1;
    return dopt->main && (g == CKPT_GROUP_MAIN || (loading && g == CKPT_GROUP_PARAMS));
}

/* With several distributed optimizer instances each holds the same state: the first one's
 * ranks write it (and count it in the crc32 shares), the others only read. */
static int dopt_writes(const dist_opt *dopt) { return dopt->ddp->instance == 0; }

/* The distributed optimizer's buffer of group g (one of dopt_group's). */
static float *dopt_state(int g, const dist_opt *dopt) {
    return g == CKPT_GROUP_EXP_AVG ? dopt->exp_avg : g == CKPT_GROUP_EXP_AVG_SQ ? dopt->exp_avg_sq
                                                                              : dopt->main;
}

/* Writes this rank's whole slices of group g's tensors. */
static int write_replicas(int g, const layout *L, const param_set *local, uint32_t *gs,
                          write_ctx *c) {
    const parallel_state *ps = parallel_get();
    int n = L->whole.count;
    for (int k = 0; k < n; k++) {
        int i = L->local_of[k], kf = g * n + k;
        if (i < 0 || !owns_replica(&local->tensors[i], ps)) continue;
        const param_tensor *t = &local->tensors[i];
        c->name = L->whole.tensors[k].name;
        c->base = L->at[kf];
        c->bytes = kf_bytes(L, kf);
        c->src = group_buffer(g, L, local) + t->offset * c->es;
        c->e0 = 0;
        c->g = &gs[kf];
        if (for_each_run(t, ps->tp_rank, ps->tp_size, 0, t->numel, write_run, c)) return -1;
    }
    return 0;
}

/* Writes this rank's pieces of the distributed optimizer's group g (a moment, or the fp32 main
 * parameters). */
static int write_pieces(int g, const layout *L, const param_set *local, const dist_opt *dopt,
                        uint32_t *gs, write_ctx *c) {
    const parallel_state *ps = parallel_get();
    int n = L->whole.count;
    const float *state = dopt_state(g, dopt);
    if (!dopt_writes(dopt)) return 0;
    for (int s = 0; s < dopt->num_segments; s++) {
        const dist_opt_segment *sg = &dopt->segs[s];
        const param_tensor *t = &local->tensors[sg->tensor];
        if (!tp_owner(t, ps)) continue;
        int k = (int)t->init_stream, kf = g * n + k;
        c->name = L->whole.tensors[k].name;
        c->base = L->at[kf];
        c->bytes = kf_bytes(L, kf);
        c->src = (const char *)(state + sg->state);
        c->e0 = sg->begin - t->offset;
        c->g = &gs[kf];
        if (for_each_run(t, ps->tp_rank, ps->tp_size, c->e0, c->e0 + sg->numel, write_run, c))
            return -1;
    }
    return 0;
}

/* Writes this rank's slices into file f (0 model, 1 optimizer) open at fd: each group's whole
 * slices, or with dopt the moments' pieces; gs: the crc shares of all file tensors. */
static int write_slices(int f, int fd, const char *path, const layout *L, const param_set *local,
                        const dist_opt *dopt, uint32_t *gs, char *err, size_t errlen) {
    int g0, g1;
    ckpt_file_groups(f, L->prec, &g0, &g1);
    for (int g = g0; g < g1; g++) {
        write_ctx c = {.fd = fd, .path = path, .err = err, .errlen = errlen,
                       .es = st_dtype_size(ckpt_group_dtype(g, L->prec))};
        if (dopt_group(g, dopt, 0) ? write_pieces(g, L, local, dopt, gs, &c)
                                : write_replicas(g, L, local, gs, &c))
            return -1;
    }
    return 0;
}

/* Does this rank write anything into file f? */
static int writes_into(int f, const layout *L, const param_set *local, const dist_opt *dopt) {
    const parallel_state *ps = parallel_get();
    int g0, g1, replicas = 0;
    ckpt_file_groups(f, L->prec, &g0, &g1);
    for (int g = g0; g < g1; g++) {
        if (!dopt_group(g, dopt, 0)) {
            replicas = 1;
            continue;
        }
        for (int s = 0; s < dopt->num_segments && dopt_writes(dopt); s++)
            if (tp_owner(&local->tensors[dopt->segs[s].tensor], ps)) return 1;
    }
    for (int k = 0; replicas && k < L->whole.count; k++)
        if (L->local_of[k] >= 0 && owns_replica(&local->tensors[L->local_of[k]], ps)) return 1;
    return 0;
}

static void file_path(char *out, size_t len, const char *tmp_dir, int f) {
    snprintf(out, len, "%s/%s.safetensors", tmp_dir, f ? "optimizer" : "model");
}

/* The start of a save (saving = 1) or load: the counters and the buffer peak reset, the
 * optimizer buffers checked, the file layout built. 0, or -1 with a message. */
static int io_begin(layout *L, const char *dir, int iteration, const transformer_config *cfg,
                    const param_set *local, const dist_opt *dopt, int with_optimizer, int saving,
                    char *err, size_t errlen) {
    mem_phase_start();
    memset(&g_stats, 0, sizeof g_stats);
    memset(L, 0, sizeof *L);
    if (with_optimizer && !dopt && local->count > 0 && (!local->exp_avg || !local->exp_avg_sq)) {
        err_set(err, errlen, "checkpoint: optimizer state requested but the parameter set has "
                             "no exp_avg / exp_avg_sq buffers");
        return -1;
    }
    if (layout_make(L, dir, iteration, cfg, local, with_optimizer, saving, err, errlen))
        return -1;
    if (saving && local->count > 0 && !ckpt_model_params(local, L->prec)) {
        err_set(err, errlen, "checkpoint: the run is %s but the parameter set has no %s copy",
                ckpt_precision_name(L->prec), ckpt_precision_name(L->prec));
        layout_free(L);
        return -1;
    }
    return 0;
}

/* Nothing non-finite is ever saved: this rank's parameters and its optimizer state (the
 * distributed optimizer: its pieces) are checked before any file is made. */
static int check_finite(const param_set *local, const dist_opt *dopt, int with_optimizer,
                        char *err, size_t errlen) {
    if (ckpt_check_finite(local, with_optimizer && !dopt, err, errlen))
        return refuse_nonfinite(err, errlen);
    if (!dopt) return 0;
    const float *m[3] = {dopt->main, dopt->exp_avg, dopt->exp_avg_sq};
    const char *names[3] = {"fp32 main parameters", "exp_avg", "exp_avg_sq"};
    for (int b = 0; b < (with_optimizer ? 3 : 1); b++) /* main parameters (always), moments */
        if (m[b] && ckpt_first_nonfinite(m[b], dopt->shard_numel) < dopt->shard_numel) {
            err_set(err, errlen, "the distributed optimizer's %s on rank %d holds a non-finite "
                    "value", names[b], parallel_get()->world_rank);
            return refuse_nonfinite(err, errlen);
        }
    return 0;
}

/* ---- a save in three phases (collective begin, each rank's write, collective finish), so
 * that --async-save can run the write in a background thread ---- */

struct dist_ckpt_pending {
    layout L;
    ckpt_txn x;          /* rank 0's transaction (the temporary directory on every rank) */
    int fds[2];          /* rank 0's open files */
    ckpt_state state;    /* state.json (owned copies of the JSON parts) */
    const param_set *local; /* the slices to write: the live ones, or the snapshot's */
    const dist_opt *dopt;
    param_set snap;      /* --async-save: a copy of the state at the save point */
    dist_opt snap_dopt;
    uint32_t *g;         /* crc shares of every file tensor */
    size_t other0;       /* MEM_OTHER at the start (the stats' buffer peak) */
    int rc;              /* the write's status, its message in err */
    char err[1024];
    pthread_t thread;
    int threaded;
    int done;            /* the write has returned (atomic) */
    char dir[PATH_MAX];  /* the checkpoint directory */
    int hold_until_iteration; /* test hook (MEGADLM_TEST_ASYNC_SAVE_HOLD), -1 none */
    char hold_path[PATH_MAX];
};

static void pending_free(dist_ckpt_pending *p) {
    if (!p) return;
    mem_free(p->g);
    layout_free(&p->L);
    ckpt_state_free(&p->state);
    mem_free(p->snap.data);
    mem_free(p->snap.data_bf16);
    mem_free(p->snap.main);
    mem_free(p->snap.exp_avg);
    mem_free(p->snap.exp_avg_sq);
    mem_free(p->snap_dopt.exp_avg);
    mem_free(p->snap_dopt.exp_avg_sq);
    mem_free(p->snap_dopt.main);
    free(p);
}

/* Phase 1 (collective): checks, the layout, rank 0's temporary directory and files at their
 * final size. NULL (every rank) on failure, with the lowest failing rank's message. */
static dist_ckpt_pending *save_begin(const char *dir, const transformer_config *cfg,
                                     const param_set *local, const dist_opt *dopt,
                                     const ckpt_state *st, int with_optimizer, char *err,
                                     size_t errlen) {
    const parallel_state *ps = parallel_get();
    int root = ps->world_rank == 0, rc = 0;
    dist_ckpt_pending *p = calloc(1, sizeof *p);
    if (!p) die(1, "out of memory (checkpoint save)");
    p->other0 = mem_current(MEM_OTHER);
    p->fds[0] = p->fds[1] = -1;
    p->local = local;
    p->dopt = dopt;
    p->hold_until_iteration = -1;
    snprintf(p->dir, sizeof p->dir, "%s", dir);
    layout *L = &p->L;
    rc = io_begin(L, dir, st->iteration, cfg, local, dopt, with_optimizer, 1, err, errlen);
    if (rc == 0) rc = check_finite(local, dopt, with_optimizer, err, errlen);
    if (agree(rc, err, errlen)) {
        layout_free(L); /* (io_begin frees it on its own failures) */
        free(p);
        return NULL;
    }
    g_stats.file_bytes = L->size[0] + (L->nfiles > 1 ? L->size[1] : 0);
    p->state = *st; /* state.json records the precision the files are in */
    p->state.precision = L->prec;
    p->state.args = st->args ? cJSON_Duplicate(st->args, 1) : NULL;
    p->state.grad_scaler = st->grad_scaler ? cJSON_Duplicate(st->grad_scaler, 1) : NULL;
    p->state.rng_state = st->rng_state ? cJSON_Duplicate(st->rng_state, 1) : NULL;
    char path[PATH_MAX + 64];
    if (root) {
        rc = ckpt_begin(&p->x, dir, st->iteration, err, errlen);
        for (int f = 0; f < L->nfiles && rc == 0; f++) {
            file_path(path, sizeof path, p->x.tmp_dir, f);
            if ((rc = ckpt_stage_hook(f ? "optimizer" : "model", path, err, errlen))) break;
            p->fds[f] = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
            if (p->fds[f] < 0) {
                err_set(err, errlen, "%s: cannot create: %s", path, strerror(errno));
                rc = -1;
            } else if (ftruncate(p->fds[f], (off_t)L->size[f]) != 0) {
                err_set(err, errlen, "%s: cannot extend to %llu bytes: %s", path,
                        (unsigned long long)L->size[f], strerror(errno));
                rc = -1;
            }
        }
    }
    if (agree(rc, err, errlen)) {
        dist_ckpt_pending_discard(p);
        return NULL;
    }
    if (ps->mpi && ps->world_size > 1)
        MPI_Bcast(p->x.tmp_dir, (int)sizeof p->x.tmp_dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    p->g = mem_alloc(MEM_OTHER, ((size_t)L->ngroups * L->whole.count + 1) * sizeof(uint32_t),
                     "checkpoint crc32 shares");
    return p;
}

/* MEGADLM_TEST_ASYNC_SAVE_HOLD="N:PATH" (tests only): the background write of iteration N
 * waits, its slices written but not yet synced, until PATH exists, so that a test can kill the
 * job while a save is in flight without depending on timing. */
static void test_hold(const dist_ckpt_pending *p) {
    if (p->hold_until_iteration != p->state.iteration) return;
    while (access(p->hold_path, F_OK) != 0) usleep(10000);
}

/* Phase 2 (this rank only, no communication): its slices, their crc shares, fsync. */
static void save_write(dist_ckpt_pending *p) {
    const parallel_state *ps = parallel_get();
    int root = ps->world_rank == 0, rc = 0;
    char path[PATH_MAX + 64];
    for (int f = 0; f < p->L.nfiles && rc == 0; f++) {
        if (!writes_into(f, &p->L, p->local, p->dopt)) continue;
        file_path(path, sizeof path, p->x.tmp_dir, f);
        int fd = p->fds[f];
        if (!root && (fd = open(path, O_WRONLY | O_CLOEXEC)) < 0) {
            err_set(p->err, sizeof p->err, "%s: cannot open: %s", path, strerror(errno));
            rc = -1;
            break;
        }
        rc = write_slices(f, fd, path, &p->L, p->local, p->dopt, p->g, p->err, sizeof p->err);
        if (p->threaded) test_hold(p);
        if (!root) rc = io_fsync_close(fd, path, rc, p->err, sizeof p->err);
    }
    p->rc = rc;
    __atomic_store_n(&p->done, 1, __ATOMIC_RELEASE);
}

static void *save_thread(void *arg) {
    save_write(arg);
    return NULL;
}

/* Phase 3 (collective): the crc32s into rank 0's headers, fsync, the commit (state.json,
 * rename into place, tracker). Frees p. */
static int save_finish(dist_ckpt_pending *p, char *err, size_t errlen) {
    const parallel_state *ps = parallel_get();
    int root = ps->world_rank == 0, rc = p->rc;
    if (p->threaded) pthread_join(p->thread, NULL);
    p->threaded = 0;
    if (rc) err_set(err, errlen, "%s", p->err);
    if (agree(rc, err, errlen)) {
        dist_ckpt_pending_discard(p);
        return -1;
    }
    layout *L = &p->L;
    int n = L->whole.count, nk = L->ngroups * n;
    uint32_t *g = p->g;
    char path[PATH_MAX + 64];
    if (ps->mpi && ps->world_size > 1)
        MPI_Reduce(root ? MPI_IN_PLACE : g, g, nk, MPI_UINT32_T, MPI_BXOR, 0, MPI_COMM_WORLD);
    if (root) {
        for (int kf = 0; kf < nk; kf++) g[kf] = crc_final(g[kf], kf_bytes(L, kf));
        for (int f = 0; f < L->nfiles && rc == 0; f++) {
            file_path(path, sizeof path, p->x.tmp_dir, f);
            int g0, g1;
            ckpt_file_groups(f, L->prec, &g0, &g1);
            uint8_t *header = NULL;
            uint64_t header_bytes = 0;
            rc = ckpt_file_header(path, &L->whole, f, L->prec, g + (size_t)g0 * n, &header,
                                  &header_bytes, NULL, NULL, err, errlen);
            if (rc == 0 && header_bytes != L->header_bytes[f]) {
                err_set(err, errlen, "%s: internal error: the header changed length", path);
                rc = -1;
            }
            if (rc == 0 && io_pwrite_all(p->fds[f], header, header_bytes, 0) != 0) {
                err_set(err, errlen, "%s: writing the header: %s", path, strerror(errno));
                rc = -1;
            }
            free(header);
            if (rc == 0 && fsync(p->fds[f]) != 0) {
                err_set(err, errlen, "%s: fsync failed: %s", path, strerror(errno));
                rc = -1;
            }
        }
        for (int f = 0; f < 2; f++) {
            if (p->fds[f] >= 0 && close(p->fds[f]) != 0 && rc == 0) {
                err_set(err, errlen, "%s: close failed: %s", path, strerror(errno));
                rc = -1;
            }
            p->fds[f] = -1;
        }
        if (rc == 0) {
            rc = ckpt_commit(&p->x, &p->state, err, errlen); /* cleans up after itself */
            p->x.tmp_dir[0] = 0;
        }
    }
    if (agree(rc, err, errlen)) {
        dist_ckpt_pending_discard(p);
        return -1;
    }
    g_stats.buffer_peak = mem_phase_peak(MEM_OTHER) - p->other0;
    pending_free(p);
    return 0;
}

void dist_ckpt_pending_discard(dist_ckpt_pending *p) {
    if (!p) return;
    if (p->threaded) pthread_join(p->thread, NULL);
    for (int f = 0; f < 2; f++)
        if (p->fds[f] >= 0) close(p->fds[f]);
    if (parallel_get()->world_rank == 0) ckpt_abort(&p->x);
    g_stats.buffer_peak = mem_phase_peak(MEM_OTHER) - p->other0;
    pending_free(p);
}

int dist_ckpt_save(const char *dir, const transformer_config *cfg, const param_set *local,
                   const dist_opt *dopt, const ckpt_state *st, int with_optimizer, char *err,
                   size_t errlen) {
    dist_ckpt_pending *p = save_begin(dir, cfg, local, dopt, st, with_optimizer, err, errlen);
    if (!p) return -1;
    save_write(p);
    return save_finish(p, err, errlen);
}

/* A copy of n elements of size es at src (NULL stays NULL), tracked as checkpoint memory. */
static void *snapshot(const void *src, size_t n, size_t es, const char *what) {
    if (!src) return NULL;
    void *d = mem_alloc(MEM_OTHER, n * es + 1, what);
    memcpy(d, src, n * es);
    return d;
}

/* The async save's copy of what the write reads: this rank's parameters (fp32, 16-bit, main),
 * moments, and the distributed optimizer's pieces; the tensor lists are shared (they do not
 * change while training). */
static void take_snapshot(dist_ckpt_pending *p, const param_set *local, const dist_opt *dopt) {
    size_t n = local->numel;
    p->snap = *local;
    p->snap.grad = NULL;
    p->snap.data = snapshot(local->data, n, sizeof(float), "async checkpoint: parameters");
    p->snap.data_bf16 = snapshot(local->data_bf16, n, sizeof(uint16_t),
                                 "async checkpoint: 16-bit parameters");
    p->snap.main = snapshot(local->main, n, sizeof(float), "async checkpoint: main parameters");
    p->snap.exp_avg = snapshot(local->exp_avg, n, sizeof(float), "async checkpoint: exp_avg");
    p->snap.exp_avg_sq = snapshot(local->exp_avg_sq, n, sizeof(float),
                                  "async checkpoint: exp_avg_sq");
    p->local = &p->snap;
    if (!dopt) return;
    size_t s = dopt->shard_numel;
    p->snap_dopt = *dopt;
    p->snap_dopt.ps = &p->snap;
    p->snap_dopt.exp_avg = snapshot(dopt->exp_avg, s, sizeof(float), "async checkpoint: exp_avg");
    p->snap_dopt.exp_avg_sq = snapshot(dopt->exp_avg_sq, s, sizeof(float),
                                       "async checkpoint: exp_avg_sq");
    p->snap_dopt.main = snapshot(dopt->main, s, sizeof(float),
                                 "async checkpoint: main parameters");
    p->dopt = &p->snap_dopt;
}

int dist_ckpt_save_async(const char *dir, const transformer_config *cfg, const param_set *local,
                         const dist_opt *dopt, const ckpt_state *st, int with_optimizer,
                         dist_ckpt_pending **out, char *err, size_t errlen) {
    *out = NULL;
    dist_ckpt_pending *p = save_begin(dir, cfg, local, dopt, st, with_optimizer, err, errlen);
    if (!p) return -1;
    take_snapshot(p, local, dopt);
    const char *hold = getenv("MEGADLM_TEST_ASYNC_SAVE_HOLD");
    if (hold && sscanf(hold, "%d:", &p->hold_until_iteration) == 1 && strchr(hold, ':'))
        snprintf(p->hold_path, sizeof p->hold_path, "%s", strchr(hold, ':') + 1);
    p->threaded = 1;
    if (pthread_create(&p->thread, NULL, save_thread, p) != 0) {
        p->threaded = 0; /* no thread: write now, as a synchronous save */
        save_write(p);
    }
    *out = p;
    return 0;
}

int dist_ckpt_pending_done(const dist_ckpt_pending *p) {
    const parallel_state *ps = parallel_get();
    int mine = __atomic_load_n(&p->done, __ATOMIC_ACQUIRE), all = mine;
    if (ps->mpi && ps->world_size > 1)
        MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all;
}

int dist_ckpt_pending_iteration(const dist_ckpt_pending *p) { return p->state.iteration; }
const char *dist_ckpt_pending_dir(const dist_ckpt_pending *p) { return p->dir; }

int dist_ckpt_finish(dist_ckpt_pending *p, char *err, size_t errlen) {
    return save_finish(p, err, errlen);
}

/* ---- loading ---- */

/* Reading goes through pread() on the file (the page cache), not the mapping, so that a rank's
 * resident memory does not grow by what it reads; only F16 / BF16 tensors (files of other
 * tools) are converted from the mapping. */
#define CRC_CHUNK ((size_t)1 << 20) /* the bounce buffer of the crc32 pass, at most */

typedef struct {
    const st_file *f;
    const st_entry *e;
    int fd;
    float *dst;     /* where local element e0 goes */
    size_t e0;
    uint32_t *g;    /* crc share (verification) */
    uint8_t *bounce;
    size_t bounce_bytes;
    char *err;
    size_t errlen;
} read_ctx;

/* File offset of entry e's first byte. */
static uint64_t entry_at(const st_file *f, const st_entry *e) {
    return 8 + f->header_len + e->begin;
}

static int read_run(void *user, size_t whole_at, size_t local_at, size_t n) {
    read_ctx *c = user;
    float *dst = c->dst + (local_at - c->e0);
    if (c->e->dtype == ST_F32) {
        if (io_pread_all(c->fd, dst, n * sizeof(float),
                      entry_at(c->f, c->e) + (uint64_t)whole_at * sizeof(float)) != 0) {
            err_set(c->err, c->errlen, "%s: tensor %s: read failed: %s", c->f->path, c->e->name,
                    strerror(errno));
            return -1;
        }
    } else if (st_read_f32_range(c->f, c->e, whole_at, n, dst, c->err, c->errlen)) {
        return -1;
    }
    g_stats.data_bytes += (uint64_t)n * st_dtype_size(c->e->dtype);
    g_stats.runs++;
    return 0;
}

static int crc_run(void *user, size_t whole_at, size_t local_at, size_t n) {
    (void)local_at;
    read_ctx *c = user;
    size_t es = st_dtype_size(c->e->dtype);
    uint64_t off = (uint64_t)whole_at * es, bytes = (uint64_t)n * es;
    uLong crc = 0xffffffffUL; /* G over the run, chunk by chunk */
    for (uint64_t done = 0; done < bytes;) {
        size_t len = bytes - done < c->bounce_bytes ? (size_t)(bytes - done) : c->bounce_bytes;
        if (io_pread_all(c->fd, c->bounce, len, entry_at(c->f, c->e) + off + done) != 0) {
            err_set(c->err, c->errlen, "%s: tensor %s: read failed: %s", c->f->path, c->e->name,
                    strerror(errno));
            return -1;
        }
        crc = crc32_z(crc, c->bounce, len);
        done += len;
    }
    *c->g ^= crc_shift((uint32_t)crc ^ 0xffffffffu, (c->e->end - c->e->begin) - off - bytes);
    return 0;
}

/* Runs fn over this rank's part of file tensor kf (k = kf mod n: whole tensor k, local tensor
 * t): its whole slice (parameters, or moments without the distributed optimizer) or, with dopt,
 * the pieces of its segments in t. only_owned: only what this rank would write (each byte of
 * the model once over all ranks). */
static int for_each_part(int kf, int n, const param_tensor *t, int ti, float *data_dst,
                         const dist_opt *dopt, int only_owned, run_fn fn, read_ctx *c) {
    const parallel_state *ps = parallel_get();
    if (!dopt_group(kf / n, dopt, 1)) {
        if (only_owned && !owns_replica(t, ps)) return 0;
        c->dst = data_dst;
        c->e0 = 0;
        return for_each_run(t, ps->tp_rank, ps->tp_size, 0, t->numel, fn, c);
    }
    if (only_owned && (!tp_owner(t, ps) || !dopt_writes(dopt))) return 0;
    float *state = dopt_state(kf / n, dopt);
    for (int s = 0; s < dopt->num_segments; s++) {
        const dist_opt_segment *sg = &dopt->segs[s];
        if (sg->tensor != ti) continue;
        c->dst = state + sg->state;
        c->e0 = sg->begin - t->offset;
        if (for_each_run(t, ps->tp_rank, ps->tp_size, c->e0, c->e0 + sg->numel, fn, c))
            return -1;
    }
    return 0;
}

/* What a load reads: the files, every file tensor's header entry and crc32, and where the
 * parameters come from. */
typedef struct {
    st_file files[2];
    int fds[2];
    int ngroups;          /* groups checked: 1, 3, or 4 with the fp32 main parameters */
    int params_group;     /* the parameters' source: CKPT_GROUP_PARAMS or CKPT_GROUP_MAIN */
    st_dtype file_dtype;  /* model.safetensors' parameters */
    const st_entry **ents; /* [CKPT_GROUPS * n] */
    uint32_t *want;       /* crc32 in __metadata__ */
    int *has;             /* ... when there is one */
} load_src;

/* The parameters' dtype in the model file, over the tensors read (a renamed load leaves some
 * entries NULL: not read). */
static int params_dtype(load_src *S, int n, char *err, size_t errlen) {
    const st_entry **read = mem_alloc(MEM_OTHER, ((size_t)n + 1) * sizeof *read,
                                      "checkpoint entries read");
    int m = 0;
    for (int k = 0; k < n; k++)
        if (S->ents[k]) read[m++] = S->ents[k];
    int rc = ckpt_params_dtype(&S->files[0], read, m, &S->file_dtype, err, errlen);
    mem_free(read);
    return rc;
}

/* Opens the files (every rank) and checks every tensor of the model in their headers: the
 * parameters' dtype decides whether the optimizer file's fp32 main parameters are read (a
 * 16-bit model file with the optimizer state) and checked too. source (the model file only):
 * the file tensor each model tensor is read from (dist_ckpt_load_renamed), NULL: its own. */
static int open_and_check(load_src *S, const layout *L, const char *dir, int iteration,
                          int with_optimizer, dist_ckpt_source_fn source, char *err,
                          size_t errlen) {
    int n = L->whole.count, rc = 0;
    for (int f = 0; f < L->nfiles && rc == 0; f++) {
        char path[PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/iter_%07d/%s.safetensors", dir, iteration,
                 f ? "optimizer" : "model");
        if (f == 1 && access(path, F_OK) != 0 && errno == ENOENT) {
            err_set(err, errlen, "%s: missing: the checkpoint was saved without optimizer state "
                    "(--no-load-optim or --finetune load the model alone)", path);
            return -1;
        }
        if (st_open(path, &S->files[f], err, errlen)) return -1;
        if ((S->fds[f] = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
            err_set(err, errlen, "%s: cannot open: %s", path, strerror(errno));
            return -1;
        }
    }
    S->ngroups = 1; /* the optimizer file's groups are known once the parameters' dtype is */
    for (int g = 0; g < S->ngroups && rc == 0; g++) {
        for (int k = 0; k < n && rc == 0; k++) {
            const param_tensor *w = &L->whole.tensors[k];
            char name[PARAM_NAME_MAX + 32], renamed[PARAM_NAME_MAX];
            const char *src = source ? source(w->name, renamed, sizeof renamed) : w->name;
            int kf = g * n + k;
            if (!src) { /* not read: it keeps its value (and no crc is checked) */
                S->ents[kf] = NULL;
                S->has[kf] = 0;
                continue;
            }
            snprintf(name, sizeof name, "%s%s", ckpt_group_prefix(g), src);
            rc = ckpt_check_entry(&S->files[file_of(g)], name, w->ndim, w->shape, &S->ents[kf],
                                  &S->want[kf], &S->has[kf], err, errlen);
        }
        if (g > 0 || rc) continue;
        rc = params_dtype(S, n, err, errlen);
        int from_main = with_optimizer && S->file_dtype != ST_F32;
        S->params_group = from_main ? CKPT_GROUP_MAIN : CKPT_GROUP_PARAMS;
        S->ngroups = !with_optimizer ? 1 : from_main ? CKPT_GROUP_MAIN + 1
                                                     : CKPT_GROUP_EXP_AVG_SQ + 1;
    }
    size_t read = (size_t)S->ngroups * (size_t)n;
    if (rc == 0) rc = ckpt_check_unused(&S->files[0], S->ents, read, NULL, err, errlen);
    if (rc == 0 && L->nfiles > 1)
        rc = ckpt_check_unused(&S->files[1], S->ents, read, &S->files[0], err, errlen);
    return rc;
}

/* crc32s: each byte's share read and computed by the rank that would write it, the shares
 * XOR-reduced and checked on rank 0. */
static int check_crcs(load_src *S, const layout *L, const param_set *local,
                      const dist_opt *dopt, uint32_t *g, char *err, size_t errlen) {
    const parallel_state *ps = parallel_get();
    int n = L->whole.count, nf = S->ngroups * n, rc = 0;
    size_t bounce_bytes = 0; /* at most a tensor, at most 1 MiB */
    for (int kf = 0; kf < nf; kf++)
        if (L->local_of[kf % n] >= 0 && S->has[kf] &&
            S->ents[kf]->end - S->ents[kf]->begin > bounce_bytes)
            bounce_bytes = S->ents[kf]->end - S->ents[kf]->begin;
    bounce_bytes = bounce_bytes < CRC_CHUNK ? bounce_bytes : CRC_CHUNK;
    uint8_t *bounce = bounce_bytes ? mem_alloc(MEM_OTHER, bounce_bytes, "checkpoint crc32 reads")
                                   : NULL;
    for (int kf = 0; kf < nf && rc == 0; kf++) {
        int ti = L->local_of[kf % n], f = file_of(kf / n);
        if (ti < 0 || !S->has[kf]) continue;
        read_ctx c = {.f = &S->files[f], .e = S->ents[kf], .fd = S->fds[f], .g = &g[kf],
                      .bounce = bounce, .bounce_bytes = bounce_bytes, .err = err,
                      .errlen = errlen};
        rc = for_each_part(kf, n, &local->tensors[ti], ti, NULL, dopt, 1, crc_run, &c);
    }
    mem_free(bounce);
    if (ps->mpi && ps->world_size > 1)
        MPI_Reduce(ps->world_rank == 0 ? MPI_IN_PLACE : g, g, nf, MPI_UINT32_T, MPI_BXOR, 0,
                   MPI_COMM_WORLD);
    if (ps->world_rank == 0)
        for (int k = 0; k < n && rc == 0; k++)
            for (int b = 0; b < S->ngroups && rc == 0; b++) {
                int kf = b * n + k;
                if (!S->has[kf]) continue;
                const st_entry *e = S->ents[kf];
                rc = ckpt_check_crc(&S->files[file_of(b)], e->name, S->want[kf],
                                    crc_final(g[kf], e->end - e->begin), err, errlen);
            }
    return rc;
}

/* Every rank: its slices (a tied embedding's copy on the last stage included); the parameters
 * from S->params_group, widened to fp32 where they are 16-bit. */
static int read_slices(load_src *S, const layout *L, param_set *local, dist_opt *dopt,
                       char *err, size_t errlen) {
    int n = L->whole.count, rc = 0;
    for (int i = 0; i < local->count && rc == 0; i++) {
        param_tensor *t = &local->tensors[i];
        int k = (int)t->init_stream;
        float *fp32 = param_set_fp32(local);
        float *bufs[CKPT_GROUPS] = {fp32, local->exp_avg, local->exp_avg_sq, fp32};
        for (int b = 0; b < S->ngroups && rc == 0; b++) {
            if ((b == CKPT_GROUP_PARAMS || b == CKPT_GROUP_MAIN) && b != S->params_group)
                continue;
            int kf = b * n + k, f = file_of(b);
            if (!S->ents[kf]) continue; /* a renamed load's tensor not read */
            read_ctx c = {.f = &S->files[f], .e = S->ents[kf], .fd = S->fds[f], .err = err,
                          .errlen = errlen};
            rc = for_each_part(kf, n, t, i, bufs[b] ? bufs[b] + t->offset : NULL, dopt, 0,
                               read_run, &c);
        }
    }
    return rc;
}

static int load_tensors(const char *dir, int iteration, const transformer_config *cfg,
                        param_set *local, dist_opt *dopt, int with_optimizer,
                        dist_ckpt_source_fn source, char *err, size_t errlen) {
    size_t other0 = mem_current(MEM_OTHER);
    g_note[0] = 0;
    layout L;
    int rc = io_begin(&L, dir, iteration, cfg, local, dopt, with_optimizer, 0, err, errlen);
    if (agree(rc, err, errlen)) {
        layout_free(&L);
        return -1;
    }
    size_t nf = (size_t)CKPT_GROUPS * L.whole.count;
    load_src S = {.fds = {-1, -1}};
    S.ents = mem_alloc(MEM_OTHER, (nf + 1) * sizeof(*S.ents), "checkpoint entries");
    S.want = mem_alloc(MEM_OTHER, (nf + 1) * sizeof(uint32_t), "checkpoint crcs");
    S.has = mem_alloc(MEM_OTHER, (nf + 1) * sizeof(int), "checkpoint crc flags");
    uint32_t *g = mem_alloc(MEM_OTHER, (nf + 1) * sizeof(uint32_t), "checkpoint crc32 shares");
    rc = open_and_check(&S, &L, dir, iteration, with_optimizer, source, err, errlen);
    if ((rc = agree(rc, err, errlen)) == 0)
        rc = agree(check_crcs(&S, &L, local, dopt, g, err, errlen), err, errlen);
    if (rc == 0) {
        rc = agree(read_slices(&S, &L, local, dopt, err, errlen), err, errlen);
        g_stats.file_bytes = S.files[0].map_len + S.files[1].map_len;
        ckpt_conversion_note(g_note, sizeof g_note, S.file_dtype, L.prec,
                             S.params_group == CKPT_GROUP_MAIN);
    }
    for (int f = 0; f < 2; f++)
        if (S.fds[f] >= 0) close(S.fds[f]);
    st_close(&S.files[0]);
    st_close(&S.files[1]);
    mem_free(S.ents);
    mem_free(S.want);
    mem_free(S.has);
    mem_free(g);
    layout_free(&L);
    g_stats.buffer_peak = mem_phase_peak(MEM_OTHER) - other0;
    return rc;
}

int dist_ckpt_load_tensors(const char *dir, int iteration, const transformer_config *cfg,
                           param_set *local, dist_opt *dopt, int with_optimizer, char *err,
                           size_t errlen) {
    return load_tensors(dir, iteration, cfg, local, dopt, with_optimizer, NULL, err, errlen);
}

int dist_ckpt_load_renamed(const char *dir, int iteration, const transformer_config *cfg,
                           param_set *local, dist_opt *dopt, dist_ckpt_source_fn source,
                           char *err, size_t errlen) {
    return load_tensors(dir, iteration, cfg, local, dopt, 0, source, err, errlen);
}
