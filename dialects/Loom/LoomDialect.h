//===- LoomDialect.h - the loom dialect, attributes and types -------------===//
#ifndef LOOM_DIALECT_LOOMDIALECT_H
#define LOOM_DIALECT_LOOMDIALECT_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"

// The attributes first: the dialect's discardable-attribute helpers
// (LoomDialect::DataParallelAttrHelper, ...) return them typed.
#include "dialects/Loom/LoomEnums.h.inc"
#define GET_ATTRDEF_CLASSES
#include "dialects/Loom/LoomAttrs.h.inc"

#include "dialects/Loom/LoomDialect.h.inc"
#define GET_TYPEDEF_CLASSES
#include "dialects/Loom/LoomTypes.h.inc"

namespace mlir::loom {

/// Which processor computes on a buffer in this memory space.
enum class ExecSide { Unplaced, Gpu, Cpu, Storage };

/// The placement of a tensor (its #loom.mem encoding), if it has one.
std::optional<MemSpace> getMemSpace(Type type);
/// The side that computes on values of `type` (Unplaced without placement).
ExecSide getExecSide(Type type);
/// Pinned or pageable host memory (unplaced tensors are on the device).
inline bool isHostMemory(Type type) { return getExecSide(type) == ExecSide::Cpu; }
/// `type` with its placement replaced (or set) to `space`.
RankedTensorType withMemSpace(RankedTensorType type, MemSpace space);
/// Bytes one element of `elementType` takes in the runtime's buffers (bf16
/// 2, i64 8, i1 1, f32 and i32 4): what code generation allocates and the
/// step simulation counts.
size_t storageBytes(Type elementType);
/// Bytes a statically shaped tensor of `type` takes in those buffers; 0 for
/// any other type.
int64_t storageBytesOf(Type type);

/// `--loom-offload-optimizer`'s mode option ("cpu", "static:R" with R in
/// [0, 1], "subgroups") as the attribute the pass writes on @train_step;
/// `error` says what was wrong.
FailureOr<OptimizerOffloadAttr> parseOffloadMode(MLIRContext *ctx, StringRef mode,
                                                 std::string &error);

} // namespace mlir::loom

#endif // LOOM_DIALECT_LOOMDIALECT_H
