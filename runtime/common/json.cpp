// json.cpp: the runtime's JSON helpers over nlohmann-json (json.h).
#include "common/json.h"

namespace loomrt::json {

bool parse(const std::string &text, Value &out, std::string &error) {
  // nlohmann's parser is iterative, and so is its destructor; the depth
  // bound is ours: no file the runtime reads nests deeper than 4, and a
  // hostile one stops here instead of costing a deep tree.
  constexpr int kMaxDepth = 64;
  bool tooDeep = false;
  auto depthCheck = [&](int depth, Value::parse_event_t, Value &) {
    if (depth > kMaxDepth)
      tooDeep = true;
    return !tooDeep;
  };
  try {
    out = Value::parse(text, depthCheck);
  } catch (const Value::exception &e) { // parse_error, and out_of_range for 1e999
    error = e.what();
    return false;
  }
  if (tooDeep) {
    error = "nested more than " + std::to_string(kMaxDepth) + " levels deep";
    out = Value();
    return false;
  }
  return true;
}

std::string quote(const std::string &s) {
  return Value(s).dump(-1, ' ', false, Value::error_handler_t::replace);
}

const Value *get(const Value &v, const std::string &key) {
  if (!v.is_object())
    return nullptr;
  auto it = v.find(key);
  return it == v.end() ? nullptr : &*it;
}

bool integer(const Value &v, int64_t &out) {
  if (v.is_number_integer() && !v.is_number_unsigned()) {
    out = v.get<int64_t>();
    return true;
  }
  if (v.is_number_unsigned() && v.get<uint64_t>() <= uint64_t(INT64_MAX)) {
    out = int64_t(v.get<uint64_t>());
    return true;
  }
  return false;
}

const std::string *string(const Value *v) {
  return v && v->is_string() ? &v->get_ref<const std::string &>() : nullptr;
}

} // namespace loomrt::json
