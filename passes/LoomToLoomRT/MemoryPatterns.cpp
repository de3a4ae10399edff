//===- MemoryPatterns.cpp - lowering patterns ----------------------------===//
//
// The lowering of shapes, globals, the step counter, optimizer updates: one `lower(Op, Adaptor, Emit &)` per op.
//
//===----------------------------------------------------------------------===//
#include "passes/LoomToLoomRT/Lowering.h"

using namespace mlir;
using namespace mlir::loom;

namespace mlir::loom::lowering {

//--- Shapes: aliases and strided copies ------------------------------------//

LogicalResult lower(ReshapeOp, ReshapeOp::Adaptor a, Emit &e) { return e.done(a.getInput()); }

Value strided(Emit &e, Value result, Value src, ArrayRef<int64_t> ss) {
  Value out = e.alloc(result);
  auto shape = tt(result).getShape();
  rt::CopyStridedOp::create(e.rw, e.loc, e.f.compute, src, out, storageBytes(tt(result).getElementType()),
                            ss, rowMajorStrides(shape), shape);
  return out;
}
LogicalResult lower(TransposeOp o, TransposeOp::Adaptor a, Emit &e) {
  auto st = rowMajorStrides(tt(o.getInput()).getShape());
  std::vector<int64_t> ss;
  for (int64_t p : o.getPerm())
    ss.push_back(st[p]);
  return e.done(strided(e, o.getResult(), a.getInput(), ss));
}
/// A slice that is one contiguous range of its input: steps of 1, every
/// dimension before the first it keeps more than one of taken at one
/// index, every one after it whole. Not when the function returns it (the
/// caller would hold a view of a buffer the callee frees).
bool contiguousSlice(SliceOp o) {
  ArrayRef<int64_t> in = tt(o.getInput()).getShape(), out = tt(o.getResult()).getShape();
  size_t d = 0;
  while (d < out.size() && out[d] == 1)
    ++d;
  if (d < out.size() && o.getStep()[d] != 1)
    return false;
  for (size_t k = d + 1; k < out.size(); ++k)
    if (out[k] != in[k])
      return false;
  return llvm::none_of(o->getUsers(), [](Operation *u) { return isa<func::ReturnOp>(u); });
}
LogicalResult lower(SliceOp o, SliceOp::Adaptor a, Emit &e) {
  auto st = rowMajorStrides(tt(o.getInput()).getShape());
  int64_t offset = 0;
  std::vector<int64_t> ss;
  for (size_t d = 0; d < st.size(); ++d) {
    offset += o.getStart()[d] * st[d];
    ss.push_back(st[d] * o.getStep()[d]);
  }
  Value src = a.getInput();
  if (offset)
    src = rt::ViewOp::create(e.rw, e.loc, e.rw.getType<rt::BufferType>(), src,
                             offset * int64_t(storageBytes(tt(o.getInput()).getElementType())));
  // A contiguous range is read where it is (no update writes a slice in
  // place: Plan::scratch).
  if (contiguousSlice(o))
    return e.done(src);
  return e.done(strided(e, o.getResult(), src, ss));
}
LogicalResult lower(ConcatOp o, ConcatOp::Adaptor a, Emit &e) {
  auto outType = tt(o.getResult());
  int64_t dim = int64_t(o.getDim());
  if (dim < 0)
    dim += outType.getRank();
  auto ds = rowMajorStrides(outType.getShape());
  // The buffer its producers wrote into (Plan::intoConcat), if any did.
  Value out = e.plan.concatBuffer.lookup(o);
  if (!out)
    out = e.alloc(o.getResult());
  int64_t es = int64_t(storageBytes(outType.getElementType())), offset = 0;
  for (auto [orig, in] : llvm::zip(o.getInputs(), a.getInputs())) {
    auto sh = tt(orig).getShape();
    Value src = orig;
    if (auto rs = orig.getDefiningOp<ReshapeOp>())
      src = rs.getInput();
    if (Value view = e.plan.concatView.lookup(src); view && view == in) {
      offset += sh[dim];
      continue;
    }
    Value dst = offset ? rt::ViewOp::create(e.rw, e.loc, e.rw.getType<rt::BufferType>(), out,
                                            offset * ds[dim] * es)
                       : out;
    rt::CopyStridedOp::create(e.rw, e.loc, e.f.compute, in, dst, es, rowMajorStrides(sh), ds, sh);
    offset += sh[dim];
  }
  return e.done(out);
}
LogicalResult lower(BroadcastOp o, BroadcastOp::Adaptor a, Emit &e) {
  return e.done(strided(e, o.getResult(), a.getInput(), broadcastInputStrides(o)));
}

//--- Globals and the step counter ------------------------------------------//

LogicalResult lower(LoadOp o, LoadOp::Adaptor, Emit &e) {
  return e.done(
      rt::GlobalOp::create(e.rw, e.loc, e.rw.getType<rt::BufferType>(), o.getName()).getResult());
}
LogicalResult lower(StoreOp o, StoreOp::Adaptor a, Emit &e) {
  if (!e.plan.elided.contains(o)) {
    Value g = rt::GlobalOp::create(e.rw, e.loc, e.rw.getType<rt::BufferType>(), o.getName());
    rt::MemcpyOp::create(e.rw, e.loc, e.f.compute, g, a.getValue(), bytesOf(o.getValue()));
  }
  e.rw.eraseOp(o);
  return success();
}
/// The step counter: its host copy serves every Adam update of the step, so
/// they need no read-back (one sync per step, not one per parameter).
LogicalResult lower(arith::AddIOp o, arith::AddIOp::Adaptor a, Emit &e) {
  Value out = e.alloc(o.getResult());
  auto add =
      rt::AddI64Op::create(e.rw, e.loc, e.rw.getI64Type(), e.f.compute, a.getLhs(), a.getRhs(), out);
  e.plan.hostScalar[o.getResult()] = add.getSum();
  return e.done(out);
}

//--- Optimizer updates -----------------------------------------------------//

/// The buffers an update writes, as the plan decided: the inputs' own
/// (in place, or scratch a copy made), else fresh copies of them.
SmallVector<Value> updateBuffers(Emit &e, ValueRange ins, ArrayRef<Value> outs) {
  UpdateIn how = e.plan.update.lookup(e.op);
  SmallVector<Value> buf;
  for (auto [in, out] : llvm::zip(ins, outs)) {
    if (how != UpdateIn::copies) {
      buf.push_back(in);
      continue;
    }
    buf.push_back(e.alloc(out));
    rt::MemcpyOp::create(e.rw, e.loc, e.stream(), buf.back(), in, bytesOf(out));
  }
  return buf;
}

LogicalResult lower(AdamOp o, AdamOp::Adaptor a, Emit &e) {
  Value refresh;
  if (CastOp c = fusedRefreshCast(o); c && e.plan.elided.contains(c)) {
    refresh = e.allocOrGlobal(c.getResult());
    e.plan.refreshBuffer[c] = refresh;
  }
  SmallVector<Value> buf = updateBuffers(e, {a.getParam(), a.getExpAvg(), a.getExpAvgSq()},
                                         {o.getNewParam(), o.getNewExpAvg(), o.getNewExpAvgSq()});
  Value step = e.plan.hostScalar.lookup(o.getStep());
  if (!step)
    step = rt::ReadI64Op::create(e.rw, e.loc, e.rw.getI64Type(), e.f.compute, a.getStep());
  Value st = e.stream();
  // An update the host runs itself is timed for the driver (the JSON log's
  // cpu_update_*, --trace's cpu lane).
  rt::AdamOp::create(e.rw, e.loc, st, buf[0], a.getGrad(), buf[1], buf[2], step, refresh,
                     dt(o.getGrad()), f64(o.getLr()), f64(o.getBeta1()), f64(o.getBeta2()),
                     f64(o.getEps()), f64(o.getWeightDecay()), o.getDecoupled(), st == e.f.host,
                     numel(o.getParam()), o.getFreezeStep().value_or(0));
  return e.done(buf);
}

/// torch.optim.SGD with momentum (dampening 0).
LogicalResult lower(SgdOp o, SgdOp::Adaptor a, Emit &e) {
  SmallVector<Value> buf = updateBuffers(e, {a.getParam(), a.getMomentumBuf()},
                                         {o.getNewParam(), o.getNewMomentumBuf()});
  rt::SgdOp::create(e.rw, e.loc, e.stream(), buf[0], a.getGrad(), buf[1], f64(o.getLr()),
                    f64(o.getMomentum()), o.getNesterov(), numel(o.getParam()));
  return e.done(buf);
}


void populateMemoryPatterns(RewritePatternSet &patterns, const TypeConverter &tc, Plan &plan) {
  addPatterns<ReshapeOp, TransposeOp, SliceOp, ConcatOp, BroadcastOp, LoadOp, StoreOp,
              arith::AddIOp, AdamOp, SgdOp>(patterns, tc, plan);
}

} // namespace mlir::loom::lowering
