/* Checkpoint files: see checkpoint_files.h for the contract and docs/CHECKPOINT.md for the layout.
 *
 * Save protocol (ckpt_save), each step durable before the next:
 *   1. mkdir -p DIR
 *   2. mkdir DIR/iter_NNNNNNN.tmp-<pid>; write model.safetensors, optimizer.safetensors,
 *      state.json into it, fsync each file, fsync the directory
 *   3. move it into place: rename(tmp, DIR/iter_NNNNNNN) when no such directory exists; else
 *      swap the two atomically (renameat2 RENAME_EXCHANGE) and remove the old one from the
 *      temporary name, or where the file system cannot swap: rename the old one to
 *      iter_NNNNNNN.old-<pid>, rename the new one in, remove the old one. fsync DIR.
 *   4. tracker: write DIR/latest_checkpointed_iteration.txt.tmp-<pid>, fsync, rename over
 *      latest_checkpointed_iteration.txt, fsync DIR
 *   5. remove leftovers of earlier interrupted saves (iter_*.tmp-*, iter_*.old-*,
 *      latest_checkpointed_iteration.txt.tmp-*): one process writes a checkpoint directory.
 * A failure at any step removes this save's temporary files and leaves the tracker as it was.
 *
 * Every tensor's zlib crc32 (of its stored little-endian bytes) is in its file's
 * __metadata__ as "crc32.<tensor name>": "%08x"; ckpt_load_tensors verifies it when present.
 */
#include "training/checkpoint_files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "core/tensor/safetensors.h"
#include "core/util/error.h"
#include "core/util/io.h"

#define CKPT_FORMAT_VERSION 1
#define CKPT_TRACKER "latest_checkpointed_iteration.txt"

/* ckpt_set_fault_injection's function; NULL in every real run. */
static ckpt_fault_fn g_fault;

void ckpt_set_fault_injection(ckpt_fault_fn fault) { g_fault = fault; }

static int fault_at(const char *stage) { return g_fault && g_fault(stage); }

static int path_join(char *out, size_t len, char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= len) {
        err_set(err, errlen, "checkpoint path too long (%d characters)", n);
        return -1;
    }
    return 0;
}

/* mkdir -p; fsyncs the parent of every directory it creates. */
static int mkdir_p(const char *dir, char *err, size_t errlen) {
    char buf[PATH_MAX];
    if (path_join(buf, sizeof buf, err, errlen, "%s", dir)) return -1;
    return io_mkdir_p(buf, 1, err, errlen);
}


/* Creates path with text, fsyncs and closes it. */
static int write_text_file(const char *path, const char *text, char *err, size_t errlen) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        err_set(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        return -1;
    }
    if (io_write_all(fd, text, strlen(text)) != 0 || fsync(fd) != 0) {
        err_set(err, errlen, "%s: write failed: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (close(fd) != 0) {
        err_set(err, errlen, "%s: close failed: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

static uint32_t crc32_bytes(const void *data, size_t n) {
    uLong c = crc32_z(0L, Z_NULL, 0);
    return (uint32_t)crc32_z(c, (const Bytef *)data, n);
}

static void shape_str(char *buf, size_t len, int ndim, const int64_t *shape) {
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < ndim && n < len; d++)
        n += (size_t)snprintf(buf + n, len - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (n < len) snprintf(buf + n, len - n, "]");
}

/* The tensors and __metadata__ of one checkpoint file: ps's tensors named prefix + name, for
 * each group of the file under precision p (checkpoint_precision.h: the model file's
 * parameters, or the optimizer file's exp_avg, exp_avg_sq and, with 16-bit parameters,
 * fp32_param tensors), with "format": "pt" and crc32.<tensor name> = crcs[k] ("%08x"; k in file
 * order). Data pointers from bufs[group] (NULL: none). */
typedef struct {
    int n;
    st_tensor_desc *desc;
    st_meta *meta; /* [n + 1] */
    char (*names)[PARAM_NAME_MAX + 32];
    char (*keys)[PARAM_NAME_MAX + 40];
    char (*vals)[12];
} file_desc;

static void file_desc_free(file_desc *d) {
    free(d->desc);
    free(d->meta);
    free(d->names);
    free(d->keys);
    free(d->vals);
}

static int file_desc_make(file_desc *d, const char *path, const param_set *ps, int optimizer,
                          ckpt_precision p, const void *const *bufs, const uint32_t *crcs,
                          char *err, size_t errlen) {
    int g0, g1;
    ckpt_file_groups(optimizer, p, &g0, &g1);
    int n = ps->count * (g1 - g0);
    memset(d, 0, sizeof *d);
    d->n = n;
    d->desc = calloc((size_t)n + 1, sizeof *d->desc);
    d->meta = calloc((size_t)n + 2, sizeof *d->meta);
    d->names = calloc((size_t)n + 1, sizeof *d->names);
    d->keys = calloc((size_t)n + 1, sizeof *d->keys);
    d->vals = calloc((size_t)n + 1, sizeof *d->vals);
    if (!d->desc || !d->meta || !d->names || !d->keys || !d->vals) {
        err_set(err, errlen, "%s: out of memory", path);
        file_desc_free(d);
        return -1;
    }
    d->meta[0].key = "format";
    d->meta[0].value = "pt";
    for (int g = g0; g < g1; g++) {
        st_dtype dt = ckpt_group_dtype(g, p);
        for (int i = 0; i < ps->count; i++) {
            const param_tensor *t = &ps->tensors[i];
            int k = (g - g0) * ps->count + i;
            snprintf(d->names[k], sizeof d->names[k], "%s%s", ckpt_group_prefix(g), t->name);
            snprintf(d->keys[k], sizeof d->keys[k], "crc32.%s", d->names[k]);
            snprintf(d->vals[k], sizeof d->vals[k], "%08x", crcs[k]);
            d->desc[k].name = d->names[k];
            d->desc[k].dtype = dt;
            d->desc[k].ndim = t->ndim;
            d->desc[k].shape = t->shape;
            d->desc[k].data =
                bufs ? (const char *)bufs[g] + t->offset * st_dtype_size(dt) : NULL;
            d->meta[k + 1].key = d->keys[k];
            d->meta[k + 1].value = d->vals[k];
        }
    }
    return 0;
}

int ckpt_file_header(const char *path, const param_set *ps, int optimizer, ckpt_precision p,
                     const uint32_t *crcs, uint8_t **header, uint64_t *header_bytes,
                     uint64_t *begin, uint64_t *buffer_bytes, char *err, size_t errlen) {
    file_desc d;
    if (file_desc_make(&d, path, ps, optimizer, p, NULL, crcs, err, errlen)) return -1;
    int rc = st_header(path, d.desc, d.n, d.meta, d.n + 1, header, header_bytes, begin,
                       buffer_bytes, err, errlen);
    file_desc_free(&d);
    return rc;
}

/* Writes one checkpoint file of ps's tensors taken from bufs[group] (checkpoint_precision.h's
 * groups of the file under precision p), with their crc32s. */
static int write_tensor_file(const char *path, const param_set *ps, const void *const *bufs,
                             int optimizer, ckpt_precision p, char *err, size_t errlen) {
    int g0, g1;
    ckpt_file_groups(optimizer, p, &g0, &g1);
    int n = ps->count * (g1 - g0);
    uint32_t *crcs = calloc((size_t)n + 1, sizeof *crcs);
    if (!crcs) {
        err_set(err, errlen, "%s: out of memory", path);
        return -1;
    }
    for (int g = g0; g < g1; g++) {
        size_t es = st_dtype_size(ckpt_group_dtype(g, p));
        for (int i = 0; i < ps->count; i++)
            crcs[(g - g0) * ps->count + i] = crc32_bytes(
                (const char *)bufs[g] + ps->tensors[i].offset * es, ps->tensors[i].numel * es);
    }
    file_desc d;
    int rc = file_desc_make(&d, path, ps, optimizer, p, bufs, crcs, err, errlen);
    free(crcs);
    if (rc) return -1;
    rc = st_write_file(path, d.desc, d.n, d.meta, d.n + 1, err, errlen);
    file_desc_free(&d);
    return rc;
}

static int check_param_set(const param_set *ps, int with_optimizer, char *err, size_t errlen) {
    if (!ps || ps->count < 0 || (ps->count > 0 && (!ps->tensors || !param_set_fp32(ps)))) {
        err_set(err, errlen, "checkpoint: parameter set has no tensors or no data");
        return -1;
    }
    if (with_optimizer && ps->count > 0 && (!ps->exp_avg || !ps->exp_avg_sq)) {
        err_set(err, errlen, "checkpoint: optimizer state requested but the parameter set has "
                             "no exp_avg / exp_avg_sq buffers");
        return -1;
    }
    for (int i = 0; i < ps->count; i++) {
        const param_tensor *t = &ps->tensors[i];
        size_t numel = 1;
        int ok = t->ndim >= 0 && t->ndim <= PARAM_MAX_DIMS;
        for (int d = 0; ok && d < t->ndim; d++) {
            ok = t->shape[d] >= 0;
            numel *= (size_t)t->shape[d];
        }
        if (!ok || numel != t->numel || t->offset > ps->numel || t->numel > ps->numel - t->offset) {
            err_set(err, errlen,
                    "checkpoint: tensor %s: shape, numel %zu or offset %zu inconsistent with the "
                    "parameter set (%zu floats)",
                    t->name, t->numel, t->offset, ps->numel);
            return -1;
        }
    }
    return 0;
}

int ckpt_stage_hook(const char *stage, const char *path, char *err, size_t errlen) {
    if (fault_at(stage)) {
        err_set(err, errlen, "%s: save failed at stage \"%s\" (test hook)", path, stage);
        return -1;
    }
    return 0;
}

/* Is `name` a leftover of an interrupted save: iter_NNNNNNN.tmp-<pid>, iter_NNNNNNN.old-<pid>,
 * or the tracker's temporary? */
static int is_leftover(const char *name) {
    int digits = 0;
    if (strncmp(name, "iter_", 5) == 0) {
        const char *p = name + 5;
        while (*p >= '0' && *p <= '9') p++, digits++;
        if (digits == 0) return 0;
        if (strncmp(p, ".tmp-", 5) != 0 && strncmp(p, ".old-", 5) != 0) return 0;
        p += 5;
        if (!*p) return 0;
        for (; *p; p++)
            if (*p < '0' || *p > '9') return 0;
        return 1;
    }
    if (strncmp(name, CKPT_TRACKER ".tmp-", strlen(CKPT_TRACKER ".tmp-")) == 0) return 1;
    return 0;
}

static void remove_leftovers(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    char path[PATH_MAX];
    while ((de = readdir(d)) != NULL) {
        if (!is_leftover(de->d_name)) continue;
        if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path) continue;
        io_rm_rf(path);
    }
    closedir(d);
}

int ckpt_begin(ckpt_txn *x, const char *dir, int iteration, char *err, size_t errlen) {
    memset(x, 0, sizeof *x);
    if (!dir || iteration < 0 || iteration > 9999999) {
        err_set(err, errlen, "%s: invalid checkpoint iteration %d", dir ? dir : "(null)",
                iteration);
        return -1;
    }
    x->iteration = iteration;
    if (mkdir_p(dir, err, errlen)) return -1;
    long pid = (long)getpid();
    if (path_join(x->dir, sizeof x->dir, err, errlen, "%s", dir) ||
        path_join(x->final_dir, sizeof x->final_dir, err, errlen, "%s/iter_%07d", dir,
                  iteration) ||
        path_join(x->tmp_dir, sizeof x->tmp_dir, err, errlen, "%s.tmp-%ld", x->final_dir, pid) ||
        path_join(x->old_dir, sizeof x->old_dir, err, errlen, "%s.old-%ld", x->final_dir, pid) ||
        path_join(x->tracker, sizeof x->tracker, err, errlen, "%s/" CKPT_TRACKER, dir) ||
        path_join(x->tracker_tmp, sizeof x->tracker_tmp, err, errlen, "%s.tmp-%ld", x->tracker,
                  pid))
        return -1;
    /* room for "/optimizer.safetensors" after the temporary directory */
    char probe[PATH_MAX];
    if (path_join(probe, sizeof probe, err, errlen, "%s/optimizer.safetensors", x->tmp_dir))
        return -1;
    io_rm_rf(x->tmp_dir); /* a leftover of this pid's own earlier failed attempt */
    if (ckpt_stage_hook("tmpdir", x->tmp_dir, err, errlen)) return -1;
    if (mkdir(x->tmp_dir, 0755) != 0) {
        err_set(err, errlen, "%s: cannot create directory: %s", x->tmp_dir, strerror(errno));
        return -1;
    }
    return 0;
}

void ckpt_abort(ckpt_txn *x) {
    if (x->tmp_dir[0]) io_rm_rf(x->tmp_dir);
}

int ckpt_commit(ckpt_txn *x, const ckpt_state *st, char *err, size_t errlen) {
    const char *dir = x->dir, *final_dir = x->final_dir, *tmp_dir = x->tmp_dir;
    const char *old_dir = x->old_dir, *tracker = x->tracker, *tracker_tmp = x->tracker_tmp;
    char path[PATH_MAX + 64];
    int in_place = 0; /* the new directory is at final_dir */
    if (!st || st->iteration != x->iteration) {
        err_set(err, errlen, "%s: state of iteration %d committed into iter_%07d", dir,
                st ? st->iteration : -1, x->iteration);
        goto fail;
    }
    /* state.json */
    snprintf(path, sizeof path, "%s/state.json", tmp_dir);
    if (ckpt_stage_hook("state", path, err, errlen)) goto fail;
    {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddNumberToObject(root, "iteration", st->iteration);
        cJSON_AddNumberToObject(root, "consumed_train_samples", (double)st->consumed_train_samples);
        cJSON_AddNumberToObject(root, "optimizer_step", st->optimizer_step);
        cJSON_AddStringToObject(root, "params_dtype", ckpt_precision_name(st->precision));
        cJSON_AddItemToObject(root, "args",
                              st->args ? cJSON_Duplicate(st->args, 1) : cJSON_CreateObject());
        if (st->grad_scaler)
            cJSON_AddItemToObject(root, "grad_scaler", cJSON_Duplicate(st->grad_scaler, 1));
        if (st->rng_state)
            cJSON_AddItemToObject(root, "rng_state", cJSON_Duplicate(st->rng_state, 1));
        cJSON_AddNumberToObject(root, "format_version", CKPT_FORMAT_VERSION);
        char *text = cJSON_Print(root);
        cJSON_Delete(root);
        if (!text) {
            err_set(err, errlen, "%s: out of memory", path);
            goto fail;
        }
        size_t tl = strlen(text);
        char *withnl = malloc(tl + 2);
        if (!withnl) {
            free(text);
            err_set(err, errlen, "%s: out of memory", path);
            goto fail;
        }
        memcpy(withnl, text, tl);
        withnl[tl] = '\n';
        withnl[tl + 1] = 0;
        free(text);
        int rc = write_text_file(path, withnl, err, errlen);
        free(withnl);
        if (rc) goto fail;
    }
    if (io_fsync_path(tmp_dir) != 0) {
        err_set(err, errlen, "%s: fsync failed: %s", tmp_dir, strerror(errno));
        goto fail;
    }

    /* Into place. */
    if (ckpt_stage_hook("rename", final_dir, err, errlen)) goto fail;
    struct stat sb;
    if (lstat(final_dir, &sb) != 0) {
        if (rename(tmp_dir, final_dir) != 0) {
            err_set(err, errlen, "%s: rename to %s failed: %s", tmp_dir, final_dir, strerror(errno));
            goto fail;
        }
        in_place = 1;
    } else if (!fault_at("exchange") &&
               renameat2(AT_FDCWD, tmp_dir, AT_FDCWD, final_dir, RENAME_EXCHANGE) == 0) {
        in_place = 1; /* tmp_dir now holds the old checkpoint */
        if (io_fsync_path(dir) != 0) {
            err_set(err, errlen, "%s: fsync failed: %s", dir, strerror(errno));
            goto fail;
        }
        io_rm_rf(tmp_dir);
    } else {
        /* No atomic exchange here: move the old one away first. */
        io_rm_rf(old_dir);
        if (rename(final_dir, old_dir) != 0) {
            err_set(err, errlen, "%s: rename to %s failed: %s", final_dir, old_dir, strerror(errno));
            goto fail;
        }
        if (rename(tmp_dir, final_dir) != 0) {
            err_set(err, errlen, "%s: rename to %s failed: %s", tmp_dir, final_dir, strerror(errno));
            rename(old_dir, final_dir); /* put the old one back */
            goto fail;
        }
        in_place = 1;
        if (io_fsync_path(dir) != 0) {
            err_set(err, errlen, "%s: fsync failed: %s", dir, strerror(errno));
            goto fail;
        }
        io_rm_rf(old_dir);
    }
    if (io_fsync_path(dir) != 0) {
        err_set(err, errlen, "%s: fsync failed: %s", dir, strerror(errno));
        goto fail;
    }

    /* Tracker. */
    if (ckpt_stage_hook("tracker", tracker, err, errlen)) goto fail;
    {
        char text[32];
        snprintf(text, sizeof text, "%d", st->iteration); /* as Megatron: no newline */
        if (write_text_file(tracker_tmp, text, err, errlen)) goto fail;
        if (rename(tracker_tmp, tracker) != 0) {
            err_set(err, errlen, "%s: rename to %s failed: %s", tracker_tmp, tracker,
                    strerror(errno));
            goto fail;
        }
        if (io_fsync_path(dir) != 0) {
            err_set(err, errlen, "%s: fsync failed: %s", dir, strerror(errno));
            return -1; /* the tracker is renamed; only durability is in doubt */
        }
    }
    remove_leftovers(dir);
    return 0;

fail:
    /* The tracker is untouched. A new directory already in place stays (complete but not
     * "latest"); otherwise its temporary is removed. */
    if (!in_place) io_rm_rf(tmp_dir);
    unlink(tracker_tmp);
    return -1;
}

/* The index of the first value of x[0..n) that is NaN or infinite, n when there is none. */
size_t ckpt_first_nonfinite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return n;
}

int refuse_nonfinite(char *err, size_t errlen) {
    char why[768];
    snprintf(why, sizeof why, "%s", err ? err : "");
    err_set(err, errlen, "%s: refusing to save it; the previous checkpoint and the tracker are "
                         "kept", why);
    return -1;
}

int ckpt_check_finite(const param_set *ps, int with_optimizer, char *err, size_t errlen) {
    const char *kinds[3] = {"parameter", "optimizer state exp_avg of", "optimizer state exp_avg_sq of"};
    const float *bufs[3] = {param_set_fp32(ps), with_optimizer ? ps->exp_avg : NULL,
                            with_optimizer ? ps->exp_avg_sq : NULL};
    for (int b = 0; b < 3; b++) {
        for (int i = 0; bufs[b] && i < ps->count; i++) {
            const param_tensor *t = &ps->tensors[i];
            size_t k = ckpt_first_nonfinite(bufs[b] + t->offset, t->numel);
            if (k == t->numel) continue;
            err_set(err, errlen, "%s %s holds a non-finite value (%f at element %zu)",
                    kinds[b], t->name, bufs[b][t->offset + k], k);
            return -1;
        }
    }
    /* the 16-bit copy: a finite fp32 value beyond bf16's largest rounds to an infinity */
    for (int i = 0; ps->data_bf16 && i < ps->count; i++) {
        const param_tensor *t = &ps->tensors[i];
        for (size_t k = 0; k < t->numel; k++) {
            if ((ps->data_bf16[t->offset + k] & 0x7f80u) != 0x7f80u) continue;
            const float *main = param_set_fp32(ps);
            err_set(err, errlen, "the bf16 copy of parameter %s holds a non-finite value at "
                    "element %zu (%g rounds out of bf16's range)", t->name, k,
                    main ? main[t->offset + k] : (double)INFINITY);
            return -1;
        }
    }
    return 0;
}

int ckpt_save(const char *dir, const param_set *ps, const ckpt_state *st, int with_optimizer,
              char *err, size_t errlen) {
    if (!dir || !st || st->iteration < 0 || st->iteration > 9999999) {
        err_set(err, errlen, "%s: invalid checkpoint iteration %d", dir ? dir : "(null)",
                st ? st->iteration : -1);
        return -1;
    }
    if (check_param_set(ps, with_optimizer, err, errlen)) return -1;
    const void *bufs[CKPT_GROUPS] = {ckpt_model_params(ps, st->precision), ps->exp_avg,
                                     ps->exp_avg_sq, param_set_fp32(ps)};
    if (ps->count > 0 && !bufs[CKPT_GROUP_PARAMS]) {
        err_set(err, errlen, "%s: a %s checkpoint, but the parameter set has no %s copy", dir,
                ckpt_precision_name(st->precision), ckpt_precision_name(st->precision));
        return -1;
    }
    if (ckpt_check_finite(ps, with_optimizer, err, errlen)) return refuse_nonfinite(err, errlen);
    ckpt_txn x;
    if (ckpt_begin(&x, dir, st->iteration, err, errlen)) return -1;
    char path[PATH_MAX + 64];
    /* model.safetensors */
    snprintf(path, sizeof path, "%s/model.safetensors", x.tmp_dir);
    if (ckpt_stage_hook("model", path, err, errlen)) goto fail;
    if (write_tensor_file(path, ps, bufs, 0, st->precision, err, errlen)) goto fail;
    /* optimizer.safetensors */
    if (with_optimizer) {
        snprintf(path, sizeof path, "%s/optimizer.safetensors", x.tmp_dir);
        if (ckpt_stage_hook("optimizer", path, err, errlen)) goto fail;
        if (write_tensor_file(path, ps, bufs, 1, st->precision, err, errlen)) goto fail;
    }
    return ckpt_commit(&x, st, err, errlen);
fail:
    ckpt_abort(&x);
    return -1;
}

int ckpt_check_file_holds(const char *path, size_t numel, char *err, size_t errlen) {
    struct stat sb;
    if (stat(path, &sb) != 0) {
        err_set(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        return -1;
    }
    /* at least 2 bytes a value (F16 / BF16); numel < 2^56 after args_check_sizes */
    if ((uint64_t)sb.st_size / 2 >= numel) return 0;
    err_set(err, errlen,
            "%s holds %lld bytes, too few for the %zu parameters its configuration describes "
            "(at least %zu bytes): the configuration does not match the tensors",
            path, (long long)sb.st_size, numel, numel * 2);
    return -1;
}

int ckpt_read_latest(const char *dir, int *iteration, char *err, size_t errlen) {
    char path[PATH_MAX];
    if (path_join(path, sizeof path, err, errlen, "%s/" CKPT_TRACKER, dir)) return -1;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        if (errno == ENOENT || errno == ENOTDIR) return 1;
        err_set(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    char buf[64];
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    int too_long = !feof(fp) && fgetc(fp) != EOF;
    fclose(fp);
    buf[n] = 0;
    int has_nul = memchr(buf, 0, n) != NULL;
    char *s = buf;
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r')) *--e = 0;
    long long v = 0;
    int ok = !too_long && !has_nul && *s;
    for (char *p = s; ok && *p; p++) {
        if (*p < '0' || *p > '9') ok = 0;
        else if ((v = v * 10 + (*p - '0')) > INT_MAX) ok = 0;
    }
    if (!ok) {
        /* every byte read is shown (a NUL does not end it), unprintable ones as '?' */
        const char *end = buf + n;
        while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\n' || end[-1] == '\r'))
            end--;
        char shown[40];
        size_t k = 0;
        for (const char *p = s; p < end && k < 24; p++)
            shown[k++] = (*p >= 0x20 && *p < 0x7f) ? *p : '?';
        shown[k] = 0;
        err_set(err, errlen, "%s: expected an iteration number, found \"%s%s\"%s", path, shown,
                too_long || end - s > 24 ? "..." : "",
                has_nul ? " (it holds a NUL byte)"
                : strcmp(s, "release") == 0 ? " (Megatron release checkpoints are not supported)"
                                            : "");
        return -1;
    }
    *iteration = (int)v;
    return 0;
}

/* A non-negative JSON integer below 2^53. */
static int json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0) || d >= 9007199254740992.0 || d != (double)(uint64_t)d) return -1;
    *out = (uint64_t)d;
    return 0;
}

/* state.json's "params_dtype"; absent (checkpoints from before it was written, or of other
 * tools) is float32, what those hold. */
static int parse_params_dtype(const cJSON *v, ckpt_precision *p) {
    *p = CKPT_FP32;
    if (!v) return 0;
    if (!cJSON_IsString(v)) return -1;
    for (ckpt_precision q = CKPT_FP32; q <= CKPT_FP16; q++)
        if (strcmp(v->valuestring, ckpt_precision_name(q)) == 0) {
            *p = q;
            return 0;
        }
    return -1;
}

void ckpt_state_free(ckpt_state *st) {
    if (!st) return;
    cJSON_Delete(st->args);
    cJSON_Delete(st->grad_scaler);
    cJSON_Delete(st->rng_state);
    st->args = NULL;
    st->grad_scaler = NULL;
    st->rng_state = NULL;
}

int ckpt_load_state(const char *dir, int iteration, ckpt_state *st, char *err, size_t errlen) {
    memset(st, 0, sizeof *st);
    char path[PATH_MAX];
    if (path_join(path, sizeof path, err, errlen, "%s/iter_%07d/state.json", dir, iteration))
        return -1;
    size_t n;
    int open_failed;
    const char *why;
    char *text = io_read_file(path, &n, &open_failed, &why);
    if (!text) {
        err_set(err, errlen, "%s: cannot %s: %s", path, open_failed ? "open" : "read", why);
        return -1;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        size_t pos = (at && at >= text && at <= text + n) ? (size_t)(at - text) : 0;
        err_set(err, errlen, "%s: offset %zu: expected valid JSON", path, pos);
        free(text);
        return -1;
    }
    free(text);
    int rc = -1;
    uint64_t it, samples, step, ver;
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(root, "args");
    if (!cJSON_IsObject(root)) {
        err_set(err, errlen, "%s: expected a JSON object", path);
    } else if (json_uint(cJSON_GetObjectItemCaseSensitive(root, "format_version"), &ver)) {
        err_set(err, errlen, "%s: expected an integer \"format_version\"", path);
    } else if (ver != CKPT_FORMAT_VERSION) {
        err_set(err, errlen, "%s: format_version %llu is not supported (this build reads %d)",
                path, (unsigned long long)ver, CKPT_FORMAT_VERSION);
    } else if (json_uint(cJSON_GetObjectItemCaseSensitive(root, "iteration"), &it) ||
               it > INT_MAX) {
        err_set(err, errlen, "%s: expected a non-negative integer \"iteration\"", path);
    } else if ((int)it != iteration) {
        err_set(err, errlen, "%s: \"iteration\" is %llu, but the directory is iter_%07d", path,
                (unsigned long long)it, iteration);
    } else if (json_uint(cJSON_GetObjectItemCaseSensitive(root, "consumed_train_samples"),
                         &samples)) {
        err_set(err, errlen, "%s: expected a non-negative integer \"consumed_train_samples\"",
                path);
    } else if (json_uint(cJSON_GetObjectItemCaseSensitive(root, "optimizer_step"), &step) ||
               step > INT_MAX) {
        err_set(err, errlen, "%s: expected a non-negative integer \"optimizer_step\"", path);
    } else if (step > it) { /* a skipped iteration takes no step; none takes two */
        err_set(err, errlen, "%s: \"optimizer_step\" %llu is more than \"iteration\" %llu",
                path, (unsigned long long)step, (unsigned long long)it);
    } else if (args && !cJSON_IsObject(args) && !cJSON_IsNull(args)) {
        err_set(err, errlen, "%s: expected \"args\" to be an object", path);
    } else if (parse_params_dtype(cJSON_GetObjectItemCaseSensitive(root, "params_dtype"),
                                  &st->precision)) {
        err_set(err, errlen, "%s: expected \"params_dtype\" to be \"float32\", \"bfloat16\" or "
                "\"float16\"", path);
    } else {
        st->iteration = (int)it;
        st->consumed_train_samples = samples;
        st->optimizer_step = (int)step;
        st->args = cJSON_IsObject(args) ? cJSON_DetachItemFromObjectCaseSensitive(root, "args")
                                        : NULL;
        st->grad_scaler = cJSON_DetachItemFromObjectCaseSensitive(root, "grad_scaler");
        st->rng_state = cJSON_DetachItemFromObjectCaseSensitive(root, "rng_state");
        rc = 0;
    }
    cJSON_Delete(root);
    return rc;
}

int ckpt_check_entry(const st_file *f, const char *name, int ndim, const int64_t *shape,
                     const st_entry **out, uint32_t *crc, int *has_crc, char *err,
                     size_t errlen) {
    char ms[128], fs[128];
    shape_str(ms, sizeof ms, ndim, shape);
    const st_entry *e = st_find(f, name);
    if (!e) {
        err_set(err, errlen, "%s: tensor %s: missing (the model has shape %s)", f->path, name, ms);
        return -1;
    }
    shape_str(fs, sizeof fs, e->ndim, e->shape);
    int same = e->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = e->shape[d] == shape[d];
    if (!same) {
        err_set(err, errlen, "%s: tensor %s: shape %s in the checkpoint, %s in the model",
                f->path, name, fs, ms);
        return -1;
    }
    if (e->dtype != ST_F32 && e->dtype != ST_F16 && e->dtype != ST_BF16) {
        err_set(err, errlen, "%s: tensor %s: dtype %s, expected F32 (or F16, BF16)", f->path, name,
                st_dtype_name(e->dtype));
        return -1;
    }
    char key[PARAM_NAME_MAX + 64];
    snprintf(key, sizeof key, "crc32.%s", name);
    const char *want = st_metadata(f, key);
    *has_crc = 0;
    if (want) {
        char *endp = NULL;
        unsigned long w = strtoul(want, &endp, 16);
        if (strlen(want) != 8 || !endp || *endp || w > 0xffffffffUL) {
            err_set(err, errlen, "%s: tensor %s: malformed crc32 \"%s\" in __metadata__",
                    f->path, name, want);
            return -1;
        }
        *crc = (uint32_t)w;
        *has_crc = 1;
    }
    *out = e;
    return 0;
}

int ckpt_check_crc(const st_file *f, const char *name, uint32_t want, uint32_t got, char *err,
                   size_t errlen) {
    if (got == want) return 0;
    err_set(err, errlen,
            "%s: tensor %s: crc32 mismatch: __metadata__ says %08x, the data gives %08x "
            "(the file is corrupted)",
            f->path, name, want, got);
    return -1;
}

/* An unread entry of the optimizer file that is one of its groups' copies of a model tensor */
static int group_copy_of_model(const char *name, const st_file *model) {
    for (int g = CKPT_GROUP_PARAMS + 1; g < CKPT_GROUPS; g++) {
        const char *p = ckpt_group_prefix(g);
        size_t n = strlen(p);
        if (!strncmp(name, p, n) && st_find(model, name + n)) return 1;
    }
    return 0;
}

int ckpt_check_unused(const st_file *f, const st_entry *const *ents, size_t nents,
                      const st_file *model, char *err, size_t errlen) {
    uint8_t *read = calloc((size_t)f->count + 1, 1);
    if (!read) {
        err_set(err, errlen, "%s: out of memory", f->path);
        return -1;
    }
    for (size_t i = 0; i < nents; i++)
        if (ents[i] >= f->entries && ents[i] < f->entries + f->count)
            read[ents[i] - f->entries] = 1;
    int rc = 0;
    for (int j = 0; j < f->count && rc == 0; j++) {
        const char *name = f->entries[j].name;
        if (read[j] || (model && group_copy_of_model(name, model))) continue;
        err_set(err, errlen,
                "%s: tensor %s: not a tensor of the model the checkpoint's state.json describes "
                "(was state.json edited, or the file replaced?): the model would not use it and its "
                "next save would drop it", f->path, name);
        rc = -1;
    }
    free(read);
    return rc;
}

/* Checks that file f holds `name` as a float tensor of t's shape with a matching crc32. */
static int check_tensor(const st_file *f, const char *name, const param_tensor *t,
                        const st_entry **out, char *err, size_t errlen) {
    uint32_t want;
    int has_crc;
    if (ckpt_check_entry(f, name, t->ndim, t->shape, out, &want, &has_crc, err, errlen))
        return -1;
    const st_entry *e = *out;
    if (has_crc &&
        ckpt_check_crc(f, name, want, crc32_bytes(e->data, (size_t)(e->end - e->begin)), err,
                       errlen))
        return -1;
    return 0;
}

/* Checks everything ckpt_load_tensors reads (presence, shapes, dtypes, checksums) before ps
 * is touched: ents[g * n + i] is tensor i's entry of group g (checkpoint_precision.h) in
 * files[0] (the model) or files[1] (the optimizer, with_optimizer). *from_main: the model
 * file's parameters are 16-bit and the optimizer file's fp32 main parameters are read. */
static int check_all(const st_file *files, const param_set *ps, int with_optimizer,
                     const st_entry **ents, int *from_main, char *err, size_t errlen) {
    int n = ps->count;
    st_dtype dt;
    for (int i = 0; i < n; i++)
        if (check_tensor(&files[0], ps->tensors[i].name, &ps->tensors[i], &ents[i], err, errlen))
            return -1;
    if (ckpt_params_dtype(&files[0], ents, n, &dt, err, errlen)) return -1;
    *from_main = with_optimizer && dt != ST_F32;
    int end = !with_optimizer ? CKPT_GROUP_PARAMS + 1
              : *from_main    ? CKPT_GROUP_MAIN + 1
                              : CKPT_GROUP_EXP_AVG_SQ + 1;
    for (int g = CKPT_GROUP_EXP_AVG; g < end; g++)
        for (int i = 0; i < n; i++) {
            char name[PARAM_NAME_MAX + 32];
            snprintf(name, sizeof name, "%s%s", ckpt_group_prefix(g), ps->tensors[i].name);
            if (check_tensor(&files[1], name, &ps->tensors[i], &ents[g * n + i], err, errlen))
                return -1;
        }
    if (ckpt_check_unused(&files[0], ents, (size_t)n, NULL, err, errlen)) return -1;
    if (with_optimizer &&
        ckpt_check_unused(&files[1], ents, (size_t)end * (size_t)n, &files[0], err, errlen))
        return -1;
    return 0;
}

int ckpt_load_tensors(const char *dir, int iteration, param_set *ps, int with_optimizer,
                      char *err, size_t errlen) {
    if (check_param_set(ps, with_optimizer, err, errlen)) return -1;
    char mpath[PATH_MAX], opath[PATH_MAX];
    if (path_join(mpath, sizeof mpath, err, errlen, "%s/iter_%07d/model.safetensors", dir,
                  iteration) ||
        path_join(opath, sizeof opath, err, errlen, "%s/iter_%07d/optimizer.safetensors", dir,
                  iteration))
        return -1;
    int n = ps->count, from_main = 0;
    st_file files[2];
    memset(files, 0, sizeof files);
    const st_entry **ents = calloc((size_t)CKPT_GROUPS * (size_t)n + 1, sizeof *ents);
    if (!ents) {
        err_set(err, errlen, "%s: out of memory", mpath);
        return -1;
    }
    if (st_open(mpath, &files[0], err, errlen)) {
        free(ents);
        return -1;
    }
    int rc = -1;
    if (with_optimizer) {
        if (access(opath, F_OK) != 0 && errno == ENOENT) {
            err_set(err, errlen, "%s: missing: the checkpoint was saved without optimizer state",
                    opath);
            goto done;
        }
        if (st_open(opath, &files[1], err, errlen)) goto done;
    }
    if (check_all(files, ps, with_optimizer, ents, &from_main, err, errlen)) goto done;
    /* the parameters: the fp32 main ones when the model file's are 16-bit and the optimizer
     * state is loaded, else the model file's (16-bit ones widened exactly) */
    int src = from_main ? CKPT_GROUP_MAIN : CKPT_GROUP_PARAMS;
    for (int i = 0; i < n; i++) {
        const param_tensor *t = &ps->tensors[i];
        if (st_read_f32(&files[src ? 1 : 0], ents[src * n + i], param_set_fp32(ps) + t->offset, err,
                        errlen))
            goto done;
        if (with_optimizer &&
            (st_read_f32(&files[1], ents[n + i], ps->exp_avg + t->offset, err, errlen) ||
             st_read_f32(&files[1], ents[2 * n + i], ps->exp_avg_sq + t->offset, err, errlen)))
            goto done;
    }
    rc = 0;
done:
    st_close(&files[0]);
    st_close(&files[1]);
    free(ents);
    return rc;
}
