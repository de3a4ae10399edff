// tokens.cpp: reading and checking the token file (see tokens.h).
#include "driver/tokens.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sys/stat.h>

namespace loomrt {

bool loadTokens(const std::string &path, int64_t vocab, int64_t batch, int64_t seq,
                std::vector<uint16_t> &tokens, std::string &error) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0)
    return error = "cannot open data file '" + path + "': " + std::strerror(errno), false;
  // A folder or a device has no size to trust (a folder read as a file
  // asked for exabytes).
  if (!S_ISREG(st.st_mode))
    return error = "data file '" + path + "' is not a regular file", false;
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return error = "cannot open data file '" + path + "': " + std::strerror(errno), false;
  tokens.assign(size_t(st.st_size) / 2, 0);
  in.read(reinterpret_cast<char *>(tokens.data()), std::streamsize(tokens.size() * 2));
  if (!in)
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
