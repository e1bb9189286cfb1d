/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): the checksum of iSCSI (RFC 3720) and
 * of TFRecord files, whose framing stores it "masked" so that a CRC of data that itself holds
 * CRCs stays well distributed (tensorflow/core/lib/hash/crc32c.h). */
#ifndef MEGADLM_CORE_UTIL_CRC32C_H
#define MEGADLM_CORE_UTIL_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32C of n bytes, continuing from crc (0 to start): crc32c_extend(crc32c(a), b) is the
 * CRC of a followed by b. */
uint32_t crc32c_extend(uint32_t crc, const void *data, size_t n);
static inline uint32_t crc32c(const void *data, size_t n) { return crc32c_extend(0, data, n); }

/* TFRecord's mask: rotate right by 15 bits and add 0xa282ead8. */
static inline uint32_t crc32c_mask(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

#endif
