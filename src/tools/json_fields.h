/* JSON objects the tools write (convert's HF config.json, memory --json) as tables of fields,
 * one row a key, in the order they appear in the file. */
#ifndef MEGADLM_TOOLS_JSON_FIELDS_H
#define MEGADLM_TOOLS_JSON_FIELDS_H

#include <stddef.h>

#include <cjson/cJSON.h>

typedef enum { JSON_FIELD_NUMBER, JSON_FIELD_STRING, JSON_FIELD_BOOL, JSON_FIELD_NULL } json_field_kind;

typedef struct {
    const char *key;
    json_field_kind kind;
    double number; /* NUMBER; BOOL: nonzero is true */
    const char *string;
} json_field;

#define JNUM(k, v) {(k), JSON_FIELD_NUMBER, (double)(v), NULL}
#define JSTR(k, s) {(k), JSON_FIELD_STRING, 0, (s)}
#define JBOOL(k, b) {(k), JSON_FIELD_BOOL, (double)(b), NULL}
#define JNULL(k) {(k), JSON_FIELD_NULL, 0, NULL}

static inline void json_add_fields(cJSON *o, const json_field *f, size_t n) {
    for (size_t i = 0; i < n; i++) {
        switch (f[i].kind) {
        case JSON_FIELD_NUMBER: cJSON_AddNumberToObject(o, f[i].key, f[i].number); break;
        case JSON_FIELD_STRING: cJSON_AddStringToObject(o, f[i].key, f[i].string); break;
        case JSON_FIELD_BOOL: cJSON_AddBoolToObject(o, f[i].key, f[i].number != 0); break;
        case JSON_FIELD_NULL: cJSON_AddNullToObject(o, f[i].key); break;
        }
    }
}

/* json_add_fields over a table written in place: JSON_ADD(o, JNUM("a", x), JSTR("b", s)) */
#define JSON_ADD(o, ...)                                                                          \
    do {                                                                                          \
        const json_field fields_[] = {__VA_ARGS__};                                               \
        json_add_fields((o), fields_, sizeof fields_ / sizeof fields_[0]);                        \
    } while (0)

#endif
