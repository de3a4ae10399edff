//===- Help.h - loomc's --help (private to lib/Pipelines) -------*- C++ -*-===//
#ifndef LOOM_LIB_PIPELINES_HELP_H
#define LOOM_LIB_PIPELINES_HELP_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace loom {

/// A flag as --help shows it: the option and its default ("": none shown).
struct HelpItem {
  const llvm::cl::Option *opt;
  std::string def;
};
/// Flags of one topic, under a title.
struct HelpSection {
  std::string title;
  std::vector<HelpItem> items;
};

/// The default of a flag, as --help prints it (before parsing, the value
/// is the default).
std::string helpDefault(const llvm::cl::opt<std::string> &o);
std::string helpDefault(const llvm::cl::opt<double> &o);
std::string helpDefault(const llvm::cl::opt<int64_t> &o);
std::string helpDefault(const llvm::cl::opt<int> &o);
std::string helpDefault(const llvm::cl::opt<bool> &o);
std::string helpDefault(const llvm::cl::list<std::string> &o);

/// Prints `usage`, then each section's flags sorted by name: the flag and
/// its value, its default, and its description wrapped at `width` columns
/// (a description's own line breaks kept, with their indentation).
void printHelp(llvm::raw_ostream &os, llvm::StringRef usage, llvm::ArrayRef<HelpSection> sections,
               unsigned width = 100);

/// loomc --version: Loom's version and the commit it was built from, then
/// LLVM's.
void printVersion(llvm::raw_ostream &os);

} // namespace loom

#endif
