/* CRC-32C against the test vectors of RFC 3720 (iSCSI), appendix B.4, and the check value of
 * the CRC catalogue ("123456789" -> 0xE3069283); TFRecord's mask against values computed by
 * hand from its definition; extend() equals one pass. */
#include <string.h>

#include "core/util/crc32c.h"
#include "test_util.h"

int main(void) {
    unsigned char buf[48];
    memset(buf, 0x00, 32);
    CHECK(crc32c(buf, 32) == 0x8A9136AAu); /* 32 bytes of zeros */
    memset(buf, 0xFF, 32);
    CHECK(crc32c(buf, 32) == 0x62A8AB43u); /* 32 bytes of ones */
    for (int i = 0; i < 32; i++) buf[i] = (unsigned char)i;
    CHECK(crc32c(buf, 32) == 0x46DD794Eu); /* incrementing 00..1f */
    for (int i = 0; i < 32; i++) buf[i] = (unsigned char)(31 - i);
    CHECK(crc32c(buf, 32) == 0x113FDB5Cu); /* decrementing 1f..00 */
    /* an iSCSI - SCSI Read (10) Command PDU */
    static const unsigned char pdu[48] = {
        0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
        0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
    CHECK(crc32c(pdu, 48) == 0xD9963A56u);
    CHECK(crc32c("123456789", 9) == 0xE3069283u);
    CHECK(crc32c("", 0) == 0u);
    CHECK(crc32c_extend(crc32c(pdu, 20), pdu + 20, 28) == 0xD9963A56u);
    /* mask(c) = ror15(c) + 0xa282ead8 (mod 2^32): 0 -> 0xa282ead8; 0x8000 -> 1 + 0xa282ead8;
     * 0xE3069283 -> ror15 = 0x2507C60D, + 0xa282ead8 = 0xC78AB0E5 */
    CHECK(crc32c_mask(0) == 0xa282ead8u);
    CHECK(crc32c_mask(0x8000u) == 0xa282ead9u);
    CHECK(crc32c_mask(0xE3069283u) == 0xC78AB0E5u);
    TEST_DONE();
}
