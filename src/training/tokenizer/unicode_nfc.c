/* NFC (see unicode_nfc.h). */
#include "training/tokenizer/unicode_nfc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "training/tokenizer/unicode_nfc_data.h"

#define NROWS(t) (sizeof(t) / sizeof(t[0]))

/* Hangul syllables (UAX #15 / Unicode 3.12) */
enum { S_BASE = 0xAC00, L_BASE = 0x1100, V_BASE = 0x1161, T_BASE = 0x11A7, L_COUNT = 19,
       V_COUNT = 21, T_COUNT = 28, N_COUNT = V_COUNT * T_COUNT, S_COUNT = L_COUNT * N_COUNT };

static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t c) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < r[mid][0]) hi = mid;
        else if (c > r[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

static int ccc(uint32_t c) {
    if (c < 0x300) return 0;
    size_t lo = 0, hi = NROWS(NFC_CCC);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < NFC_CCC[mid][0]) hi = mid;
        else if (c > NFC_CCC[mid][1]) lo = mid + 1;
        else return (int)NFC_CCC[mid][2];
    }
    return 0;
}

static int maybe_changes(uint32_t c) {
    if (c < 0x300) return 0;
    if ((c >= V_BASE && c < V_BASE + V_COUNT) || (c > T_BASE && c < T_BASE + T_COUNT)) return 1;
    return in_ranges(NFC_MAYBE, NROWS(NFC_MAYBE), c);
}

static const uint32_t *decomposition(uint32_t c, size_t *len) {
    size_t lo = 0, hi = NROWS(NFC_DECOMP);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < NFC_DECOMP[mid][0]) hi = mid;
        else if (c > NFC_DECOMP[mid][0]) lo = mid + 1;
        else {
            *len = NFC_DECOMP[mid][2];
            return NFC_DECOMP_DATA + NFC_DECOMP[mid][1];
        }
    }
    return NULL;
}

static uint32_t compose(uint32_t a, uint32_t b) {
    if (a >= L_BASE && a < L_BASE + L_COUNT && b >= V_BASE && b < V_BASE + V_COUNT)
        return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0 && b > T_BASE &&
        b < T_BASE + T_COUNT)
        return a + (b - T_BASE);
    size_t lo = 0, hi = NROWS(NFC_COMP);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const uint32_t *r = NFC_COMP[mid];
        if (a < r[0] || (a == r[0] && b < r[1])) hi = mid;
        else if (a > r[0] || b > r[1]) lo = mid + 1;
        else return r[2];
    }
    return 0;
}

/* Input is valid UTF-8 (checked by the caller). */
static uint32_t utf8_get(const unsigned char *s, size_t *i) {
    uint32_t c = s[*i];
    if (c < 0x80) {
        (*i)++;
        return c;
    }
    size_t k = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    c &= k == 4 ? 0x07 : k == 3 ? 0x0F : 0x1F;
    for (size_t j = 1; j < k; j++) c = c << 6 | (s[*i + j] & 0x3F);
    *i += k;
    return c;
}

size_t unicode_utf8_put(char *o, uint32_t cp) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | ((cp >> 6) & 63));
        o[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63));
    o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

int unicode_nfc(const char *text, size_t n, char **out, size_t *outn) {
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0, count = 0;
    int need = 0;
    while (i < n) { /* quick check */
        uint32_t c = utf8_get(s, &i);
        count++;
        if (maybe_changes(c)) need = 1;
    }
    if (!need) return 0;
    /* a full canonical decomposition is at most 4 code points per character (18 for a few
     * rare ones: the table's longest is checked below) */
    size_t cap = count * 4 + 16, len = 0;
    uint32_t *d = malloc(cap * sizeof *d);
    if (!d) return -1;
    i = 0;
    while (i < n) {
        uint32_t c = utf8_get(s, &i);
        size_t dl;
        const uint32_t *dp;
        if (len + 20 > cap) {
            cap *= 2;
            uint32_t *nd = realloc(d, cap * sizeof *nd);
            if (!nd) {
                free(d);
                return -1;
            }
            d = nd;
        }
        if (c >= S_BASE && c < S_BASE + S_COUNT) {
            uint32_t si = c - S_BASE;
            d[len++] = L_BASE + si / N_COUNT;
            d[len++] = V_BASE + (si % N_COUNT) / T_COUNT;
            if (si % T_COUNT) d[len++] = T_BASE + si % T_COUNT;
        } else if (c >= 0xC0 && (dp = decomposition(c, &dl)) != NULL) {
            for (size_t k = 0; k < dl; k++) d[len++] = dp[k];
        } else {
            d[len++] = c;
        }
    }
    /* canonical ordering: stable sort of each run of non-starters by combining class */
    for (size_t a = 0; a < len;) {
        if (ccc(d[a]) == 0) {
            a++;
            continue;
        }
        size_t b = a;
        while (b < len && ccc(d[b]) != 0) b++;
        for (size_t x = a + 1; x < b; x++) { /* insertion sort: runs are short */
            uint32_t v = d[x];
            int cv = ccc(v);
            size_t y = x;
            while (y > a && ccc(d[y - 1]) > cv) {
                d[y] = d[y - 1];
                y--;
            }
            d[y] = v;
        }
        a = b;
    }
    /* canonical composition (the reference algorithm of UAX #15) */
    size_t olen = 0;
    if (len) {
        size_t starter = 0;
        uint32_t starter_ch = d[0];
        int last = ccc(starter_ch) ? 256 : 0;
        olen = 1;
        for (size_t k = 1; k < len; k++) {
            uint32_t ch = d[k];
            int cc = ccc(ch);
            uint32_t comp = compose(starter_ch, ch);
            if (comp && (last < cc || last == 0)) {
                d[starter] = starter_ch = comp;
            } else {
                if (cc == 0) {
                    starter = olen;
                    starter_ch = ch;
                }
                last = cc;
                d[olen++] = ch;
            }
        }
    }
    char *o = malloc(olen * 4 + 1);
    if (!o) {
        free(d);
        return -1;
    }
    size_t on = 0;
    for (size_t k = 0; k < olen; k++) on += unicode_utf8_put(o + on, d[k]);
    o[on] = 0;
    free(d);
    if (on == n && memcmp(o, text, n) == 0) {
        free(o);
        return 0;
    }
    *out = o;
    *outn = on;
    return 1;
}
