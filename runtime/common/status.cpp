// status.cpp: the runtime's errors: a status code and a thread's last
// message (loomrt_last_error), set by loomrt::fail wherever a call refuses.
#include "common/backend.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace loomrt {
namespace {
thread_local std::string lastError;
} // namespace

loomrt_status fail(loomrt_status s, const std::string &msg) {
  lastError = msg;
  return s;
}

EnvSwitch envSwitch(const char *name) {
  const char *v = std::getenv(name);
  if (!v || !*v || std::strcmp(v, "on") == 0)
    return EnvSwitch::On;
  if (std::strcmp(v, "off") == 0)
    return EnvSwitch::Off;
  if (std::strcmp(v, "report") == 0)
    return EnvSwitch::Report;
  std::fprintf(stderr, "loomrt: %s='%s' is not on, off or report; using on\n", name, v);
  return EnvSwitch::On;
}
} // namespace loomrt

extern "C" {

const char *loomrt_status_string(loomrt_status s) {
  switch (s) {
  case LOOMRT_OK: return "ok";
  case LOOMRT_ERR_INVALID_ARGUMENT: return "invalid argument";
  case LOOMRT_ERR_OUT_OF_MEMORY: return "out of memory";
  case LOOMRT_ERR_UNSUPPORTED: return "unsupported";
  case LOOMRT_ERR_BACKEND: return "backend error";
  case LOOMRT_ERR_IO: return "I/O error";
  }
  return "unknown status";
}

const char *loomrt_last_error(void) { return loomrt::lastError.c_str(); }

} // extern "C"
