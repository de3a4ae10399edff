//===- LoomOps.h - ops of the loom dialect --------------------------------===//
#ifndef LOOM_DIALECT_LOOMOPS_H
#define LOOM_DIALECT_LOOMOPS_H

#include "dialects/Loom/LoomDialect.h"

#include <array>

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Traits.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::loom {
class AsyncOpInterface;
namespace detail {
LogicalResult verifyAsyncOp(Operation *op);
LogicalResult verifyComputeOp(Operation *op);
} // namespace detail

/// Compute ops run where their data lives: every placed operand and result
/// must be on one side (GPU or CPU).
template <typename ConcreteType>
class ComputeOp : public OpTrait::TraitBase<ConcreteType, ComputeOp> {
public:
  static LogicalResult verifyTrait(Operation *op) {
    return detail::verifyComputeOp(op);
  }
};
} // namespace mlir::loom

#include "dialects/Loom/LoomInterfaces.h.inc"

#define GET_OP_CLASSES
#include "dialects/Loom/LoomOps.h.inc"

namespace mlir::loom {
/// The initialiser that stands in for an imported parameter's values
/// (loom-reinit-params, a binary's --init=random): GPT-2's normal(0, std)
/// for matrices, zeros for biases, ones for other vectors (norm weights).
InitAttr defaultInitFor(ParamOp param, double stddev = 0.02);

/// `shape` viewed as [outer, len, inner] around its dimensions first..last
/// (a reduction's or a prefix sum's axis as the runtime's kernels take it).
std::array<int64_t, 3> axisView(ArrayRef<int64_t> shape, int64_t first, int64_t last);

/// One single-dimension reduction of a loom.reduce: the input viewed as
/// [outer, len, inner], reduced over len; `shape` is what is left after it.
struct ReduceStep {
  int64_t outer, len, inner;
  SmallVector<int64_t> shape;
};
/// loom.reduce over several dimensions runs as one reduction per run of
/// adjacent dimensions (a contiguous middle axis), highest first (any set of
/// dimensions decomposes so; a mean of means over equal groups is the mean).
/// The executor and code generation both use it.
SmallVector<ReduceStep> reduceSteps(ReduceOp op);

/// Shape arithmetic the executor and code generation share when they lower
/// shape ops to strided copies: row-major strides (in elements), a value's
/// shape right-aligned to `rank` dims (NumPy broadcasting's leading 1s), and
/// the input strides of a loom.broadcast_to (0 where it broadcasts).
std::vector<int64_t> rowMajorStrides(ArrayRef<int64_t> shape);
std::vector<int64_t> alignedShape(Value v, int rank);
std::vector<int64_t> broadcastInputStrides(BroadcastOp op);

/// The loom.cast of an Adam update's new weights to bf16 that the update
/// writes itself in the same pass (a bf16 gradient's mixed-precision
/// refresh, loomrt_adam_bf16grad), if there is one: code generation fuses
/// it, the step simulation does not count it.
CastOp fusedRefreshCast(AdamOp adam);

/// Whether an op of @train_step belongs to the forward and backward (the
/// call of @forward_backward, or its inlined body's device compute) rather
/// than to the update phase after it (optimizer updates and the casts of
/// their results, copies, waits, loads and stores, collectives, host work).
/// Code generation marks the end of the last such op for the binary's
/// phase timing; the step simulation predicts the same point.
bool isBackwardWork(Operation *op);

/// A zero-sized tensor among `op`'s operands and results, if any: the
/// executor and code generation refuse them (their row counts divide by a
/// dimension).
RankedTensorType zeroSizedTensor(Operation *op);

/// `loom.data_parallel` on @train_step (loom-data-parallel writes it, the
/// dialect verifies it), or null.
DataParallelAttr getDataParallel(Operation *step);
void setDataParallel(Operation *step, int64_t world, int64_t zeroStage);

/// `loom.offload_plan` on the module (loom-interleave-offload), or null.
OffloadPlanAttr getOffloadPlan(Operation *module);
} // namespace mlir::loom

#endif // LOOM_DIALECT_LOOMOPS_H
