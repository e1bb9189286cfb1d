/* The Hugging Face side of `megadlm convert` that both layouts share (hf_io.h): the set of
 * tensors being written and the reader over one or several safetensors files. */
#include "core/util/alloc.h"
#include "tools/hf_io.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/util/io.h"

/* ------------------------------------------------------------------ numbers */

double nice_float(float f) {
    char buf[64];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)f);
        if ((float)strtod(buf, NULL) == f) return strtod(buf, NULL);
    }
    return (double)f;
}

/* ------------------------------------------------------------------ tensors being written */

float *out_add(out_set *o, const char *name, int ndim, int64_t d0, int64_t d1) {
    if (o->n == o->cap) {
        o->cap = o->cap ? 2 * o->cap : 64;
        o->d = xrealloc(o->d, o->cap * sizeof *o->d, "the output tensor list");
        o->names = xrealloc(o->names, o->cap * sizeof *o->names, "the output tensor list");
        o->bufs = xrealloc(o->bufs, o->cap * sizeof *o->bufs, "the output tensor list");
        o->shapes = xrealloc(o->shapes, o->cap * sizeof *o->shapes, "the output tensor list");
    }
    int i = o->n++;
    o->names[i] = xstrdup(name, "an output tensor name");
    o->shapes[i][0] = d0;
    o->shapes[i][1] = d1;
    size_t numel = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
    o->bufs[i] = xcalloc(numel ? numel : 1, sizeof(float), name);
    return o->bufs[i];
}

void out_free(out_set *o) {
    for (int i = 0; i < o->n; i++) {
        free(o->names[i]);
        free(o->bufs[i]);
    }
    free_all(o->d, o->names, o->bufs, o->shapes);
}

/* ------------------------------------------------------------------ reading */

const st_entry *hf_find(const hf_shards *s, const char *name, const st_file **which) {
    for (int i = 0; i < s->n; i++) {
        const st_entry *e = st_find(&s->f[i], name);
        if (e) {
            if (which) *which = &s->f[i];
            return e;
        }
    }
    return NULL;
}

int hf_read(const hf_shards *s, const char *name, int ndim, int64_t d0, int64_t d1, float *out) {
    const st_file *sf = NULL;
    const st_entry *e = hf_find(s, name, &sf);
    if (!e) {
        fprintf(stderr, "error: convert --from hf: %s%s: tensor %s: missing\n", s->f[0].path,
                s->n > 1 ? " (and the other shards)" : "", name);
        return -1;
    }
    if (e->ndim != ndim || e->shape[0] != d0 || (ndim == 2 && e->shape[1] != d1)) {
        fprintf(stderr, "error: convert --from hf: %s: tensor %s: shape [", sf->path, name);
        for (int i = 0; i < e->ndim; i++) fprintf(stderr, "%s%lld", i ? ", " : "", (long long)e->shape[i]);
        if (ndim == 2) fprintf(stderr, "], the config gives [%lld, %lld]\n", (long long)d0, (long long)d1);
        else fprintf(stderr, "], the config gives [%lld]\n", (long long)d0);
        return -1;
    }
    char err[1024];
    if (st_read_f32(sf, e, out, err, sizeof err) != 0) {
        fprintf(stderr, "error: convert --from hf: %s\n", err);
        return -1;
    }
    return 0;
}

int hf_shards_open(const char *in, hf_shards *s, char *err, size_t errlen) {
    char path[PATH_MAX + 64];
    s->n = 0;
    s->f = NULL;
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", in);
    size_t len;
    int open_failed;
    const char *why;
    char *buf = io_read_file(path, &len, &open_failed, &why);
    if (!buf) { /* no index: one file */
        if (!open_failed) {
            snprintf(err, errlen, "%s: cannot read it: %s", path, why);
            return -1;
        }
        s->f = xcalloc(1, sizeof *s->f, "the safetensors file");
        snprintf(path, sizeof path, "%s/model.safetensors", in);
        if (st_open(path, &s->f[0], err, errlen) != 0) {
            free(s->f);
            s->f = NULL;
            return -1;
        }
        s->n = 1;
        return 0;
    }
    cJSON *j = cJSON_ParseWithLength(buf, len);
    free(buf);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(j, "weight_map");
    if (!cJSON_IsObject(wm)) {
        snprintf(err, errlen, "%s: expected a JSON object with a \"weight_map\" object", path);
        cJSON_Delete(j);
        return -1;
    }
    /* the distinct file names, each opened once */
    int cap = cJSON_GetArraySize(wm);
    s->f = xcalloc((size_t)(cap ? cap : 1), sizeof *s->f, "the safetensors shard list");
    const cJSON *e;
    int rc = 0;
    cJSON_ArrayForEach(e, wm) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/')) {
            snprintf(err, errlen, "%s: weight_map[\"%s\"]: expected a file name in %s", path,
                     e->string, in);
            rc = -1;
            break;
        }
        int seen = 0;
        for (int k = 0; k < s->n && !seen; k++) {
            const char *base = strrchr(s->f[k].path, '/');
            seen = !strcmp(base ? base + 1 : s->f[k].path, e->valuestring);
        }
        if (seen) continue;
        snprintf(path, sizeof path, "%s/%s", in, e->valuestring);
        if (st_open(path, &s->f[s->n], err, errlen) != 0) {
            rc = -1;
            break;
        }
        s->n++;
    }
    cJSON_Delete(j);
    if (rc == 0 && s->n == 0) {
        snprintf(err, errlen, "%s/model.safetensors.index.json: the weight_map names no file", in);
        rc = -1;
    }
    if (rc != 0) hf_shards_close(s);
    return rc;
}

void hf_shards_close(hf_shards *s) {
    for (int i = 0; i < s->n; i++) st_close(&s->f[i]);
    free(s->f);
    s->f = NULL;
    s->n = 0;
}
