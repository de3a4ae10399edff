// cli.cpp: the command-line parser (cli.h) over cxxopts.
#include "common/cli.h"

#include <cxxopts.hpp>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace loomrt::cli {
namespace {

/// cxxopts' messages quote names with typographic quotes and without the
/// dashes; ours say '--name' as the user typed it.
std::string tidy(std::string m) {
  for (const char *q : {"\xe2\x80\x98", "\xe2\x80\x99"}) // ‘ ’
    for (size_t at; (at = m.find(q)) != std::string::npos;)
      m.replace(at, 3, "'");
  size_t at = m.find("Option '");
  if (at != std::string::npos) {
    size_t end = m.find('\'', at + 8);
    if (end != std::string::npos)
      m.replace(at, end - at, "flag '" + std::string(end - at - 8 > 1 ? "--" : "-") +
                                  m.substr(at + 8, end - at - 8));
  }
  if (!m.empty())
    m[0] = char(std::tolower(m[0]));
  return m + " (see --help)";
}

std::string fmt(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

} // namespace

void Flags::add(const std::string &spec, Kind kind) { specs_.push_back({spec, kind}); }

const std::string &Flags::value(const std::string &name) const {
  static const std::string none;
  auto it = values_.find(name);
  return it == values_.end() || it->second.empty() ? none : it->second.back();
}

std::vector<std::string> Flags::list(const std::string &name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>() : it->second;
}

bool Flags::parse(int argc, const char *const *argv, std::string &err, size_t maxPositional) {
  values_.clear();
  positional_.clear();
  // cxxopts matches each argument with std::regex, whose matcher recurses
  // once a character: a flag of 131,000 characters (what one argument of
  // Linux may hold) overflowed the stack. No path or number is this long.
  for (int i = 1; i < argc; ++i)
    if (argv[i] && std::strlen(argv[i]) > kMaxArgument)
      return err = "argument " + std::to_string(i) + " is " + std::to_string(std::strlen(argv[i])) +
                   " characters long, more than the " + std::to_string(kMaxArgument) +
                   " a flag or a path may have",
             false;
  cxxopts::Options o(argc > 0 && argv[0] ? argv[0] : "program");
  o.allow_unrecognised_options();
  for (auto &[spec, kind] : specs_) {
    if (kind == Bool)
      o.add_options()(spec, "", cxxopts::value<std::string>()->implicit_value("true"));
    else
      o.add_options()(spec, "", cxxopts::value<std::string>());
  }
  try {
    cxxopts::ParseResult r = o.parse(argc, argv);
    for (const std::string &a : r.unmatched()) {
      bool flag = a.size() > 1 && a[0] == '-';
      if (flag || positional_.size() == maxPositional)
        return err = (flag ? "unknown flag '" : "unexpected argument '") + a + "' (see --help)",
               false;
      positional_.push_back(a);
    }
    // Every occurrence, in order, under the flag's long name (a Value
    // keeps the last, a List all of them).
    for (const cxxopts::KeyValue &kv : r.arguments())
      values_[kv.key()].push_back(kv.value());
    for (auto &[spec, kind] : specs_) {
      std::string name = spec.substr(spec.find(',') + 1);
      auto it = values_.find(name);
      if (kind != Bool || it == values_.end())
        continue;
      for (const std::string &v : it->second)
        if (v != "true" && v != "false")
          return err = "--" + name + " takes no value, got '" + v + "'", false;
    }
  } catch (const cxxopts::exceptions::exception &e) {
    return err = tidy(e.what()), false;
  }
  return true;
}

bool number(const Flags &f, const std::string &name, double lo, double hi, double &out,
            std::string &err) {
  if (!f.has(name))
    return true;
  const std::string &v = f.value(name);
  char *end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  // Finite numbers only: --lr=inf or --steps=1e30 are typos, not requests.
  if (v.empty() || *end || !std::isfinite(x) || !(x >= lo) || x > hi)
    return err = "--" + name + " expects a number in [" + fmt(lo) + ", " + fmt(hi) +
                 "], got '" + v + "'",
           false;
  out = x;
  return true;
}

bool integer(const Flags &f, const std::string &name, long long lo, long long hi, long long &out,
             std::string &err) {
  if (!f.has(name))
    return true;
  const std::string &v = f.value(name);
  char *end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || errno || x < lo || x > hi)
    return err = "--" + name + " expects a whole number in [" + std::to_string(lo) + ", " +
                 std::to_string(hi) + "], got '" + v + "'",
           false;
  out = x;
  return true;
}

bool choice(const Flags &f, const std::string &name, const std::vector<std::string> &choices,
            std::string &out, std::string &err) {
  if (!f.has(name))
    return true;
  const std::string &v = f.value(name);
  for (const std::string &c : choices)
    if (v == c)
      return out = v, true;
  std::string list;
  for (size_t i = 0; i < choices.size(); ++i)
    list += (i ? (i + 1 == choices.size() ? " or " : ", ") : "") + choices[i];
  return err = "--" + name + " expects " + list + ", got '" + v + "'", false;
}

} // namespace loomrt::cli
