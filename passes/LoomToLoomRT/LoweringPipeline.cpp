//===- LoweringPipeline.cpp - the lowering tail of the pipeline ----------===//
//
// What happens to a step after it is distributed and scheduled: the
// conversion to loomrt calls, then the loomrt passes the binary gets. One
// list, run as passes by loomc, loom-run and code generation, and as
// direct calls by the step simulation (inside a running pass).
//
//===----------------------------------------------------------------------===//
#include "loom/Passes/LoomRT.h"
#include "loom/Passes/LoomToLoomRT.h"

using namespace mlir;
using namespace mlir::loom;

SmallVector<LoweringStep> mlir::loom::loweringSteps(const LoweringOptions &o) {
  SmallVector<LoweringStep> steps;
  auto always = [](auto fn) {
    return [fn](ModuleOp m) {
      fn(m);
      return success();
    };
  };
  LowerToRuntimeOptions lo;
  lo.entry = o.entry;
  lo.comments = o.comments;
  steps.push_back({[lo] { return createLowerToRuntime(lo); },
                   [o](ModuleOp m) { return lowerToRuntime(m, o.entry, o.comments); }});
  steps.push_back({[] { return createInsertFrees(); }, always(insertFrees)});
  if (o.hostThread)
    steps.push_back({[] { return createFormHostTasks(); },
                     always([](ModuleOp m) { formHostTasks(m); })});
  if (o.fuse) {
    steps.push_back({[] { return createComposeCopies(); }, always(composeCopies)});
    steps.push_back({[] { return createFuseEpilogues(); }, always(fuseEpilogues)});
    steps.push_back({[] { return createFuseElementwise(); }, always(fuseElementwise)});
    steps.push_back({[] { return createBatchUpdates(); }, always(batchUpdates)});
  }
  if (o.planArena)
    steps.push_back({[] { return createPlanArena(); },
                     always([](ModuleOp m) { planArena(m); })});
  if (o.graphs)
    steps.push_back({[] { return createCaptureGraphs(); }, always(captureGraphs)});
  return steps;
}

void mlir::loom::buildLoweringPipeline(OpPassManager &pm, const LoweringOptions &o) {
  for (LoweringStep &s : loweringSteps(o))
    pm.addPass(s.pass());
}

LogicalResult mlir::loom::runLoweringPipeline(ModuleOp module, const LoweringOptions &o) {
  for (LoweringStep &s : loweringSteps(o))
    if (failed(s.run(module)))
      return failure();
  return success();
}

LogicalResult mlir::loom::lowerForSimulation(ModuleOp copy, LoweringOptions o) {
  o.comments = false;
  return runLoweringPipeline(copy, o);
}
