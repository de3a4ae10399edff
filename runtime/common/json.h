// json.h: JSON for the runtime's files (safetensors headers, checkpoint
// manifests and layouts, traces) through nlohmann-json (Debian's
// nlohmann-json3-dev: header-only, so the runtime still links nothing for
// it). Objects are nlohmann::json's std::map: lookups are O(log n) on a
// hostile header of millions of keys, where an insertion-ordered map would
// cost O(n^2) to parse. These helpers never throw: every runtime entry point
// is C ABI, so an exception must not escape.
#ifndef LOOMRT_COMMON_JSON_H
#define LOOMRT_COMMON_JSON_H

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace loomrt::json {

using Value = nlohmann::json;

/// Parses `text` (at most 64 levels deep); on failure returns false and a
/// message with the byte offset.
bool parse(const std::string &text, Value &out, std::string &error);

/// `s` as a JSON string literal (quotes and escapes included; bytes that
/// are not UTF-8 are replaced, never thrown on).
std::string quote(const std::string &s);

/// The member `key` of `v`, or null when `v` is not an object or lacks it.
const Value *get(const Value &v, const std::string &key);

/// `v`'s integer, when `v` is an integral number that fits int64.
bool integer(const Value &v, int64_t &out);

/// `v`'s string, or null when `v` is not a string.
const std::string *string(const Value *v);

} // namespace loomrt::json

#endif
