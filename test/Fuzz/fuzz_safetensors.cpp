//===- fuzz_safetensors.cpp - the checkpoint loader on arbitrary files ----===//
//
// The loader reads paths, so each input is written to one file of ours and
// loaded as the three tensors the runtime's checkpoint test saves (seeds
// are such files), then its metadata is read.
//
//===----------------------------------------------------------------------===//
#include "FuzzFiles.h"
#include "loomrt/loomrt.h"

#include <cstdint>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string path = loom::fuzz::asFile("loom-fuzz-st", data, size);
  std::vector<float> w(12);
  std::vector<uint16_t> h(5);
  float s = 0;
  loomrt_tensor_ref refs[] = {{"w", LOOMRT_F32, 2, {3, 4}, w.data()},
                              {"h", LOOMRT_BF16, 1, {5}, h.data()},
                              {"s", LOOMRT_F32, 0, {}, &s}};
  (void)loomrt_checkpoint_load(path.c_str(), refs, 3);
  (void)loomrt_checkpoint_load(path.c_str(), refs, 1);
  char buf[64];
  (void)loomrt_checkpoint_metadata(path.c_str(), "step", buf, sizeof buf);
  return 0;
}
