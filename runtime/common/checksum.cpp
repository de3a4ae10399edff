// checksum.cpp: CRC-32C, hardware and table paths (see checksum.h).
#include "common/checksum.h"

#include <cstring>

namespace loomrt {
namespace {

/// The reflected Castagnoli polynomial's byte table.
struct Table {
  uint32_t t[256];
  Table() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
  }
};

uint32_t crcTable(uint32_t crc, const unsigned char *p, size_t n) {
  static const Table table;
  for (size_t i = 0; i < n; ++i)
    crc = table.t[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crcHardware(uint32_t crc, const unsigned char *p,
                                                       size_t n) {
  uint64_t c = crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c = __builtin_ia32_crc32di(c, w);
  }
  uint32_t c32 = uint32_t(c);
  for (; n; --n, ++p)
    c32 = __builtin_ia32_crc32qi(c32, *p);
  return c32;
}
#endif

} // namespace

uint32_t crc32c(uint32_t crc, const void *data, size_t n) {
  const auto *p = static_cast<const unsigned char *>(data);
  crc = ~crc;
#if defined(__x86_64__)
  static const bool hw = __builtin_cpu_supports("sse4.2");
  crc = hw ? crcHardware(crc, p, n) : crcTable(crc, p, n);
#else
  crc = crcTable(crc, p, n);
#endif
  return ~crc;
}

} // namespace loomrt
