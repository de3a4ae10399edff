//===- Planning.h - loomc's plans (private to lib/Pipelines) ----*- C++ -*-===//
#ifndef LOOM_LIB_PIPELINES_PLANNING_H
#define LOOM_LIB_PIPELINES_PLANNING_H

#include "loom/Codegen.h"
#include "loom/Pipelines.h"
#include "loom/StepSimulation.h"

#include <optional>
#include <string>

namespace loom {

struct LoomcOptions;

/// --plan=auto|FILE (PlanSearch.cpp): searches (or reads) the parallel
/// plan, then compiles the chosen one by running loomc again with its
/// flags; returns the exit code. `levels` are --topology's, innermost
/// first; `peakFlops` a GPU's (0: no MFU column).
int planMain(int argc, char **argv, const LoomcOptions &o,
             llvm::ArrayRef<std::pair<std::string, int64_t>> levels, const std::string &hwName,
             double peakFlops);

/// --plan-chosen: "STEP_S FLAGS..." recorded on the module as loom.plan.
void recordPlan(mlir::ModuleOp module, llvm::StringRef chosen);

/// --topology's levels (a line level=N,... or a file holding it), innermost
/// first; a one-line message on a malformed entry (Topology.cpp).
std::optional<std::string>
parseTopology(const std::string &flag,
              llvm::SmallVectorImpl<std::pair<std::string, int64_t>> &levels);

/// Streaming DiLoCo's outer steps priced (Planning.cpp): prints the mean
/// step over the outer period (and warns where an exchange does not hide);
/// returns it, `step` without DiLoCo, negative on failure.
double predictDiloco(mlir::ModuleOp module, const cost::Hardware &hw,
                     const mlir::loom::LoweringOptions &lowering, double step);

/// " NAME BYTES B SECONDS s;" for each communicator of a prediction.
std::string commSummary(const mlir::loom::StepPrediction &p);

/// One candidate of the hierarchy plan: hpZ's secondary levels ("" none)
/// and qgZ's first stage ("" when qgZ is off).
struct HierarchyCandidate {
  std::string secondary, qgzInner;
  mlir::loom::StepPrediction pred;
};

/// --hierarchy=auto (Planning.cpp says how); nullopt after an error.
std::optional<HierarchyCandidate>
planHierarchy(mlir::ModuleOp module, Phase reached, PipelineOptions po,
              const cost::Hardware &hw, llvm::ArrayRef<std::pair<std::string, int64_t>> levels);

/// --recompute=auto: sets po.recompute and po.recomputeUnits for a peak of
/// at most `budget` bytes; false after an error.
bool planRecompute(mlir::ModuleOp module, Phase reached, PipelineOptions &po,
                   const cost::Hardware &hw, double budget);

/// --prefetch=auto (ZeRO-3): sets po.prefetch to the fastest window of 0-3
/// gathers whose step fits `budget` bytes (1 when none does); false after
/// an error.
bool planPrefetch(mlir::ModuleOp module, Phase reached, PipelineOptions &po,
                  const cost::Hardware &hw, double budget);

/// --replan: the plans loom-interleave-offload makes for the description's
/// host rates scaled by each factor (other than 1, which is `compiled`, the
/// module loomc compiled already), the distinct ones each compiled to
/// `phase`, and every plan's predicted step at every factor. `out` gets the
/// plans after `compiled` (its modules) and the table of all of them (the
/// first row `compiled`'s); false after an error. `input` is read only for
/// the interleaved offload (null otherwise: the other modes' one plan).
struct ReplanPlans {
  std::vector<mlir::OwningOpRef<mlir::ModuleOp>> modules;
  ReplanTable table;
  /// Per plan (`compiled` first): the factor it was made for and its
  /// predicted peak device bytes there.
  std::vector<double> madeFor;
  std::vector<double> peakDeviceBytes;
};
bool planReplan(mlir::ModuleOp input, mlir::ModuleOp compiled, Phase reached, Phase phase,
                PipelineOptions po, const cost::Hardware &hw, int mode, ReplanPlans &out);

/// One line "loomc: error: MSG"; returns loomc's exit code for it.
int loomcError(const llvm::Twine &msg);

/// The `cpp` or `binary` phase's output, or the IR of any earlier phase, to
/// `output` ("-": stdout); imported weights beside it; with `replan`, every
/// plan in the binary; with `stages` (a pipeline's), each stage's program
/// in it (Output.cpp). Returns the exit code.
int writeOutput(mlir::ModuleOp module, Phase phase, const std::string &output,
                const std::string &emitDir, CodegenOptions &cg,
                const ReplanPlans *replan = nullptr,
                llvm::ArrayRef<mlir::ModuleOp> stages = {}, llvm::ArrayRef<int64_t> peaks = {});
/// --pipeline-parallel's output: every stage's program in one binary (or
/// C++ source; an earlier phase's IR: the stages' modules, one after the
/// other, separated by `// -----`), each with its predicted peak device
/// bytes. Returns the exit code.
int writeStagesOutput(llvm::ArrayRef<mlir::ModuleOp> stages, llvm::ArrayRef<int64_t> peaks,
                      Phase phase, const std::string &output, const std::string &emitDir,
                      CodegenOptions &cg);

} // namespace loom

#endif // LOOM_LIB_PIPELINES_PLANNING_H
