/* tokenizer_check_text: the UTF-8 a tokenizer file may hold (the Unicode standard's table of
 * well-formed byte sequences, Table 3-7: what Python's utf-8 codec and Rust's str accept) and
 * the JSON strings it refuses (a NUL, escaped or raw; a raw control character). Expected
 * results are written from the table, one case per rule. */
#include <string.h>

#include "test_util.h"
#include "training/tokenizer/tokenizer_file.h"

static int ok(const char *s, int json) {
    char err[256];
    return tokenizer_check_text(s, strlen(s), json, err, sizeof err) == 0;
}

/* the message for s contains want */
static int says(const char *s, size_t len, int json, const char *want) {
    char err[256] = "";
    if (tokenizer_check_text(s, len, json, err, sizeof err) == 0) return 0;
    if (strstr(err, want)) return 1;
    fprintf(stderr, "message '%s' lacks '%s'\n", err, want);
    return 0;
}

int main(void) {
    /* well-formed: one of each length, and the edges of each lead byte's second-byte range */
    CHECK(ok("a", 0));
    CHECK(ok("\xC2\x80", 0));          /* U+0080 */
    CHECK(ok("\xDF\xBF", 0));          /* U+07FF */
    CHECK(ok("\xE0\xA0\x80", 0));      /* U+0800 */
    CHECK(ok("\xED\x9F\xBF", 0));      /* U+D7FF, below the surrogates */
    CHECK(ok("\xEE\x80\x80", 0));      /* U+E000, above them */
    CHECK(ok("\xF0\x90\x80\x80", 0));  /* U+10000 */
    CHECK(ok("\xF4\x8F\xBF\xBF", 0));  /* U+10FFFF */
    CHECK(ok("\xC4\x80", 1));          /* U+0100: byte 0 in a byte-level vocabulary */
    /* ill-formed */
    CHECK(!ok("\xC0\x80", 0));         /* overlong NUL */
    CHECK(!ok("\xC1\xBF", 0));         /* overlong */
    CHECK(!ok("\xE0\x9F\xBF", 0));     /* overlong 3-byte */
    CHECK(!ok("\xED\xA0\x80", 0));     /* U+D800, a surrogate */
    CHECK(!ok("\xF0\x8F\xBF\xBF", 0)); /* overlong 4-byte */
    CHECK(!ok("\xF4\x90\x80\x80", 0)); /* above U+10FFFF */
    CHECK(!ok("\xF5\x80\x80\x80", 0));
    CHECK(!ok("\x80", 0));             /* a lone continuation byte */
    CHECK(!ok("\xE2\x82", 0));         /* cut short at the end */
    CHECK(!ok("\xE2\x82z", 0));        /* cut short by an ASCII byte */
    CHECK(!ok("\xFF", 0));
    /* the position: byte 5 is on line 2, column 2 */
    CHECK(says("ab\nc\xFF", 5, 0, "byte 4 (line 2, column 2)"));
    CHECK(says("{\"k\":\n \"\xFE\"}", 11, 1, "byte 8 (line 2, column 3)"));
    /* JSON strings */
    CHECK(ok("{\"a\\\\u0000\": 1}", 1)); /* an escaped backslash, then the text u0000 */
    CHECK(ok("{\"\\u0001\": 1}", 1));    /* other escapes are the parser's */
    CHECK(ok("{\"a\": \"\\\"\\u0000\"}", 0)); /* not JSON: not looked at */
    CHECK(says("{\"!\\u0000x\": 256}", 17, 1, "the string \"!\\u0000x\" holds a NUL character"));
    /* the position is the escape's backslash */
    CHECK(says("{\"!\\u0000x\": 256}", 17, 1, "byte 3 (line 1, column 4)"));
    CHECK(says("{\"a\": \"\\\"\\u0000\"}", 16, 1, "holds a NUL character"));
    CHECK(says("{\"a\x00\": 1}", 9, 1, "holds a raw NUL byte"));
    CHECK(says("{\"a\tb\": 1}", 10, 1, "holds a raw control character"));
    CHECK(ok("{\"a\": 1}\t\n", 1)); /* whitespace outside strings */
    TEST_DONE();
}
