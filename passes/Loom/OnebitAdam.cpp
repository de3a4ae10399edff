//===- OnebitAdam.cpp - loom-onebit-adam ----------------------------------===//
//
// 1-bit Adam (Tang et al., "1-bit Adam: Communication Efficient Large-Scale
// Training with Adam's Convergence Speed", 2021, Algorithm 1) with the
// numerics of DeepSpeed's OnebitAdam (deepspeed/runtime/fp16/onebit/adam.py)
// and its compressed_allreduce (deepspeed/runtime/comm/nccl.py):
//   warm-up (steps before the freeze): Adam with averaged gradients, which
//     is @train_step made data-parallel by loom-data-parallel as usual;
//   after it: each rank updates its momentum from its own gradient, the
//     momenta are averaged by a two-phase compressed all-reduce with worker
//     and server error feedback, and the weights step with the frozen
//     variance. This pass writes that step as @train_step_frozen.
// Compression is per parameter by default, as DeepSpeed's: each tensor has
// its own scale, padded to a multiple of W * lcm(W, 8) (W ranks) so every
// rank's chunk is whole bytes of signs; bucket-size lets consecutive
// parameters share one exchange and one scale. Buckets are emitted in three
// rounds (worker steps and all-to-alls, server steps and all-gathers,
// updates) so one bucket's exchange overlaps the next one's arithmetic.
//
//===----------------------------------------------------------------------===//
#include "loom/Passes/Loom.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

#include <numeric>

namespace mlir::loom {
#define GEN_PASS_DEF_ONEBITADAM
#include "passes/Loom/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

struct OnebitAdam : public mlir::loom::impl::OnebitAdamBase<OnebitAdam> {
  using Base::Base;

  LogicalResult fail(Operation *at, const Twine &msg) {
    at->emitError() << "loom-onebit-adam: " << msg;
    return failure();
  }

  void runOnOperation() override {
    if (failed(run(getOperation())))
      signalPassFailure();
  }

  /// A bucket in flight between the three rounds.
  struct Pending {
    SmallVector<unsigned> members;
    SmallVector<Value> ws, ms, vs;
    SmallVector<RankedTensorType> types;
    int64_t padded = 0, chunk = 0;
    std::string seName;
    Value exchanged, token;
  };

  /// Phase 1 of every bucket: each member's momentum from this rank's
  /// gradient, flattened and padded, compressed with the worker error and
  /// sent by all-to-all; the buckets in flight.
  std::vector<Pending> workerRound(ModuleOp module, OpBuilder &b, Location loc,
                                   ArrayRef<SmallVector<unsigned>> buckets, ArrayAttr names,
                                   func::CallOp lcall, int64_t unit, int64_t world, double b1,
                                   GroupAttr group, StreamAttr comm) {
    MLIRContext *ctx = b.getContext();
    Type f32 = b.getF32Type();
    auto tok = TokenType::get(ctx);
    auto sign = CodecAttr::get(ctx, CodecKind::sign_scale, 0);
    auto zeros = InitAttr::get(ctx, InitKind::zeros, APFloat(0.0), APFloat(0.0));
  std::vector<Pending> pending;
  for (ArrayRef<unsigned> members : buckets) {
    Pending &pb = pending.emplace_back();
    pb.members.assign(members.begin(), members.end());
    // Each member's momentum from this rank's gradient: DeepSpeed's
    // exp_avg.mul_(β₁).add_(1-β₁, g) as one lerp, m + (1-β₁)(g - m)
    // (equal but for rounding; one pass over memory instead of three);
    // flattened one after another.
    SmallVector<Value> parts;
    int64_t n = 0;
    for (unsigned i : members) {
      StringRef p = cast<FlatSymbolRefAttr>(names[i]).getValue();
      auto type = cast<RankedTensorType>(module.lookupSymbol<ParamOp>(p).getType());
      Value g = lcall.getResult(i + 1);
      // Mixed precision hands bf16 gradients to fp32 masters and moments.
      if (cast<RankedTensorType>(g.getType()).getElementType() != f32)
        g = CastOp::create(b, loc, type, g);
      pb.ws.push_back(LoadOp::create(b, loc, type, p));
      pb.ms.push_back(LoadOp::create(b, loc, type, (p + ".exp_avg").str()));
      pb.vs.push_back(LoadOp::create(b, loc, type, (p + ".exp_avg_sq").str()));
      Value ml = LerpOp::create(b, loc, type, pb.ms.back(), g, b.getF64FloatAttr(1.0 - b1));
      int64_t k = type.getNumElements();
      parts.push_back(ReshapeOp::create(b, loc, RankedTensorType::get({k}, f32), ml));
      pb.types.push_back(type);
      n += k;
    }
    pb.padded = (n + unit - 1) / unit * unit;
    pb.chunk = pb.padded / world;
    auto flatN = RankedTensorType::get({pb.padded}, f32);
    if (pb.padded > n) {
      auto zt = RankedTensorType::get({pb.padded - n}, f32);
      parts.push_back(arith::ConstantOp::create(b, loc, zt, DenseElementsAttr::get(zt, 0.0f)));
    }
    Value flat = parts.size() == 1 ? parts[0] : ConcatOp::create(b, loc, flatN, parts, 0);

    // The error buffers, this rank's, saved with the rest of the state:
    // named after the bucket's first parameter, declared after it.
    auto first = module.lookupSymbol<ParamOp>(cast<FlatSymbolRefAttr>(names[members[0]]));
    OpBuilder mb(ctx);
    mb.setInsertionPointAfter(first);
    auto declare = [&](StringRef suffix, RankedTensorType ty) {
      std::string name = (first.getSymName() + suffix).str();
      // Not `of` the parameter: padded (and bucketed), they do not have
      // its shape.
      StateOp::create(mb, loc, mb.getStringAttr(name), TypeAttr::get(ty),
                      StateRoleAttr::get(ctx, StateRole::error_feedback), FlatSymbolRefAttr(),
                      zeros);
      return name;
    };
    std::string weName = declare(".onebit.worker_error", flatN);
    pb.seName = declare(".onebit.server_error", RankedTensorType::get({pb.chunk}, f32));

    // Phase 1: worker compression, all-to-all of the chunks.
    Value we = LoadOp::create(b, loc, flatN, weName);
    auto wc = CompressOp::create(b, loc, PackedType::get(ctx, flatN, sign), flatN, flat, we);
    StoreOp::create(b, loc, wc.getNewError(), weName);
    auto chunked =
        PackedType::get(ctx, flatN, CodecAttr::get(ctx, CodecKind::sign_scale, pb.chunk));
    auto a2a = AllToAllOp::create(b, loc, chunked, tok, wc.getResult(), ValueRange{}, group, comm);
    pb.exchanged = a2a.getResult();
    pb.token = a2a.getToken();
  }
    return pending;
  }

  /// Phase 2 of every bucket: the server's chunk averaged over the
  /// workers, compressed with the server error, all-gathered.
  void serverRound(OpBuilder &b, Location loc, std::vector<Pending> &pending, int64_t world,
                   GroupAttr group, StreamAttr comm) {
    MLIRContext *ctx = b.getContext();
    Type f32 = b.getF32Type();
    auto tok = TokenType::get(ctx);
    auto sign = CodecAttr::get(ctx, CodecKind::sign_scale, 0);
  for (Pending &pb : pending) {
    // Phase 2: the server's chunk averaged over the workers, compressed
    // with the server error, all-gathered.
    auto flatN = RankedTensorType::get({pb.padded}, f32);
    auto flatC = RankedTensorType::get({pb.chunk}, f32);
    WaitOp::create(b, loc, ValueRange{pb.token});
    Value workers = DecompressOp::create(b, loc, flatN, pb.exchanged);
    Value rows = ReshapeOp::create(b, loc, RankedTensorType::get({world, pb.chunk}, f32), workers);
    Value avg = ReduceOp::create(b, loc, flatC, ReduceKindAttr::get(ctx, ReduceKind::mean), rows,
                                 b.getDenseI64ArrayAttr({0}), UnitAttr());
    Value se = LoadOp::create(b, loc, flatC, pb.seName);
    auto sc = CompressOp::create(b, loc, PackedType::get(ctx, flatC, sign), flatC, avg, se);
    StoreOp::create(b, loc, sc.getNewError(), pb.seName);
    auto chunked =
        PackedType::get(ctx, flatN, CodecAttr::get(ctx, CodecKind::sign_scale, pb.chunk));
    auto gather = AllGatherOp::create(b, loc, chunked, tok, sc.getResult(), ValueRange{}, group,
                                      comm);
    pb.exchanged = gather.getResult();
    pb.token = gather.getToken();
  }
  }

  /// Phase 3 of every bucket: each member's update with the averaged
  /// momentum and the frozen variance.
  void updateRound(OpBuilder &b, Location loc, std::vector<Pending> &pending,
                   ArrayRef<AdamOp> updates, ArrayAttr names, Value t) {
    Type f32 = b.getF32Type();
  for (Pending &pb : pending) {
    WaitOp::create(b, loc, ValueRange{pb.token});
    Value mavg =
        DecompressOp::create(b, loc, RankedTensorType::get({pb.padded}, f32), pb.exchanged);
    // Each member's slice of the averaged momentum (the padding never
    // reaches the model), and its update with the variance frozen.
    int64_t off = 0;
    for (auto [k, i] : llvm::enumerate(pb.members)) {
      AdamOp adam = updates[i];
      StringRef p = cast<FlatSymbolRefAttr>(names[i]).getValue();
      RankedTensorType type = pb.types[k];
      int64_t len = type.getNumElements();
      Value mine = mavg;
      if (len != pb.padded)
        mine = SliceOp::create(b, loc, RankedTensorType::get({len}, f32), mavg,
                               b.getDenseI64ArrayAttr({off}), b.getDenseI64ArrayAttr({off + len}),
                               b.getDenseI64ArrayAttr({1}));
      off += len;
      mine = ReshapeOp::create(b, loc, type, mine);
      auto upd = AdamOp::create(b, loc, TypeRange{type, type, type}, pb.ws[k], mine, pb.ms[k],
                                pb.vs[k], t, adam.getLrAttr(), adam.getBeta1Attr(),
                                adam.getBeta2Attr(), adam.getEpsAttr(),
                                adam.getWeightDecayAttr(), adam.getDecoupledAttr(),
                                FlatSymbolRefAttr(), b.getI64IntegerAttr(freezeStep));
      StoreOp::create(b, loc, upd.getNewParam(), p);
      StoreOp::create(b, loc, upd.getNewExpAvg(), (p + ".exp_avg").str());
      StoreOp::create(b, loc, upd.getNewExpAvgSq(), (p + ".exp_avg_sq").str());
    }
  }
  }

  LogicalResult run(ModuleOp module) {
    MLIRContext *ctx = module.getContext();
    if (freezeStep < 1)
      return fail(module, "freeze-step must be at least 1 (steps of plain Adam before the "
                          "variance is frozen)");
    if (varianceRefresh < 0)
      return fail(module, "variance-refresh must be 0 (never) or a positive number of steps");
    FailureOr<TopologyOp> found = findTopology(module, topology, "loom-onebit-adam");
    if (failed(found))
      return failure();
    TopologyOp topo = *found;
    if (!topo)
      return fail(module, "1-bit Adam averages momenta across ranks: it needs a loom.topology "
                          "(loomc --topology)");
    int64_t world = topo.getWorldSize();
    auto group = GroupAttr::get(ctx, FlatSymbolRefAttr::get(topo.getSymNameAttr()),
                                topo.getLevels());
    auto comm = StreamAttr::get(ctx, StreamKind::comm, 0);

    auto step = module.lookupSymbol<func::FuncOp>(LoomDialect::kTrainStep);
    auto fb = module.lookupSymbol<func::FuncOp>(LoomDialect::kForwardBackward);
    if (!step || !fb || !step.getBody().hasOneBlock())
      return fail(module, "needs @train_step and @forward_backward (run loom-attach-optimizer)");
    if (getDataParallel(step))
      return fail(step, "runs before loom-data-parallel");
    if (module.lookupSymbol(LoomDialect::kTrainStepFrozen) ||
        module.lookupSymbol("forward_backward_local"))
      return fail(step, "@train_step_frozen exists already");
    auto names = fb->getAttrOfType<ArrayAttr>(LoomDialect::GradParamsAttrHelper::getNameStr());
    func::CallOp call = findCall(step, LoomDialect::kForwardBackward);
    if (!names || !call || call.getNumResults() != names.size() + 1)
      return fail(step, "@train_step must call @forward_backward, which returns the loss and "
                        "one gradient per loom.grad_params entry");
    // Each gradient feeds the AdamW update of its parameter.
    SmallVector<AdamOp> updates;
    for (auto [i, a] : llvm::enumerate(names)) {
      AdamOp adam;
      for (Operation *u : call.getResult(i + 1).getUsers())
        adam = dyn_cast<AdamOp>(u) ? cast<AdamOp>(u) : adam;
      auto p = module.lookupSymbol<ParamOp>(cast<FlatSymbolRefAttr>(a));
      if (!adam || !p || !adam.getDecoupled())
        return fail(step, "1-bit Adam replaces AdamW: the gradient of " +
                              cast<FlatSymbolRefAttr>(a).getValue() +
                              " does not feed a decoupled loom.adam");
      if (!cast<RankedTensorType>(p.getType()).getElementType().isF32())
        return fail(p, "1-bit Adam keeps fp32 parameters and momenta");
      updates.push_back(adam);
    }

    // The copy of the backward that data parallelism leaves alone: each
    // rank's own gradients.
    OpBuilder b(ctx);
    b.setInsertionPointAfter(fb);
    auto local = cast<func::FuncOp>(b.clone(*fb));
    local.setSymName("forward_backward_local");

    // Padding: a multiple of W * lcm(W, 8), DeepSpeed's.
    int64_t unit = world * std::lcm(world, int64_t(8));
    Location loc = step.getLoc();
    b.setInsertionPointAfter(step);
    auto frozen =
        func::FuncOp::create(b, loc, LoomDialect::kTrainStepFrozen, step.getFunctionType());
    frozen->setAttr(LoomDialect::FreezeStepAttrHelper::getNameStr(),
                    b.getI64IntegerAttr(freezeStep));
    if (varianceRefresh > 0)
      frozen->setAttr(LoomDialect::VarianceRefreshAttrHelper::getNameStr(),
                      b.getI64IntegerAttr(varianceRefresh));
    Block *entry = frozen.addEntryBlock();
    b.setInsertionPointToStart(entry);
    // The step counter, as @train_step advances it: the ops it is computed
    // from and its store, in their order.
    IRMapping map;
    for (auto [from, to] : llvm::zip(step.getArguments(), frozen.getArguments()))
      map.map(from, to);
    Value t = updates.front().getStep();
    Block &body = step.getBody().front();
    llvm::SmallPtrSet<Operation *, 8> slice;
    SmallVector<Value> work{t};
    while (!work.empty()) {
      Operation *d = work.pop_back_val().getDefiningOp();
      if (!d || d->getBlock() != &body || !slice.insert(d).second)
        continue;
      if (isa<func::CallOp>(d))
        return fail(step, "the step counter must not depend on @forward_backward");
      llvm::append_range(work, d->getOperands());
    }
    if (slice.empty())
      return fail(step, "the step counter must be computed in @train_step");
    for (Operation &op : body)
      if (slice.contains(&op) || (isa<StoreOp>(op) && op.getOperand(0) == t))
        b.clone(op, map);
    t = map.lookup(t);
    SmallVector<Value> args;
    for (Value a : call.getOperands())
      args.push_back(map.lookupOrDefault(a));
    auto lcall = func::CallOp::create(b, loc, local, args);
    auto tok = TokenType::get(ctx);
    auto lossAvg = AllReduceOp::create(b, loc, lcall.getResult(0).getType(), tok,
                                       lcall.getResult(0), ValueRange{}, group, ReduceKind::mean,
                                       comm);
    WaitOp::create(b, loc, ValueRange{lossAvg.getToken()});

    // Buckets: each parameter alone (bucket-size 0: DeepSpeed OnebitAdam's
    // numerics, one scale per tensor), or consecutive parameters up to
    // bucket-size elements sharing one compressed all-reduce and one scale
    // (fewer, larger collectives: DeepSpeed's 1-bit LAMB flattens all
    // momenta into one buffer).
    SmallVector<SmallVector<unsigned>> buckets;
    int64_t filled = 0;
    for (unsigned i = 0; i < names.size(); ++i) {
      int64_t n = cast<RankedTensorType>(
                      module.lookupSymbol<ParamOp>(cast<FlatSymbolRefAttr>(names[i])).getType())
                      .getNumElements();
      if (buckets.empty() || bucketSize <= 0 || filled + n > bucketSize) {
        buckets.emplace_back();
        filled = 0;
      }
      buckets.back().push_back(i);
      filled += n;
    }
    double b1 = updates.front().getBeta1().convertToDouble();
    // Three rounds over the buckets, so a bucket's exchange overlaps the
    // next one's arithmetic (the comm stream runs the collectives in issue
    // order; the compute stream waits for each only where it reads it):
    // every worker compression and all-to-all; then every server average,
    // compression and all-gather; then every update.
    std::vector<Pending> pending =
        workerRound(module, b, loc, buckets, names, lcall, unit, world, b1, group, comm);
    serverRound(b, loc, pending, world, group, comm);
    updateRound(b, loc, pending, updates, names, t);
    func::ReturnOp::create(b, loc, lossAvg.getResult());
    return success();
  }
};

} // namespace
