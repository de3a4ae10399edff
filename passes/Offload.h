//===- Offload.h - offload schedules and their simulation -------*- C++ -*-===//
//
// Shared by loom-offload-optimizer (applies a placement per parameter),
// loom-interleave-offload (plans one per subgroup by simulating candidate
// schedules) and loomc --timeline (writes the simulated schedule).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_PASSES_OFFLOAD_H
#define LOOM_PASSES_OFFLOAD_H

#include "loom/CostModel.h"
#include "dialects/Loom/LoomOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

#include <string>
#include <vector>

namespace mlir::loom {


/// The placement `mode` (cpu, static:R or subgroups) gives each of `params`.
FailureOr<SmallVector<UpdatePlace>> offloadPlaces(ModuleOp module, StringRef mode,
                                                  ArrayRef<FlatSymbolRefAttr> params);
/// Replaces `call` by a copy of `callee`'s body (one block), its results by
/// the returned values.
void inlineCall(func::CallOp call, func::FuncOp callee);
/// Rewrites @train_step for `mode` (loom-offload-optimizer's work).
LogicalResult applyOffload(ModuleOp module, StringRef mode);

/// One span of the simulated step, on a lane: "gpu", "h2d", "d2h", "cpu",
/// "comm".
struct SimSpan {
  std::string lane, name;
  double start = 0, end = 0; // seconds from the step's start
};

/// What one training step costs on a machine, by simulating the streams
/// the generated code drives (docs/cost-model.md, "Step simulation").
struct StepPrediction {
  double stepSeconds = 0;     // until the host and every stream are done
  double backwardSeconds = 0; // until the last gradient exists
  double updateSeconds = 0;   // stepSeconds - backwardSeconds
  double cpuUpdateSeconds = 0, gpuUpdateSeconds = 0, h2dSeconds = 0, d2hSeconds = 0;
  double persistentDeviceBytes = 0; // parameters and state in device memory
  double peakStepBytes = 0;         // the step arena's size (fragmentation included)
  double peakDeviceBytes() const { return persistentDeviceBytes + peakStepBytes; }
  std::vector<SimSpan> spans;
};

/// Simulates one @train_step of `module` (not modified) on `hw`.
FailureOr<StepPrediction> simulateStep(ModuleOp module, const ::loom::cost::Hardware &hw,
                                       bool keepSpans);
/// The spans as Chrome trace JSON (one thread per lane), the format the
/// binary's --trace writes, so both open side by side in Perfetto.
std::string chromeTrace(const StepPrediction &p, llvm::StringRef title);
/// Device memory a plan may use: the capacity less what the runtime keeps
/// for itself (CUDA context, library workspaces, arena slack).
double usableDeviceBytes(const ::loom::cost::Hardware &hw);

/// loom-interleave-offload planning for `hw` as given (a caller that has
/// read, or scaled, the description already), instead of its option.
std::unique_ptr<Pass> createInterleaveOffloadFor(const ::loom::cost::Hardware &hw);

/// A preset name or a description file; nullopt and `error` otherwise.
std::optional<::loom::cost::Hardware> loadHardware(llvm::StringRef nameOrFile,
                                                   std::string &error);

} // namespace mlir::loom

#endif // LOOM_PASSES_OFFLOAD_H
