#include "core/kernels/attention_block.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "core/kernels/gemm.h"

size_t attention_block_workspace_floats(int Lq, int Lk, int HS) {
    return 3 * (size_t)Lq * (size_t)Lk + (size_t)Lq * (size_t)HS;
}

/* Keys row i of the block attends to: j < block_row_len (<= 0: none). */
static int block_row_len(const attention_block *b, int causal, int i) {
    int L = b->Lk;
    if (causal && b->q0 + i + 1 - b->k0 < L) L = b->q0 + i + 1 - b->k0;
    int kv = b->kv_len > 0 ? b->kv_len : b->k0 + b->Lk;
    if (kv - b->k0 < L) L = kv - b->k0;
    return L;
}

/* Does any row of the block attend to any key? (Without documents; with them, seq_live.) */
static int block_live(const attention_block *b, int causal) {
    return block_row_len(b, causal, b->Lq - 1) > 0;
}

/* Keys of the block row i of sequence `seq` attends to: [*lo, hi), hi returned (hi <= *lo:
 * none). Without documents *lo = 0 and hi = block_row_len; with them (attention.h:
 * attention_docs) also within the row's document. */
static int row_keys(const attention_block *b, const attention_opts *o, int seq, int i, int *lo) {
    int hi = block_row_len(b, o->causal, i);
    *lo = 0;
    if (!o->docs.start) return hi;
    const size_t at = (size_t)seq * o->docs.stride + (size_t)(b->q0 + i);
    const int dlo = o->docs.start[at] - b->k0, dhi = o->docs.end[at] - b->k0;
    if (dlo > 0) *lo = dlo;
    if (dhi < hi) hi = dhi;
    return hi;
}

/* With documents: does any row of sequence seq attend to any key of the block? (A block pair
 * of chunks in different documents is skipped whole.) */
static int seq_live(const attention_block *b, const attention_opts *o, int seq) {
    if (!o->docs.start) return 1;
    for (int i = 0; i < b->Lq; i++) {
        int lo;
        if (row_keys(b, o, seq, i, &lo) > lo) return 1;
    }
    return 0;
}

static int team(attention_workspace ws) {
    const int max = omp_get_max_threads();
    return ws.threads < max ? (ws.threads < 1 ? 1 : ws.threads) : max;
}

static float *slice(attention_workspace ws, size_t per) {
    return ws.data + (size_t)omp_get_thread_num() * per;
}

/* out[0, L) = the attention-probability dropout of in, row i of head h of batch b: the mask
 * drawn at the global index of element (b, h, q0 + i, k0) (attention.h), so that the forward
 * and the backward draw the same one. */
static void probs_dropout(float *out, const float *in, int L, const attention_block *blk,
                          attention_opts o, int b, int h, int i, int lo) {
    const uint64_t T = (uint64_t)blk->T_key;
    const uint64_t first =
        ((uint64_t)b * (uint64_t)o.heads.total + (uint64_t)(o.heads.first + h)) * T * T +
        (uint64_t)(blk->q0 + i) * T + (uint64_t)(blk->k0 + lo);
    dropout_key key = o.key;
    key.site = DROPOUT_SITE_ATTENTION_PROBS;
    dropout_forward(out, in, (size_t)L, o.dropout_p, key, first);
}

/* S[Lq, Lk] = scale Q K^T for head h's queries and its group's keys. */
static void block_scores(float *S, const float *q, const float *k, const attention_block *blk,
                         int HS, int QKV_C, float scale) {
    gemm((gemm_dims){blk->Lq, blk->Lk, HS}, scale, gemm_n(q, QKV_C), gemm_t(k, QKV_C), 0.0f,
         gemm_o(S, blk->Lk));
}

/* Row i's probabilities within the block: p[j] = exp(s[j] - ref) for lo <= j < hi, 0
 * elsewhere; returns their sum. */
static float row_exp(float *p, const float *s, int lo, int hi, int Lk, float ref) {
    float sum = 0.0f;
    for (int j = 0; j < lo && j < Lk; j++) p[j] = 0.0f;
    for (int j = lo; j < hi; j++) {
        p[j] = expf(s[j] - ref);
        sum += p[j];
    }
    for (int j = hi < lo ? lo : hi; j < Lk; j++) p[j] = 0.0f;
    return sum;
}

void attention_block_forward(float *out, int out_rows, float *lse, int lse_rows,
                             attention_block blk, int B, qkv_layout lay, attention_opts o,
                             attention_workspace ws) {
    if (!block_live(&blk, o.causal)) return;
    const int NH = lay.NH, HS = lay.HS, Lq = blk.Lq, Lk = blk.Lk;
    const int QKV_C = (int)qkv_row_width(lay), OC = NH * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    const size_t per = attention_block_workspace_floats(Lq, Lk, HS);
    const int blas_threads = gemm_serial_begin();
#pragma omp parallel for schedule(static) num_threads(team(ws))
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH;
        float *S = slice(ws, per), *P = S + (size_t)Lq * Lk, *Ob = P + 2 * (size_t)Lq * Lk;
        const float *q = blk.q + (size_t)b * blk.q_rows * QKV_C + qkv_query_offset(lay, h);
        const float *k = blk.kv + (size_t)b * blk.kv_rows * QKV_C +
                         qkv_key_offset(lay, h / qkv_heads_per_group(lay));
        const float *v = k + HS;
        float *lse_bh = lse + (size_t)bh * lse_rows;
        float lse_b[Lq];
        if (!seq_live(&blk, &o, b)) continue; /* no row of it sees these keys */
        block_scores(S, q, k, &blk, HS, QKV_C, scale);
        for (int i = 0; i < Lq; i++) {
            int lo;
            const int hi = row_keys(&blk, &o, b, i, &lo), L = hi - lo;
            float *s = S + (size_t)i * Lk, *p = P + (size_t)i * Lk;
            float mx = -INFINITY;
            for (int j = lo; j < hi; j++) mx = s[j] > mx ? s[j] : mx;
            const float sum = row_exp(p, s, lo, hi, Lk, mx);
            lse_b[i] = L > 0 ? mx + logf(sum) : -INFINITY;
            const float inv = L > 0 ? 1.0f / sum : 0.0f;
            for (int j = lo; j < hi; j++) p[j] *= inv;
            if (o.dropout_p > 0.0f && L > 0)
                probs_dropout(p + lo, p + lo, L, &blk, o, b, h, i, lo);
        }
        gemm((gemm_dims){Lq, HS, Lk}, 1.0f, gemm_n(P, Lk), gemm_n(v, QKV_C), 0.0f,
             gemm_o(Ob, HS));
        for (int i = 0; i < Lq; i++) {
            if (lse_b[i] == -INFINITY) continue;
            const float old = lse_bh[i];
            const float m = old > lse_b[i] ? old : lse_b[i];
            const float merged = m + logf(expf(old - m) + expf(lse_b[i] - m));
            const float a = expf(old - merged), c = expf(lse_b[i] - merged);
            float *row = out + ((size_t)b * out_rows + i) * OC + (size_t)h * HS;
            for (int x = 0; x < HS; x++) row[x] = row[x] * a + Ob[(size_t)i * HS + x] * c;
            lse_bh[i] = merged;
        }
    }
    gemm_serial_end(blas_threads);
}

void attention_block_delta(float *D, const float *dout, const float *out, int out_rows, int Lq,
                           int B, qkv_layout lay, int lse_rows) {
    const int NH = lay.NH, HS = lay.HS, OC = NH * HS;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < Lq; i++) {
                const size_t at = ((size_t)b * out_rows + i) * OC + (size_t)h * HS;
                float d = 0.0f;
                for (int x = 0; x < HS; x++) d += dout[at + x] * out[at + x];
                D[((size_t)b * NH + h) * lse_rows + i] = d;
            }
}

void attention_block_backward(float *dq_all, float *dkv_all, const float *dout, int out_rows,
                              const float *lse, const float *D, int lse_rows,
                              attention_block blk, int B, qkv_layout lay, attention_opts o,
                              attention_workspace ws) {
    if (!block_live(&blk, o.causal)) return;
    const int NH = lay.NH, NG = lay.NG, HS = lay.HS, Lq = blk.Lq, Lk = blk.Lk;
    const int Q = qkv_heads_per_group(lay), QKV_C = (int)qkv_row_width(lay), OC = NH * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    const size_t per = attention_block_workspace_floats(Lq, Lk, HS);
    const int blas_threads = gemm_serial_begin();
#pragma omp parallel for schedule(static) num_threads(team(ws))
    for (int bg = 0; bg < B * NG; bg++) {
        const int b = bg / NG, g = bg % NG;
        float *P = slice(ws, per), *Pu = P + (size_t)Lq * Lk, *dS = Pu + (size_t)Lq * Lk;
        const float *q_b = blk.q + (size_t)b * blk.q_rows * QKV_C;
        const float *kv_b = blk.kv + (size_t)b * blk.kv_rows * QKV_C;
        const float *k = kv_b + qkv_key_offset(lay, g), *v = kv_b + qkv_value_offset(lay, g);
        float *dkv_b = dkv_all + (size_t)b * blk.kv_rows * QKV_C;
        float *dk = dkv_b + qkv_key_offset(lay, g), *dv = dkv_b + qkv_value_offset(lay, g);
        for (int h = g * Q; h < (g + 1) * Q; h++) {
            const float *q = q_b + qkv_query_offset(lay, h);
            float *dq = dq_all + (size_t)b * blk.q_rows * QKV_C + qkv_query_offset(lay, h);
            const float *dO = dout + (size_t)b * out_rows * OC + (size_t)h * HS;
            const float *lse_bh = lse + ((size_t)b * NH + h) * lse_rows;
            const float *D_bh = D + ((size_t)b * NH + h) * lse_rows;
            if (!seq_live(&blk, &o, b)) continue; /* no row of it sees these keys */
            block_scores(P, q, k, &blk, HS, QKV_C, scale);
            for (int i = 0; i < Lq; i++) { /* P = exp(S - lse), Pu = dropout(P) */
                int lo;
                const int hi = row_keys(&blk, &o, b, i, &lo), L = hi - lo;
                float *p = P + (size_t)i * Lk, *pu = Pu + (size_t)i * Lk;
                row_exp(p, p, lo, hi, Lk, lse_bh[i]);
                memcpy(pu, p, (size_t)Lk * sizeof(float));
                if (o.dropout_p > 0.0f && L > 0)
                    probs_dropout(pu + lo, p + lo, L, &blk, o, b, h, i, lo);
            }
            /* dV += Pu^T dO */
            gemm((gemm_dims){Lk, HS, Lq}, 1.0f, gemm_t(Pu, Lk), gemm_n(dO, OC), 1.0f,
                 gemm_o(dv, QKV_C));
            /* dPu = dO V^T; dS = P (mask(dPu) - D) */
            gemm((gemm_dims){Lq, Lk, HS}, 1.0f, gemm_n(dO, OC), gemm_t(v, QKV_C), 0.0f,
                 gemm_o(dS, Lk));
            for (int i = 0; i < Lq; i++) {
                int lo;
                const int hi = row_keys(&blk, &o, b, i, &lo), L = hi - lo;
                float *d = dS + (size_t)i * Lk;
                const float *p = P + (size_t)i * Lk;
                if (o.dropout_p > 0.0f && L > 0)
                    probs_dropout(d + lo, d + lo, L, &blk, o, b, h, i, lo);
                for (int j = 0; j < lo && j < Lk; j++) d[j] = 0.0f;
                for (int j = lo; j < hi; j++) d[j] = p[j] * (d[j] - D_bh[i]);
                for (int j = hi < lo ? lo : hi; j < Lk; j++) d[j] = 0.0f;
            }
            /* dQ += scale dS K,  dK += scale dS^T Q */
            gemm((gemm_dims){Lq, HS, Lk}, scale, gemm_n(dS, Lk), gemm_n(k, QKV_C), 1.0f,
                 gemm_o(dq, QKV_C));
            gemm((gemm_dims){Lk, HS, Lq}, scale, gemm_t(dS, Lk), gemm_n(q, QKV_C), 1.0f,
                 gemm_o(dk, QKV_C));
        }
    }
    gemm_serial_end(blas_threads);
}
