//===- ClipGradients.cpp - loom-clip-gradients ----------------------------===//
//
// Gradient clipping by global norm, as torch.nn.utils.clip_grad_norm_
// computes it: the 2-norm of every gradient Adam reads, taken together,
// and each gradient scaled by min(1, max_norm / (norm + 1e-6)) before its
// update. Under data parallelism the gradients Adam reads are the averaged
// ones: whole on every rank at ZeRO stage 0 (each rank computes the same
// norm), this rank's shards of the reduced buckets at stages 1-3 (the
// shards partition the padded buckets, padding zero: the squares are
// summed over the ranks by one scalar all-reduce). With expert parallelism
// the experts' squares (whole on the ranks holding them, other experts on
// every rank of their level) are summed over the experts' level by one
// more. The norm is stored in @optimizer.grad_norm, which the binary logs.
//
// The norm needs every gradient before any update: the gradients' own
// computations (slices of reduced buckets, casts, waits) move ahead of the
// first update, and the updates then run in their order. So with offload
// an update's gradient leaves the device once the norm exists, not during
// the backward (docs/codegen.md, --clip-grad).
//
//===----------------------------------------------------------------------===//
#include "loom/Passes/Loom.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::loom {
#define GEN_PASS_DEF_CLIPGRADIENTS
#include "passes/Loom/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

struct ClipGradients : public mlir::loom::impl::ClipGradientsBase<ClipGradients> {
  using Base::Base;

  LogicalResult fail(Operation *at, const Twine &msg) {
    at->emitError() << "loom-clip-gradients: " << msg;
    return failure();
  }

  void runOnOperation() override {
    if (failed(run(getOperation())))
      signalPassFailure();
  }

  Value scalar(OpBuilder &b, Location loc, double v) {
    auto t = RankedTensorType::get({}, b.getF32Type());
    return arith::ConstantOp::create(b, loc, t, DenseElementsAttr::get(t, float(v)));
  }

  /// The group the data-parallel step averages its loss over (every rank
  /// of the data-parallel world), or none for one rank.
  GroupAttr worldGroup(func::FuncOp step) {
    GroupAttr g;
    step.walk([&](AllReduceOp r) {
      if (!g && r.getReduce() == ReduceKind::mean)
        g = r.getGroup();
    });
    return g;
  }

  /// The parameter an update reads, or null.
  static ParamOp paramOf(ModuleOp module, AdamOp a) {
    auto load = a.getParam().getDefiningOp<LoadOp>();
    return load ? module.lookupSymbol<ParamOp>(load.getName()) : ParamOp();
  }

  /// v summed over `group`'s ranks (a scalar all-reduce, waited).
  Value sumOver(OpBuilder &b, Location loc, Value v, GroupAttr group) {
    auto r = AllReduceOp::create(b, loc, v.getType(), TokenType::get(b.getContext()), v,
                                 ValueRange{}, group, ReduceKind::sum,
                                 StreamAttr::get(b.getContext(), StreamKind::comm, 0));
    WaitOp::create(b, loc, ValueRange{r.getToken()});
    return r.getResult();
  }

  /// The experts' level of an expert-parallel rank's program
  /// (loom.expert_parallel), or none.
  FailureOr<GroupAttr> expertGroup(ModuleOp module) {
    auto ep = module->getAttrOfType<DenseI64ArrayAttr>(
        LoomDialect::ExpertParallelAttrHelper::getNameStr());
    if (!ep)
      return GroupAttr();
    FailureOr<TopologyOp> topo = findTopology(module, "", "loom-clip-gradients");
    if (failed(topo))
      return failure();
    if (!*topo || ep[2] >= int64_t((*topo).getLevels().size()))
      return fail(module, "an expert-parallel program needs the loom.topology of its experts' "
                          "level"),
             failure();
    MLIRContext *ctx = module.getContext();
    return GroupAttr::get(ctx, FlatSymbolRefAttr::get((*topo).getSymNameAttr()),
                          ArrayAttr::get(ctx, {(*topo).getLevels()[ep[2]]}));
  }

  LogicalResult run(ModuleOp module) {
    if (!(maxNorm > 0))
      return fail(module, "max-norm must be positive");
    auto step = module.lookupSymbol<func::FuncOp>(LoomDialect::kTrainStep);
    if (!step || !step.getBody().hasOneBlock())
      return fail(module, "needs @train_step (run loom-attach-optimizer first)");
    if (module.lookupSymbol(LoomDialect::kTrainStepFrozen))
      return fail(step, "1-bit Adam's frozen steps average momenta, not gradients: clipping "
                        "is not built for them");
    if (module.lookupSymbol(LoomDialect::kDilocoStart))
      return fail(step, "clipping inside Streaming DiLoCo's replicas is not built");
    if (step->hasAttr(LoomDialect::OptimizerOffloadAttrHelper::getNameStr()))
      return fail(step, "runs before loom-offload-optimizer (which moves the gradients)");
    Block &blk = step.getBody().front();
    SmallVector<AdamOp> adams;
    for (Operation &op : blk)
      if (auto a = dyn_cast<AdamOp>(op))
        adams.push_back(a);
    if (adams.empty())
      return fail(step, "clips the gradients Adam reads: the step has no loom.adam "
                        "(--optimizer=adam|adamw)");
    for (Operation &op : blk)
      if (isa<SgdOp>(op))
        return fail(&op, "clipping is built for Adam's updates");
    Operation *first = adams.front();

    // Every gradient's computation that comes after the first update moves
    // ahead of it (in order). None of it may be an update or a store.
    llvm::SetVector<Operation *> late;
    std::function<LogicalResult(Value)> collect = [&](Value v) -> LogicalResult {
      Operation *d = v.getDefiningOp();
      if (!d || d->getBlock() != &blk || d->isBeforeInBlock(first) || late.contains(d))
        return success();
      if (isa<AdamOp, StoreOp, SgdOp>(d))
        return fail(d, "a gradient is computed from an update's result");
      for (Value in : d->getOperands())
        if (failed(collect(in)))
          return failure();
      late.insert(d);
      return success();
    };
    for (AdamOp a : adams)
      if (failed(collect(a.getGrad())))
        return failure();
    // The waits of the collectives a moved op reads (a reduced bucket is
    // read after its wait).
    for (Operation &op : llvm::make_range(first->getIterator(), blk.end()))
      if (auto w = dyn_cast<WaitOp>(op))
        for (Value t : w.getOperands())
          if (Operation *d = t.getDefiningOp(); d && late.contains(d))
            late.insert(w);
    SmallVector<Operation *> moved(late.begin(), late.end());
    llvm::sort(moved, [](Operation *x, Operation *y) { return x->isBeforeInBlock(y); });
    for (Operation *op : moved)
      op->moveBefore(first);

    // The norm, before the first update.
    OpBuilder b(first);
    Location loc = first->getLoc();
    auto f32s = RankedTensorType::get({}, b.getF32Type());
    // A pipeline stage's norm is its part of the model's: summed over the
    // stages below, a tied parameter's copy counted once (on the stage
    // below the other; after loom-pipeline-join both hold the sum).
    FailureOr<GroupAttr> stages = pipelineGroup(module, "loom-clip-gradients");
    if (failed(stages))
      return failure();
    bool pipe = bool(*stages);
    DataParallelAttr dp = getDataParallel(step);
    auto tiedPeer = [&](AdamOp a) -> int64_t {
      ParamOp p = paramOf(module, a);
      auto peer = p ? p->getAttrOfType<IntegerAttr>(LoomDialect::TiedPeerAttrHelper::getNameStr())
                    : IntegerAttr();
      return peer ? peer.getInt() : 0;
    };
    if (pipe && dp && dp.getZeroStage() >= 1)
      for (ParamOp p : module.getOps<ParamOp>())
        if (p->hasAttr(LoomDialect::TiedPeerAttrHelper::getNameStr()))
          return fail(p, "parameter '" + p.getSymName() +
                             "' is held by two pipeline stages: clipping counts it once only "
                             "where each update reads whole parameters (ZeRO stage 0)");
    // Expert parallelism: an expert's gradient is whole on the ranks that
    // hold it (never partitioned) and each rank of the experts' level holds
    // others, so their squares are summed over that level alone, apart
    // from the shared parameters' (whose shards are summed over the world).
    FailureOr<GroupAttr> expertLevel = expertGroup(module);
    if (failed(expertLevel))
      return failure();
    auto isExpert = [&](AdamOp a) {
      ParamOp p = paramOf(module, a);
      return *expertLevel && p && p->hasAttr(LoomDialect::ExpertAttrHelper::getNameStr());
    };
    Value total, experts;
    for (AdamOp a : adams) {
      if (pipe && tiedPeer(a) < 0)
        continue;
      Value g = a.getGrad();
      auto gt = cast<RankedTensorType>(g.getType());
      if (!gt.getElementType().isF32())
        g = CastOp::create(b, loc, RankedTensorType::get(gt.getShape(), b.getF32Type()), g);
      Value sq = MulOp::create(b, loc, g.getType(), g, g);
      SmallVector<int64_t> dims = llvm::to_vector(llvm::seq<int64_t>(0, gt.getRank()));
      Value s = gt.getRank() ? Value(ReduceOp::create(b, loc, f32s, ReduceKind::sum, sq,
                                                      b.getDenseI64ArrayAttr(dims), false))
                             : sq;
      Value &sum = isExpert(a) ? experts : total;
      sum = sum ? Value(AddOp::create(b, loc, f32s, sum, s)) : s;
    }
    if (!total)
      total = scalar(b, loc, 0.0);
    if (dp && dp.getZeroStage() >= 1 && dp.getWorld() > 1) {
      GroupAttr group = worldGroup(step);
      if (!group)
        return fail(step, "a data-parallel step without its loss all-reduce (run "
                          "loom-data-parallel)");
      total = sumOver(b, loc, total, group);
    }
    if (experts)
      total = AddOp::create(b, loc, f32s, total, sumOver(b, loc, experts, *expertLevel));
    if (pipe)
      total = sumOver(b, loc, total, *stages);
    Value norm = SqrtOp::create(b, loc, f32s, total);
    // torch's clip_coef = max_norm / (total_norm + 1e-6), clamped at 1.
    Value coef = DivOp::create(b, loc, f32s, scalar(b, loc, maxNorm),
                               AddOp::create(b, loc, f32s, norm, scalar(b, loc, 1e-6)));
    coef = MinOp::create(b, loc, f32s, coef, scalar(b, loc, 1.0));
    OpBuilder mb(module.getBodyRegion());
    mb.setInsertionPointToStart(module.getBody());
    const char *name = "optimizer.grad_norm";
    if (!module.lookupSymbol(name))
      StateOp::create(mb, loc, mb.getStringAttr(name), TypeAttr::get(f32s),
                      StateRoleAttr::get(b.getContext(), StateRole::other), FlatSymbolRefAttr(),
                      InitAttr::get(b.getContext(), InitKind::zeros, APFloat(0.0), APFloat(0.0)));
    StoreOp::create(b, loc, norm, name);
    for (AdamOp a : adams) {
      b.setInsertionPoint(a);
      Value g = a.getGrad();
      auto gt = cast<RankedTensorType>(g.getType());
      Value c = gt.getElementType().isF32()
                    ? coef
                    : Value(CastOp::create(b, a.getLoc(), RankedTensorType::get({}, gt.getElementType()),
                                           coef));
      a.getGradMutable().assign(MulOp::create(b, a.getLoc(), gt, g, c));
    }
    return success();
  }
};

} // namespace
