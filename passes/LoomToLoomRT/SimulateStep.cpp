//===- StepSimulation.cpp - the step simulation from the passes ----------===//
//
// The passes plan on loom IR; the simulation prices the calls the binary
// makes (passes/LoomRT/StepSimulation.cpp). In between: the lowering, on a
// copy. loom-simulate-step is the simulation as a pass, for loom-opt.
//
//===----------------------------------------------------------------------===//
#include "dialects/LoomRT/LoomRTDialect.h"
#include "loom/Passes/LoomRT.h"
#include "loom/Passes/LoomToLoomRT.h"

#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir::loom {
#define GEN_PASS_DEF_SIMULATESTEP
#include "passes/LoomToLoomRT/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

FailureOr<StepPrediction> mlir::loom::simulateStep(ModuleOp module, const ::loom::cost::Hardware &hw,
                                                   bool keepSpans,
                                                   const LoweringOptions &lowering,
                                                   StringRef function) {
  if (isLoweredToRuntime(module))
    return simulateLoweredStep(module, hw, keepSpans, function);
  OwningOpRef<ModuleOp> copy = module.clone();
  if (failed(lowerForSimulation(*copy, lowering)))
    return failure();
  return simulateLoweredStep(*copy, hw, keepSpans, function);
}

namespace {
struct SimulateStep : public mlir::loom::impl::SimulateStepBase<SimulateStep> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::string err;
    std::optional<::loom::cost::Hardware> hw = loadHardware(hardware, err);
    if (!hw) {
      module.emitError() << "loom-simulate-step: " << err;
      return signalPassFailure();
    }
    FailureOr<StepPrediction> p =
        simulateStep(module, *hw, !timeline.empty(),
                     LoweringOptions::ofStep(hostThread, fuse, planArena, graphs));
    if (failed(p))
      return signalPassFailure();
    // Full precision: tests compare against times worked out by hand.
    llvm::errs() << llvm::formatv(
        "loom-simulate-step: @train_step on '{0}': step {1:e3} s, last gradient {2:e3} s, "
        "cpu updates {3:e3} s, gpu updates {4:e3} s, h2d {5:e3} s, d2h {6:e3} s; "
        "device memory {7} B ({8} B persistent, {9} B step arena)\n",
        hw->name, p->stepSeconds, p->backwardSeconds, p->cpuUpdateSeconds, p->gpuUpdateSeconds,
        p->h2dSeconds, p->d2hSeconds, int64_t(p->peakDeviceBytes()),
        int64_t(p->persistentDeviceBytes), int64_t(p->peakStepBytes));
    if (!timeline.empty()) {
      std::unique_ptr<llvm::ToolOutputFile> out = openOutputFile(timeline, &err);
      if (!out) {
        module.emitError() << "loom-simulate-step: " << err;
        return signalPassFailure();
      }
      out->os() << chromeTrace(*p, "loom-simulate-step (" + hw->name + ")");
      out->keep();
    }
    markAllAnalysesPreserved();
  }
};
} // namespace
