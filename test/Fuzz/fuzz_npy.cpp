//===- fuzz_npy.cpp - the training binary's .npy input reader -------------===//
//
// Each input is a .npy file (--input NAME=FILE.npy); the first byte chooses
// the input it is read for, as binaries of different models do: a float
// [N, 4] feature table, or int labels [N] below 10.
//
//===----------------------------------------------------------------------===//
#include "FuzzFiles.h"
#include "driver/arrays.h"

#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const loomrt_input_desc inputs[] = {
      {"x", LOOMRT_F32, 2, {8, 4}, 0},
      {"labels", LOOMRT_I64, 1, {8}, 10},
  };
  const loomrt_input_desc &in = inputs[size ? data[0] % 2 : 0];
  std::string path = loom::fuzz::asFile("loom-fuzz-npy", data + (size ? 1 : 0),
                                        size ? size - 1 : 0);
  loomrt::ArrayInput out;
  std::string error;
  (void)loomrt::loadNpy(path, in, out, error);
  return 0;
}
