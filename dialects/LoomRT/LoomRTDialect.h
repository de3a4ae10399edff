//===- LoomRTDialect.h - the loomrt dialect: runtime calls as ops ---------===//
#ifndef LOOM_DIALECT_LOOMRT_H
#define LOOM_DIALECT_LOOMRT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "loomrt/loomrt.h" // loomrt_fused_program (loomrt.fused_elementwise)
#include "loomrt/arena_policy.h" // ArenaPolicy::kAlign (loomrt.arena)

#include <vector>

#include "dialects/LoomRT/LoomRTDialect.h.inc"
#include "dialects/LoomRT/LoomRTEnums.h.inc"

#define GET_TYPEDEF_CLASSES
#include "dialects/LoomRT/LoomRTTypes.h.inc"

#include "dialects/LoomRT/LoomRTInterfaces.h.inc"

#define GET_OP_CLASSES
#include "dialects/LoomRT/LoomRTOps.h.inc"

namespace mlir::loomrt {
/// The runtime's element type for `t` (f32, bf16, i64), if it has one.
std::optional<DType> dtypeOf(Type t);
/// Bytes of one element of `t` in the runtime's buffers.
int64_t dtypeBytes(DType t);
/// A dense constant as the runtime stores it: little-endian elements of
/// their storage size (bf16 bit patterns, i1 one byte each).
std::vector<uint8_t> denseBytes(DenseElementsAttr value);
/// The buffer whose memory `v` names: through views (loomrt.view,
/// loomrt.rank_view) to an alloc, a global, an argument or a call's result.
Value bufferRoot(Value v);
/// The function attribute that describes the training program on a lowered
/// @train_step: {batch, seq, vocab, world, zero_stage}.
constexpr llvm::StringLiteral kProgramAttr = "loomrt.program";
/// The function attribute loom-plan-arena sets: the bytes of the planned
/// region its `loomrt.alloc ... at OFFSET` buffers live in.
constexpr llvm::StringLiteral kArenaAttr = "loomrt.arena";
/// The function attributes loom-capture-graphs sets: the function may be
/// captured once as a graph and replayed (loomrt_step_graph), or why not.
constexpr llvm::StringLiteral kGraphAttr = "loomrt.graph";
constexpr llvm::StringLiteral kGraphDeclinedAttr = "loomrt.graph_declined";
/// Planned offsets are multiples of this: the runtime arena's alignment.
constexpr int64_t kArenaAlign = int64_t(::loomrt::ArenaPolicy::kAlign);
} // namespace mlir::loomrt

#endif // LOOM_DIALECT_LOOMRT_H
