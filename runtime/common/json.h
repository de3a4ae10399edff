// json.h: the small JSON reader and writer helpers the runtime needs for
// safetensors headers and traces (objects, arrays, strings, integers). The
// runtime has no dependencies, and these formats use only this subset.
#ifndef LOOMRT_COMMON_JSON_H
#define LOOMRT_COMMON_JSON_H

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace loomrt::json {

struct Value {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  bool b = false;
  double num = 0;
  int64_t integer = 0;
  bool isInteger = false;
  std::string str;
  std::vector<Value> items;
  std::vector<std::pair<std::string, Value>> members; // in file order

  const Value *get(const std::string &key) const {
    for (auto &m : members)
      if (m.first == key)
        return &m.second;
    return nullptr;
  }
};

/// Parses `text`; on failure returns false and a message with the offset.
bool parse(const std::string &text, Value &out, std::string &error);

/// `s` as a JSON string literal (quotes and escapes included).
std::string quote(const std::string &s);

} // namespace loomrt::json

#endif
