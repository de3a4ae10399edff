//===- LoomDialect.cpp - dialect registration and placement helpers -------===//
#include "dialects/Loom/LoomDialect.h"
#include "dialects/Loom/LoomOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
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
  auto expect = [&](bool ok, StringRef what) -> LogicalResult {
    if (ok)
      return success();
    return op->emitError() << "'" << name << "' must be " << what;
  };
  if (name == LoomDialect::GradParamsAttrHelper::getNameStr() || name == LoomDialect::ShardOfAttrHelper::getNameStr())
    return symbols();
  if (name == LoomDialect::MetricSumAttrHelper::getNameStr())
    return expect(isa<UnitAttr>(value) && isa<StateOp>(op), "a unit attribute on a loom.state");
  if (name == LoomDialect::LayoutOfAttrHelper::getNameStr())
    return isa<StateOp>(op) ? symbols() : expect(false, "on a loom.state");
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
  if (name == LoomDialect::TpSliceAttrHelper::getNameStr()) {
    auto v = dyn_cast<DenseI64ArrayAttr>(value);
    return expect(v && v.size() == 2 && v[0] >= 0 && v[0] < 8 && v[1] >= 1 && isa<ParamOp>(op),
                  "[dim, groups] (0 <= dim < 8, groups >= 1) on a loom.param");
  }
  if (name == LoomDialect::TensorParallelAttrHelper::getNameStr()) {
    auto v = dyn_cast<IntegerAttr>(value);
    return expect(v && v.getValue().getSignificantBits() <= 64 && v.getInt() >= 1 &&
                      v.getInt() <= (1 << 20) && isa<ModuleOp>(op),
                  "a positive number of ranks on the module");
  }
  if (name == LoomDialect::StageAttrHelper::getNameStr()) {
    auto v = dyn_cast<IntegerAttr>(value);
    return expect(v && v.getValue().getSignificantBits() <= 64 && v.getInt() >= 0 &&
                      !isa<ModuleOp, func::FuncOp>(op),
                  "a non-negative integer on an op or a loom.param");
  }
  if (name == LoomDialect::PipelineAttrHelper::getNameStr()) {
    auto v = dyn_cast<DenseI64ArrayAttr>(value);
    return expect(v && (v.size() == 3 || (v.size() == 4 && v[3] >= 1)) && v[1] >= 2 &&
                      v[0] >= 0 && v[0] < v[1] && v[2] >= 0 && isa<ModuleOp>(op),
                  "[stage, stages, level] or [stage, stages, level, chunks] on the module, with "
                  "0 <= stage < stages, stages >= 2, level >= 0 and chunks >= 1");
  }
  if (name == LoomDialect::ExpertParallelAttrHelper::getNameStr()) {
    auto v = dyn_cast<DenseI64ArrayAttr>(value);
    return expect(v && v.size() == 3 && v[1] >= 2 && v[0] >= 0 && v[0] < v[1] && v[2] >= 0 &&
                      isa<ModuleOp>(op),
                  "[rank, ranks, level] on the module, with 0 <= rank < ranks, ranks >= 2 and "
                  "level >= 0");
  }
  if (name == LoomDialect::ExpertAttrHelper::getNameStr())
    return expect(isa<UnitAttr>(value) && isa<ParamOp>(op), "a unit attribute on a loom.param");
  if (name == LoomDialect::InitSkipAttrHelper::getNameStr()) {
    auto v = dyn_cast<IntegerAttr>(value);
    return expect(v && v.getValue().getSignificantBits() <= 64 && v.getInt() >= 0 &&
                      isa<ParamOp>(op),
                  "a non-negative number of elements on a loom.param");
  }
  if (name == LoomDialect::TiedPeerAttrHelper::getNameStr()) {
    auto v = dyn_cast<IntegerAttr>(value);
    return expect(v && v.getValue().getSignificantBits() <= 64 && v.getInt() != 0 &&
                      isa<ParamOp>(op),
                  "a nonzero stage offset on a loom.param");
  }
  if (name == LoomDialect::MicroBatchAttrHelper::getNameStr()) {
    auto v = dyn_cast<IntegerAttr>(value);
    return expect(v && v.getValue().getSignificantBits() <= 64 && v.getInt() >= 0 &&
                      !isa<ModuleOp, func::FuncOp>(op),
                  "a non-negative integer on an op");
  }
  if (name == LoomDialect::Fp32AttrHelper::getNameStr())
    return expect(isa<UnitAttr>(value) && !isa<ModuleOp, func::FuncOp>(op),
                  "a unit attribute on an op");
  if (name == LoomDialect::SequenceParallelAttrHelper::getNameStr())
    return expect(isa<UnitAttr>(value) && isa<ModuleOp>(op) &&
                      op->hasAttr(LoomDialect::TensorParallelAttrHelper::getNameStr()),
                  "a unit attribute on a module with loom.tensor_parallel");
  // The typed decisions: their own verifiers ran when they were built.
  if (name == LoomDialect::DataParallelAttrHelper::getNameStr())
    return expect(isa<DataParallelAttr>(value) && isa<func::FuncOp>(op),
                  "a #loom.data_parallel on a function");
  if (name == LoomDialect::DilocoAttrHelper::getNameStr())
    return expect(isa<DilocoAttr>(value) && isa<func::FuncOp>(op), "a #loom.diloco on a function");
  if (name == LoomDialect::OffloadPlanAttrHelper::getNameStr())
    return expect(isa<OffloadPlanAttr>(value) && isa<ModuleOp>(op),
                  "a #loom.offload_plan on the module");
  if (name == LoomDialect::OptimizerOffloadAttrHelper::getNameStr())
    return expect(isa<OptimizerOffloadAttr>(value) && isa<func::FuncOp>(op),
                  "a #loom.optimizer_offload on a function");
  if (name == LoomDialect::GraphAttrHelper::getNameStr())
    return expect(isa<GraphAttr>(value) && isa<ModuleOp>(op), "a #loom.graph on the module");
  if (name == LoomDialect::PlanAttrHelper::getNameStr()) {
    auto d = dyn_cast<DictionaryAttr>(value);
    return expect(d && isa<ModuleOp>(op) && isa_and_nonnull<StringAttr>(d.get("flags")) &&
                      isa_and_nonnull<FloatAttr>(d.get("predicted_step_s")),
                  "{flags = \"...\", predicted_step_s = F} on the module");
  }
  if (name == LoomDialect::ModelAttrHelper::getNameStr() ||
      name == LoomDialect::NoteAttrHelper::getNameStr())
    return expect(isa<StringAttr>(value), "a string");
  if (name == LoomDialect::FreezeStepAttrHelper::getNameStr() ||
      name == LoomDialect::VarianceRefreshAttrHelper::getNameStr()) {
    auto v = dyn_cast<IntegerAttr>(value);
    return expect(v && v.getValue().getSignificantBits() <= 64 && v.getInt() >= 1,
                  "a positive integer");
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

int64_t mlir::loom::storageBytesOf(Type type) {
  auto r = dyn_cast<RankedTensorType>(type);
  if (!r || !r.hasStaticShape())
    return 0;
  return r.getNumElements() * int64_t(storageBytes(r.getElementType()));
}

RankedTensorType mlir::loom::withMemSpace(RankedTensorType type,
                                          MemSpace space) {
  return RankedTensorType::get(type.getShape(), type.getElementType(),
                               MemSpaceAttr::get(type.getContext(), space));
}

DataParallelAttr mlir::loom::getDataParallel(Operation *step) {
  return step->getAttrOfType<DataParallelAttr>(LoomDialect::DataParallelAttrHelper::getNameStr());
}

void mlir::loom::setDataParallel(Operation *step, int64_t world, int64_t zeroStage) {
  step->setAttr(LoomDialect::DataParallelAttrHelper::getNameStr(),
                DataParallelAttr::get(step->getContext(), world, zeroStage));
}

OffloadPlanAttr mlir::loom::getOffloadPlan(Operation *module) {
  return module->getAttrOfType<OffloadPlanAttr>(LoomDialect::OffloadPlanAttrHelper::getNameStr());
}
