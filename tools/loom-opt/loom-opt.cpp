//===- loom-opt.cpp - run any Loom pass on any Loom IR --------------------===//
#include "loom/InitAll.h"
#include "loom/Pipelines.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  loom::installCrashMessage();
  mlir::DialectRegistry registry;
  loom::registerAllDialects(registry);
  loom::registerAllPasses();
  loom::registerLoomPipeline();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "Loom optimizer driver\n", registry));
}
