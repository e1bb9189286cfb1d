/* Core attention on Megatron's packed QKV buffer (layout in qkv_layout.h).
 *
 * Parallel over (batch, head) pairs in the forward pass and over (batch, query group) in the
 * backward pass (a group's query heads all add into the same dK, dV columns, so one thread owns
 * a group). Each thread uses its own slice of the workspace (3 * T * T floats: a score/dP
 * matrix, a dropped-probabilities matrix, and in backward the recomputed probabilities) and
 * calls gemm() on strided views of the packed buffers: Q, K, V of a head are [T, HS] with row
 * stride QKV_C; out/dout of a head are [T, HS] with row stride NH * HS. OpenBLAS is set
 * single-threaded for the duration of the parallel region (gemm_serial_begin/end, see gemm.h).
 *
 * Causal attention is computed in row blocks of ATT_BLOCK query positions: block [i0, i1)
 * only touches key positions j < i1, which skips most of the masked upper triangle. Every
 * matrix entry that a block reads past the mask (i < j < i1) is zero. */
#include "core/kernels/attention.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "core/kernels/bf16.h"
#include "core/kernels/gemm.h"
#include "core/kernels/simd_math.h"

#define ATT_BLOCK 64

/* Keys query row i (global position q0 + i) attends to: j < row_len (causal: j <= q0 + i;
 * keys from kv on are padding). */
static inline int row_len(int i, int q0, int causal, int kv) {
    const int L = causal ? q0 + i + 1 : kv;
    return L < kv ? L : kv;
}

/* Key columns a causal block of query rows ending at i1 reads: [0, q0 + i1), at most Tk. */
static inline int block_cols(int i1, int q0, int Tk, int causal) {
    if (!causal) return Tk;
    return q0 + i1 < Tk ? q0 + i1 : Tk;
}

/* The shape both passes share: Tq query rows at global positions q0 .. q0 + Tq - 1 against Tk
 * keys (a single process: Tq = Tk = T, q0 = 0). */
typedef struct {
    int Tq, Tk, q0, causal, kv;
    int Tkey; /* the sequence length of the dropout index (attention_rows.T_key) */
    const int32_t *ds, *de; /* packed documents: this sequence's rows of attention_docs (global
                               positions); NULL: none */
} att_shape;

/* The shape of sequence b: its rows of the document bounds. */
static inline att_shape shape_of_seq(att_shape sh, attention_docs docs, int b) {
    if (docs.start) {
        sh.ds = docs.start + (size_t)b * docs.stride;
        sh.de = docs.end + (size_t)b * docs.stride;
        /* one document (starts are non-decreasing: all 0): the code without documents, so such
         * a sequence computes today's numbers bit for bit */
        if (sh.ds[docs.stride - 1] == 0) sh.ds = sh.de = NULL;
    }
    return sh;
}

/* What row i of a matrix [Tq, Tk] holds: the keys it attends to, [lo, hi), and the columns the
 * GEMMs of its query block read, [zlo, zhi), whose entries outside [lo, hi) must be zero.
 * Without documents: [0, row_len) and the whole row (the code before packing, kept bit for bit).
 * With documents: the row's document (causal: up to itself) and its block's span
 * (block_span). */
typedef struct {
    int lo, hi, zlo, zhi;
} row_zone;

/* Key columns of the query block [i0, i1) with documents: from the first row's document start
 * to the last row's last key (both non-decreasing in the row). */
static inline void block_span(const att_shape *sh, int i0, int i1, int *c0, int *c1) {
    if (!sh->ds) {
        *c0 = 0;
        *c1 = block_cols(i1, sh->q0, sh->Tk, sh->causal);
        return;
    }
    const int p0 = sh->q0 + i0, p1 = sh->q0 + i1 - 1;
    int hi = sh->causal ? p1 + 1 : sh->de[p1];
    if (hi > sh->kv) hi = sh->kv;
    *c0 = sh->ds[p0];
    *c1 = hi > *c0 ? hi : *c0;
}

static inline row_zone zone_of(const att_shape *sh, int i) {
    if (!sh->ds) return (row_zone){0, row_len(i, sh->q0, sh->causal, sh->kv), 0, sh->Tk};
    const int p = sh->q0 + i, i0 = i - i % ATT_BLOCK;
    const int i1 = i0 + ATT_BLOCK < sh->Tq ? i0 + ATT_BLOCK : sh->Tq;
    row_zone z;
    block_span(sh, i0, i1, &z.zlo, &z.zhi);
    z.lo = sh->ds[p];
    z.hi = sh->causal ? p + 1 : sh->de[p];
    if (z.hi > sh->kv) z.hi = sh->kv;
    if (z.hi < z.lo) z.hi = z.lo;
    return z;
}

/* Zeroes row x's entries of its zone outside its keys. */
static inline void zero_outside(float *x, row_zone z) {
    for (int j = z.zlo; j < z.lo; j++) x[j] = 0.0f;
    for (int j = z.hi; j < z.zhi; j++) x[j] = 0.0f;
}

/* One head's attention probabilities: S[Tq,Tk] = scale * Q K^T (workspace), then
 * P[Tq,Tk] = row softmax of S over the unmasked keys, masked entries 0. P may alias S. The only
 * code that computes probabilities, so forward and the recomputation in backward (selective
 * recompute) produce the same bits. q, k: [Tq|Tk, HS] with row stride QKV_C. half (--bf16,
 * --fp16): S's and P's unmasked entries rounded to that format (attention.h). */
static void head_probs(float *P, float *S, const float *q, const float *k, att_shape sh, int HS,
                       int QKV_C, float scale, half_kind half) {
    const int Tq = sh.Tq, Tk = sh.Tk;
    /* S = scale * Q K^T  (causal: block [i0,i1) x [0,q0+i1); documents: the block's span) */
    for (int i0 = 0; i0 < Tq; i0 += ATT_BLOCK) {
        const int i1 = i0 + ATT_BLOCK < Tq ? i0 + ATT_BLOCK : Tq;
        int c0, c1;
        block_span(&sh, i0, i1, &c0, &c1);
        if (c1 > c0)
            gemm((gemm_dims){i1 - i0, c1 - c0, HS}, scale,
                 gemm_n(q + (size_t)i0 * QKV_C, QKV_C), gemm_t(k + (size_t)c0 * QKV_C, QKV_C),
                 0.0f, gemm_o(S + (size_t)i0 * Tk + c0, Tk));
    }
    /* P = softmax over the unmasked keys [lo, hi) (max-subtracted); masked entries 0. */
    for (int i = 0; i < Tq; i++) {
        const row_zone z = zone_of(&sh, i);
        const int L = z.hi - z.lo;
        float *s = S + (size_t)i * Tk + z.lo;
        float *p = P + (size_t)i * Tk + z.lo;
        if (L > 0) {
            if (half) half_round_f32(half, s, (size_t)L);
            const float mx = simd_max(s, L);
            for (int j = 0; j < L; j++)
                p[j] = simd_expf(s[j] - mx);
            const float inv = 1.0f / simd_sum(p, L);
            for (int j = 0; j < L; j++)
                p[j] *= inv;
            if (half) half_round_f32(half, p, (size_t)L);
        }
        zero_outside(P + (size_t)i * Tk, z);
    }
}

/* One head's probabilities after attention dropout: P itself when p == 0, else Pd[Tq,Tk] =
 * dropout(P) with the mask of global elements first + (q0 + i) * Tk + j, masked entries 0
 * (rounded to the 16-bit format with half). Forward and backward both call this, so they apply
 * the same mask. */
static const float *dropped_probs(float *Pd, const float *P, att_shape sh, float dropout_p,
                                  dropout_key key, uint64_t first, half_kind half) {
    if (dropout_p <= 0.0f) return P;
    const int Tk = sh.Tk;
    for (int i = 0; i < sh.Tq; i++) {
        const row_zone z = zone_of(&sh, i);
        const int L = z.hi - z.lo;
        float *pd = Pd + (size_t)i * Tk;
        dropout_forward(pd + z.lo, P + (size_t)i * Tk + z.lo, (size_t)L, dropout_p, key,
                        first + (uint64_t)(sh.q0 + i) * sh.Tkey + (uint64_t)z.lo);
        if (half) half_round_f32(half, pd + z.lo, (size_t)L);
        zero_outside(pd, z);
    }
    return Pd;
}

/* The kept 16-bit probabilities, written from P (to_b16) or widened into P: the whole matrix,
 * or with documents each row's zone only (the entries backward reads; converting the rest would
 * cost what packing saves). */
static void probs_b16(half_kind half, float *P, uint16_t *b16, const att_shape *sh, int to_b16) {
    const int whole = !sh->ds;
    for (int i = 0; i < (whole ? 1 : sh->Tq); i++) {
        const row_zone z = whole ? (row_zone){0} : zone_of(sh, i);
        const size_t at = whole ? 0 : (size_t)i * sh->Tk + z.zlo;
        const size_t n = whole ? (size_t)sh->Tq * sh->Tk : (size_t)(z.zhi - z.zlo);
        if (to_b16)
            half_from_f32(half, b16 + at, P + at, n);
        else
            half_to_f32(half, P + at, b16 + at, n);
    }
}

static void probs_to_b16(half_kind half, uint16_t *dst, const float *P, const att_shape *sh) {
    probs_b16(half, (float *)P, dst, sh, 1);
}

static void probs_from_b16(half_kind half, float *P, const uint16_t *src, const att_shape *sh) {
    probs_b16(half, P, (uint16_t *)src, sh, 0);
}

size_t attention_workspace_floats(int T, int threads) {
    return attention_workspace_floats_rows(T, T, threads);
}

size_t attention_workspace_floats_rows(int Tq, int Tk, int threads) {
    return 3 * (size_t)Tq * (size_t)Tk * (size_t)(threads < 1 ? 1 : threads);
}

/* The team of a parallel region over the workspace: the current OpenMP team size, never more
 * threads than the workspace has slices for. */
static int team_size(attention_workspace ws) {
    const int max = omp_get_max_threads();
    return ws.threads < max ? (ws.threads < 1 ? 1 : ws.threads) : max;
}

/* The calling thread's 3 x TT floats of the workspace. */
static float *thread_slice(attention_workspace ws, size_t TT) {
    return ws.data + (size_t)omp_get_thread_num() * 3 * TT;
}

/* Global dropout element index of probs[b, h, i, 0] (add j for column j) of a sequence of T
 * tokens, i the global query position:
 *   ((b_offset + b) * NH_total + h_offset + h) * T * T + i * T.
 * A tensor-parallel caller owning a slice of heads passes h_offset and the total head count
 * NH_total; single process: 0, 0, NH. */
static inline uint64_t probs_index(int b_offset, int b, int NH_total, int h_offset, int h, int T,
                                   int i) {
    return ((uint64_t)(b_offset + b) * (uint64_t)NH_total + (uint64_t)(h_offset + h)) *
               (uint64_t)T * (uint64_t)T +
           (uint64_t)i * (uint64_t)T;
}

/* What both passes derive from the layout and the options: the packed row width, the output
 * row width, the score scale, the Tq x Tk matrix size and the dropout key of the probabilities
 * (site DROPOUT_SITE_ATTENTION_PROBS, so callers may pass their layer's key as is). */
typedef struct {
    int QKV_C, OC;
    float scale;
    size_t TT;
    dropout_key key;
    att_shape sh;
} att_dims;

static att_dims att_dims_of(qkv_layout lay, attention_rows r, attention_opts o) {
    att_dims d = {(int)qkv_row_width(lay), lay.NH * lay.HS, 1.0f / sqrtf((float)lay.HS),
                  (size_t)r.Tq * (size_t)r.Tk, o.key,
                  {r.Tq, r.Tk, r.q0, o.causal, o.kv_len > 0 && o.kv_len < r.Tk ? o.kv_len : r.Tk,
                   r.T_key > 0 ? r.T_key : r.Tk, NULL, NULL}};
    d.key.site = DROPOUT_SITE_ATTENTION_PROBS;
    return d;
}

/* A single process's rows: every query against every key of the same buffer; the dropout
 * masks of a padded sequence (kv_len < T) keyed by its unpadded length, as one process runs
 * it (cp_layout.h: cp_key_length). */
static attention_rows whole_rows(const float *qkv, int T, attention_opts o) {
    int T_key = o.kv_len > 0 && o.kv_len < T ? o.kv_len : T;
    return (attention_rows){qkv, qkv, T, T, 0, T, T, T, T_key};
}

void attention_forward(float *out, attention_probs probs, const float *qkv, qkv_batch x,
                       attention_opts o, attention_workspace ws) {
    attention_forward_rows(out, probs, whole_rows(qkv, x.T, o), x.B, x.layout, o, ws);
}

void attention_backward(float *dqkv, const float *dout, const float *qkv, attention_probs probs,
                        qkv_batch x, attention_opts o, attention_workspace ws) {
    attention_backward_rows(dqkv, dqkv, dout, whole_rows(qkv, x.T, o), probs, x.B, x.layout, o,
                            ws);
}

/* out = dropout(softmax(Q K^T / sqrt(HS) + mask)) @ V   per (b, h);
 * probs[B,NH,Tq,Tk] = softmax output before dropout, masked entries 0 (probs may be NULL when
 * no backward pass follows; then the probabilities live only in the workspace).
 * The dropout key's site field is set to DROPOUT_SITE_ATTENTION_PROBS here (both passes), so
 * callers may pass their layer's key as is. */
void attention_forward_rows(float *out, attention_probs probs, attention_rows r, int B,
                            qkv_layout lay, attention_opts o, attention_workspace ws) {
    const att_dims d = att_dims_of(lay, r, o);
    const int NH = lay.NH, HS = lay.HS, Tq = r.Tq, Tk = r.Tk;
    const int QKV_C = d.QKV_C, OC = d.OC;
    const int blas_threads = gemm_serial_begin();
#pragma omp parallel for schedule(static) num_threads(team_size(ws))
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH;
        float *S = thread_slice(ws, d.TT); /* scores [Tq,Tk] */
        float *Pd = S + d.TT; /* dropped probs [Tq,Tk] */
        const float *q = r.q + (size_t)b * r.q_rows * QKV_C + qkv_query_offset(lay, h);
        const float *k = r.kv + (size_t)b * r.kv_rows * QKV_C +
                         qkv_key_offset(lay, h / qkv_heads_per_group(lay));
        const float *v = k + HS;
        float *P = probs.f32 ? probs.f32 + (size_t)bh * d.TT : S;
        const att_shape sh = shape_of_seq(d.sh, o.docs, b);

        head_probs(P, S, q, k, sh, HS, QKV_C, d.scale, o.half);
        if (probs.b16) probs_to_b16(o.half, probs.b16 + (size_t)bh * d.TT, P, &sh); /* exact */
        /* Dropout on the probabilities (the same mask is regenerated in backward). */
        const float *Pu =
            dropped_probs(Pd, P, sh, o.dropout_p, d.key,
                          probs_index(0, b, o.heads.total, o.heads.first, h, d.sh.Tkey, 0),
                          o.half);
        /* out_h = Pu @ V */
        for (int i0 = 0; i0 < Tq; i0 += ATT_BLOCK) {
            const int i1 = i0 + ATT_BLOCK < Tq ? i0 + ATT_BLOCK : Tq;
            float *o_rows = out + ((size_t)b * r.out_rows + i0) * OC + (size_t)h * HS;
            int c0, c1;
            block_span(&sh, i0, i1, &c0, &c1);
            if (c1 > c0)
                gemm((gemm_dims){i1 - i0, HS, c1 - c0}, 1.0f,
                     gemm_n(Pu + (size_t)i0 * Tk + c0, Tk), gemm_n(v + (size_t)c0 * QKV_C, QKV_C),
                     0.0f, gemm_o(o_rows, OC));
            else
                for (int i = i0; i < i1; i++) memset(o_rows + (size_t)(i - i0) * OC, 0, HS * 4);
        }
    }
    gemm_serial_end(blas_threads);
}

/* dS[Tq,Tk] = softmax backward of the (mask-applied) dP held in dS, row by row, in place:
 * dS = P * (dP - rowsum(P * dP)); zero the masked entries the GEMMs read (a single process's
 * causal blocks: up to the row's block end; otherwise the whole row). first: the global
 * dropout index of global row 0 (add i * Tk for global row i). */
static void softmax_backward_rows(float *dS, const float *P, att_shape sh, float dropout_p,
                                  dropout_key key, uint64_t first) {
    const int Tq = sh.Tq, Tk = sh.Tk;
    for (int i = 0; i < Tq; i++) {
        row_zone z = zone_of(&sh, i);
        const int L = z.hi - z.lo;
        float *d = dS + (size_t)i * Tk + z.lo;
        const float *p = P + (size_t)i * Tk + z.lo;
        if (dropout_p > 0.0f)
            dropout_forward(d, d, (size_t)L, dropout_p, key,
                            first + (uint64_t)(sh.q0 + i) * sh.Tkey + (uint64_t)z.lo);
        float dot = 0.0f;
        for (int j = 0; j < L; j++)
            dot += p[j] * d[j];
        for (int j = 0; j < L; j++)
            d[j] = p[j] * (d[j] - dot);
        /* causal from position 0: the GEMMs read up to the row's block end (the key blocks
         * align with the query blocks); shifted queries (q0 > 0) or padding: every column;
         * documents: the row's zone (every GEMM of the pass tiles by query block) */
        if (!sh.ds) {
            const int block_end =
                (i / ATT_BLOCK + 1) * ATT_BLOCK < Tq ? (i / ATT_BLOCK + 1) * ATT_BLOCK : Tq;
            z.zhi = sh.causal && sh.q0 == 0 && Tq == Tk ? block_end : Tk;
        }
        zero_outside(dS + (size_t)i * Tk, z);
    }
}

/* One head's operands and gradients for docs_backward (row strides QKV_C and OC). */
typedef struct {
    const float *q, *k, *v, *dO;
    float *dq, *dk, *dv;
    int QKV_C, OC, HS;
    float scale;
} doc_grads;

/* The backward of one head over packed documents: every GEMM tiles by query block [i0, i1)
 * against the block's key span [c0, c1) only (block_span), so blocks across a document boundary
 * are never computed and each row's entries are read only within its zone (zone_of). */
static void docs_backward(float *dS, const float *P, const float *Pu, const att_shape *sh,
                          const doc_grads *g, float dropout_p, dropout_key key, uint64_t first) {
    const int Tq = sh->Tq, Tk = sh->Tk, HS = g->HS, QKV_C = g->QKV_C, OC = g->OC;
    for (int i0 = 0; i0 < Tq; i0 += ATT_BLOCK) {
        const int i1 = i0 + ATT_BLOCK < Tq ? i0 + ATT_BLOCK : Tq;
        int c0, c1;
        block_span(sh, i0, i1, &c0, &c1);
        if (c1 <= c0) continue;
        /* dV += Pu^T dO;  dPu = dO V^T */
        gemm((gemm_dims){c1 - c0, HS, i1 - i0}, 1.0f, gemm_t(Pu + (size_t)i0 * Tk + c0, Tk),
             gemm_n(g->dO + (size_t)i0 * OC, OC), 1.0f, gemm_o(g->dv + (size_t)c0 * QKV_C, QKV_C));
        gemm((gemm_dims){i1 - i0, c1 - c0, HS}, 1.0f, gemm_n(g->dO + (size_t)i0 * OC, OC),
             gemm_t(g->v + (size_t)c0 * QKV_C, QKV_C), 0.0f,
             gemm_o(dS + (size_t)i0 * Tk + c0, Tk));
    }
    softmax_backward_rows(dS, P, *sh, dropout_p, key, first);
    for (int i0 = 0; i0 < Tq; i0 += ATT_BLOCK) {
        const int i1 = i0 + ATT_BLOCK < Tq ? i0 + ATT_BLOCK : Tq;
        int c0, c1;
        block_span(sh, i0, i1, &c0, &c1);
        if (c1 <= c0) continue;
        /* dQ += scale dS K;  dK += scale dS^T Q */
        gemm((gemm_dims){i1 - i0, HS, c1 - c0}, g->scale, gemm_n(dS + (size_t)i0 * Tk + c0, Tk),
             gemm_n(g->k + (size_t)c0 * QKV_C, QKV_C), 1.0f,
             gemm_o(g->dq + (size_t)i0 * QKV_C, QKV_C));
        gemm((gemm_dims){c1 - c0, HS, i1 - i0}, g->scale, gemm_t(dS + (size_t)i0 * Tk + c0, Tk),
             gemm_n(g->q + (size_t)i0 * QKV_C, QKV_C), 1.0f,
             gemm_o(g->dk + (size_t)c0 * QKV_C, QKV_C));
    }
}

/* With Pu = dropout(P) and dPu = dO V^T:
 *   dV += Pu^T dO
 *   dP  = dropout mask applied to dPu (same mask, same 1/(1-p) scale)
 *   dS  = P * (dP - rowsum(P * dP))           (softmax backward; 0 where masked)
 *   dQ += scale * dS K,   dK += scale * dS^T Q.
 * dq (rows as r.q's) and dkv (rows as r.kv's) accumulate; value/key gradients of a group sum
 * over its query heads. */
void attention_backward_rows(float *dq_all, float *dkv_all, const float *dout, attention_rows r,
                             attention_probs probs, int B, qkv_layout lay, attention_opts o,
                             attention_workspace ws) {
    const att_dims d = att_dims_of(lay, r, o);
    const int NH = lay.NH, NG = lay.NG, HS = lay.HS, causal = o.causal;
    const int Tq = r.Tq, Tk = r.Tk, q0 = r.q0;
    const int Q = qkv_heads_per_group(lay);
    const int QKV_C = d.QKV_C, OC = d.OC;
    const int blas_threads = gemm_serial_begin();
#pragma omp parallel for schedule(static) num_threads(team_size(ws))
    for (int bg = 0; bg < B * NG; bg++) {
        const int b = bg / NG, g = bg % NG;
        float *dS = thread_slice(ws, d.TT); /* dP, then dS [Tq,Tk] */
        float *Pd = dS + d.TT;
        float *Pr = Pd + d.TT; /* widened or recomputed probabilities, unless kept in fp32 */
        const float *q_b = r.q + (size_t)b * r.q_rows * QKV_C;
        const float *kv_b = r.kv + (size_t)b * r.kv_rows * QKV_C;
        float *dq_b = dq_all + (size_t)b * r.q_rows * QKV_C;
        float *dkv_b = dkv_all + (size_t)b * r.kv_rows * QKV_C;
        const float *k = kv_b + qkv_key_offset(lay, g);
        const float *v = kv_b + qkv_value_offset(lay, g);
        float *dk = dkv_b + qkv_key_offset(lay, g);
        float *dv = dkv_b + qkv_value_offset(lay, g);
        const att_shape sh = shape_of_seq(d.sh, o.docs, b);
        for (int h = g * Q; h < (g + 1) * Q; h++) {
            const float *q = q_b + qkv_query_offset(lay, h);
            const size_t at = ((size_t)b * NH + h) * d.TT;
            const float *P = probs.f32 ? probs.f32 + at : Pr;
            if (probs.b16)
                probs_from_b16(o.half, Pr, probs.b16 + at, &sh);
            else if (!probs.f32) /* selective recompute: the probabilities were not kept */
                head_probs(Pr, Pr, q, k, sh, HS, QKV_C, d.scale, o.half);
            float *dq = dq_b + qkv_query_offset(lay, h);
            const float *dO = dout + (size_t)b * r.out_rows * OC + (size_t)h * HS;
            const uint64_t first =
                probs_index(0, b, o.heads.total, o.heads.first, h, d.sh.Tkey, 0);

            /* Regenerate the dropped probabilities. */
            const float *Pu = dropped_probs(Pd, P, sh, o.dropout_p, d.key, first, o.half);
            if (sh.ds) {
                const doc_grads dg = {q, k, v, dO, dq, dk, dv, QKV_C, OC, HS, d.scale};
                docs_backward(dS, P, Pu, &sh, &dg, o.dropout_p, d.key, first);
                continue;
            }
            /* dV += Pu^T dO  (causal: key block [j0,j1) gets query rows at positions >= j0) */
            for (int j0 = 0; j0 < Tk; j0 += ATT_BLOCK) {
                const int j1 = j0 + ATT_BLOCK < Tk ? j0 + ATT_BLOCK : Tk;
                const int r0 = causal && j0 > q0 ? j0 - q0 : 0;
                if (r0 >= Tq) break;
                gemm((gemm_dims){j1 - j0, HS, Tq - r0}, 1.0f,
                     gemm_t(Pu + (size_t)r0 * Tk + j0, Tk), gemm_n(dO + (size_t)r0 * OC, OC),
                     1.0f, gemm_o(dv + (size_t)j0 * QKV_C, QKV_C));
            }
            /* dPu = dO V^T  (causal: block [i0,i1) x [0,q0+i1)) */
            for (int i0 = 0; i0 < Tq; i0 += ATT_BLOCK) {
                const int i1 = i0 + ATT_BLOCK < Tq ? i0 + ATT_BLOCK : Tq;
                gemm((gemm_dims){i1 - i0, block_cols(i1, q0, Tk, causal), HS}, 1.0f,
                     gemm_n(dO + (size_t)i0 * OC, OC), gemm_t(v, QKV_C), 0.0f,
                     gemm_o(dS + (size_t)i0 * Tk, Tk));
            }
            softmax_backward_rows(dS, P, d.sh, o.dropout_p, d.key, first);
            /* dQ += scale * dS K */
            for (int i0 = 0; i0 < Tq; i0 += ATT_BLOCK) {
                const int i1 = i0 + ATT_BLOCK < Tq ? i0 + ATT_BLOCK : Tq;
                gemm((gemm_dims){i1 - i0, HS, block_cols(i1, q0, Tk, causal)}, d.scale,
                     gemm_n(dS + (size_t)i0 * Tk, Tk), gemm_n(k, QKV_C), 1.0f,
                     gemm_o(dq + (size_t)i0 * QKV_C, QKV_C));
            }
            /* dK += scale * dS^T Q */
            for (int j0 = 0; j0 < Tk; j0 += ATT_BLOCK) {
                const int j1 = j0 + ATT_BLOCK < Tk ? j0 + ATT_BLOCK : Tk;
                const int r0 = causal && j0 > q0 ? j0 - q0 : 0;
                if (r0 >= Tq) break;
                gemm((gemm_dims){j1 - j0, HS, Tq - r0}, d.scale,
                     gemm_t(dS + (size_t)r0 * Tk + j0, Tk), gemm_n(q + (size_t)r0 * QKV_C, QKV_C),
                     1.0f, gemm_o(dk + (size_t)j0 * QKV_C, QKV_C));
            }
        }
    }
    gemm_serial_end(blas_threads);
}
