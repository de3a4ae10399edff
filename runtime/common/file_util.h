// file_util.h: crash-safe file replacement for checkpoints and traces.
#ifndef LOOMRT_COMMON_FILE_UTIL_H
#define LOOMRT_COMMON_FILE_UTIL_H

#include "loomrt/loomrt.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <sys/stat.h>
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

/// The most bytes each kind of file the runtime reads may have, in one
/// place. Data files are read whole into memory (a larger one fails with a
/// message, not std::bad_alloc); the manifest is a few hundred bytes.
constexpr uint64_t kMaxTokenFileBytes = uint64_t(1) << 40;      // 1 TiB
constexpr uint64_t kMaxNpyBytes = uint64_t(1) << 40;            // 1 TiB
constexpr uint64_t kMaxCheckpointPartBytes = uint64_t(4) << 40; // 4 TiB
constexpr uint64_t kMaxManifestBytes = uint64_t(1) << 20;       // 1 MiB

/// The one way the runtime opens a file it reads (checkpoints, weights,
/// token and array files, graphs, the job key): a file descriptor of
/// `path` only when it is a regular file of at most `maxBytes` bytes. A
/// FIFO, a device or a folder (which would hang the read or never end) and
/// an oversized file are refused with a one-line message in `error` that
/// names `what` (the flag or file kind); -1 then. The open itself never
/// blocks (O_NONBLOCK until the type is known). *st gets the file's status.
int openRegularForRead(const std::string &path, uint64_t maxBytes, const char *what,
                       std::string &error, struct stat *st = nullptr);
/// The whole of such a file, in `out`.
bool readRegularFile(const std::string &path, uint64_t maxBytes, const char *what,
                     std::string &out, std::string &error, struct stat *st = nullptr);
/// The same as a stdio stream ("rb"); null with `error` set.
std::FILE *fopenRegularForRead(const std::string &path, uint64_t maxBytes, const char *what,
                               std::string &error, uint64_t *size = nullptr);

/// The one way the runtime opens a file it appends to or writes in place
/// (the JSON log, sample dumps): never through a symbolic link (O_NOFOLLOW:
/// a link planted under the name in a shared folder cannot redirect the
/// write), never a FIFO (refused after a non-blocking open); a character
/// device such as /dev/null is written as it is; created 0644 when absent.
/// Files replaced whole go through writeFileAtomic instead.
std::FILE *fopenForAppend(const std::string &path, const char *what, std::string &error,
                          bool truncate = false);

} // namespace loomrt

#endif
