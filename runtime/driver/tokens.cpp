// tokens.cpp: mapping and checking the token file (see tokens.h).
#include "driver/tokens.h"

#include <cerrno>
#include <cstdio>
#include <sys/mman.h>
#include <sys/stat.h>

#include "common/file_util.h"

namespace loomrt {

TokenFile::~TokenFile() {
  if (map)
    munmap(map, mapBytes);
}

namespace {
constexpr char kMagic[8] = {'L', 'O', 'O', 'M', 'T', 'O', 'K', 'S'};
constexpr size_t kHeaderBytes = 16;

uint32_t le32(const uint8_t *p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
} // namespace

bool loadTokens(const std::string &path, int64_t vocab, int64_t batch, int64_t seq,
                TokenFile &tokens, std::string &error) {
  // A regular file only (a FIFO would hang the read, a device or a folder
  // never end), no larger than kMaxTokenFileBytes; mapped, not read: the
  // pages a step touches come in as it reads them, once for every rank of
  // the host.
  std::string why;
  uint64_t size = 0;
  std::FILE *f = fopenRegularForRead(path, kMaxTokenFileBytes, "data file", why, &size);
  if (!f)
    return error = why, false;
  void *map = size ? mmap(nullptr, size_t(size), PROT_READ, MAP_PRIVATE, fileno(f), 0) : nullptr;
  int mapErrno = errno;
  std::fclose(f);
  if (size && map == MAP_FAILED)
    return error = "cannot map data file '" + path + "': " + std::strerror(mapErrno), false;
  tokens.map = map;
  tokens.mapBytes = size_t(size);
  const uint8_t *bytes = static_cast<const uint8_t *>(map);
  size_t offset = 0;
  tokens.width = 2;
  if (size >= kHeaderBytes && std::memcmp(bytes, kMagic, sizeof kMagic) == 0) {
    uint32_t version = le32(bytes + 8), width = le32(bytes + 12);
    if (version != 1 || (width != 2 && width != 4))
      return error = "data file '" + path + "' is a Loom token file of version " +
                     std::to_string(version) + " with " + std::to_string(width) +
                     " bytes a token; this binary reads version 1 with 2 or 4",
             false;
    offset = kHeaderBytes;
    tokens.width = int(width);
  }
  if ((size - offset) % size_t(tokens.width))
    return error = "data file '" + path + "' has " + std::to_string(size - offset) +
                   " bytes of token ids, not a whole number of " +
                   std::to_string(tokens.width) + "-byte ids",
           false;
  tokens.ids = bytes + offset;
  tokens.count = size_t(size - offset) / size_t(tokens.width);
  if (vocab > 65536 && tokens.width == 2)
    return error = "data file '" + path + "' holds 2-byte token ids, but the model's vocabulary "
                   "has " + std::to_string(vocab) + " ids: write a Loom token file with 4 "
                   "bytes a token (examples/tokenize.py --bytes-per-token 4)",
           false;
  int64_t n = int64_t(tokens.count);
  if (vocab > 0)
    for (int64_t i = 0; i < n; ++i)
      if (tokens[size_t(i)] >= uint64_t(vocab))
        return error = "data file '" + path + "': token " + std::to_string(tokens[size_t(i)]) +
                       " at position " + std::to_string(i) +
                       " is outside the model's vocabulary (" + std::to_string(vocab) +
                       " tokens)",
               false;
  if (n < batch * seq + 2)
    return error = "data file '" + path + "' has " + std::to_string(n) + " tokens; a batch of " +
                   std::to_string(batch) + " x " + std::to_string(seq) + " needs at least " +
                   std::to_string(batch * seq + 2),
           false;
  return true;
}

} // namespace loomrt
