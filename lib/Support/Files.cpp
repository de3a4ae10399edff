//===- Files.cpp - the compiler's one way to read and write files ---------===//
#include "loom/Support/Files.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace loom {

static const char *kindOf(mode_t m) {
  return S_ISDIR(m)                  ? "a folder"
         : S_ISFIFO(m)               ? "a FIFO"
         : S_ISCHR(m) || S_ISBLK(m)  ? "a device"
         : S_ISSOCK(m)               ? "a socket"
                                     : "something else";
}

bool readRegularFile(const std::string &path, uint64_t maxBytes, const char *what,
                     std::string &out, std::string &error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    error = "cannot open " + std::string(what) + " '" + path + "': " + std::strerror(errno);
    return false;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    error = std::string(what) + " '" + path + "' is not a regular file (it is " +
            kindOf(st.st_mode) + ")";
    ::close(fd);
    return false;
  }
  if (uint64_t(st.st_size) > maxBytes) {
    error = std::string(what) + " '" + path + "' has " + std::to_string(st.st_size) +
            " bytes, more than the " + std::to_string(maxBytes) + " such a file may have";
    ::close(fd);
    return false;
  }
  out.clear();
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    if (n < 0) {
      error = "cannot read " + std::string(what) + " '" + path + "': " + std::strerror(errno);
      ::close(fd);
      return false;
    }
    if (n == 0)
      break;
    if (out.size() + size_t(n) > maxBytes) {
      error = std::string(what) + " '" + path + "' grew past " + std::to_string(maxBytes) +
              " bytes while it was read";
      ::close(fd);
      return false;
    }
    out.append(buf, size_t(n));
  }
  ::close(fd);
  return true;
}

std::unique_ptr<llvm::raw_fd_ostream> openOutputNoFollow(const std::string &path,
                                                         std::string &error) {
  if (path == "-")
    return std::make_unique<llvm::raw_fd_ostream>(STDOUT_FILENO, /*shouldClose=*/false);
  // O_NONBLOCK: opening a FIFO with no reader fails at once instead of
  // waiting; O_NOFOLLOW: a link planted under the name is not followed.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC,
                  0644);
  if (fd < 0) {
    error = "cannot write '" + path + "': " +
            (errno == ELOOP   ? std::string("it is a symbolic link, which is not followed")
             : errno == ENXIO ? std::string("it is a FIFO or a device, not a regular file")
                            : std::string(std::strerror(errno)));
    return nullptr;
  }
  // A regular file, or a character device such as /dev/null (writing to
  // one never hangs); not a FIFO (one with a reader opened above).
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISCHR(st.st_mode))) {
    error = "cannot write '" + path + "': it is " + kindOf(st.st_mode);
    ::close(fd);
    return nullptr;
  }
  if (S_ISREG(st.st_mode) && ::ftruncate(fd, 0) != 0) {
    error = "cannot write '" + path + "': " + std::strerror(errno);
    ::close(fd);
    return nullptr;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return std::make_unique<llvm::raw_fd_ostream>(fd, /*shouldClose=*/true);
}

} // namespace loom
