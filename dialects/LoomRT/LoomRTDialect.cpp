//===- LoomRTDialect.cpp - the loomrt dialect's registration and verifiers ===//
#include "dialects/LoomRT/LoomRTDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::loomrt;

#include "dialects/LoomRT/LoomRTDialect.cpp.inc"
#include "dialects/LoomRT/LoomRTEnums.cpp.inc"
#include "dialects/LoomRT/LoomRTInterfaces.cpp.inc"
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
  if (attr.getName() == kArenaAttr) {
    auto v = dyn_cast<IntegerAttr>(attr.getValue());
    if (!isa<FunctionOpInterface>(op) || !v || v.getValue().getSignificantBits() > 64 || v.getInt() < 0 ||
        v.getInt() % kArenaAlign)
      return op->emitError() << "'" << kArenaAttr << "' must be an integer >= 0, a multiple of "
                             << kArenaAlign << ", on a function";
    return success();
  }
  if (attr.getName() == kGraphAttr || attr.getName() == kGraphDeclinedAttr) {
    bool unit = attr.getName() == kGraphAttr;
    if (!isa<FunctionOpInterface>(op) ||
        !(unit ? isa<UnitAttr>(attr.getValue()) : isa<StringAttr>(attr.getValue())))
      return op->emitError() << "'" << attr.getName().getValue() << "' must be "
                             << (unit ? "a unit attribute" : "a string") << " on a function";
    return success();
  }
  if (attr.getName() != kProgramAttr)
    return op->emitError() << "unknown loomrt attribute '" << attr.getName().getValue() << "'";
  auto dict = dyn_cast<DictionaryAttr>(attr.getValue());
  for (StringRef k : {"batch", "seq", "vocab", "world", "zero_stage", "task"}) {
    auto v = dict ? dict.getAs<IntegerAttr>(k) : IntegerAttr();
    if (!v || v.getValue().getSignificantBits() > 64 || v.getInt() < (k == "zero_stage" ? -1 : 0) ||
        (k == "task" && v.getInt() > 2))
      return op->emitError() << "'" << kProgramAttr << "' must be a dictionary with integers "
                             << "batch, seq, vocab, world (>= 0), zero_stage (>= -1) and task "
                             << "(0 tokens, 1 arrays or 2 graph); '" << k
                             << "' is missing or out of range";
  }
  // Optional: whether the ranks may go on when one is lost (0 or 1).
  if (Attribute e = dict.get("elastic")) {
    auto v = dyn_cast<IntegerAttr>(e);
    if (!v || v.getValue().getSignificantBits() > 64 || (v.getInt() != 0 && v.getInt() != 1))
      return op->emitError() << "'" << kProgramAttr << "' elastic must be 0 or 1";
  }
  // The step's arguments: {name, dtype (f32 0 or i64 2), shape, limit}.
  auto inputs = dict.getAs<ArrayAttr>("inputs");
  auto bad = [&](const Twine &why) {
    return op->emitError() << "'" << kProgramAttr << "' inputs: " << why;
  };
  if (!inputs || inputs.empty())
    return bad("expected a non-empty array of {name, dtype, shape, limit}");
  for (Attribute a : inputs) {
    auto in = dyn_cast<DictionaryAttr>(a);
    auto name = in ? in.getAs<StringAttr>("name") : StringAttr();
    auto dtype = in ? in.getAs<IntegerAttr>("dtype") : IntegerAttr();
    auto shape = in ? in.getAs<DenseI64ArrayAttr>("shape") : DenseI64ArrayAttr();
    auto limit = in ? in.getAs<IntegerAttr>("limit") : IntegerAttr();
    if (!name || name.getValue().empty() || !dtype ||
        (dtype.getInt() != int64_t(DType::f32) && dtype.getInt() != int64_t(DType::i64)) ||
        !shape || shape.empty() || shape.size() > 8 /* LOOMRT_MAX_RANK */ ||
        llvm::any_of(shape.asArrayRef(), [](int64_t d) { return d < 0; }) || !limit ||
        limit.getInt() < 0)
      return bad("each must be {name (a string), dtype (f32 0 or i64 2), shape (1 to 8 sizes "
                 ">= 0), limit (>= 0)}");
    // A graph program's inputs also say what they hold (train.h,
    // loomrt_input_role: 0 to 5) at which depth, and where the driver keeps
    // them (loomrt_mem_space: 0 device, 1 pinned).
    for (auto [k, hi] : {std::pair<StringRef, int64_t>{"role", 5}, {"depth", 63}, {"space", 1}})
      if (auto v = in.getAs<IntegerAttr>(k); v && (v.getInt() < 0 || v.getInt() > hi))
        return bad(Twine("'") + k + "' must be in [0, " + Twine(hi) + "]");
  }
  if (dict.getAs<IntegerAttr>("task").getInt() == 2) {
    auto fanouts = dict.getAs<DenseI64ArrayAttr>("fanouts");
    auto norm = dict.getAs<IntegerAttr>("norm");
    if (!fanouts || fanouts.empty() ||
        llvm::any_of(fanouts.asArrayRef(), [](int64_t f) { return f < 1 || f > 4096; }) ||
        !norm || norm.getInt() < 0 || norm.getInt() > 1)
      return op->emitError() << "'" << kProgramAttr
                             << "' of a graph program (task 2) needs fanouts (1 to 4096 "
                                "each) and norm (0 mean, 1 gcn)";
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

LogicalResult AllocOp::verify() {
  if (!getOffset())
    return success();
  if (getHost())
    return emitOpError("a planned offset ('at') places a device buffer; host buffers are the "
                       "runtime's to place");
  int64_t at = int64_t(*getOffset());
  if (at % kArenaAlign)
    return emitOpError("offset ") << at << " is not a multiple of " << kArenaAlign;
  auto fn = (*this)->getParentOfType<FunctionOpInterface>();
  auto arena = fn ? fn->getAttrOfType<IntegerAttr>(kArenaAttr) : IntegerAttr();
  if (!arena)
    return emitOpError("has a planned offset but its function has no '") << kArenaAttr << "'";
  if (at > arena.getInt() || int64_t(getBytes()) > arena.getInt() - at)
    return emitOpError("bytes [") << at << ", " << at + int64_t(getBytes())
                                  << ") lie outside the function's planned region of "
                                  << arena.getInt() << " bytes";
  return success();
}

LogicalResult HostTaskOp::verify() {
  Block &body = getBody().front();
  if (body.empty() || !isa<YieldOp>(body.back()))
    return emitOpError("body must end in loomrt.yield");
  auto yield = cast<YieldOp>(body.back());
  if (yield.getEvents().size() != getNumResults())
    return emitOpError("yields ") << yield.getEvents().size() << " events but has "
                                  << getNumResults() << " results";
  for (Operation &op : body) {
    // Buffers and events are taken in program order by the issuing thread.
    if (isa<AllocOp, HostTaskOp, JoinOp>(op))
      return op.emitOpError("inside loomrt.host_task: allocate, join and nest on the "
                            "issuing thread, before the task");
  }
  // The issuing thread reads an event of the task only after a join.
  for (Value r : getResults())
    for (Operation *user : r.getUsers()) {
      Operation *at = getOperation()->getBlock()->findAncestorOpInBlock(*user);
      // A later task runs after this one on the same thread.
      if (at && isa<HostTaskOp>(at) && at != getOperation() &&
          getOperation()->isBeforeInBlock(at))
        continue;
      bool joined = false;
      for (Operation *o = getOperation()->getNextNode(); o && o != at && !joined;
           o = o->getNextNode())
        joined = isa<JoinOp>(o);
      if (!at || !joined)
        return user->emitOpError("uses an event of a loomrt.host_task before a loomrt.join");
    }
  return success();
}

LogicalResult SendRecvOp::verify() {
  if (getShift() == 0)
    return emitOpError("shift is 0: a rank would send to itself (a copy is loomrt.memcpy)");
  return success();
}

LogicalResult P2POp::verify() {
  if (bool(getInput()) != bool(getToAttr()) || bool(getOutput()) != bool(getFromAttr()))
    return emitOpError("names each side with its peer: 'send %in to K', 'recv %out from K'");
  if (!getInput() && !getOutput())
    return emitOpError("sends, receives or both");
  if ((getToAttr() && sendPeer() == 0) || (getFromAttr() && recvPeer() == 0))
    return emitOpError("a peer offset of 0 names the rank itself (a copy is loomrt.memcpy)");
  return success();
}

LogicalResult CommOp::verify() {
  if (!getLevels() && !getSizes())
    return success();
  if (!getLevels() || !getSizes())
    return emitOpError("takes levels and sizes together");
  ArrayRef<int64_t> levels = *getLevels(), sizes = *getSizes();
  if (sizes.empty() || sizes.size() > 16 || llvm::any_of(sizes, [](int64_t s) { return s < 1; }))
    return emitOpError("sizes must be 1 to 16 positive level sizes");
  if (levels.empty())
    return emitOpError("levels must name at least one level");
  for (auto [i, l] : llvm::enumerate(levels))
    if (l < 0 || l >= int64_t(sizes.size()) || (i && l <= levels[i - 1]))
      return emitOpError("levels must be increasing indices into sizes");
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
// The runtime's own checks of the program (common/fused_source.cpp), so the
// IR holds only programs loomrt_fused_elementwise accepts.
LogicalResult FusedElementwiseOp::verify() {
  if (getProgram().size() % 4)
    return emitOpError("program: four integers an instruction, got ") << getProgram().size();
  if (getInTypes().size() != getInputs().size() || getOutTypes().size() != getOutputs().size())
    return emitOpError("one type for each input and output");
  std::vector<loomrt_fused_inst> storage;
  loomrt_fused_program p = toProgram(storage);
  if (!loomrt_fused_source(&p, nullptr, 0))
    return emitOpError() << loomrt_last_error();
  return success();
}

LogicalResult BinaryOp::verify() {
  return sameRank(*this, {getOutShape(), getAShape(), getBShape()});
}
LogicalResult SelectOp::verify() {
  return sameRank(*this, {getOutShape(), getCondShape(), getAShape(), getBShape()});
}

LogicalResult AdamMultiOp::verify() {
  size_t n = getSizes().size();
  if (getParams().size() != n || getGrads().size() != n || getExpAvgs().size() != n ||
      getExpAvgSqs().size() != n)
    return emitOpError("needs one param, grad, exp_avg and exp_avg_sq for each of its ")
           << n << " sizes";
  if (!getRefresh().empty() && getRefresh().size() != n)
    return emitOpError("needs a refresh buffer for every tensor or none");
  if (getGradDtype() == DType::i64)
    return emitOpError("updates with f32 or bf16 gradients");
  if (!getRefresh().empty() && getGradDtype() != DType::bf16)
    return emitOpError("writes bf16 refreshes only with bf16 gradients");
  if (llvm::any_of(getSizes(), [](int64_t x) { return x < 0; }))
    return emitOpError("sizes must be non-negative");
  return success();
}

LogicalResult AdamOp::verify() {
  if (getGradDtype() == DType::i64)
    return emitOpError("updates with f32 or bf16 gradients");
  if (getRefresh() && getGradDtype() != DType::bf16)
    return emitOpError("writes a bf16 refresh only with a bf16 gradient (loomrt_adam_bf16grad)");
  return success();
}

//===----------------------------------------------------------------------===//
// WorkOpInterface: bytes and flops of each call, from its attributes. Bytes
// count what the runtime's kernel touches (docs/cost-model.md, "Step
// simulation"); the step simulation turns them into time with the cost
// model's roofline.
//===----------------------------------------------------------------------===//

Value mlir::loomrt::bufferRoot(Value v) {
  while (true) {
    if (auto view = v.getDefiningOp<ViewOp>())
      v = view.getSource();
    else if (auto rank = v.getDefiningOp<RankViewOp>())
      v = rank.getSource();
    else
      return v;
  }
}

int64_t mlir::loomrt::dtypeBytes(DType t) {
  switch (t) {
  case DType::f32:
    return 4;
  case DType::bf16:
    return 2;
  case DType::i64:
    return 8;
  }
  llvm_unreachable("unknown loomrt dtype");
}

namespace {
double product(ArrayRef<int64_t> shape) {
  double n = 1;
  for (int64_t d : shape)
    n *= double(d);
  return n;
}
double es(DType t) { return double(dtypeBytes(t)); }
/// Scaled dot-product attention's products: q·kᵀ and p·v, 2·BH·T·S·D flops
/// each; a causal mask skips half of them.
double attentionFlops(int64_t bh, int64_t t, int64_t s, int64_t dh, bool causal) {
  return 2.0 * 2.0 * double(bh) * double(t) * double(s) * double(dh) * (causal ? 0.5 : 1.0);
}
} // namespace

double MemcpyOp::getBytesMoved() { return 2.0 * double(getBytes()); }
double WriteConstOp::getBytesMoved() {
  Type t = getValue().getElementType();
  return double(getValue().getNumElements()) * double(std::max(1u, t.getIntOrFloatBitWidth() / 8));
}
double FillOp::getBytesMoved() { return double(getN()) * es(getDtype()); }
// The source is read over the whole span its strides cover, written
// densely: measured on an H200 (bench/loomrt_bench strided, bench/RESULTS.md
// 2026-11-26), GPT-2's q slice of the fused qkv ([16,1024,768] of
// [16,1024,2304], bf16) takes 33 us, as long as reading the span and
// writing the slice at the 2.8-3.0 TB/s a dense copy reaches; counting only
// the bytes kept would predict half of that. A broadcast (stride 0) is
// read once, and an element far from the next costs one 32-byte sector,
// not the gap. Permutations run slower still (the head split 2.9x a dense
// copy of as many bytes): not modelled.
double CopyStridedOp::getBytesMoved() {
  double span = 1;
  for (auto [n, stride] : llvm::zip(getShape(), getSrcStrides()))
    span += double(n - 1) * double(std::abs(stride));
  double n = product(getShape()), e = double(getElemBytes());
  return std::min(span * e, n * std::max(e, 32.0)) + n * e;
}
double UnaryOp::getBytesMoved() { return 2.0 * double(getN()) * es(getDtype()); }
double OnebitCompressOp::getBytesMoved() {
  // Reads x and error twice (norm, then signs), writes error and the signs.
  return double(getN()) * (4 * 4 + 4 + 0.125);
}
double OnebitDecompressOp::getBytesMoved() {
  return double(getN()) * double(getChunks()) * (4 + 0.125);
}
double BlockCompressOp::getBytesMoved() {
  // Reads x twice (the block's largest value, then the codes).
  return double(getN()) * (8 + (getCodec() == BlockCodec::fp8_e4m3 ? 1 : 0.5));
}
double BlockDecompressOp::getBytesMoved() {
  return double(getN()) * (4 + (getCodec() == BlockCodec::fp8_e4m3 ? 1 : 0.5));
}
double OnebitAverageOp::getBytesMoved() {
  return double(getN()) * (4 + 0.125 * double(getWorld()));
}
double DropoutOp::getBytesMoved() { return 2.0 * double(getN()) * es(getDtype()); }
double UnaryGradOp::getBytesMoved() { return 3.0 * double(getN()) * es(getDtype()); }
double BinaryOp::getBytesMoved() {
  return (product(getAShape()) + product(getBShape()) + product(getOutShape())) * es(getDtype());
}
double SelectOp::getBytesMoved() {
  return product(getCondShape()) +
         (product(getAShape()) + product(getBShape()) + product(getOutShape())) * es(getDtype());
}
double CastOp::getBytesMoved() { return double(getN()) * (es(getFrom()) + es(getTo())); }
// Each input read once and each output written once an element.
double FusedElementwiseOp::getBytesMoved() {
  double bytes = 0;
  for (ArrayRef<int32_t> types : {getInTypes(), getOutTypes()})
    for (int32_t t : types)
      bytes += es(DType(t));
  return bytes * double(getN());
}
// One operation an element for each instruction that computes.
double FusedElementwiseOp::getFlops() {
  ArrayRef<int32_t> p = getProgram();
  double ops = 0;
  for (size_t k = 0; k + 3 < p.size(); k += 4)
    ops += p[k] != LOOMRT_FUSED_LOAD && p[k] != LOOMRT_FUSED_STORE && p[k] != LOOMRT_FUSED_ROUND;
  return ops * double(getN());
}
DType FusedElementwiseOp::getWorkDType() {
  for (ArrayRef<int32_t> types : {getInTypes(), getOutTypes()})
    for (int32_t t : types)
      if (DType(t) == DType::bf16)
        return DType::bf16;
  return DType::f32;
}
loomrt_fused_program FusedElementwiseOp::toProgram(std::vector<loomrt_fused_inst> &storage) {
  ArrayRef<int32_t> p = getProgram();
  storage.clear();
  for (size_t k = 0; k + 3 < p.size(); k += 4)
    storage.push_back({p[k], p[k + 1], p[k + 2], p[k + 3]});
  static_assert(sizeof(loomrt_dtype) == sizeof(int32_t), "dtype arrays are int32 arrays");
  // StringAttr storage is null-terminated (StorageUniquer's copyInto); an
  // empty name is a null pointer, which the runtime's checks refuse.
  return loomrt_fused_program{getName().data(), int32_t(getInputs().size()),
                              int32_t(getOutputs().size()), int32_t(storage.size()),
                              reinterpret_cast<const loomrt_dtype *>(getInTypes().data()),
                              reinterpret_cast<const loomrt_dtype *>(getOutTypes().data()),
                              storage.data()};
}

/// A batched GEMM's bytes (an operand with batch stride 0 is read once) and
/// flops; matmul_bias adds its bias, read once.
template <typename Op> static double gemmBytes(Op o) {
  double b = double(o.getBatch()), m = double(o.getM()), n = double(o.getN()),
         k = double(o.getK());
  double a = (o.getStrideA() ? b : 1) * m * k, bb = (o.getStrideB() ? b : 1) * k * n;
  return (a + bb) * es(o.getIn()) + b * m * n * es(o.getOut());
}
template <typename Op> static double gemmFlops(Op o) {
  return 2.0 * double(o.getBatch()) * double(o.getM()) * double(o.getN()) * double(o.getK());
}
double MatmulOp::getBytesMoved() { return gemmBytes(*this); }
double MatmulOp::getFlops() { return gemmFlops(*this); }
DType MatmulOp::getWorkDType() { return getIn(); }
double MatmulBiasOp::getBytesMoved() {
  return gemmBytes(*this) + double(getN()) * es(getOut());
}
double MatmulBiasOp::getFlops() {
  return gemmFlops(*this) + double(getBatch()) * double(getM()) * double(getN());
}
DType MatmulBiasOp::getWorkDType() { return getIn(); }
// The activation epilogues: the GEMM, the bias (forward), and the
// elementwise pass's extra traffic: aux written beside C (forward), aux
// read (gradient); a handful of flops an element for the activation.
double MatmulBiasActOp::getBytesMoved() {
  double mn = double(getBatch()) * double(getM()) * double(getN());
  return gemmBytes(*this) + (double(getN()) + mn) * es(getOut());
}
double MatmulBiasActOp::getFlops() {
  return gemmFlops(*this) + 9 * double(getBatch()) * double(getM()) * double(getN());
}
DType MatmulBiasActOp::getWorkDType() { return getIn(); }
double MatmulActGradOp::getBytesMoved() {
  return gemmBytes(*this) + double(getBatch()) * double(getM()) * double(getN()) * es(getOut());
}
double MatmulActGradOp::getFlops() {
  return gemmFlops(*this) + 12 * double(getBatch()) * double(getM()) * double(getN());
}
DType MatmulActGradOp::getWorkDType() { return getIn(); }

double MatmulBgradOp::getBytesMoved() { return gemmBytes(*this) + double(getM()) * es(getOut()); }
double MatmulBgradOp::getFlops() { return gemmFlops(*this) + double(getM()) * double(getK()); }
DType MatmulBgradOp::getWorkDType() { return getIn(); }
LogicalResult MatmulBgradOp::verify() {
  if (getBatch() > 1)
    return emitOpError("takes one batch");
  if (getIn() != getOut())
    return emitOpError("needs in and out of one dtype (the bias gradient is in it)");
  if (getDb() == getC())
    return emitOpError("db and c must be different buffers");
  return success();
}

/// What loomrt_matmul_bias_act and loomrt_matmul_act_grad accept: an
/// activation with an epilogue, and one contiguous C (and aux beside it).
template <typename Op> static LogicalResult verifyActGemm(Op o) {
  if (o.getAct() != UnaryKind::gelu_tanh)
    return o.emitOpError("activation '") << stringifyUnaryKind(o.getAct())
                                          << "' has no GEMM epilogue (gelu_tanh has)";
  if (o.getBatch() > 1 && o.getStrideC() != o.getM() * o.getN())
    return o.emitOpError("needs a contiguous C (stride_c = m * n)");
  if (o.getAux() == o.getC())
    return o.emitOpError("aux and c must be different buffers");
  return success();
}
LogicalResult MatmulBiasActOp::verify() { return verifyActGemm(*this); }
LogicalResult MatmulActGradOp::verify() { return verifyActGemm(*this); }

double LayerNormOp::getBytesMoved() {
  double rd = double(getRows()) * double(getD()), d = double(getD());
  return (2 * rd + d * (getB() ? 2 : 1)) * es(getDtype());
}
double LayerNormGradOp::getBytesMoved() {
  double rd = double(getRows()) * double(getD()), d = double(getD());
  return (3 * rd + 3 * d) * es(getDtype()); // dy, x, dx; w, dw, db
}
double RmsNormOp::getBytesMoved() {
  return (2 * double(getRows()) * double(getD()) + double(getD())) * es(getDtype());
}
double RmsNormGradOp::getBytesMoved() {
  return (3 * double(getRows()) * double(getD()) + 2 * double(getD())) * es(getDtype());
}
double SoftmaxOp::getBytesMoved() { return 2 * double(getRows()) * double(getD()) * es(getDtype()); }
double SoftmaxGradOp::getBytesMoved() {
  return 3 * double(getRows()) * double(getD()) * es(getDtype());
}
// Rows of the table are read and written out; the indices are i64.
double EmbeddingOp::getBytesMoved() {
  return double(getN()) * (8 + 2 * double(getD()) * es(getDtype()));
}
double GatherRowsOp::getBytesMoved() { // indices read, rows read and written
  return double(getN()) * (8 + 2 * double(getRowBytes()));
}
// The f32 table gradient is zeroed whole, then rows are added into it.
double EmbeddingGradOp::getBytesMoved() {
  double n = double(getN()), d = double(getD());
  return n * 8 + n * d * es(getDtype()) + double(getVocab()) * d * 4 + 2 * n * d * 4;
}
// Mixture of experts: each pass reads and writes what its rows say; the
// index tables are i64.
double TopKOp::getBytesMoved() {
  return double(getRows()) * (double(getN()) * es(getDtype()) + double(getK()) * (8 + es(getDtype())));
}
double TopKGradOp::getBytesMoved() {
  return double(getRows()) * (double(getN()) * es(getDtype()) + double(getK()) * (8 + es(getDtype())));
}
double MoeSlotsOp::getBytesMoved() { return 16.0 * double(getN()) * double(getK()); }
/// The buffer is zeroed, then each kept choice copies a row.
static double slotMoveBytes(int64_t n, int64_t k, int64_t d, int64_t rows, double es, bool w) {
  return double(rows) * double(d) * es + double(n) * double(k) * (8 + (w ? es : 0)) +
         2.0 * double(n) * double(k) * double(d) * es;
}
double MoeDispatchOp::getBytesMoved() {
  return slotMoveBytes(getN(), getK(), getD(), getRows(), es(getDtype()), bool(getWeights()));
}
double MoeCombineOp::getBytesMoved() {
  return slotMoveBytes(getN(), getK(), getD(), 0, es(getDtype()), bool(getWeights())) +
         double(getN()) * double(getD()) * es(getDtype());
}
double MoeSlotDotOp::getBytesMoved() {
  return (1.0 + double(getK())) * double(getN()) * double(getD()) * es(getDtype()) +
         double(getN()) * double(getK()) * (8 + es(getDtype()));
}
/// The forward's traffic: q and out; k and v.
static double attentionForwardBytes(int64_t bh, int64_t dh, int64_t t, int64_t s, double es) {
  return 2.0 * double(bh) * double(dh) * double(t + s) * es;
}
double AttentionOp::getBytesMoved() {
  return attentionForwardBytes(getBh(), getDh(), getT(), getS(), es(getDtype()));
}
double AttentionOp::getFlops() {
  return attentionFlops(getBh(), getT(), getS(), getDh(), getCausal());
}
double AttentionGradOp::getBytesMoved() { // q, dout, dq; k, v, dk, dv
  return double(getBh()) * double(getDh()) * double(3 * getT() + 4 * getS()) * es(getDtype());
}
// The backward recomputes the scores and forms four more products
// (FlashAttention-2 §3.1.2): 2.5x the forward's.
double AttentionGradOp::getFlops() {
  return 2.5 * attentionFlops(getBh(), getT(), getS(), getDh(), getCausal());
}
double AttentionSaveOp::getBytesMoved() { // the forward's, and the statistics written
  return attentionForwardBytes(getBh(), getDh(), getT(), getS(), es(getDtype())) +
         double(getBh()) * double(getT()) * 4;
}
double AttentionSaveOp::getFlops() {
  return attentionFlops(getBh(), getT(), getS(), getDh(), getCausal());
}
double AttentionGradSavedOp::getBytesMoved() { // q, o, dout, dq; k, v, dk, dv; the statistics
  return double(getBh()) * double(getDh()) * double(4 * getT() + 4 * getS()) * es(getDtype()) +
         double(getBh()) * double(getT()) * 4;
}
// With the forward's output and row statistics kept (FlashAttention-2
// Algorithm 2): the scores again and four products, 2.5x the forward's.
double AttentionGradSavedOp::getFlops() {
  return 2.5 * attentionFlops(getBh(), getT(), getS(), getDh(), getCausal());
}
double CrossEntropyOp::getBytesMoved() {
  return double(getRows()) * (double(getClasses()) * es(getDtype()) + 8) + 4;
}
double CrossEntropyGradOp::getBytesMoved() {
  return double(getRows()) * (2 * double(getClasses()) * es(getDtype()) + 8) + 4;
}
double LerpOp::getBytesMoved() { return 3.0 * double(getN()) * es(getDtype()); }
double RotaryOp::getBytesMoved() {
  return (2 * double(getRows()) + 2 * double(getPeriod())) * double(getD()) * es(getDtype());
}
double CumsumOp::getBytesMoved() {
  return 2 * double(getOuter()) * double(getLen()) * double(getInner()) * es(getDtype());
}
double ReduceOp::getBytesMoved() {
  double oi = double(getOuter()) * double(getInner());
  return (oi * double(getLen()) + oi) * es(getDtype());
}
// Parameters and momentum read and written, the gradient read.
double SgdOp::getBytesMoved() { return 5.0 * double(getN()) * 4; }
// fp32 parameters, both moments read and written, the gradient read, the
// bf16 refresh written (28 bytes per parameter with an fp32 gradient:
// loom::cost::kCpuAdamBytesPerParam).
double AdamMultiOp::getBytesMoved() {
  double n = 0;
  for (int64_t x : getSizes())
    n += double(x);
  return n * (6 * 4 + es(getGradDtype()) + (getRefresh().empty() ? 0 : 2));
}
double AdamOp::getBytesMoved() {
  return double(getN()) * (6 * 4 + es(getGradDtype()) + (getRefresh() ? 2 : 0));
}
