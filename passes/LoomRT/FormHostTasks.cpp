//===- FormHostTasks.cpp - loom-form-host-tasks: the CPU's work on a thread -===//
//
// With --host-thread, the CPU's optimizer updates of a lowered step run on
// the step's host thread (`loomrt.host_task`), so the thread that issues
// the step never blocks on a gradient's copy (docs/codegen.md, "Host
// tasks"). Split out of the conversion (issue 42): it sees loomrt IR only.
//
//===----------------------------------------------------------------------===//
#include "dialects/Loom/LoomDialect.h"
#include "loom/Passes/LoomRT.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

namespace mlir::loom {
#define GEN_PASS_DEF_FORMHOSTTASKS
#include "passes/LoomRT/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;
namespace rt = mlir::loomrt;

namespace {

/// A buffer's root, by which tasks and releases compare buffers.
Value rootOf(Value v) { return rt::bufferRoot(v); }

/// The role of the stream an op runs on (its stream operand), if any.
std::optional<rt::StreamRole> roleOf(Operation *op) {
  for (Value v : op->getOperands())
    if (isa<rt::StreamType>(v.getType()))
      if (auto s = v.getDefiningOp<rt::StreamOp>())
        return s.getRole();
  return std::nullopt;
}

/// What a host task wrote, for the question "does this op touch it": the
/// globals by symbol (each use takes a fresh `loomrt.global`), the other
/// buffers by their root.
struct Written {
  llvm::DenseSet<Attribute> globals;
  llvm::DenseSet<Value> roots;
  void add(Value v) {
    Value r = rootOf(v);
    if (auto g = r.getDefiningOp<rt::GlobalOp>())
      globals.insert(g.getNameAttr());
    else
      roots.insert(r);
  }
  /// Every buffer `op` and the ops inside it take.
  void addBuffersOf(Operation *op) {
    op->walk([&](Operation *in) {
      for (Value v : in->getOperands())
        if (isa<rt::BufferType>(v.getType()))
          add(v);
    });
  }
  bool touches(Operation *op) const {
    return llvm::any_of(op->getOperands(), [&](Value v) {
      if (!isa<rt::BufferType>(v.getType()))
        return false;
      Value r = rootOf(v);
      if (auto g = r.getDefiningOp<rt::GlobalOp>())
        return globals.contains(g.getNameAttr());
      return roots.contains(r);
    });
  }
};

/// How many host tasks after its own the compute stream waits for an
/// offloaded gradient's copy inside the backward, and releases the
/// gradient, in an interleaved plan (the planner sees the memory this
/// frees and fills it with resident state): enough that the copy is
/// mostly done by then, few enough that the memory serves the rest of the
/// backward. Other modes keep offloaded gradients to the backward's end:
/// their step has the memory, and when every gradient is copied PCIe is
/// slower than the backward, so an earlier wait would stall it (6.7B Llama
/// on the H100 description: the last gradient 0.21 s -> 0.31 s).
constexpr size_t kReleaseWindow = 4;

/// Ops that only name things or order the issuing thread's own work: a
/// host task may be issued after them without changing what either does.
bool neutral(Operation *op) {
  return isa<rt::CommentOp, rt::AllocOp, rt::GlobalOp, rt::ViewOp, rt::RankViewOp, rt::FreeOp,
             rt::StreamOp, rt::CommOp, rt::RecordOp, rt::WaitOp>(op);
}

/// The optimizer's work on the host: updates and the casts of their
/// refreshed weights. (A graph's row gathers on the host stay where they
/// are: the step waits for each one's upload at once.)
bool isHostCall(Operation *op) {
  return isa<rt::AdamOp, rt::SgdOp, rt::CastOp>(op) && roleOf(op) == rt::StreamRole::host;
}

/// The ops of `ops` (a block, in order) that go into host tasks: the host
/// calls, the syncs they wait behind and the copies of what they wrote.
llvm::DenseSet<Operation *> boundOps(ArrayRef<Operation *> ops) {
  llvm::DenseSet<Operation *> bound;
  Written written;
  for (auto [i, op] : llvm::enumerate(ops)) {
    if (isHostCall(op)) {
      bound.insert(op);
      written.addBuffersOf(op);
      continue;
    }
    // The host waits for a copy the CPU reads next: the task waits instead.
    if (isa<rt::SyncOp>(op)) {
      for (size_t j = i + 1; j < ops.size(); ++j) {
        if (isHostCall(ops[j])) {
          bound.insert(op);
          break;
        }
        if (!neutral(ops[j]) && !isa<rt::SyncOp>(ops[j]))
          break;
      }
      continue;
    }
    // A copy of what a task wrote (the refreshed weights to the device):
    // issued by the task, with its stream's wait before and event after.
    auto copy = dyn_cast<rt::MemcpyOp>(op);
    if (!copy || !written.touches(copy))
      continue;
    bound.insert(op);
    if (i > 0)
      if (auto w = dyn_cast<rt::WaitOp>(ops[i - 1]); w && w.getStream() == copy.getStream())
        bound.insert(w);
    if (i + 1 < ops.size())
      if (auto r = dyn_cast<rt::RecordOp>(ops[i + 1]); r && r.getStream() == copy.getStream())
        bound.insert(r);
  }
  return bound;
}

/// Joins in `blk`, and the host buffers the tasks use released after the
/// join that follows the last task using them (a release may sit before
/// that task: the run moved past it). `taskResults`: the tasks' events.
void insertJoins(Block &blk, const llvm::DenseSet<Value> &taskResults) {
  OpBuilder b(blk.getParentOp()->getContext());
  llvm::DenseMap<Value, Operation *> lastTask;
  for (Operation &op : blk)
    if (auto t = dyn_cast<rt::HostTaskOp>(op))
      t.walk([&](Operation *in) {
        for (Value v : in->getOperands())
          if (isa<rt::BufferType>(v.getType()))
            lastTask[rootOf(v)] = t;
      });
  llvm::DenseSet<Operation *> seen, joined; // tasks issued; those joined
  bool pending = false;
  SmallVector<std::pair<rt::FreeOp, Operation *>> deferred;
  Written unjoined; // what the tasks issued since the last join use
  for (Operation &op : llvm::make_early_inc_range(blk)) {
    if (isa<rt::HostTaskOp>(op)) {
      pending = true;
      seen.insert(&op);
      unjoined.addBuffersOf(&op);
      continue;
    }
    if (auto f = dyn_cast<rt::FreeOp>(op)) {
      Value r = rootOf(f.getBuffer());
      auto alloc = r.getDefiningOp<rt::AllocOp>();
      Operation *t = lastTask.lookup(r);
      if (t && !joined.contains(t) && (!alloc || alloc.getHost()))
        deferred.push_back({f, t});
      continue;
    }
    if (!pending)
      continue;
    bool needs = isa<func::ReturnOp>(op) ||
                 llvm::any_of(op.getOperands(), [&](Value v) { return taskResults.contains(v); }) ||
                 (!neutral(&op) && unjoined.touches(&op));
    if (!needs)
      continue;
    b.setInsertionPoint(&op);
    rt::JoinOp::create(b, op.getLoc());
    pending = false;
    unjoined = Written();
    joined.insert(seen.begin(), seen.end());
    SmallVector<std::pair<rt::FreeOp, Operation *>> later;
    for (auto [f, t] : deferred)
      if (seen.contains(t))
        f->moveBefore(&op);
      else
        later.push_back({f, t});
    deferred = std::move(later);
  }
}

/// The device buffers the copy behind `event` reads (the record that
/// makes `event` follows it on its stream), by root.
llvm::DenseSet<Value> copiedBuffers(Block &blk, Value event) {
  llvm::DenseSet<Value> roots;
  auto rec = event.getDefiningOp<rt::RecordOp>();
  if (!rec || rec->getBlock() != &blk)
    return roots;
  for (Operation *o = rec->getPrevNode(); o; o = o->getPrevNode()) {
    if (!llvm::is_contained(o->getOperands(), rec.getStream()))
      continue;
    if (isa<rt::MemcpyOp>(o))
      for (Value v : o->getOperands())
        if (isa<rt::BufferType>(v.getType()))
          if (auto a = rootOf(v).getDefiningOp<rt::AllocOp>(); a && !a.getHost())
            roots.insert(rootOf(v));
    break;
  }
  return roots;
}

/// Runs of `bound` ops (in `ops`, a block in order) with neutral ops
/// between them, one update each (a wait for the next gradient starts the
/// next run), so each is queued as soon as the issuing thread has passed it.
SmallVector<SmallVector<Operation *>> hostRuns(ArrayRef<Operation *> ops,
                                               const llvm::DenseSet<Operation *> &bound) {
  SmallVector<SmallVector<Operation *>> runs(1);
  for (Operation *op : ops) {
    if (bound.contains(op)) {
      if (isa<rt::SyncOp>(op) && llvm::any_of(runs.back(), isHostCall))
        runs.emplace_back();
      runs.back().push_back(op);
    } else if (!neutral(op) && !runs.back().empty()) {
      runs.emplace_back();
    }
  }
  if (runs.back().empty())
    runs.pop_back();
  return runs;
}

/// The device buffers a host task's sync releases: those the issuing
/// thread freed right after it (what waited for it) and, further down,
/// the copy's other device buffers.
struct Release {
  Value event;
  Location loc;
  SmallVector<rt::FreeOp> frees;
  size_t task; // the task whose sync it was (its index in `tasks`)
  // Releases further down of device buffers the copy reads: a buffer
  // another transfer reads too, whose wait comes later (a ZeRO-3
  // gradient shard is the reduce-scatter's result and the copy's
  // source; its release follows the compute stream's wait for the
  // reduce-scatter, a layer later). They keep their place, or move to
  // the release point if that is later, but never come before a wait
  // for the copy: without one the next reduce-scatter wrote the shard
  // while the copy still read it (13B on 2 H200s: cpu and interleaved
  // plans parted at step 3).
  SmallVector<rt::FreeOp> later;
};
Release releaseOf(Block &blk, rt::SyncOp sync, size_t task) {
  Release rel{sync.getEvent(), sync.getLoc(), {}, task, {}};
  for (Operation *o = sync->getNextNode(); o && isa<rt::FreeOp, rt::CommentOp>(o);
       o = o->getNextNode())
    if (auto f = dyn_cast<rt::FreeOp>(o)) {
      auto alloc = rootOf(f.getBuffer()).getDefiningOp<rt::AllocOp>();
      if (alloc && !alloc.getHost())
        rel.frees.push_back(f);
    }
  llvm::DenseSet<Value> read = copiedBuffers(blk, sync.getEvent());
  for (Operation *o = sync->getNextNode(); o; o = o->getNextNode())
    if (auto f = dyn_cast<rt::FreeOp>(o);
        f && read.contains(rootOf(f.getBuffer())) && !llvm::is_contained(rel.frees, f))
      rel.later.push_back(f);
  return rel;
}

/// Moves the CPU's work of `fn` to host tasks (`loomrt.host_task`), so the
/// thread that issues the step never blocks on a gradient's copy or runs an
/// update itself: each run of host-stream calls, with the host's waits for
/// the copies they read and the copies of what they wrote (the refreshed
/// weights, with their stream's wait before and event after), becomes one
/// task, issued where its last op was. The issuing thread keeps what orders
/// its own work: a device buffer that waited for a moved sync is released
/// after the compute stream waits for the same event; a host buffer a task
/// uses goes back after the next `loomrt.join`, which precedes the first
/// use of a task's event outside tasks, anything else that touches what a
/// task wrote, and the return.
void formHostTasks(func::FuncOp fn) {
  Block &blk = fn.getBody().front();
  SmallVector<Operation *> ops;
  for (Operation &op : blk)
    ops.push_back(&op);
  llvm::DenseSet<Operation *> bound = boundOps(ops);
  if (bound.empty())
    return;

  SmallVector<SmallVector<Operation *>> runs = hostRuns(ops, bound);

  MLIRContext *ctx = fn.getContext();
  OpBuilder b(ctx);
  // Positions before anything moves (isBeforeInBlock after moves would
  // walk the block each time: the planner lowers hundreds of candidates).
  llvm::DenseMap<Operation *, size_t> pos;
  Operation *backwardDone = nullptr;
  for (Operation *op : ops) {
    pos[op] = pos.size();
    if (isa<rt::BackwardDoneOp>(op))
      backwardDone = op;
  }
  auto inBackward = [&](Operation *op) {
    return backwardDone && pos.lookup(op) < pos.lookup(backwardDone);
  };
  Value compute;
  for (Operation *op : ops)
    if (auto s = dyn_cast<rt::StreamOp>(op); s && s.getRole() == rt::StreamRole::compute)
      compute = s;
  llvm::DenseSet<Value> taskResults;
  auto computeStream = [&]() -> Value {
    if (!compute) {
      b.setInsertionPointToStart(&blk);
      compute = rt::StreamOp::create(b, fn.getLoc(), rt::StreamType::get(ctx),
                                     rt::StreamRole::compute);
    }
    return compute;
  };
  SmallVector<Release> releases;
  SmallVector<rt::HostTaskOp> tasks;
  SmallVector<Operation *> taskEnds;
  for (SmallVector<Operation *> &r : runs) {
    // What leaves the run must be an event (a record the issuing thread
    // waits for); anything else stays where it is, run by the issuing
    // thread as before.
    llvm::DenseSet<Operation *> inRun(r.begin(), r.end());
    SmallVector<Value> escaping;
    for (Operation *op : r)
      for (Value v : op->getResults())
        if (llvm::any_of(v.getUsers(), [&](Operation *u) { return !inRun.contains(u); }))
          escaping.push_back(v);
    if (llvm::any_of(escaping, [](Value v) { return !isa<rt::EventType>(v.getType()); }))
      continue;
    // The compute stream waits for a moved sync's event, so the device
    // buffers released after it (the gradient the copy read) are not
    // reused before the copy has read them. Inside the backward the wait
    // comes kReleaseWindow tasks later (placed below): waiting at once
    // would stall the backward behind the copies, which PCIe makes slower
    // than the backward makes gradients; waiting at the backward's end
    // would keep every offloaded gradient on the device until then.
    for (Operation *op : r)
      if (auto sync = dyn_cast<rt::SyncOp>(op)) {
        Release rel = releaseOf(blk, sync, tasks.size());
        if (inBackward(sync)) {
          releases.push_back(std::move(rel));
          continue;
        }
        b.setInsertionPoint(sync);
        rt::WaitOp::create(b, sync.getLoc(), computeStream(), sync.getEvent());
        for (rt::FreeOp f : rel.frees)
          f->moveBefore(sync);
        for (rt::FreeOp f : rel.later) {
          b.setInsertionPoint(f);
          rt::WaitOp::create(b, sync.getLoc(), computeStream(), sync.getEvent());
        }
      }
    Operation *last = r.back();
    b.setInsertionPointAfter(last);
    auto task = rt::HostTaskOp::create(
        b, last->getLoc(), SmallVector<Type>(escaping.size(), rt::EventType::get(ctx)));
    Block *body = b.createBlock(&task.getBody());
    for (Operation *op : r)
      op->moveBefore(body, body->end());
    b.setInsertionPointToEnd(body);
    rt::YieldOp::create(b, last->getLoc(), escaping);
    for (auto [v, res] : llvm::zip(escaping, task.getResults())) {
      v.replaceUsesWithIf(res, [&](OpOperand &u) { return u.getOwner()->getParentOp() != task; });
      taskResults.insert(res);
    }
    tasks.push_back(task);
    taskEnds.push_back(last); // where the task is: after its run's last op
  }
  // The releases inside the backward: before the task kReleaseWindow after
  // theirs, if it too is inside the backward, else at the backward's end.
  auto mode = fn->getAttrOfType<OptimizerOffloadAttr>(
      LoomDialect::OptimizerOffloadAttrHelper::getNameStr());
  size_t window = mode && mode.getMode() == OffloadMode::subgroups ? kReleaseWindow : tasks.size();
  for (Release &rel : releases) {
    size_t k = rel.task + window;
    bool inWindow = k < tasks.size() && inBackward(taskEnds[k]);
    Operation *at = inWindow ? tasks[k].getOperation() : backwardDone->getNextNode();
    size_t atPos = inWindow ? pos.lookup(taskEnds[k]) : pos.lookup(backwardDone);
    b.setInsertionPoint(at);
    rt::WaitOp::create(b, rel.loc, computeStream(), rel.event);
    for (rt::FreeOp f : rel.frees)
      f->moveBefore(at);
    // (Only within the window: moved to the backward's end, every shard
    // of a cpu plan would stay on the device; waiting in place costs at
    // most the copy's remainder, as long as the backward is ahead of it.)
    for (rt::FreeOp f : rel.later) {
      if (inWindow && window == kReleaseWindow && pos.lookup(f) <= atPos) {
        f->moveBefore(at);
        continue;
      }
      b.setInsertionPoint(f);
      rt::WaitOp::create(b, rel.loc, computeStream(), rel.event);
    }
  }

  insertJoins(blk, taskResults);
}


struct FormHostTasksPass : mlir::loom::impl::FormHostTasksBase<FormHostTasksPass> {
  using Base::Base;
  void runOnOperation() override { mlir::loom::formHostTasks(getOperation()); }
};

} // namespace

void mlir::loom::formHostTasks(ModuleOp module) {
  for (func::FuncOp fn : module.getOps<func::FuncOp>())
    if (!fn.isExternal() &&
        !fn.walk([](rt::HostTaskOp) { return WalkResult::interrupt(); }).wasInterrupted())
      ::formHostTasks(fn);
}
