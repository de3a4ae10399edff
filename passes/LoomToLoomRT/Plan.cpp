//===- Plan.cpp - the lowering's decisions on loom IR --------------------===//
//
// Decided from the loom IR before anything is rewritten; the patterns only
// build what the plan says (docs/codegen.md, "Lowering").
//
//===----------------------------------------------------------------------===//
#include "passes/LoomToLoomRT/Lowering.h"

using namespace mlir;
using namespace mlir::loom;

namespace mlir::loom::lowering {
namespace {

/// The load of a symbol that `op` may update in place, if `v` is one: `op`
/// is its last user, and any other reads it earlier on the compute stream
/// (1-bit Adam's frozen step reads the momentum for the local momentum,
/// then updates it). An op with a stream of its own (a collective, a copy)
/// could still be reading when `op` writes, and one that may alias its
/// input (a reshape, slice, shard or reduction step) would be read later.
std::optional<StringRef> soleLoad(Value v, Operation *op) {
  auto load = v.getDefiningOp<LoadOp>();
  if (!load)
    return std::nullopt;
  for (Operation *u : v.getUsers())
    if (u != op && (u->getBlock() != op->getBlock() || !u->isBeforeInBlock(op) ||
                    u->hasAttr("stream") || isa<ReshapeOp, SliceOp, ShardOp, ReduceOp>(u)))
      return std::nullopt;
  return load.getName();
}
/// The store of `v` to @sym, if it is `v`'s only store (other users read
/// the updated value, which stays in @sym's buffer: the offload schedules
/// copy it to the device working copy).
StoreOp soleStore(Value v, StringRef sym) {
  StoreOp found;
  for (Operation *u : v.getUsers())
    if (auto st = dyn_cast<StoreOp>(u)) {
      if (found || st.getName() != sym)
        return {};
      found = st;
    }
  return found;
}

} // namespace

StoreOp storedWhole(Value r) {
  if (!r.hasOneUse())
    return {};
  auto store = dyn_cast<StoreOp>(*r.getUsers().begin());
  return store && store.getValue() == r ? store : StoreOp();
}

bool Plan::scratch(Value v, Operation *op) {
  Operation *d = v.getDefiningOp();
  return v.hasOneUse() && *v.getUsers().begin() == op && d &&
         !isa<LoadOp, ReshapeOp, ShardOp, SliceOp, func::CallOp>(d) && !storedWhole(v);
}

void Plan::decideUpdate(Operation *o, ArrayRef<Value> ins, ArrayRef<Value> outs) {
  bool inPlace = true, inScratch = true;
  SmallVector<StoreOp> stores;
  for (auto [in, out] : llvm::zip(ins, outs)) {
    auto sym = soleLoad(in, o);
    stores.push_back(sym ? soleStore(out, *sym) : StoreOp());
    inPlace = inPlace && stores.back();
    inScratch = inScratch && scratch(in, o);
  }
  update[o] = inPlace ? UpdateIn::place : inScratch ? UpdateIn::scratch : UpdateIn::copies;
  if (inPlace)
    for (StoreOp st : stores)
      elided.insert(st);
}

Operation *Plan::averagedDecompress(ReduceOp r) {
  if (r.getKind() != ReduceKind::mean || r.getDims().size() != 1 || r.getDims()[0] != 0)
    return nullptr;
  auto rows = r.getInput().getDefiningOp<ReshapeOp>();
  auto d = rows ? rows.getInput().getDefiningOp<DecompressOp>() : DecompressOp();
  if (!d || !rows.getResult().hasOneUse() || !d.getResult().hasOneUse() ||
      d.getInput().getType().getCodec().getKind() != CodecKind::sign_scale)
    return nullptr;
  auto t = cast<RankedTensorType>(rows.getType());
  int64_t block = d.getInput().getType().getCodec().getBlock();
  if (t.getRank() != 2 || block != t.getDimSize(1) || block % 8 != 0 ||
      cast<RankedTensorType>(r.getType()).getNumElements() != block)
    return nullptr;
  return d;
}

void Plan::planConcat(ConcatOp c) {
  auto out = cast<RankedTensorType>(c.getType());
  int64_t dim = int64_t(c.getDim()) < 0 ? int64_t(c.getDim()) + out.getRank() : c.getDim();
  if (isHostMemory(out))
    return;
  int64_t inner = 1;
  for (int64_t d = 0; d < out.getRank(); ++d) {
    if (d < dim && out.getDimSize(d) != 1)
      return;
    if (d > dim)
      inner *= out.getDimSize(d);
  }
  int64_t es = int64_t(storageBytes(out.getElementType())), off = 0;
  for (Value in : c.getInputs()) {
    Value src = in;
    if (auto rs = in.getDefiningOp<ReshapeOp>(); rs && in.hasOneUse())
      src = rs.getInput();
    Operation *d = src.getDefiningOp();
    if (d && src.hasOneUse() && in.hasOneUse() && d->getBlock() == c->getBlock() &&
        !isa<LoadOp, func::CallOp, ReshapeOp, SliceOp, ShardOp, ConcatOp, arith::ConstantOp>(d) &&
        !isHostMemory(src.getType()))
      intoConcat[src] = {c, off * es};
    off += cast<RankedTensorType>(in.getType()).getDimSize(dim) * inner;
  }
}

void Plan::analyse(func::FuncOp fn) {
  for (Operation &op : fn.getBody().front()) {
    if (auto adam = dyn_cast<AdamOp>(op)) {
      decideUpdate(adam, {adam.getParam(), adam.getExpAvg(), adam.getExpAvgSq()},
                   {adam.getNewParam(), adam.getNewExpAvg(), adam.getNewExpAvgSq()});
      if (CastOp refresh = fusedRefreshCast(adam)) {
        elided.insert(refresh);
        if (StoreOp st = storedWhole(refresh.getResult()))
          elided.insert(st);
      }
    } else if (auto c = dyn_cast<CompressOp>(op); c && c.getError()) {
      // Error feedback updates its buffer: in place when it is a state's
      // (1-bit Adam's worker and server errors), else a copy.
      decideUpdate(c, {c.getError()}, {c.getNewError()});
    } else if (auto sgd = dyn_cast<SgdOp>(op)) {
      decideUpdate(sgd, {sgd.getParam(), sgd.getMomentumBuf()},
                   {sgd.getNewParam(), sgd.getNewMomentumBuf()});
    } else if (auto copy = dyn_cast<CopyOp>(op)) {
      if (StoreOp st = storedWhole(copy.getResult()))
        elided.insert(st);
    } else if (auto r = dyn_cast<ReduceOp>(op)) {
      if (Operation *d = averagedDecompress(r)) {
        average[r] = d;
        averaged.insert(d);
      }
    } else if (auto c = dyn_cast<ConcatOp>(op)) {
      planConcat(c);
    }
  }
}

} // namespace mlir::loom::lowering
