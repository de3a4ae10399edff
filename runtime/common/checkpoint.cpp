// checkpoint.cpp: safetensors checkpoints, written atomically and loaded
// with strict checks (see loomrt.h).
#include "common/backend.h"
#include "common/checksum.h"
#include "common/file_util.h"
#include "common/json.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace loomrt {
namespace {

const char *dtypeName(loomrt_dtype dt) {
  return dt == LOOMRT_BF16 ? "BF16" : dt == LOOMRT_I64 ? "I64" : "F32";
}
size_t dtypeSize(loomrt_dtype dt) {
  return dt == LOOMRT_BF16 ? 2 : dt == LOOMRT_I64 ? 8 : 4;
}

/// Every tensor's CRC-32C is stored in the metadata under this prefix and
/// its name; a file that has them is verified tensor by tensor on load.
const char kCrcPrefix[] = "crc32c:";

std::string hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

std::string shapeStr(const int64_t *shape, int rank) {
  std::string s = "[";
  for (int d = 0; d < rank; ++d)
    s += (d ? ", " : "") + std::to_string(shape[d]);
  return s + "]";
}

int64_t numel(const loomrt_tensor_ref &t) {
  int64_t n = 1;
  for (int d = 0; d < t.rank; ++d)
    n *= t.shape[d];
  return n;
}

loomrt_status checkRefs(const char *fn, const loomrt_tensor_ref *ts,
                        size_t count) {
  if (count && !ts)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, std::string(fn) + ": null tensors");
  std::map<std::string, int> seen;
  for (size_t i = 0; i < count; ++i) {
    const loomrt_tensor_ref &t = ts[i];
    if (!t.name || !*t.name)
      return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                  std::string(fn) + ": tensor #" + std::to_string(i) +
                      " has no name");
    if (std::string(t.name) == "__metadata__" || seen[t.name]++)
      return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                  std::string(fn) + ": tensor name '" + t.name +
                      "' is reserved or repeated");
    if (t.rank < 0 || t.rank > LOOMRT_MAX_RANK ||
        (t.dtype != LOOMRT_F32 && t.dtype != LOOMRT_BF16 &&
         t.dtype != LOOMRT_I64))
      return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                  std::string(fn) + ": tensor '" + t.name +
                      "' has a bad rank or dtype");
    for (int d = 0; d < t.rank; ++d)
      if (t.shape[d] < 0)
        return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                    std::string(fn) + ": tensor '" + t.name +
                        "' has a negative dimension");
    if (numel(t) && !t.data)
      return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                  std::string(fn) + ": tensor '" + t.name + "' has no data");
  }
  return LOOMRT_OK;
}

/// Reads and parses the header; `dataStart` is the offset of the data.
loomrt_status readHeader(const char *path, FILE *&f, json::Value &header,
                         uint64_t &dataStart, uint64_t &fileSize) {
  // A regular file only: a FIFO or a device would hang or never end.
  std::string why;
  f = fopenRegularForRead(path, kMaxCheckpointPartBytes, "checkpoint", why, &fileSize);
  if (!f)
    return fail(LOOMRT_ERR_IO, why);
  unsigned char len8[8];
  if (fileSize < 8 || std::fread(len8, 1, 8, f) != 8)
    return fail(LOOMRT_ERR_IO, std::string("'") + path +
                                   "' is not a safetensors file (too short)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | len8[i];
  if (n > fileSize - 8 || n > (uint64_t(100) << 20))
    return fail(LOOMRT_ERR_IO, std::string("'") + path +
                                   "' is not a safetensors file (header length " +
                                   std::to_string(n) + " out of range)");
  std::string text(n, '\0');
  if (std::fread(text.data(), 1, n, f) != n)
    return fail(LOOMRT_ERR_IO, std::string("cannot read the header of '") +
                                   path + "'");
  std::string err;
  if (!json::parse(text, header, err) || !header.is_object())
    return fail(LOOMRT_ERR_IO, std::string("'") + path +
                                   "' has a malformed header: " +
                                   (err.empty() ? "not an object" : err));
  dataStart = 8 + n;
  return LOOMRT_OK;
}

struct FileCloser {
  FILE *&f;
  ~FileCloser() {
    if (f)
      std::fclose(f);
  }
};

} // namespace
} // namespace loomrt

using namespace loomrt;

extern "C" {

loomrt_status loomrt_checkpoint_save(const char *path,
                                     const loomrt_tensor_ref *ts, size_t count,
                                     const char *const *keys,
                                     const char *const *values,
                                     size_t metaCount) {
  if (!path || !*path)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "checkpoint_save: no path");
  if (loomrt_status s = checkRefs("checkpoint_save", ts, count))
    return s;
  if (metaCount && (!keys || !values))
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                "checkpoint_save: null metadata arrays");
  std::string h = "{\"__metadata__\":{";
  for (size_t i = 0; i < metaCount; ++i) {
    if (!keys[i] || !values[i])
      return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                  "checkpoint_save: null metadata entry");
    if (std::strncmp(keys[i], kCrcPrefix, sizeof kCrcPrefix - 1) == 0)
      return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                  std::string("checkpoint_save: metadata key '") + keys[i] + "' is reserved");
    h += json::quote(keys[i]) + ":" + json::quote(values[i]) + ",";
  }
  for (size_t i = 0; i < count; ++i) {
    const loomrt_tensor_ref &t = ts[i];
    size_t bytes = size_t(numel(t)) * dtypeSize(t.dtype);
    h += json::quote(kCrcPrefix + std::string(t.name)) + ":\"" +
         hex32(crc32c(0, t.data, bytes)) + "\"" + (i + 1 < count ? "," : "");
  }
  if (h.back() == ',')
    h.pop_back();
  h += "}";
  uint64_t offset = 0;
  std::vector<std::pair<const void *, size_t>> parts;
  for (size_t i = 0; i < count; ++i) {
    const loomrt_tensor_ref &t = ts[i];
    uint64_t bytes = uint64_t(numel(t)) * dtypeSize(t.dtype);
    h += "," + json::quote(t.name) +
         ":{\"dtype\":\"" + dtypeName(t.dtype) + "\",\"shape\":[";
    for (int d = 0; d < t.rank; ++d)
      h += (d ? "," : "") + std::to_string(t.shape[d]);
    h += "],\"data_offsets\":[" + std::to_string(offset) + "," +
         std::to_string(offset + bytes) + "]}";
    parts.emplace_back(t.data, size_t(bytes));
    offset += bytes;
  }
  h += "}";
  // Pad the header with spaces to a multiple of 8 bytes (allowed by the
  // format) so the data that follows is 8-byte aligned.
  h.append((8 - h.size() % 8) % 8, ' ');
  unsigned char len8[8];
  for (int i = 0; i < 8; ++i)
    len8[i] = uint8_t(uint64_t(h.size()) >> (8 * i));
  parts.insert(parts.begin(), {{len8, 8}, {h.data(), h.size()}});
  return writeFileAtomic(path, parts);
}

loomrt_status loomrt_checkpoint_load(const char *path,
                                     const loomrt_tensor_ref *ts,
                                     size_t count) {
  if (!path)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "checkpoint_load: no path");
  if (loomrt_status s = checkRefs("checkpoint_load", ts, count))
    return s;
  FILE *f = nullptr;
  FileCloser closer{f};
  json::Value header;
  uint64_t dataStart, fileSize;
  if (loomrt_status s = readHeader(path, f, header, dataStart, fileSize))
    return s;
  std::string where = std::string("checkpoint '") + path + "': ";
  const json::Value *meta = json::get(header, "__metadata__");
  if (meta && !meta->is_object())
    return fail(LOOMRT_ERR_IO, where + "has a __metadata__ that is not an object");
  bool anyCrc = false;
  if (meta)
    for (auto &[key, v] : meta->items())
      anyCrc |= key.rfind(kCrcPrefix, 0) == 0;
  // A file that says it is one of Loom's checkpoint parts was written with
  // a checksum for every tensor: one without them was edited, and is not
  // loaded unchecked.
  if (const std::string *format = json::string(meta ? json::get(*meta, "format") : nullptr);
      format && format->rfind("loom checkpoint", 0) == 0 && !anyCrc)
    return fail(LOOMRT_ERR_IO, where + "says it is a Loom checkpoint part but has no crc32c "
                                       "checksums: it was not written by Loom, or was edited");
  // Every tensor in the file must be asked for, and the reverse.
  for (auto &[name, v] : header.items()) {
    if (name == "__metadata__")
      continue;
    bool wanted = false;
    for (size_t i = 0; i < count && !wanted; ++i)
      wanted = name == ts[i].name;
    // A working copy `P.work` that checkpoints before 2026-11-29 held: the
    // driver makes it from its master P, loaded here (whatever the plan).
    size_t n = name.size();
    for (size_t i = 0; i < count && !wanted && n > 5 && name.compare(n - 5, 5, ".work") == 0; ++i)
      wanted = name.compare(0, n - 5, ts[i].name) == 0 && std::strlen(ts[i].name) == n - 5;
    if (!wanted)
      return fail(LOOMRT_ERR_IO, where + "has tensor '" + name +
                                     "' that the model does not have");
  }
  for (size_t i = 0; i < count; ++i) {
    const loomrt_tensor_ref &t = ts[i];
    const json::Value *e = json::get(header, t.name);
    if (!e)
      return fail(LOOMRT_ERR_IO, where + "has no tensor '" + t.name + "'");
    const std::string *dt = json::string(json::get(*e, "dtype"));
    const json::Value *shape = json::get(*e, "shape"), *offs = json::get(*e, "data_offsets");
    if (!dt || !shape || !shape->is_array() || !offs || !offs->is_array() || offs->size() != 2)
      return fail(LOOMRT_ERR_IO, where + "entry of '" + t.name +
                                     "' lacks dtype, shape or data_offsets");
    if (*dt != dtypeName(t.dtype))
      return fail(LOOMRT_ERR_IO, where + "tensor '" + t.name + "' is " +
                                     *dt + ", expected " +
                                     dtypeName(t.dtype));
    std::vector<int64_t> got;
    for (auto &d : *shape) {
      int64_t n;
      got.push_back(json::integer(d, n) ? n : -1);
    }
    if (got.size() != size_t(t.rank) ||
        !std::equal(got.begin(), got.end(), t.shape))
      return fail(LOOMRT_ERR_IO,
                  where + "tensor '" + t.name + "' has shape " +
                      shapeStr(got.data(), int(got.size())) + ", expected " +
                      shapeStr(t.shape, t.rank));
    int64_t begin = 0, end = 0;
    uint64_t bytes = uint64_t(numel(t)) * dtypeSize(t.dtype);
    if (!json::integer((*offs)[0], begin) || !json::integer((*offs)[1], end) || begin < 0 ||
        end < begin || uint64_t(end - begin) != bytes ||
        dataStart + uint64_t(end) > fileSize)
      return fail(LOOMRT_ERR_IO, where + "data of '" + t.name +
                                     "' is out of bounds or the wrong size "
                                     "(truncated file?)");
    if (std::fseek(f, long(dataStart + uint64_t(begin)), SEEK_SET) != 0 ||
        std::fread(t.data, 1, bytes, f) != bytes)
      return fail(LOOMRT_ERR_IO, where + "cannot read the data of '" +
                                     t.name + "'");
    // Files from other writers have no checksums; ours have one for
    // every tensor.
    const json::Value *crc = meta ? json::get(*meta, kCrcPrefix + std::string(t.name)) : nullptr;
    if (anyCrc && !crc)
      return fail(LOOMRT_ERR_IO, where + "has checksums but none for '" + t.name + "'");
    if (crc && (!crc->is_string() ||
                *json::string(crc) != hex32(crc32c(0, t.data, bytes))))
      return fail(LOOMRT_ERR_IO, where + "tensor '" + t.name +
                                     "' does not match its checksum: the file is corrupt");
  }
  return LOOMRT_OK;
}

loomrt_status loomrt_checkpoint_metadata(const char *path, const char *key,
                                         char *buf, size_t len) {
  if (!path || !key || !buf || !len)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                "checkpoint_metadata: null argument");
  FILE *f = nullptr;
  FileCloser closer{f};
  json::Value header;
  uint64_t dataStart, fileSize;
  if (loomrt_status s = readHeader(path, f, header, dataStart, fileSize))
    return s;
  const json::Value *meta = json::get(header, "__metadata__");
  const std::string *v = json::string(meta ? json::get(*meta, key) : nullptr);
  if (!v)
    return fail(LOOMRT_ERR_IO, std::string("checkpoint '") + path +
                                   "' has no metadata '" + key + "'");
  if (v->size() + 1 > len)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                "checkpoint_metadata: buffer too small");
  std::memcpy(buf, v->c_str(), v->size() + 1);
  return LOOMRT_OK;
}

} // extern "C"
