// cli.h: one command-line parser for the training binary and the runtime's
// tools (loom-calibrate, loom-graphgen): cxxopts (Debian's libcxxopts-dev,
// header-only) underneath, behind this small interface so that only
// cli.cpp compiles it and every program words its errors the same way.
// Tools that link LLVM (loomc, loom-opt, loom-run) use LLVM's own parser.
#ifndef LOOMRT_COMMON_CLI_H
#define LOOMRT_COMMON_CLI_H

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace loomrt::cli {

/// A program's flags: `--name VALUE` and `--name=VALUE` alike, a boolean
/// flag bare, `-x` where a flag has a one-letter name. Values are strings;
/// callers check them with number(), integer() and choice(), whose
/// messages are the same in every program.
class Flags {
public:
  /// The longest argument parse() accepts (PATH_MAX is 4096).
  static constexpr size_t kMaxArgument = 16384;
  enum Kind {
    Bool,  // --name (or --name=true|false)
    Value, // --name VALUE: the last one given counts
    List   // --name VALUE, repeatable: every one, in order
  };
  /// `spec` is "name" or "x,name" (a one-letter alias first).
  void add(const std::string &spec, Kind kind);
  /// Parses argv; false with a one-line message (an unknown flag, a missing
  /// value, a value given to a boolean, an argument that is not a flag
  /// beyond `maxPositional`, an argument over kMaxArgument characters).
  bool parse(int argc, const char *const *argv, std::string &err, size_t maxPositional = 0);
  bool has(const std::string &name) const { return values_.count(name) != 0; }
  /// The value of a Value flag (the last given), "" when absent.
  const std::string &value(const std::string &name) const;
  /// Every value of a List flag, in order.
  std::vector<std::string> list(const std::string &name) const;
  /// A Bool flag's state (false when absent).
  bool on(const std::string &name) const { return has(name) && value(name) == "true"; }
  /// The arguments that are not flags, in order.
  const std::vector<std::string> &positional() const { return positional_; }

private:
  std::vector<std::pair<std::string, Kind>> specs_;
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positional_;
};

/// `--name`'s value, when given, as a finite number in [lo, hi]; false with
/// "--name expects a number in [lo, hi], got 'V'".
bool number(const Flags &f, const std::string &name, double lo, double hi, double &out,
            std::string &err);
/// The same for a whole number.
bool integer(const Flags &f, const std::string &name, long long lo, long long hi, long long &out,
             std::string &err);
/// The same for one of `choices` ("--name expects a, b or c, got 'V'").
bool choice(const Flags &f, const std::string &name, const std::vector<std::string> &choices,
            std::string &out, std::string &err);

} // namespace loomrt::cli

#endif
