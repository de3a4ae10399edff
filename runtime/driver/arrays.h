// arrays.h: the training binary's array inputs (LOOMRT_TASK_ARRAYS: a
// classifier's features and labels, a graph model's adjacency), one NumPy
// .npy file per input of the step, read and checked before any training.
#ifndef LOOMRT_DRIVER_ARRAYS_H
#define LOOMRT_DRIVER_ARRAYS_H

#include "loomrt/train.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace loomrt {

/// One input's whole dataset: N rows of the input's row shape, converted to
/// its dtype (f32 from float32/float64, i64 from any integer type).
struct ArrayInput {
  std::string path;
  int64_t rows = 0;
  size_t rowBytes = 0;
  std::vector<uint8_t> bytes;
};

/// Reads `path` (.npy, format 1-3, C order, little-endian) for input `in`:
/// shape [N, in.shape[1:]...] with N >= 1, every float finite and every
/// index in [0, in.index_limit) when that is set. False with a one-line
/// message naming the file and what was expected.
bool loadNpy(const std::string &path, const loomrt_input_desc &in, ArrayInput &out,
             std::string &error);

/// The reader under loadNpy: checks the file as loadNpy does (with
/// exactRows >= 0 it must have exactly that many rows), then converts it
/// in chunks into the buffer alloc(bytes) returns (null: refused), so a
/// table bigger than half the host's memory is read straight to where it
/// stays (pinned memory for a zero-copy feature table).
bool readNpy(const std::string &path, const loomrt_input_desc &in, int64_t exactRows,
             const std::function<void *(size_t)> &alloc, int64_t &rows, std::string &error);

} // namespace loomrt

#endif
