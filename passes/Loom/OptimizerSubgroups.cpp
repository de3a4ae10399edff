//===- OptimizerSubgroups.cpp - loom-optimizer-subgroups ------------------===//
//
// Groups parameters, in declaration order, into the subgroups that the
// offload schedule moves and updates as units.
//
//===----------------------------------------------------------------------===//
#include "loom/Passes/Loom.h"

#include "mlir/IR/Builders.h"

namespace mlir::loom {
#define GEN_PASS_DEF_OPTIMIZERSUBGROUPS
#include "passes/Loom/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {
struct OptimizerSubgroups
    : public mlir::loom::impl::OptimizerSubgroupsBase<OptimizerSubgroups> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (subGroupSize < 1) {
      module.emitError() << "loom-optimizer-subgroups: sub-group-size must be "
                            "positive, got "
                         << static_cast<int64_t>(subGroupSize);
      return signalPassFailure();
    }
    for (SubgroupOp sg :
         llvm::make_early_inc_range(module.getOps<SubgroupOp>()))
      sg.erase();

    // What the step updates: with ZeRO (loom-data-parallel) the shards,
    // not the parameters they partition (members of a loom.shard_of).
    llvm::DenseSet<Attribute> members_;
    for (ParamOp p : module.getOps<ParamOp>())
      if (auto of = p->getAttrOfType<ArrayAttr>(LoomDialect::ShardOfAttrHelper::getNameStr()))
        for (Attribute a : of)
          members_.insert(cast<FlatSymbolRefAttr>(a).getAttr());
    SmallVector<ParamOp> params;
    for (ParamOp p : module.getOps<ParamOp>())
      if (!members_.contains(p.getSymNameAttr()))
        params.push_back(p);
    if (params.empty())
      return;
    OpBuilder b(module.getContext());
    b.setInsertionPointAfter(params.back());
    SmallVector<Attribute> members;
    int64_t numel = 0, index = 0;
    auto close = [&](Location loc) {
      if (members.empty())
        return;
      std::string name = "sg" + std::to_string(index++);
      SubgroupOp::create(b, loc, b.getStringAttr(name), b.getArrayAttr(members),
                         b.getI64IntegerAttr(numel), UpdatePlaceAttr());
      members.clear();
      numel = 0;
    };
    for (ParamOp p : params) {
      members.push_back(FlatSymbolRefAttr::get(p.getSymNameAttr()));
      numel += cast<RankedTensorType>(p.getType()).getNumElements();
      if (numel >= subGroupSize)
        close(p.getLoc());
    }
    close(params.back().getLoc());
  }
};
} // namespace
