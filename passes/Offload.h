//===- Offload.h - offload schedules and their simulation -------*- C++ -*-===//
//
// Shared by loom-offload-optimizer (applies a placement per parameter),
// loom-interleave-offload (plans one per subgroup by simulating candidate
// schedules) and loomc (prints the simulated step, --timeline writes it).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_PASSES_OFFLOAD_H
#define LOOM_PASSES_OFFLOAD_H

#include "loom/CostModel.h"
#include "loom/StepSimulation.h"
#include "dialects/Loom/LoomOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

#include <string>
#include <vector>

namespace mlir::loom {

/// The placement `mode` gives each of `params`.
FailureOr<SmallVector<UpdatePlace>> offloadPlaces(ModuleOp module, OptimizerOffloadAttr mode,
                                                  ArrayRef<FlatSymbolRefAttr> params);
/// Replaces `call` by a copy of `callee`'s body (one block), its results by
/// the returned values.
void inlineCall(func::CallOp call, func::FuncOp callee);
/// Rewrites @train_step for `mode` (cpu, static:R or subgroups:
/// loom-offload-optimizer's work).
LogicalResult applyOffload(ModuleOp module, StringRef mode);

/// Simulates one @train_step of `module` (not modified) on `hw`: lowers a
/// copy to loomrt (unless it is lowered already) and prices that
/// (loom/StepSimulation.h), so the prediction is of the calls the binary
/// makes.
FailureOr<StepPrediction> simulateStep(ModuleOp module, const ::loom::cost::Hardware &hw,
                                       bool keepSpans,
                                       llvm::StringRef function = LoomDialect::kTrainStep);

/// loom-interleave-offload planning for `hw` as given (a caller that has
/// read, or scaled, the description already), instead of its option.
std::unique_ptr<Pass> createInterleaveOffloadFor(const ::loom::cost::Hardware &hw);

} // namespace mlir::loom

#endif // LOOM_PASSES_OFFLOAD_H
