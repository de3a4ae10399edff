//===- FuzzCommon.h - what every compiler fuzz target shares --------------===//
//
// A fresh context per input (attributes of one input never pile up in the
// next), diagnostics swallowed (a refused input is the expected outcome), and
// the rest of the compiler run on whatever the front end accepted: autodiff,
// the optimizer, and C++ code generation into a null stream. A crash, a hang
// or a sanitizer report anywhere on that path is a finding.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_TEST_FUZZ_FUZZCOMMON_H
#define LOOM_TEST_FUZZ_FUZZCOMMON_H

#include "loom/Codegen.h"
#include "loom/InitAll.h"
#include "loom/Passes/Loom.h"
#include "loom/Passes/LoomRT.h"
#include "loom/Passes/LoomToLoomRT.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_ostream.h"

namespace loom::fuzz {

inline mlir::DialectRegistry &registry() {
  static mlir::DialectRegistry *r = [] {
    auto *reg = new mlir::DialectRegistry();
    registerAllDialects(*reg);
    return reg;
  }();
  return *r;
}

/// A context for some inputs: single-threaded, diagnostics dropped. A new
/// one every 64 inputs: making one per input spent most of the time of a
/// run, and one for all inputs would grow without bound (types and
/// attributes are never freed).
struct Context {
  mlir::MLIRContext &ctx;
  static mlir::MLIRContext &shared() {
    static std::unique_ptr<mlir::MLIRContext> c;
    static unsigned uses = 0;
    if (!c || ++uses % 64 == 0) {
      c = std::make_unique<mlir::MLIRContext>(registry(), mlir::MLIRContext::Threading::DISABLED);
      c->getDiagEngine().registerHandler([](mlir::Diagnostic &) { return mlir::success(); });
    }
    return *c;
  }
  Context() : ctx(shared()) {}
};

/// The compiler after the front end: forward -> training step -> C++.
inline void compileRest(mlir::ModuleOp module) {
  if (failed(mlir::verify(module)))
    return;
  mlir::PassManager pm(module.getContext());
  if (!module.lookupSymbol("forward_backward") && module.lookupSymbol("forward"))
    pm.addPass(mlir::loom::createAutodiff());
  if (!module.lookupSymbol("train_step"))
    pm.addPass(mlir::loom::createAttachOptimizer());
  if (failed(pm.run(module)))
    return;
  CodegenOptions cg;
  cg.weightsFile = "fuzz.weights.safetensors";
  llvm::raw_null_ostream sink;
  (void)emitTrainingCpp(module, sink, cg);
}

} // namespace loom::fuzz

#endif
