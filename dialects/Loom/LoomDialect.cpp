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

/// The discardable `loom.*` attributes and their shapes. A pass that hands
/// a new one to another adds it here (docs/developing.md).
LogicalResult LoomDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  Attribute value = attr.getValue();
  auto symbols = [&]() -> LogicalResult {
    auto array = dyn_cast<ArrayAttr>(value);
    if (!array || !llvm::all_of(array, [](Attribute a) { return isa<FlatSymbolRefAttr>(a); }))
      return op->emitError() << "'" << name << "' must be an array of symbol references";
    return success();
  };
  // A dictionary whose `keys` are integers in [lo, hi] (other keys allowed).
  auto integers = [&](ArrayRef<StringRef> keys, ArrayRef<int64_t> lo,
                      ArrayRef<int64_t> hi) -> LogicalResult {
    auto dict = dyn_cast<DictionaryAttr>(value);
    for (auto [i, k] : llvm::enumerate(keys)) {
      auto v = dict ? dict.getAs<IntegerAttr>(k) : IntegerAttr();
      if (!v || v.getValue().getSignificantBits() > 64 || v.getInt() < lo[i] ||
          v.getInt() > hi[i])
        return op->emitError() << "'" << name << "' must be a dictionary with an integer '" << k
                               << "' in [" << lo[i] << ", " << hi[i] << "]";
    }
    return success();
  };
  auto expect = [&](bool ok, StringRef what) -> LogicalResult {
    if (ok)
      return success();
    return op->emitError() << "'" << name << "' must be " << what;
  };
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if (name == LoomDialect::GradParamsAttrHelper::getNameStr() || name == LoomDialect::ShardOfAttrHelper::getNameStr())
    return symbols();
  if (name == LoomDialect::ShardedIntoAttrHelper::getNameStr() || name == LoomDialect::MirrorOfAttrHelper::getNameStr())
    return expect(isa<FlatSymbolRefAttr>(value), "a symbol reference");
  if (name == LoomDialect::PaddedAttrHelper::getNameStr()) {
    auto v = dyn_cast<IntegerAttr>(value);
    return expect(v && v.getValue().getSignificantBits() <= 64 && v.getInt() >= 0,
                  "a non-negative integer");
  }
  if (name == LoomDialect::MemberAlignAttrHelper::getNameStr()) {
    auto v = dyn_cast<IntegerAttr>(value);
    return expect(v && v.getValue().getSignificantBits() <= 64 && v.getInt() >= 1 &&
                      v.getInt() <= (int64_t(1) << 30),
                  "an integer in [1, 2^30]");
  }
  if (name == LoomDialect::DataParallelAttrHelper::getNameStr())
    return integers({"world", "zero_stage"}, {1, 0}, {int64_t(1) << 20, 3});
  if (name == LoomDialect::DilocoAttrHelper::getNameStr())
    return integers({"every", "offset"}, {1, 1}, {kMax, kMax});
  if (name == LoomDialect::OffloadPlanAttrHelper::getNameStr())
    return integers({"gpu", "stream", "cpu"}, {0, 0, 0}, {kMax, kMax, kMax});
  if (name == LoomDialect::ModelAttrHelper::getNameStr() ||
      name == LoomDialect::OptimizerOffloadAttrHelper::getNameStr() ||
      name == LoomDialect::NoteAttrHelper::getNameStr())
    return expect(isa<StringAttr>(value), "a string");
  if (name == LoomDialect::HostThreadAttrHelper::getNameStr())
    return expect(isa<UnitAttr>(value) && isa<ModuleOp>(op), "a unit attribute on the module");
  if (name == LoomDialect::FreezeStepAttrHelper::getNameStr()) {
    auto v = dyn_cast<IntegerAttr>(value);
    return expect(v && v.getValue().getSignificantBits() <= 64 && v.getInt() >= 1,
                  "a positive integer");
  }
  if (name == LoomDialect::GraphAttrHelper::getNameStr()) {
    auto d = dyn_cast<DictionaryAttr>(value);
    auto fanouts = d ? dyn_cast_or_null<DenseI64ArrayAttr>(d.get("fanouts")) : nullptr;
    auto norm = d ? dyn_cast_or_null<StringAttr>(d.get("norm")) : nullptr;
    auto placement = d ? d.get("placement") : Attribute();
    auto where = dyn_cast_or_null<StringAttr>(placement);
    bool placed = !placement || (where && (where.getValue() == "device" ||
                                           where.getValue() == "zero-copy" ||
                                           where.getValue() == "host-gather"));
    return expect(d && d.size() == 2u + (placement ? 1 : 0) && placed && fanouts &&
                      !fanouts.empty() &&
                      llvm::all_of(fanouts.asArrayRef(),
                                   [](int64_t f) { return f >= 1 && f <= 4096; }) &&
                      norm && (norm.getValue() == "mean" || norm.getValue() == "gcn"),
                  "{fanouts = array<i64: ...> (each in [1, 4096]), norm = \"mean\" or "
                  "\"gcn\", optional placement = \"device\", \"zero-copy\" or "
                  "\"host-gather\"}");
  }
  if (name == LoomDialect::InputNamesAttrHelper::getNameStr()) {
    auto names = dyn_cast<ArrayAttr>(value);
    return expect(names && llvm::all_of(names, [](Attribute a) {
                    auto s = dyn_cast<StringAttr>(a);
                    return s && !s.getValue().empty();
                  }),
                  "an array of non-empty strings");
  }
  return op->emitError() << "unknown attribute '" << name
                         << "' (loom.* attributes are the dialect's; see "
                            "LoomDialect::verifyOperationAttribute)";
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

std::optional<DataParallelInfo> mlir::loom::getDataParallel(Operation *step) {
  auto dp = step->getAttrOfType<DictionaryAttr>(LoomDialect::DataParallelAttrHelper::getNameStr());
  if (!dp)
    return std::nullopt;
  return DataParallelInfo{dp.getAs<IntegerAttr>("world").getInt(),
                          dp.getAs<IntegerAttr>("zero_stage").getInt()};
}

void mlir::loom::setDataParallel(Operation *step, DataParallelInfo info) {
  Builder b(step->getContext());
  step->setAttr(LoomDialect::DataParallelAttrHelper::getNameStr(),
                b.getDictionaryAttr({b.getNamedAttr("world", b.getI64IntegerAttr(info.world)),
                                     b.getNamedAttr("zero_stage",
                                                    b.getI64IntegerAttr(info.zeroStage))}));
}

std::optional<OffloadPlanCounts> mlir::loom::getOffloadPlanCounts(Operation *module) {
  auto plan = module->getAttrOfType<DictionaryAttr>(LoomDialect::OffloadPlanAttrHelper::getNameStr());
  if (!plan)
    return std::nullopt;
  return OffloadPlanCounts{plan.getAs<IntegerAttr>("gpu").getInt(),
                           plan.getAs<IntegerAttr>("stream").getInt(),
                           plan.getAs<IntegerAttr>("cpu").getInt()};
}
