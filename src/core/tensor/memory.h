/* Tracked allocator: the one owner of every large buffer.
 *
 * Each allocation carries a category; current and peak bytes are kept per category so that
 * `--log-memory` and the tests can state exactly what a run holds (parameters, gradients,
 * optimizer state, saved activations, workspace, other). Buffers are 64-byte aligned and
 * zero-filled. Allocation failure prints the request and the category and ends every rank
 * (die(), core/util/die.h): a training run has no way to continue without its buffers.
 *
 * The model allocates everything once, up front, so the training step never allocates (but
 * for an MoE layer's routing-dependent tensors: core/transformer/moe/moe_layer.h):
 * mem_alloc_count() lets a test check that.
 */
#ifndef MEGADLM_CORE_TENSOR_MEMORY_H
#define MEGADLM_CORE_TENSOR_MEMORY_H

#include <stddef.h>
#include <stdio.h>

typedef enum {
    MEM_PARAMS = 0,
    MEM_GRADS,
    MEM_OPTIMIZER,
    MEM_ACTIVATIONS, /* saved for backward */
    MEM_WORKSPACE,   /* transient: reused across layers, not saved for backward */
    MEM_OTHER,       /* data, logits, RoPE tables, ... */
    MEM_NUM_CATEGORIES
} mem_category;

void *mem_alloc(mem_category cat, size_t bytes, const char *what);
/* Like mem_alloc for `count` floats. */
float *mem_alloc_floats(mem_category cat, size_t count, const char *what);
void mem_free(void *p); /* NULL is fine */
/* mem_free of every block given (NULL ones too). */
#define mem_free_all(...)                                                                      \
    mem_free_list((void *[]){__VA_ARGS__}, sizeof((void *[]){__VA_ARGS__}) / sizeof(void *))
void mem_free_list(void *const *p, size_t n);
size_t mem_block_bytes(const void *p); /* the bytes mem_alloc gave block p (NULL: 0) */

size_t mem_current(mem_category cat);
size_t mem_peak(mem_category cat);
/* The peak of one phase (e.g. a checkpoint save): mem_phase_start sets every category's phase
 * peak to its current bytes; mem_phase_peak is the highest current value since. */
void mem_phase_start(void);
size_t mem_phase_peak(mem_category cat);
size_t mem_total_current(void);
size_t mem_total_peak(void);
unsigned long mem_alloc_count(void); /* number of mem_alloc calls so far */
unsigned long mem_live_count(void);  /* blocks allocated and not yet freed */
const char *mem_category_name(mem_category cat);

/* Prints one line per category (current and peak bytes) and the process's peak RSS. */
void mem_report(FILE *out, int rank);
/* Peak resident set size of this process in bytes (from getrusage). */
size_t mem_peak_rss(void);

#endif
