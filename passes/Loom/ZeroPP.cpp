//===- ZeroPP.cpp - loom-quantize-weights, loom-quantize-gradients --------===//
//
// ZeRO++'s quantised communication (Wang et al., "ZeRO++: Extremely
// Efficient Collective Communication for Giant Model Training", 2023) on
// the collectives loom-data-parallel writes:
//   qwZ (§3.1): ZeRO-3's all-gathers of parameter shards send int8 block
//        codes instead of fp32;
//   qgZ (§3.3): the gradients' reduce-scatter becomes an int4 all-to-all
//        inside a node, a dequantise-average-requantise, and an int4
//        all-to-all across nodes.
// hpZ (§3.2) is loom-data-parallel's `secondary=`. Each rewrite keeps the
// op it cannot quantise and writes why in `loom.note`.
//
//===----------------------------------------------------------------------===//
#include "loom/Passes/Loom.h"

#include "mlir/IR/Builders.h"

namespace mlir::loom {
#define GEN_PASS_DEF_QUANTIZEWEIGHTS
#define GEN_PASS_DEF_QUANTIZEGRADIENTS
#include "passes/Loom/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

void note(Operation *op, const Twine &why) {
  op->setAttr(LoomDialect::NoteAttrHelper::getNameStr(),
              StringAttr::get(op->getContext(), why.str()));
}

/// The loom.wait that consumes `token` (loom-data-parallel waits each
/// collective once), or null.
WaitOp waitOf(Value token) {
  for (Operation *u : token.getUsers())
    if (auto w = dyn_cast<WaitOp>(u))
      return w;
  return nullptr;
}

/// A quantisation block: even (int4 packs two codes a byte) and at least 2.
LogicalResult checkBlock(ModuleOp module, StringRef pass, int64_t block) {
  if (block >= 2 && block % 2 == 0)
    return success();
  return module.emitError() << pass << ": block must be even and at least 2, got " << block;
}

RankedTensorType vec(Type elt, int64_t n) { return RankedTensorType::get({n}, elt); }

/// The size of each level of `g` (innermost first), from its topology.
FailureOr<SmallVector<int64_t>> levelSizes(ModuleOp module, GroupAttr g) {
  auto topo = module.lookupSymbol<TopologyOp>(g.getTopology());
  if (!topo)
    return failure();
  SmallVector<int64_t> sizes;
  for (Attribute l : g.getLevels()) {
    int64_t n = topo.getLevelSize(cast<StringAttr>(l).getValue());
    if (n < 1)
      return failure();
    sizes.push_back(n);
  }
  return sizes;
}

struct QuantizeWeights : public mlir::loom::impl::QuantizeWeightsBase<QuantizeWeights> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (failed(checkBlock(module, "loom-quantize-weights", block)))
      return signalPassFailure();
    auto fb = module.lookupSymbol<func::FuncOp>(LoomDialect::kForwardBackward);
    if (!fb)
      return;
    MLIRContext *ctx = module.getContext();
    auto codec = CodecAttr::get(ctx, CodecKind::int8, block);
    SmallVector<AllGatherOp> gathers;
    fb.walk([&](AllGatherOp g) {
      auto load = g.getInput().getDefiningOp<LoadOp>();
      if (!load)
        return;
      auto p = module.lookupSymbol<ParamOp>(load.getNameAttr());
      if (p && p->hasAttr(LoomDialect::ShardOfAttrHelper::getNameStr()))
        gathers.push_back(g);
    });
    for (AllGatherOp g : gathers) {
      auto in = dyn_cast<RankedTensorType>(g.getInput().getType());
      auto out = dyn_cast<RankedTensorType>(g.getResult().getType());
      WaitOp wait = waitOf(g.getToken());
      if (!in || !out || !in.getElementType().isF32() || in.getRank() != 1) {
        note(g, "qwZ: gathers a 1-D f32 shard only");
        continue;
      }
      if (in.getNumElements() % block) {
        note(g, "qwZ: a shard of " + Twine(in.getNumElements()) +
                    " elements is not a whole number of blocks of " + Twine(block) +
                    " (loom-data-parallel shard-multiple=)");
        continue;
      }
      if (!wait || !g.getDeps().empty()) {
        note(g, "qwZ: the gather is not waited once by a loom.wait");
        continue;
      }
      OpBuilder b(g);
      Location loc = g.getLoc();
      Value q = CompressOp::create(b, loc, PackedType::get(ctx, in, codec), Type(), g.getInput(),
                                   Value())
                    .getResult();
      auto packed = AllGatherOp::create(b, loc, PackedType::get(ctx, out, codec),
                                        TokenType::get(ctx), q, ValueRange{}, g.getGroup(),
                                        g.getStreamAttr());
      g.getToken().replaceAllUsesWith(packed.getToken());
      b.setInsertionPointAfter(wait);
      Value full = DecompressOp::create(b, loc, out, packed.getResult());
      g.getResult().replaceAllUsesWith(full);
      g.erase();
    }
  }
};

struct QuantizeGradients : public mlir::loom::impl::QuantizeGradientsBase<QuantizeGradients> {
  using Base::Base;

  ModuleOp module;
  MLIRContext *ctx = nullptr;
  CodecAttr codec;

  void runOnOperation() override {
    module = getOperation();
    ctx = module.getContext();
    if (failed(checkBlock(module, "loom-quantize-gradients", block)))
      return signalPassFailure();
    codec = CodecAttr::get(ctx, CodecKind::int4, block);
    auto fb = module.lookupSymbol<func::FuncOp>(LoomDialect::kForwardBackward);
    if (!fb)
      return;
    SmallVector<ReduceScatterOp> reductions;
    fb.walk([&](ReduceScatterOp r) { reductions.push_back(r); });
    for (auto [i, r] : llvm::enumerate(reductions)) {
      // The second stage goes where the next reduction is issued (or the
      // backward's final wait), so the first all-to-all overlaps the
      // backward between them.
      Operation *next = i + 1 < reductions.size() ? reductions[i + 1].getOperation() : nullptr;
      if (failed(rewrite(r, next)))
        return signalPassFailure();
    }
  }

  /// Compress `v`, all-to-all it over `levels` of `r`'s group; the token.
  std::pair<Value, Value> exchange(OpBuilder &b, Location loc, Value v, ReduceScatterOp r,
                                   ArrayRef<Attribute> levels) {
    auto t = cast<RankedTensorType>(v.getType());
    auto packedT = PackedType::get(ctx, t, codec);
    Value q = CompressOp::create(b, loc, packedT, Type(), v, Value()).getResult();
    auto group = GroupAttr::get(ctx, r.getGroup().getTopology(), ArrayAttr::get(ctx, levels));
    auto a2a = AllToAllOp::create(b, loc, packedT, TokenType::get(ctx), q, ValueRange{}, group,
                                  r.getStreamAttr());
    return {a2a.getResult(), a2a.getToken()};
  }

  /// Decode what `from` chunks sent and average them: [from × n] -> [n].
  Value average(OpBuilder &b, Location loc, Value packed, int64_t from, int64_t n) {
    Type f32 = b.getF32Type();
    Value d = DecompressOp::create(b, loc, vec(f32, from * n), packed);
    Value m = ReshapeOp::create(b, loc, RankedTensorType::get({from, n}, f32), d);
    return mlir::loom::ReduceOp::create(b, loc, vec(f32, n), ReduceKind::mean, m,
                                  b.getDenseI64ArrayAttr({0}), false);
  }

  LogicalResult rewrite(ReduceScatterOp r, Operation *next) {
    auto in = dyn_cast<RankedTensorType>(r.getInput().getType());
    auto out = dyn_cast<RankedTensorType>(r.getResult().getType());
    if (!in || !out || !in.getElementType().isF32() || in.getRank() != 1) {
      note(r, "qgZ: reduces 1-D f32 gradients only; plain reduce-scatter");
      return success();
    }
    if (r.getReduce() != ReduceKind::mean) {
      note(r, "qgZ: averages only (loom-data-parallel's gradients); plain reduce-scatter");
      return success();
    }
    int64_t c = out.getNumElements();
    if (c % block) {
      note(r, "qgZ: a shard of " + Twine(c) + " elements is not a whole number of blocks of " +
                  Twine(block) + " (loom-data-parallel shard-multiple=); plain reduce-scatter");
      return success();
    }
    WaitOp finalWait = waitOf(r.getToken());
    if (!finalWait || !r.getDeps().empty()) {
      note(r, "qgZ: the reduction is not waited once by a loom.wait; plain reduce-scatter");
      return success();
    }
    FailureOr<SmallVector<int64_t>> sizes = levelSizes(module, r.getGroup());
    if (failed(sizes))
      return r.emitError("loom-quantize-gradients: the group's topology or levels are unknown");
    ArrayRef<Attribute> levels = r.getGroup().getLevels().getValue();
    // Inner: the first stage's levels, the group's innermost (by default
    // all but its outermost: a node's ranks); outer: the rest. One level:
    // a single all-to-all over it.
    size_t k = levels.size() >= 2 ? levels.size() - 1 : levels.size();
    if (!innerLevels.empty()) {
      SmallVector<StringRef> names;
      StringRef(innerLevels).split(names, ',', -1, false);
      size_t prefix = 0;
      while (prefix < levels.size() &&
             llvm::is_contained(names, cast<StringAttr>(levels[prefix]).getValue()))
        ++prefix;
      if (prefix != names.size() || prefix == 0 || prefix == levels.size())
        return r.emitError("loom-quantize-gradients: inner=") << innerLevels << " must name the "
               << "group's innermost levels, not all of them";
      k = prefix;
    }
    int64_t world = 1, innerRanks = 1;
    for (auto [i, s] : llvm::enumerate(*sizes)) {
      world *= s;
      if (i < k)
        innerRanks *= s;
    }
    bool twoStage = k < levels.size();
    int64_t outer = world / innerRanks, inner = innerRanks;
    ArrayRef<Attribute> firstStage = levels.take_front(k);
    Location loc = r.getLoc();
    Type f32 = Float32Type::get(ctx);
    OpBuilder b(r);
    Value g = r.getInput();
    // Chunk k = n·inner + l of the bucket goes to rank (n, l) (innermost
    // fastest). Reorder [outer, inner, c] -> [inner, outer, c] so that the
    // chunks of inner rank l, one per node, lie together: the inner
    // all-to-all sends them to l.
    if (twoStage) {
      Value v3 = ReshapeOp::create(b, loc, RankedTensorType::get({outer, inner, c}, f32), g);
      Value t3 = TransposeOp::create(b, loc, RankedTensorType::get({inner, outer, c}, f32), v3,
                                     b.getDenseI64ArrayAttr({1, 0, 2}));
      g = ReshapeOp::create(b, loc, vec(f32, world * c), t3);
    }
    auto [a1, t1] = exchange(b, loc, g, r, firstStage);
    Value result, lastToken;
    if (twoStage) {
      // Stage two: where the next bucket's reduction is issued, or just
      // before the backward's final wait.
      b.setInsertionPoint(next ? next : finalWait.getOperation());
      WaitOp::create(b, loc, ValueRange{t1});
      Value local = average(b, loc, a1, inner, outer * c); // this node's mean, [outer × c]
      auto [a2, t2] = exchange(b, loc, local, r, levels.drop_front(k));
      b.setInsertionPointAfter(finalWait);
      result = average(b, loc, a2, outer, c);
      lastToken = t2;
    } else {
      b.setInsertionPointAfter(finalWait);
      result = average(b, loc, a1, world, c);
      lastToken = t1;
    }
    r.getToken().replaceAllUsesWith(lastToken);
    r.getResult().replaceAllUsesWith(result);
    r.erase();
    return success();
  }
};

} // namespace
