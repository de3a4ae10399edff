//===- DataParallel.cpp - loom-data-parallel ------------------------------===//
//
// Data parallelism with ZeRO partitioning (Rajbhandari et al., "ZeRO:
// Memory Optimizations Toward Training Trillion Parameter Models", 2020,
// §5): every rank runs @forward_backward on its own slice of the global
// batch, then
//   stage 0: gradients are averaged with an all-reduce (plain DDP);
//   stage 1: gradients are all-reduced, each rank updates its 1/R shard of
//            every bucket with its 1/R of the Adam state (P_os), and the
//            updated shards are all-gathered back into the parameters;
//   stage 2: as 1 but gradients are reduce-scattered (P_os+g): a rank only
//            ever receives its shard of each reduced gradient;
//   stage 3: as 2, and the parameters themselves persist as shards (P_os+g+p):
//            @forward_backward all-gathers each bucket before its first use
//            in the forward and again before its first use in the backward,
//            so a gathered copy lives only around its uses.
// Small tensors share buckets (flattened and concatenated, DDP's gradient
// buckets), which also makes every bucket divisible by R (zero padding).
// The loss is averaged over ranks so every rank reports the global loss.
// Shapes are static: the per-rank batch is decided where the model's shapes
// are made (loomc's generators divide the batch by the world size).
//
//===----------------------------------------------------------------------===//
#include "loom/Passes/Loom.h"

#include "mlir/IR/Builders.h"

#include <numeric>

namespace mlir::loom {
#define GEN_PASS_DEF_DATAPARALLEL
#include "passes/Loom/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

RankedTensorType flatType(RankedTensorType t, int64_t n) {
  return RankedTensorType::get({n}, t.getElementType());
}

struct Member {
  ParamOp param;
  Value grad;       // from @forward_backward
  AdamOp adam;      // the update it replaces (stages 1-3)
  int64_t numel = 0;
  unsigned index = 0; // its gradient among @forward_backward's results (after the loss)
};

struct Bucket {
  SmallVector<Member> members;
  int64_t numel = 0, padded = 0;
  /// Expert parallelism's experts: all-reduced over the expert group at
  /// every stage (never partitioned).
  bool expert = false;
};

struct DataParallel : public mlir::loom::impl::DataParallelBase<DataParallel> {
  using Base::Base;

  ModuleOp module;
  /// loom-onebit-adam's step after the freeze, when there is one.
  func::FuncOp frozen;
  bool replicated = false; // frozen-variance=replicated
  GroupAttr group;
  int64_t world = 1;
  StreamAttr comm;
  /// hpZ (ZeRO++, Wang et al. 2023, §3.2): the group of the secondary
  /// partition and its size (null: none).
  GroupAttr secondaryGroup;
  int64_t secondarySize = 1;
  /// Expert parallelism (loom.expert_parallel): the ranks of the experts'
  /// level and the group of the other levels, over which the ranks holding
  /// the same experts average their gradients (null: none besides).
  int64_t expertRanks = 1;
  GroupAttr expertGroup;

  LogicalResult fail(Operation *at, const Twine &msg) {
    at->emitError() << "loom-data-parallel: " << msg;
    return failure();
  }

  void runOnOperation() override {
    module = getOperation();
    if (failed(run()))
      signalPassFailure();
  }

  /// A parameter two pipeline stages hold (GPT's embedding tied to its
  /// head) trains wrong at stage 3 (2e-3 off one rank over 20 steps on CPU
  /// ranks, 2026-11-30; ZeRO 0-2 are exact): refused until found.
  LogicalResult checkTiedAtStage3() {
    if (zeroStage == 3)
      for (ParamOp p : module.getOps<ParamOp>())
        if (p->hasAttr(LoomDialect::TiedPeerAttrHelper::getNameStr()))
          return fail(p, "parameter @" + p.getSymName() +
                             " is held by two pipeline stages (tied); ZeRO stage 3 is not "
                             "built for such a parameter yet: use --zero-stage=0, 1 or 2 (or "
                             "a model without tied embeddings)");
    return success();
  }

  /// A member's elements in a bucket: rounded up to member-align.
  int64_t aligned(int64_t n) { return (n + memberAlign - 1) / memberAlign * memberAlign; }

  /// Flatten each value to 1-D and concatenate, each starting at a multiple
  /// of member-align, padding with zeros to `to`.
  Value flatten(OpBuilder &b, Location loc, ArrayRef<Value> vals, int64_t to) {
    SmallVector<Value> parts;
    int64_t n = 0;
    Type elt;
    auto zeros = [&](int64_t count) {
      auto zt = RankedTensorType::get({count}, elt);
      parts.push_back(arith::ConstantOp::create(
          b, loc, zt, DenseElementsAttr::get(zt, b.getZeroAttr(elt))));
    };
    for (Value v : vals) {
      auto t = cast<RankedTensorType>(v.getType());
      elt = t.getElementType();
      if (aligned(n) > n)
        zeros(aligned(n) - n);
      n = aligned(n) + t.getNumElements();
      parts.push_back(t.getRank() == 1 ? v
                                       : ReshapeOp::create(b, loc, flatType(t, t.getNumElements()), v)
                                             .getResult());
    }
    if (to > n)
      zeros(to - n);
    if (parts.size() == 1)
      return parts[0];
    return ConcatOp::create(b, loc, RankedTensorType::get({to}, elt), parts, 0);
  }

  /// The pieces of a flat bucket back in the members' shapes.
  SmallVector<Value> unflatten(OpBuilder &b, Location loc, Value flat,
                               ArrayRef<RankedTensorType> types) {
    SmallVector<Value> out;
    int64_t off = 0;
    for (RankedTensorType t : types) {
      int64_t n = t.getNumElements();
      Value piece = SliceOp::create(b, loc, flatType(t, n), flat,
                                    b.getDenseI64ArrayAttr({off}),
                                    b.getDenseI64ArrayAttr({off + n}),
                                    b.getDenseI64ArrayAttr({1}));
      if (t.getRank() != 1)
        piece = ReshapeOp::create(b, loc, t, piece);
      out.push_back(piece);
      off = aligned(off + n);
    }
    return out;
  }

  /// A gradient reduction issued without waiting: all-reduce (stages 0, 1)
  /// or reduce-scatter (2, 3), mean over the ranks.
  std::pair<Value, Value> issueReduction(OpBuilder &b, Location loc, Value v, int64_t shard,
                                         bool expert) {
    auto tok = TokenType::get(b.getContext());
    if (zeroStage <= 1 || expert) {
      auto op = AllReduceOp::create(b, loc, v.getType(), tok, v, ValueRange{},
                                    expert ? expertGroup : group, ReduceKind::mean, comm);
      return {op.getResult(), op.getToken()};
    }
    auto t = cast<RankedTensorType>(v.getType());
    auto op = ReduceScatterOp::create(b, loc, flatType(t, shard), tok, v, ValueRange{}, group,
                                      ReduceKind::mean, comm);
    return {op.getResult(), op.getToken()};
  }

  /// Moves each bucket's gradient reduction into @forward_backward, right
  /// after the last of its gradients is computed, so the collective overlaps
  /// the rest of the backward (PyTorch DDP's bucketed overlap, Li et al.
  /// 2020 §3.2.3); one wait before the return. The reduced buckets become
  /// extra results (dropFullGradients later removes the full gradients), and
  /// the call in @train_step is rebuilt to receive them.
  /// Returns the reduced bucket of each bucket as seen in @train_step.
  FailureOr<SmallVector<Value>> reduceInBackward(func::FuncOp fb, func::CallOp &call,
                                                 MutableArrayRef<Bucket> buckets) {
    Block &body = fb.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    OpBuilder b(fb.getContext());
    SmallVector<Value> reduced, tokens;
    // Where each reduction's ops start, to bound how many are in flight.
    SmallVector<std::pair<Operation *, Value>> issued;
    for (Bucket &bk : buckets) {
      SmallVector<Value> grads;
      Operation *last = nullptr;
      for (Member &m : bk.members) {
        Value g = ret.getOperand(1 + m.index);
        grads.push_back(g);
        Operation *d = g.getDefiningOp();
        if (!d)
          return (void)fail(fb, "a gradient of @forward_backward is an argument"), failure();
        if (!last || last->isBeforeInBlock(d))
          last = d;
      }
      // A gradient that a collective made (sequence parallelism sums a
      // whole weight's shares over the tensor-parallel group) is read
      // after its wait.
      last = afterItsWait(last);
      b.setInsertionPointAfter(last);
      Location loc = last->getLoc();
      int64_t to = zeroStage == 0 || bk.expert ? bk.numel : bk.padded;
      if (reduceBf16)
        for (Value &g : grads) {
          // Mixed precision's fp32 gradient is the cast of a bf16 one: take
          // that (the cast then goes), else cast down.
          auto c = g.getDefiningOp<CastOp>();
          if (c && cast<RankedTensorType>(c.getInput().getType()).getElementType().isBF16())
            g = c.getInput();
          else
            g = CastOp::create(b, loc,
                               RankedTensorType::get(cast<RankedTensorType>(g.getType()).getShape(),
                                                     b.getBF16Type()),
                               g);
        }
      auto [r, t] = issueReduction(b, loc, flatten(b, loc, grads, to), bk.padded / world,
                                   bk.expert);
      reduced.push_back(r);
      tokens.push_back(t);
      issued.push_back({last->getNextNode(), t}); // the first op made just now
    }
    // At most `reductions-in-flight` at once, in the order the backward
    // issues them: the compute stream waits for the oldest before the next
    // starts, so each bucket's full gradient (the collective reads it until
    // its token is waited) is freed during the backward, not after it.
    llvm::DenseSet<Value> early;
    if (inflight > 0) {
      llvm::stable_sort(issued, [](auto &x, auto &y) { return x.first->isBeforeInBlock(y.first); });
      for (size_t i = 0; i + size_t(inflight) < issued.size(); ++i) {
        b.setInsertionPoint(issued[i + size_t(inflight)].first);
        WaitOp::create(b, issued[i].first->getLoc(), ValueRange{issued[i].second});
        early.insert(issued[i].second);
      }
    }
    // The rest before the return (each token is waited once: its
    // collective's buffers live until that wait).
    SmallVector<Value> atEnd;
    for (Value t : tokens)
      if (!early.contains(t))
        atEnd.push_back(t);
    b.setInsertionPoint(ret);
    WaitOp::create(b, ret.getLoc(), atEnd);
    SmallVector<Value> results(ret.getOperands());
    // (After the loss and every gradient, reduced by a bucket or not.)
    unsigned mi = results.size();
    results.append(reduced);
    ret->setOperands(results);
    fb.setFunctionType(FunctionType::get(fb.getContext(), fb.getArgumentTypes(),
                                         ValueRange(results).getTypes()));
    // The call, with the extra results.
    b.setInsertionPoint(call);
    auto newCall = func::CallOp::create(b, call.getLoc(), fb, call.getOperands());
    for (auto [o, n] : llvm::zip(call.getResults(), newCall.getResults()))
      o.replaceAllUsesWith(n);
    call.erase();
    call = newCall;
    for (Bucket &bk : buckets)
      for (Member &m : bk.members)
        m.grad = newCall.getResult(1 + m.index);
    SmallVector<Value> out;
    b.setInsertionPointAfter(newCall);
    for (size_t k = 0; k < buckets.size(); ++k) {
      Value r = newCall.getResult(mi + k);
      // A bf16 reduction: the optimizer reads fp32.
      if (reduceBf16)
        r = CastOp::create(b, newCall.getLoc(),
                           RankedTensorType::get(cast<RankedTensorType>(r.getType()).getShape(),
                                                 b.getF32Type()),
                           r);
      out.push_back(r);
    }
    return out;
  }

  Value allReduceMean(OpBuilder &b, Location loc, Value v) {
    auto op = AllReduceOp::create(b, loc, v.getType(), TokenType::get(b.getContext()), v,
                                  ValueRange{}, group, ReduceKind::mean, comm);
    WaitOp::create(b, loc, ValueRange{op.getToken()});
    return op.getResult();
  }
  Value allGather(OpBuilder &b, Location loc, Value v, int64_t full) {
    return allGatherOver(b, loc, v, full, group);
  }
  Value allGatherOver(OpBuilder &b, Location loc, Value v, int64_t full, GroupAttr over) {
    auto t = cast<RankedTensorType>(v.getType());
    auto op = AllGatherOp::create(b, loc, flatType(t, full), TokenType::get(b.getContext()), v,
                                  ValueRange{}, over, comm);
    WaitOp::create(b, loc, ValueRange{op.getToken()});
    return op.getResult();
  }
  Value shardOf(OpBuilder &b, Location loc, Value v, int64_t shard) {
    auto t = cast<RankedTensorType>(v.getType());
    return ShardOp::create(b, loc, flatType(t, shard), v, group);
  }

  /// The levels the data parallelism spans: all but `exclude`'s
  /// (comma-separated: loom-diloco's replicas, tensor and pipeline
  /// parallelism's levels); `world` is their ranks.
  LogicalResult spannedLevels(TopologyOp topo, SmallVectorImpl<Attribute> &levels) {
    SmallVector<StringRef> excluded;
    StringRef(exclude).split(excluded, ',', -1, false);
    world = 1;
    for (auto [name, size] : llvm::zip(topo.getLevels(), topo.getSizes()))
      if (!llvm::is_contained(excluded, cast<StringAttr>(name).getValue())) {
        levels.push_back(name);
        world *= size;
      }
    for (StringRef e : excluded)
      if (topo.getLevelSize(e) < 0)
        return fail(topo, "exclude=" + e + " is not a level of the topology");
    return success();
  }

  LogicalResult run() {
    if (zeroStage < 0 || zeroStage > 3)
      return fail(module, "zero-stage must be 0, 1, 2 or 3");
    if (bucketSize < 1)
      return fail(module, "bucket-size must be positive");
    if (inflight < 0)
      return fail(module, "reductions-in-flight must be 0 (no bound) or positive");
    if (shardMultiple < 1 || memberAlign < 1)
      return fail(module, "shard-multiple and member-align must be positive");
    FailureOr<TopologyOp> found = findTopology(module, topology, "loom-data-parallel");
    if (failed(found))
      return failure();
    TopologyOp topo = *found;
    if (!topo)
      return fail(module, topology.empty() ? "no loom.topology (loomc --topology)"
                                           : "no loom.topology @" + topology);
    MLIRContext *ctx = module.getContext();
    // Every level but `exclude` (loom-diloco's replicas each run data
    // parallelism inside): the group's collectives get a communicator of
    // their own, split from the world's.
    SmallVector<Attribute> levels;
    if (failed(spannedLevels(topo, levels)))
      return failure();
    // Nothing to do inside groups of one rank.
    if (!exclude.empty() && world == 1)
      return success();
    if (!secondary.empty()) {
      if (zeroStage != 3)
        return fail(module, "secondary (hpZ) partitions ZeRO-3's parameters: it needs "
                            "zero-stage=3");
      SmallVector<StringRef> names;
      StringRef(secondary).split(names, ',', -1, false);
      SmallVector<Attribute> sec;
      for (auto [name, size] : llvm::zip(topo.getLevels(), topo.getSizes())) {
        StringRef n = cast<StringAttr>(name).getValue();
        if (llvm::is_contained(names, n)) {
          if (!llvm::is_contained(levels, name))
            return fail(topo, "secondary level '" + n + "' is not one data parallelism spans");
          sec.push_back(name);
          secondarySize *= size;
        }
      }
      if (sec.size() != names.size())
        return fail(topo, "secondary=" + secondary + " names a level the topology lacks");
      if (sec.size() == levels.size())
        return fail(topo, "secondary=" + secondary + " spans every level: hpZ's secondary "
                          "partition is a part of the world (e.g. the ranks of a node)");
      secondaryGroup = GroupAttr::get(ctx, FlatSymbolRefAttr::get(topo.getSymNameAttr()),
                                      ArrayAttr::get(ctx, sec));
    }
    group = GroupAttr::get(ctx, FlatSymbolRefAttr::get(topo.getSymNameAttr()),
                           ArrayAttr::get(ctx, levels));
    comm = StreamAttr::get(ctx, StreamKind::comm, 0);

    auto step = module.lookupSymbol<func::FuncOp>(LoomDialect::kTrainStep);
    if (!step || !step.getBody().hasOneBlock())
      return fail(module, "needs @train_step (run loom-attach-optimizer first)");
    if (getDataParallel(step))
      return fail(step, "@train_step is already data-parallel");
    func::CallOp call = findCall(step, LoomDialect::kForwardBackward);
    auto fb = module.lookupSymbol<func::FuncOp>(LoomDialect::kForwardBackward);
    if (!call || !fb)
      return fail(step, "@train_step must call @forward_backward");
    auto names = fb->getAttrOfType<ArrayAttr>(LoomDialect::GradParamsAttrHelper::getNameStr());
    if (!names || call.getNumResults() != names.size() + 1)
      return fail(fb, "@forward_backward must return the loss and one gradient per "
                      "loom.grad_params entry");
    frozen = module.lookupSymbol<func::FuncOp>(LoomDialect::kTrainStepFrozen);
    replicated = frozenVariance == FrozenVariance::replicated;
    if (masterShards && zeroStage == 0)
      return fail(module, "master-shards partitions the optimizer's master weights: it needs "
                          "zero-stage 1, 2 or 3 (stage 3's parameters are shards already)");
    if (masterShards && frozen && frozenVariance == FrozenVariance::replicated)
      return fail(module, "master-shards does not compose with 1-bit Adam's replicated frozen "
                          "variance (its frozen step updates whole parameters; use "
                          "frozen-variance=sharded)");
    if (frozen && zeroStage == 3)
      return fail(frozen, "1-bit Adam composes with ZeRO stages 0-2; stage 3's sharded "
                          "parameters are not built for its frozen step");
    if (failed(checkTiedAtStage3()))
      return failure();
    if (frozen && module.lookupSymbol(LoomDialect::kEnterFrozen))
      return fail(frozen, "@enter_frozen exists already");
    // The driver's world: every rank of the topology.
    setDataParallel(step, topo.getWorldSize(), zeroStage);

    OpBuilder b(ctx);
    Location loc = call.getLoc();
    b.setInsertionPointAfter(call);
    // The reported loss: the mean over ranks.
    // (Every reader takes the mean: the return, and a pipeline stage's sum
    // over the stages, loom-pipeline-join.)
    Value loss = call.getResult(0);
    SmallVector<OpOperand *> readers;
    for (OpOperand &u : loss.getUses())
      readers.push_back(&u);
    Value globalLoss = allReduceMean(b, loc, loss);
    for (OpOperand *u : readers)
      u->set(globalLoss);

    // Members in parameter order, each with the op that consumes its grad.
    SmallVector<Member> members;
    for (auto [i, a] : llvm::enumerate(names)) {
      auto p = module.lookupSymbol<ParamOp>(cast<FlatSymbolRefAttr>(a));
      if (!p)
        return fail(fb, "'" + cast<FlatSymbolRefAttr>(a).getValue() + "' is not a loom.param");
      Member m{p, call.getResult(i + 1), nullptr,
               cast<RankedTensorType>(p.getType()).getNumElements(), unsigned(i)};
      for (Operation *u : m.grad.getUsers())
        if (auto adam = dyn_cast<AdamOp>(u))
          m.adam = adam;
      if (zeroStage >= 1 && !m.adam)
        return fail(step, "zero-stage " + Twine(zeroStage) +
                              " partitions Adam state: the gradient of '@" +
                              p.getSymName() + "' does not feed a loom.adam "
                              "(use --optimizer=adam|adamw, or zero-stage=0)");
      if (m.adam && !m.grad.hasOneUse())
        return fail(step, "the gradient of '@" + p.getSymName() + "' has other uses");
      if (zeroStage >= 1 && !cast<RankedTensorType>(p.getType()).getElementType().isF32())
        return fail(p, "ZeRO partitioning supports fp32 parameters (master weights)");
      members.push_back(m);
    }
    SmallVector<Member> experts;
    if (failed(takeExperts(topo, fb, members, experts)))
      return failure();
    SmallVector<Bucket> buckets = formBuckets(fb, members);
    int64_t multiple = world * shardMultiple;
    for (Bucket &bk : buckets)
      bk.padded = (bk.numel + multiple - 1) / multiple * multiple;
    size_t regular = buckets.size();
    addExpertBuckets(experts, buckets);

    FailureOr<SmallVector<Value>> reduced = reduceInBackward(fb, call, buckets);
    if (failed(reduced))
      return failure();
    if (failed(rewriteUpdates(globalLoss.getDefiningOp()->getNextNode(), fb, buckets, *reduced,
                              regular)) ||
        failed(dropFullGradients(fb, call, buckets)))
      return failure();
    // reduce-bf16 took the bf16 gradients under mixed precision's casts;
    // the casts' fp32 copies are read by nothing now.
    if (reduceBf16)
      fb.walk([](CastOp c) {
        if (c->use_empty())
          c->erase();
      });
    return success();
  }

  /// Expert parallelism (loom-expert-parallel): the parameters of the
  /// experts this rank alone holds in its group leave `members` for
  /// `experts`. A rank's expert gradient is the sum of the gradients its
  /// all-to-all brought back from every rank of the group; the step's
  /// gradient is the mean over the world of each rank's, so it is scaled by
  /// 1/N (N the group's ranks) in @forward_backward and averaged over the
  /// other levels (`expertGroup`, unset when they are one rank). Experts
  /// are all-reduced, not partitioned, at every ZeRO stage.
  LogicalResult takeExperts(TopologyOp topo, func::FuncOp fb, SmallVector<Member> &members,
                            SmallVector<Member> &experts) {
    auto ep = module->getAttrOfType<DenseI64ArrayAttr>(
        LoomDialect::ExpertParallelAttrHelper::getNameStr());
    if (!ep)
      return success();
    if (ep[2] >= int64_t(topo.getLevels().size()) || topo.getSizes()[ep[2]] != ep[1])
      return fail(module, "loom.expert_parallel names a level of its loom.topology that does "
                          "not have its ranks");
    Attribute level = topo.getLevels()[ep[2]];
    SmallVector<Attribute> rest;
    bool spanned = false;
    for (Attribute l : group.getLevels()) {
      if (l == level)
        spanned = true;
      else
        rest.push_back(l);
    }
    if (!spanned)
      return fail(module, "the experts' level '" + cast<StringAttr>(level).getValue() +
                              "' is not one data parallelism spans");
    if (frozen)
      return fail(module, "expert parallelism is not built with 1-bit Adam");
    expertRanks = ep[1];
    if (world / expertRanks > 1)
      expertGroup = GroupAttr::get(module.getContext(), group.getTopology(),
                                   ArrayAttr::get(module.getContext(), rest));
    SmallVector<Member> kept;
    auto ret = cast<func::ReturnOp>(fb.getBody().front().getTerminator());
    OpBuilder b(ret);
    for (Member &m : members) {
      if (!m.param->hasAttr(LoomDialect::ExpertAttrHelper::getNameStr())) {
        kept.push_back(m);
        continue;
      }
      Value g = ret.getOperand(1 + m.index);
      // Right after the gradient, so its reduction can start there.
      if (Operation *d = g.getDefiningOp())
        b.setInsertionPointAfter(afterItsWait(d));
      else
        b.setInsertionPoint(ret);
      auto t = cast<RankedTensorType>(g.getType());
      auto scalar = RankedTensorType::get({}, t.getElementType());
      Value inv = arith::ConstantOp::create(
          b, g.getLoc(), scalar,
          DenseElementsAttr::get(scalar, b.getFloatAttr(t.getElementType(),
                                                       1.0 / double(expertRanks))));
      ret->setOperand(1 + m.index, MulOp::create(b, g.getLoc(), t, g, inv));
      experts.push_back(m);
    }
    members = std::move(kept);
    return success();
  }

  /// The updates, after `after` (the loss's wait): the first `regular`
  /// buckets' by the ZeRO stage, the experts' after them as stage 0's.
  LogicalResult rewriteUpdates(Operation *after, func::FuncOp fb, MutableArrayRef<Bucket> buckets,
                               ArrayRef<Value> reduced, size_t regular) {
    OpBuilder b(after->getContext());
    Location loc = after->getLoc();
    b.setInsertionPointAfter(after);
    if (failed(zeroStage == 0 ? rewriteStage0(b, loc, buckets.take_front(regular),
                                              reduced.take_front(regular))
                              : rewritePartitioned(b, loc, fb, buckets.take_front(regular),
                                                   reduced.take_front(regular))))
      return failure();
    b.setInsertionPointAfter(after); // (stage 3 left `b` in @forward_backward)
    return rewriteStage0(b, loc, buckets.drop_front(regular), reduced.drop_front(regular));
  }

  /// The experts' buckets, after the others: stage 0's, all-reduced over
  /// the ranks that hold the same experts (none when those are one rank).
  void addExpertBuckets(ArrayRef<Member> experts, SmallVector<Bucket> &buckets) {
    if (!expertGroup)
      return;
    bool first = true;
    for (const Member &m : experts) {
      if (first || buckets.back().numel + m.numel > bucketSize) {
        buckets.emplace_back();
        buckets.back().expert = true;
        first = false;
      }
      buckets.back().members.push_back(m);
      buckets.back().numel = aligned(buckets.back().numel) + m.numel;
      buckets.back().padded = buckets.back().numel;
    }
  }

  /// Buckets: consecutive members up to bucket-size elements. At stage 3,
  /// one per unit (a transformer block) instead, in the units' order: the
  /// unit of sharding FSDP wraps, gathered in one collective.
  SmallVector<Bucket> formBuckets(func::FuncOp fb, SmallVector<Member> &members) {
    SmallVector<Bucket> buckets;
    SmallVector<int64_t> unitOf(members.size(), 0);
    bool byUnit = false;
    if (zeroStage == 3) {
      Operation *lossOp = fb.getBody().front().getTerminator()->getOperand(0).getDefiningOp();
      SmallVector<Operation *> forwardOps;
      for (Operation &op : fb.getBody().front()) {
        forwardOps.push_back(&op);
        if (&op == lossOp)
          break;
      }
      UnitPlan plan = planUnits(forwardOps);
      byUnit = plan.count() > 1;
      if (byUnit) {
        for (auto [i, m] : llvm::enumerate(members))
          unitOf[i] = plan.ofParam.lookup(m.param.getSymName());
        SmallVector<size_t> order(members.size());
        std::iota(order.begin(), order.end(), 0);
        llvm::stable_sort(order, [&](size_t x, size_t y) { return unitOf[x] < unitOf[y]; });
        SmallVector<Member> sorted;
        SmallVector<int64_t> sortedUnits;
        for (size_t i : order) {
          sorted.push_back(members[i]);
          sortedUnits.push_back(unitOf[i]);
        }
        members = std::move(sorted);
        unitOf = std::move(sortedUnits);
      }
    }
    // Expert parallelism at stage 3: the driver draws a bucket's members
    // one after another where the bucket is declared, and an expert's
    // parameters (not members) where they are, so a bucket never spans an
    // expert's declaration: every rank then draws the one-rank model's
    // values (the last block's unit, with the final norm and the head
    // after its experts, becomes two buckets).
    DenseMap<Operation *, int64_t> expertsBefore;
    if (zeroStage == 3) {
      int64_t seen = 0;
      for (ParamOp p : module.getOps<ParamOp>()) {
        seen += p->hasAttr(LoomDialect::ExpertAttrHelper::getNameStr()) ? 1 : 0;
        expertsBefore[p] = seen;
      }
    }
    auto split = [&](size_t i) {
      return i > 0 && expertsBefore.lookup(members[i].param) !=
                          expertsBefore.lookup(members[i - 1].param);
    };
    for (auto [i, m] : llvm::enumerate(members)) {
      bool next = byUnit ? (i == 0 || unitOf[i] != unitOf[i - 1] || split(i))
                         : (buckets.empty() || buckets.back().numel + m.numel > bucketSize ||
                            split(i));
      if (next)
        buckets.emplace_back();
      buckets.back().members.push_back(m);
      buckets.back().numel = aligned(buckets.back().numel) + m.numel;
    }
    return buckets;
  }

  /// @train_step now reads only the reduced buckets: @forward_backward stops
  /// returning the full gradients, so each dies at its bucket's flatten
  /// instead of living until the backward ends (ZeRO-2's gradient memory).
  /// Its results become (loss, bucket 0, bucket 1, ...), which
  /// loom.grad_params no longer describes: the attribute moves to the
  /// calling step (the trained parameters, for loom-diloco after it).
  LogicalResult dropFullGradients(func::FuncOp fb, func::CallOp call,
                                  ArrayRef<Bucket> buckets) {
    llvm::DenseSet<unsigned> reducedGrads;
    for (const Bucket &bk : buckets)
      for (const Member &m : bk.members)
        reducedGrads.insert(m.index);
    auto names = fb->getAttrOfType<ArrayAttr>(LoomDialect::GradParamsAttrHelper::getNameStr());
    size_t grads = names ? names.size() : 0;
    for (unsigned i : reducedGrads)
      if (!call.getResult(1 + i).use_empty())
        return fail(call, "a full gradient is still used after the reduction");
    auto ret = cast<func::ReturnOp>(fb.getBody().front().getTerminator());
    // The loss, the gradients no bucket reduced (an expert's, when its
    // experts are this rank's alone), then the reduced buckets.
    SmallVector<Value> results{ret.getOperand(0)};
    SmallVector<size_t> from{0};
    for (size_t i = 1; i < ret.getNumOperands(); ++i)
      if (i > grads || !reducedGrads.contains(unsigned(i - 1))) {
        results.push_back(ret.getOperand(i));
        from.push_back(i);
      }
    ret->setOperands(results);
    fb.setFunctionType(FunctionType::get(fb.getContext(), fb.getArgumentTypes(),
                                         ValueRange(results).getTypes()));
    StringRef key = LoomDialect::GradParamsAttrHelper::getNameStr();
    if (Attribute names = fb->getAttr(key))
      call->getParentOfType<func::FuncOp>()->setAttr(key, names);
    fb->removeAttr(key);
    OpBuilder b(call);
    auto newCall = func::CallOp::create(b, call.getLoc(), fb, call.getOperands());
    call.getResult(0).replaceAllUsesWith(newCall.getResult(0));
    for (size_t j = 1; j < newCall.getNumResults(); ++j)
      call.getResult(from[j]).replaceAllUsesWith(newCall.getResult(j));
    call.erase();
    return success();
  }

  LogicalResult rewriteStage0(OpBuilder &b, Location loc, MutableArrayRef<Bucket> buckets,
                              ArrayRef<Value> reduced) {
    for (auto [bk, avg] : llvm::zip(buckets, reduced)) {
      SmallVector<Value> grads;
      SmallVector<RankedTensorType> types;
      for (Member &m : bk.members) {
        grads.push_back(m.grad);
        types.push_back(cast<RankedTensorType>(m.grad.getType()));
      }
      // The optimizer's uses of each gradient, before new ones appear.
      SmallVector<SmallVector<OpOperand *>> uses;
      for (Member &m : bk.members)
        uses.push_back(llvm::to_vector(llvm::make_pointer_range(m.grad.getUses())));
      for (auto [list, g] : llvm::zip(uses, unflatten(b, loc, avg, types)))
        for (OpOperand *u : list)
          u->set(g);
    }
    return success();
  }

  LogicalResult rewritePartitioned(OpBuilder &b, Location loc, func::FuncOp fb,
                                   MutableArrayRef<Bucket> buckets, ArrayRef<Value> reduced) {
    MLIRContext *ctx = module.getContext();
    auto zeros = InitAttr::get(ctx, InitKind::zeros, APFloat(0.0), APFloat(0.0));
    SmallVector<Operation *> dead;
    for (auto [k, bk] : llvm::enumerate(buckets)) {
      int64_t shard = bk.padded / world;
      AdamOp first = bk.members.front().adam;
      std::string base = "zero.bucket" + std::to_string(k);
      auto shardType = RankedTensorType::get({shard}, b.getF32Type());
      // Adam state (and at stage 3 the parameters) as this rank's shard.
      OpBuilder mb(ctx);
      mb.setInsertionPoint(bk.members.front().param);
      auto declareState = [&](StringRef suffix, StateRole role) {
        StateOp::create(mb, loc, mb.getStringAttr(base + suffix.str()), TypeAttr::get(shardType),
                        StateRoleAttr::get(ctx, role), FlatSymbolRefAttr(), zeros);
        return FlatSymbolRefAttr::get(ctx, base + suffix.str());
      };
      FlatSymbolRefAttr mSym = declareState(".exp_avg", StateRole::adam_m);
      FlatSymbolRefAttr vSym = declareState(".exp_avg_sq", StateRole::adam_v);
      FlatSymbolRefAttr pSym;
      if (zeroStage == 3 || masterShards) {
        // At stages 1 and 2 the members stay globals of their own, declared
        // before their shard (the driver copies its block from them).
        if (zeroStage != 3)
          mb.setInsertionPointAfter(bk.members.back().param);
        SmallVector<Attribute> of;
        for (Member &m : bk.members)
          of.push_back(FlatSymbolRefAttr::get(m.param.getSymNameAttr()));
        auto p = ParamOp::create(mb, loc, mb.getStringAttr(base + ".params"),
                                 TypeAttr::get(shardType), zeros, DenseElementsAttr());
        p->setAttr(LoomDialect::ShardOfAttrHelper::getNameStr(), ArrayAttr::get(ctx, of));
        p->setAttr(LoomDialect::PaddedAttrHelper::getNameStr(), mb.getI64IntegerAttr(bk.padded));
        if (memberAlign > 1)
          p->setAttr(LoomDialect::MemberAlignAttrHelper::getNameStr(),
                     mb.getI64IntegerAttr(memberAlign));
        pSym = FlatSymbolRefAttr::get(ctx, p.getSymName());
        if (zeroStage == 3)
          for (Member &m : bk.members)
            m.param->setAttr(LoomDialect::ShardedIntoAttrHelper::getNameStr(), pSym);
      }
      // Stages 1-2 with whole parameters: the moments' shards say how
      // their bucket is laid out, which no parameter shard does here (for a
      // checkpoint resumed on another world or stage).
      if (!pSym) {
        SmallVector<Attribute> of;
        for (Member &m : bk.members)
          of.push_back(FlatSymbolRefAttr::get(m.param.getSymNameAttr()));
        for (FlatSymbolRefAttr sym : {mSym, vSym}) {
          Operation *st = module.lookupSymbol(sym);
          st->setAttr(LoomDialect::LayoutOfAttrHelper::getNameStr(), ArrayAttr::get(ctx, of));
          st->setAttr(LoomDialect::PaddedAttrHelper::getNameStr(), mb.getI64IntegerAttr(bk.padded));
          if (memberAlign > 1)
            st->setAttr(LoomDialect::MemberAlignAttrHelper::getNameStr(),
                        mb.getI64IntegerAttr(memberAlign));
        }
      }

      // The update, after the last member's old Adam op.
      Operation *last = bk.members.back().adam;
      for (Member &m : bk.members)
        if (last->isBeforeInBlock(m.adam))
          last = m.adam;
      b.setInsertionPointAfter(last);
      SmallVector<Value> grads, params;
      SmallVector<RankedTensorType> types;
      for (Member &m : bk.members) {
        grads.push_back(m.grad);
        types.push_back(cast<RankedTensorType>(m.param.getType()));
      }
      Value gShard = zeroStage == 1 ? shardOf(b, loc, reduced[k], shard) : reduced[k];
      Value pShard;
      if (pSym) {
        pShard = LoadOp::create(b, loc, shardType, pSym).getResult();
      } else {
        for (Member &m : bk.members)
          params.push_back(LoadOp::create(b, loc, m.param.getType(),
                                          FlatSymbolRefAttr::get(m.param.getSymNameAttr())));
        pShard = shardOf(b, loc, flatten(b, loc, params, bk.padded), shard);
      }
      Value mS = LoadOp::create(b, loc, shardType, mSym);
      Value vS = LoadOp::create(b, loc, shardType, vSym);
      auto adam = AdamOp::create(b, loc, TypeRange{shardType, shardType, shardType}, pShard,
                                 gShard, mS, vS, first.getStep(), first.getLrAttr(),
                                 first.getBeta1Attr(), first.getBeta2Attr(), first.getEpsAttr(),
                                 first.getWeightDecayAttr(), first.getDecoupledAttr(),
                                 FlatSymbolRefAttr(), first.getFreezeStepAttr());
      StoreOp::create(b, loc, adam.getNewExpAvg(), mSym);
      StoreOp::create(b, loc, adam.getNewExpAvgSq(), vSym);
      if (pSym)
        StoreOp::create(b, loc, adam.getNewParam(), pSym);
      if (zeroStage != 3) {
        // With a master shard the gather reads what was stored: the load
        // is what loom-offload-optimizer redirects to the shard's device
        // copy.
        Value fresh = pSym ? LoadOp::create(b, loc, shardType, pSym).getResult()
                           : adam.getNewParam();
        Value full = allGather(b, loc, fresh, bk.padded);
        for (auto [m, v] : llvm::zip(bk.members, unflatten(b, loc, full, types)))
          StoreOp::create(b, loc, v, FlatSymbolRefAttr::get(m.param.getSymNameAttr()));
      }
      if (frozen && !replicated &&
          failed(rewriteFrozen(b, loc, bk, shard, mSym, vSym, pSym, types)))
        return failure();
      // The per-parameter update goes: its stores, the Adam op, its state
      // (1-bit Adam's frozen step keeps the full momentum, below).
      for (Member &m : bk.members) {
        for (Operation *u : m.adam->getUsers())
          dead.push_back(u);
        dead.push_back(m.adam);
        for (Value in : {m.adam.getParam(), m.adam.getExpAvg(), m.adam.getExpAvgSq()})
          if (Operation *d = in.getDefiningOp(); d && isa<LoadOp>(d))
            dead.push_back(d);
        for (StringRef suffix : {".exp_avg", ".exp_avg_sq"})
          if (auto s = module.lookupSymbol<StateOp>((m.param.getSymName() + suffix).str());
              s && !(frozen && (suffix == ".exp_avg" || replicated)))
            dead.push_back(s);
      }
    }
    for (Operation *op : dead)
      op->dropAllUses(), op->erase();
    if (frozen)
      createEnterFrozen(loc, buckets);
    if (zeroStage == 3)
      return gatherParamsInForwardBackward(fb, buckets);
    return success();
  }

  /// 1-bit Adam at stages 1 and 2 (loom-onebit-adam's @train_step_frozen,
  /// written before this pass): after the freeze no gradient is reduced;
  /// the compressed all-reduce leaves the averaged momentum on every rank
  /// in full. Each rank steps its shard of the bucket with its shard of the
  /// frozen variance (the update @train_step's ZeRO form makes, on the same
  /// shards: stage 0's arithmetic, element for element) and the updated
  /// shards are all-gathered, fp32, as in @train_step. The full momentum
  /// stays a state of every rank (@P.exp_avg): the next step's local
  /// momentum, β₁m + (1-β₁)g, needs all of it (docs/compression.md: the
  /// bytes and memory this costs).
  ///
  /// With master shards (`pSym`, the offload's master weights) the update
  /// steps the stored shard and the gather reads it back, as @train_step's
  /// does; the shard of the whole parameters it replaces holds the same
  /// bits (they were gathered from it).
  LogicalResult rewriteFrozen(OpBuilder &b, Location loc, Bucket &bk, int64_t shard,
                              FlatSymbolRefAttr mSym, FlatSymbolRefAttr vSym,
                              FlatSymbolRefAttr pSym, ArrayRef<RankedTensorType> types) {
    SmallVector<AdamOp> adams;
    for (Member &m : bk.members) {
      AdamOp found;
      frozen.walk([&](AdamOp a) {
        if (auto l = a.getParam().getDefiningOp<LoadOp>();
            l && l.getName() == m.param.getSymName())
          found = a;
      });
      if (!found)
        return fail(frozen, "@train_step_frozen has no update of '@" + m.param.getSymName() +
                                "'");
      adams.push_back(found);
    }
    Operation *last = nullptr;
    for (AdamOp a : adams)
      if (!last || last->isBeforeInBlock(a))
        last = a;
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointAfter(last);
    SmallVector<Value> moms, params;
    for (AdamOp a : adams) {
      moms.push_back(a.getGrad());
      params.push_back(a.getParam());
    }
    auto shardType = RankedTensorType::get({shard}, b.getF32Type());
    Value mS = LoadOp::create(b, loc, shardType, mSym);
    Value vS = LoadOp::create(b, loc, shardType, vSym);
    AdamOp first = adams.front();
    // One statement each: the IR's order must not depend on the compiler's
    // order of evaluating arguments.
    Value pShard = pSym ? LoadOp::create(b, loc, shardType, pSym).getResult()
                        : shardOf(b, loc, flatten(b, loc, params, bk.padded), shard);
    Value momShard = shardOf(b, loc, flatten(b, loc, moms, bk.padded), shard);
    auto adam = AdamOp::create(
        b, loc, TypeRange{shardType, shardType, shardType}, pShard, momShard, mS, vS,
        first.getStep(),
        first.getLrAttr(), first.getBeta1Attr(), first.getBeta2Attr(), first.getEpsAttr(),
        first.getWeightDecayAttr(), first.getDecoupledAttr(), FlatSymbolRefAttr(),
        first.getFreezeStepAttr());
    // The shard of the momentum too, so the ZeRO state a checkpoint saves
    // stays the momentum; the variance is frozen and needs no store.
    StoreOp::create(b, loc, adam.getNewExpAvg(), mSym);
    Value fresh = adam.getNewParam();
    if (pSym) {
      StoreOp::create(b, loc, fresh, pSym);
      fresh = LoadOp::create(b, loc, shardType, pSym).getResult();
    }
    Value full = allGather(b, loc, fresh, bk.padded);
    for (auto [m, v, mom] : llvm::zip(bk.members, unflatten(b, loc, full, types), moms)) {
      StoreOp::create(b, loc, v, FlatSymbolRefAttr::get(m.param.getSymNameAttr()));
      StoreOp::create(b, loc, mom, (m.param.getSymName() + ".exp_avg").str());
    }
    // The per-parameter updates go, and the loads only they read (the
    // variance's, and with master shards the whole weights'; the
    // momentum's feeds the local momentum too).
    for (AdamOp a : adams) {
      SmallVector<Operation *> loads;
      for (Value in : {a.getParam(), a.getExpAvg(), a.getExpAvgSq()})
        if (Operation *d = in.getDefiningOp(); d && isa<LoadOp>(d))
          loads.push_back(d);
      for (Operation *u : llvm::make_early_inc_range(a->getUsers()))
        u->erase();
      a->erase();
      for (Operation *d : loads)
        if (d->use_empty())
          d->erase();
    }
    return success();
  }

  /// 1-bit Adam at stages 1 and 2: the warm-up leaves the momentum in
  /// shards, and the first frozen step needs it whole. @enter_frozen
  /// all-gathers it into @P.exp_avg (with frozen-variance=replicated the
  /// variance too, into @P.exp_avg_sq, and @train_step_frozen stays as
  /// loom-onebit-adam wrote it: every rank updates every parameter, as at
  /// stage 0); the driver calls it once, before the
  /// step numbered freeze_step (a run resumed past it restores @P.exp_avg
  /// from the checkpoint instead).
  void createEnterFrozen(Location loc, MutableArrayRef<Bucket> buckets) {
    MLIRContext *ctx = module.getContext();
    OpBuilder b(ctx);
    b.setInsertionPointAfter(frozen);
    auto enter = func::FuncOp::create(b, loc, LoomDialect::kEnterFrozen, FunctionType::get(ctx, {}, {}));
    b.setInsertionPointToStart(enter.addEntryBlock());
    for (auto [k, bk] : llvm::enumerate(buckets)) {
      int64_t shard = bk.padded / world;
      auto shardType = RankedTensorType::get({shard}, b.getF32Type());
      SmallVector<RankedTensorType> types;
      for (Member &m : bk.members)
        types.push_back(cast<RankedTensorType>(m.param.getType()));
      for (StringRef suffix : {".exp_avg", ".exp_avg_sq"}) {
        if (suffix == ".exp_avg_sq" && !replicated)
          continue;
        Value mine = LoadOp::create(b, loc, shardType, "zero.bucket" + std::to_string(k) + suffix.str());
        for (auto [m, v] : llvm::zip(bk.members,
                                     unflatten(b, loc, allGather(b, loc, mine, bk.padded), types)))
          StoreOp::create(b, loc, v, (m.param.getSymName() + suffix).str());
      }
    }
    func::ReturnOp::create(b, loc);
  }

  /// Stage 3: every load of a sharded parameter in @forward_backward reads
  /// an all-gather of its bucket, placed before the first use in the forward
  /// and again before the first use in the backward.
  LogicalResult gatherParamsInForwardBackward(func::FuncOp fb, MutableArrayRef<Bucket> buckets) {
    Block &body = fb.getBody().front();
    // Every gather made, and whether it is the backward's (for prefetch).
    SmallVector<std::pair<AllGatherOp, bool>> gathers;
    // The forward ends where the loss is computed.
    Operation *lossOp = body.getTerminator()->getOperand(0).getDefiningOp();
    if (!lossOp)
      return fail(fb, "the loss of @forward_backward must be computed in it");
    OpBuilder b(fb.getContext());
    for (auto [k, bk] : llvm::enumerate(buckets)) {
      auto pSym = FlatSymbolRefAttr::get(fb.getContext(), "zero.bucket" + std::to_string(k) + ".params");
      int64_t shard = bk.padded / world;
      SmallVector<RankedTensorType> types;
      DenseMap<StringAttr, unsigned> index;
      for (auto [i, m] : llvm::enumerate(bk.members)) {
        types.push_back(cast<RankedTensorType>(m.param.getType()));
        index[m.param.getSymNameAttr()] = unsigned(i);
      }
      // A cast of a member in the forward that the backward reads too
      // (mixed precision: the matmul's backward reads the bf16 weight) is
      // made again in the backward from a load of its own, so that the
      // backward gathers the bucket again instead of keeping the forward's
      // gathered weights alive across the step (ZeRO-3's point).
      SmallVector<LoadOp> forwardLoads;
      body.walk([&](LoadOp l) {
        if (index.count(l.getNameAttr().getAttr()) && l->getBlock() == &body &&
            l->isBeforeInBlock(lossOp))
          forwardLoads.push_back(l);
      });
      for (LoadOp l : forwardLoads)
        for (Operation *user : llvm::make_early_inc_range(l->getUsers())) {
          auto c = dyn_cast<CastOp>(user);
          if (!c || c->getBlock() != &body || !c->isBeforeInBlock(lossOp))
            continue;
          SmallVector<OpOperand *> late;
          for (OpOperand &u : c.getResult().getUses()) {
            Operation *o = body.findAncestorOpInBlock(*u.getOwner());
            if (o != lossOp && lossOp->isBeforeInBlock(o))
              late.push_back(&u);
          }
          if (late.empty())
            continue;
          Operation *first = nullptr;
          for (OpOperand *u : late) {
            Operation *o = body.findAncestorOpInBlock(*u->getOwner());
            if (!first || o->isBeforeInBlock(first))
              first = o;
          }
          b.setInsertionPoint(first);
          auto again = cast<LoadOp>(b.clone(*l));
          Operation *recast = b.clone(*c);
          recast->setOperand(0, again.getResult());
          for (OpOperand *u : late)
            u->set(recast->getResult(0));
        }
      // Uses of each member, split into forward and backward.
      SmallVector<SmallVector<OpOperand *>> fwdUses(bk.members.size()), bwdUses(bk.members.size());
      SmallVector<LoadOp> loads;
      body.walk([&](LoadOp l) {
        auto it = index.find(l.getNameAttr().getAttr());
        if (it == index.end())
          return;
        loads.push_back(l);
        for (OpOperand &u : l.getResult().getUses()) {
          Operation *user = body.findAncestorOpInBlock(*u.getOwner());
          bool backward = user != lossOp && lossOp->isBeforeInBlock(user);
          (backward ? bwdUses : fwdUses)[it->second].push_back(&u);
        }
      });
      Value secondaryKept; // hpZ: this rank's block within the secondary group
      auto gatherAt = [&](SmallVector<SmallVector<OpOperand *>> &uses) {
        Operation *firstUser = nullptr;
        for (auto &list : uses)
          for (OpOperand *u : list) {
            Operation *o = body.findAncestorOpInBlock(*u->getOwner());
            if (!firstUser || o->isBeforeInBlock(firstUser))
              firstUser = o;
          }
        if (!firstUser)
          return;
        b.setInsertionPoint(firstUser);
        Location loc = firstUser->getLoc();
        auto shardType = RankedTensorType::get({shard}, b.getF32Type());
        // The compute type when every use casts to it (mixed precision's
        // casts of the fp32 masters): the gather moves bf16 and the casts go.
        Type compute;
        if (computeGathers)
          for (auto &list : uses)
            for (OpOperand *u : list) {
              auto c = dyn_cast<CastOp>(u->getOwner());
              Type to = c ? cast<RankedTensorType>(c.getType()).getElementType() : Type();
              if (!c || to.isF32() || (compute && compute != to) || !isa<FloatType>(to)) {
                compute = Type();
                goto decided;
              }
              compute = to;
            }
      decided:
        Value full;
        if (&uses == &bwdUses && secondaryKept &&
            cast<RankedTensorType>(secondaryKept.getType()).getElementType() ==
                (compute ? compute : b.getF32Type())) {
          // hpZ: the backward gathers inside the secondary group, from the
          // block the forward kept.
          full = allGatherOver(b, loc, secondaryKept, bk.padded, secondaryGroup);
        } else {
          Value mine = LoadOp::create(b, loc, shardType, pSym);
          if (compute)
            mine = CastOp::create(b, loc, flatType(RankedTensorType::get({shard}, compute), shard),
                                  mine);
          full = allGather(b, loc, mine, bk.padded);
          if (secondaryGroup && &uses == &fwdUses)
            secondaryKept = ShardOp::create(
                b, loc, flatType(cast<RankedTensorType>(full.getType()), bk.padded / secondarySize),
                full, secondaryGroup);
        }
        gathers.push_back({full.getDefiningOp<AllGatherOp>(), &uses == &bwdUses});
        SmallVector<RankedTensorType> pieceTypes;
        for (RankedTensorType t : types)
          pieceTypes.push_back(compute ? RankedTensorType::get(t.getShape(), compute) : t);
        SmallVector<Value> pieces = unflatten(b, loc, full, pieceTypes);
        for (auto [i, list] : llvm::enumerate(uses))
          for (OpOperand *u : list) {
            if (!compute) {
              u->set(pieces[i]);
              continue;
            }
            Operation *c = u->getOwner();
            c->getResult(0).replaceAllUsesWith(pieces[i]);
            c->erase();
          }
      };
      gatherAt(fwdUses);
      gatherAt(bwdUses);
      // A backward that gathers nothing (a member only the forward reads)
      // leaves hpZ's block unused.
      if (secondaryKept && secondaryKept.use_empty())
        secondaryKept.getDefiningOp()->erase();
      for (LoadOp l : loads) {
        if (!l.getResult().use_empty())
          return fail(l, "a use of a sharded parameter was not rewritten");
        l.erase();
      }
    }
    prefetchGathers(gathers);
    return success();
  }

  /// Moves each gather (with the load and cast that feed it) `prefetch`
  /// gathers earlier, in the order the forward, then the backward, issues
  /// them; its wait stays at the first use. The comm stream then runs
  /// the next units' gathers while this one computes (FSDP2's forward and
  /// backward prefetch); the price is `prefetch` more units gathered at once.
  void prefetchGathers(ArrayRef<std::pair<AllGatherOp, bool>> gathers) {
    if (prefetch <= 0)
      return;
    for (bool backward : {false, true}) {
      SmallVector<AllGatherOp> order;
      for (auto &[g, bwd] : gathers)
        if (bwd == backward)
          order.push_back(g);
      llvm::stable_sort(order, [](AllGatherOp x, AllGatherOp y) {
        return x->isBeforeInBlock(y);
      });
      // The ops that make a gather's input (a load, a cast), first first.
      auto chain = [](AllGatherOp g) {
        SmallVector<Operation *> ops{g};
        for (Operation *d = g.getInput().getDefiningOp();
             d && isa<LoadOp, CastOp>(d) && d->hasOneUse();
             d = d->getNumOperands() ? d->getOperand(0).getDefiningOp() : nullptr)
          ops.insert(ops.begin(), d);
        return ops;
      };
      // Gather i goes just before the wait of gather i - prefetch: issued
      // while the units before its own compute. (The waits do not move.)
      SmallVector<Operation *> waits;
      for (AllGatherOp g : order) {
        Operation *w = nullptr;
        for (Operation *u : g.getToken().getUsers())
          if (isa<WaitOp>(u) && (!w || u->isBeforeInBlock(w)))
            w = u;
        waits.push_back(w);
      }
      for (size_t i = size_t(prefetch); i < order.size(); ++i) {
        Operation *at = waits[i - size_t(prefetch)];
        if (!at || !at->isBeforeInBlock(order[i]))
          continue;
        for (Operation *op : chain(order[i]))
          op->moveBefore(at);
      }
    }
  }
};

} // namespace

Operation *mlir::loom::afterItsWait(Operation *def) {
  auto w = dyn_cast_or_null<WaitOp>(def->getNextNode());
  bool waits =
      w && llvm::any_of(w.getTokens(), [&](Value t) { return t.getDefiningOp() == def; });
  return waits ? w.getOperation() : def;
}

func::CallOp mlir::loom::findCall(func::FuncOp fn, StringRef callee) {
  func::CallOp call;
  fn.walk([&](func::CallOp c) {
    if (c.getCallee() == callee)
      call = c;
  });
  return call;
}

FailureOr<TopologyOp> mlir::loom::findTopology(ModuleOp module, StringRef name, StringRef pass) {
  TopologyOp topo;
  for (TopologyOp t : module.getOps<TopologyOp>())
    if (name.empty() || t.getSymName() == name) {
      if (topo)
        return t.emitError() << pass << ": several loom.topology ops: name one with topology=",
               failure();
      topo = t;
    }
  return topo;
}

FailureOr<GroupAttr> mlir::loom::pipelineGroup(ModuleOp module, StringRef pass) {
  auto pipe = module->getAttrOfType<DenseI64ArrayAttr>(LoomDialect::PipelineAttrHelper::getNameStr());
  if (!pipe)
    return GroupAttr();
  FailureOr<TopologyOp> topo = findTopology(module, "", pass);
  if (failed(topo))
    return failure();
  if (!*topo || pipe[2] >= int64_t((*topo).getLevels().size()))
    return module.emitError() << pass << ": a pipeline stage's program needs the loom.topology "
                                         "of its stages",
           failure();
  MLIRContext *ctx = module.getContext();
  return GroupAttr::get(ctx, FlatSymbolRefAttr::get((*topo).getSymNameAttr()),
                        ArrayAttr::get(ctx, {(*topo).getLevels()[pipe[2]]}));
}
