#include "core/tensor/memory.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core/util/die.h"

/* Each block starts with a header recording its size and category, so mem_free can update
 * the counters without a lookup table. The header is padded to the alignment. */
#define MEM_ALIGN 64
typedef struct {
    size_t bytes;
    int cat;
} mem_header;

static size_t g_current[MEM_NUM_CATEGORIES];
static size_t g_peak[MEM_NUM_CATEGORIES];
static size_t g_phase_peak[MEM_NUM_CATEGORIES]; /* since mem_phase_start */
static size_t g_total_current, g_total_peak;
static unsigned long g_count, g_live;

static const char *g_names[MEM_NUM_CATEGORIES] = {
    "parameters", "gradients", "optimizer state", "saved activations", "workspace", "other"};

const char *mem_category_name(mem_category cat) { return g_names[cat]; }

void *mem_alloc(mem_category cat, size_t bytes, const char *what) {
    void *block = NULL;
    /* a failure ends every rank (a rank left alone would wait in its next collective) */
    if (bytes > SIZE_MAX - MEM_ALIGN || posix_memalign(&block, MEM_ALIGN, MEM_ALIGN + bytes) != 0 ||
        block == NULL)
        die(1, "out of memory allocating %zu bytes of %s for %s", bytes, g_names[cat],
                       what ? what : "?");
    memset(block, 0, MEM_ALIGN + bytes);
    mem_header *h = (mem_header *)block;
    h->bytes = bytes;
    h->cat = cat;
    g_current[cat] += bytes;
    if (g_current[cat] > g_peak[cat]) g_peak[cat] = g_current[cat];
    if (g_current[cat] > g_phase_peak[cat]) g_phase_peak[cat] = g_current[cat];
    g_total_current += bytes;
    if (g_total_current > g_total_peak) g_total_peak = g_total_current;
    g_count++;
    g_live++;
    return (char *)block + MEM_ALIGN;
}

float *mem_alloc_floats(mem_category cat, size_t count, const char *what) {
    if (count > SIZE_MAX / sizeof(float))
        die(1, "out of memory: %zu floats of %s for %s overflow a size", count,
                       g_names[cat], what ? what : "?");
    return (float *)mem_alloc(cat, count * sizeof(float), what);
}

void mem_free_list(void *const *p, size_t n) {
    for (size_t i = 0; i < n; i++) mem_free(p[i]);
}

void mem_free(void *p) {
    if (!p) return;
    mem_header *h = (mem_header *)((char *)p - MEM_ALIGN);
    g_current[h->cat] -= h->bytes;
    g_total_current -= h->bytes;
    g_live--;
    free(h);
}

size_t mem_block_bytes(const void *p) {
    return p ? ((const mem_header *)((const char *)p - MEM_ALIGN))->bytes : 0;
}

size_t mem_current(mem_category cat) { return g_current[cat]; }
size_t mem_peak(mem_category cat) { return g_peak[cat]; }
void mem_phase_start(void) { memcpy(g_phase_peak, g_current, sizeof g_phase_peak); }
size_t mem_phase_peak(mem_category cat) { return g_phase_peak[cat]; }
size_t mem_total_current(void) { return g_total_current; }
size_t mem_total_peak(void) { return g_total_peak; }
unsigned long mem_alloc_count(void) { return g_count; }
unsigned long mem_live_count(void) { return g_live; }

size_t mem_peak_rss(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (size_t)ru.ru_maxrss * 1024; /* Linux reports kilobytes */
}

void mem_report(FILE *out, int rank) {
    fprintf(out, "[Rank %d] memory (bytes) | %-18s | %14s | %14s\n", rank, "category", "current",
            "peak");
    for (int c = 0; c < MEM_NUM_CATEGORIES; c++)
        fprintf(out, "[Rank %d] memory (bytes) | %-18s | %14zu | %14zu\n", rank, g_names[c],
                g_current[c], g_peak[c]);
    fprintf(out, "[Rank %d] memory (bytes) | %-18s | %14zu | %14zu\n", rank, "total",
            g_total_current, g_total_peak);
    fprintf(out, "[Rank %d] memory (bytes) | %-18s | %14s | %14zu\n", rank, "peak RSS", "-",
            mem_peak_rss());
    fflush(out);
}
