/* Reading a tokenizer file whole, with the checks of tokenizer_file.h. */
#include "training/tokenizer/tokenizer_file.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util/error.h"

/* The length of the valid UTF-8 sequence at p (n bytes left), or 0 when it is not one: the
 * Unicode table of well-formed sequences (no overlong forms, no surrogates, nothing above
 * U+10FFFF), as Rust's str and Python's utf-8 codec check. */
static size_t utf8_sequence(const unsigned char *p, size_t n) {
    unsigned c = p[0];
    if (c < 0x80) return 1;
    size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (len == 0 || len > n) return 0;
    unsigned lo = 0x80, hi = 0xBF; /* the second byte's range */
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
    if (p[1] < lo || p[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if (p[i] < 0x80 || p[i] > 0xBF) return 0;
    return len;
}

/* "byte N (line L, column C)" of offset at, counted from 1 (columns in bytes) */
static void where(const char *text, size_t at, char *out, size_t n) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at; i++) {
        if (text[i] == '\n') line++, col = 1;
        else col++;
    }
    snprintf(out, n, "byte %zu (line %zu, column %zu)", at, line, col);
}

/* The JSON string literal starting at text[start] (its opening quote) as written, at most 40
 * bytes of it, cut at a character boundary (the text is valid UTF-8 by then) */
static void literal(const char *text, size_t len, size_t start, char *out, size_t n) {
    size_t end = start + 1, cap = start + 40;
    while (end < len && end < cap && text[end] != '"') end += text[end] == '\\' ? 2 : 1;
    if (end > len) end = len;
    while (end > start + 1 && end < len && ((unsigned char)text[end] & 0xC0) == 0x80) end--;
    int closed = end < len && text[end] == '"';
    snprintf(out, n, "%.*s%s", (int)(end - start + (closed ? 1 : 0)), text + start,
             closed ? "" : "...");
}

static int check_utf8(const char *text, size_t len, char *err, size_t errlen) {
    const unsigned char *p = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        size_t k = utf8_sequence(p + i, len - i);
        if (k == 0) {
            char w[96];
            where(text, i, w, sizeof w);
            err_set(err, errlen, "%s: not valid UTF-8 (byte 0x%02X; Hugging Face's tokenizers "
                    "and Python's json refuse the file too)", w, p[i]);
            return -1;
        }
        i += k;
    }
    return 0;
}

/* The strings of JSON text: a NUL (escaped or raw) or another raw control character in one is
 * refused. Only the strings are looked at; the JSON parser checks the rest. */
static int check_json_strings(const char *text, size_t len, char *err, size_t errlen) {
    size_t start = 0;
    int in_string = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (!in_string) {
            if (c == '"') in_string = 1, start = i;
            continue;
        }
        const char *why = NULL;
        size_t at = i;
        if (c == '"') {
            in_string = 0;
        } else if (c == '\\') {
            if (i + 5 < len && !strncmp(text + i + 1, "u0000", 5))
                why = "holds a NUL character (\\u0000), which megadlm's tokenizer files do not "
                      "support";
            i++; /* the escaped character (\u's hex digits are plain characters) */
        } else if (c < 0x20) {
            why = c == 0 ? "holds a raw NUL byte (not valid JSON)"
                         : "holds a raw control character (not valid JSON: it must be escaped)";
        }
        if (why) {
            char w[96], s[64];
            where(text, at, w, sizeof w);
            literal(text, len, start, s, sizeof s);
            err_set(err, errlen, "%s: the string %s %s", w, s, why);
            return -1;
        }
    }
    return 0;
}

int tokenizer_check_text(const char *text, size_t len, int json, char *err, size_t errlen) {
    if (check_utf8(text, len, err, errlen)) return -1;
    return json ? check_json_strings(text, len, err, errlen) : 0;
}

static const char *file_kind(mode_t m) {
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device"
           : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

/* Opens path without blocking (a FIFO's open waits for a writer) and checks that it is a
 * regular file within the bound: the descriptor, or -1 with the reason in err. */
static int open_regular(const char *flag, const char *path, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        err_set(err, errlen, "%s %s: %s%s", flag, path, strerror(errno),
                errno == ELOOP ? " (a symbolic link loop)" : "");
        return -1;
    }
    struct stat st;
    const char *why = NULL;
    if (fstat(fd, &st) != 0) why = strerror(errno);
    else if (!S_ISREG(st.st_mode)) why = file_kind(st.st_mode);
    if (why) {
        err_set(err, errlen, "%s %s: %s: expected a regular file", flag, path, why);
        close(fd);
        return -1;
    }
    if ((uint64_t)st.st_size > TOKENIZER_FILE_MAX_BYTES) {
        err_set(err, errlen, "%s %s: %lld bytes, above the %zu MiB a tokenizer file may hold",
                flag, path, (long long)st.st_size, TOKENIZER_FILE_MAX_BYTES >> 20);
        close(fd);
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

char *tokenizer_read_file(const char *flag, const char *path, int json, size_t *len, char *err,
                          size_t errlen) {
    int fd = open_regular(flag, path, err, errlen);
    if (fd < 0) return NULL;
    /* read up to one byte past the bound: a file that grew after fstat is refused too */
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    int rd_errno = 0;
    while (buf) {
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            rd_errno = r < 0 ? errno : 0;
            break;
        }
        n += (size_t)r;
        if (n > TOKENIZER_FILE_MAX_BYTES) break;
        if (n == cap) {
            char *nb = realloc(buf, 2 * cap + 1);
            if (!nb) free(buf);
            buf = nb, cap *= 2;
        }
    }
    close(fd);
    if (!buf || rd_errno || n > TOKENIZER_FILE_MAX_BYTES) {
        if (!buf) err_set(err, errlen, "%s %s: out of memory", flag, path);
        else if (rd_errno) err_set(err, errlen, "%s %s: cannot read: %s", flag, path, strerror(rd_errno));
        else err_set(err, errlen, "%s %s: grew past the %zu MiB a tokenizer file may hold",
                     flag, path, TOKENIZER_FILE_MAX_BYTES >> 20);
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    char why[512];
    if (tokenizer_check_text(buf, n, json, why, sizeof why)) {
        err_set(err, errlen, "%s %s: %s", flag, path, why);
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

int tokenizer_model_fail(char *err, size_t errlen, const char *model, const char *file,
                         const char *field, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    err_set(err, errlen, "--tokenizer-model %s%s%s: %s%s%s", model, file ? "/" : "",
            file ? file : "", field ? field : "", field ? ": " : "", msg);
    return -1;
}
