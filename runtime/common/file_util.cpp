// file_util.cpp: crash-safe file replacement (see file_util.h).
#include "common/file_util.h"
#include "common/backend.h"

#include <cerrno>
#include <cstring>
#include <csignal>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace loomrt {

static std::string errnoMsg(const std::string &what, const std::string &path) {
  return what + " '" + path + "': " + std::strerror(errno);
}

/// Removes `<base>.tmp.<pid>` files in `dir` left by processes that no
/// longer run (a run killed while writing): each would otherwise keep a
/// whole checkpoint's bytes. Files of live processes are theirs.
static void removeStaleTemporaries(const std::string &dir, const std::string &base) {
  DIR *d = ::opendir(dir.c_str());
  if (!d)
    return;
  std::string prefix = base + ".tmp.";
  while (struct dirent *e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0)
      continue;
    std::string pid = name.substr(prefix.size());
    if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos)
      continue;
    pid_t p = pid_t(std::stol(pid));
    if (p == ::getpid() || (::kill(p, 0) != 0 && errno == ESRCH))
      ::unlinkat(::dirfd(d), name.c_str(), 0);
  }
  ::closedir(d);
}

std::string folderOf(const std::string &path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

int folderWriteError(const std::string &dir, const std::string &tag) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0)
    return errno;
  if (!S_ISDIR(st.st_mode))
    return ENOTDIR;
  std::string probe = dir + "/.loom-write-test." + tag + "." + std::to_string(::getpid());
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return errno;
  ::close(fd);
  ::unlink(probe.c_str());
  return 0;
}

loomrt_status writeFileAtomic(
    const std::string &path,
    const std::vector<std::pair<const void *, size_t>> &parts) {
  std::string dir = folderOf(path);
  removeStaleTemporaries(dir, path.substr(path.rfind('/') + 1));
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  // A new file or nothing: O_EXCL with O_CREAT never follows a symbolic
  // link, so a link planted under this predictable name in a shared folder
  // cannot redirect the write to another file (O_NOFOLLOW says so twice).
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    bool exists = errno == EEXIST;
    return fail(LOOMRT_ERR_IO, errnoMsg("cannot create", tmp) +
                                   (exists ? " (a file or link of that name exists and "
                                                      "belongs to a running process, or was planted)"
                                                    : ""));
  }
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
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return LOOMRT_OK;
}

int openRegularForRead(const std::string &path, uint64_t maxBytes, const char *what,
                       std::string &error, struct stat *stOut) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    error = "cannot open " + std::string(what) + " '" + path + "': " + std::strerror(errno);
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const char *kind = S_ISDIR(st.st_mode)    ? "a folder"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                       : S_ISSOCK(st.st_mode)                      ? "a socket"
                                                                   : "something else";
    error = std::string(what) + " '" + path + "' is not a regular file (it is " + kind + ")";
    ::close(fd);
    return -1;
  }
  if (uint64_t(st.st_size) > maxBytes) {
    error = std::string(what) + " '" + path + "' has " + std::to_string(st.st_size) +
            " bytes, more than the " + std::to_string(maxBytes) + " such a file may have";
    ::close(fd);
    return -1;
  }
  // Reads block as usual from here (a regular file never would anyway).
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  if (stOut)
    *stOut = st;
  return fd;
}

bool readRegularFile(const std::string &path, uint64_t maxBytes, const char *what,
                     std::string &out, std::string &error, struct stat *stOut) {
  struct stat st {};
  int fd = openRegularForRead(path, maxBytes, what, error, &st);
  if (fd < 0)
    return false;
  out.clear();
  out.reserve(size_t(st.st_size));
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      error = "cannot read " + std::string(what) + " '" + path + "': " + std::strerror(errno);
      ::close(fd);
      return false;
    }
    if (n == 0)
      break;
    // The file may grow while it is read: the limit holds for what is read.
    if (out.size() + size_t(n) > maxBytes) {
      error = std::string(what) + " '" + path + "' grew past " + std::to_string(maxBytes) +
              " bytes while it was read";
      ::close(fd);
      return false;
    }
    out.append(buf, size_t(n));
  }
  ::close(fd);
  if (stOut)
    *stOut = st;
  return true;
}

std::FILE *fopenRegularForRead(const std::string &path, uint64_t maxBytes, const char *what,
                               std::string &error, uint64_t *size) {
  struct stat st {};
  int fd = openRegularForRead(path, maxBytes, what, error, &st);
  if (fd < 0)
    return nullptr;
  std::FILE *f = ::fdopen(fd, "rb");
  if (!f) {
    error = "cannot read " + std::string(what) + " '" + path + "': " + std::strerror(errno);
    ::close(fd);
    return nullptr;
  }
  if (size)
    *size = uint64_t(st.st_size);
  return f;
}

std::FILE *fopenForAppend(const std::string &path, const char *what, std::string &error,
                          bool truncate) {
  int fd = ::open(path.c_str(),
                  O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC |
                      (truncate ? 0 : O_APPEND),
                  0644);
  if (fd < 0) {
    error = "cannot write " + std::string(what) + " '" + path + "': " +
            (errno == ELOOP   ? std::string("it is a symbolic link, which is not followed")
             : errno == ENXIO ? std::string("it is a FIFO or a device, not a regular file")
                            : std::string(std::strerror(errno)));
    return nullptr;
  }
  // A regular file, or a character device such as /dev/null (writing to
  // one never hangs); not a FIFO (one with a reader opened above).
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISCHR(st.st_mode))) {
    error = "cannot write " + std::string(what) + " '" + path + "': it is not a regular file";
    ::close(fd);
    return nullptr;
  }
  if (truncate && S_ISREG(st.st_mode) && ::ftruncate(fd, 0) != 0) {
    error = "cannot write " + std::string(what) + " '" + path + "': " + std::strerror(errno);
    ::close(fd);
    return nullptr;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::FILE *f = ::fdopen(fd, truncate ? "wb" : "ab");
  if (!f) {
    error = "cannot write " + std::string(what) + " '" + path + "': " + std::strerror(errno);
    ::close(fd);
  }
  return f;
}

} // namespace loomrt
