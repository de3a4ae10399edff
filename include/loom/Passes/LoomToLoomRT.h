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
#include "mlir/Pass/PassManager.h"

#include <functional>
#include <string>

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

/// What the lowering pipeline does after the conversion.
struct LoweringOptions {
  /// The entry point (and the functions it calls) to lower.
  std::string entry = LoomDialect::kTrainStep.str();
  /// Each loom op's text as a `loomrt.comment` before its calls.
  bool comments = true;
  /// The CPU's updates on the step's host thread (loom-form-host-tasks).
  bool hostThread = false;
  /// loom-compose-copies, loom-fuse-epilogues and loom-fuse (loomc
  /// --no-fuse: off).
  bool fuse = true;
  /// loom-plan-arena (loomc --arena=online: off).
  bool planArena = true;
  /// loom-capture-graphs (loomc --no-graphs: off).
  bool graphs = true;

  /// The lowering of the training step a binary gets: what loomc's flags
  /// and the passes' host-thread, fuse and plan-arena options say.
  static LoweringOptions ofStep(bool hostThread, bool fuse, bool planArena, bool graphs) {
    LoweringOptions o;
    o.hostThread = hostThread;
    o.fuse = fuse;
    o.planArena = planArena;
    o.graphs = graphs;
    return o;
  }
};

/// The lowering pipeline, defined once: loom-lower-to-runtime, then
/// loom-insert-frees, loom-form-host-tasks (with `hostThread`), the fusion
/// passes (with `fuse`) and loom-plan-arena (with `planArena`). loomc,
/// loom-run, code generation and the step simulation all run this list.
struct LoweringStep {
  std::function<std::unique_ptr<Pass>()> pass;
  std::function<LogicalResult(ModuleOp)> run;
};
SmallVector<LoweringStep> loweringSteps(const LoweringOptions &options);
/// The steps as passes on `pm` (a pass manager on modules).
void buildLoweringPipeline(OpPassManager &pm, const LoweringOptions &options);
/// The steps run directly on `module`: for callers inside a running pass
/// (the step simulation of loom-interleave-offload), where a nested pass
/// manager may not run on a module that is not the pass's own.
LogicalResult runLoweringPipeline(ModuleOp module, const LoweringOptions &options);

/// runLoweringPipeline for the step simulation's copy of a module: as
/// `options` (the binary's), without comments.
LogicalResult lowerForSimulation(ModuleOp copy, LoweringOptions options);

/// Simulates one @train_step of `module` (not modified) on `hw`: lowers a
/// copy to loomrt as `lowering` says the binary's step is (unless it is
/// lowered already) and prices that (loom/StepSimulation.h), so the
/// prediction is of the calls the binary makes.
FailureOr<StepPrediction> simulateStep(ModuleOp module, const ::loom::cost::Hardware &hw,
                                       bool keepSpans, const LoweringOptions &lowering,
                                       llvm::StringRef function = LoomDialect::kTrainStep);

} // namespace mlir::loom

#endif // LOOM_PASSES_LOOMTOLOOMRT_H
