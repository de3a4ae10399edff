//===- Flags.h - what loomc's flags decide ---------------------------------===//
//
// The checks of loomc's flags that need no model (Flags.cpp), and what they
// decide, read by the driver (Loomc.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_LIB_PIPELINES_FLAGS_H
#define LOOM_LIB_PIPELINES_FLAGS_H

#include "loom/CodecFidelity.h"
#include "loom/Pipelines.h"

#include "llvm/ADT/SmallVector.h"

#include <optional>
#include <string>
#include <utility>

namespace loom {

struct LoomcOptions;

/// What loomc's flags decide before any model is read: checked together,
/// so a bad flag costs no work.
struct FlagDecisions {
  Phase phase = Phase::Binary;
  // The folder of the libloomrt.so a binary links (--runtime-dir or the
  // target's default).
  std::string runtimeDir;
  // The topology: innermost level first (ranks number with it fastest).
  llvm::SmallVector<std::pair<std::string, int64_t>> levels;
  int64_t world = 1;
  bool dataParallel = false;
  std::string hpzLevels;
  int64_t qwzBlock = 0, qgzBlock = 0;
  bool onebit = false;
  std::optional<PipelineOptions::Diloco> diloco;
  int64_t pipelineChunks = 1; // --pipeline-schedule=interleaved:V's V
  // ZeRO-3 over several levels, no explicit hpz: plan the hierarchy.
  bool planHpz = false;
  // --pipeline-parallel: the level whose ranks are the stages (the
  // outermost).
  std::string pipelineLevel;
  // --model with its batch split over the data-parallel ranks.
  std::string modelSpec;
  // --replan: 0 off, 1 once, 2 continuous.
  int replan = 0;
};

/// Every check of loomc's flags that needs no model; the first error, or
/// nothing with `d` filled in.
std::optional<std::string> checkFlags(const LoomcOptions &o, FlagDecisions &d);

/// The compression setting the flags ask for (CodecFidelity.h's terms).
cost::CompressionSetting compressionOf(const LoomcOptions &o, const FlagDecisions &d);

} // namespace loom

#endif // LOOM_LIB_PIPELINES_FLAGS_H
