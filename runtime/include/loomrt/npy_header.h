// npy_header.h: the bytes before an .npy file's data, as numpy.save writes
// them (format 1.0): the magic, the version, and the header dict padded
// with spaces so the data starts on a 64-byte boundary. Header-only, so
// tools that do not link the runtime (loom-graphgen) write the same files
// as the training binary (--dump-samples); a public runtime header for that
// reason (scripts/check-layering.py keeps the compiler off private ones).
#ifndef LOOMRT_NPY_HEADER_H
#define LOOMRT_NPY_HEADER_H

#include <cstdint>
#include <string>
#include <vector>

namespace loomrt {

/// `descr` is NumPy's type string ("<i8", "<f4", ...); shape C order.
inline std::string npyPreamble(const char *descr, const std::vector<int64_t> &shape) {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i)
    dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1)
    dims += ",";
  std::string header = std::string("{'descr': '") + descr +
                       "', 'fortran_order': False, 'shape': (" + dims + "), }";
  header.append(63 - (10 + header.size()) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += char(1);
  out += char(0);
  out += char(header.size() & 0xff);
  out += char(header.size() >> 8);
  return out + header;
}

} // namespace loomrt

#endif
