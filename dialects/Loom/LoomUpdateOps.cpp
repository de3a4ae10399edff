//===- LoomUpdateOps.cpp - verifiers of gradient, update and comm ops ---===//
//
// The verifiers of the gradient ops, the optimizer updates and the
// collectives (the rest: LoomOps.cpp). Every verifier branch has a case in
// test/Dialect/invalid.mlir.
//
//===----------------------------------------------------------------------===//
#include "dialects/Loom/LoomOps.h"
#include "dialects/Loom/OpHelpers.h"

#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"

using namespace mlir;
using namespace mlir::loom;
using namespace mlir::loom::verify;

//===----------------------------------------------------------------------===//
// Gradients
//===----------------------------------------------------------------------===//

/// What a norm's gradient shares with its forward: the incoming gradient,
/// the input and the input's gradient of one type, a weight over the last
/// dimension.
static LogicalResult verifyNormGrad(Operation *op, RankedTensorType x, Type grad, Type gradInput,
                                    RankedTensorType weight) {
  if (!sameShapeAndElement(grad, x) || !sameShapeAndElement(gradInput, x))
    return op->emitOpError() << "grad, input and grad_input must have one type";
  return verifyLastDimParam(op, x, weight, "weight");
}

LogicalResult LayerNormGradOp::verify() {
  if (failed(verifyNormGrad(*this, getInput().getType(), getGrad().getType(),
                            getGradInput().getType(), getWeight().getType())))
    return failure();
  if (!sameShapeAndElement(getGradWeight().getType(), getWeight().getType()) ||
      !sameShapeAndElement(getGradBias().getType(), getWeight().getType()))
    return emitOpError() << "grad_weight and grad_bias must have the weight's "
                            "type";
  return success();
}

LogicalResult RmsNormGradOp::verify() {
  if (failed(verifyNormGrad(*this, getInput().getType(), getGrad().getType(),
                            getGradInput().getType(), getWeight().getType())))
    return failure();
  if (!sameShapeAndElement(getGradWeight().getType(), getWeight().getType()))
    return emitOpError() << "grad_weight must have the weight's type";
  return success();
}

LogicalResult CrossEntropyGradOp::verify() {
  auto logits = getLogits().getType();
  if (logits.getRank() < 1 ||
      logits.getShape().drop_back() != getLabels().getType().getShape())
    return emitOpError() << "labels must have the logits' shape without the "
                            "class dimension";
  if (getGrad().getType().getRank() != 0)
    return emitOpError() << "the incoming gradient of a mean loss is a scalar";
  if (!sameShapeAndElement(getResult().getType(), logits))
    return emitOpError() << "result must have the logits' type";
  return success();
}

LogicalResult EmbeddingGradOp::verify() {
  auto g = getGrad().getType(), res = getResult().getType();
  if (res.getRank() != 2)
    return emitOpError() << "result must be table-shaped [rows, features]";
  SmallVector<int64_t> shape(getIndices().getType().getShape());
  shape.push_back(res.getDimSize(1));
  if (ArrayRef<int64_t>(shape) != g.getShape() ||
      g.getElementType() != res.getElementType())
    return emitOpError() << "grad must have shape " << shapeStr(shape)
                         << " (indices shape + features)";
  return success();
}

LogicalResult TopKGradOp::verify() {
  auto g = getGrad().getType(), idx = getIndices().getType(), res = getResult().getType();
  if (!idx.getElementType().isInteger(64) || idx.getShape() != g.getShape())
    return emitOpError() << "indices must be i64 of the gradient's shape " << shapeStr(g.getShape());
  if (g.getRank() < 1 || res.getRank() != g.getRank() ||
      res.getShape().drop_back() != g.getShape().drop_back() ||
      res.getShape().back() < g.getShape().back() || res.getElementType() != g.getElementType())
    return emitOpError() << "result must be top_k's input: the gradient's shape and type with "
                            "at least as many positions as chosen";
  return success();
}

LogicalResult MoeSlotDotOp::verify() {
  auto t = getTokens().getType(), r = getRows().getType(), s = getSlots().getType(),
       res = getResult().getType();
  if (!s.getElementType().isInteger(64) || s.getRank() != 2)
    return emitOpError() << "slots must be [tokens, choices] of i64, got " << s;
  if (t.getRank() != 2 || r.getRank() != 2 || t.getDimSize(1) != r.getDimSize(1) ||
      t.getElementType() != r.getElementType())
    return emitOpError() << "tokens and rows must be [rows, features] of one feature size and type";
  if (s.getDimSize(0) != t.getDimSize(0))
    return emitOpError() << "slots must have a row a token (" << t.getDimSize(0) << ")";
  if (res.getShape() != s.getShape() || res.getElementType() != t.getElementType())
    return emitOpError() << "result must be " << shapeStr(s.getShape()) << " of "
                         << t.getElementType();
  return success();
}

LogicalResult AttentionGradOp::verify() {
  auto q = getQuery().getType(), k = getKey().getType(), v = getValue().getType();
  if (failed(verifyAttentionShapes(*this, q, k, v)))
    return failure();
  if (!sameShapeAndElement(getGradQuery().getType(), q) ||
      !sameShapeAndElement(getGradKey().getType(), k) ||
      !sameShapeAndElement(getGradValue().getType(), v))
    return emitOpError() << "each gradient must have its input's type";
  SmallVector<int64_t> shape(q.getShape());
  shape[3] = v.getShape()[3];
  if (ArrayRef<int64_t>(shape) != getGrad().getType().getShape())
    return emitOpError() << "grad must have the attention output's shape "
                         << shapeStr(shape);
  return success();
}

//===----------------------------------------------------------------------===//
// Optimizer updates
//===----------------------------------------------------------------------===//

static LogicalResult verifyLr(Operation *op, APFloat lr) {
  if (!(lr.convertToDouble() > 0.0))
    return op->emitOpError() << "learning rate must be positive";
  return success();
}

LogicalResult AdamOp::verify() {
  if (failed(verifyLr(*this, getLr())))
    return failure();
  double b1 = getBeta1().convertToDouble(), b2 = getBeta2().convertToDouble();
  if (!(b1 >= 0.0 && b1 < 1.0) || !(b2 >= 0.0 && b2 < 1.0))
    return emitOpError() << "beta1 and beta2 must be in [0, 1), got " << b1
                         << " and " << b2;
  if (!(getEps().convertToDouble() > 0.0))
    return emitOpError() << "eps must be positive";
  if (getFreezeStep() && !getDecoupled())
    return emitOpError() << "1-bit Adam's frozen update (freeze_step) decays weights "
                            "decoupled: it needs `decoupled`";
  if (!getExpAvg().getType().getElementType().isF32())
    return emitOpError() << "Adam state must be f32 (mixed precision keeps "
                            "fp32 moments), got "
                         << getExpAvg().getType().getElementType();
  return success();
}

LogicalResult SgdOp::verify() {
  if (failed(verifyLr(*this, getLr())))
    return failure();
  double mu = getMomentum().convertToDouble();
  if (mu < 0.0)
    return emitOpError() << "momentum must be non-negative";
  if (getNesterov() && mu == 0.0)
    return emitOpError() << "Nesterov momentum needs momentum > 0";
  return success();
}

//===----------------------------------------------------------------------===//
// Communication
//===----------------------------------------------------------------------===//

/// Resolves the group to its topology and returns the group's size.
static FailureOr<int64_t> resolveGroup(Operation *op,
                                       SymbolTableCollection &table,
                                       GroupAttr group) {
  auto topo =
      table.lookupNearestSymbolFrom<TopologyOp>(op, group.getTopology());
  if (!topo)
    return op->emitOpError() << "group names '@" << group.getTopology().getValue()
                             << "', which is not a loom.topology";
  if (group.getLevels().empty())
    return op->emitOpError() << "group names no levels";
  int64_t size = 1;
  llvm::SmallSet<StringRef, 4> seen;
  for (Attribute a : group.getLevels()) {
    auto name = dyn_cast<StringAttr>(a);
    if (!name)
      return op->emitOpError() << "group levels must be strings";
    int64_t s = topo.getLevelSize(name.getValue());
    if (s < 0) {
      std::string known;
      for (Attribute l : topo.getLevels())
        known += (known.empty() ? "" : ", ") +
                 cast<StringAttr>(l).getValue().str();
      return op->emitOpError() << "topology '" << topo.getSymName()
                               << "' defines no level \"" << name.getValue()
                               << "\" (it has " << known << ")";
    }
    if (!seen.insert(name.getValue()).second)
      return op->emitOpError() << "group names level \"" << name.getValue()
                               << "\" twice";
    size *= s;
  }
  return size;
}

static LogicalResult verifyCommStream(Operation *op, StreamAttr stream) {
  if (stream.getKind() != StreamKind::comm)
    return op->emitOpError() << "collectives are ordered on a comm stream, "
                                "not #loom.stream<"
                             << stringifyStreamKind(stream.getKind()) << ">";
  return success();
}

static LogicalResult verifyNotPacked(Operation *op, Type t) {
  if (isa<PackedType>(t))
    return op->emitOpError()
           << "cannot reduce a compressed payload: decompress it first, or "
              "exchange packed chunks with all_to_all / all_gather";
  return success();
}

static LogicalResult verifySameType(Operation *op, Type in, Type out) {
  if (in != out)
    return op->emitOpError() << "result type " << out
                             << " must equal the input type " << in;
  return success();
}

/// `out` is `in` with dimension 0 scaled by num/den.
static LogicalResult verifyDim0Scaled(Operation *op, Type inT, Type outT,
                                      int64_t num, int64_t den) {
  RankedTensorType in = logicalOf(inT), out = logicalOf(outT);
  if (in.getRank() == 0)
    return op->emitOpError() << "needs a tensor of rank >= 1";
  int64_t d0 = in.getDimSize(0);
  if ((d0 * num) % den != 0)
    return op->emitOpError() << "dimension 0 (" << d0
                             << ") must divide by the group size " << den;
  SmallVector<int64_t> shape(in.getShape());
  shape[0] = d0 * num / den;
  if (ArrayRef<int64_t>(shape) != out.getShape() ||
      in.getElementType() != out.getElementType() ||
      in.getEncoding() != out.getEncoding() ||
      isa<PackedType>(inT) != isa<PackedType>(outT))
    return op->emitOpError() << "result must have shape " << shapeStr(shape)
                             << " with the input's element type and placement";
  return success();
}

#define LOOM_COLLECTIVE_COMMON(OP)                                             \
  LogicalResult OP::verify() { return verifyCommStream(*this, getStream()); }

LOOM_COLLECTIVE_COMMON(AllReduceOp)
LOOM_COLLECTIVE_COMMON(ReduceScatterOp)
LOOM_COLLECTIVE_COMMON(AllGatherOp)
LOOM_COLLECTIVE_COMMON(AllToAllOp)
LOOM_COLLECTIVE_COMMON(BroadcastCommOp)
LOOM_COLLECTIVE_COMMON(SendRecvOp)
#undef LOOM_COLLECTIVE_COMMON

LogicalResult AllReduceOp::verifySymbolUses(SymbolTableCollection &table) {
  if (failed(resolveGroup(*this, table, getGroup())) ||
      failed(verifyNotPacked(*this, getInput().getType())))
    return failure();
  return verifySameType(*this, getInput().getType(), getResult().getType());
}

LogicalResult ReduceScatterOp::verifySymbolUses(SymbolTableCollection &table) {
  FailureOr<int64_t> size = resolveGroup(*this, table, getGroup());
  if (failed(size) || failed(verifyNotPacked(*this, getInput().getType())))
    return failure();
  return verifyDim0Scaled(*this, getInput().getType(), getResult().getType(), 1,
                          *size);
}

/// A payload with one scale (sign_scale, block 0) travels in chunks that
/// keep their sender's scale: all_to_all and all_gather of it give the
/// same logical tensor with one scale per chunk (1-bit Adam's compressed
/// all-reduce, Tang et al. 2021 §4.1: all-to-all of signs with an
/// all-gather of the worker scales, then an all-gather of the server's).
static LogicalResult verifyChunkedPacked(Operation *op, PackedType in, Type outT,
                                         int64_t outNumel, int64_t chunk) {
  auto out = dyn_cast<PackedType>(outT);
  RankedTensorType want = in.getLogical();
  if (in.getLogical().getRank() != 1)
    return op->emitOpError() << "exchanges 1-D packed payloads";
  want = RankedTensorType::get({outNumel}, want.getElementType(), want.getEncoding());
  if (!out || out.getLogical() != want || out.getCodec().getKind() != in.getCodec().getKind() ||
      out.getCodec().getBlock() != chunk)
    return op->emitOpError() << "result must be the packed " << want << " with one scale per "
                             << chunk << " elements (#loom.codec<"
                             << stringifyCodecKind(in.getCodec().getKind())
                             << ", block = " << chunk << ">)";
  return success();
}

LogicalResult AllGatherOp::verifySymbolUses(SymbolTableCollection &table) {
  FailureOr<int64_t> size = resolveGroup(*this, table, getGroup());
  if (failed(size))
    return failure();
  // A one-scale payload gathered into chunks that keep their scales, or
  // any payload concatenated as it is.
  auto p = dyn_cast<PackedType>(getInput().getType());
  auto out = dyn_cast<PackedType>(getResult().getType());
  if (p && out && p.getCodec().getBlock() == 0 && out.getCodec().getBlock() != 0)
    return verifyChunkedPacked(*this, p, getResult().getType(),
                               p.getLogical().getNumElements() * *size,
                               p.getLogical().getNumElements());
  return verifyDim0Scaled(*this, getInput().getType(), getResult().getType(),
                          *size, 1);
}

LogicalResult ShardOp::verifySymbolUses(SymbolTableCollection &table) {
  FailureOr<int64_t> size = resolveGroup(*this, table, getGroup());
  if (failed(size))
    return failure();
  return verifyDim0Scaled(*this, getInput().getType(), getResult().getType(), 1,
                          *size);
}

LogicalResult TpEnterOp::verifySymbolUses(SymbolTableCollection &table) {
  if (failed(resolveGroup(*this, table, getGroup())))
    return failure();
  return verifySameType(*this, getInput().getType(), getResult().getType());
}

LogicalResult AllToAllOp::verifySymbolUses(SymbolTableCollection &table) {
  FailureOr<int64_t> size = resolveGroup(*this, table, getGroup());
  if (failed(size))
    return failure();
  RankedTensorType in = logicalOf(getInput().getType());
  if (in.getRank() == 0 || in.getDimSize(0) % *size != 0)
    return emitOpError() << "dimension 0 must divide into " << *size
                         << " chunks, one per rank of the group";
  auto p = dyn_cast<PackedType>(getInput().getType());
  auto out = dyn_cast<PackedType>(getResult().getType());
  if (p && out && p.getCodec().getBlock() == 0 && out.getCodec().getBlock() != 0)
    return verifyChunkedPacked(*this, p, getResult().getType(), in.getNumElements(),
                               in.getNumElements() / *size);
  return verifySameType(*this, getInput().getType(), getResult().getType());
}

LogicalResult BroadcastCommOp::verifySymbolUses(SymbolTableCollection &table) {
  FailureOr<int64_t> size = resolveGroup(*this, table, getGroup());
  if (failed(size))
    return failure();
  if (getRoot() >= uint64_t(*size)) // (unsigned: never below 0)
    return emitOpError() << "root " << getRoot()
                         << " is not a rank of a group of " << *size;
  return verifySameType(*this, getInput().getType(), getResult().getType());
}

LogicalResult SendRecvOp::verifySymbolUses(SymbolTableCollection &table) {
  FailureOr<int64_t> size = resolveGroup(*this, table, getGroup());
  if (failed(size) || failed(verifyNotPacked(*this, getInput().getType())))
    return failure();
  int64_t shift = int64_t(getShift()); // (I64Attr's getter is unsigned)
  if (shift == 0 || shift <= -*size || shift >= *size)
    return emitOpError() << "shift " << shift << " must be nonzero and smaller than the group ("
                         << *size << " ranks) in size";
  return verifySameType(*this, getInput().getType(), getResult().getType());
}

LogicalResult P2POp::verify() {
  if (failed(verifyCommStream(*this, getStream())))
    return failure();
  if (bool(getInput()) != sendPeer().has_value())
    return emitOpError() << "a send names its input and the peer it goes to ('send %x to K')";
  if (bool(getResult()) != recvPeer().has_value())
    return emitOpError() << "a receive names its result type and the peer it comes from "
                            "('recv from K ... -> type')";
  if (!getInput() && !getResult())
    return emitOpError() << "sends, receives or both: give 'send %x to K', 'recv from K' or both";
  for (Value v : {getInput(), getResult()})
    if (v && !isa<FloatType>(cast<RankedTensorType>(v.getType()).getElementType()))
      return emitOpError() << "passes floating-point tensors (activations and their "
                              "gradients), not "
                           << v.getType();
  return success();
}

LogicalResult P2POp::verifySymbolUses(SymbolTableCollection &table) {
  FailureOr<int64_t> size = resolveGroup(*this, table, getGroup());
  if (failed(size))
    return failure();
  for (std::optional<int64_t> k : {sendPeer(), recvPeer()})
    if (k && (*k == 0 || *k <= -*size || *k >= *size))
      return emitOpError() << "peer offset " << *k << " must be nonzero and smaller than the "
                           << "group (" << *size << " ranks) in size";
  return success();
}

LogicalResult CompressOp::verify() {
  auto in = getInput().getType();
  PackedType packed = getResult().getType();
  if (!isa<FloatType>(in.getElementType()))
    return emitOpError() << "codec "
                         << stringifyCodecKind(packed.getCodec().getKind())
                         << " compresses floating-point tensors, not "
                         << in.getElementType();
  if (packed.getLogical() != in)
    return emitOpError() << "packed payload must describe the input type " << in;
  if ((bool)getError() != (bool)getNewError())
    return emitOpError() << "error feedback needs both the incoming error "
                            "operand and the new error result";
  if (getError()) {
    if (!sameShapeAndElement(getError().getType(), in) ||
        getNewError().getType() != getError().getType())
      return emitOpError() << "error-feedback buffers must have the input's "
                              "shape and element type";
  }
  return success();
}

LogicalResult DecompressOp::verify() {
  if (getInput().getType().getLogical() != getResult().getType())
    return emitOpError() << "result must be the payload's logical type "
                         << getInput().getType().getLogical();
  return success();
}
