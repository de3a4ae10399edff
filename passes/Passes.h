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

/// loom-fuse-epilogues' work on a lowered module; returns the bias adds
/// folded into their GEMMs.
int64_t fuseEpilogues(ModuleOp module);

/// loom-fuse's work on a lowered module; returns the regions made.
int64_t fuseElementwise(ModuleOp module);

/// lowerToRuntime for the step simulation's copy of `module`, with the
/// fusion the binary gets (none where the module has loom.no_fuse).
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
