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
// and weight-gradient ops (order1f1b). interleaved:V orders a stage holding
// V model chunks in Megatron-LM's interleaved order, its transfers by one
// clock all stages compute alike (orderInterleaved).
//
//===----------------------------------------------------------------------===//
#include "loom/Passes/Loom.h"
#include "loom/PipelineTimeline.h"

#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <functional>
#include <map>
#include <set>
#include <tuple>

namespace mlir::loom {
#define GEN_PASS_DEF_PIPELINESCHEDULE
#include "passes/Loom/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;
namespace cost = ::loom::cost;

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

/// A key orders ready ops: smallest first.
using Key = std::tuple<double, int64_t, int64_t, int64_t, int64_t, int64_t, Operation *>;

/// List scheduling of `body`'s labelled ops: ready ones (their labelled
/// producers placed) by `key`; unlabelled producers placed just before the
/// first op that reads them; the rest (unlabelled ops, the return) last.
void listSchedule(Block &body, const DenseMap<Operation *, int64_t> &label,
                  const std::function<Key(Operation *)> &key) {
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
  std::set<Key> ready;
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
    Operation *op = std::get<6>(*ready.begin());
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

struct PipelineSchedule : public mlir::loom::impl::PipelineScheduleBase<PipelineSchedule> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    StringRef kind = schedule;
    int64_t chunks = 1;
    if (kind.consume_front("interleaved:") && (kind.getAsInteger(10, chunks) || chunks < 2)) {
      module.emitError() << "loom-pipeline-schedule: interleaved:V needs V, the model chunks a "
                            "stage holds, of at least 2";
      return signalPassFailure();
    }
    if (chunks == 1 && schedule != "1f1b" && schedule != "gpipe" && schedule != "zb-h1") {
      module.emitError() << "loom-pipeline-schedule: unknown schedule '" << schedule
                         << "': expected gpipe, 1f1b, zb-h1 or interleaved:V";
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
    int64_t held = 1; // model chunks this stage's program holds
    if (auto pipe = module->getAttrOfType<DenseI64ArrayAttr>(
            LoomDialect::PipelineAttrHelper::getNameStr()))
      st = pipe[0], numStages = pipe[1], held = pipe.size() > 3 ? pipe[3] : 1;
    if (held != chunks) {
      module.emitError() << "loom-pipeline-schedule: this stage's program holds " << held
                         << " model chunk(s) (loom.pipeline); schedule '" << schedule
                         << "' runs " << chunks;
      return signalPassFailure();
    }
    if (st < 0 || numStages < 1 || st >= numStages) {
      module.emitError() << "loom-pipeline-schedule: stage must be in [0, stages)";
      return signalPassFailure();
    }
    Block &body = fb.getBody().front();
    // GPipe's order needs no pairing: every transfer forward comes before
    // every transfer back.
    if (chunks > 1) {
      if (failed(orderInterleaved(body, st, numStages, chunks)))
        return signalPassFailure();
    } else if (schedule != "gpipe") {
      (void)order1f1b(body, st, numStages, schedule == "zb-h1");
    }
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

  /// What both orders start from: each op's micro-batch and program
  /// position, where the forward ends, the micro-batches.
  struct Prepared {
    DenseMap<Operation *, int64_t> label, index;
    int64_t lossIndex = 0, m = 0;
    bool isForward(Operation *op) const { return index.lookup(op) <= lossIndex; }
  };
  static FailureOr<Prepared> prepare(Block &body) {
    for (Operation &op : body.without_terminator())
      if (!isa<AsyncOpInterface, WaitOp>(op) &&
          (hasEffect<MemoryEffects::Write>(&op) || hasEffect<MemoryEffects::Free>(&op))) {
        op.emitRemark() << "loom-pipeline-schedule: @forward_backward writes memory here; "
                           "its order is kept (GPipe's)";
        return failure();
      }
    Prepared p;
    p.label = labelOps(body);
    for (auto [i, op] : llvm::enumerate(body))
      p.index[&op] = int64_t(i);
    // The forward ends where the loss is computed.
    Operation *lossOp = body.getTerminator()->getOperand(0).getDefiningOp();
    p.lossIndex = lossOp && lossOp->getBlock() == &body ? p.index.lookup(lossOp)
                                                        : int64_t(body.getOperations().size());
    for (auto &[op, l] : p.label)
      p.m = std::max(p.m, l + 1);
    return p;
  }

  /// Each labelled op's chunk: its own loom.stage when that chunk is this
  /// stage's, else what it reads (a forward op runs with the latest chunk
  /// it reads, a backward op with the earliest), else what reads it; -1
  /// when nothing says.
  static DenseMap<Operation *, int64_t> chunkOps(Block &body, const Prepared &p, int64_t st,
                                                 int64_t numStages) {
    DenseMap<Operation *, int64_t> chunk;
    auto own = [&](Operation *op) -> int64_t {
      auto a = op->getAttrOfType<IntegerAttr>(LoomDialect::StageAttrHelper::getNameStr());
      return a && a.getInt() % numStages == st ? a.getInt() : -1;
    };
    auto merge = [&](Operation *op, int64_t c, int64_t from) {
      if (from < 0)
        return c;
      if (c < 0)
        return from;
      return p.isForward(op) ? std::max(c, from) : std::min(c, from);
    };
    for (Operation &op : body) {
      int64_t c = own(&op);
      if (c < 0)
        for (Value v : op.getOperands())
          if (Operation *def = v.getDefiningOp(); def && def->getBlock() == &body)
            c = merge(&op, c, chunk.lookup(def));
      chunk[&op] = c;
    }
    for (Operation &op : llvm::reverse(body)) {
      if (chunk.lookup(&op) >= 0)
        continue;
      int64_t c = -1;
      for (Value r : op.getResults())
        for (Operation *u : r.getUsers())
          if (u->getBlock() == &body && chunk.lookup(u) >= 0)
            c = c < 0 ? chunk.lookup(u)
                      : (p.isForward(&op) ? std::min(c, chunk.lookup(u))
                                          : std::max(c, chunk.lookup(u)));
      chunk[&op] = c;
    }
    return chunk;
  }

  /// Interleaved 1F1B on stage `st` (Narayanan et al., "Efficient Large-
  /// Scale Language Model Training on GPU Clusters Using Megatron-LM", SC
  /// 2021, §2.2): the stage holds `chunks` model chunks (st, st + P, ...),
  /// and runs its micro-batches' forwards and backwards on them in
  /// Megatron-LM's order (cost::pipelineOrder). Its transfers stay single
  /// and are ordered by one clock every stage computes alike: each unit's
  /// time when every forward takes 1 and every backward 2
  /// (cost::timePipeline), a transfer at the time its activation or
  /// gradient is computed (ties by direction, micro-batch, chunk). Every
  /// stage meets the transfers it shares with a neighbour in that one
  /// order, and each transfer's data depends only on earlier ones, so no
  /// stage waits on a neighbour that waits on it, whatever the real times.
  LogicalResult orderInterleaved(Block &body, int64_t st, int64_t numStages, int64_t chunks) {
    FailureOr<Prepared> prep = prepare(body);
    if (failed(prep))
      return body.getParentOp()->emitError()
             << "loom-pipeline-schedule: the interleaved order cannot keep autodiff's "
                "order; it needs a @forward_backward that writes no memory";
    const Prepared &p = *prep;
    cost::PipelineShape shape{numStages, chunks, p.m, "interleaved"};
    if (std::optional<std::string> err = cost::checkPipelineShape(shape))
      return body.getParentOp()->emitError() << "loom-pipeline-schedule: " << *err;
    std::vector<std::vector<cost::PipeUnit>> order = cost::pipelineOrder(shape);
    if (!cost::timePipeline(
            order, numStages,
            [](const cost::PipeUnit &u) { return u.work == cost::PipeWork::Forward ? 1.0 : 2.0; },
            0))
      return body.getParentOp()->emitError()
             << "loom-pipeline-schedule: the interleaved order waits on itself";
    std::map<std::tuple<int64_t, int64_t, bool>, std::pair<double, double>> when;
    for (auto &units : order)
      for (const cost::PipeUnit &u : units)
        when[{u.microBatch, u.chunk, u.work != cost::PipeWork::Forward}] = {u.start, u.end};
    DenseMap<Operation *, int64_t> chunk = chunkOps(body, p, st, numStages);
    int64_t last = numStages * chunks - 1;
    // A transfer's clock: (time, direction, micro-batch, sending chunk).
    auto transfer = [&](P2POp t) -> std::optional<Key> {
      int64_t l = p.label.lookup(t), c = chunk.lookup(t);
      bool fwd = p.isForward(t);
      // The chunk that computes what moves: a forward's sender is the
      // previous chunk when this one receives; a backward's the next.
      int64_t from = t.getInput() ? c : (fwd ? c - 1 : c + 1);
      auto it = when.find({l, from, !fwd});
      if (l < 0 || c < 0 || from < 0 || from > last || it == when.end())
        return std::nullopt;
      return Key{it->second.second, 0, fwd ? 0 : 1, l, from, p.index.lookup(t), t};
    };
    std::optional<std::string> bad;
    auto key = [&](Operation *op) -> Key {
      int64_t l = p.label.lookup(op), i = p.index.lookup(op);
      if (l < 0)
        return Key{-1, 0, 0, 0, 0, i, op};
      if (auto t = dyn_cast<P2POp>(op)) {
        if (std::optional<Key> k = transfer(t))
          return *k;
        bad = "a transfer whose micro-batch or chunk is not known";
      }
      if (auto w = dyn_cast<WaitOp>(op)) // a transfer's wait: just after it
        for (Value tok : w.getTokens())
          if (auto t = tok.getDefiningOp<P2POp>())
            if (std::optional<Key> k = transfer(t))
              return Key{std::get<0>(*k), 0, std::get<2>(*k), std::get<3>(*k), std::get<4>(*k),
                         i, op};
      int64_t c = chunk.lookup(op);
      if (c < 0) // nothing says which chunk: as soon as it can
        return Key{-1, 0, 0, 0, 0, i, op};
      auto it = when.find({l, c, !p.isForward(op)});
      if (it == when.end()) {
        bad = "an op of a micro-batch or chunk this stage does not run";
        return Key{-1, 0, 0, 0, 0, i, op};
      }
      return Key{it->second.first, 1, 0, 0, 0, i, op};
    };
    listSchedule(body, p.label, key);
    if (bad)
      return body.getParentOp()->emitError() << "loom-pipeline-schedule: " << *bad;
    return success();
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
    FailureOr<Prepared> prep = prepare(body);
    if (failed(prep))
      return failure();
    const DenseMap<Operation *, int64_t> &label = prep->label, &index = prep->index;
    int64_t lossIndex = prep->lossIndex, m = prep->m;
    // Each micro-batch's forward and backward get their place in the
    // stage's sequence.
    int64_t warmup = std::min(numStages - st - 1, m);
    DenseSet<Operation *> inputGrad = zeroBubble ? inputGradients(body, label, index, lossIndex)
                                                 : DenseSet<Operation *>();
    // Each micro-batch's forward, backward (and ZB-H1's weight part) at its
    // place in the stage's sequence: cost::pipelineOrder, the order the
    // step's prediction times too.
    cost::PipelineShape shape{numStages, 1, std::max<int64_t>(m, 1),
                              zeroBubble ? "zb-h1" : "1f1b"};
    std::map<std::pair<int64_t, cost::PipeWork>, int64_t> position;
    std::vector<std::vector<cost::PipeUnit>> order = cost::pipelineOrder(shape);
    for (auto [i, u] : llvm::enumerate(order[size_t(st)]))
      position[{u.microBatch, u.work}] = int64_t(i);
    auto slot = [&](Operation *op) -> int64_t {
      int64_t l = label.lookup(op);
      if (l < 0)
        return -1;
      cost::PipeWork w = index.lookup(op) <= lossIndex ? cost::PipeWork::Forward
                         : zeroBubble && !inputGrad.contains(op) ? cost::PipeWork::Weight
                                                                 : cost::PipeWork::Backward;
      return position.at({l, w});
    };

    DenseSet<Operation *> forward;
    for (auto [op, i] : index)
      if (i <= lossIndex)
        forward.insert(op);
    listSchedule(body, label, [&](Operation *op) {
      return Key{double(slot(op)), 0, 0, 0, 0, index.lookup(op), op};
    });
    pairTransfers(body, label, forward, warmup);
    return success();
  }
};

} // namespace
