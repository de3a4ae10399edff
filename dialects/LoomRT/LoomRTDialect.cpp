//===- LoomRTDialect.cpp - the loomrt dialect's registration and verifiers ===//
#include "dialects/LoomRT/LoomRTDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::loomrt;

#include "dialects/LoomRT/LoomRTDialect.cpp.inc"
#include "dialects/LoomRT/LoomRTEnums.cpp.inc"
#define GET_TYPEDEF_CLASSES
#include "dialects/LoomRT/LoomRTTypes.cpp.inc"
#define GET_OP_CLASSES
#include "dialects/LoomRT/LoomRTOps.cpp.inc"

void LoomRTDialect::initialize() {
  registerTypes();
  addOperations<
#define GET_OP_LIST
#include "dialects/LoomRT/LoomRTOps.cpp.inc"
      >();
}

void LoomRTDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "dialects/LoomRT/LoomRTTypes.cpp.inc"
      >();
}

/// `loomrt.program` on a lowered @train_step: what the driver needs to know
/// about the program (the token files' shape, the vocabulary, the ranks).
LogicalResult LoomRTDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  if (attr.getName() != kProgramAttr)
    return op->emitError() << "unknown loomrt attribute '" << attr.getName().getValue() << "'";
  auto dict = dyn_cast<DictionaryAttr>(attr.getValue());
  for (StringRef k : {"batch", "seq", "vocab", "world", "zero_stage"}) {
    auto v = dict ? dict.getAs<IntegerAttr>(k) : IntegerAttr();
    if (!v || v.getValue().getSignificantBits() > 64 || v.getInt() < (k == "zero_stage" ? -1 : 0))
      return op->emitError() << "'" << kProgramAttr << "' must be a dictionary with integers "
                             << "batch, seq, vocab, world (>= 0) and zero_stage (>= -1); '" << k
                             << "' is missing or out of range";
  }
  return success();
}

LogicalResult GlobalOp::verifySymbolUses(SymbolTableCollection &tables) {
  Operation *module = (*this)->getParentOfType<ModuleOp>();
  Operation *sym = module ? tables.lookupSymbolIn(module, getNameAttr()) : nullptr;
  if (!sym || !(sym->getName().getStringRef() == "loom.param" ||
                sym->getName().getStringRef() == "loom.state"))
    return emitOpError() << "'" << getName() << "' does not name a loom.param or loom.state";
  return success();
}

LogicalResult WriteConstOp::verify() {
  auto dense = dyn_cast<DenseElementsAttr>(getValue());
  Type t = dense ? dense.getElementType() : Type();
  if (!t || !(t.isF32() || t.isBF16() || t.isInteger(64) || t.isInteger(1)))
    return emitOpError("writes dense f32, bf16, i64 or i1 constants");
  return success();
}

std::optional<DType> mlir::loomrt::dtypeOf(Type t) {
  if (t.isF32())
    return DType::f32;
  if (t.isBF16())
    return DType::bf16;
  if (t.isInteger(64))
    return DType::i64;
  return std::nullopt;
}

std::vector<uint8_t> mlir::loomrt::denseBytes(DenseElementsAttr e) {
  Type t = e.getElementType();
  std::vector<uint8_t> out;
  auto put = [&](uint64_t v, unsigned n) {
    for (unsigned i = 0; i < n; ++i)
      out.push_back(uint8_t(v >> (8 * i)));
  };
  if (isa<FloatType>(t))
    for (const APFloat &v : e.getValues<APFloat>())
      put(v.bitcastToAPInt().getZExtValue(), t.getIntOrFloatBitWidth() / 8);
  else if (t.isInteger(1))
    for (bool v : e.getValues<bool>())
      put(v ? 1 : 0, 1);
  else
    for (const APInt &v : e.getValues<APInt>())
      put(v.getZExtValue(), t.getIntOrFloatBitWidth() / 8);
  return out;
}

std::vector<uint8_t> WriteConstOp::getBytes() {
  return denseBytes(cast<DenseElementsAttr>(getValue()));
}

LogicalResult CopyStridedOp::verify() {
  size_t r = getShape().size();
  if (r == 0 || r > 8 || getSrcStrides().size() != r || getDstStrides().size() != r)
    return emitOpError("needs a shape of rank 1 to 8 and one stride per dimension on each side");
  if (getElemBytes() == 0)
    return emitOpError("elements of zero bytes");
  return success();
}

static LogicalResult sameRank(Operation *op, ArrayRef<ArrayRef<int64_t>> shapes) {
  size_t r = shapes.front().size();
  for (ArrayRef<int64_t> s : shapes)
    if (s.size() != r || r > 8)
      return op->emitOpError("needs shapes of one rank (at most 8), aligned to the output's");
  return success();
}
LogicalResult BinaryOp::verify() {
  return sameRank(*this, {getOutShape(), getAShape(), getBShape()});
}
LogicalResult SelectOp::verify() {
  return sameRank(*this, {getOutShape(), getCondShape(), getAShape(), getBShape()});
}

LogicalResult AdamOp::verify() {
  if (getGradDtype() == DType::i64)
    return emitOpError("updates with f32 or bf16 gradients");
  if (getRefresh() && getGradDtype() != DType::bf16)
    return emitOpError("writes a bf16 refresh only with a bf16 gradient (loomrt_adam_bf16grad)");
  return success();
}
