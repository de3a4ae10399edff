//===- fuzz_tokens.cpp - the training binary's token-file reader ----------===//
//
// Each input is a token file; the first two bytes choose the vocabulary the
// reader checks against (0: no check), as binaries of different models do.
//
//===----------------------------------------------------------------------===//
#include "driver/tokens.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

namespace {
std::string filePath() {
  static std::string path = [] {
    char name[] = "/tmp/loom-fuzz-tok-XXXXXX";
    int fd = mkstemp(name);
    if (fd >= 0)
      close(fd);
    return std::string(name);
  }();
  return path;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int64_t vocab = size >= 2 ? int64_t(data[0]) | int64_t(data[1]) << 8 : 0;
  std::string path = filePath();
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    std::abort();
  if (size > 2)
    std::fwrite(data + 2, 1, size - 2, f);
  std::fclose(f);
  std::vector<uint16_t> tokens;
  std::string error;
  (void)loomrt::loadTokens(path, vocab, 2, 8, tokens, error);
  return 0;
}
