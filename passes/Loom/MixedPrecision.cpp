//===- MixedPrecision.cpp - loom-mixed-precision --------------------------===//
//
// bf16 compute with fp32 master weights (Micikevicius et al., "Mixed
// Precision Training", 2018, §3.1 master copy; bf16 needs no loss scaling
// since its exponent range is fp32's). Runs on @forward before loom-autodiff:
// every fp32 activation becomes bf16, parameters are loaded as fp32 and cast
// once, so autodiff's VJP of that cast hands the optimizer an fp32 gradient
// and the fp32 Adam state and master weights are untouched. Kernels compute
// in fp32 whatever the storage type (loomrt.h), so layer norm, softmax and
// the loss keep fp32 statistics; only storage, GEMM inputs and the
// tensors between ops are bf16.
//
// Three exceptions keep fp32 where bf16 storage would lose bits:
//   * embedding tables are gathered in fp32 and the rows cast down, so the
//     table's gradient is a scatter-add in fp32 (the runtime accumulates
//     embedding gradients in fp32 only);
//   * the loss stays fp32 (cross_entropy writes an fp32 scalar; a loss made
//     of other ops is cast back to the function's fp32 result);
//   * ops marked `loom.fp32` stay fp32, their bf16 operands cast up (the
//     vocabulary-parallel cross-entropy's exponentials, sums and logs,
//     which loom-tensor-parallel writes as separate ops: stored in bf16
//     they moved the loss by 3e-3).
//
//===----------------------------------------------------------------------===//
#include "loom/Passes/Loom.h"

#include "mlir/IR/Builders.h"

namespace mlir::loom {
#define GEN_PASS_DEF_MIXEDPRECISION
#include "passes/Loom/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

struct MixedPrecision
    : public mlir::loom::impl::MixedPrecisionBase<MixedPrecision> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fail = [&](Operation *at, const Twine &msg) {
      at->emitError() << "loom-mixed-precision: " << msg;
      signalPassFailure();
    };
    if (computeType != "bf16")
      return fail(module, "unsupported compute-type '" + computeType +
                              "': expected bf16");
    auto fwd = module.lookupSymbol<func::FuncOp>(LoomDialect::kForward);
    if (!fwd)
      return fail(module, "no function @forward");
    if (module.lookupSymbol(LoomDialect::kForwardBackward) ||
        module.lookupSymbol(LoomDialect::kTrainStep))
      return fail(fwd, "run before loom-autodiff: the backward is derived "
                       "from the bf16 forward");
    if (!fwd.getBody().hasOneBlock())
      return fail(fwd, "@forward must be a single block");

    Type bf16 = BFloat16Type::get(&getContext());
    Type f32 = Float32Type::get(&getContext());
    auto retype = [](Type t, Type from, Type to) -> Type {
      auto rt = dyn_cast<RankedTensorType>(t);
      if (!rt || rt.getElementType() != from)
        return {};
      return RankedTensorType::get(rt.getShape(), to, rt.getEncoding());
    };
    Block &body = fwd.getBody().front();
    OpBuilder b(&getContext());
    auto castTo = [&](Value v, Type to) -> Value {
      Type t = retype(v.getType(), cast<RankedTensorType>(v.getType()).getElementType(), to);
      return CastOp::create(b, v.getLoc(), t, v);
    };
    // Replace the uses of an fp32 source (argument, load, constant) by one
    // bf16 cast of it, except embedding tables, which stay fp32.
    // A table read only by gathers (a graph's feature table, placed in host
    // memory by loom-place-features) gets no cast at all, and host memory
    // is never cast here (the CPU runs no casts): its rows are cast where a
    // copy brings them to the device.
    auto narrowSource = [&](Value v) {
      if (!retype(v.getType(), f32, bf16) || isHostMemory(v.getType()))
        return;
      auto narrowed = [&](OpOperand &u) {
        auto emb = dyn_cast<EmbeddingOp>(u.getOwner());
        return !(emb && u.get() == emb.getTable()) && !isa<ZeroCopyOp>(u.getOwner());
      };
      if (llvm::none_of(v.getUses(), narrowed))
        return;
      Value c = castTo(v, bf16);
      v.replaceUsesWithIf(c, [&](OpOperand &u) { return u.getOwner() != c.getDefiningOp() && narrowed(u); });
    };

    b.setInsertionPointToStart(&body);
    for (BlockArgument a : body.getArguments())
      narrowSource(a);
    for (Operation &op : llvm::make_early_inc_range(body)) {
      if (isa<func::ReturnOp, CastOp, ZeroCopyOp, WaitOp>(op))
        continue;
      if (auto copy = dyn_cast<CopyOp>(op)) { // host-gathered rows arriving:
        for (Operation *u : copy.getToken().getUsers()) // cast once waited
          if (isa<WaitOp>(u) && u->getBlock() == &body)
            b.setInsertionPointAfter(u);
        narrowSource(copy.getResult());
        continue;
      }
      if (auto store = dyn_cast<StoreOp>(op)) { // a forward's metric keeps its state's type
        auto decl = SymbolTable::lookupNearestSymbolFrom<StateOp>(store, store.getNameAttr());
        auto want = decl ? dyn_cast<RankedTensorType>(decl.getType()) : RankedTensorType();
        if (want && store.getValue().getType() != want) {
          b.setInsertionPoint(store);
          store.getValueMutable().assign(castTo(store.getValue(), want.getElementType()));
        }
        continue;
      }
      if (op.hasAttr(LoomDialect::Fp32AttrHelper::getNameStr())) {
        b.setInsertionPoint(&op);
        for (OpOperand &u : op.getOpOperands())
          if (retype(u.get().getType(), bf16, f32))
            u.set(castTo(u.get(), f32));
        continue;
      }
      b.setInsertionPointAfter(&op);
      if (isa<LoadOp>(op)) {
        narrowSource(op.getResult(0));
        continue;
      }
      if (auto c = dyn_cast<arith::ConstantOp>(op)) {
        // Constants become bf16 constants, not casts: autodiff must still
        // see them as constants (no gradient for a pow's exponent).
        auto dense = dyn_cast<DenseFPElementsAttr>(c.getValue());
        if (dense && retype(c.getType(), f32, bf16)) {
          auto narrowed = dense.mapValues(bf16, [](const APFloat &v) {
            APFloat x = v;
            bool lost;
            x.convert(APFloat::BFloat(), APFloat::rmNearestTiesToEven, &lost);
            return x.bitcastToAPInt();
          });
          c.setValueAttr(narrowed);
          c.getResult().setType(narrowed.getType());
        }
        continue;
      }
      if (auto emb = dyn_cast<EmbeddingOp>(op)) {
        // fp32 gather (table is an fp32 source or was cast up), bf16 rows.
        if (retype(emb.getTable().getType(), bf16, f32)) {
          b.setInsertionPoint(emb);
          emb.getTableMutable().assign(castTo(emb.getTable(), f32));
          b.setInsertionPointAfter(emb);
        }
        narrowSource(emb.getResult());
        continue;
      }
      // Anything still fp32 among the operands (a loss feeding further
      // arithmetic) is cast down so the op sees one element type.
      b.setInsertionPoint(&op);
      for (OpOperand &u : op.getOpOperands())
        if (retype(u.get().getType(), f32, bf16))
          u.set(castTo(u.get(), bf16));
      if (isa<CrossEntropyOp, MoeSlotsOp>(op))
        continue; // the loss stays fp32, so do expert token counts
      for (OpResult r : op.getResults())
        if (Type t = retype(r.getType(), f32, bf16))
          r.setType(t);
    }
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    b.setInsertionPoint(ret);
    for (auto [i, u] : llvm::enumerate(ret->getOpOperands()))
      if (u.get().getType() != fwd.getResultTypes()[i])
        u.set(castTo(u.get(), cast<RankedTensorType>(fwd.getResultTypes()[i])
                                  .getElementType()));
  }
};

} // namespace
