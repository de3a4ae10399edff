//===- Lowered.cpp - what counts as a lowered module ---------------------===//
#include "dialects/Loom/LoomDialect.h"
#include "loom/Passes/LoomRT.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

using namespace mlir;
using namespace mlir::loom;

bool mlir::loom::isLoweredToRuntime(ModuleOp module) {
  for (func::FuncOp fn : module.getOps<func::FuncOp>()) {
    auto ty = fn.getFunctionType();
    if (llvm::any_of(llvm::concat<const Type>(ty.getInputs(), ty.getResults()),
                     [](Type t) { return isa<TensorType>(t); }))
      return false;
    if (fn.walk([](Operation *op) {
            return isa<LoomDialect>(op->getDialect()) ? WalkResult::interrupt()
                                                      : WalkResult::advance();
          }).wasInterrupted())
      return false;
  }
  return true;
}
