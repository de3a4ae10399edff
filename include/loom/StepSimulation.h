//===- StepSimulation.h - one training step on the cost model --*- C++ -*-===//
//
// The step simulation prices a lowered step (loomrt IR: the runtime calls
// the binary makes, with their streams, events and step-arena allocations)
// on a hardware description. loom-interleave-offload compares candidate
// plans with it, loomc prints its prediction and --timeline writes it as a
// Chrome trace (docs/cost-model.md, "Step simulation").
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_STEPSIMULATION_H
#define LOOM_STEPSIMULATION_H

#include "dialects/Loom/LoomDialect.h"
#include "loom/CostModel.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"

#include <map>
#include <string>
#include <vector>

namespace mlir::loom {

/// One span of the simulated step, on a lane: "gpu", "h2d", "d2h", "cpu",
/// "comm".
struct SimSpan {
  std::string lane, name;
  double start = 0, end = 0; // seconds from the step's start
};

/// What one training step costs on a machine, by simulating the streams
/// the generated code drives.
struct StepPrediction {
  double stepSeconds = 0;     // until the host and every stream are done
  double backwardSeconds = 0; // until the last gradient exists
  double updateSeconds = 0;   // stepSeconds - backwardSeconds
  double cpuUpdateSeconds = 0, gpuUpdateSeconds = 0, h2dSeconds = 0, d2hSeconds = 0;
  /// The compute stream's kernel time: its work without the gaps between
  /// kernels (gpu_kernel_gap_seconds), as CUPTI sums a step's kernels.
  double gpuKernelSeconds = 0;
  /// The compute roofs (flops over the product rate, attention at its
  /// rate; no memory roof, no slowdown) of the kernels issued before the
  /// last gradient exists: what the forward and backward cost at least on
  /// any plan with the same layout and more ZeRO, micro-batches or
  /// recompute (the same products, or more of them, or smaller ones at a
  /// lower rate), so --plan=auto's bound.
  double computeRoofSecondsToBackward = 0;
  double persistentDeviceBytes = 0; // parameters and state in device memory
  double peakStepBytes = 0;         // the step arena's size (fragmentation included)
  double peakDeviceBytes() const { return persistentDeviceBytes + peakStepBytes; }
  std::vector<SimSpan> spans;
  /// Bytes this rank sends a step (loomrt_comm_bytes_sent's count), and per
  /// communicator: the sum of their collectives' bytes and link time, keyed
  /// as the binary's JSON log keys comm_bytes_by_group (the group's level
  /// indices, "0,1"; the world's communicator under "").
  double commBytes = 0;
  struct Comm {
    double bytes = 0, seconds = 0;
  };
  std::map<std::string, Comm> comm;
  /// The module's topology levels, innermost first (the keys' indices).
  std::vector<std::string> levels;
  /// A key of `comm` for people: its levels joined by '+' ("gcd+gpu"), or
  /// "world".
  std::string groupName(llvm::StringRef key) const;
};

/// Simulates @train_step (or `function`: 1-bit Adam's @train_step_frozen)
/// of a lowered module (loom-lower-to-runtime's output; not modified) on
/// `hw`; `keepSpans` records every span.
FailureOr<StepPrediction>
simulateLoweredStep(ModuleOp lowered, const ::loom::cost::Hardware &hw, bool keepSpans,
                    llvm::StringRef function = ::mlir::loom::LoomDialect::kTrainStep);
/// The spans as Chrome trace JSON (one thread per lane), the format the
/// binary's --trace writes, so both open side by side in Perfetto.
std::string chromeTrace(const StepPrediction &p, llvm::StringRef title);
/// The parameters a second the step simulation charges a CPU Adam update
/// (the measured rate, or the DRAM rate's, times cpu_update_efficiency):
/// what a binary's own measurement is compared with.
double cpuAdamRate(const ::loom::cost::Hardware &hw);
/// Device memory a plan may use: the capacity less what the runtime keeps
/// for itself (CUDA context, library workspaces, arena slack).
double usableDeviceBytes(const ::loom::cost::Hardware &hw);
/// A preset name or a description file; nullopt and `error` otherwise.
std::optional<::loom::cost::Hardware> loadHardware(llvm::StringRef nameOrFile,
                                                   std::string &error);

} // namespace mlir::loom

#endif // LOOM_STEPSIMULATION_H
