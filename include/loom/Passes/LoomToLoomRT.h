//===- LoomToLoomRT.h - loom IR to loomrt calls (passes/LoomToLoomRT) -*- C++ -*-===//
//
// The conversion of a training step in loom IR to the runtime calls the
// binary makes (loomrt IR), the lowering pipeline that follows it (the
// loomrt transforms of include/loom/Passes/LoomRT.h), and the step
// simulation of a loom module, which lowers a copy with that pipeline and
// prices it. Nothing here uses the loom transforms (passes/Loom).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_PASSES_LOOMTOLOOMRT_H
#define LOOM_PASSES_LOOMTOLOOMRT_H

#include "dialects/Loom/LoomOps.h"
#include "loom/StepSimulation.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::loom {

#define GEN_PASS_DECL
#include "passes/LoomToLoomRT/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/LoomToLoomRT/Passes.h.inc"

/// loom-lower-to-runtime's work on `module` from @`entry` (and the
/// functions it calls); errors are reported on the ops. `comments`: each
/// loom op's text before its calls.
LogicalResult lowerToRuntime(ModuleOp module, StringRef entry = LoomDialect::kTrainStep,
                             bool comments = true);

/// lowerToRuntime for the step simulation's copy of `module`, with the
/// fusion the binary gets (none where the module has loom.no_fuse) and its
/// arena plan (none where it has loom.online_arena).
LogicalResult lowerForSimulation(ModuleOp copy);

/// Simulates one @train_step of `module` (not modified) on `hw`: lowers a
/// copy to loomrt (unless it is lowered already) and prices that
/// (loom/StepSimulation.h), so the prediction is of the calls the binary
/// makes.
FailureOr<StepPrediction> simulateStep(ModuleOp module, const ::loom::cost::Hardware &hw,
                                       bool keepSpans,
                                       llvm::StringRef function = LoomDialect::kTrainStep);

} // namespace mlir::loom

#endif // LOOM_PASSES_LOOMTOLOOMRT_H
