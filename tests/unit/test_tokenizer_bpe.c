/* The byte-level BPE tokenizers on small hand-made files with hand-checked ids:
 * GPT2BPETokenizer (vocab.json + merges.txt), HuggingFaceTokenizer (a tokenizer.json with a
 * Qwen2-style Split pattern, NFC and added tokens; a vocabulary without the bytes UTF-8 never
 * holds; a tokenizer directory), NFC itself, invalid UTF-8, the flags' validation (padded
 * vocabulary, absolute paths) and the refusals. The comparisons against real GPT-2 files are
 * the script tests test_gpt2_tokenizer.sh and test_hf_tokenizer.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"
#include "training/arguments.h"
#include "training/tokenizer/tokenizer.h"
#include "training/tokenizer/unicode_nfc.h"

static char dir[200];
static char err[1024];

/* GPT-2's bytes_to_unicode as UTF-8 */
static void byte_char(int b, char *out) {
    int n = 0, cp = -1;
    for (int x = 0; x < 256; x++) {
        int printable = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE;
        int c = printable ? x : 256 + n++;
        if (x == b) cp = c;
    }
    if (cp < 0x80) {
        out[0] = (char)cp, out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 63)), out[2] = 0;
    }
}

/* JSON string body of a byte char ('"' and '\\' escaped) */
static void json_char(int b, char *out) {
    char c[4];
    byte_char(b, c);
    if (!strcmp(c, "\"")) strcpy(out, "\\\"");
    else if (!strcmp(c, "\\")) strcpy(out, "\\\\");
    else strcpy(out, c);
}

/* merges (rank order) and the ids of their results */
static const char *const MERGES[][2] = {{"l", "l"},    {"h", "e"}, {"he", "ll"}, {"hell", "o"},
                                        {"\xc4\xa0", "w"}, {"a", "a"}, {"$", "he"}};
static const char *const MERGED[] = {"ll", "he", "hell", "hello", "\xc4\xa0w", "aa", "$he"};
enum { N_MERGES = 7, EOD_ID = 263 }; /* ids: byte b -> b, merge k -> 256 + k, eod 263 */

static void path(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

static void write_file(const char *name, const char *text) {
    char p[512];
    path(p, sizeof p, name);
    FILE *f = fopen(p, "wb");
    fputs(text, f);
    fclose(f);
}

/* vocab object body: "c": id, ... (bytes, merges, then extra) */
static char *vocab_body(void) {
    char *s = malloc(1 << 16);
    size_t o = 0;
    for (int b = 0; b < 256; b++) {
        char c[8];
        json_char(b, c);
        o += (size_t)sprintf(s + o, "%s\"%s\": %d", b ? ", " : "", c, b);
    }
    for (int k = 0; k < N_MERGES; k++) o += (size_t)sprintf(s + o, ", \"%s\": %d", MERGED[k], 256 + k);
    return s;
}

static void write_gpt2_files(void) {
    char *v = vocab_body();
    char *full = malloc(strlen(v) + 100);
    sprintf(full, "{%s, \"<|endoftext|>\": %d}", v, EOD_ID);
    write_file("vocab.json", full);
    sprintf(full, "{%s}", v);
    write_file("vocab_noeod.json", full);
    free(full);
    free(v);
    char m[1024] = "#version: 0.2\n";
    for (int k = 0; k < N_MERGES; k++)
        sprintf(m + strlen(m), "%s %s\n", MERGES[k][0], MERGES[k][1]);
    write_file("merges.txt", m);
    write_file("merges_bad.txt", "#version: 0.2\nl l\nh e x\n");
    write_file("merges_oov.txt", "#version: 0.2\nl l\nxyz w\n");
    write_file("merges_nomerged.txt", "#version: 0.2\nl l\nq z\n");
}

static int encode_eq(const tokenizer *t, const char *text, size_t len, const int *want, size_t nw) {
    int32_t *ids;
    size_t n;
    if (tokenizer_encode(t, text, len, &ids, &n, err, sizeof err) != 0) return 0;
    int ok = n == nw;
    for (size_t i = 0; ok && i < n; i++) ok = ids[i] == want[i];
    if (!ok) {
        fprintf(stderr, "  '%.*s' ->", (int)len, text);
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "  (expected");
        for (size_t i = 0; i < nw; i++) fprintf(stderr, " %d", want[i]);
        fprintf(stderr, ")\n");
    }
    free(ids);
    return ok;
}
#define ENC(t, s, ...)                                                                    \
    do {                                                                                  \
        static const int w_[] = {__VA_ARGS__};                                            \
        CHECK(encode_eq(t, s, strlen(s), w_, sizeof w_ / sizeof w_[0]));                  \
    } while (0)

static int roundtrip(const tokenizer *t, const char *text, size_t len) {
    int32_t *ids;
    size_t n, dl;
    if (tokenizer_encode(t, text, len, &ids, &n, err, sizeof err) != 0) return 0;
    char *back = tokenizer_decode_len(t, ids, n, &dl);
    int ok = back && dl == len && memcmp(back, text, len) == 0;
    free(back);
    free(ids);
    return ok;
}

static void test_gpt2(void) {
    char v[512], m[512];
    path(v, sizeof v, "vocab.json");
    path(m, sizeof m, "merges.txt");
    tokenizer_options o = {.type = "GPT2BPETokenizer", .vocab_file = v, .merge_file = m};
    tokenizer *t = tokenizer_create_opts(&o, err, sizeof err);
    CHECK(t != NULL);
    if (!t) {
        fprintf(stderr, "  %s\n", err);
        return;
    }
    CHECK(strcmp(tokenizer_type(t), "GPT2BPETokenizer") == 0);
    CHECK(tokenizer_vocab_size(t) == EOD_ID + 1 && tokenizer_eod(t) == EOD_ID);
    ENC(t, "hello", 259);                 /* l l, h e, he ll, hell o */
    ENC(t, "hellx", 258, 'x');            /* hell + x */
    ENC(t, "hello hello", 259, 32, 259);  /* " hello": Ġ is byte 0x20 = id 32 */
    ENC(t, " world", 260, 'o', 'r', 'l', 'd');
    ENC(t, "aaa", 261, 'a');              /* left to right, as encoder.py */
    ENC(t, "aaaa", 261, 261);
    ENC(t, "aaaaa", 261, 261, 'a');
    ENC(t, "$he", '$', 257);              /* GPT-2's regex: "$" and "he" are two pieces */
    ENC(t, "it's", 'i', 't', '\'', 's');  /* pieces "it", "'s" (no merges) */
    ENC(t, "a  b", 'a', 32, 32, 'b');     /* "a", " ", " b" */
    ENC(t, "<|endoftext|>", '<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't', '|', '>');
    /* invalid UTF-8: each bad byte is a piece of its own; lossless */
    ENC(t, "a\xff" "b", 'a', 0xff, 'b');
    static const char bad[] = "he\xc3" "llo\xed\xa0\x80 \xf4\x90\x80\x80!";
    CHECK(roundtrip(t, bad, sizeof bad - 1));
    CHECK(roundtrip(t, "hello wor\0ld", 12));
    CHECK(roundtrip(t, "", 0));
    /* decode drops eod and ids outside the vocabulary */
    int32_t ids[] = {259, EOD_ID, 5000, 32, 259};
    char *s = tokenizer_decode(t, ids, 5);
    CHECK(s && strcmp(s, "hello hello") == 0);
    free(s);
    tokenizer_free(t);

    /* refusals */
    char p2[512];
    o.merge_file = NULL;
    CHECK(!tokenizer_create_opts(&o, err, sizeof err) && strstr(err, "needs --vocab-file"));
    path(p2, sizeof p2, "merges_bad.txt");
    o.merge_file = p2;
    CHECK(!tokenizer_create_opts(&o, err, sizeof err) && strstr(err, "merges_bad.txt:3") &&
          strstr(err, "expected two tokens"));
    path(p2, sizeof p2, "merges_oov.txt");
    CHECK(!tokenizer_create_opts(&o, err, sizeof err) && strstr(err, "merges_oov.txt:3") &&
          strstr(err, "token 'xyz' is not in the vocabulary"));
    path(p2, sizeof p2, "merges_nomerged.txt");
    CHECK(!tokenizer_create_opts(&o, err, sizeof err) && strstr(err, "merges_nomerged.txt:3") &&
          strstr(err, "the merge 'q' + 'z' is not in the vocabulary"));
    o.merge_file = m;
    path(p2, sizeof p2, "vocab_noeod.json");
    o.vocab_file = p2;
    CHECK(!tokenizer_create_opts(&o, err, sizeof err) && strstr(err, "no '<|endoftext|>'"));
    path(p2, sizeof p2, "missing.json");
    CHECK(!tokenizer_create_opts(&o, err, sizeof err) && strstr(err, "--vocab-file") &&
          strstr(err, "No such file"));
}

static const char *QWEN2_PATTERN =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| "
    "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+";

static void write_hf(const char *name, const char *normalizer, const char *pre,
                     const char *added) {
    char *v = vocab_body();
    size_t cap = strlen(v) + 4096;
    char *j = malloc(cap), merges[1024] = "";
    for (int k = 0; k < N_MERGES; k++)
        sprintf(merges + strlen(merges), "%s[\"%s\", \"%s\"]", k ? ", " : "", MERGES[k][0],
                MERGES[k][1]);
    snprintf(j, cap,
             "{\"version\": \"1.0\", \"added_tokens\": [%s], \"normalizer\": %s, "
             "\"pre_tokenizer\": %s, \"post_processor\": null, \"decoder\": {\"type\": "
             "\"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"dropout\": null, \"vocab\": {%s}, "
             "\"merges\": [%s]}}",
             added, normalizer, pre, v, merges);
    write_file(name, j);
    free(j);
    free(v);
}

static void test_hf(void) {
    char pre[1024];
    snprintf(pre, sizeof pre,
             "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
             "{\"Regex\": \"%s\"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": "
             "\"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}",
             QWEN2_PATTERN);
    write_hf("qwen.json", "{\"type\": \"NFC\"}", pre,
             "{\"id\": 300, \"content\": \"<|im_end|>\", \"special\": true}, "
             "{\"id\": 301, \"content\": \"<|endoftext|>\", \"special\": true}, "
             "{\"id\": 302, \"content\": \"<sep>\", \"special\": false, \"lstrip\": true, "
             "\"rstrip\": true}, "
             "{\"id\": 303, \"content\": \"<sep>>\", \"special\": false}");
    char p[512];
    path(p, sizeof p, "qwen.json");
    tokenizer_options o = {.type = "HuggingFaceTokenizer", .tokenizer_model = p};
    tokenizer *t = tokenizer_create_opts(&o, err, sizeof err);
    CHECK(t != NULL);
    if (!t) {
        fprintf(stderr, "  %s\n", err);
        return;
    }
    /* The file names ids 300..303; Hugging Face's AddedVocabulary gives new added tokens the ids
     * after the 263 vocabulary entries in file order, whatever the file says: 263..266. */
    CHECK(tokenizer_vocab_size(t) == 267 && tokenizer_eod(t) == 264);
    ENC(t, "$he", 262);                       /* Qwen2: "$he" is one piece -> the merge */
    ENC(t, "hello hello", 259, 32, 259);
    ENC(t, "IT'S", 'I', 'T', '\'', 'S');      /* (?i:'s): "IT", "'S" */
    ENC(t, "a12", 'a', '1', '2');             /* digits one by one */
    ENC(t, "he\r\n\r\nhe", 257, '\r', '\n', '\r', '\n', 257);
    ENC(t, "hello<|im_end|>aa", 259, 263, 261);
    ENC(t, "aa  <sep>  aa", 261, 265, 261);   /* lstrip and rstrip take the spaces */
    ENC(t, "aa<sep>>aa", 261, 266, 261);      /* longest added token first */
    ENC(t, "<|endoftext|><|endoftext|>", 264, 264);
    ENC(t, "he\xcc\x81", 'h', 0xc3, 0xa9);    /* NFC: e + U+0301 -> U+00E9 (C3 A9) */
    tokenizer_free(t);

    /* GPT-2 style ByteLevel with add_prefix_space: every piece between added tokens gets one */
    write_hf("prefix.json", "null",
             "{\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"use_regex\": true}",
             "{\"id\": 263, \"content\": \"<|endoftext|>\", \"special\": true}");
    path(p, sizeof p, "prefix.json");
    t = tokenizer_create_opts(&o, err, sizeof err);
    CHECK(t != NULL);
    if (t) {
        ENC(t, "hello", 32, 259);
        ENC(t, "hello<|endoftext|>hello", 32, 259, 263, 32, 259);
        ENC(t, " w", 260);
        tokenizer_free(t);
    }

    /* Split with a literal pattern ({"String": ...}): matches and gaps are pieces */
    write_hf("literal.json", "null",
             "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
             "{\"String\": \"l.\"}, \"behavior\": \"Isolated\", \"invert\": false}, "
             "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}",
             "{\"id\": 263, \"content\": \"<|endoftext|>\", \"special\": true}");
    path(p, sizeof p, "literal.json");
    t = tokenizer_create_opts(&o, err, sizeof err);
    CHECK(t != NULL);
    if (t) {
        ENC(t, "hell.o", 257, 'l', 'l', '.', 'o'); /* "hel", "l.", "o": no "ll" across */
        ENC(t, "hello", 259);                     /* "." is literal: no match */
        tokenizer_free(t);
    }

    /* refusals name the file and the field */
    write_hf("nfkc.json", "{\"type\": \"NFKC\"}", pre, "");
    path(p, sizeof p, "nfkc.json");
    CHECK(!tokenizer_create_opts(&o, err, sizeof err) && strstr(err, "nfkc.json: normalizer") &&
          strstr(err, "'NFKC' is not supported"));
    write_hf("noeod.json", "null", pre, "");
    path(p, sizeof p, "noeod.json");
    CHECK(!tokenizer_create_opts(&o, err, sizeof err) && strstr(err, "no end-of-document"));
    write_hf("nobytelevel.json", "null",
             "{\"type\": \"Split\", \"pattern\": {\"String\": \" \"}, \"behavior\": "
             "\"Isolated\", \"invert\": false}",
             "");
    path(p, sizeof p, "nobytelevel.json");
    CHECK(!tokenizer_create_opts(&o, err, sizeof err) && strstr(err, "no ByteLevel step"));
    write_hf("badre.json", "null",
             "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
             "{\"Regex\": \"(unclosed\"}, \"behavior\": \"Isolated\", \"invert\": false}, "
             "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}",
             "");
    path(p, sizeof p, "badre.json");
    CHECK(!tokenizer_create_opts(&o, err, sizeof err) &&
          strstr(err, "pre_tokenizer.pretokenizers[0]") && strstr(err, "regex '(unclosed'"));
    write_hf("behavior.json", "null",
             "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
             "{\"Regex\": \"a\"}, \"behavior\": \"Removed\", \"invert\": false}, "
             "{\"type\": \"ByteLevel\"}]}",
             "");
    path(p, sizeof p, "behavior.json");
    CHECK(!tokenizer_create_opts(&o, err, sizeof err) && strstr(err, "'Removed'"));
    write_file("notjson.json", "{\"model\": ");
    path(p, sizeof p, "notjson.json");
    CHECK(!tokenizer_create_opts(&o, err, sizeof err) &&
          strstr(err, "notjson.json: not valid JSON (parsing stopped at byte "));
}

static int nfc_is(const char *in, const char *want) {
    char *out;
    size_t n;
    int r = unicode_nfc(in, strlen(in), &out, &n);
    if (r == 0) return strcmp(in, want) == 0;
    int ok = r == 1 && n == strlen(want) && memcmp(out, want, n) == 0;
    if (!ok) fprintf(stderr, "  NFC('%s') = '%.*s', expected '%s'\n", in, (int)n, out, want);
    free(out);
    return ok;
}

/* A byte-level vocabulary without the 13 bytes UTF-8 never holds (GPT-NeoX's), ids given in
 * byte order without holes: byte b (< 0xF5) has id LID(b); skip: one more byte left out. */
#define LID(b) ((b) - ((b) > 0xC1 ? 2 : 0))
static void write_lossy(const char *name, int skip, const char *added) {
    char *j = malloc(1 << 16), c[8];
    size_t o = (size_t)sprintf(j, "{\"added_tokens\": [%s], \"pre_tokenizer\": {\"type\": "
                                  "\"ByteLevel\", \"add_prefix_space\": false}, \"model\": {\"type\": \"BPE\", \"vocab\": {",
                               added);
    for (int b = 0, id = 0; b < 0xF5; b++) {
        if (b == 0xC0 || b == 0xC1 || b == skip) continue;
        json_char(b, c);
        o += (size_t)sprintf(j + o, "%s\"%s\": %d", id ? ", " : "", c, id);
        id++;
    }
    sprintf(j + o, "}, \"merges\": []}}");
    write_file(name, j);
    free(j);
}

/* Missing byte tokens: text that is not UTF-8 is first decoded with U+FFFD (EF BF BD) per
 * maximal ill-formed subsequence (Unicode 3.9), as Hugging Face would be handed it. A
 * directory: eod is eos_token (special_tokens_map.json over tokenizer_config.json), special
 * tokens missing from the files become added tokens at the next ids. */
static void test_hf_lossy_dir(void) {
    char p[512];
    write_lossy("lossy.json", -1, "{\"id\": 243, \"content\": \"<|endoftext|>\", \"special\": true}");
    path(p, sizeof p, "lossy.json");
    tokenizer_options o = {.type = "HuggingFaceTokenizer", .tokenizer_model = p};
    tokenizer *t = tokenizer_create_opts(&o, err, sizeof err);
    CHECK(t != NULL);
    if (!t) {
        fprintf(stderr, "  %s\n", err);
        return;
    }
#define FFFD LID(0xEF), LID(0xBF), LID(0xBD)
    ENC(t, "a\xff" "b", 'a', FFFD, 'b');
    ENC(t, "\xc0\x80", FFFD, FFFD);           /* C0 never starts a sequence: two */
    ENC(t, "x\xe2\x82", 'x', FFFD);             /* truncated: one */
    ENC(t, "\xf0\x9f\x98!", FFFD, '!');         /* one piece with the '!' */
    ENC(t, "\xed\xa0\x80", FFFD, FFFD, FFFD);    /* a surrogate: ED, A0, 80 */
    ENC(t, "\xf4\x90\x80\x80", FFFD, FFFD, FFFD, FFFD); /* above U+10FFFF */
    ENC(t, "\xc3\xa9", LID(0xC3), LID(0xA9));   /* valid text is untouched */
    tokenizer_free(t);
    write_lossy("nobyteA.json", 'A', "");
    path(p, sizeof p, "nobyteA.json");
    CHECK(!tokenizer_create_opts(&o, err, sizeof err) && strstr(err, "no token for byte 0x41"));

    char d[512];
    path(d, sizeof d, "tokdir");
    CHECK(mkdir(d, 0755) == 0);
    write_lossy("tokdir/tokenizer.json", -1,
                "{\"id\": 243, \"content\": \"<m>\", \"special\": true}");
    write_file("tokdir/tokenizer_config.json",
               "{\"eos_token\": \"<e>\", \"bos_token\": {\"content\": \"<b>\"}, "
               "\"pad_token\": \"a\", \"mask_token\": \"<m>\", \"add_bos_token\": false}");
    write_file("tokdir/special_tokens_map.json", "{\"eos_token\": \"<E>\"}");
    o.tokenizer_model = d;
    t = tokenizer_create_opts(&o, err, sizeof err);
    CHECK(t != NULL);
    if (!t) {
        fprintf(stderr, "  %s\n", err);
        return;
    }
    /* 243 vocabulary entries; <m> 243; then bos <b> 244, eos <E> 245 in transformers' order */
    CHECK(tokenizer_eod(t) == 245 && tokenizer_bos(t) == 244 && tokenizer_pad(t) == 'a' &&
          tokenizer_mask(t) == 243 && tokenizer_vocab_size(t) == 246);
    ENC(t, "x<E><b><e>", 'x', 245, 244, '<', 'e', '>');
    tokenizer_free(t);
    write_file("tokdir/special_tokens_map.json", "{\"eos_token\": null}");
    write_file("tokdir/tokenizer_config.json", "{\"bos_token\": \"<b>\"}");
    CHECK(!tokenizer_create_opts(&o, err, sizeof err) && strstr(err, "no eos_token"));
}

static void test_nfc(void) {
    CHECK(nfc_is("plain ascii", "plain ascii"));
    CHECK(nfc_is("e\xcc\x81", "\xc3\xa9"));                     /* e + acute -> é */
    CHECK(nfc_is("\xc3\xa9", "\xc3\xa9"));                      /* already NFC */
    CHECK(nfc_is("a\xcc\xa3\xcc\x82", "\xe1\xba\xad"));         /* a + dot below + circumflex */
    CHECK(nfc_is("a\xcc\x82\xcc\xa3", "\xe1\xba\xad"));         /* reordered first: ậ */
    CHECK(nfc_is("\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8", "\xea\xb0\x81")); /* jamo -> 각 */
    CHECK(nfc_is("\xea\xb0\x80\xe1\x86\xa8", "\xea\xb0\x81"));  /* LV + T -> LVT */
    CHECK(nfc_is("\xe2\x84\xab", "\xc3\x85"));                  /* Angstrom sign -> Å */
    CHECK(nfc_is("\xe0\xa5\x98", "\xe0\xa4\x95\xe0\xa4\xbc"));  /* excluded: क़ stays apart */
    CHECK(nfc_is("\xcc\x81" "e", "\xcc\x81" "e"));              /* leading mark: nothing */
    CHECK(nfc_is("\xe3\x81\x8b\xe3\x82\x99", "\xe3\x81\x8c"));  /* か + voicing -> が */
}

static void test_args(void) {
    char line[2048], v[512], m[512];
    path(v, sizeof v, "vocab.json");
    path(m, sizeof m, "merges.txt");
    /* relative paths become absolute */
    if (chdir(dir) != 0) CHECK(0);
    snprintf(line, sizeof line,
             "train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
             "--max-position-embeddings 64 --micro-batch-size 2 --train-iters 10 --lr 1e-3 "
             "--data-path P --tokenizer-type GPT2BPETokenizer --vocab-file vocab.json "
             "--merge-file ./merges.txt");
    char *argv[64];
    int argc = 0;
    for (char *tok = strtok(line, " "); tok && argc < 64; tok = strtok(NULL, " ")) argv[argc++] = tok;
    megadlm_args a;
    args_defaults(&a);
    CHECK(args_parse(&a, argc, argv, err, sizeof err) == 0);
    int rc = args_validate(&a, err, sizeof err);
    CHECK(rc == 0);
    if (rc) fprintf(stderr, "  %s\n", err);
    CHECK(a.padded_vocab_size == 384); /* 264 ids -> next multiple of 128 */
    CHECK(strcmp(a.vocab_file, v) == 0 || (a.vocab_file[0] == '/' && strstr(a.vocab_file, "/vocab.json")));
    CHECK(a.merge_file[0] == '/');
    cJSON *j = args_to_json(&a);
    const cJSON *vf = cJSON_GetObjectItemCaseSensitive(j, "vocab_file");
    CHECK(cJSON_IsString(vf) && strcmp(vf->valuestring, a.vocab_file) == 0);
    megadlm_args b;
    args_defaults(&b);
    CHECK(args_from_json(&b, j, err, sizeof err) == 0 && args_validate(&b, err, sizeof err) == 0 &&
          b.padded_vocab_size == 384 && strcmp(b.merge_file, a.merge_file) == 0);
    cJSON_Delete(j);
    args_free(&a);
    args_free(&b);
    if (chdir("/") != 0) CHECK(0);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/megadlm_test_tokenizer_bpe_%d", (int)getpid());
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    if (system(cmd) != 0) return 1;
    write_gpt2_files();
    test_gpt2();
    test_hf();
    test_hf_lossy_dir();
    test_nfc();
    test_args();
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    TEST_DONE();
}
