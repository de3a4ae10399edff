// file_util.h: crash-safe file replacement for checkpoints and traces.
#ifndef LOOMRT_COMMON_FILE_UTIL_H
#define LOOMRT_COMMON_FILE_UTIL_H

#include "loomrt/loomrt.h"

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace loomrt {

/// Writes the byte ranges `parts` to `path` so that `path` is, at every
/// moment, either its old content or the complete new one: write to
/// `path.tmp.<pid>` in the same folder, fsync, rename over `path`, fsync the
/// folder. On failure the temporary file is removed and `path` is untouched.
loomrt_status writeFileAtomic(
    const std::string &path,
    const std::vector<std::pair<const void *, size_t>> &parts);

} // namespace loomrt

#endif
