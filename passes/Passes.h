//===- Passes.h - Loom pass declarations and registration -----------------===//
#ifndef LOOM_PASSES_PASSES_H
#define LOOM_PASSES_PASSES_H

#include "dialects/Loom/LoomOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::loom {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

/// loom-lower-to-runtime's work on `module` from @`entry` (and the
/// functions it calls); errors are reported on the ops. `comments`: each
/// loom op's text before its calls.
LogicalResult lowerToRuntime(ModuleOp module, StringRef entry = LoomDialect::kTrainStep,
                             bool comments = true);

/// loom-compose-copies' work on a lowered module; returns the pairs of
/// strided copies composed into one.
int64_t composeCopies(ModuleOp module);

/// loom-fuse-epilogues' work on a lowered module; returns the bias adds
/// folded into their GEMMs.
int64_t fuseEpilogues(ModuleOp module);

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

/// lowerToRuntime for the step simulation's copy of `module`, with the
/// fusion the binary gets (none where the module has loom.no_fuse) and its
/// arena plan (none where it has loom.online_arena).
LogicalResult lowerForSimulation(ModuleOp copy);

/// Whether the module's functions are lowered to loomrt (no tensor in a
/// signature, no loom op in a body): loom-lower-to-runtime's output.
bool isLoweredToRuntime(ModuleOp module);

/// The loom.topology named `name`, or the module's only one when `name` is
/// empty; null when there is none. Several without a name is an error
/// (reported on the second, prefixed with `pass`): failure.
FailureOr<TopologyOp> findTopology(ModuleOp module, StringRef name, StringRef pass);

/// The last call to @`callee` inside `fn` (null: none): the optimizer and
/// distribution passes find @train_step's call to @forward_backward so.
func::CallOp findCall(func::FuncOp fn, StringRef callee);

} // namespace mlir::loom

#endif // LOOM_PASSES_PASSES_H
