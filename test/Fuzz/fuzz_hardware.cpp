//===- fuzz_hardware.cpp - the hardware description (--hardware) -----------===//
//
// Each input is a hardware description file's text: parseHardware accepts
// it or says why, never crashes (a 40,000-deep nesting overflowed
// llvm::json's recursive parser), and what it accepts has every rate in
// range, so the cost model answers with finite times.
//
//===----------------------------------------------------------------------===//
#include "loom/CostModel.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size), error;
  std::optional<loom::cost::Hardware> hw = loom::cost::parseHardware(text, error);
  if (!hw) {
    if (error.empty()) {
      std::fprintf(stderr, "refused without a reason\n");
      std::abort();
    }
    return 0;
  }
  double t = loom::cost::updateTime(*hw, 1e8, 0.0).total;
  if (!(t > 0) || !std::isfinite(t)) {
    std::fprintf(stderr, "an accepted description predicts %g s for a CPU update\n", t);
    std::abort();
  }
  // What it writes back, it reads again.
  if (!loom::cost::parseHardware(loom::cost::toJson(*hw), error)) {
    std::fprintf(stderr, "its own JSON is refused: %s\n", error.c_str());
    std::abort();
  }
  return 0;
}
