//===- PipelineSchedule.cpp - loom-pipeline-schedule -----------------------===//
//
// The order of the micro-batches' forwards and backwards in
// @forward_backward. loom-autodiff writes every forward, then every
// backward (GPipe's order, Huang et al. 2019): all M micro-batches'
// activations are live when the first backward starts. 1F1B (PipeDream-
// Flush, Narayanan et al., "Memory-Efficient Pipeline-Parallel DNN
// Training", ICML 2021, §3) runs each micro-batch's backward as soon as its
// forward is done, so one micro-batch's activations are live at a time on
// a stage (on one stage, P = 1: F0 B0 F1 B1 ...).
//
// Every op is labelled by the micro-batches whose rows it reads: the input
// slices loom-micro-batches marks with `loom.micro_batch`, and what they
// reach. An op that reads several micro-batches (a parameter's running
// gradient sum, the averaged loss) runs as soon as it can; one that reads
// none (loads, casts, constants, the loss's seed gradient) just before its
// first user. The rest run by micro-batch, each in its program order
// (forward, then backward). Only the order changes: every op computes what
// it computed before, so the losses are the GPipe order's bit for bit.
//
//===----------------------------------------------------------------------===//
#include "loom/Passes/Loom.h"

#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <set>

namespace mlir::loom {
#define GEN_PASS_DEF_PIPELINESCHEDULE
#include "passes/Loom/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

constexpr int64_t kNone = -1, kJoin = -2;

/// Each op of `body` with the micro-batch it reads (kNone: none, kJoin:
/// several).
DenseMap<Operation *, int64_t> labelOps(Block &body) {
  DenseMap<Operation *, int64_t> label;
  auto attr = LoomDialect::MicroBatchAttrHelper::getNameStr();
  for (Operation &op : body) {
    int64_t l = kNone;
    if (auto m = op.getAttrOfType<IntegerAttr>(attr))
      l = m.getInt();
    for (Value v : op.getOperands()) {
      Operation *def = v.getDefiningOp();
      int64_t p = def && def->getBlock() == &body ? label.lookup(def) : kNone;
      if (p == kNone || p == l)
        continue;
      l = l == kNone ? p : kJoin;
    }
    label[&op] = l;
  }
  return label;
}

struct PipelineSchedule : public mlir::loom::impl::PipelineScheduleBase<PipelineSchedule> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (schedule != "1f1b" && schedule != "gpipe") {
      module.emitError() << "loom-pipeline-schedule: unknown schedule '" << schedule
                         << "': expected gpipe or 1f1b";
      return signalPassFailure();
    }
    auto fb = module.lookupSymbol<func::FuncOp>(LoomDialect::kForwardBackward);
    if (!fb) {
      module.emitError() << "loom-pipeline-schedule: no @forward_backward (run after "
                            "loom-autodiff)";
      return signalPassFailure();
    }
    if (schedule == "gpipe" || !fb.getBody().hasOneBlock())
      return; // autodiff's order is GPipe's
    Block &body = fb.getBody().front();
    for (Operation &op : body.without_terminator())
      if (hasEffect<MemoryEffects::Write>(&op) || hasEffect<MemoryEffects::Free>(&op)) {
        op.emitRemark() << "loom-pipeline-schedule: @forward_backward writes memory here; "
                           "its order is kept (GPipe's)";
        return;
      }
    DenseMap<Operation *, int64_t> label = labelOps(body);
    DenseMap<Operation *, int64_t> index;
    for (auto [i, op] : llvm::enumerate(body))
      index[&op] = int64_t(i);

    // List scheduling of the labelled ops: ready ones by (micro-batch,
    // program order), several micro-batches' first; unlabelled producers
    // placed just before the first op that reads them.
    SmallVector<Operation *> order;
    DenseSet<Operation *> placed;
    std::function<void(Operation *)> place = [&](Operation *op) {
      if (!placed.insert(op).second)
        return;
      for (Value v : op->getOperands())
        if (Operation *def = v.getDefiningOp();
            def && def->getBlock() == &body && label.lookup(def) == kNone)
          place(def);
      order.push_back(op);
    };
    DenseMap<Operation *, int64_t> waiting; // labelled producers not yet placed
    std::set<std::pair<std::pair<int64_t, int64_t>, Operation *>> ready;
    auto key = [&](Operation *op) {
      int64_t l = label.lookup(op);
      return std::make_pair(std::make_pair(l == kJoin ? -1 : l, index.lookup(op)), op);
    };
    for (Operation &op : body.without_terminator()) {
      if (label.lookup(&op) == kNone)
        continue;
      DenseSet<Operation *> producers;
      for (Value v : op.getOperands())
        if (Operation *def = v.getDefiningOp();
            def && def->getBlock() == &body && label.lookup(def) != kNone)
          producers.insert(def);
      waiting[&op] = int64_t(producers.size());
      if (producers.empty())
        ready.insert(key(&op));
    }
    while (!ready.empty()) {
      Operation *op = ready.begin()->second;
      ready.erase(ready.begin());
      place(op);
      DenseSet<Operation *> users;
      for (Value r : op->getResults())
        for (Operation *u : r.getUsers())
          if (u->getBlock() == &body && waiting.count(u))
            users.insert(u);
      for (Operation *u : users)
        if (--waiting[u] == 0)
          ready.insert(key(u));
    }
    for (Operation &op : body) // what is left: unlabelled ops, the return
      place(&op);
    for (Operation *op : order)
      op->moveBefore(&body, body.end());
  }
};

} // namespace
