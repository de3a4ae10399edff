//===- InitAll.cpp - one place that registers Loom's dialects and passes --===//
#include "loom/InitAll.h"

#include "dialects/Loom/LoomDialect.h"
#include "dialects/LoomRT/LoomRTDialect.h"
#include "loom/Passes/Loom.h"
#include "loom/Passes/LoomRT.h"
#include "loom/Passes/LoomToLoomRT.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/Extensions/InlinerExtension.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/PrettyStackTrace.h"

void loom::registerAllDialects(mlir::DialectRegistry &registry) {
  registry.insert<mlir::loom::LoomDialect, mlir::loomrt::LoomRTDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect, mlir::tensor::TensorDialect>();
  mlir::func::registerInlinerExtension(registry);
}

void loom::installCrashMessage() {
  llvm::setBugReportMsg("Loom crashed: this is a bug in Loom, not in LLVM. Please report it "
                        "to the Loom project with the command line, the input model and "
                        "the stack trace below.\n");
}

void loom::registerAllPasses() {
  mlir::loom::registerLoomPasses();
  mlir::loom::registerLoomToLoomRTPasses();
  mlir::loom::registerLoomRTPasses();
  // Generic cleanups that Loom pipelines run between phases.
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  mlir::registerInlinerPass();
}
