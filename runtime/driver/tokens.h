// tokens.h: the training binary's token file (nanoGPT's train.bin: raw
// little-endian uint16 token ids), read and checked before any training.
#ifndef LOOMRT_DRIVER_TOKENS_H
#define LOOMRT_DRIVER_TOKENS_H

#include <cstdint>
#include <string>
#include <vector>

namespace loomrt {

/// Reads `path` into `tokens`: a regular file, every token below `vocab`
/// (when > 0: a file from another tokenizer would index past the embedding),
/// at least `batch` x `seq` + 2 tokens for a global batch of `batch` rows.
/// False with a one-line message naming the file.
bool loadTokens(const std::string &path, int64_t vocab, int64_t batch, int64_t seq,
                std::vector<uint16_t> &tokens, std::string &error);

} // namespace loomrt

#endif
