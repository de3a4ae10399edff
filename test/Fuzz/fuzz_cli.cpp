//===- fuzz_cli.cpp - the runtime's command-line parser ---------------------===//
//
// Each input is a command line, one argument a line: common/cli.h (cxxopts
// underneath) with the training binary's kinds of flags parses it or says
// why in one line, never crashes (a 131,000-character argument overflowed
// the stack of cxxopts' regex matcher), and every value it accepts goes
// through the number, whole-number and choice checks the programs use.
//
//===----------------------------------------------------------------------===//
#include "common/cli.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::vector<std::string> args = {"train"};
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    char c = char(data[i]);
    if (c == '\n') {
      args.push_back(cur);
      cur.clear();
    } else if (c != '\0') { // (argv strings hold no NUL)
      cur += c;
    }
  }
  args.push_back(cur);
  std::vector<const char *> argv;
  for (const std::string &a : args)
    argv.push_back(a.c_str());
  loomrt::cli::Flags f;
  for (const char *n : {"data", "steps", "lr", "init", "seed"})
    f.add(n, loomrt::cli::Flags::Value);
  f.add("input", loomrt::cli::Flags::List);
  f.add("o,output", loomrt::cli::Flags::Value);
  f.add("resume", loomrt::cli::Flags::Bool);
  f.add("h,help", loomrt::cli::Flags::Bool);
  std::string err;
  if (!f.parse(int(argv.size()), argv.data(), err, 1)) {
    if (err.empty() || err.find('\n') != std::string::npos) {
      std::fprintf(stderr, "refused with an empty or multi-line message: '%s'\n", err.c_str());
      std::abort();
    }
    return 0;
  }
  double lr = 0;
  long long steps = 0, seed = 0;
  std::string init;
  (void)loomrt::cli::number(f, "lr", 1e-12, 1e6, lr, err);
  (void)loomrt::cli::integer(f, "steps", 1, 1000000000000LL, steps, err);
  (void)loomrt::cli::integer(f, "seed", 0, 1LL << 62, seed, err);
  (void)loomrt::cli::choice(f, "init", {"model", "random"}, init, err);
  (void)f.list("input");
  (void)f.on("resume");
  return 0;
}
