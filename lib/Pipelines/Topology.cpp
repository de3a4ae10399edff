//===- Topology.cpp - loomc --topology ------------------------------------===//
#include "Planning.h"

#include "loom/Support/Files.h"
#include "llvm/Support/FileSystem.h"

namespace loom {

/// --topology's levels (a line level=N,... or a file holding it), innermost
/// first; a one-line message on a malformed entry.
std::optional<std::string>
parseTopology(const std::string &flag,
              llvm::SmallVectorImpl<std::pair<std::string, int64_t>> &levels) {
  std::string text = flag;
  std::string source = "--topology";
  if (llvm::sys::fs::exists(text)) {
    // A FIFO or a device is refused before a read; a file too large to be
    // a topology is named by its size, never echoed.
    std::string contents, err;
    if (!::loom::readRegularFile(text, 1 << 20, "topology file", contents, err))
      return err + " (a topology file holds one line level=N,...)";
    if (contents.size() > 4096)
      return std::string("topology file '" + text + "' is not a topology (level=N,...): it has " +
                         std::to_string(contents.size()) + " bytes");
    source = "topology file '" + text + "'";
    text = llvm::StringRef(contents).trim().str();
  }
  llvm::SmallVector<llvm::StringRef> parts;
  llvm::StringRef(text).split(parts, ',');
  for (llvm::StringRef part : parts) {
    auto [name, value] = part.trim().split('=');
    int64_t n;
    // An entry is quoted only in part: a file's whole text is not echoed.
    std::string shown = part.trim().size() > 40 ? part.trim().substr(0, 37).str() + "..."
                                                : part.trim().str();
    for (char &c : shown)
      if (static_cast<unsigned char>(c) < 0x20)
        c = ' ';
    if (name.empty() || value.getAsInteger(10, n) || n < 1 || n > (1 << 20))
      return std::string("bad " + source + " entry '" + shown +
                   "': expected level=N with 1 <= N <= 1048576 (e.g. node=2,gpu=4)");
    for (auto &l : levels)
      if (l.first == name)
        return ("--topology names level '" + name + "' twice").str();
    levels.insert(levels.begin(), {name.str(), n});
  }
  return std::nullopt;
}

} // namespace loom
