/* The precision of a checkpoint's parameters: see checkpoint_precision.h. */
#include "training/checkpoint_precision.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/util/error.h"

st_dtype ckpt_precision_dtype(ckpt_precision p) {
    return p == CKPT_BF16 ? ST_BF16 : p == CKPT_FP16 ? ST_F16 : ST_F32;
}

const char *ckpt_precision_name(ckpt_precision p) {
    return p == CKPT_BF16 ? "bfloat16" : p == CKPT_FP16 ? "float16" : "float32";
}

/* The run's precision as its flag says it (--bf16, --fp16), for the log. */
static const char *run_name(ckpt_precision p) {
    return p == CKPT_BF16 ? "bf16" : p == CKPT_FP16 ? "fp16" : "fp32";
}

int ckpt_precision_of_dtype(st_dtype dt, ckpt_precision *p) {
    switch (dt) {
    case ST_F32: *p = CKPT_FP32; return 0;
    case ST_BF16: *p = CKPT_BF16; return 0;
    case ST_F16: *p = CKPT_FP16; return 0;
    default: return -1;
    }
}

const void *ckpt_model_params(const param_set *ps, ckpt_precision p) {
    /* the 16-bit copy (data_bf16) holds the run's format: bf16 under --bf16, fp16 under --fp16 */
    return p == CKPT_FP32 ? (const void *)param_set_fp32(ps) : (const void *)ps->data_bf16;
}

void ckpt_file_groups(int optimizer, ckpt_precision p, int *first, int *end) {
    *first = optimizer ? CKPT_GROUP_EXP_AVG : CKPT_GROUP_PARAMS;
    *end = !optimizer ? CKPT_GROUP_PARAMS + 1
           : p == CKPT_FP32 ? CKPT_GROUP_EXP_AVG_SQ + 1 /* the parameters are the main ones */
                            : CKPT_GROUP_MAIN + 1;
}

const char *ckpt_group_prefix(int group) {
    static const char *const prefixes[CKPT_GROUPS] = {
        "", "optimizer.exp_avg.", "optimizer.exp_avg_sq.", "optimizer.fp32_param."};
    return group >= 0 && group < CKPT_GROUPS ? prefixes[group] : "?";
}

st_dtype ckpt_group_dtype(int group, ckpt_precision p) {
    return group == CKPT_GROUP_PARAMS ? ckpt_precision_dtype(p) : ST_F32;
}

int ckpt_params_dtype(const st_file *f, const st_entry *const *params, int n, st_dtype *dt,
                      char *err, size_t errlen) {
    *dt = n > 0 ? params[0]->dtype : ST_F32;
    for (int i = 1; i < n; i++) {
        if (params[i]->dtype == *dt) continue;
        err_set(err, errlen,
                "%s: tensor %s is %s but tensor %s is %s: expected every parameter in one dtype "
                "(the run's precision)",
                f->path, params[0]->name, st_dtype_name(*dt), params[i]->name,
                st_dtype_name(params[i]->dtype));
        return -1;
    }
    return 0;
}

int ckpt_file_precision(const char *path, ckpt_precision *p, char *err, size_t errlen) {
    st_file f;
    if (st_open(path, &f, err, errlen)) return -1;
    const st_entry **ents = malloc(((size_t)f.count + 1) * sizeof *ents);
    int rc = -1;
    st_dtype dt;
    if (!ents) {
        err_set(err, errlen, "%s: out of memory", path);
    } else {
        for (int i = 0; i < f.count; i++) ents[i] = &f.entries[i];
        rc = ckpt_params_dtype(&f, ents, f.count, &dt, err, errlen);
        if (rc == 0 && ckpt_precision_of_dtype(dt, p)) {
            err_set(err, errlen, "%s: tensor %s: dtype %s, expected F32, BF16 or F16 parameters",
                    path, f.entries[0].name, st_dtype_name(dt));
            rc = -1;
        }
    }
    free(ents);
    st_close(&f);
    return rc;
}

void ckpt_conversion_note(char *out, size_t len, st_dtype file, ckpt_precision run,
                          int from_main) {
    out[0] = 0;
    st_dtype rd = ckpt_precision_dtype(run);
    if (file == rd && (file == ST_F32 || from_main)) return; /* nothing converted */
    const char *fn = st_dtype_name(file), *rn = run_name(run);
    const char *what = run == CKPT_FP32 ? "parameters" : "fp32 main parameters";
    char tail[160] = ""; /* the 16-bit copy, where rounding it changes the values */
    if (run != CKPT_FP32 && (from_main || file != rd))
        snprintf(tail, sizeof tail, ", the model's %s parameters rounded from them (to nearest "
                 "even)", rn);
    if (from_main)
        snprintf(out, len, "> loading checkpoint: model.safetensors holds %s parameters, this run "
                 "is %s: %s taken from the optimizer file's fp32 main parameters%s", fn, rn, what,
                 tail);
    else if (file == ST_F32)
        snprintf(out, len, "> loading checkpoint: model.safetensors holds F32 parameters, this "
                 "run is %s: %s taken from them bit for bit%s", rn, what, tail);
    else
        snprintf(out, len, "> loading checkpoint: model.safetensors holds %s parameters, this run "
                 "is %s, without the optimizer state: %s are the %s values widened exactly%s",
                 fn, rn, what, fn, tail);
}
