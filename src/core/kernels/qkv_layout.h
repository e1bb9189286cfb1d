/* Megatron's grouped packed-QKV layout: the output of the fused linear_qkv, one row per token.
 * A row holds NG query groups; group g is NH/NG query heads, then the group's key head, then
 * its value head, each HS floats (kv_channels) wide:
 *
 *   row width              NG * (NH/NG + 2) * HS
 *   slot s of group g      offset (g * (NH/NG + 2) + s) * HS;  s < NH/NG: query heads,
 *                          s = NH/NG: the key head, s = NH/NG + 1: the value head
 *   query head h           group h / (NH/NG), slot h % (NH/NG)
 *
 * A tensor-parallel rank holds whole query groups (a contiguous run of rows of linear_qkv), so
 * its share has the same layout with its local NH and NG. This header is the one place that
 * spells the layout out: the kernels (attention, q/k norm, RoPE), the config's widths and the
 * Hugging Face converter all take offsets from it, so they cannot disagree. Offsets are in
 * floats within a row, in size_t (a row may be wider than int arithmetic on HS allows). */
#ifndef MEGADLM_CORE_KERNELS_QKV_LAYOUT_H
#define MEGADLM_CORE_KERNELS_QKV_LAYOUT_H

#include <stddef.h>

typedef struct {
    int NH; /* query heads */
    int NG; /* query groups = key/value heads; divides NH */
    int HS; /* channels per head (kv_channels) */
} qkv_layout;

/* Query heads per group (NH/NG). */
static inline int qkv_heads_per_group(qkv_layout l) { return l.NH / l.NG; }

static inline size_t qkv_row_width(qkv_layout l) {
    return (size_t)l.NG * (size_t)(qkv_heads_per_group(l) + 2) * (size_t)l.HS;
}

static inline size_t qkv_slot_offset(qkv_layout l, int g, int slot) {
    return ((size_t)g * (size_t)(qkv_heads_per_group(l) + 2) + (size_t)slot) * (size_t)l.HS;
}

/* Query head h (0 .. NH-1). */
static inline size_t qkv_query_offset(qkv_layout l, int h) {
    const int q = qkv_heads_per_group(l);
    return qkv_slot_offset(l, h / q, h % q);
}

/* The key and value heads of group g (0 .. NG-1). */
static inline size_t qkv_key_offset(qkv_layout l, int g) {
    return qkv_slot_offset(l, g, qkv_heads_per_group(l));
}
static inline size_t qkv_value_offset(qkv_layout l, int g) {
    return qkv_slot_offset(l, g, qkv_heads_per_group(l) + 1);
}

/* A packed QKV buffer of B sequences of T tokens: [B, T, qkv_row_width(layout)]. */
typedef struct {
    int B, T;
    qkv_layout layout;
} qkv_batch;

#endif
