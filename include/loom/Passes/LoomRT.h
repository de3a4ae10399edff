//===- LoomRT.h - loomrt -> loomrt transforms (passes/LoomRT) ---*- C++ -*-===//
//
// The transforms of the lowered step (copy composition, GEMM epilogues,
// elementwise fusion, the arena plan) and the analyses of loomrt IR (the
// step simulation, loom/StepSimulation.h). They see loomrt IR only: nothing
// here uses passes/Loom or passes/LoomToLoomRT (test/Tools/layering.test).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_PASSES_LOOMRT_H
#define LOOM_PASSES_LOOMRT_H

#include "dialects/LoomRT/LoomRTDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

#include <string>

namespace mlir::loom {

#define GEN_PASS_DECL
#include "passes/LoomRT/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/LoomRT/Passes.h.inc"

/// Whether the module's functions are lowered to loomrt (no tensor in a
/// signature, no loom op in a body): loom-lower-to-runtime's output.
bool isLoweredToRuntime(ModuleOp module);

/// loom-insert-frees' work: `loomrt.free` after the last use of each buffer
/// a function owns (functions that have releases already are left alone).
void insertFrees(ModuleOp module);

/// loom-form-host-tasks' work: the CPU's updates of each function as host
/// tasks (functions that have tasks already are left alone).
void formHostTasks(ModuleOp module);

/// loom-compose-copies' work on a lowered module; returns the pairs of
/// strided copies composed into one.
int64_t composeCopies(ModuleOp module);

/// loom-fuse-epilogues' work on a lowered module; returns the bias adds,
/// upcasts, activations and bias gradients folded into their GEMMs.
int64_t fuseEpilogues(ModuleOp module);

/// loom-batch-updates' work on a lowered module; returns the
/// loomrt.adam_multi calls made.
int64_t batchUpdates(ModuleOp module);

/// loom-capture-graphs' work on a lowered module: marks the functions the
/// runtime may capture as graphs (loomrt.graph) and says why the others
/// may not (loomrt.graph_declined); returns the functions marked.
int64_t captureGraphs(ModuleOp module);

/// loom-fuse's work on a lowered module; returns the regions made.
int64_t fuseElementwise(ModuleOp module);

/// A buffer's bytes and lifetime: alive from position `start` to `end`
/// (exclusive), in the order the issuing thread reaches them.
struct ArenaInterval {
  int64_t bytes, start, end;
};
/// loom-plan-arena's placement of `bufs`: an offset each (multiples of
/// loomrt::kArenaAlign, sizes rounded up to it) such that buffers alive at
/// the same time never overlap; returns the region's size.
int64_t planArenaOffsets(ArrayRef<ArenaInterval> bufs, SmallVectorImpl<int64_t> &offsets);
/// loom-plan-arena's work on a lowered module, on the named functions
/// (empty: @train_step and @train_step_frozen); returns the buffers placed.
int64_t planArena(ModuleOp module, ArrayRef<std::string> functions = {});

} // namespace mlir::loom

#endif // LOOM_PASSES_LOOMRT_H
