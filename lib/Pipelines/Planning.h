//===- Planning.h - loomc's plans (private to lib/Pipelines) ----*- C++ -*-===//
#ifndef LOOM_LIB_PIPELINES_PLANNING_H
#define LOOM_LIB_PIPELINES_PLANNING_H

#include "loom/Pipelines.h"
#include "loom/StepSimulation.h"

#include <optional>
#include <string>

namespace loom {

/// " NAME BYTES B SECONDS s;" for each communicator of a prediction.
std::string commSummary(const mlir::loom::StepPrediction &p);

/// One candidate of the hierarchy plan: hpZ's secondary levels ("" none)
/// and qgZ's first stage ("" when qgZ is off).
struct HierarchyCandidate {
  std::string secondary, qgzInner;
  mlir::loom::StepPrediction pred;
};

/// --hierarchy=auto (Planning.cpp says how); nullopt after an error.
std::optional<HierarchyCandidate>
planHierarchy(mlir::ModuleOp module, Phase reached, PipelineOptions po,
              const cost::Hardware &hw, llvm::ArrayRef<std::pair<std::string, int64_t>> levels);

/// --recompute=auto: sets po.recompute and po.recomputeUnits for a peak of
/// at most `budget` bytes; false after an error.
bool planRecompute(mlir::ModuleOp module, Phase reached, PipelineOptions &po,
                   const cost::Hardware &hw, double budget);

/// --prefetch=auto (ZeRO-3): sets po.prefetch to the fastest window of 0-3
/// gathers whose step fits `budget` bytes (1 when none does); false after
/// an error.
bool planPrefetch(mlir::ModuleOp module, Phase reached, PipelineOptions &po,
                  const cost::Hardware &hw, double budget);

} // namespace loom

#endif // LOOM_LIB_PIPELINES_PLANNING_H
