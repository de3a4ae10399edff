//===- LoomOps.cpp - verifiers, folders and custom formats of loom ops ----===//
//
// Gradients, optimizer updates and communication are in LoomUpdateOps.cpp.
// Every verifier branch has a case in test/Dialect/invalid.mlir. Messages say
// what was expected, in the user's terms (shapes, placements, tokens).
//
//===----------------------------------------------------------------------===//
#include "dialects/Loom/LoomOps.h"
#include "dialects/Loom/OpHelpers.h"

#include "mlir/Dialect/Traits.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"

using namespace mlir;
using namespace mlir::loom;

using namespace mlir::loom::verify;

//===----------------------------------------------------------------------===//
// custom<Stream>: `h2d` or `comm[1]` inside op syntax. The attribute's own
// `#loom.stream<...>` form cannot precede the op's `: type` list, since an
// attribute may carry a trailing `: type` of its own.
//===----------------------------------------------------------------------===//

static ParseResult parseStream(OpAsmParser &parser, StreamAttr &stream) {
  StringRef keyword;
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseKeyword(&keyword))
    return failure();
  std::optional<StreamKind> kind = symbolizeStreamKind(keyword);
  if (!kind)
    return parser.emitError(loc, "unknown stream '")
           << keyword << "': expected compute, h2d, d2h, comm or cpu";
  int64_t index = 0;
  if (succeeded(parser.parseOptionalLSquare()) &&
      (parser.parseInteger(index) || parser.parseRSquare()))
    return failure();
  stream = StreamAttr::getChecked([&] { return parser.emitError(loc); },
                                  parser.getContext(), *kind, index);
  return success(static_cast<bool>(stream));
}

static void printStream(OpAsmPrinter &p, Operation *, StreamAttr stream) {
  p << stringifyStreamKind(stream.getKind());
  if (stream.getIndex() != 0)
    p << '[' << stream.getIndex() << ']';
}

//===----------------------------------------------------------------------===//
// ComputeOp trait: one execution side per op
//===----------------------------------------------------------------------===//

LogicalResult mlir::loom::detail::verifyComputeOp(Operation *op) {
  ExecSide side = ExecSide::Unplaced;
  Value sideWitness;
  auto check = [&](Value v, StringRef kind, unsigned idx) -> LogicalResult {
    ExecSide s = getExecSide(v.getType());
    if (s == ExecSide::Storage)
      return op->emitOpError()
             << kind << " #" << idx
             << " lives in nvme storage; nothing computes on it: load it with "
                "loom.copy first";
    if (kind == "result" && getMemSpace(v.getType()) == MemSpace::mapped)
      return op->emitOpError()
             << "result #" << idx
             << " cannot be mapped host memory: GPU kernels write device "
                "memory, and a loom.copy moves it to the host";
    if (s == ExecSide::Unplaced)
      return success();
    if (side == ExecSide::Unplaced) {
      side = s;
      sideWitness = v;
      return success();
    }
    if (s == side)
      return success();
    std::optional<MemSpace> m = getMemSpace(v.getType());
    if (side == ExecSide::Gpu)
      return op->emitOpError()
             << kind << " #" << idx << " lives in host memory (#loom.mem<"
             << memName(m)
             << ">) but the op runs on the GPU: move it with loom.copy or map "
                "it with loom.zero_copy";
    return op->emitOpError()
           << kind << " #" << idx << " lives in GPU memory (#loom.mem<"
           << memName(m) << ">) but the op runs on the CPU (#loom.mem<"
           << memName(getMemSpace(sideWitness.getType()))
           << ">): move it with loom.copy";
  };
  for (auto [i, v] : llvm::enumerate(op->getOperands()))
    if (failed(check(v, "operand", i)))
      return failure();
  for (auto [i, v] : llvm::enumerate(op->getResults()))
    if (failed(check(v, "result", i)))
      return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// Async ops and tokens
//===----------------------------------------------------------------------===//

/// The first loom.wait in `block` after which `token`'s work is known to be
/// complete: a wait on the token itself, or on the token of an asynchronous
/// op that depends on it (a stream that waited for an event finishes after
/// it). Null when no wait in `block` covers the token.
static Operation *findCoveringWait(Value token, Block *block,
                                   llvm::SmallPtrSetImpl<Value> &visited) {
  if (!visited.insert(token).second)
    return nullptr;
  Operation *best = nullptr;
  auto consider = [&](Operation *w) {
    if (w && w->getBlock() == block && (!best || w->isBeforeInBlock(best)))
      best = w;
  };
  for (Operation *user : token.getUsers()) {
    if (isa<WaitOp>(user))
      consider(user);
    else if (auto dep = dyn_cast<AsyncOpInterface>(user))
      consider(findCoveringWait(dep.getAsyncToken(), block, visited));
  }
  return best;
}

LogicalResult mlir::loom::detail::verifyAsyncOp(Operation *op) {
  auto async = cast<AsyncOpInterface>(op);
  Value token = async.getAsyncToken();
  if (token.use_empty())
    return op->emitOpError()
           << "token is never waited on or depended upon: nothing would know "
              "when this work ends";
  // Distinct loom.wait ops on this token, in program order where they share
  // a block (a wait listing the token twice is the wait's own error).
  SmallVector<Operation *> waits;
  for (Operation *user : token.getUsers())
    if (isa<WaitOp>(user) && !llvm::is_contained(waits, user))
      waits.push_back(user);
  if (waits.size() > 1) {
    llvm::sort(waits, [](Operation *a, Operation *b) {
      return a->getBlock() == b->getBlock() && a->isBeforeInBlock(b);
    });
    InFlightDiagnostic d = op->emitOpError() << "token is waited twice";
    d.attachNote(waits[1]->getLoc()) << "second wait here";
    return d;
  }
  Block *block = op->getBlock();
  llvm::SmallPtrSet<Value, 8> visited;
  Operation *wait = block ? findCoveringWait(token, block, visited) : nullptr;
  for (Value result : op->getResults()) {
    if (result == token)
      continue;
    for (OpOperand &use : result.getUses()) {
      Operation *user = use.getOwner();
      // An async op ordered after this one through its dependency list may
      // read the result on its own stream.
      if (auto userAsync = dyn_cast<AsyncOpInterface>(user))
        if (llvm::is_contained(userAsync.getAsyncDeps(), token))
          continue;
      Operation *anc = block ? block->findAncestorOpInBlock(*user) : nullptr;
      if (wait && anc && wait->isBeforeInBlock(anc))
        continue;
      InFlightDiagnostic d =
          op->emitOpError()
          << "result #" << cast<OpResult>(result).getResultNumber()
          << " is read before its token is waited on: add loom.wait of the "
             "token before the use, or list the token in the user's "
             "dependencies";
      d.attachNote(user->getLoc()) << "read here";
      return d;
    }
  }
  return success();
}

LogicalResult DropoutOp::verify() {
  double r = getRatio().convertToDouble();
  if (!(r >= 0.0 && r < 1.0))
    return emitOpError() << "ratio must be in [0, 1), got " << r;
  return success();
}

LogicalResult CumsumOp::verify() {
  auto t = cast<RankedTensorType>(getInput().getType());
  int64_t dim = getDim();
  if (dim < 0 || dim >= t.getRank())
    return emitOpError() << "dim " << dim << " is outside [0, " << t.getRank() << ")";
  Type e = t.getElementType();
  if (!isa<FloatType>(e) && !e.isInteger(64))
    return emitOpError() << "sums floats or i64, not " << e;
  return success();
}

LogicalResult WaitOp::verify() {
  if (getTokens().empty())
    return emitOpError() << "needs at least one token";
  llvm::SmallPtrSet<Value, 4> seen;
  for (Value t : getTokens()) {
    if (!t.getDefiningOp<AsyncOpInterface>())
      return emitOpError()
             << "waits on a token that no asynchronous op produced";
    if (!seen.insert(t).second)
      return emitOpError() << "lists the same token twice";
  }
  return success();
}

static LogicalResult verifyStreamForCopy(Operation *op, StreamAttr stream,
                                         ExecSide from, ExecSide to) {
  StreamKind k = stream.getKind();
  if (k == StreamKind::cpu)
    return op->emitOpError() << "copies are ordered on h2d, d2h, compute or "
                                "comm streams, not on a cpu stream";
  if (from == ExecSide::Cpu && to == ExecSide::Gpu && k == StreamKind::d2h)
    return op->emitOpError()
           << "host-to-device copy on a d2h stream: use #loom.stream<h2d>";
  if (from == ExecSide::Gpu && to == ExecSide::Cpu && k == StreamKind::h2d)
    return op->emitOpError()
           << "device-to-host copy on an h2d stream: use #loom.stream<d2h>";
  return success();
}

LogicalResult CopyOp::verify() {
  RankedTensorType in = logicalOf(getInput().getType());
  RankedTensorType out = logicalOf(getResult().getType());
  if (isa<PackedType>(getInput().getType()) !=
      isa<PackedType>(getResult().getType()))
    return emitOpError() << "a copy moves bytes; it cannot pack or unpack "
                            "(use loom.compress / loom.decompress)";
  if (auto pi = dyn_cast<PackedType>(getInput().getType()))
    if (pi.getCodec() != cast<PackedType>(getResult().getType()).getCodec())
      return emitOpError() << "source and result codecs differ";
  if (!sameShapeAndElement(in, out))
    return emitOpError() << "result must have the source's shape and element "
                            "type; only the placement changes";
  // An unplaced side is device memory: a training step that no placement
  // pass has touched lives on the device (code generation's convention), so
  // the offload passes copy its gradients out without re-typing the graph.
  std::optional<MemSpace> from = getMemSpace(in), to = getMemSpace(out);
  if (!from && !to)
    return emitOpError() << "source and result are both unplaced: place at "
                            "least one side (#loom.mem<...> encodings)";
  from = from.value_or(MemSpace::device);
  to = to.value_or(MemSpace::device);
  if (*from == *to)
    return emitOpError() << "source and result are both in #loom.mem<"
                         << memName(from) << ">: a copy changes placement";
  if (*to == MemSpace::mapped || *from == MemSpace::mapped)
    return emitOpError() << "mapped memory is a view of pinned memory made by "
                            "loom.zero_copy, not a copy target or source";
  auto side = [](Type t) {
    ExecSide s = getExecSide(t);
    return s == ExecSide::Unplaced ? ExecSide::Gpu : s;
  };
  return verifyStreamForCopy(*this, getStream(), side(in), side(out));
}

LogicalResult ReleaseOp::verify() {
  Operation *op = getOperation();
  for (Operation *user : getValue().getUsers()) {
    if (user == op)
      continue;
    Operation *anc = op->getBlock()->findAncestorOpInBlock(*user);
    if (anc && op->isBeforeInBlock(anc)) {
      InFlightDiagnostic d =
          emitOpError() << "value is used after it is released";
      d.attachNote(user->getLoc()) << "used here";
      return d;
    }
  }
  return success();
}

LogicalResult ZeroCopyOp::verify() {
  RankedTensorType in = getInput().getType(), out = getResult().getType();
  if (!sameShapeAndElement(in, out))
    return emitOpError() << "result must have the source's shape and element "
                            "type";
  if (getMemSpace(in) != MemSpace::pinned)
    return emitOpError() << "only pinned host memory can be mapped for "
                            "zero-copy access, source is #loom.mem<"
                         << memName(getMemSpace(in)) << ">";
  if (getMemSpace(out) != MemSpace::mapped)
    return emitOpError() << "result must be #loom.mem<mapped>";
  return success();
}

//===----------------------------------------------------------------------===//
// Declarations
//===----------------------------------------------------------------------===//

ParseResult TopologyOp::parse(OpAsmParser &parser, OperationState &result) {
  StringAttr name;
  if (parser.parseSymbolName(name, SymbolTable::getSymbolAttrName(),
                             result.attributes))
    return failure();
  SmallVector<Attribute> levels;
  SmallVector<int64_t> sizes;
  auto parseLevel = [&]() -> ParseResult {
    std::string level;
    int64_t size;
    if (parser.parseString(&level) || parser.parseEqual() ||
        parser.parseInteger(size))
      return failure();
    levels.push_back(parser.getBuilder().getStringAttr(level));
    sizes.push_back(size);
    return success();
  };
  if (parser.parseCommaSeparatedList(OpAsmParser::Delimiter::Square,
                                     parseLevel) ||
      parser.parseOptionalAttrDict(result.attributes))
    return failure();
  Builder &b = parser.getBuilder();
  result.addAttribute("levels", b.getArrayAttr(levels));
  result.addAttribute("sizes", b.getDenseI64ArrayAttr(sizes));
  return success();
}

void TopologyOp::print(OpAsmPrinter &p) {
  p << ' ';
  p.printSymbolName(getSymName());
  p << " [";
  for (auto [i, pair] : llvm::enumerate(llvm::zip(getLevels(), getSizes()))) {
    if (i)
      p << ", ";
    p << '"' << cast<StringAttr>(std::get<0>(pair)).getValue()
      << "\" = " << std::get<1>(pair);
  }
  p << ']';
  p.printOptionalAttrDict((*this)->getAttrs(),
                          {"sym_name", "levels", "sizes"});
}

LogicalResult TopologyOp::verify() {
  if (getLevels().empty())
    return emitOpError() << "needs at least one level";
  if (getLevels().size() != getSizes().size())
    return emitOpError() << "has " << getLevels().size() << " levels but "
                         << getSizes().size() << " sizes";
  llvm::SmallSet<StringRef, 8> names;
  for (auto [lvl, size] : llvm::zip(getLevels(), getSizes())) {
    StringRef name = cast<StringAttr>(lvl).getValue();
    if (!names.insert(name).second)
      return emitOpError() << "defines level \"" << name << "\" twice";
    if (size < 1)
      return emitOpError() << "level \"" << name
                           << "\" must have a positive size, got " << size;
  }
  return success();
}

int64_t TopologyOp::getLevelSize(StringRef name) {
  for (auto [lvl, size] : llvm::zip(getLevels(), getSizes()))
    if (cast<StringAttr>(lvl).getValue() == name)
      return size;
  return -1;
}

int64_t TopologyOp::getWorldSize() {
  int64_t n = 1;
  for (int64_t s : getSizes())
    n *= s;
  return n;
}

/// Element types and shapes of an initial value must match the declaration.
static LogicalResult verifyValueAttr(Operation *op, RankedTensorType type,
                                     ElementsAttr value) {
  auto vt = dyn_cast<ShapedType>(value.getType());
  if (!vt || vt.getShape() != type.getShape() ||
      vt.getElementType() != type.getElementType())
    return op->emitOpError() << "value of type " << value.getType()
                             << " does not match the declared shape "
                             << shapeStr(type.getShape()) << " and element type "
                             << type.getElementType();
  return success();
}

LogicalResult ParamOp::verify() {
  auto type = cast<RankedTensorType>(getType());
  if (getInit() && getValue())
    return emitOpError() << "has both an initialiser and a value; give one";
  if (getMemSpace(type) == MemSpace::mapped)
    return emitOpError() << "a parameter is stored in a memory space; mapped "
                            "is a view made by loom.zero_copy";
  if (getValue())
    return verifyValueAttr(*this, type, *getValue());
  return success();
}

/// Looks up a parameter or state symbol and returns its declared type.
static FailureOr<RankedTensorType>
lookupGlobal(Operation *op, SymbolTableCollection &table,
             FlatSymbolRefAttr name) {
  Operation *sym = table.lookupNearestSymbolFrom(op, name);
  if (auto p = dyn_cast_or_null<ParamOp>(sym))
    return cast<RankedTensorType>(p.getType());
  if (auto s = dyn_cast_or_null<StateOp>(sym))
    return cast<RankedTensorType>(s.getType());
  return op->emitOpError() << "'@" << name.getValue()
                           << "' is not a loom.param or loom.state";
}

LogicalResult StateOp::verifySymbolUses(SymbolTableCollection &table) {
  if (!getParam())
    return success();
  auto param = table.lookupNearestSymbolFrom<ParamOp>(*this, getParamAttr());
  if (!param)
    return emitOpError() << "belongs to '@" << *getParam()
                         << "', which is not a loom.param";
  auto pt = cast<RankedTensorType>(param.getType());
  auto st = cast<RankedTensorType>(getType());
  if (pt.getShape() != st.getShape())
    return emitOpError() << "has shape " << shapeStr(st.getShape())
                         << " but its parameter '@" << *getParam()
                         << "' has shape " << shapeStr(pt.getShape());
  return success();
}

LogicalResult SubgroupOp::verifySymbolUses(SymbolTableCollection &table) {
  int64_t total = 0;
  llvm::SmallPtrSet<Attribute, 16> mine;
  for (Attribute a : getParams()) {
    auto ref = cast<FlatSymbolRefAttr>(a);
    auto param = table.lookupNearestSymbolFrom<ParamOp>(*this, ref);
    if (!param)
      return emitOpError() << "'@" << ref.getValue() << "' is not a loom.param";
    if (!mine.insert(ref).second)
      return emitOpError() << "lists '@" << ref.getValue() << "' twice";
    total += cast<RankedTensorType>(param.getType()).getNumElements();
  }
  if (total != static_cast<int64_t>(getNumel()))
    return emitOpError() << "numel " << getNumel()
                         << " does not match its parameters' " << total
                         << " elements";
  // A parameter belongs to at most one subgroup: compare with the subgroups
  // declared before this one.
  for (Operation &other : (*this)->getBlock()->getOperations()) {
    if (&other == getOperation())
      break;
    if (auto sg = dyn_cast<SubgroupOp>(other))
      for (Attribute a : sg.getParams())
        if (mine.contains(a))
          return emitOpError()
                 << "'@" << cast<FlatSymbolRefAttr>(a).getValue()
                 << "' already belongs to subgroup '" << sg.getSymName() << "'";
  }
  return success();
}

LogicalResult LoadOp::verifySymbolUses(SymbolTableCollection &table) {
  FailureOr<RankedTensorType> t = lookupGlobal(*this, table, getNameAttr());
  if (failed(t))
    return failure();
  if (*t != getResult().getType())
    return emitOpError() << "result type " << getResult().getType()
                         << " differs from the declared " << *t
                         << " (placement included)";
  return success();
}

LogicalResult StoreOp::verifySymbolUses(SymbolTableCollection &table) {
  FailureOr<RankedTensorType> t = lookupGlobal(*this, table, getNameAttr());
  if (failed(t))
    return failure();
  if (*t != getValue().getType())
    return emitOpError() << "value type " << getValue().getType()
                         << " differs from the declared " << *t
                         << " (placement included)";
  return success();
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

OpFoldResult NegOp::fold(FoldAdaptor) {
  if (auto inner = getInput().getDefiningOp<NegOp>())
    return inner.getInput();
  return {};
}

LogicalResult SelectOp::verify() {
  SmallVector<int64_t> shape;
  auto c = getCond().getType(), l = tensorOf(getLhs()), r = tensorOf(getRhs());
  if (l.getElementType() != r.getElementType())
    return emitOpError() << "branches have different element types "
                         << l.getElementType() << " and " << r.getElementType();
  SmallVector<int64_t> lr;
  if (!OpTrait::util::getBroadcastedShape(l.getShape(), r.getShape(), lr) ||
      !OpTrait::util::getBroadcastedShape(lr, c.getShape(), shape))
    return emitOpError() << "shapes " << shapeStr(c.getShape()) << ", "
                         << shapeStr(l.getShape()) << " and "
                         << shapeStr(r.getShape()) << " do not broadcast";
  auto res = getResult().getType();
  if (ArrayRef<int64_t>(shape) != res.getShape() ||
      res.getElementType() != l.getElementType())
    return emitOpError() << "result must be the broadcast shape "
                         << shapeStr(shape) << " of element type "
                         << l.getElementType();
  return success();
}

LogicalResult CastOp::verify() {
  if (getMemSpace(getInput().getType()) != getMemSpace(getResult().getType()))
    return emitOpError() << "cannot change placement; use loom.copy";
  return success();
}

OpFoldResult CastOp::fold(FoldAdaptor) {
  if (getInput().getType() == getResult().getType())
    return getInput();
  return {};
}

//===----------------------------------------------------------------------===//
// Linear algebra and normalisation
//===----------------------------------------------------------------------===//

LogicalResult MatmulOp::verify() {
  auto a = getLhs().getType(), b = getRhs().getType(), c = getResult().getType();
  if (a.getRank() < 2 || b.getRank() < 2)
    return emitOpError() << "operands must have rank >= 2, got "
                         << a.getRank() << " and " << b.getRank();
  if (a.getElementType() != b.getElementType())
    return emitOpError() << "operand element types differ: "
                         << a.getElementType() << " and " << b.getElementType();
  if (cast<FloatType>(c.getElementType()).getWidth() <
      cast<FloatType>(a.getElementType()).getWidth())
    return emitOpError() << "result element type " << c.getElementType()
                         << " is narrower than the operands' "
                         << a.getElementType();
  int64_t ra = a.getRank(), rb = b.getRank();
  int64_t m = a.getDimSize(getTransposeLhs() ? ra - 1 : ra - 2);
  int64_t ka = a.getDimSize(getTransposeLhs() ? ra - 2 : ra - 1);
  int64_t kb = b.getDimSize(getTransposeRhs() ? rb - 1 : rb - 2);
  int64_t n = b.getDimSize(getTransposeRhs() ? rb - 2 : rb - 1);
  if (ka != kb)
    return emitOpError() << "contraction dimensions differ: lhs has " << ka
                         << ", rhs has " << kb;
  SmallVector<int64_t> batch;
  if (!OpTrait::util::getBroadcastedShape(a.getShape().drop_back(2),
                                          b.getShape().drop_back(2), batch))
    return emitOpError() << "batch dimensions "
                         << shapeStr(a.getShape().drop_back(2)) << " and "
                         << shapeStr(b.getShape().drop_back(2))
                         << " do not broadcast";
  batch.push_back(m);
  batch.push_back(n);
  if (ArrayRef<int64_t>(batch) != c.getShape())
    return emitOpError() << "result shape must be " << shapeStr(batch)
                         << ", got " << shapeStr(c.getShape());
  return success();
}

LogicalResult LayerNormOp::verify() {
  auto x = getInput().getType();
  if (!sameShapeAndElement(x, getResult().getType()))
    return emitOpError() << "result must have the input's type";
  if (failed(verifyLastDimParam(*this, x, getWeight().getType(), "weight")))
    return failure();
  if (getBias() &&
      failed(verifyLastDimParam(*this, x, getBias().getType(), "bias")))
    return failure();
  if (!(getEps().convertToDouble() > 0.0))
    return emitOpError() << "eps must be positive";
  return success();
}

LogicalResult RmsNormOp::verify() {
  auto x = getInput().getType();
  if (!sameShapeAndElement(x, getResult().getType()))
    return emitOpError() << "result must have the input's type";
  if (!(getEps().convertToDouble() > 0.0))
    return emitOpError() << "eps must be positive";
  return verifyLastDimParam(*this, x, getWeight().getType(), "weight");
}

LogicalResult RotaryOp::verify() {
  auto x = getInput().getType(), c = getCos().getType();
  if (!sameShapeAndElement(x, getResult().getType()))
    return emitOpError() << "result must have the input's type";
  if (c != getSin().getType() || c.getElementType() != x.getElementType())
    return emitOpError() << "cos and sin must have one type, with the input's element type";
  int64_t r = x.getRank();
  if (r < 2 || x.getDimSize(r - 1) % 2)
    return emitOpError() << "input must be [..., T, D] with D even";
  if (c.getRank() < 2 || c.getRank() > r ||
      c.getDimSize(c.getRank() - 1) != x.getDimSize(r - 1) ||
      c.getDimSize(c.getRank() - 2) != x.getDimSize(r - 2) ||
      llvm::any_of(c.getShape().drop_back(2), [](int64_t d) { return d != 1; }))
    return emitOpError() << "cos and sin must be [T, D] = [" << x.getDimSize(r - 2) << ", "
                         << x.getDimSize(r - 1) << "] (leading dimensions of 1 allowed), got "
                         << c;
  return success();
}

LogicalResult SoftmaxOp::verify() {
  return normaliseDim(*this, getDim(), getInput().getType().getRank());
}

LogicalResult EmbeddingOp::verify() {
  auto table = getTable().getType();
  if (table.getRank() != 2)
    return emitOpError() << "table must be [rows, features], got rank "
                         << table.getRank();
  SmallVector<int64_t> shape(getIndices().getType().getShape());
  shape.push_back(table.getDimSize(1));
  auto res = getResult().getType();
  if (ArrayRef<int64_t>(shape) != res.getShape() ||
      res.getElementType() != table.getElementType())
    return emitOpError() << "result must have shape " << shapeStr(shape)
                         << " (indices shape + features) and element type "
                         << table.getElementType();
  return success();
}

LogicalResult mlir::loom::verify::verifyAttentionShapes(Operation *op, RankedTensorType q,
                                                       RankedTensorType k, RankedTensorType v) {
  if (q.getRank() != 4 || k.getRank() != 4 || v.getRank() != 4)
    return op->emitOpError()
           << "query, key and value must be [batch, heads, seq, head_dim]";
  if (q.getShape()[0] != k.getShape()[0] || q.getShape()[1] != k.getShape()[1] ||
      q.getShape()[3] != k.getShape()[3])
    return op->emitOpError() << "query " << shapeStr(q.getShape()) << " and key "
                             << shapeStr(k.getShape())
                             << " must agree on batch, heads and head_dim";
  if (k.getShape().drop_back() != v.getShape().drop_back())
    return op->emitOpError() << "key " << shapeStr(k.getShape())
                             << " and value " << shapeStr(v.getShape())
                             << " must agree on batch, heads and seq";
  return success();
}

LogicalResult AttentionOp::verify() {
  auto q = getQuery().getType(), k = getKey().getType(), v = getValue().getType();
  if (failed(verifyAttentionShapes(*this, q, k, v)))
    return failure();
  SmallVector<int64_t> shape(q.getShape());
  shape[3] = v.getShape()[3];
  if (ArrayRef<int64_t>(shape) != getResult().getType().getShape())
    return emitOpError() << "result must have shape " << shapeStr(shape);
  if (getCausal() && q.getShape()[2] != k.getShape()[2])
    return emitOpError() << "a causal mask needs equal query and key lengths";
  return success();
}

LogicalResult SpmmOp::verify() {
  auto rp = getRowPtr().getType(), ci = getColIdx().getType(),
       vals = getValues().getType(), x = getInput().getType(),
       res = getResult().getType();
  if (rp.getRank() != 1 || ci.getRank() != 1 || vals.getRank() != 1)
    return emitOpError() << "row_ptr, col_idx and values must be 1-D (CSR)";
  if (ci.getDimSize(0) != vals.getDimSize(0))
    return emitOpError() << "col_idx has " << ci.getDimSize(0)
                         << " entries but values has " << vals.getDimSize(0);
  if (x.getRank() != 2 || res.getRank() != 2)
    return emitOpError() << "input and result must be [nodes, features]";
  if (rp.getDimSize(0) != res.getDimSize(0) + 1)
    return emitOpError() << "row_ptr must have rows + 1 = "
                         << res.getDimSize(0) + 1 << " entries, got "
                         << rp.getDimSize(0);
  if (res.getDimSize(1) != x.getDimSize(1))
    return emitOpError() << "result must keep the input's " << x.getDimSize(1)
                         << " features";
  return success();
}

//===----------------------------------------------------------------------===//
// Mixture of experts
//===----------------------------------------------------------------------===//

/// Token-slot tables (top_k's indices, moe_slots' experts and slots) are
/// [tokens, choices] of i64: the runtime reads them as int64_t.
static LogicalResult verifyChoiceTable(Operation *op, RankedTensorType t, StringRef name,
                                       int64_t rank = 2) {
  if (!t.getElementType().isInteger(64) || (rank >= 0 && t.getRank() != rank))
    return op->emitOpError() << name << " must be "
                             << (rank == 2 ? "[tokens, choices] of i64" : "i64") << ", got " << t;
  return success();
}

LogicalResult TopKOp::verify() {
  auto in = getInput().getType();
  if (in.getRank() < 1)
    return emitOpError() << "input must have a dimension to choose from";
  int64_t k = getK(), n = in.getShape().back();
  if (k < 1 || k > n)
    return emitOpError() << "k must be in [1, " << n << "] (the last dimension), got " << k;
  SmallVector<int64_t> shape(in.getShape());
  shape.back() = k;
  if (getValues().getType().getShape() != ArrayRef<int64_t>(shape) ||
      getValues().getType().getElementType() != in.getElementType())
    return emitOpError() << "values must be " << shapeStr(shape) << " of the input's "
                         << in.getElementType();
  if (failed(verifyChoiceTable(*this, getIndices().getType(), "indices", -1)))
    return failure();
  if (getIndices().getType().getShape() != ArrayRef<int64_t>(shape))
    return emitOpError() << "indices must have the values' shape " << shapeStr(shape);
  return success();
}

LogicalResult MoeSlotsOp::verify() {
  auto ex = getExperts().getType();
  if (failed(verifyChoiceTable(*this, ex, "experts")) ||
      failed(verifyChoiceTable(*this, getSlots().getType(), "slots")))
    return failure();
  if (getSlots().getType().getShape() != ex.getShape())
    return emitOpError() << "slots must have the experts' shape " << shapeStr(ex.getShape());
  int64_t e = getNumExperts(), c = getCapacity();
  if (ex.getDimSize(1) > e)
    return emitOpError() << "each token chooses " << ex.getDimSize(1) << " of only " << e
                         << " experts";
  if (e > (int64_t(1) << 20) || c > (int64_t(1) << 40) / e)
    return emitOpError() << "experts x capacity (" << e << " x " << c
                         << ") must be at most 2^40 rows";
  auto counts = getCounts().getType();
  if (counts.getRank() != 1 || counts.getDimSize(0) != e || !counts.getElementType().isF32())
    return emitOpError() << "counts must be tensor<" << e << "xf32>, got " << counts;
  return success();
}

/// What moe_dispatch and moe_combine share: tokens [N, D] (one side), rows
/// [R, D] (the other), slots [N, K] and optional weights [N, K].
static LogicalResult verifySlotMove(Operation *op, RankedTensorType tokens, RankedTensorType rows,
                                    RankedTensorType slots, Value weights) {
  if (failed(verifyChoiceTable(op, slots, "slots")))
    return failure();
  if (tokens.getRank() != 2 || rows.getRank() != 2)
    return op->emitOpError() << "tokens and expert rows must be [rows, features]";
  if (tokens.getDimSize(1) != rows.getDimSize(1) || tokens.getElementType() != rows.getElementType())
    return op->emitOpError() << "tokens " << tokens << " and expert rows " << rows
                             << " must have one feature size and element type";
  if (slots.getDimSize(0) != tokens.getDimSize(0))
    return op->emitOpError() << "slots must have a row a token (" << tokens.getDimSize(0)
                             << "), got " << slots.getDimSize(0);
  if (weights && !sameShapeAndElement(weights.getType(),
                                      RankedTensorType::get(slots.getShape(), tokens.getElementType())))
    return op->emitOpError() << "weights must be " << shapeStr(slots.getShape()) << " of "
                             << tokens.getElementType();
  return success();
}

LogicalResult MoeDispatchOp::verify() {
  return verifySlotMove(*this, getInput().getType(), getResult().getType(), getSlots().getType(),
                        getWeights());
}

LogicalResult MoeCombineOp::verify() {
  return verifySlotMove(*this, getResult().getType(), getInput().getType(), getSlots().getType(),
                        getWeights());
}

//===----------------------------------------------------------------------===//
// Shapes and reductions
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::verify() {
  auto in = tensorOf(getInput()), out = tensorOf(getResult());
  if (in.getElementType() != out.getElementType())
    return emitOpError() << "element type must not change";
  if (in.getNumElements() != out.getNumElements())
    return emitOpError() << "cannot reshape " << in.getNumElements()
                         << " elements into " << shapeStr(out.getShape())
                         << " (" << out.getNumElements() << " elements)";
  if (getMemSpace(in) != getMemSpace(out))
    return emitOpError() << "cannot change placement; use loom.copy";
  return success();
}

OpFoldResult ReshapeOp::fold(FoldAdaptor) {
  if (getInput().getType() == getResult().getType())
    return getInput();
  // reshape(reshape(x)) = reshape(x): only the final shape matters.
  if (auto inner = getInput().getDefiningOp<ReshapeOp>()) {
    getInputMutable().assign(inner.getInput());
    return getResult();
  }
  return {};
}

LogicalResult TransposeOp::verify() {
  auto in = tensorOf(getInput()), out = tensorOf(getResult());
  ArrayRef<int64_t> perm = getPerm();
  if ((int64_t)perm.size() != in.getRank())
    return emitOpError() << "permutation has " << perm.size()
                         << " entries for a tensor of rank " << in.getRank();
  SmallVector<bool> seen(perm.size(), false);
  SmallVector<int64_t> shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= in.getRank() || seen[p])
      return emitOpError() << "perm " << shapeStr(perm)
                           << " is not a permutation of 0.." << in.getRank() - 1;
    seen[p] = true;
    shape.push_back(in.getDimSize(p));
  }
  if (ArrayRef<int64_t>(shape) != out.getShape() ||
      in.getElementType() != out.getElementType())
    return emitOpError() << "result shape must be " << shapeStr(shape);
  return success();
}

OpFoldResult TransposeOp::fold(FoldAdaptor) {
  ArrayRef<int64_t> perm = getPerm();
  if (llvm::all_of(llvm::enumerate(perm),
                   [](auto p) { return (int64_t)p.index() == p.value(); }))
    return getInput();
  // transpose(transpose(x, p1), p2) = transpose(x, p1 ∘ p2).
  if (auto inner = getInput().getDefiningOp<TransposeOp>()) {
    ArrayRef<int64_t> p1 = inner.getPerm();
    SmallVector<int64_t> composed;
    for (int64_t p : perm)
      composed.push_back(p1[p]);
    getInputMutable().assign(inner.getInput());
    setPerm(composed);
    return getResult();
  }
  return {};
}

LogicalResult SliceOp::verify() {
  auto in = tensorOf(getInput()), out = tensorOf(getResult());
  int64_t rank = in.getRank();
  if ((int64_t)getStart().size() != rank || (int64_t)getLimit().size() != rank ||
      (int64_t)getStep().size() != rank)
    return emitOpError() << "start, limit and step need one entry per "
                            "dimension ("
                         << rank << ")";
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t s = getStart()[d], l = getLimit()[d], st = getStep()[d];
    if (st < 1)
      return emitOpError() << "step must be positive in dimension " << d;
    if (s < 0 || l > in.getDimSize(d) || s > l)
      return emitOpError() << "bounds [" << s << ", " << l
                           << ") out of range in dimension " << d << " of size "
                           << in.getDimSize(d);
    // ceil((l - s) / st) without l - s + st - 1, which overflows for a
    // step near INT64_MAX (legal: one element; fuzz-onnx-proto found it).
    shape.push_back(l > s ? (l - s - 1) / st + 1 : 0);
  }
  if (ArrayRef<int64_t>(shape) != out.getShape() ||
      in.getElementType() != out.getElementType())
    return emitOpError() << "result shape must be " << shapeStr(shape);
  return success();
}

LogicalResult ConcatOp::verify() {
  if (getInputs().empty())
    return emitOpError() << "needs at least one input";
  auto first = tensorOf(getInputs()[0]);
  FailureOr<int64_t> dim = normaliseDim(*this, getDim(), first.getRank());
  if (failed(dim))
    return failure();
  SmallVector<int64_t> shape(first.getShape());
  shape[*dim] = 0;
  for (auto [i, v] : llvm::enumerate(getInputs())) {
    auto t = tensorOf(v);
    if (t.getRank() != first.getRank() ||
        t.getElementType() != first.getElementType())
      return emitOpError() << "input #" << i
                           << " differs in rank or element type";
    for (int64_t d = 0; d < t.getRank(); ++d)
      if (d != *dim && t.getDimSize(d) != first.getDimSize(d))
        return emitOpError() << "input #" << i << " differs in dimension " << d
                             << " (only dimension " << *dim << " may differ)";
    shape[*dim] += t.getDimSize(*dim);
  }
  if (ArrayRef<int64_t>(shape) != tensorOf(getResult()).getShape())
    return emitOpError() << "result shape must be " << shapeStr(shape);
  return success();
}

LogicalResult BroadcastOp::verify() {
  auto in = tensorOf(getInput()), out = tensorOf(getResult());
  SmallVector<int64_t> shape;
  if (in.getElementType() != out.getElementType() ||
      !OpTrait::util::getBroadcastedShape(in.getShape(), out.getShape(),
                                          shape) ||
      ArrayRef<int64_t>(shape) != out.getShape())
    return emitOpError() << "cannot broadcast " << shapeStr(in.getShape())
                         << " to " << shapeStr(out.getShape());
  return success();
}

LogicalResult ReduceOp::verify() {
  auto in = tensorOf(getInput()), out = tensorOf(getResult());
  llvm::SmallSet<int64_t, 4> dims;
  for (int64_t d : getDims()) {
    FailureOr<int64_t> nd = normaliseDim(*this, d, in.getRank());
    if (failed(nd))
      return failure();
    if (!dims.insert(*nd).second)
      return emitOpError() << "reduces dimension " << *nd << " twice";
  }
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < in.getRank(); ++d) {
    if (!dims.contains(d))
      shape.push_back(in.getDimSize(d));
    else if (getKeepdim())
      shape.push_back(1);
  }
  if (ArrayRef<int64_t>(shape) != out.getShape() ||
      in.getElementType() != out.getElementType())
    return emitOpError() << "result shape must be " << shapeStr(shape);
  return success();
}

LogicalResult CrossEntropyOp::verify() {
  auto logits = getLogits().getType(), labels = getLabels().getType();
  if (logits.getRank() < 1 ||
      logits.getShape().drop_back() != labels.getShape())
    return emitOpError() << "labels must have the logits' shape without the "
                            "class dimension: expected "
                         << shapeStr(logits.getShape().drop_back()) << ", got "
                         << shapeStr(labels.getShape());
  return success();
}

//===----------------------------------------------------------------------===//
#include "dialects/Loom/LoomInterfaces.cpp.inc"
#define GET_OP_CLASSES
#include "dialects/Loom/LoomOps.cpp.inc"

InitAttr mlir::loom::defaultInitFor(ParamOp p, double stddev) {
  MLIRContext *ctx = p.getContext();
  auto type = cast<RankedTensorType>(p.getType());
  if (type.getRank() >= 2)
    return InitAttr::get(ctx, InitKind::normal, APFloat(0.0), APFloat(stddev));
  if (p.getSymName().ends_with("bias"))
    return InitAttr::get(ctx, InitKind::zeros, APFloat(0.0), APFloat(0.0));
  return InitAttr::get(ctx, InitKind::ones, APFloat(0.0), APFloat(0.0));
}

std::vector<int64_t> mlir::loom::rowMajorStrides(ArrayRef<int64_t> shape) {
  std::vector<int64_t> st(shape.size(), 1);
  for (int i = int(shape.size()) - 2; i >= 0; --i)
    st[i] = st[i + 1] * shape[i + 1];
  return st;
}

std::vector<int64_t> mlir::loom::alignedShape(Value v, int rank) {
  auto sh = cast<RankedTensorType>(v.getType()).getShape();
  std::vector<int64_t> r(rank - sh.size(), 1);
  r.insert(r.end(), sh.begin(), sh.end());
  return r;
}

std::vector<int64_t> mlir::loom::broadcastInputStrides(BroadcastOp op) {
  auto outShape = op.getResult().getType().getShape();
  int rank = int(outShape.size());
  std::vector<int64_t> inShape = alignedShape(op.getInput(), rank);
  std::vector<int64_t> st = rowMajorStrides(inShape);
  for (int d = 0; d < rank; ++d)
    if (inShape[d] == 1 && outShape[d] != 1)
      st[d] = 0;
  return st;
}

std::array<int64_t, 3> mlir::loom::axisView(ArrayRef<int64_t> shape, int64_t first,
                                            int64_t last) {
  std::array<int64_t, 3> v{1, 1, 1};
  for (int64_t i = 0; i < int64_t(shape.size()); ++i)
    v[i < first ? 0 : i <= last ? 1 : 2] *= shape[i];
  return v;
}

SmallVector<ReduceStep> mlir::loom::reduceSteps(ReduceOp op) {
  auto type = cast<RankedTensorType>(op.getInput().getType());
  SmallVector<int64_t> dims;
  for (int64_t d : op.getDims())
    dims.push_back(d < 0 ? d + type.getRank() : d);
  llvm::sort(dims);
  SmallVector<ReduceStep> steps;
  SmallVector<int64_t> shape(type.getShape());
  // A run of adjacent reduced dims is one contiguous middle axis: one step
  // (a bias gradient over [B, T, D] reduces B*T rows at once, in fp32,
  // instead of T and then B with a rounded intermediate).
  for (size_t j = dims.size(); j > 0;) {
    int64_t last = dims[--j], first = last;
    while (j > 0 && dims[j - 1] == first - 1)
      first = dims[--j];
    auto [outer, len, inner] = axisView(shape, first, last);
    ReduceStep st{outer, len, inner, {}};
    for (int64_t i = first; i <= last; ++i)
      shape[i] = 1;
    st.shape = shape;
    steps.push_back(std::move(st));
  }
  return steps;
}

RankedTensorType mlir::loom::zeroSizedTensor(Operation *op) {
  for (Type t : llvm::concat<Type>(op->getOperandTypes(), op->getResultTypes()))
    if (auto r = dyn_cast<RankedTensorType>(t); r && r.getRank() > 0 && r.getNumElements() == 0)
      return r;
  return {};
}

bool mlir::loom::isBackwardWork(Operation *op) {
  if (op->getName().getStringRef() == "func.call") { // no func dependency here
    auto callee = op->getAttrOfType<FlatSymbolRefAttr>("callee");
    return callee && callee.getValue() == LoomDialect::kForwardBackward;
  }
  if (!isa<LoomDialect>(op->getDialect()))
    return false;
  if (isa<AdamOp, SgdOp, CopyOp, WaitOp, StoreOp, LoadOp, ReleaseOp, ShardOp, AllReduceOp,
          ReduceScatterOp, AllGatherOp, AllToAllOp, BroadcastCommOp, SubgroupOp, ParamOp, StateOp,
          TopologyOp>(op))
    return false;
  if (auto c = dyn_cast<CastOp>(op))
    if (Operation *d = c.getInput().getDefiningOp(); d && isa<AdamOp, SgdOp>(d))
      return false;
  return llvm::none_of(op->getOperandTypes(),
                       [](Type t) { return getExecSide(t) == ExecSide::Cpu; });
}

CastOp mlir::loom::fusedRefreshCast(AdamOp adam) {
  if (!cast<RankedTensorType>(adam.getGrad().getType()).getElementType().isBF16())
    return CastOp();
  Value w = adam.getNewParam();
  for (Operation *u : w.getUsers())
    if (auto c = dyn_cast<CastOp>(u))
      if (cast<RankedTensorType>(c.getType()).getElementType().isBF16() &&
          getExecSide(c.getType()) == getExecSide(w.getType()))
        return c;
  return CastOp();
}

