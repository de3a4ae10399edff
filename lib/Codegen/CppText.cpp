//===- CppText.cpp - any byte string as C++ source text -------------------===//
//
// The only way names and paths reach generated C++ (see loom/Codegen.h):
// a model file is untrusted input, and an initializer name or a folder name
// written into a string literal unescaped is code the training binary runs.
//
//===----------------------------------------------------------------------===//
#include "loom/Codegen.h"

namespace loom {

std::string cppStringLiteral(llvm::StringRef bytes) {
  std::string out = "\"";
  for (unsigned char c : bytes) {
    // Printable ASCII stands for itself except the three characters that
    // mean something inside a literal ('?' for trigraphs in older dialects).
    // Everything else is a three-digit octal escape: unlike \x, an octal
    // escape stops after three digits, so a following digit cannot extend it.
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\' && c != '?') {
      out += char(c);
      continue;
    }
    out += '\\';
    out += char('0' + ((c >> 6) & 7));
    out += char('0' + ((c >> 3) & 7));
    out += char('0' + (c & 7));
  }
  return out + "\"";
}

std::string cppIdentifier(llvm::StringRef prefix, llvm::StringRef name) {
  // Letters, digits and single underscores stay (readable source); 'Z'
  // doubles and every other byte becomes Z and two hex digits. Decoding
  // (Z starts an escape, anything else is itself) gives the name back, so
  // distinct names stay distinct; an underscore after an underscore is
  // escaped, so no '__' (reserved in C++) is ever formed.
  static const char hex[] = "0123456789ABCDEF";
  std::string out = prefix.str();
  for (unsigned char c : name) {
    if (c == 'Z') {
      out += "ZZ";
    } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               (c == '_' && !out.empty() && out.back() != '_')) {
      out += char(c);
    } else {
      out += 'Z';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::string cppComment(llvm::StringRef text) {
  // A line comment ends at a newline and continues over a trailing
  // backslash: neither may survive. Non-ASCII bytes go too (the source is
  // ASCII whatever the model's names are).
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text)
    out += (c >= 0x20 && c < 0x7f && c != '\\') ? char(c) : '?';
  return out;
}

} // namespace loom
