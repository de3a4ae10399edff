//===- Files.h - the compiler's one way to read and write files -*- C++ -*-===//
//
// Every file loomc and loom-opt read on a user's say (hardware and topology
// descriptions, models) and every file they write (-o, --emit-dir,
// --timeline) goes through these, so the rules hold everywhere: an input
// must be a regular file no larger than its kind allows, checked before a
// byte is read (a FIFO hangs a plain read, /dev/zero never ends), and an
// output is never written through a symbolic link planted under its name
// nor into a FIFO. The runtime's counterpart is runtime/common/file_util.h.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_SUPPORT_FILES_H
#define LOOM_SUPPORT_FILES_H

#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <memory>
#include <string>

namespace loom {

/// The whole of `path` in `out` when it is a regular file of at most
/// `maxBytes`; false with a one-line message naming `what` otherwise.
bool readRegularFile(const std::string &path, uint64_t maxBytes, const char *what,
                     std::string &out, std::string &error);

/// `path` opened for writing from its start ("-": stdout): created 0644
/// when absent, truncated when a regular file, written as it is when a
/// character device (/dev/null), refused when it is a symbolic link, a FIFO
/// or anything else. Null with a one-line message.
std::unique_ptr<llvm::raw_fd_ostream> openOutputNoFollow(const std::string &path,
                                                         std::string &error);

} // namespace loom

#endif
