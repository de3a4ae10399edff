//===- WorkingCopies.cpp - loom-working-copies ----------------------------===//
//
// Mixed precision keeps fp32 master weights and casts each one to bf16
// where the forward reads it: every step, one cast kernel a parameter
// (GPT-2: 149 a step, 0.44 ms of kernels plus their launch gaps; the Llama
// 1B reads and writes 7.2 GB for them). The update already has the new
// weights in registers: Adam writes their bf16 rounding beside the fp32
// ones (the refresh loomrt_adam_bf16grad and loomrt_adam_multi take), and
// the forward reads that bf16 working copy instead of casting. The bits are
// the same: the refresh rounds as the cast did (to nearest, even), and the
// driver fills the copy from the master at the start and after a resume
// (a `loom.mirror_of` state, never checkpointed), as it does for the
// offload's working copies (loom-offload-optimizer, whose pass this is for
// the updates that stay on the device).
//
//===----------------------------------------------------------------------===//
#include "loom/Passes/Loom.h"

#include "mlir/IR/Builders.h"

namespace mlir::loom {
#define GEN_PASS_DEF_WORKINGCOPIES
#include "passes/Loom/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

struct WorkingCopies : public mlir::loom::impl::WorkingCopiesBase<WorkingCopies> {
  using Base::Base;
  void runOnOperation() override { made += mlir::loom::makeWorkingCopies(getOperation()); }
};

} // namespace

bool mlir::loom::isBf16Cast(Operation *op) {
  auto c = dyn_cast<CastOp>(op);
  return c && cast<RankedTensorType>(c.getType()).getElementType().isBF16();
}

void mlir::loom::readWorkingCopy(ArrayRef<LoadOp> reads, FlatSymbolRefAttr work, Type type) {
  for (LoadOp l : reads) {
    OpBuilder b(l);
    Value w = LoadOp::create(b, l.getLoc(), type, work);
    for (Operation *c : llvm::make_early_inc_range(l->getUsers())) {
      c->getResult(0).replaceAllUsesWith(w);
      c->erase();
    }
    l.erase();
  }
}

int64_t mlir::loom::makeWorkingCopies(ModuleOp module) {
  MLIRContext *ctx = module.getContext();
  // Every load and store of each symbol, in any function.
  llvm::DenseMap<StringAttr, SmallVector<LoadOp>> loads;
  llvm::DenseMap<StringAttr, SmallVector<StoreOp>> stores;
  module.walk([&](LoadOp l) { loads[l.getNameAttr().getAttr()].push_back(l); });
  module.walk([&](StoreOp s) { stores[s.getNameAttr().getAttr()].push_back(s); });
  int64_t made = 0;
  for (ParamOp param : llvm::make_early_inc_range(module.getOps<ParamOp>())) {
    auto type = cast<RankedTensorType>(param.getType());
    StringAttr name = param.getSymNameAttr();
    if (!type.getElementType().isF32() || isHostMemory(type) ||
        module.lookupSymbol((name.getValue() + ".work").str()))
      continue;
    // The updates: Adam on the device, reading the weights and storing
    // its new weights back (1-bit Adam's frozen step is a second one);
    // every other store (an outer step's) keeps the weights as they are.
    SmallVector<AdamOp> updates;
    SmallVector<LoadOp> reads;
    bool ok = true;
    for (LoadOp l : loads.lookup(name)) {
      bool update = false;
      for (Operation *u : l->getUsers())
        if (auto a = dyn_cast<AdamOp>(u); a && a.getParam() == l.getResult()) {
          updates.push_back(a);
          update = true;
        }
      if (update) {
        ok = ok && l->hasOneUse();
        continue;
      }
      ok = ok && !l->use_empty() && llvm::all_of(l->getUsers(), isBf16Cast);
      reads.push_back(l);
    }
    SmallVector<StoreOp> refreshAfter;
    for (StoreOp s : stores.lookup(name)) {
      auto a = s.getValue().getDefiningOp<AdamOp>();
      ok = ok && a && s.getValue() == a.getNewParam() && llvm::is_contained(updates, a) &&
           !isHostMemory(a.getNewParam().getType());
      refreshAfter.push_back(s);
    }
    if (!ok || reads.empty() || updates.empty() || refreshAfter.size() != updates.size())
      continue;

    OpBuilder b(ctx);
    b.setInsertionPointAfter(param);
    auto bf16 = RankedTensorType::get(type.getShape(), BFloat16Type::get(ctx), type.getEncoding());
    std::string work = (name.getValue() + ".work").str();
    auto state = StateOp::create(
        b, param.getLoc(), b.getStringAttr(work), TypeAttr::get(bf16),
        StateRoleAttr::get(ctx, StateRole::other), FlatSymbolRefAttr(),
        InitAttr::get(ctx, InitKind::zeros, APFloat(0.0), APFloat(0.0)));
    state->setAttr(LoomDialect::MirrorOfAttrHelper::getNameStr(), FlatSymbolRefAttr::get(name));
    auto workSym = FlatSymbolRefAttr::get(ctx, work);
    readWorkingCopy(reads, workSym, bf16);
    // The refresh: the new weights rounded once, beside the store (the
    // lowering has Adam write it: loomrt.adam's refresh).
    for (StoreOp s : refreshAfter) {
      b.setInsertionPointAfter(s);
      Value r = CastOp::create(b, s.getLoc(), bf16, s.getValue());
      StoreOp::create(b, s.getLoc(), r, workSym);
    }
    ++made;
  }
  return made;
}
