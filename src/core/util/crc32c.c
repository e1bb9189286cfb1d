#include "core/util/crc32c.h"

/* Byte-at-a-time table, built once: the event files are a few hundred bytes per log interval,
 * so speed does not matter; the table is filled before any thread could race on it (the
 * writer calls it from the logging rank's main thread only). */
static uint32_t g_table[256];
static int g_table_ready;

static void build_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        g_table[i] = c;
    }
    g_table_ready = 1;
}

uint32_t crc32c_extend(uint32_t crc, const void *data, size_t n) {
    if (!g_table_ready) build_table();
    const unsigned char *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = g_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}
