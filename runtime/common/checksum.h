// checksum.h: CRC-32C (Castagnoli) of checkpoint tensors, so silent
// corruption of a saved file (a flipped bit on disk, a truncated copy that
// kept its length) is caught when it is loaded.
#ifndef LOOMRT_COMMON_CHECKSUM_H
#define LOOMRT_COMMON_CHECKSUM_H

#include <cstddef>
#include <cstdint>

namespace loomrt {

/// CRC-32C of `n` bytes continuing from `crc` (0 to start): the SSE4.2
/// instruction where the CPU has it (~8 GB/s per core), a table otherwise.
uint32_t crc32c(uint32_t crc, const void *data, size_t n);

} // namespace loomrt

#endif
