//===- fuzz_tokens.cpp - the training binary's token-file reader ----------===//
//
// Each input is a token file; the first two bytes choose the vocabulary the
// reader checks against (0: no check), as binaries of different models do.
//
//===----------------------------------------------------------------------===//
#include "FuzzFiles.h"
#include "driver/tokens.h"

#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int64_t vocab = size >= 2 ? int64_t(data[0]) | int64_t(data[1]) << 8 : 0;
  std::string path = loom::fuzz::asFile("loom-fuzz-tok", data + (size > 2 ? 2 : size),
                                        size > 2 ? size - 2 : 0);
  loomrt::TokenFile tokens;
  std::string error;
  (void)loomrt::loadTokens(path, vocab, 2, 8, tokens, error);
  return 0;
}
