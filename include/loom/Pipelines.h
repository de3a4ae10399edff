//===- Pipelines.h - the compiler's phases, as an API ---------------------===//
//
// loomc is phase-ordered: each phase is a pipeline over the loom IR, and
// `--compile-to=<phase>` stops after it and prints the IR. buildPipeline
// builds any range of phases; loom-opt --loom-pipeline reaches it too, so
// a phase of loomc is reproduced with loom-opt. The phases, in order:
//
//   import     model file or --model generator -> forward graph + loss
//   autodiff   backward graph and gradients (loom-autodiff)
//   optimizer  optimizer state and @train_step (loom-attach-optimizer)
//   distribute data parallelism, ZeRO partitioning, topology
//   schedule   subgroups, offload, stream schedule
//   lowered    loomrt runtime calls (the lowering pipeline, LoweringPipeline.cpp)
//   cpp        C++ source (lib/Codegen)
//   binary     executable linked with the runtime
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_PIPELINES_H
#define LOOM_PIPELINES_H

#include "loom/Passes/Loom.h"
#include "loom/Passes/LoomRT.h"
#include "loom/Passes/LoomToLoomRT.h"
#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>

namespace mlir {
class OpPassManager;
} // namespace mlir

namespace loom {
namespace cost {
struct Hardware;
} // namespace cost


enum class Phase {
  Import,
  Autodiff,
  Optimizer,
  Distribute,
  Schedule,
  Lowered,
  Cpp,
  Binary
};

std::optional<Phase> parsePhase(llvm::StringRef name);
llvm::StringRef phaseName(Phase p);

/// What the phases are built with: loomc's flags, loom-opt's
/// `--loom-pipeline` options.
struct PipelineOptions {
  bool reinitParams = false;     // --init=random: initialisers for imported values
  std::string precision = "fp32"; // bf16: loom-mixed-precision before autodiff
  /// A graph model's feature table (loom-place-features placement=): auto,
  /// device, zero-copy or host-gather; empty: the pass does not run.
  std::string graphFeatures;
  /// loom-autodiff's activation checkpointing: its mode, and how many units
  /// from the first take it (-1: all).
  mlir::loom::RecomputeKind recompute = mlir::loom::RecomputeKind::none;
  int64_t recomputeUnits = -1;
  bool fuse = true; // loom-fuse-epilogues after the lowering (loomc --no-fuse)
  bool planArena = true; // loom-plan-arena after them (loomc --arena=online: off)
  bool graphs = true;    // loom-capture-graphs last (loomc --no-graphs: off)
  bool workingCopies = true; // loom-working-copies for bf16 (loomc --no-working-copies: off)
  bool hostThread = false; // loom-form-host-tasks after the lowering (loomc --host-thread)
  mlir::loom::AttachOptimizerOptions optimizer;
  std::string offload = "none"; // cpu, static:R, interleaved
  int64_t subGroupSize = 1000000000;
  /// The machine the interleaved offload plans for (loomc reads it once,
  /// --what-if may scale it); without it the pass loads `hardwareName`.
  const cost::Hardware *hardware = nullptr;
  std::string hardwareName = "h100";
  bool dataParallel = false; // needs a loom.topology @world in the module
  /// > 1: loom-tensor-parallel over the innermost level (named here), and
  /// data parallelism over the others.
  int64_t tensorParallel = 1;
  std::string tensorParallelLevel;
  bool sequenceParallel = false; // loom-tensor-parallel's sequence-parallel
  /// > 1: loom-micro-batches before autodiff (the step's batch in this
  /// many micro-batches, their gradients summed).
  int64_t microBatches = 1;
  std::string pipelineSchedule = "1f1b"; // loom-pipeline-schedule's order of them
  /// > 1: this module becomes stage `pipelineStage` of that many
  /// (loom-pipeline-cut, loom-pipeline-split before micro-batches,
  /// loom-pipeline-join after the optimizer) over the topology level
  /// `pipelineLevel`; data parallelism spans the other levels.
  int64_t pipelineParallel = 1, pipelineStage = 0;
  /// Model chunks a stage holds (--pipeline-schedule=interleaved:V): the
  /// cut makes pipelineParallel x pipelineChunks of them.
  int64_t pipelineChunks = 1;
  std::string pipelineLevel;
  /// > 1: loom-expert-parallel before autodiff: this module keeps the
  /// experts of rank `expertRank` of the `expertLevel` level's that many
  /// ranks (data parallelism spans every level; the experts' gradients are
  /// averaged over the others).
  int64_t expertParallel = 1, expertRank = 0;
  std::string expertLevel;
  /// The cut's plan printed (loomc: for the first stage's module only).
  bool printPipelineCut = true;
  /// GiB a stage may hold when the cut is planned (0: the description's).
  double deviceMemoryGiB = 0;
  int64_t zeroStage = 0, bucketSize = 16777216;
  /// ZeRO-3: gathers issued this many ahead (loom-data-parallel prefetch=).
  int64_t prefetch = 1;
  /// Gradients reduced in bf16 (loom-data-parallel reduce-bf16=).
  bool reduceBf16 = false;
  /// hpZ's secondary partition (loom-data-parallel secondary=): levels,
  /// comma-separated; empty: none.
  std::string hpzLevels;
  /// ZeRO++ qwZ / qgZ (loom-quantize-weights / -gradients): elements per
  /// scale; 0: off.
  int64_t qwzBlock = 0, qgzBlock = 0;
  /// qgZ's first stage (loom-quantize-gradients inner=); empty: a node.
  std::string qgzInner;
  /// > 0: clip the gradients Adam reads by their global 2-norm
  /// (loom-clip-gradients, after data parallelism, before the offload).
  double clipGrad = 0;
  /// > 0: 1-bit Adam (loom-onebit-adam before data parallelism).
  int64_t onebitFreezeStep = 0;
  int64_t onebitBucketSize = 0; // 0: one parameter a compressed bucket
  /// > 0: the frozen variance refreshed this many steps after the freeze,
  /// then at doubling intervals (loom-onebit-adam variance-refresh).
  int64_t onebitVarianceRefresh = 0;
  // loom-data-parallel's frozen-variance
  mlir::loom::FrozenVariance onebitVariance = mlir::loom::FrozenVariance::sharded;
  /// Streaming DiLoCo (loom-diloco in place of loom-data-parallel).
  struct Diloco {
    int64_t innerSteps = 100, fragments = 1, overlap = 0, quantBlock = 128;
    double alpha = 0.5, outerLr = 0.7, outerMomentum = 0.9;
    mlir::loom::DilocoQuant quant = mlir::loom::DilocoQuant::fp4;
    bool elastic = false;
  };
  std::optional<Diloco> diloco;
};

/// Adds the passes of the phases after `from` up to `to` to `pm`: mixed
/// precision and autodiff (autodiff), the optimizer and its offload
/// schedule (optimizer), data parallelism (distribute), the per-stream
/// schedule printout (schedule, only as the last phase), the lowering to
/// loomrt (lowered). `cpp` and `binary` are not passes (lib/Codegen).
void buildPipeline(mlir::OpPassManager &pm, Phase from, Phase to, const PipelineOptions &o);

/// The lowering the binary of `o` gets (host thread, fusion, arena plan):
/// the lowering pipeline's options, and what the step simulation lowers
/// copies with.
mlir::loom::LoweringOptions loweringOf(const PipelineOptions &o);

/// The phase a module has reached, read from what it defines: a lowered
/// @train_step, @train_step, @forward_backward, or a forward only.
Phase reachedPhase(mlir::ModuleOp module);

/// `loom-opt --loom-pipeline="from=import to=optimizer offload=cpu ..."`:
/// any of loomc's phases, with its options, as a pass pipeline.
void registerLoomPipeline();

/// loomc's whole command line; returns the process exit code.
int loomcMain(int argc, char **argv);

} // namespace loom

#endif // LOOM_PIPELINES_H
