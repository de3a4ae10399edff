//===- ComputePatterns.cpp - lowering patterns ---------------------------===//
//
// The lowering of rows (norms, softmax, embeddings, cross entropy, attention), products, reductions: one `lower(Op, Adaptor, Emit &)` per op.
//
//===----------------------------------------------------------------------===//
#include "passes/LoomToLoomRT/Lowering.h"

using namespace mlir;
using namespace mlir::loom;

namespace mlir::loom::lowering {

//--- Rows: norms, softmax, embeddings, cross entropy, attention ------------//

int64_t rowsOf(Value v) { return numel(v) / tt(v).getShape().back(); }
int64_t lastDim(Value v) { return tt(v).getShape().back(); }

LogicalResult lower(LayerNormOp o, LayerNormOp::Adaptor a, Emit &e) {
  Value y = e.alloc(o.getResult());
  rt::LayerNormOp::create(e.rw, e.loc, e.f.compute, dt(o.getInput()), a.getInput(), a.getWeight(),
                          a.getBias(), y, rowsOf(o.getInput()), lastDim(o.getInput()),
                          f64(o.getEps()));
  return e.done(y);
}
LogicalResult lower(LayerNormGradOp o, LayerNormGradOp::Adaptor a, Emit &e) {
  Value dx = e.alloc(o.getGradInput()), dw = e.alloc(o.getGradWeight()),
        db = e.alloc(o.getGradBias());
  rt::LayerNormGradOp::create(e.rw, e.loc, e.f.compute, dt(o.getInput()), a.getGrad(), a.getInput(),
                              a.getWeight(), dx, dw, db, rowsOf(o.getInput()),
                              lastDim(o.getInput()), f64(o.getEps()));
  return e.done({dx, dw, db});
}
LogicalResult lower(RmsNormOp o, RmsNormOp::Adaptor a, Emit &e) {
  Value y = e.alloc(o.getResult());
  rt::RmsNormOp::create(e.rw, e.loc, e.f.compute, dt(o.getInput()), a.getInput(), a.getWeight(), y,
                        rowsOf(o.getInput()), lastDim(o.getInput()), f64(o.getEps()));
  return e.done(y);
}
LogicalResult lower(RotaryOp o, RotaryOp::Adaptor a, Emit &e) {
  Value y = e.alloc(o.getResult());
  auto t = cast<RankedTensorType>(o.getInput().getType());
  int64_t d = t.getDimSize(t.getRank() - 1);
  rt::RotaryOp::create(e.rw, e.loc, e.f.compute, dt(o.getInput()), a.getInput(), a.getCos(),
                       a.getSin(), y, t.getNumElements() / d, t.getDimSize(t.getRank() - 2), d,
                       o.getTranspose());
  return e.done(y);
}
LogicalResult lower(RmsNormGradOp o, RmsNormGradOp::Adaptor a, Emit &e) {
  Value dx = e.alloc(o.getGradInput()), dw = e.alloc(o.getGradWeight());
  rt::RmsNormGradOp::create(e.rw, e.loc, e.f.compute, dt(o.getInput()), a.getGrad(), a.getInput(),
                            a.getWeight(), dx, dw, rowsOf(o.getInput()), lastDim(o.getInput()),
                            f64(o.getEps()));
  return e.done({dx, dw});
}
LogicalResult lower(SoftmaxOp o, SoftmaxOp::Adaptor a, Emit &e) {
  Value y = e.alloc(o.getResult());
  rt::SoftmaxOp::create(e.rw, e.loc, e.f.compute, dt(o.getInput()), a.getInput(), y, rowsOf(o.getInput()),
                        lastDim(o.getInput()), o.getLog());
  return e.done(y);
}
LogicalResult lower(SoftmaxGradOp o, SoftmaxGradOp::Adaptor a, Emit &e) {
  Value dx = e.alloc(o.getResult());
  rt::SoftmaxGradOp::create(e.rw, e.loc, e.f.compute, dt(o.getOutput()), a.getGrad(), a.getOutput(), dx,
                            rowsOf(o.getOutput()), lastDim(o.getOutput()), o.getLog());
  return e.done(dx);
}
/// A gather: from a table the GPU reads in pinned host memory (a mapped
/// table, loom-place-features' zero-copy) the runtime's row gather, its
/// indices sorted on the GPU first (the sort costs less than the address
/// translation misses it saves at every row size measured,
/// bench/RESULTS.md); from host memory on the host stream (the CPU's
/// gather); else the embedding kernel.
LogicalResult lower(EmbeddingOp o, EmbeddingOp::Adaptor a, Emit &e) {
  auto t = tt(o.getTable());
  Value y = e.alloc(o.getResult());
  if (getMemSpace(t) == MemSpace::mapped && t.getElementType().isF32()) {
    rt::GatherRowsOp::create(e.rw, e.loc, e.f.compute, a.getTable(), a.getIndices(), y,
                             t.getDimSize(0), t.getDimSize(1) * 4, numel(o.getIndices()),
                             /*sorted=*/true, /*zero_copy=*/true);
    return e.done(y);
  }
  rt::EmbeddingOp::create(e.rw, e.loc, e.stream(), dt(o.getTable()), a.getTable(), a.getIndices(),
                          y, numel(o.getIndices()), t.getDimSize(1), t.getDimSize(0));
  return e.done(y);
}
/// A view: the GPU reads the pinned buffer through the same address (the
/// runtime allocates pinned memory mapped and portable).
LogicalResult lower(ZeroCopyOp, ZeroCopyOp::Adaptor a, Emit &e) { return e.done(a.getInput()); }
LogicalResult lower(EmbeddingGradOp o, EmbeddingGradOp::Adaptor a, Emit &e) {
  auto t = tt(o.getResult());
  Value y = e.alloc(o.getResult());
  rt::EmbeddingGradOp::create(e.rw, e.loc, e.f.compute, dt(o.getGrad()), a.getGrad(), a.getIndices(), y,
                              numel(o.getIndices()), t.getDimSize(1), t.getDimSize(0));
  return e.done(y);
}
// Mixture of experts: routing tables are [tokens, choices] of i64.
LogicalResult lower(TopKOp o, TopKOp::Adaptor a, Emit &e) {
  Value v = e.alloc(o.getValues()), idx = e.alloc(o.getIndices());
  rt::TopKOp::create(e.rw, e.loc, e.f.compute, dt(o.getInput()), a.getInput(), v, idx,
                     rowsOf(o.getInput()), lastDim(o.getInput()), int64_t(o.getK()));
  return e.done({v, idx});
}
LogicalResult lower(TopKGradOp o, TopKGradOp::Adaptor a, Emit &e) {
  Value dx = e.alloc(o.getResult());
  rt::TopKGradOp::create(e.rw, e.loc, e.f.compute, dt(o.getGrad()), a.getGrad(), a.getIndices(),
                         dx, rowsOf(o.getResult()), lastDim(o.getResult()), lastDim(o.getGrad()));
  return e.done(dx);
}
LogicalResult lower(MoeSlotsOp o, MoeSlotsOp::Adaptor a, Emit &e) {
  Value slots = e.alloc(o.getSlots()), counts = e.alloc(o.getCounts());
  auto t = tt(o.getExperts());
  rt::MoeSlotsOp::create(e.rw, e.loc, e.f.compute, a.getExperts(), slots, counts, t.getDimSize(0),
                         t.getDimSize(1), int64_t(o.getNumExperts()), int64_t(o.getCapacity()));
  return e.done({slots, counts});
}
LogicalResult lower(MoeDispatchOp o, MoeDispatchOp::Adaptor a, Emit &e) {
  Value y = e.alloc(o.getResult());
  auto s = tt(o.getSlots());
  rt::MoeDispatchOp::create(e.rw, e.loc, e.f.compute, dt(o.getInput()), a.getInput(),
                            a.getSlots(), a.getWeights(), y, s.getDimSize(0), s.getDimSize(1),
                            lastDim(o.getInput()), rowsOf(o.getResult()));
  return e.done(y);
}
LogicalResult lower(MoeCombineOp o, MoeCombineOp::Adaptor a, Emit &e) {
  Value y = e.alloc(o.getResult());
  auto s = tt(o.getSlots());
  rt::MoeCombineOp::create(e.rw, e.loc, e.f.compute, dt(o.getInput()), a.getInput(), a.getSlots(),
                           a.getWeights(), y, s.getDimSize(0), s.getDimSize(1),
                           lastDim(o.getInput()), rowsOf(o.getInput()));
  return e.done(y);
}
LogicalResult lower(MoeSlotDotOp o, MoeSlotDotOp::Adaptor a, Emit &e) {
  Value y = e.alloc(o.getResult());
  auto s = tt(o.getSlots());
  rt::MoeSlotDotOp::create(e.rw, e.loc, e.f.compute, dt(o.getTokens()), a.getTokens(),
                           a.getRows(), a.getSlots(), y, s.getDimSize(0), s.getDimSize(1),
                           lastDim(o.getTokens()), rowsOf(o.getRows()));
  return e.done(y);
}
LogicalResult lower(CrossEntropyOp o, CrossEntropyOp::Adaptor a, Emit &e) {
  Value y = e.alloc(o.getLoss());
  rt::CrossEntropyOp::create(e.rw, e.loc, e.f.compute, dt(o.getLogits()), a.getLogits(), a.getLabels(), y,
                             numel(o.getLabels()), lastDim(o.getLogits()));
  return e.done(y);
}
LogicalResult lower(CrossEntropyGradOp o, CrossEntropyGradOp::Adaptor a, Emit &e) {
  Value y = e.alloc(o.getResult());
  rt::CrossEntropyGradOp::create(e.rw, e.loc, e.f.compute, dt(o.getLogits()), a.getLogits(),
                                 a.getLabels(), a.getGrad(), y, numel(o.getLabels()),
                                 lastDim(o.getLogits()));
  return e.done(y);
}
/// Attention's scratch, at the size the runtime asks for
/// (loomrt_attention_workspace_bytes), taken after the results and given
/// back right after the call: the backward recomputes.
Value attentionWorkspace(Emit &e) {
  // The query and key: the forward's first operands, the gradient's second
  // and third (after the output gradient).
  Operation *op = e.op;
  unsigned q = isa<AttentionOp>(op) ? 0 : 1;
  auto qt = tt(op->getOperand(q)), kt = tt(op->getOperand(q + 1));
  size_t bytes = loomrt_attention_workspace_bytes(
      loomrt_dtype(*dtypeOf(qt.getElementType())), qt.getDimSize(0) * qt.getDimSize(1),
      qt.getDimSize(2), kt.getDimSize(2), isa<AttentionGradOp>(op) ? 1 : 0);
  return e.allocBytes(int64_t(bytes));
}
/// The loom.attention whose gradient `grad` is: the one of the same block
/// over the same query, key and value, scale and mask, before it (loom-
/// autodiff's forward; with recomputation, the recomputed one). Its output
/// and row statistics are kept for the gradient (loomrt.attention_save and
/// loomrt.attention_grad_saved) instead of the gradient running the forward
/// again, where the GPU's fused kernels take the shape (elsewhere the
/// composed gradient recomputes the probabilities anyway, and keeping the
/// output would only hold memory); null where there is none.
AttentionOp forwardOf(AttentionGradOp grad) {
  auto q = tt(grad.getQuery()), k = tt(grad.getKey());
  std::optional<rt::DType> dtype = dtypeOf(q.getElementType());
  if (!dtype || !loomrt_attention_fused(loomrt_dtype(int(*dtype)), q.getDimSize(2), k.getDimSize(2),
                                        q.getDimSize(3)))
    return AttentionOp();
  AttentionOp found;
  for (Operation *u : grad.getQuery().getUsers()) {
    auto fwd = dyn_cast<AttentionOp>(u);
    if (fwd && fwd->getBlock() == grad->getBlock() && fwd->isBeforeInBlock(grad) &&
        fwd.getKey() == grad.getKey() && fwd.getValue() == grad.getValue() &&
        fwd.getScale() == grad.getScale() && fwd.getCausal() == grad.getCausal() &&
        (!found || found->isBeforeInBlock(fwd)))
      found = fwd;
  }
  return found;
}
/// The gradient that reads `fwd`'s saved statistics, if any.
AttentionGradOp gradOf(AttentionOp fwd) {
  for (Operation *u : fwd.getQuery().getUsers())
    if (auto grad = dyn_cast<AttentionGradOp>(u); grad && forwardOf(grad) == fwd)
      return grad;
  return AttentionGradOp();
}

LogicalResult lower(AttentionOp o, AttentionOp::Adaptor a, Emit &e) {
  auto q = tt(o.getQuery()), k = tt(o.getKey());
  Value out = e.alloc(o.getResult());
  Value ws = attentionWorkspace(e);
  int64_t bh = q.getDimSize(0) * q.getDimSize(1);
  if (gradOf(o)) {
    Value saved =
        e.allocBytes(int64_t(loomrt_attention_saved_bytes(bh, q.getDimSize(2))));
    e.plan.attentionSaved[o] = saved;
    rt::AttentionSaveOp::create(e.rw, e.loc, e.f.compute, dt(o.getQuery()), a.getQuery(), a.getKey(),
                                a.getValue(), out, saved, ws, bh, q.getDimSize(2),
                                k.getDimSize(2), q.getDimSize(3), f64(o.getScale()),
                                o.getCausal());
    return e.done(out);
  }
  rt::AttentionOp::create(e.rw, e.loc, e.f.compute, dt(o.getQuery()), a.getQuery(), a.getKey(),
                          a.getValue(), out, ws, bh, q.getDimSize(2), k.getDimSize(2),
                          q.getDimSize(3), f64(o.getScale()), o.getCausal());
  return e.done(out);
}
LogicalResult lower(AttentionGradOp o, AttentionGradOp::Adaptor a, Emit &e) {
  auto q = tt(o.getQuery()), k = tt(o.getKey());
  Value dq = e.alloc(o.getGradQuery()), dk = e.alloc(o.getGradKey()),
        dv = e.alloc(o.getGradValue());
  Value ws = attentionWorkspace(e);
  int64_t bh = q.getDimSize(0) * q.getDimSize(1);
  AttentionOp fwd = forwardOf(o);
  Value saved = fwd ? e.plan.attentionSaved.lookup(fwd) : Value();
  Value out = saved ? e.rw.getRemappedValue(fwd.getResult()) : Value();
  if (saved && out) {
    rt::AttentionGradSavedOp::create(e.rw, e.loc, e.f.compute, dt(o.getQuery()), a.getQuery(),
                                     a.getKey(), a.getValue(), out, saved, a.getGrad(), dq, dk,
                                     dv, ws, bh, q.getDimSize(2), k.getDimSize(2),
                                     q.getDimSize(3), f64(o.getScale()), o.getCausal());
    return e.done({dq, dk, dv});
  }
  rt::AttentionGradOp::create(e.rw, e.loc, e.f.compute, dt(o.getQuery()), a.getQuery(), a.getKey(),
                              a.getValue(), a.getGrad(), dq, dk, dv, ws, bh, q.getDimSize(2),
                              k.getDimSize(2), q.getDimSize(3), f64(o.getScale()),
                              o.getCausal());
  return e.done({dq, dk, dv});
}

//--- Products and reductions -----------------------------------------------//

LogicalResult lower(MatmulOp o, MatmulOp::Adaptor a, Emit &e) {
  auto at = tt(o.getLhs()), c = tt(o.getResult());
  int64_t ra = at.getRank(), rc = c.getRank();
  bool ta = o.getTransposeLhs(), tb = o.getTransposeRhs();
  int64_t m = c.getDimSize(rc - 2), n = c.getDimSize(rc - 1);
  int64_t k = at.getDimSize(ta ? ra - 2 : ra - 1);
  int64_t batch = batchOf(c);
  // Each operand's batch is the result's or broadcast whole (stride 0).
  int64_t ba = batchOf(at), bb = batchOf(tt(o.getRhs()));
  Value out = e.alloc(o.getResult());
  rt::MatmulOp::create(e.rw, e.loc, e.f.compute, a.getLhs(), a.getRhs(), out, ta, tb, batch, m, n, k,
                       ba == 1 ? 0 : m * k, bb == 1 ? 0 : k * n, m * n, dt(o.getLhs()),
                       dt(o.getResult()));
  return e.done(out);
}

/// A prefix sum along one dimension: the input viewed as [outer, len, inner].
LogicalResult lower(CumsumOp o, CumsumOp::Adaptor a, Emit &e) {
  auto [outer, len, inner] = axisView(tt(o.getInput()).getShape(), o.getDim(), o.getDim());
  Value y = e.alloc(o.getResult());
  rt::CumsumOp::create(e.rw, e.loc, e.f.compute, dt(o.getInput()), a.getInput(), y, outer, len, inner,
                       o.getExclusive(), o.getReverse());
  return e.done(y);
}

/// One single-dimension reduction per reduced dimension (reduceSteps); the
/// last step's buffer is the result.
LogicalResult lower(ReduceOp o, ReduceOp::Adaptor a, Emit &e) {
  if (e.plan.average.count(o)) {
    auto rows = tt(o.getInput());
    Value out = e.alloc(o.getResult());
    rt::OnebitAverageOp::create(e.rw, e.loc, e.f.compute, a.getInput(), out, rows.getDimSize(1),
                                rows.getDimSize(0));
    return e.done(out);
  }
  Value cur = a.getInput();
  int64_t es = int64_t(storageBytes(tt(o.getInput()).getElementType()));
  for (const ReduceStep &st : reduceSteps(o)) {
    Value next = e.allocBytes(st.outer * st.inner * es);
    rt::ReduceOp::create(e.rw, e.loc, e.f.compute, reduceOf(o.getKind()), dt(o.getInput()), cur, next,
                         st.outer, st.len, st.inner);
    cur = next;
  }
  return e.done(cur);
}


void populateComputePatterns(RewritePatternSet &patterns, const TypeConverter &tc, Plan &plan) {
  addPatterns<LayerNormOp, LayerNormGradOp, RmsNormOp, RmsNormGradOp, RotaryOp, SoftmaxOp, SoftmaxGradOp,
              EmbeddingOp, ZeroCopyOp, EmbeddingGradOp, CrossEntropyOp, CrossEntropyGradOp,
              AttentionOp, AttentionGradOp, MatmulOp, ReduceOp, CumsumOp, TopKOp, TopKGradOp,
              MoeSlotsOp, MoeDispatchOp, MoeCombineOp, MoeSlotDotOp>(patterns, tc, plan);
}

} // namespace mlir::loom::lowering
