// The command-line parser the training binary and the runtime's tools share
// (common/cli.h, cxxopts underneath): both flag forms, the errors it words
// itself, and hostile arguments (one of Linux's longest, 131,000 characters,
// overflowed the stack of cxxopts' regex matcher before it was refused up
// front).
#include "common/cli.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

struct Line {
  std::vector<std::string> args;
  std::vector<const char *> argv;
  explicit Line(std::vector<std::string> a) : args(std::move(a)) {
    argv.push_back("prog");
    for (auto &s : args)
      argv.push_back(s.c_str());
  }
  int argc() const { return int(argv.size()); }
};

loomrt::cli::Flags flags() {
  loomrt::cli::Flags f;
  f.add("steps", loomrt::cli::Flags::Value);
  f.add("input", loomrt::cli::Flags::List);
  f.add("o,output", loomrt::cli::Flags::Value);
  f.add("resume", loomrt::cli::Flags::Bool);
  return f;
}

} // namespace

TEST(Cli, BothFormsListsAndBooleans) {
  loomrt::cli::Flags f = flags();
  Line l({"--steps", "3", "--input=a=x.npy", "--input", "b=y.npy", "-o", "out", "--resume",
          "--steps=5"});
  std::string err;
  ASSERT_TRUE(f.parse(l.argc(), l.argv.data(), err)) << err;
  EXPECT_EQ("5", f.value("steps")); // the last one given
  EXPECT_EQ((std::vector<std::string>{"a=x.npy", "b=y.npy"}), f.list("input"));
  EXPECT_EQ("out", f.value("output"));
  EXPECT_TRUE(f.on("resume"));
  long long steps = 0;
  EXPECT_TRUE(loomrt::cli::integer(f, "steps", 1, 10, steps, err));
  EXPECT_EQ(5, steps);
  EXPECT_FALSE(loomrt::cli::integer(f, "steps", 1, 4, steps, err));
  EXPECT_EQ("--steps expects a whole number in [1, 4], got '5'", err);
}

TEST(Cli, MistakesAreOneLineEach) {
  auto fails = [](std::vector<std::string> args, const std::string &want, size_t positional = 0) {
    loomrt::cli::Flags f = flags();
    Line l(std::move(args));
    std::string err;
    EXPECT_FALSE(f.parse(l.argc(), l.argv.data(), err, positional));
    EXPECT_NE(err.find(want), std::string::npos) << err;
    EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  };
  fails({"--stpes", "3"}, "unknown flag '--stpes' (see --help)");
  fails({"-x"}, "unknown flag '-x'");
  fails({"--steps"}, "flag '--steps' is missing an argument");
  fails({"--resume=yes"}, "--resume takes no value, got 'yes'");
  fails({"stray"}, "unexpected argument 'stray'");
  fails({"a", "b"}, "unexpected argument 'b'", 1);
  for (std::string arg : {"--steps=", "--", "-", "--input="})
    arg.resize(131000, 'a'), fails({arg}, "characters long, more than the 16384");
}

TEST(Cli, ChoicesAndNumbers) {
  loomrt::cli::Flags f = flags();
  Line l({"--steps", "inf", "--output", "zeros"});
  std::string err, out;
  ASSERT_TRUE(f.parse(l.argc(), l.argv.data(), err)) << err;
  double x = 0;
  EXPECT_FALSE(loomrt::cli::number(f, "steps", 0, 10, x, err));
  EXPECT_EQ("--steps expects a number in [0, 10], got 'inf'", err);
  EXPECT_FALSE(loomrt::cli::choice(f, "output", {"model", "random", "file"}, out, err));
  EXPECT_EQ("--output expects model, random or file, got 'zeros'", err);
  EXPECT_TRUE(loomrt::cli::choice(f, "missing", {"a"}, out, err)); // absent: nothing to check
}
