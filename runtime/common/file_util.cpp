// file_util.cpp: crash-safe file replacement (see file_util.h).
#include "common/file_util.h"
#include "common/backend.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace loomrt {

static std::string errnoMsg(const std::string &what, const std::string &path) {
  return what + " '" + path + "': " + std::strerror(errno);
}

loomrt_status writeFileAtomic(
    const std::string &path,
    const std::vector<std::pair<const void *, size_t>> &parts) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return fail(LOOMRT_ERR_IO, errnoMsg("cannot create", tmp));
  auto abandon = [&](const std::string &msg) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return fail(LOOMRT_ERR_IO, msg);
  };
  for (auto [data, size] : parts) {
    const char *p = static_cast<const char *>(data);
    while (size) {
      ssize_t n = ::write(fd, p, size);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return abandon(errnoMsg("cannot write", tmp));
      p += n;
      size -= size_t(n);
    }
  }
  if (::fsync(fd) != 0)
    return abandon(errnoMsg("cannot fsync", tmp));
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return fail(LOOMRT_ERR_IO, errnoMsg("cannot close", tmp));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string msg = errnoMsg("cannot rename over", path);
    ::unlink(tmp.c_str());
    return fail(LOOMRT_ERR_IO, msg);
  }
  // Make the rename itself durable.
  std::string dir = path.find('/') == std::string::npos
                        ? "."
                        : path.substr(0, path.rfind('/') ? path.rfind('/') : 1);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return LOOMRT_OK;
}

} // namespace loomrt
