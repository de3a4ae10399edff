//===- FeaturePlacement.h - where a graph model's feature table lives -----===//
//
// loom-place-features' plan (passes/PlaceFeatures.cpp), shared with loomc,
// which prints it.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_FEATUREPLACEMENT_H
#define LOOM_FEATUREPLACEMENT_H

#include "dialects/Loom/LoomDialect.h"
#include "loom/CostModel.h"

#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace mlir::loom {

/// loom-place-features' decision for a graph model's feature table (none:
/// `any` false, for a model without one).
struct FeaturePlacementPlan {
  bool any = false;
  int64_t tableBytes = 0, rows = 0, rowBytes = 0; // rows: gathered a step
  double otherBytes = 0; // the step's own device memory, bounded above
  double budget = 0;     // device bytes the table may take
  double seconds[3] = {0, 0, 0}; // a step's gathers, by cost::GatherPlacement
  ::loom::cost::GatherPlacement chosen = ::loom::cost::GatherPlacement::Device;
  std::string why;
  /// One line for loomc: the table, the choice and why, each option's time.
  std::string describe() const;
};
/// Plans the placement (`forced`: auto, device, zero-copy or host-gather)
/// of @`function`'s features table on `hw`; errors on the module.
FailureOr<FeaturePlacementPlan>
planFeaturePlacement(ModuleOp module, const ::loom::cost::Hardware &hw, StringRef forced,
                     StringRef function = ::mlir::loom::LoomDialect::kForward);
/// Rewrites @`function` for the plan (loom-place-features).
LogicalResult applyFeaturePlacement(ModuleOp module, const FeaturePlacementPlan &plan,
                                    StringRef function = ::mlir::loom::LoomDialect::kForward);

} // namespace mlir::loom

#endif
