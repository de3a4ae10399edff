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
// On a pipeline stage's program (loom-pipeline-split), 1F1B starts with
// P - s - 1 forwards and pairs the steady state's transfers as the
// neighbour does (pairTransfers); zb-h1 splits each backward into input-
// and weight-gradient ops (order1f1b).
//
//===----------------------------------------------------------------------===//
#include "loom/Passes/Loom.h"

#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <set>
#include <tuple>

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
    if (schedule != "1f1b" && schedule != "gpipe" && schedule != "zb-h1") {
      module.emitError() << "loom-pipeline-schedule: unknown schedule '" << schedule
                         << "': expected gpipe, 1f1b or zb-h1";
      return signalPassFailure();
    }
    auto fb = module.lookupSymbol<func::FuncOp>(LoomDialect::kForwardBackward);
    if (!fb) {
      module.emitError() << "loom-pipeline-schedule: no @forward_backward (run after "
                            "loom-autodiff)";
      return signalPassFailure();
    }
    if (!fb.getBody().hasOneBlock())
      return;
    // A stage's program says which stage it is.
    int64_t st = stage, numStages = stages;
    if (auto pipe = module->getAttrOfType<DenseI64ArrayAttr>(
            LoomDialect::PipelineAttrHelper::getNameStr()))
      st = pipe[0], numStages = pipe[1];
    if (st < 0 || numStages < 1 || st >= numStages) {
      module.emitError() << "loom-pipeline-schedule: stage must be in [0, stages)";
      return signalPassFailure();
    }
    Block &body = fb.getBody().front();
    // GPipe's order needs no pairing: every transfer forward comes before
    // every transfer back.
    if (schedule != "gpipe")
      (void)order1f1b(body, st, numStages, schedule == "zb-h1");
  }

  /// 1F1B's steady state: a stage sends micro-batch w + i's activation to
  /// the next stage and receives micro-batch i's gradient from it in one op
  /// (Megatron-LM's send_forward_recv_backward), and sends micro-batch i's
  /// gradient back and receives micro-batch w + i + 1's activation in one
  /// (send_backward_recv_forward): the neighbour pairs the same two
  /// transfers in one op, and neither stage may wait for its half alone
  /// (a blocking send each way would deadlock). Outside the steady state
  /// (warm-up, cool-down, one micro-batch) transfers stay single, as the
  /// neighbour's are: NCCL does not complete a paired op against two
  /// single ones (found on H200s, 2026-11-30).
  static void pairTransfers(Block &body, const DenseMap<Operation *, int64_t> &label,
                            const DenseSet<Operation *> &forward, int64_t warmup) {
    SmallVector<P2POp> transfers;
    for (auto p : body.getOps<P2POp>())
      transfers.push_back(p);
    for (size_t i = 0; i + 1 < transfers.size(); ++i) {
      P2POp send = transfers[i], recv = transfers[i + 1];
      if (!send.getInput() || send.getResult() || recv.getInput() || !recv.getResult() ||
          *send.sendPeer() != *recv.recvPeer() || !send.getDeps().empty() ||
          !recv.getDeps().empty() || send.getInput().getType() != recv.getResult().getType())
        continue;
      int64_t ls = label.lookup(send), lr = label.lookup(recv);
      bool fs = forward.contains(send), fr = forward.contains(recv);
      bool steady = ls >= 0 && lr >= 0 &&
                    ((fs && !fr && ls == warmup + lr) || (!fs && fr && lr == warmup + ls + 1));
      if (!steady)
        continue;
      OpBuilder b(send);
      auto both = P2POp::create(b, send.getLoc(), recv.getResult().getType(),
                                send.getToken().getType(), send.getInput(), ValueRange{},
                                send.getGroup(), send.getToAttr(), recv.getFromAttr(),
                                send.getStream());
      both->setAttrs(send->getDiscardableAttrDictionary());
      // The receive's wait now waits for the pair; the send's goes.
      for (Operation *w : llvm::make_early_inc_range(send.getToken().getUsers()))
        w->erase();
      recv.getResult().replaceAllUsesWith(both.getResult());
      recv.getToken().replaceAllUsesWith(both.getToken());
      send.erase();
      recv.erase();
      ++i; // the receive is taken
    }
  }

  /// ZB-H1's B ops: each backward transfer to the previous stage and what
  /// it reads in its micro-batch's backward, with the waits of those that
  /// are asynchronous (their results are read after them).
  static DenseSet<Operation *> inputGradients(Block &body,
                                              const DenseMap<Operation *, int64_t> &label,
                                              const DenseMap<Operation *, int64_t> &index,
                                              int64_t lossIndex) {
    DenseSet<Operation *> b;
    SmallVector<Operation *> stack;
    for (P2POp p : body.getOps<P2POp>())
      if (p.getInput() && index.lookup(p) > lossIndex)
        stack.push_back(p);
    while (!stack.empty()) {
      Operation *op = stack.pop_back_val();
      if (!b.insert(op).second)
        continue;
      for (Value v : op->getOperands())
        if (Operation *def = v.getDefiningOp();
            def && def->getBlock() == &body && index.lookup(def) > lossIndex &&
            label.lookup(def) == label.lookup(op))
          stack.push_back(def);
    }
    for (auto w : body.getOps<WaitOp>())
      if (llvm::any_of(w.getTokens(), [&](Value t) { return b.contains(t.getDefiningOp()); }))
        b.insert(w);
    return b;
  }

  /// 1F1B on stage `st` of `numStages` (PipeDream-Flush, Narayanan et al.
  /// 2021; Megatron-LM's forward_backward_pipelining_without_interleaving):
  /// w = min(P - st - 1, M) forwards first, then a forward and a backward
  /// in turn, then the backwards left. Fails (with a remark) where the
  /// order must stay autodiff's.
  ///
  /// `zeroBubble` (ZB-H1, Qi et al., "Zero Bubble Pipeline Parallelism",
  /// ICLR 2024, §3): each backward is split into the ops the gradient sent
  /// back to the previous stage needs (B: the input gradients) and the
  /// rest (W: the weight gradients). B runs first and its gradient leaves
  /// as early as it can; in the steady state W follows in the same slot, in
  /// the cool-down every W waits until the last B, filling the time the
  /// stage would otherwise wait for the next one's gradients.
  LogicalResult order1f1b(Block &body, int64_t st, int64_t numStages, bool zeroBubble) {
    for (Operation &op : body.without_terminator())
      if (!isa<AsyncOpInterface, WaitOp>(op) &&
          (hasEffect<MemoryEffects::Write>(&op) || hasEffect<MemoryEffects::Free>(&op))) {
        op.emitRemark() << "loom-pipeline-schedule: @forward_backward writes memory here; "
                           "its order is kept (GPipe's)";
        return failure();
      }
    DenseMap<Operation *, int64_t> label = labelOps(body);
    DenseMap<Operation *, int64_t> index;
    for (auto [i, op] : llvm::enumerate(body))
      index[&op] = int64_t(i);
    // The forward ends where the loss is computed; each micro-batch's
    // forward and backward get their place in the stage's sequence.
    Operation *lossOp = body.getTerminator()->getOperand(0).getDefiningOp();
    int64_t lossIndex = lossOp && lossOp->getBlock() == &body ? index.lookup(lossOp)
                                                              : int64_t(body.getOperations().size());
    int64_t m = 0;
    for (auto &[op, l] : label)
      m = std::max(m, l + 1);
    int64_t warmup = std::min(numStages - st - 1, m);
    DenseSet<Operation *> inputGrad = zeroBubble ? inputGradients(body, label, index, lossIndex)
                                                 : DenseSet<Operation *>();
    // (slot, W after B, program order)
    auto slot = [&](Operation *op) -> std::pair<int64_t, int64_t> {
      int64_t l = label.lookup(op);
      if (l < 0)
        return {-1, 0};
      bool forward = index.lookup(op) <= lossIndex;
      if (forward)
        return {l < warmup ? l : warmup + 2 * (l - warmup), 0};
      // Backward i follows forward warmup + i in the steady state; the
      // last `warmup` ones (the cool-down) run after the last forward.
      bool w = zeroBubble && !inputGrad.contains(op);
      if (l < m - warmup)
        return {warmup + 2 * l + 1, w ? 1 : 0};
      return {w ? 2 * m + l : m + l, 0};
    };

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
    std::set<std::tuple<int64_t, int64_t, int64_t, Operation *>> ready;
    auto key = [&](Operation *op) {
      auto [sl, sub] = slot(op);
      return std::make_tuple(sl, sub, index.lookup(op), op);
    };
    DenseSet<Operation *> forward;
    for (auto [op, i] : index)
      if (i <= lossIndex)
        forward.insert(op);
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
      Operation *op = std::get<3>(*ready.begin());
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
    pairTransfers(body, label, forward, warmup);
    return success();
  }
};

} // namespace
