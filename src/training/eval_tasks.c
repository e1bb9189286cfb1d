#include "training/eval_tasks.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/util/alloc.h"
#include "core/util/error.h"

const char *eval_task_type_name(eval_task_type t) {
    switch (t) {
    case EVAL_TASK_MULTIPLE_CHOICE: return "multiple_choice";
    case EVAL_TASK_LOGLIKELIHOOD: return "loglikelihood";
    case EVAL_TASK_PERPLEXITY: return "perplexity";
    default: return "inferred";
    }
}

/* The reading of one file: where the messages point. */
typedef struct {
    const char *path;
    long line;
    const tokenizer *tok;
    int diffusion, max_tokens;
    int cap;
} task_reader;

static void add_request(eval_task *t, task_reader *r, eval_request q) {
    if (t->num_requests == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 64;
        t->req = xrealloc(t->req, (size_t)r->cap * sizeof(eval_request), "the task's requests");
        t->choice_chars = xrealloc(t->choice_chars, (size_t)r->cap * sizeof(double),
                                   "the endings' lengths");
    }
    t->choice_chars[t->num_requests] = 0.0;
    t->req[t->num_requests++] = q;
}

static size_t utf8_chars(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* lm-eval's _encode_pair: the context's trailing whitespace goes to the continuation; the
 * continuation's tokens are the whole text's after as many as the context alone has. */
static int encode_pair(task_reader *r, const char *context, const char *delim, const char *cont,
                       eval_request *q, char *err, size_t errlen) {
    size_t nc = strlen(context), nd = strlen(delim), nk = strlen(cont), keep = nc;
    while (keep > 0 && isspace((unsigned char)context[keep - 1])) keep--;
    char *whole = xmalloc(nc + nd + nk + 1, "a request's text");
    memcpy(whole, context, nc);
    memcpy(whole + nc, delim, nd);
    memcpy(whole + nc + nd, cont, nk + 1);
    int32_t *all = NULL, *ctx = NULL;
    size_t nall = 0, nctx = 0;
    char why[256];
    int rc = tokenizer_encode(r->tok, whole, nc + nd + nk, &all, &nall, why, sizeof why);
    if (rc == 0) rc = tokenizer_encode(r->tok, context, keep, &ctx, &nctx, why, sizeof why);
    free(whole);
    if (rc != 0) {
        err_set(err, errlen, "%s line %ld: the tokenizer: %s", r->path, r->line, why);
        free(all);
        free(ctx);
        return -1;
    }
    if (nall <= nctx) {
        err_set(err, errlen, "%s line %ld: the continuation encodes to no token", r->path,
                r->line);
        free(all);
        free(ctx);
        return -1;
    }
    int room = r->max_tokens - (r->diffusion ? 0 : 1);
    if ((int)(nall - nctx) > room) {
        err_set(err, errlen, "%s line %ld: the continuation is %zu tokens; the model scores at "
                "most %d", r->path, r->line, nall - nctx, room);
        free(all);
        free(ctx);
        return -1;
    }
    q->ctx = ctx;
    q->nctx = (int)nctx;
    q->ncont = (int)(nall - nctx);
    q->cont = xmalloc((size_t)q->ncont * sizeof(int32_t), "a continuation's tokens");
    memcpy(q->cont, all + nctx, (size_t)q->ncont * sizeof(int32_t));
    free(all);
    return 0;
}

static const cJSON *string_field(const cJSON *o, const char *k1, const char *k2) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, k1);
    if (!f && k2) f = cJSON_GetObjectItemCaseSensitive(o, k2);
    return f;
}

static int bad_field(task_reader *r, const char *field, const char *want, char *err,
                     size_t errlen) {
    err_set(err, errlen, "%s line %ld: field \"%s\": %s", r->path, r->line, field, want);
    return -1;
}

/* "label": an integer, or a string of digits (the HellaSwag dataset's), in [0, n). */
static int read_label(task_reader *r, const cJSON *o, int n, int *label, char *err,
                      size_t errlen) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "label");
    if (!f) return bad_field(r, "label", "missing (the true ending's index)", err, errlen);
    double v = -1.0;
    if (cJSON_IsNumber(f)) v = f->valuedouble;
    else if (cJSON_IsString(f) && f->valuestring[0] && strlen(f->valuestring) < 10 &&
             strspn(f->valuestring, "0123456789") == strlen(f->valuestring))
        v = atof(f->valuestring);
    if (v != floor(v) || v < 0 || v >= n) {
        char want[96];
        snprintf(want, sizeof want, "expected an integer from 0 to %d (the index of an ending)",
                 n - 1);
        return bad_field(r, "label", want, err, errlen);
    }
    *label = (int)v;
    return 0;
}

static int read_multiple_choice(eval_task *t, task_reader *r, const cJSON *o, char *err,
                                size_t errlen) {
    const cJSON *ctx = string_field(o, "ctx", "context");
    if (!cJSON_IsString(ctx))
        return bad_field(r, "ctx", ctx ? "expected a string" : "missing (or \"context\")", err,
                         errlen);
    const cJSON *ends = cJSON_GetObjectItemCaseSensitive(o, "endings");
    int n = cJSON_IsArray(ends) ? cJSON_GetArraySize(ends) : 0;
    if (n == 0)
        return bad_field(r, "endings", ends ? "expected a non-empty array of strings" : "missing",
                         err, errlen);
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(ends, i);
        if (!cJSON_IsString(e) || !e->valuestring[0]) {
            char want[96];
            snprintf(want, sizeof want, "ending %d: expected a non-empty string", i);
            return bad_field(r, "endings", want, err, errlen);
        }
    }
    int label;
    if (read_label(r, o, n, &label, err, errlen) != 0) return -1;
    for (int i = 0; i < n; i++) {
        const char *e = cJSON_GetArrayItem(ends, i)->valuestring;
        eval_request q = {.example = t->num_examples, .choice = i};
        if (encode_pair(r, ctx->valuestring, " ", e, &q, err, errlen) != 0) return -1;
        add_request(t, r, q);
        t->choice_chars[t->num_requests - 1] = (double)utf8_chars(e);
    }
    t->label = xrealloc(t->label, (size_t)(t->num_examples + 1) * sizeof(int), "the labels");
    t->label[t->num_examples] = label;
    return 0;
}

static int read_loglikelihood(eval_task *t, task_reader *r, const cJSON *o, char *err,
                              size_t errlen) {
    const cJSON *ctx = string_field(o, "context", "ctx");
    if (!cJSON_IsString(ctx))
        return bad_field(r, "context", ctx ? "expected a string" : "missing (or \"ctx\")", err,
                         errlen);
    const cJSON *cont = cJSON_GetObjectItemCaseSensitive(o, "continuation");
    if (!cJSON_IsString(cont) || !cont->valuestring[0])
        return bad_field(r, "continuation", cont ? "expected a non-empty string" : "missing",
                         err, errlen);
    eval_request q = {.example = t->num_examples};
    if (encode_pair(r, ctx->valuestring, "", cont->valuestring, &q, err, errlen) != 0) return -1;
    add_request(t, r, q);
    return 0;
}

/* Python's len(re.split(r"\s+", text)) over ASCII whitespace: one more than the runs. */
static double count_words(const char *s, size_t n) {
    double words = 1;
    for (size_t i = 0; i < n; i++)
        if (isspace((unsigned char)s[i]) && (i == 0 || !isspace((unsigned char)s[i - 1])))
            words++;
    return words;
}

/* lm-eval's rolling windows over one document's tokens (eval_tasks.h). */
static int read_document(eval_task *t, task_reader *r, const char *text, size_t n, char *err,
                         size_t errlen) {
    int32_t *ids = NULL;
    size_t nt = 0;
    char why[256];
    if (tokenizer_encode(r->tok, text, n, &ids, &nt, why, sizeof why) != 0) {
        err_set(err, errlen, "%s line %ld: the tokenizer: %s", r->path, r->line, why);
        return -1;
    }
    t->words += count_words(text, n);
    t->bytes += (double)n;
    int S = r->max_tokens, P = r->diffusion ? S : S - 1;
    for (size_t done = 0; done < nt;) {
        size_t p = nt - done < (size_t)P ? nt - done : (size_t)P, e = done + p;
        size_t lo = done == 0 ? done : (e > (size_t)S ? e - (size_t)S : 0);
        eval_request q = {.example = t->num_examples, .nctx = (int)(e - p - lo),
                          .ncont = (int)p};
        q.ctx = xmalloc((size_t)(q.nctx + 1) * sizeof(int32_t), "a window's context");
        q.cont = xmalloc(p * sizeof(int32_t), "a window's tokens");
        memcpy(q.ctx, ids + lo, (size_t)q.nctx * sizeof(int32_t));
        memcpy(q.cont, ids + e - p, p * sizeof(int32_t));
        add_request(t, r, q);
        done = e;
    }
    free(ids);
    return 0;
}

static eval_task_type type_of_record(const cJSON *o) {
    if (cJSON_GetObjectItemCaseSensitive(o, "endings")) return EVAL_TASK_MULTIPLE_CHOICE;
    if (cJSON_GetObjectItemCaseSensitive(o, "continuation")) return EVAL_TASK_LOGLIKELIHOOD;
    return EVAL_TASK_PERPLEXITY;
}

static int read_record(eval_task *t, task_reader *r, const char *line, char *err, size_t errlen) {
    cJSON *o = cJSON_Parse(line);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        err_set(err, errlen, "%s line %ld: not a JSON object", r->path, r->line);
        return -1;
    }
    if (t->type == EVAL_TASK_INFER) t->type = type_of_record(o);
    int rc;
    if (t->type == EVAL_TASK_MULTIPLE_CHOICE)
        rc = read_multiple_choice(t, r, o, err, errlen);
    else if (t->type == EVAL_TASK_LOGLIKELIHOOD)
        rc = read_loglikelihood(t, r, o, err, errlen);
    else {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "text");
        rc = cJSON_IsString(f) ? read_document(t, r, f->valuestring, strlen(f->valuestring), err,
                                               errlen)
                               : bad_field(r, "text", f ? "expected a string" : "missing", err,
                                           errlen);
    }
    cJSON_Delete(o);
    if (rc == 0) t->num_examples++;
    return rc;
}

static int has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* A file that is not JSONL: one document (perplexity). */
static int read_text_file(eval_task *t, task_reader *r, FILE *f, char *err, size_t errlen) {
    size_t cap = 1 << 16, n = 0, got;
    char *buf = xmalloc(cap, "the text");
    while ((got = fread(buf + n, 1, cap - n, f)) > 0)
        if ((n += got) == cap) buf = xrealloc(buf, cap *= 2, "the text");
    r->line = 1;
    int rc = n == 0 ? (err_set(err, errlen, "%s: empty (no text to score)", r->path), -1)
                    : read_document(t, r, buf, n, err, errlen);
    free(buf);
    if (rc == 0) t->num_examples = 1;
    return rc;
}

int eval_task_load(eval_task *t, const char *path, eval_task_type type, int limit,
                   const tokenizer *tok, int diffusion, int max_tokens, char *err, size_t errlen) {
    *t = (eval_task){.type = type};
    FILE *f = fopen(path, "rb");
    if (!f) {
        err_set(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    task_reader r = {.path = path, .tok = tok, .diffusion = diffusion, .max_tokens = max_tokens};
    int rc = 0;
    if (!has_suffix(path, ".jsonl")) {
        if (type != EVAL_TASK_INFER && type != EVAL_TASK_PERPLEXITY) {
            err_set(err, errlen, "%s: a %s task is read from a .jsonl file", path,
                    eval_task_type_name(type));
            rc = -1;
        } else {
            t->type = EVAL_TASK_PERPLEXITY;
            rc = read_text_file(t, &r, f, err, errlen);
        }
    } else {
        char *line = NULL;
        size_t cap = 0;
        while (rc == 0 && (limit <= 0 || t->num_examples < limit) &&
               getline(&line, &cap, f) >= 0) {
            r.line++;
            if (strspn(line, " \t\r\n") == strlen(line)) continue; /* blank */
            rc = read_record(t, &r, line, err, errlen);
        }
        free(line);
        if (rc == 0 && t->num_examples == 0) {
            err_set(err, errlen, "%s: no examples", path);
            rc = -1;
        }
    }
    fclose(f);
    if (rc != 0) eval_task_free(t);
    return rc;
}

void eval_task_free(eval_task *t) {
    for (int i = 0; i < t->num_requests; i++) {
        free(t->req[i].ctx);
        free(t->req[i].cont);
    }
    free(t->req);
    free(t->label);
    free(t->choice_chars);
    memset(t, 0, sizeof *t);
}

/* lm-eval's mean_stderr: sqrt(sample variance / n). */
static double mean_stderr(const double *x, int n, double *mean) {
    double m = 0.0, ss = 0.0;
    for (int i = 0; i < n; i++) m += x[i];
    m /= n;
    for (int i = 0; i < n; i++) ss += (x[i] - m) * (x[i] - m);
    *mean = m;
    return n > 1 ? sqrt(ss / (n - 1) / n) : 0.0;
}

static void aggregate_choices(const eval_task *t, const ll_result *res, eval_scores *out) {
    int n = t->num_examples;
    double *acc = xcalloc((size_t)n, sizeof(double), "acc"),
           *norm = xcalloc((size_t)n, sizeof(double), "acc_norm");
    int best = -1, best_norm = -1;
    for (int i = 0; i < t->num_requests; i++) {
        const eval_request *q = &t->req[i];
        if (q->choice == 0) best = best_norm = i;
        /* np.argmax: the first of equal values */
        if (res[i].loglik > res[best].loglik) best = i;
        if (res[i].loglik / t->choice_chars[i] >
            res[best_norm].loglik / t->choice_chars[best_norm])
            best_norm = i;
        if (i + 1 == t->num_requests || t->req[i + 1].choice == 0) {
            acc[q->example] = t->req[best].choice == t->label[q->example];
            norm[q->example] = t->req[best_norm].choice == t->label[q->example];
        }
    }
    out->acc_se = mean_stderr(acc, n, &out->acc);
    out->acc_norm_se = mean_stderr(norm, n, &out->acc_norm);
    free(acc);
    free(norm);
}

void eval_task_aggregate(const eval_task *t, const ll_result *res, int diffusion,
                         eval_scores *out) {
    *out = (eval_scores){.type = t->type, .diffusion = diffusion, .examples = t->num_examples,
                         .requests = t->num_requests, .words = t->words, .bytes = t->bytes};
    double var = 0.0;
    for (int i = 0; i < t->num_requests; i++) {
        out->loglik += res[i].loglik;
        var += res[i].sem * res[i].sem;
        out->tokens += res[i].tokens;
        out->cut += res[i].cut > 0;
    }
    out->loglik_se = sqrt(var);
    out->loglik_per_token = out->tokens ? out->loglik / (double)out->tokens : 0.0;
    if (t->type == EVAL_TASK_MULTIPLE_CHOICE) {
        aggregate_choices(t, res, out);
    } else if (t->type == EVAL_TASK_LOGLIKELIHOOD) {
        double *g = xcalloc((size_t)t->num_requests, sizeof(double), "is_greedy");
        for (int i = 0; i < t->num_requests; i++) g[i] = res[i].is_greedy;
        out->acc_se = mean_stderr(g, t->num_requests, &out->acc);
        free(g);
        out->perplexity = exp(-out->loglik / t->num_requests); /* lm-eval: over examples */
    } else {
        out->perplexity = exp(-out->loglik_per_token);
        out->word_perplexity = exp(-out->loglik / t->words);
        out->byte_perplexity = exp(-out->loglik / t->bytes);
        out->bits_per_byte = -out->loglik / t->bytes / log(2.0);
    }
}

enum { SLOT_LL, SLOT_SEM, SLOT_GREEDY, SLOT_TOKENS, SLOT_CUT, SLOTS };

int eval_task_run(const eval_task *t, ll_scorer *s, int eod, parallel_group group,
                  eval_scores *out, ll_result *per_request, char *err, size_t errlen) {
    int rank = 0, size = 1;
    parallel_group_rank(group, &rank, &size);
    size_t n = (size_t)t->num_requests;
    double *slots = xcalloc(n * SLOTS, sizeof(double), "the requests' results");
    int rc = 0;
    for (size_t i = (size_t)rank; i < n && rc == 0; i += (size_t)size) {
        const eval_request *q = &t->req[i];
        ll_result r;
        int32_t before = eod;
        int empty = q->nctx == 0 && !s->diffusion; /* lm-eval: the end-of-document token */
        rc = ll_score(s, empty ? &before : q->ctx, empty ? 1 : q->nctx, q->cont, q->ncont,
                      (uint32_t)i, &r, err, errlen);
        double *o = slots + i * SLOTS;
        o[SLOT_LL] = r.loglik, o[SLOT_SEM] = r.sem, o[SLOT_GREEDY] = r.is_greedy;
        o[SLOT_TOKENS] = r.tokens, o[SLOT_CUT] = r.cut;
    }
    /* every rank reaches the sum (a failure is a count in it): none waits for another */
    double failed = parallel_sum_double(group, rc != 0 ? 1.0 : 0.0);
    if (failed > 0) {
        if (rc == 0) err_set(err, errlen, "another rank failed to score its requests");
        free(slots);
        return -1;
    }
    parallel_sum_doubles(group, slots, n * SLOTS);
    ll_result *res = xcalloc(n ? n : 1, sizeof(ll_result), "the requests' results");
    for (size_t i = 0; i < n; i++) {
        const double *o = slots + i * SLOTS;
        res[i] = (ll_result){.loglik = o[SLOT_LL], .sem = o[SLOT_SEM],
                             .is_greedy = (int)o[SLOT_GREEDY], .tokens = (int)o[SLOT_TOKENS],
                             .cut = (int)o[SLOT_CUT]};
    }
    eval_task_aggregate(t, res, s->diffusion, out);
    if (per_request) memcpy(per_request, res, n * sizeof(ll_result));
    free(res);
    free(slots);
    return 0;
}
