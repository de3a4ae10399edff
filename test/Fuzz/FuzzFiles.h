//===- FuzzFiles.h - inputs of readers that take a path -------------------===//
#ifndef LOOM_TEST_FUZZ_FUZZFILES_H
#define LOOM_TEST_FUZZ_FUZZFILES_H

#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

namespace loom::fuzz {

/// `bytes` written to this process's own temporary file (made once), whose
/// path is returned.
inline std::string asFile(const char *prefix, const uint8_t *bytes, size_t size) {
  static std::string path = [&] {
    std::string name = std::string("/tmp/") + prefix + "-XXXXXX";
    int fd = mkstemp(name.data());
    if (fd < 0)
      std::abort();
    close(fd);
    return name;
  }();
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    std::abort();
  std::fwrite(bytes, 1, size, f);
  std::fclose(f);
  return path;
}

} // namespace loom::fuzz

#endif
