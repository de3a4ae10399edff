//===- InsertFrees.cpp - loom-insert-frees: where each buffer is released -===//
//
// One liveness analysis over each lowered function (docs/codegen.md,
// "Lowering"): `loomrt.free` after the last use of every buffer the
// function owns. Split out of the conversion (issue 42): it sees loomrt IR
// only, and the step simulation prices the same releases the binary makes.
//
//===----------------------------------------------------------------------===//
#include "loom/Passes/LoomRT.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::loom {
#define GEN_PASS_DEF_INSERTFREES
#include "passes/LoomRT/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;
namespace rt = mlir::loomrt;

namespace {

/// Which results of each function hand their buffer to the caller: an
/// allocation of the callee, returned once.
using Transfers = llvm::DenseMap<Operation *, SmallVector<bool>>;

/// Inserts `loomrt.free` after the last use of every buffer `fn` owns (its
/// allocations and the buffers its callees hand over), except those it
/// returns. A transfer (memcpy or collective, then `loomrt.record` on its
/// stream) reads its buffers until that event is waited or synchronised.
/// `insert` false: only record what `fn` hands over (its frees are there).
void insertFrees(func::FuncOp fn, ModuleOp module, Transfers &transfers, bool insert) {
  Block &blk = fn.getBody().front();
  llvm::SetVector<Value> owned;
  llvm::DenseMap<Value, Operation *> last;
  auto use = [&](Value v, Operation *at) {
    Value r = rt::bufferRoot(v);
    Operation *&l = last[r];
    if (!l || l->isBeforeInBlock(at))
      l = at;
  };
  for (Operation &op : blk) {
    if (auto alloc = dyn_cast<rt::AllocOp>(op))
      owned.insert(alloc.getResult());
    if (auto call = dyn_cast<func::CallOp>(op)) {
      auto callee = module.lookupSymbol<func::FuncOp>(call.getCallee());
      const SmallVector<bool> &moved = transfers[callee];
      for (auto [i, r] : llvm::enumerate(call.getResults()))
        if (i < moved.size() && moved[i])
          owned.insert(r);
    }
    for (Value v : op.getOperands())
      if (isa<rt::BufferType>(v.getType()))
        use(v, &op);
    for (Value r : op.getResults()) // defined here: live from here
      if (isa<rt::BufferType>(r.getType()) && !last.count(rt::bufferRoot(r)))
        last[rt::bufferRoot(r)] = &op;
  }
  // A transfer's buffers stay in use until its event (the next record on
  // its stream) is waited.
  llvm::DenseMap<Value, Operation *> pending; // stream -> last transfer
  for (Operation &op : blk) {
    Value stream;
    if (auto m = dyn_cast<rt::MemcpyOp>(op))
      stream = m.getStream();
    else if (isa<rt::AllReduceOp, rt::ReduceScatterOp, rt::AllGatherOp, rt::AllToAllOp,
                 rt::AllGatherBytesOp, rt::SendRecvOp, rt::P2POp>(op))
      stream = op.getOperand(1);
    auto role = stream ? stream.getDefiningOp<rt::StreamOp>() : rt::StreamOp();
    if (role && role.getRole() != rt::StreamRole::compute &&
        role.getRole() != rt::StreamRole::host) {
      pending[stream] = &op;
      continue;
    }
    auto rec = dyn_cast<rt::RecordOp>(op);
    if (!rec || !pending.count(rec.getStream()))
      continue;
    Operation *transfer = pending.lookup(rec.getStream());
    pending.erase(rec.getStream());
    for (Operation *w : rec.getEvent().getUsers())
      for (Value v : transfer->getOperands())
        if (isa<rt::BufferType>(v.getType()))
          use(v, w);
  }
  // Results handed to the caller: owned, returned once. Nothing returned
  // is freed here.
  llvm::DenseMap<Value, int> count;
  auto ret = cast<func::ReturnOp>(blk.getTerminator());
  for (Value v : ret.getOperands())
    ++count[rt::bufferRoot(v)];
  SmallVector<bool> &moved = transfers[fn];
  for (Value v : ret.getOperands())
    moved.push_back(owned.contains(rt::bufferRoot(v)) && count[rt::bufferRoot(v)] == 1);
  if (!insert)
    return;
  OpBuilder b(fn.getContext());
  for (Value r : owned) {
    if (count.count(r))
      continue;
    Operation *at = last.lookup(r);
    b.setInsertionPointAfter(at);
    rt::FreeOp::create(b, at->getLoc(), r);
  }
}


struct InsertFreesPass : mlir::loom::impl::InsertFreesBase<InsertFreesPass> {
  using Base::Base;
  void runOnOperation() override { mlir::loom::insertFrees(getOperation()); }
};

} // namespace

void mlir::loom::insertFrees(ModuleOp module) {
  // Callees first: a call's results are owned when its callee hands them
  // over. A function that has releases already (a lowered module read
  // back) only says what it hands over.
  SmallVector<func::FuncOp> order;
  llvm::DenseSet<Operation *> seen;
  std::function<void(func::FuncOp)> visit = [&](func::FuncOp fn) {
    if (fn.isExternal() || !seen.insert(fn).second)
      return;
    fn.walk([&](func::CallOp call) {
      if (auto callee = module.lookupSymbol<func::FuncOp>(call.getCallee()))
        visit(callee);
    });
    order.push_back(fn);
  };
  for (func::FuncOp fn : module.getOps<func::FuncOp>())
    visit(fn);
  Transfers transfers;
  for (func::FuncOp fn : order) {
    bool released = fn.walk([](rt::FreeOp) { return WalkResult::interrupt(); }).wasInterrupted();
    ::insertFrees(fn, module, transfers, !released);
  }
}
