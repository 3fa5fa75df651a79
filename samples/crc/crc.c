/*
 * CRC-32 (the zlib/Ethernet one: reflected, polynomial 0xEDB88320, initial value
 * and final xor 0xFFFFFFFF), one bit at a time, no table.
 *
 * Analysis sample: an outer loop over bytes whose trip count is the length and an
 * inner loop of exactly 8 iterations.  The per-bit test is a branch at -O0; gcc -O2
 * if-converts it (cmov), so there every block count follows from len alone.
 */

#define CRC32_POLY 0xEDB88320u

unsigned crc32_bitwise(const unsigned char *data, unsigned long len)
{
    unsigned crc = 0xFFFFFFFFu;

    for (unsigned long i = 0; i < len; i++) {
        crc ^= data[i];
        for (int bit = 0; bit < 8; bit++) {
            if (crc & 1u)
                crc = (crc >> 1) ^ CRC32_POLY;
            else
                crc >>= 1;
        }
    }
    return ~crc;
}
