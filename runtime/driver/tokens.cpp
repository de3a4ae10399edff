// tokens.cpp: reading and checking the token file (see tokens.h).
#include "driver/tokens.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <sys/stat.h>

#include "common/file_util.h"

namespace loomrt {

bool loadTokens(const std::string &path, int64_t vocab, int64_t batch, int64_t seq,
                std::vector<uint16_t> &tokens, std::string &error) {
  // A regular file only (a FIFO would hang the read, a device or a folder
  // never end), no larger than kMaxTokenFileBytes.
  std::string why;
  uint64_t size = 0;
  std::FILE *f = fopenRegularForRead(path, kMaxTokenFileBytes, "data file", why, &size);
  if (!f)
    return error = why, false;
  try {
    tokens.assign(size_t(size / 2), 0);
  } catch (const std::bad_alloc &) {
    std::fclose(f);
    return error = "data file '" + path + "' has " + std::to_string(size) +
                   " bytes, more than this host can hold in memory (the driver reads the "
                   "token file whole); split it or train from a part of it",
           false;
  }
  bool read = std::fread(tokens.data(), 2, tokens.size(), f) == tokens.size();
  std::fclose(f);
  if (!read)
    return error = "cannot read data file '" + path + "'", false;
  int64_t n = int64_t(tokens.size());
  if (vocab > 0)
    for (int64_t i = 0; i < n; ++i)
      if (tokens[size_t(i)] >= vocab)
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
