//===- PlaceFeatures.cpp - where a graph model's feature table lives ------===//
//
// loom-place-features: the feature table of a graph model (the @forward
// argument named `features`, read only by loom.embedding) stays on the GPU
// when it fits, else in pinned host memory, read either by the GPU itself
// (zero-copy: Min et al., "Large GCN training with GPU-oriented data
// communication", §4) or gathered by the CPU into a pinned buffer that a
// copy uploads (the conventional path of PyG's NeighborLoader), whichever
// the cost model prices faster for the step's rows (cost::gatherTime).
// The decision is written into the IR (the argument's memory space, a
// loom.zero_copy or the host gather and its copy, and `placement` in
// loom.graph), so it can be printed, tested and forced.
//
//===----------------------------------------------------------------------===//
#include "loom/Passes/Loom.h"
#include "loom/FeaturePlacement.h"

#include "loom/StepSimulation.h"

namespace mlir::loom {
#define GEN_PASS_DEF_PLACEFEATURES
#include "passes/Loom/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;
using ::loom::cost::GatherPlacement;

namespace {

/// The features argument of @`fn`: named `features` by loom.input_names and
/// read by loom.embedding only (as its table).
BlockArgument featuresArg(ModuleOp module, func::FuncOp fn) {
  auto names = module->getAttrOfType<ArrayAttr>(LoomDialect::InputNamesAttrHelper::getNameStr());
  if (!names || names.size() != fn.getNumArguments())
    return {};
  for (auto [i, n] : llvm::enumerate(names))
    if (cast<StringAttr>(n).getValue() == "features")
      return fn.getArgument(i);
  return {};
}

} // namespace

FailureOr<FeaturePlacementPlan> mlir::loom::planFeaturePlacement(ModuleOp module,
                                                                 const ::loom::cost::Hardware &hw,
                                                                 StringRef forced,
                                                                 StringRef function) {
  FeaturePlacementPlan plan;
  std::optional<GatherPlacement> forcedTo = ::loom::cost::parsePlacement(forced);
  if (forced != "auto" && !forcedTo)
    return module.emitError() << "loom-place-features: unknown placement '" << forced
                              << "': expected auto, device, zero-copy or host-gather";
  auto fn = module.lookupSymbol<func::FuncOp>(function);
  if (!fn || fn.isExternal() ||
      !module->hasAttr(LoomDialect::GraphAttrHelper::getNameStr()))
    return plan; // not a graph model: nothing to place
  BlockArgument table = featuresArg(module, fn);
  if (!table)
    return plan;
  auto type = dyn_cast<RankedTensorType>(table.getType());
  if (!type || type.getRank() != 2 || !type.hasStaticShape() || !type.getElementType().isF32())
    return fn.emitError() << "loom-place-features: the features argument must be a static "
                             "f32 [nodes, width] tensor, got "
                          << table.getType();
  if (getMemSpace(type))
    return fn.emitError() << "loom-place-features: the features table is placed already ("
                          << type << ")";
  for (Operation *user : table.getUsers()) {
    auto e = dyn_cast<EmbeddingOp>(user);
    if (!e || e.getTable() != table)
      return user->emitError() << "loom-place-features: the features table may only be read "
                                  "as a loom.embedding's table";
    plan.rows += cast<RankedTensorType>(e.getIndices().getType()).getNumElements();
  }
  plan.any = true;
  plan.tableBytes = storageBytesOf(type);
  plan.rowBytes = type.getDimSize(1) * 4;
  // The step's own device memory, bounded above: every value of the
  // forward kept for the backward and as large again for its gradients,
  // and each parameter four times (itself, its gradient, Adam's m and v).
  double other = 0;
  fn.walk([&](Operation *op) {
    for (Value r : op->getResults())
      other += 2.0 * double(storageBytesOf(r.getType()));
  });
  for (ParamOp p : module.getOps<ParamOp>())
    other += 4.0 * double(storageBytesOf(p.getType()));
  for (BlockArgument a : fn.getArguments())
    if (a != table)
      other += double(storageBytesOf(a.getType()));
  plan.otherBytes = other;
  plan.budget = hw.hasGpu ? 0.9 * hw.gpuMemoryBytes - other : 0;
  for (GatherPlacement p :
       {GatherPlacement::Device, GatherPlacement::ZeroCopy, GatherPlacement::HostGather})
    plan.seconds[int(p)] = ::loom::cost::gatherTime(hw, p, double(plan.rows), double(plan.rowBytes));
  if (forcedTo) {
    plan.chosen = *forcedTo;
    plan.why = "forced";
    if (plan.chosen == GatherPlacement::Device && hw.hasGpu &&
        double(plan.tableBytes) > plan.budget)
      plan.why += "; it does not fit (" + std::to_string(plan.tableBytes) + " bytes, " +
                  std::to_string(int64_t(std::max(0.0, plan.budget))) + " free): expect the "
                  "allocation to fail";
    return plan;
  }
  if (!hw.hasGpu) {
    plan.chosen = GatherPlacement::Device;
    plan.why = "no GPU: the table is the host's";
  } else if (double(plan.tableBytes) <= plan.budget) {
    plan.chosen = GatherPlacement::Device;
    plan.why = "it fits in device memory";
  } else {
    bool zc = plan.seconds[int(GatherPlacement::ZeroCopy)] <=
              plan.seconds[int(GatherPlacement::HostGather)];
    plan.chosen = zc ? GatherPlacement::ZeroCopy : GatherPlacement::HostGather;
    plan.why = "it does not fit in device memory; " + std::string(zc ? "zero-copy" : "host-gather") +
               " is the faster gather";
  }
  return plan;
}

std::string mlir::loom::FeaturePlacementPlan::describe() const {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "features: %.3g GB table, %lld rows of %lld B a step -> %s (%s); gather "
                "predicted %.3g ms device, %.3g ms zero-copy, %.3g ms host-gather",
                double(tableBytes) / 1e9, (long long)rows, (long long)rowBytes,
                ::loom::cost::placementName(chosen), why.c_str(),
                seconds[int(GatherPlacement::Device)] * 1e3,
                seconds[int(GatherPlacement::ZeroCopy)] * 1e3,
                seconds[int(GatherPlacement::HostGather)] * 1e3);
  return buf;
}

LogicalResult mlir::loom::applyFeaturePlacement(ModuleOp module, const FeaturePlacementPlan &plan,
                                                StringRef function) {
  if (!plan.any)
    return success();
  auto fn = module.lookupSymbol<func::FuncOp>(function);
  BlockArgument table = featuresArg(module, fn);
  MLIRContext *ctx = module.getContext();
  auto graph = module->getAttrOfType<GraphAttr>(LoomDialect::GraphAttrHelper::getNameStr());
  FeaturePlace place = plan.chosen == GatherPlacement::Device     ? FeaturePlace::device
                       : plan.chosen == GatherPlacement::ZeroCopy ? FeaturePlace::zero_copy
                                                                  : FeaturePlace::host_gather;
  module->setAttr(LoomDialect::GraphAttrHelper::getNameStr(),
                  GraphAttr::get(ctx, graph.getFanouts(), graph.getNorm(), place));
  if (plan.chosen == GatherPlacement::Device)
    return success();
  auto pinned = withMemSpace(cast<RankedTensorType>(table.getType()), MemSpace::pinned);
  table.setType(pinned);
  OpBuilder b(ctx);
  Location loc = fn.getLoc();
  if (plan.chosen == GatherPlacement::ZeroCopy) {
    b.setInsertionPointToStart(&fn.getBody().front());
    Value mapped = ZeroCopyOp::create(b, loc, withMemSpace(pinned, MemSpace::mapped), table);
    table.replaceAllUsesExcept(mapped, mapped.getDefiningOp());
  } else {
    // The CPU gathers: the indices it reads are the host's too (the driver
    // keeps those inputs in pinned memory), its rows land in pinned memory
    // and one copy a gather takes them to the device.
    for (Operation *user : llvm::make_early_inc_range(table.getUsers())) {
      auto e = cast<EmbeddingOp>(user);
      auto ids = dyn_cast<BlockArgument>(e.getIndices());
      if (!ids || ids.getOwner() != &fn.getBody().front() ||
          llvm::any_of(ids.getUsers(), [&](Operation *u) {
            auto o = dyn_cast<EmbeddingOp>(u);
            return !o || o.getTable() != table || o.getIndices() != ids;
          }))
        return e.emitError() << "loom-place-features: host-gather needs each gather's indices "
                                "to be an argument read only by gathers of the table";
      ids.setType(withMemSpace(cast<RankedTensorType>(ids.getType()), MemSpace::pinned));
      auto rowsT = cast<RankedTensorType>(e.getType());
      b.setInsertionPointAfter(e);
      // The copy's result keeps the gather's type (unplaced: the device's),
      // so the ops after it are unchanged.
      auto copy = CopyOp::create(b, e.getLoc(), rowsT,
                                 TokenType::get(ctx), e.getResult(), ValueRange{},
                                 StreamAttr::get(ctx, StreamKind::h2d, 0));
      WaitOp::create(b, e.getLoc(), ValueRange{copy.getToken()});
      e.getResult().replaceAllUsesExcept(copy.getResult(), copy);
      e.getResult().setType(withMemSpace(rowsT, MemSpace::pinned));
    }
  }
  fn.setFunctionType(FunctionType::get(ctx, fn.getBody().front().getArgumentTypes(),
                                       fn.getFunctionType().getResults()));
  return success();
}

namespace {
struct PlaceFeaturesPass : mlir::loom::impl::PlaceFeaturesBase<PlaceFeaturesPass> {
  using PlaceFeaturesBase::PlaceFeaturesBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::string err;
    std::optional<::loom::cost::Hardware> hw = loadHardware(hardware, err);
    if (!hw) {
      module.emitError() << "loom-place-features: " << err;
      return signalPassFailure();
    }
    FailureOr<FeaturePlacementPlan> plan = planFeaturePlacement(module, *hw, placement, function);
    if (failed(plan) || failed(applyFeaturePlacement(module, *plan, function)))
      return signalPassFailure();
  }
};
} // namespace
