//===- BatchUpdates.cpp - loom-batch-updates ------------------------------===//
//
// A run of `loomrt.adam` calls with one config (stream, step, gradient
// type, hyperparameters, freeze step, with or without a bf16 refresh)
// becomes one `loomrt.adam_multi`: on the GPU up to 48 tensors a launch. A
// data-parallel-free step updates each parameter apart (GPT-2: 148 calls,
// most of a few thousand elements), and a launch costs the host a few
// microseconds where the kernel takes one or two: the update phase was
// bound by launches, the GPU idle between them. Each tensor's bits are
// what its own call computes (loomrt_adam_multi's contract).
//
//===----------------------------------------------------------------------===//
#include "dialects/LoomRT/LoomRTDialect.h"
#include "loom/Passes/LoomRT.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/SymbolTable.h"

namespace mlir::loom {
#define GEN_PASS_DEF_BATCHUPDATES
#include "passes/LoomRT/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
namespace rt = mlir::loomrt;

namespace {

/// Whether `b` may join a run that `a` started: the same config in every
/// field the runtime's one call takes once, and neither timed on the host.
bool sameConfig(rt::AdamOp a, rt::AdamOp b) {
  return a.getStream() == b.getStream() && a.getStep() == b.getStep() &&
         a.getGradDtype() == b.getGradDtype() && a.getLr() == b.getLr() &&
         a.getBeta1() == b.getBeta1() && a.getBeta2() == b.getBeta2() &&
         a.getEps() == b.getEps() && a.getWeightDecay() == b.getWeightDecay() &&
         a.getDecoupled() == b.getDecoupled() && a.getFreezeStep() == b.getFreezeStep() &&
         bool(a.getRefresh()) == bool(b.getRefresh()) && !a.getTimed() && !b.getTimed();
}

/// Ops that may stand between two updates of a run: they do no work on a
/// device (the parameters' and states' globals, comments, releases).
bool passive(Operation *op) { return isa<rt::CommentOp, rt::GlobalOp, rt::ViewOp, rt::FreeOp>(op); }

/// Replaces `run` (two updates or more, in order) by one adam_multi where
/// the last stood. A release between them of a buffer some update of the
/// run takes moves after it.
void batch(ArrayRef<rt::AdamOp> run) {
  rt::AdamOp first = run.front(), last = run.back();
  llvm::SmallPtrSet<Value, 32> used;
  SmallVector<Value> params, grads, ms, vs, refresh;
  SmallVector<int64_t> sizes;
  for (rt::AdamOp a : run) {
    params.push_back(a.getParam());
    grads.push_back(a.getGrad());
    ms.push_back(a.getExpAvg());
    vs.push_back(a.getExpAvgSq());
    if (a.getRefresh())
      refresh.push_back(a.getRefresh());
    sizes.push_back(int64_t(a.getN()));
    for (Value v : a->getOperands())
      used.insert(v);
  }
  SmallVector<Operation *> frees;
  for (Operation *op = first->getNextNode(); op != last; op = op->getNextNode())
    if (auto f = dyn_cast<rt::FreeOp>(op); f && used.contains(f->getOperand(0)))
      frees.push_back(f);
  OpBuilder b(last);
  auto multi = rt::AdamMultiOp::create(
      b, last.getLoc(), last.getStream(), params, grads, ms, vs, refresh, last.getStep(),
      last.getGradDtypeAttr(), last.getLrAttr(), last.getBeta1Attr(), last.getBeta2Attr(),
      last.getEpsAttr(), last.getWeightDecayAttr(), last.getDecoupledAttr(),
      b.getDenseI64ArrayAttr(sizes), last.getFreezeStepAttr());
  for (Operation *f : llvm::reverse(frees))
    f->moveAfter(multi);
  for (rt::AdamOp a : run)
    a->erase();
}

/// The bf16 gradient a function returns cast up to fp32 for updates
/// alone: every caller's result feeds `loomrt.adam` as its gradient (and is
/// released). The function then returns the bf16 buffer itself, the cast
/// and its fp32 buffer go, and the updates read bf16
/// (loomrt_adam_bf16grad widens each element exactly as the cast did: the
/// same bits). Returns the results changed.
int64_t elideGradCasts(ModuleOp module) {
  SymbolTableCollection symbols;
  SymbolUserMap users(symbols, module);
  int64_t elided = 0;
  module.walk([&](func::FuncOp fn) {
    if (fn.isExternal() || !fn.getBody().hasOneBlock())
      return;
    auto ret = dyn_cast<func::ReturnOp>(fn.getBody().front().getTerminator());
    ArrayRef<Operation *> calls = users.getUsers(fn);
    if (!ret || calls.empty() ||
        !llvm::all_of(calls, [](Operation *c) { return isa<func::CallOp>(c); }))
      return;
    for (OpOperand &res : ret->getOpOperands()) {
      Value y = res.get();
      rt::CastOp cast; // the one that writes y
      for (Operation *u : y.getUsers())
        if (auto c = dyn_cast<rt::CastOp>(u); c && c.getY() == y)
          cast = c;
      if (!cast || cast.getFrom() != rt::DType::bf16 || cast.getTo() != rt::DType::f32 ||
          !y.getDefiningOp<rt::AllocOp>() || !y.hasNUses(2))
        continue;
      Value x = cast.getX();
      auto xAlloc = x.getDefiningOp<rt::AllocOp>();
      if (!xAlloc || xAlloc->getBlock() != &fn.getBody().front())
        continue;
      // x: cast once, released once after it, read by nothing after the cast.
      rt::FreeOp xFree;
      bool ok = true;
      for (Operation *u : x.getUsers()) {
        if (auto f = dyn_cast<rt::FreeOp>(u); f && !xFree && cast->isBeforeInBlock(f))
          xFree = f;
        else if (u != cast && (isa<rt::CastOp>(u) || !u->isBeforeInBlock(cast)))
          ok = false;
      }
      // Every caller's result: updates' gradients (fp32) and releases.
      unsigned k = res.getOperandNumber();
      SmallVector<rt::AdamOp> updates;
      for (Operation *c : calls)
        for (Operation *u : c->getResult(k).getUsers()) {
          auto a = dyn_cast<rt::AdamOp>(u);
          if (a && a.getGrad() == c->getResult(k) && a.getGradDtype() == rt::DType::f32 &&
              !a.getTimed() && a.getParam() != a.getGrad() && a.getExpAvg() != a.getGrad() &&
              a.getExpAvgSq() != a.getGrad())
            updates.push_back(a);
          else if (!isa<rt::FreeOp>(u))
            ok = false;
        }
      if (!ok || !xFree || updates.empty())
        continue;
      res.set(x);
      xFree->erase();
      cast->erase();
      y.getDefiningOp()->erase();
      for (rt::AdamOp a : updates)
        a.setGradDtype(rt::DType::bf16);
      ++elided;
    }
  });
  return elided;
}

/// A working copy's refresh (loom-working-copies: the update's new weights
/// cast to bf16 and stored to `@P.work`) lowers to a cast into a temporary
/// and a copy of it to the global. The cast writes the global itself; and
/// where the update just before it has a bf16 gradient and the cast reads
/// its weights, the update writes the copy (its refresh,
/// loomrt_adam_bf16grad's rounding, the cast's): one pass over the weights
/// instead of three kernels. Returns the casts folded into updates.
int64_t foldRefreshes(ModuleOp module) {
  SmallVector<rt::CastOp> casts;
  module.walk([&](rt::CastOp c) {
    if (c.getFrom() == rt::DType::f32 && c.getTo() == rt::DType::bf16)
      casts.push_back(c);
  });
  int64_t folded = 0;
  for (rt::CastOp c : casts) {
    Block *block = c->getBlock();
    // Into a temporary copied whole to a global, nothing but passive ops
    // between: into the global.
    Value y = c.getY();
    auto alloc = y.getDefiningOp<rt::AllocOp>();
    rt::MemcpyOp copy;
    rt::FreeOp free;
    bool ok = alloc && alloc->getBlock() == block;
    for (Operation *u : y.getUsers()) {
      if (u == c.getOperation())
        continue;
      if (auto m = dyn_cast<rt::MemcpyOp>(u); m && m.getSrc() == y && !copy)
        copy = m;
      else if (auto f = dyn_cast<rt::FreeOp>(u); f && !free)
        free = f;
      else
        ok = false;
    }
    rt::GlobalOp global = copy ? copy.getDst().getDefiningOp<rt::GlobalOp>() : rt::GlobalOp();
    ok = ok && copy && free && global && copy->getBlock() == block &&
         free->getBlock() == block && copy.getStream() == c.getStream() &&
         copy.getBytes() == 2 * c.getN() && c->isBeforeInBlock(copy) &&
         copy->isBeforeInBlock(free);
    for (Operation *o = c->getNextNode(); ok && o != copy.getOperation(); o = o->getNextNode())
      ok = passive(o);
    if (!ok)
      continue;
    if (!global->isBeforeInBlock(c))
      global->moveBefore(c);
    c.getYMutable().assign(global.getResult());
    copy->erase();
    free->erase();
    alloc->erase();
    // The update just before it (passive ops between), if it can write it.
    Operation *prev = c->getPrevNode();
    while (prev && passive(prev))
      prev = prev->getPrevNode();
    auto a = dyn_cast_or_null<rt::AdamOp>(prev);
    if (!a || a.getRefresh() || a.getGradDtype() != rt::DType::bf16 || a.getTimed() ||
        a.getParam() != c.getX() || a.getN() != c.getN() || a.getStream() != c.getStream())
      continue;
    if (!global->isBeforeInBlock(a))
      global->moveBefore(a);
    a.getRefreshMutable().assign(global.getResult());
    c->erase();
    ++folded;
  }
  return folded;
}

struct BatchUpdates : public mlir::loom::impl::BatchUpdatesBase<BatchUpdates> {
  using Base::Base;
  void runOnOperation() override { batched += mlir::loom::batchUpdates(getOperation()); }
};

} // namespace

int64_t mlir::loom::batchUpdates(ModuleOp module) {
  elideGradCasts(module);
  foldRefreshes(module);
  SmallVector<SmallVector<rt::AdamOp>> runs;
  module.walk([&](Block *block) {
    SmallVector<rt::AdamOp> run;
    llvm::SmallPtrSet<Value, 32> roots; // the buffers the run's updates take
    auto close = [&] {
      if (run.size() >= 2)
        runs.push_back(run);
      run.clear();
      roots.clear();
    };
    // An update that shares a buffer with one of the run (the same
    // parameter updated twice, say) starts a new run: the batched updates
    // run in parallel.
    auto shares = [&](rt::AdamOp a) {
      return llvm::any_of(a->getOperands(), [&](Value v) {
        return isa<rt::BufferType>(v.getType()) && roots.contains(rt::bufferRoot(v));
      });
    };
    for (Operation &op : *block) {
      if (auto a = dyn_cast<rt::AdamOp>(&op)) {
        if (!run.empty() && (!sameConfig(run.front(), a) || shares(a)))
          close();
        if (!a.getTimed()) {
          run.push_back(a);
          for (Value v : a->getOperands())
            if (isa<rt::BufferType>(v.getType()))
              roots.insert(rt::bufferRoot(v));
        }
        continue;
      }
      if (!passive(&op))
        close();
    }
    close();
  });
  for (ArrayRef<rt::AdamOp> run : runs)
    batch(run);
  return int64_t(runs.size());
}
