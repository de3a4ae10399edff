// json.cpp: a strict recursive-descent JSON reader (RFC 8259 syntax; numbers
// kept as double and, when integral, as int64) and string quoting.
#include "common/json.h"

#include <cstdio>
#include <cstdlib>

namespace loomrt::json {
namespace {

struct Parser {
  const std::string &t;
  size_t i = 0;
  std::string err;
  int depth = 0;

  bool fail(const std::string &msg) {
    if (err.empty())
      err = msg + " at offset " + std::to_string(i);
    return false;
  }
  void ws() {
    while (i < t.size() && (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r'))
      ++i;
  }
  bool lit(const char *word) {
    size_t n = std::char_traits<char>::length(word);
    if (t.compare(i, n, word) != 0)
      return fail(std::string("expected ") + word);
    i += n;
    return true;
  }
  bool string(std::string &out) {
    if (i >= t.size() || t[i] != '"')
      return fail("expected a string");
    ++i;
    while (i < t.size() && t[i] != '"') {
      unsigned char c = t[i++];
      if (c < 0x20)
        return fail("control character in string");
      if (c != '\\') {
        out += char(c);
        continue;
      }
      if (i >= t.size())
        return fail("unfinished escape");
      char e = t[i++];
      switch (e) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case '/': out += '/'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': {
        if (i + 4 > t.size())
          return fail("short \\u escape");
        unsigned cp = std::strtoul(t.substr(i, 4).c_str(), nullptr, 16);
        i += 4;
        // UTF-8 encode (surrogate pairs are kept as two 3-byte sequences;
        // tensor names are ASCII in practice).
        if (cp < 0x80) {
          out += char(cp);
        } else if (cp < 0x800) {
          out += char(0xc0 | (cp >> 6));
          out += char(0x80 | (cp & 0x3f));
        } else {
          out += char(0xe0 | (cp >> 12));
          out += char(0x80 | ((cp >> 6) & 0x3f));
          out += char(0x80 | (cp & 0x3f));
        }
        break;
      }
      default:
        return fail("bad escape");
      }
    }
    if (i >= t.size())
      return fail("unterminated string");
    ++i;
    return true;
  }
  bool number(Value &v) {
    size_t start = i;
    if (i < t.size() && t[i] == '-')
      ++i;
    bool integral = true;
    while (i < t.size() && ((t[i] >= '0' && t[i] <= '9') || t[i] == '.' ||
                            t[i] == 'e' || t[i] == 'E' || t[i] == '+' ||
                            t[i] == '-')) {
      if (t[i] == '.' || t[i] == 'e' || t[i] == 'E')
        integral = false;
      ++i;
    }
    std::string s = t.substr(start, i - start);
    if (s.empty() || s == "-")
      return fail("expected a value");
    char *end = nullptr;
    v.kind = Value::Number;
    v.num = std::strtod(s.c_str(), &end);
    if (*end)
      return fail("malformed number '" + s + "'");
    if (integral) {
      v.isInteger = true;
      v.integer = std::strtoll(s.c_str(), &end, 10);
    }
    return true;
  }
  bool value(Value &v) {
    if (++depth > 64)
      return fail("nesting too deep");
    ws();
    if (i >= t.size())
      return fail("unexpected end");
    char c = t[i];
    bool ok;
    if (c == '{') {
      v.kind = Value::Object;
      ++i;
      ws();
      if (i < t.size() && t[i] == '}') {
        ++i;
        --depth;
        return true;
      }
      for (;;) {
        ws();
        std::string key;
        if (!string(key))
          return false;
        ws();
        if (i >= t.size() || t[i] != ':')
          return fail("expected ':'");
        ++i;
        Value child;
        if (!value(child))
          return false;
        v.members.emplace_back(std::move(key), std::move(child));
        ws();
        if (i < t.size() && t[i] == ',') {
          ++i;
          continue;
        }
        if (i < t.size() && t[i] == '}') {
          ++i;
          break;
        }
        return fail("expected ',' or '}'");
      }
      ok = true;
    } else if (c == '[') {
      v.kind = Value::Array;
      ++i;
      ws();
      if (i < t.size() && t[i] == ']') {
        ++i;
        --depth;
        return true;
      }
      for (;;) {
        Value child;
        if (!value(child))
          return false;
        v.items.push_back(std::move(child));
        ws();
        if (i < t.size() && t[i] == ',') {
          ++i;
          continue;
        }
        if (i < t.size() && t[i] == ']') {
          ++i;
          break;
        }
        return fail("expected ',' or ']'");
      }
      ok = true;
    } else if (c == '"') {
      v.kind = Value::String;
      ok = string(v.str);
    } else if (c == 't') {
      v.kind = Value::Bool;
      v.b = true;
      ok = lit("true");
    } else if (c == 'f') {
      v.kind = Value::Bool;
      ok = lit("false");
    } else if (c == 'n') {
      ok = lit("null");
    } else {
      ok = number(v);
    }
    --depth;
    return ok;
  }
};

} // namespace

bool parse(const std::string &text, Value &out, std::string &error) {
  Parser p{text, 0, {}, 0};
  if (!p.value(out))
    return error = p.err, false;
  p.ws();
  if (p.i != text.size())
    return error = "trailing characters at offset " + std::to_string(p.i),
           false;
  return true;
}

std::string quote(const std::string &s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += char(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      o += buf;
    } else {
      o += char(c);
    }
  }
  return o + "\"";
}

} // namespace loomrt::json
