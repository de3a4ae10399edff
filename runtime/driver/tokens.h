// tokens.h: the training binary's token file, mapped and checked before any
// training. Two forms:
//   * raw little-endian uint16 token ids (nanoGPT's train.bin);
//   * a Loom token file: the 16-byte header "LOOMTOKS", version (uint32
//     little-endian, 1) and the bytes per token (uint32: 2 or 4), then the
//     ids, little-endian. Vocabularies past 65536 ids need 4 bytes.
// examples/tokenize.py writes either from text.
#ifndef LOOMRT_DRIVER_TOKENS_H
#define LOOMRT_DRIVER_TOKENS_H

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace loomrt {

/// A token file mapped read-only: the ids, 2 or 4 bytes each.
class TokenFile {
public:
  TokenFile() = default;
  TokenFile(const TokenFile &) = delete;
  TokenFile &operator=(const TokenFile &) = delete;
  ~TokenFile();
  size_t size() const { return count; }
  uint32_t operator[](size_t i) const {
    if (width == 2) {
      uint16_t v;
      std::memcpy(&v, ids + 2 * i, 2);
      return v;
    }
    uint32_t v;
    std::memcpy(&v, ids + 4 * i, 4);
    return v;
  }
  int bytesPerToken() const { return width; }

private:
  friend bool loadTokens(const std::string &, int64_t, int64_t, int64_t, TokenFile &,
                         std::string &);
  void *map = nullptr;
  size_t mapBytes = 0;
  const uint8_t *ids = nullptr;
  size_t count = 0;
  int width = 2;
};

/// Maps `path` into `tokens`: a regular file (raw uint16, or a Loom token
/// file), every token below `vocab` (when > 0: a file from another
/// tokenizer would index past the embedding; a model of more than 65536
/// ids refuses a uint16 file), at least `batch` x `seq` + 2 tokens for a
/// global batch of `batch` rows. False with a one-line message naming the
/// file.
bool loadTokens(const std::string &path, int64_t vocab, int64_t batch, int64_t seq,
                TokenFile &tokens, std::string &error);

} // namespace loomrt

#endif
