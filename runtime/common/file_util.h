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

/// The folder a file path names ("." for a bare name, "/" at the root).
std::string folderOf(const std::string &path);

/// 0 when this process can create files in `dir`, else the errno that says
/// why (ENOTDIR when it is not a folder). It creates and removes a probe
/// file named with `tag` and the pid (ranks on other hosts sharing the
/// folder may have the same pid), so it answers as root too, where
/// access(W_OK) always says yes.
int folderWriteError(const std::string &dir, const std::string &tag);

} // namespace loomrt

#endif
