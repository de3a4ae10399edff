//===- Loom.h - loom -> loom transforms (passes/Loom) -----------*- C++ -*-===//
//
// The passes that build and distribute the training step on loom IR:
// autodiff, the optimizer, mixed precision, data parallelism and ZeRO,
// ZeRO++, 1-bit Adam, DiLoCo, optimizer subgroups and offload, feature
// placement. They may use the conversion (the step simulation lowers a copy,
// include/loom/Passes/LoomToLoomRT.h) but nothing in passes/LoomToLoomRT or
// passes/LoomRT uses them (test/Tools/layering.test).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_PASSES_LOOM_H
#define LOOM_PASSES_LOOM_H

#include "dialects/Loom/LoomOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"

#include <memory>

namespace loom::cost {
struct Hardware;
} // namespace loom::cost

namespace mlir::loom {

/// loom-attach-optimizer's update, with torch.optim's semantics: AdamW
/// (decoupled weight decay), Adam (L2 weight decay) or SGD with momentum.
enum class OptimizerKind { adamw, adam, sgd };
/// loom-diloco's outer exchange: an fp32 or bf16 all-reduce, or fp8 (E4M3)
/// or fp4 (E2M1) blocks with a scale each.
enum class DilocoQuant { fp32, bf16, fp8, fp4 };
/// 1-bit Adam's frozen variance at ZeRO stages 1-2 (loom-data-parallel):
/// kept as shards, or gathered once at the freeze.
enum class FrozenVariance { sharded, replicated };
/// loom-autodiff's activation checkpointing per unit: none, the whole unit
/// again in its backward, or only its cheap ops (products kept).
enum class RecomputeKind { none, full, selective };

#define GEN_PASS_DECL
#include "passes/Loom/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Loom/Passes.h.inc"

/// The loom.topology named `name`, or the module's only one when `name` is
/// empty; null when there is none. Several without a name is an error
/// (reported on the second, prefixed with `pass`): failure.
FailureOr<TopologyOp> findTopology(ModuleOp module, StringRef name, StringRef pass);

/// A rank's share of the model (a pipeline stage, an expert-parallel
/// rank): the parameters @forward no longer loads go, and each kept one
/// after them records the seed stream's elements they drew
/// (`loom.init_skip`; a tensor-parallel slice's draw is the whole
/// tensor's), so the rank starts from the one-rank model's values.
void dropUnloadedParams(ModuleOp module, func::FuncOp fwd);

/// The group of a pipeline stage's program's stages (its `loom.pipeline`
/// level of the module's topology); null when the module is not one, or
/// has no such topology (reported on the module, prefixed with `pass`).
FailureOr<GroupAttr> pipelineGroup(ModuleOp module, StringRef pass);

/// Where the results of `def` may be read from: the loom.wait right after
/// it that waits its token (a collective's result is read after its wait),
/// else `def` itself. Passes that insert after a value's definition use it.
Operation *afterItsWait(Operation *def);

/// The last call to @`callee` inside `fn` (null: none): the optimizer and
/// distribution passes find @train_step's call to @forward_backward so.
func::CallOp findCall(func::FuncOp fn, StringRef callee);

// Offload schedules, shared by loom-offload-optimizer (applies a placement
// per parameter), loom-interleave-offload (plans one per subgroup by
// simulating candidate schedules) and loomc (prints the simulated step).

/// The placement `mode` gives each of `params`.
FailureOr<SmallVector<UpdatePlace>> offloadPlaces(ModuleOp module, OptimizerOffloadAttr mode,
                                                  ArrayRef<FlatSymbolRefAttr> params);
/// Replaces `call` by a copy of `callee`'s body (one block), its results by
/// the returned values.
void inlineCall(func::CallOp call, func::FuncOp callee);
/// Rewrites @train_step for `mode` (cpu, static:R or subgroups:
/// loom-offload-optimizer's work); `hostThread`: for the step's host thread
/// (each CPU update moved up to where its gradient lands).
LogicalResult applyOffload(ModuleOp module, StringRef mode, bool hostThread);

/// loom-working-copies' work: a bf16 working copy (`@P.work`, mirror_of
/// P) for each fp32 parameter the device's Adam updates and every other
/// reader casts to bf16, refreshed after each update; returns the copies
/// made.
int64_t makeWorkingCopies(ModuleOp module);
/// Whether `op` is a loom.cast to bf16 (a cast never changes placement:
/// loom.copy does).
bool isBf16Cast(Operation *op);
/// Each of `reads` (loads whose every user is a cast to the working copy's
/// element type) replaced by a load of the working copy `work` of `type`.
void readWorkingCopy(ArrayRef<LoadOp> reads, FlatSymbolRefAttr work, Type type);

/// loom-interleave-offload planning for `hw` as given (a caller that has
/// read, or scaled, the description already) instead of its `hardware`
/// option; its other options from `options`.
std::unique_ptr<Pass> createInterleaveOffloadFor(const ::loom::cost::Hardware &hw,
                                                 const InterleaveOffloadOptions &options);

/// Units of sharding and recomputation (passes/Loom/Units.cpp says how they
/// are found): one per transformer block, unit 0 before the first.
struct UnitPlan {
  /// Each non-free op's unit.
  llvm::DenseMap<Operation *, int64_t> ofOp;
  /// Parameter loads, constants, and casts/reshapes/transposes/broadcasts
  /// of them: made again wherever they are needed.
  llvm::DenseSet<Operation *> free;
  /// Each parameter's unit: the first that reads it.
  llvm::StringMap<int64_t> ofParam;
  /// The blocks' name prefixes (`model.layers.3`): unit k is blocks[k-1].
  SmallVector<std::string> blocks;
  int64_t count() const { return int64_t(blocks.size()) + 1; }
  int64_t unitOf(Operation *op) const { return ofOp.lookup_or(op, 0); }
};
/// The units of a forward pass, its ops in program order.
UnitPlan planUnits(ArrayRef<Operation *> forwardOps);
/// The block a parameter name belongs to (the prefix up to its first
/// numeric component: `model.layers.3`), empty when none.
StringRef blockOfParam(StringRef name);
/// Whether `op` is free given the free ops before it.
bool isFreeOp(Operation *op, const llvm::DenseSet<Operation *> &free);

} // namespace mlir::loom

#endif // LOOM_PASSES_LOOM_H
