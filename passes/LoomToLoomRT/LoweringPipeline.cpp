//===- LoweringPipeline.cpp - the lowering tail of the pipeline ----------===//
//
// What happens to a step after it is distributed and scheduled: the
// conversion to loomrt calls, then the loomrt transforms the binary gets.
//
//===----------------------------------------------------------------------===//
#include "loom/Passes/LoomRT.h"
#include "loom/Passes/LoomToLoomRT.h"

using namespace mlir;
using namespace mlir::loom;

LogicalResult mlir::loom::lowerForSimulation(ModuleOp copy) {
  if (failed(lowerToRuntime(copy, LoomDialect::kTrainStep, /*comments=*/false)))
    return failure();
  if (!copy->hasAttr(LoomDialect::NoFuseAttrHelper::getNameStr())) {
    composeCopies(copy);
    fuseEpilogues(copy);
    fuseElementwise(copy);
  }
  if (!copy->hasAttr(LoomDialect::OnlineArenaAttrHelper::getNameStr()))
    planArena(copy);
  return success();
}
