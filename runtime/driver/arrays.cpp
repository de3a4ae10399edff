// arrays.cpp: reading and checking .npy inputs (see arrays.h). The header
// is a Python dict literal (NumPy's format.py); only the three keys NumPy
// writes are read, and a file that is not what it says is refused before
// anything is allocated from its numbers.
#include "driver/arrays.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <ext/stdio_filebuf.h>
#include <istream>
#include <sys/stat.h>

#include "common/file_util.h"

namespace loomrt {
namespace {

/// The value after 'key': in the header ("" when absent).
std::string field(const std::string &h, const char *key) {
  std::string k = std::string("'") + key + "':";
  size_t at = h.find(k);
  if (at == std::string::npos)
    return "";
  at += k.size();
  while (at < h.size() && h[at] == ' ')
    ++at;
  size_t end = at;
  if (at < h.size() && h[at] == '(')
    end = h.find(')', at) + 1;
  else if (at < h.size() && h[at] == '\'')
    end = h.find('\'', at + 1) + 1;
  else
    while (end < h.size() && h[end] != ',' && h[end] != '}')
      ++end;
  return end == 0 ? "" : h.substr(at, end - at); // 0: an unclosed ( or '

}

std::string shapeText(const std::vector<int64_t> &s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i)
    t += (i ? ", " : "") + (s[i] < 0 ? std::string("N") : std::to_string(s[i]));
  return t + "]";
}

} // namespace

bool readNpy(const std::string &path, const loomrt_input_desc &in, int64_t exactRows,
             const std::function<void *(size_t)> &alloc, int64_t &rows, std::string &error) {
  auto fail = [&](const std::string &why) {
    error = "input '" + std::string(in.name) + "' from '" + path + "': " + why;
    return false;
  };
  // A regular file only (a FIFO would hang the read), opened once: the
  // stream reads the descriptor that was checked.
  std::string why;
  struct stat st {};
  int fd = openRegularForRead(path, kMaxNpyBytes, "file", why, &st);
  if (fd < 0)
    return fail(why);
  __gnu_cxx::stdio_filebuf<char> fileBuf(fd, std::ios::in | std::ios::binary);
  std::istream f(&fileBuf);
  char magic[10] = {};
  if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    return fail("not a NumPy .npy file (save it with numpy.save)");
  int major = (unsigned char)magic[6];
  uint32_t headerLen = 0;
  unsigned char len[4] = {};
  if (major == 1) {
    if (!f.read(reinterpret_cast<char *>(len), 2))
      return fail("truncated header");
    headerLen = len[0] | (uint32_t(len[1]) << 8);
  } else if (major == 2 || major == 3) {
    if (!f.read(reinterpret_cast<char *>(len), 4))
      return fail("truncated header");
    headerLen = len[0] | (uint32_t(len[1]) << 8) | (uint32_t(len[2]) << 16) |
                (uint32_t(len[3]) << 24);
  } else {
    return fail(".npy format version " + std::to_string(major) + " (expected 1, 2 or 3)");
  }
  size_t dataStart = (major == 1 ? 10 : 12) + size_t(headerLen);
  if (headerLen > (1u << 20) || dataStart > size_t(st.st_size))
    return fail("header longer than the file");
  std::string header(headerLen, '\0');
  if (!f.read(header.data(), std::streamsize(headerLen)))
    return fail("truncated header");

  std::string descr = field(header, "descr"), order = field(header, "fortran_order"),
              shapeT = field(header, "shape");
  if (order != "False")
    return fail("Fortran order (save a C-contiguous array: numpy.ascontiguousarray)");
  // Little-endian (or byte-sized) numbers only.
  struct Kind {
    const char *descr;
    size_t bytes;
    bool isFloat, isSigned;
  };
  static const Kind kinds[] = {{"'<f4'", 4, true, true},  {"'<f8'", 8, true, true},
                               {"'<i8'", 8, false, true}, {"'<i4'", 4, false, true},
                               {"'<i2'", 2, false, true}, {"'|i1'", 1, false, true},
                               {"'|u1'", 1, false, false}, {"'<u2'", 2, false, false},
                               {"'<u4'", 4, false, false}, {"'|b1'", 1, false, false}};
  const Kind *kind = nullptr;
  for (const Kind &k : kinds)
    if (descr == k.descr)
      kind = &k;
  bool wantFloat = in.dtype == LOOMRT_F32;
  if (!kind || kind->isFloat != wantFloat)
    return fail("dtype " + (descr.empty() ? std::string("missing") : descr) + "; input '" +
                in.name + "' takes " +
                (wantFloat ? "float32 or float64" : "integers (int64, int32, uint8, ...)"));
  // shape: (N, d1, ...)
  std::vector<int64_t> shape;
  if (shapeT.size() < 2 || shapeT.front() != '(' || shapeT.back() != ')')
    return fail("no shape in the header");
  for (size_t i = 1; i + 1 < shapeT.size();) {
    while (i + 1 < shapeT.size() && (shapeT[i] == ' ' || shapeT[i] == ','))
      ++i;
    if (i + 1 >= shapeT.size())
      break;
    char *end = nullptr;
    errno = 0;
    long long d = std::strtoll(shapeT.c_str() + i, &end, 10);
    if (end == shapeT.c_str() + i || errno || d < 0)
      return fail("bad shape " + shapeT);
    shape.push_back(d);
    i = size_t(end - shapeT.c_str());
  }
  std::vector<int64_t> want(in.shape, in.shape + in.rank);
  want[0] = exactRows >= 0 ? exactRows : -1;
  bool match = int(shape.size()) == in.rank && !shape.empty() &&
               (exactRows >= 0 ? shape[0] == exactRows : shape[0] >= 1);
  for (int d = 1; match && d < in.rank; ++d)
    match = shape[size_t(d)] == in.shape[d];
  if (!match)
    return fail("shape " + shapeText(shape) + "; expected " + shapeText(want) +
                (exactRows >= 0 ? "" : " (N >= 1 rows of the model's input)"));
  // Sizes from the header are trusted only once they agree with the file.
  size_t rowElems = 1;
  for (int d = 1; d < in.rank; ++d)
    rowElems *= size_t(in.shape[d]);
  size_t avail = size_t(st.st_size) - dataStart;
  if (rowElems == 0 || uint64_t(shape[0]) > avail / kind->bytes / rowElems ||
      size_t(shape[0]) * rowElems * kind->bytes != avail)
    return fail("holds " + std::to_string(avail) + " bytes of data; its header says " +
                shapeText(shape) + " of " + std::to_string(kind->bytes) + "-byte values");

  size_t n = size_t(shape[0]) * rowElems, outBytes = wantFloat ? 4 : 8;
  auto *out = static_cast<uint8_t *>(alloc(n * outBytes));
  if (!out)
    return fail("cannot allocate " + std::to_string(n * outBytes) + " bytes for it");
  rows = shape[0];
  // Read and convert in chunks: a feature table of tens of gigabytes is
  // never held twice.
  constexpr size_t kChunk = size_t(1) << 24;
  std::vector<uint8_t> raw;
  for (size_t first = 0; first < n; first += kChunk) {
    size_t count = std::min(kChunk, n - first);
    raw.resize(count * kind->bytes);
    if (!f.read(reinterpret_cast<char *>(raw.data()), std::streamsize(raw.size())))
      return fail("cannot read the data");
    for (size_t j = 0; j < count; ++j) {
      size_t i = first + j;
      const uint8_t *p = raw.data() + j * kind->bytes;
      if (wantFloat) {
        double v;
        if (kind->bytes == 4) {
          float x;
          std::memcpy(&x, p, 4);
          v = x;
        } else {
          std::memcpy(&v, p, 8);
        }
        // Finite as float32, the type it becomes: 1e300 is a finite
        // float64 and an infinite float32.
        float x = float(v);
        if (!std::isfinite(v) || !std::isfinite(x)) {
          char shown[32];
          std::snprintf(shown, sizeof shown, "%g", v);
          return fail(std::string("value ") + shown + " at element " + std::to_string(i) +
                      (std::isfinite(v) ? " is outside float32's range" : " is not finite"));
        }
        std::memcpy(out + i * 4, &x, 4);
      } else {
        uint64_t u = 0;
        std::memcpy(&u, p, kind->bytes); // little-endian
        int64_t v = int64_t(u);
        if (kind->isSigned && kind->bytes < 8 && (u >> (8 * kind->bytes - 1)) & 1)
          v = int64_t(u | (~uint64_t(0) << (8 * kind->bytes))); // sign-extend
        if (in.index_limit > 0 && (v < 0 || v >= in.index_limit))
          return fail("value " + std::to_string(v) + " at element " + std::to_string(i) +
                      " is outside [0, " + std::to_string(in.index_limit) + ")");
        std::memcpy(out + i * 8, &v, 8);
      }
    }
  }
  return true;
}

bool loadNpy(const std::string &path, const loomrt_input_desc &in, ArrayInput &out,
             std::string &error) {
  size_t rowElems = 1;
  for (int d = 1; d < in.rank; ++d)
    rowElems *= size_t(in.shape[d]);
  out.path = path;
  out.rowBytes = rowElems * (in.dtype == LOOMRT_F32 ? 4 : 8);
  return readNpy(
      path, in, -1,
      [&](size_t bytes) -> void * {
        out.bytes.assign(bytes, 0);
        return out.bytes.data();
      },
      out.rows, error);
}

} // namespace loomrt
