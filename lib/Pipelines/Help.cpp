//===- Help.cpp - loomc's --help: flags by topic, wrapped -----------------===//
//
// LLVM's printer lists every option in one block padded to the longest
// name (one of loomc's is 130 characters with its value), prints each
// description on one line and shows no defaults. loomc's --help groups its
// flags by topic, sorts them, shows each default and wraps at 100 columns;
// MLIR's options stay behind --help-hidden (issue 46).
//
//===----------------------------------------------------------------------===//
#include "Help.h"

#include "loom/Version.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/Format.h"

namespace loom {

std::string helpDefault(const llvm::cl::opt<std::string> &o) { return o.getValue(); }
std::string helpDefault(const llvm::cl::opt<double> &o) {
  std::string s;
  llvm::raw_string_ostream(s) << llvm::format("%g", o.getValue());
  return s;
}
std::string helpDefault(const llvm::cl::opt<int64_t> &o) { return std::to_string(o.getValue()); }
std::string helpDefault(const llvm::cl::opt<int> &o) { return std::to_string(o.getValue()); }
std::string helpDefault(const llvm::cl::opt<bool> &o) { return o.getValue() ? "on" : ""; }
std::string helpDefault(const llvm::cl::list<std::string> &) { return ""; }

/// `text` from column `indent` to `width`, words kept whole (a word longer
/// than the line gets a line of its own).
static void wrap(llvm::raw_ostream &os, llvm::StringRef text, unsigned indent, unsigned width) {
  unsigned col = indent;
  os.indent(indent);
  bool first = true;
  while (!text.empty()) {
    auto [word, rest] = text.split(' ');
    text = rest.ltrim(' ');
    if (word.empty())
      continue;
    if (!first && col + 1 + word.size() > width) {
      os << "\n";
      os.indent(indent);
      col = indent;
      first = true;
    }
    if (!first) {
      os << ' ';
      ++col;
    }
    os << word;
    col += word.size();
    first = false;
  }
  os << "\n";
}

void printHelp(llvm::raw_ostream &os, llvm::StringRef usage, llvm::ArrayRef<HelpSection> sections,
               unsigned width) {
  os << usage << "\n";
  for (const HelpSection &s : sections) {
    if (s.items.empty())
      continue;
    os << "\n" << s.title << ":\n";
    std::vector<HelpItem> items(s.items.begin(), s.items.end());
    llvm::stable_sort(items, [](const HelpItem &a, const HelpItem &b) {
      return a.opt->ArgStr < b.opt->ArgStr;
    });
    for (const HelpItem &it : items) {
      const llvm::cl::Option &o = *it.opt;
      std::string dash = o.ArgStr.size() == 1 ? "-" : "--";
      std::string head = "  " + dash + o.ArgStr.str();
      if (!o.ValueStr.empty())
        head += "=<" + o.ValueStr.str() + ">";
      else if (o.getValueExpectedFlag() == llvm::cl::ValueRequired)
        head += "=<value>";
      std::string longValue; // (a value too long for one line: its own lines)
      if (head.size() > width) {
        head = "  " + dash + o.ArgStr.str() + "=<...>";
        longValue = "<...>: " + o.ValueStr.str();
      }
      std::string def = it.def.empty() ? "" : "(default: " + it.def + ")";
      if (!def.empty() && head.size() + 2 + def.size() <= width)
        head += "  " + def, def.clear();
      os << head << "\n";
      if (!longValue.empty()) {
        std::string spaced = longValue; // wrap at its commas
        for (size_t p = 0; (p = spaced.find(',', p)) != std::string::npos; p += 2)
          spaced.insert(p + 1, " ");
        wrap(os, spaced, 6, width);
      }
      if (!def.empty())
        wrap(os, def, 6, width);
      // Each line of the description on its own (the model families' table
      // keeps its layout), wrapped, with its leading spaces.
      llvm::SmallVector<llvm::StringRef> lines;
      o.HelpStr.split(lines, '\n');
      for (llvm::StringRef line : lines) {
        size_t lead = line.find_first_not_of(' ');
        if (lead == llvm::StringRef::npos)
          continue;
        wrap(os, line.drop_front(lead), 6 + unsigned(lead), width);
      }
    }
  }
  os << "\nMLIR's own options (IR printing, timing, crash reproducers): --help-hidden\n";
}

void printVersion(llvm::raw_ostream &os) {
  os << "loomc (Loom) " << LOOM_VERSION_STRING << ", commit " << LOOM_GIT_COMMIT
     << "\ntraining binaries' runtime ABI " << LOOM_TRAIN_ABI << "\nLLVM/MLIR "
     << LLVM_VERSION_STRING << "\n";
}

} // namespace loom
