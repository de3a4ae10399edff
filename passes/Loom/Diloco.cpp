//===- Diloco.cpp - loom-diloco -------------------------------------------===//
//
// Streaming DiLoCo (Douillard et al., "Streaming DiLoCo with overlapping
// communication", 2025, Algorithm 1; DiLoCo, Douillard et al. 2023): M
// replicas train alone with their inner optimizer (@train_step's AdamW) and
// synchronise rarely. The model is split into P fragments; fragment f
// synchronises every H steps, offset by ⌊H/P·(f+1)⌋ steps:
//   Δ = θ_global − θ_local               (pseudo-gradient; sign as torchft's
//                                         after its PR #233)
//   Δ̄ = mean over replicas of Δ           (one all-reduce over the replica
//                                         level, in fp32 or bf16)
//   θ_global, b = SGD(θ_global, Δ̄, b)     (Nesterov, outer lr and momentum)
//   θ_local = lerp(θ_global, θ_local, α) (α = 0: the replicas restart from
//                                         the global copy)
// This pass writes each fragment's outer step as a function of its own,
// @diloco_outer_F (attribute loom.diloco = {every = H, offset = O}: the
// driver runs it after the inner step numbered t when t + 1 >= O and
// t + 1 - O is a multiple of H), and @diloco_start, which copies the initial parameters into the
// global copy before a fresh run's first step. The global copy and the outer
// momentum are loom.state (roles master and momentum): checkpoints hold
// them with each replica's own parameters and Adam state.
//
// Fragments are strided over the model's blocks: a parameter whose name
// holds a block index (".h.3.", ".layers.3.", ".blocks.3.") goes to fragment
// index mod P; the ones before the first block (embeddings) to fragment 0,
// the ones after the last (final norm, head) to fragment P − 1, others to
// the fragment of the block before them.
//
// The exchange: an all-reduce in fp32 or bf16, or block-scaled fp8 (E4M3)
// or fp4 (E2M1) through an all-to-all, an fp32 mean and an all-gather.
// With overlap τ > 0 the outer step is split (Streaming DiLoCo §2.2): the
// pseudo-gradients' snapshot at O (@diloco_outer_F, into @diloco.delta_F),
// the exchange (@diloco_exchange_F, marked async: the driver runs it
// beside the next inner steps on a communicator of its own; its result in
// @diloco.pending_F), the outer SGD and the merge at O + τ
// (@diloco_apply_F), with the local parameters as the τ inner steps
// between left them. Not built: data parallelism inside a replica (it
// needs a communicator per level).
//
//===----------------------------------------------------------------------===//
#include "loom/Passes/Loom.h"

#include "mlir/IR/Builders.h"
#include "llvm/Support/Regex.h"

namespace mlir::loom {
#define GEN_PASS_DEF_DILOCO
#include "passes/Loom/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

struct Diloco : public mlir::loom::impl::DilocoBase<Diloco> {
  using Base::Base;

  LogicalResult fail(Operation *at, const Twine &msg) {
    at->emitError() << "loom-diloco: " << msg;
    return failure();
  }

  void runOnOperation() override {
    if (failed(run(getOperation())))
      signalPassFailure();
  }

  /// The fragment of each parameter (in loom.grad_params order).
  SmallVector<int64_t> fragmentsOf(ArrayRef<StringRef> names) {
    llvm::Regex block("(^|\\.)(h|layers|layer|blocks|block)\\.([0-9]+)\\.");
    SmallVector<int64_t> out(names.size(), -1);
    int64_t firstBlock = -1, lastBlock = -1;
    for (auto [i, n] : llvm::enumerate(names)) {
      SmallVector<StringRef, 4> m;
      uint64_t index = 0;
      // Names come from the model file: an index too large for 64 bits is
      // no block index (StringRef parses it without overflowing).
      if (!block.match(n, &m) || m[3].getAsInteger(10, index))
        continue;
      out[i] = int64_t(index % uint64_t(fragments));
      if (firstBlock < 0)
        firstBlock = int64_t(i);
      lastBlock = int64_t(i);
    }
    for (size_t i = 0; i < names.size(); ++i)
      if (out[i] < 0)
        out[i] = firstBlock < 0 || int64_t(i) < firstBlock ? 0
                 : int64_t(i) > lastBlock                  ? fragments - 1
                                                           : out[i - 1];
    return out;
  }

  /// The mean over the replicas of a flat fp32 buffer sent as block-scaled
  /// fp8 or fp4 (Streaming DiLoCo §2.3): quantised, reduce-scattered by an
  /// all-to-all (replica j receives every replica's chunk j), averaged in
  /// fp32, quantised again and all-gathered.
  Value narrowMean(OpBuilder &b, Location loc, Value flat, CodecAttr codec, int64_t replicas,
                   GroupAttr group, StreamAttr comm) {
    MLIRContext *ctx = b.getContext();
    auto flatT = cast<RankedTensorType>(flat.getType());
    int64_t n = flatT.getNumElements(), chunk = n / replicas;
    auto chunkT = RankedTensorType::get({chunk}, flatT.getElementType());
    auto tok = TokenType::get(ctx);
    auto whole = PackedType::get(ctx, flatT, codec), part = PackedType::get(ctx, chunkT, codec);
    Value q = CompressOp::create(b, loc, whole, Type(), flat, Value()).getResult();
    auto a2a = AllToAllOp::create(b, loc, whole, tok, q, ValueRange{}, group, comm);
    WaitOp::create(b, loc, ValueRange{a2a.getToken()});
    Value rows = ReshapeOp::create(b, loc, RankedTensorType::get({replicas, chunk}, flatT.getElementType()),
                                   DecompressOp::create(b, loc, flatT, a2a.getResult()));
    Value avg = ReduceOp::create(b, loc, chunkT, ReduceKindAttr::get(ctx, ReduceKind::mean), rows,
                                 b.getDenseI64ArrayAttr({0}), UnitAttr());
    Value q2 = CompressOp::create(b, loc, part, Type(), avg, Value()).getResult();
    auto gather = AllGatherOp::create(b, loc, whole, tok, q2, ValueRange{}, group, comm);
    WaitOp::create(b, loc, ValueRange{gather.getToken()});
    return DecompressOp::create(b, loc, flatT, gather.getResult());
  }

  /// The mean over the replicas that remain (elastic: the runtime's TCP
  /// transport drops a lost replica, whose all-gather block arrives as
  /// zeros): each replica's whole fragment, quantised with a block of ones
  /// after it, is all-gathered; the sum of the dequantised rows holds the
  /// number of replicas present in that block (a block of ones quantises
  /// exactly: scale 1/6 or 1/448, code 6 or 448), and divides the rest.
  /// Atomic by construction: a replica's data and its count travel in the
  /// same collective, which every survivor completes with the same members.
  Value elasticMean(OpBuilder &b, Location loc, Value flat, CodecAttr codec, int64_t replicas,
                    GroupAttr group, StreamAttr comm) {
    MLIRContext *ctx = b.getContext();
    auto f32 = b.getF32Type();
    auto flatT = cast<RankedTensorType>(flat.getType());
    int64_t n = flatT.getNumElements(), k = n + quantBlock;
    auto onesT = RankedTensorType::get({quantBlock}, f32);
    Value ones = arith::ConstantOp::create(b, loc, onesT, DenseElementsAttr::get(onesT, 1.0f));
    auto withT = RankedTensorType::get({k}, f32), allT = RankedTensorType::get({replicas * k}, f32);
    // One concatenation: the fragment's pieces, then the ones.
    SmallVector<Value> pieces{flat};
    auto cat = flat.getDefiningOp<ConcatOp>();
    bool fold = cat && flat.use_empty();
    if (fold)
      pieces.assign(cat.getInputs().begin(), cat.getInputs().end());
    pieces.push_back(ones);
    Value with = ConcatOp::create(b, loc, withT, pieces, 0);
    if (fold)
      cat.erase();
    Value q = CompressOp::create(b, loc, PackedType::get(ctx, withT, codec), Type(), with, Value())
                  .getResult();
    auto gather = AllGatherOp::create(b, loc, PackedType::get(ctx, allT, codec),
                                      TokenType::get(ctx), q, ValueRange{}, group, comm);
    WaitOp::create(b, loc, ValueRange{gather.getToken()});
    Value all = DecompressOp::create(b, loc, allT, gather.getResult());
    Value rows = ReshapeOp::create(b, loc, RankedTensorType::get({replicas, k}, f32), all);
    Value sum = ReduceOp::create(b, loc, withT, ReduceKindAttr::get(ctx, ReduceKind::sum), rows,
                                 b.getDenseI64ArrayAttr({0}), UnitAttr());
    Value data = SliceOp::create(b, loc, flatT, sum, b.getDenseI64ArrayAttr({0}),
                                 b.getDenseI64ArrayAttr({n}), b.getDenseI64ArrayAttr({1}));
    Value count = SliceOp::create(b, loc, RankedTensorType::get({1}, f32), sum,
                                  b.getDenseI64ArrayAttr({n}), b.getDenseI64ArrayAttr({n + 1}),
                                  b.getDenseI64ArrayAttr({1}));
    return DivOp::create(b, loc, flatT, data, count);
  }

  /// The outer step of a fragment from the replicas' mean pseudo-gradient
  /// (flat, `padded` elements): outer SGD on each global copy, then the
  /// merge lerp(global, local, α) into the parameter.
  void applyOuter(OpBuilder &bb, Location loc, MutableArrayRef<ParamOp> mine, Value mean,
                  ArrayRef<Value> locals, ArrayRef<Value> globals, int64_t padded) {
    auto f32 = bb.getF32Type();
    int64_t off = 0;
    for (auto [p, local, global] : llvm::zip(mine, locals, globals)) {
      auto type = cast<RankedTensorType>(p.getType());
      int64_t k = type.getNumElements();
      Value g = mean;
      if (k != padded)
        g = SliceOp::create(bb, loc, RankedTensorType::get({k}, f32), mean,
                            bb.getDenseI64ArrayAttr({off}), bb.getDenseI64ArrayAttr({off + k}),
                            bb.getDenseI64ArrayAttr({1}));
      off += k;
      if (type.getRank() != 1)
        g = ReshapeOp::create(bb, loc, type, g);
      std::string mom = (p.getSymName() + ".diloco.momentum").str();
      auto sgd = SgdOp::create(bb, loc, TypeRange{type, type}, global, g,
                               LoadOp::create(bb, loc, type, mom), bb.getF64FloatAttr(outerLr),
                               bb.getF64FloatAttr(outerMomentum),
                               outerMomentum > 0 ? bb.getUnitAttr() : UnitAttr());
      StoreOp::create(bb, loc, sgd.getNewParam(), (p.getSymName() + ".diloco.global").str());
      StoreOp::create(bb, loc, sgd.getNewMomentumBuf(), mom);
      // The merge: lerp(global, local, α) = global + α(local − global).
      Value merged = LerpOp::create(bb, loc, type, sgd.getNewParam(), local,
                                    bb.getF64FloatAttr(alpha));
      StoreOp::create(bb, loc, merged, p.getSymName());
    }
  }

  /// The outer step of each fragment (@diloco_outer_F; with overlap also
  /// @diloco_exchange_F and @diloco_apply_F), after `b`'s insertion point.
  void buildFragments(ModuleOp module, OpBuilder &b, Location loc, ArrayRef<ParamOp> params,
                      ArrayRef<int64_t> fragmentOf, GroupAttr group, StreamAttr comm,
                      int64_t replicas, InitAttr zeros) {
    MLIRContext *ctx = module.getContext();
    auto tok = TokenType::get(ctx);
    auto f32 = b.getF32Type();
    Type wire = quant == DilocoQuant::bf16 ? Type(b.getBF16Type()) : Type(f32);
    bool narrow = quant == DilocoQuant::fp8 || quant == DilocoQuant::fp4;
    auto codec = CodecAttr::get(ctx,
                                quant == DilocoQuant::fp8 ? CodecKind::fp8_e4m3
                                                          : CodecKind::fp4_e2m1,
                                quantBlock);
    for (int64_t f = 0; f < fragments; ++f) {
      SmallVector<ParamOp> mine;
      for (auto [p, frag] : llvm::zip(params, fragmentOf))
        if (frag == f)
          mine.push_back(p);
      if (mine.empty())
        continue;
      int64_t offset = innerSteps * (f + 1) / fragments;
      auto fn = func::FuncOp::create(b, loc, "diloco_outer_" + std::to_string(f),
                                     FunctionType::get(ctx, {}, {}));
      fn->setAttr(LoomDialect::DilocoAttrHelper::getNameStr(),
                  DilocoAttr::get(ctx, innerSteps, offset, /*async=*/false, elastic));
      OpBuilder fb2(ctx);
      fb2.setInsertionPointToStart(fn.addEntryBlock());
      // The pseudo-gradients, flattened into one buffer (one all-reduce a
      // fragment).
      SmallVector<Value> locals, globals, parts;
      int64_t n = 0;
      for (ParamOp p : mine) {
        auto type = cast<RankedTensorType>(p.getType());
        locals.push_back(LoadOp::create(fb2, loc, type, p.getSymName()));
        globals.push_back(LoadOp::create(fb2, loc, type, (p.getSymName() + ".diloco.global").str()));
        Value delta = SubOp::create(fb2, loc, type, globals.back(), locals.back());
        int64_t k = type.getNumElements();
        parts.push_back(type.getRank() == 1
                            ? delta
                            : ReshapeOp::create(fb2, loc, RankedTensorType::get({k}, f32), delta)
                                  .getResult());
        n += k;
      }
      // fp8/fp4: padded so that every replica's chunk is whole blocks
      // (elastic: the fragment is, each replica sending all of it).
      int64_t unit = !narrow ? 1 : elastic ? quantBlock : replicas * quantBlock;
      int64_t padded = (n + unit - 1) / unit * unit;
      if (padded > n) {
        auto zt = RankedTensorType::get({padded - n}, f32);
        parts.push_back(arith::ConstantOp::create(fb2, loc, zt, DenseElementsAttr::get(zt, 0.0f)));
      }
      auto flatT = RankedTensorType::get({padded}, f32);
      Value flat = parts.size() == 1 ? parts[0] : ConcatOp::create(fb2, loc, flatT, parts, 0);
      // The mean over the replicas of a flat buffer, built by `eb`.
      auto exchange = [&](OpBuilder &eb, Value x) -> Value {
        if (narrow && elastic)
          return elasticMean(eb, loc, x, codec, replicas, group, comm);
        if (narrow)
          return narrowMean(eb, loc, x, codec, replicas, group, comm);
        auto wireT = RankedTensorType::get({n}, wire);
        if (wire != f32)
          x = CastOp::create(eb, loc, wireT, x);
        auto avg = AllReduceOp::create(eb, loc, wireT, tok, x, ValueRange{}, group,
                                       ReduceKind::mean, comm);
        WaitOp::create(eb, loc, ValueRange{avg.getToken()});
        Value m = avg.getResult();
        return wire != f32 ? Value(CastOp::create(eb, loc, flatT, m)) : m;
      };
      if (overlap == 0) {
        applyOuter(fb2, loc, mine, exchange(fb2, flat), locals, globals, padded);
        func::ReturnOp::create(fb2, loc);
        b.setInsertionPointAfter(fn);
        continue;
      }
      // Streaming DiLoCo's overlap, in three functions: @diloco_outer_F
      // keeps the pseudo-gradients in @diloco.delta_F (a snapshot at the
      // offset step); @diloco_exchange_F (attribute `async`: the driver may
      // run it beside the next inner steps, on its own streams and
      // communicator) averages them into @diloco.pending_F; τ steps later
      // @diloco_apply_F steps the global copy and merges it into the
      // parameters as they are by then.
      std::string delta = "diloco.delta_" + std::to_string(f);
      std::string pending = "diloco.pending_" + std::to_string(f);
      auto addState = [&](StringRef name, Type type) {
        OpBuilder mb(ctx);
        mb.setInsertionPoint(module.getBody(), module.getBody()->begin());
        for (Operation &op : module.getBody()->getOperations())
          if (isa<TopologyOp>(op))
            mb.setInsertionPointAfter(&op);
        StateOp::create(mb, loc, mb.getStringAttr(name), TypeAttr::get(type),
                        StateRoleAttr::get(ctx, StateRole::other), FlatSymbolRefAttr(), zeros);
      };
      addState(pending, flatT);
      addState(delta, flatT);
      StoreOp::create(fb2, loc, flat, delta);
      func::ReturnOp::create(fb2, loc);
      auto schedule = [&](func::FuncOp g, int64_t at, bool async) {
        g->setAttr(LoomDialect::DilocoAttrHelper::getNameStr(),
                   DilocoAttr::get(ctx, innerSteps, at, async, elastic));
      };
      b.setInsertionPointAfter(fn);
      auto ex = func::FuncOp::create(b, loc, "diloco_exchange_" + std::to_string(f),
                                     FunctionType::get(ctx, {}, {}));
      schedule(ex, offset, true);
      OpBuilder xb(ctx);
      xb.setInsertionPointToStart(ex.addEntryBlock());
      StoreOp::create(xb, loc, exchange(xb, LoadOp::create(xb, loc, flatT, delta)), pending);
      func::ReturnOp::create(xb, loc);
      b.setInsertionPointAfter(ex);
      auto apply = func::FuncOp::create(b, loc, "diloco_apply_" + std::to_string(f),
                                        FunctionType::get(ctx, {}, {}));
      schedule(apply, offset + overlap, false);
      OpBuilder ab(ctx);
      ab.setInsertionPointToStart(apply.addEntryBlock());
      SmallVector<Value> nowLocal, nowGlobal;
      for (ParamOp p : mine) {
        nowLocal.push_back(LoadOp::create(ab, loc, p.getType(), p.getSymName()));
        nowGlobal.push_back(
            LoadOp::create(ab, loc, p.getType(), (p.getSymName() + ".diloco.global").str()));
      }
      Value waited = LoadOp::create(ab, loc, flatT, pending);
      applyOuter(ab, loc, mine, waited, nowLocal, nowGlobal, padded);
      func::ReturnOp::create(ab, loc);
      b.setInsertionPointAfter(apply);
    }
  }

  LogicalResult run(ModuleOp module) {
    MLIRContext *ctx = module.getContext();
    if (innerSteps < 1 || fragments < 1 || fragments > innerSteps)
      return fail(module, "needs inner-steps >= 1 and 1 <= fragments <= inner-steps");
    if (overlap < 0 || overlap * fragments >= innerSteps)
      return fail(module, "overlap (tau) must be at least 0 and below inner-steps / fragments "
                          "(a fragment's exchange ends before its next one starts)");
    if (alpha < 0 || alpha > 1 || outerLr <= 0 || outerMomentum < 0 || outerMomentum >= 1)
      return fail(module, "needs 0 <= alpha <= 1, outer-lr > 0 and 0 <= outer-momentum < 1");
    if (quantBlock < 2 || quantBlock % 2)
      return fail(module, "quant-block must be an even number of elements, at least 2");
    FailureOr<TopologyOp> found = findTopology(module, topology, "loom-diloco");
    if (failed(found))
      return failure();
    TopologyOp topo = *found;
    if (!topo || topo.getLevels().empty() ||
        cast<StringAttr>(topo.getLevels()[topo.getLevels().size() - 1]).getValue() != "replica")
      return fail(topo ? topo.getOperation() : module.getOperation(),
                  "needs a loom.topology whose outermost level is 'replica' (loomc "
                  "--topology=replica=M,...)");
    int64_t world = topo.getWorldSize(), replicas = topo.getLevelSize("replica");
    if (replicas < 2)
      return fail(topo, "needs at least 2 replicas");
    auto group = GroupAttr::get(ctx, FlatSymbolRefAttr::get(topo.getSymNameAttr()),
                                ArrayAttr::get(ctx, {topo.getLevels()[topo.getLevels().size() - 1]}));
    auto comm = StreamAttr::get(ctx, StreamKind::comm, 0);

    auto step = module.lookupSymbol<func::FuncOp>(LoomDialect::kTrainStep);
    auto fb = module.lookupSymbol<func::FuncOp>(LoomDialect::kForwardBackward);
    if (!step || !fb || !step.getBody().hasOneBlock())
      return fail(module, "needs @train_step and @forward_backward (run loom-attach-optimizer)");
    // Data parallelism inside each replica (loom-data-parallel
    // exclude=replica, run before): its ranks keep whole parameters (ZeRO
    // 0-2), which the outer step reads and merges; each rank exchanges with
    // its counterparts in the other replicas.
    DataParallelAttr inner = getDataParallel(step);
    if (world != replicas && !inner)
      return fail(step, "replicas of several ranks need data parallelism inside them first "
                        "(loom-data-parallel exclude=replica)");
    if (inner && (inner.getWorld() != world || inner.getZeroStage() == 3))
      return fail(step, "data parallelism inside the replicas must span the other levels "
                        "with ZeRO 0-2 (stage 3 shards the parameters the outer step reads)");
    if (module.lookupSymbol(LoomDialect::kDilocoStart))
      return fail(step, "@diloco_start exists already");
    // The trained parameters: @forward_backward's gradients, or, once data
    // parallelism has made them buckets, as it left them on the step.
    auto gradNames = fb->getAttrOfType<ArrayAttr>(LoomDialect::GradParamsAttrHelper::getNameStr());
    if (!gradNames)
      gradNames = step->getAttrOfType<ArrayAttr>(LoomDialect::GradParamsAttrHelper::getNameStr());
    func::CallOp call = findCall(step, LoomDialect::kForwardBackward);
    if (!gradNames || !call)
      return fail(step, "@train_step must call @forward_backward, whose loom.grad_params "
                        "names the trained parameters");
    // Every replica reports the mean loss over the replicas (4 bytes a
    // step) and takes its own slice of each global batch, as data
    // parallelism does: runs with and without replicas see the same tokens.
    if (!inner)
      setDataParallel(step, world, 0);
    OpBuilder b(ctx);
    Location loc = step.getLoc();
    // The loss the step returns (data parallelism inside a replica has
    // averaged it over the replica already), averaged over the replicas.
    auto ret = cast<func::ReturnOp>(step.getBody().front().getTerminator());
    Value loss = ret.getOperand(0);
    Operation *after = loss.getDefiningOp() ? afterItsWait(loss.getDefiningOp())
                                            : call.getOperation();
    b.setInsertionPointAfter(after);
    auto tok = TokenType::get(ctx);
    auto mean = AllReduceOp::create(b, loc, loss.getType(), tok, loss, ValueRange{}, group,
                                    ReduceKind::mean, comm);
    WaitOp::create(b, loc, ValueRange{mean.getToken()});
    loss.replaceUsesWithIf(mean.getResult(),
                           [&](OpOperand &u) { return isa<func::ReturnOp>(u.getOwner()); });

    SmallVector<ParamOp> params;
    SmallVector<StringRef> names;
    for (Attribute a : gradNames) {
      auto p = module.lookupSymbol<ParamOp>(cast<FlatSymbolRefAttr>(a));
      if (!p)
        return fail(fb, "'" + cast<FlatSymbolRefAttr>(a).getValue() + "' is not a loom.param");
      if (!cast<RankedTensorType>(p.getType()).getElementType().isF32())
        return fail(p, "the outer step keeps fp32 parameters");
      params.push_back(p);
      names.push_back(p.getSymName());
    }
    SmallVector<int64_t> fragmentOf = fragmentsOf(names);

    // The global copy and the outer momentum of each parameter.
    auto zeros = InitAttr::get(ctx, InitKind::zeros, APFloat(0.0), APFloat(0.0));
    for (ParamOp p : params) {
      OpBuilder mb(ctx);
      mb.setInsertionPointAfter(p);
      auto of = FlatSymbolRefAttr::get(p.getSymNameAttr());
      StateOp::create(mb, loc, mb.getStringAttr(p.getSymName() + ".diloco.momentum"),
                      TypeAttr::get(p.getType()), StateRoleAttr::get(ctx, StateRole::momentum), of,
                      zeros);
      StateOp::create(mb, loc, mb.getStringAttr(p.getSymName() + ".diloco.global"),
                      TypeAttr::get(p.getType()), StateRoleAttr::get(ctx, StateRole::master), of,
                      zeros);
    }

    // @diloco_start: the global copy starts as the initial parameters.
    b.setInsertionPointAfter(step);
    auto start = func::FuncOp::create(b, loc, LoomDialect::kDilocoStart, FunctionType::get(ctx, {}, {}));
    b.setInsertionPointToStart(start.addEntryBlock());
    for (ParamOp p : params)
      StoreOp::create(b, loc, LoadOp::create(b, loc, p.getType(), p.getSymName()),
                      (p.getSymName() + ".diloco.global").str());
    func::ReturnOp::create(b, loc);

    b.setInsertionPointAfter(start);
    buildFragments(module, b, loc, params, fragmentOf, group, comm, replicas, zeros);
    return success();
  }
};

} // namespace
