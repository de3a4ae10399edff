//===- LoomDialect.cpp - dialect registration and placement helpers -------===//
#include "dialects/Loom/LoomDialect.h"
#include "dialects/Loom/LoomOps.h"

#include "mlir/IR/DialectImplementation.h"
#include "mlir/Transforms/InliningUtils.h"

using namespace mlir;
using namespace mlir::loom;

#include "dialects/Loom/LoomDialect.cpp.inc"

namespace {
/// Every loom op may be inlined: they are pure dataflow or act on symbols
/// (parameters, state, groups) that inlining does not change. Differentiation
/// does not cross calls, so `--inline` is how a forward with calls is
/// prepared for loom-autodiff.
struct LoomInlinerInterface : public DialectInlinerInterface {
  using DialectInlinerInterface::DialectInlinerInterface;
  bool isLegalToInline(Operation *, Operation *, bool) const final { return true; }
  bool isLegalToInline(Region *, Region *, bool, IRMapping &) const final { return true; }
  bool isLegalToInline(Operation *, Region *, bool, IRMapping &) const final { return true; }
};
} // namespace

void LoomDialect::initialize() {
  registerAttributes();
  registerTypes();
  addOperations<
#define GET_OP_LIST
#include "dialects/Loom/LoomOps.cpp.inc"
      >();
  addInterfaces<LoomInlinerInterface>();
}

std::optional<MemSpace> mlir::loom::getMemSpace(Type type) {
  if (auto packed = dyn_cast<PackedType>(type))
    type = packed.getLogical();
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return std::nullopt;
  if (auto mem = dyn_cast_or_null<MemSpaceAttr>(tensor.getEncoding()))
    return mem.getValue();
  return std::nullopt;
}

ExecSide mlir::loom::getExecSide(Type type) {
  std::optional<MemSpace> space = getMemSpace(type);
  if (!space)
    return ExecSide::Unplaced;
  switch (*space) {
  case MemSpace::device:
  case MemSpace::mapped:
    return ExecSide::Gpu;
  case MemSpace::pinned:
  case MemSpace::pageable:
    return ExecSide::Cpu;
  case MemSpace::nvme:
    return ExecSide::Storage;
  }
  return ExecSide::Unplaced;
}

size_t mlir::loom::storageBytes(Type t) {
  return t.isBF16() ? 2 : t.isInteger(64) ? 8 : t.isInteger(1) ? 1 : 4;
}

RankedTensorType mlir::loom::withMemSpace(RankedTensorType type,
                                          MemSpace space) {
  return RankedTensorType::get(type.getShape(), type.getElementType(),
                               MemSpaceAttr::get(type.getContext(), space));
}
