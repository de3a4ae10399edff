//===- OpHelpers.h - what the verifiers of loom ops share -----*- C++ -*-===//
//
// Private to dialects/Loom: shape and type helpers of the verifiers in
// LoomOps.cpp and LoomUpdateOps.cpp.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_DIALECTS_LOOM_OPHELPERS_H
#define LOOM_DIALECTS_LOOM_OPHELPERS_H

#include "dialects/Loom/LoomOps.h"

#include <string>

namespace mlir::loom::verify {

inline RankedTensorType tensorOf(Value v) {
  return dyn_cast<RankedTensorType>(v.getType());
}

/// Shapes and element types agree (placements are the ComputeOp trait's job).
inline bool sameShapeAndElement(Type a, Type b) {
  auto ta = dyn_cast<RankedTensorType>(a), tb = dyn_cast<RankedTensorType>(b);
  return ta && tb && ta.getShape() == tb.getShape() &&
         ta.getElementType() == tb.getElementType();
}

/// The logical tensor type of a payload (a tensor or a packed tensor).
inline RankedTensorType logicalOf(Type t) {
  if (auto p = dyn_cast<PackedType>(t))
    return p.getLogical();
  return dyn_cast<RankedTensorType>(t);
}

inline std::string shapeStr(ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (auto [i, d] : llvm::enumerate(shape)) {
    if (i)
      s += ", ";
    s += std::to_string(d);
  }
  return s + "]";
}

inline StringRef memName(std::optional<MemSpace> m) {
  return m ? stringifyMemSpace(*m) : StringRef("unplaced");
}

/// `dim` in [-rank, rank) normalised to [0, rank), or failure.
inline FailureOr<int64_t> normaliseDim(Operation *op, int64_t dim, int64_t rank) {
  if (dim < -rank || dim >= rank)
    return op->emitOpError() << "dimension " << dim
                             << " is out of range for a tensor of rank "
                             << rank;
  return dim < 0 ? dim + rank : dim;
}

/// The 1-D parameter of a normalisation must match the last dimension.
inline LogicalResult verifyLastDimParam(Operation *op, RankedTensorType x,
                                 RankedTensorType p, StringRef what) {
  if (x.getRank() == 0)
    return op->emitOpError() << "input must have at least one dimension";
  int64_t d = x.getShape().back();
  if (p.getRank() != 1 || p.getDimSize(0) != d)
    return op->emitOpError()
           << what << " must have shape [" << d
           << "] (the normalised last dimension), got " << shapeStr(p.getShape());
  return success();
}

/// The shapes of an attention's query, key and value (LoomOps.cpp).
LogicalResult verifyAttentionShapes(Operation *op, RankedTensorType q, RankedTensorType k,
                                    RankedTensorType v);

} // namespace mlir::loom::verify

#endif // LOOM_DIALECTS_LOOM_OPHELPERS_H
