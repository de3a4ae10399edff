//===- OffloadOptimizer.cpp - loom-offload-optimizer ----------------------===//
//
// Where each parameter's optimizer update runs, and the copies that make it
// possible. Three placements, per parameter:
//
//  * gpu    - state resident in device memory, Adam on the GPU (no offload);
//  * cpu    - master weights and Adam state in pinned host memory, Adam on
//             the CPU (ZeRO-Offload, Ren et al. ATC 2021, §4): the gradient
//             is copied to the host as soon as the backward produces it, so
//             the copies overlap the rest of the backward, and the CPU
//             update of a subgroup starts as soon as its gradients have
//             landed (while the GPU is still running the backward);
//  * stream - state in pinned host memory, copied to the device right after
//             the subgroup's gradients exist (overlapping the rest of the
//             backward), updated there, copied back (Deep Optimizer States
//             §3: the GPU path of the interleaved schedule).
//
// Offloaded parameters get a device working copy `@P.work` that the forward
// and backward read. When the forward only reads a parameter through a cast
// to bf16 (loom-mixed-precision) the working copy is bf16, the gradient
// moves as bf16, and the update writes the refreshed bf16 weights in the
// same pass over memory (the mixed-precision parameter refresh): 2 bytes per
// parameter each way over PCIe instead of 4.
//
// Modes: `cpu` (every parameter on the CPU), `static:R` (DeepSpeed's fixed
// split: the first parameters holding a fraction R of the elements on the
// GPU, the rest on the CPU) and `subgroups` (each loom.subgroup's `update`,
// as loom-interleave-offload plans it or a user writes it).
//
// To put copies and updates in the middle of the backward, the pass inlines
// @forward_backward into @train_step. Race freedom follows from the stream
// rules code generation implements (docs/codegen.md): a copy starts after
// the compute work issued before it (so it never overwrites memory the
// backward still reads, and copies the optimizer's finished writes), a
// buffer a copy reads is freed only after the copy's wait, and the host
// waits for a copy into host memory before the CPU reads it.
//
//===----------------------------------------------------------------------===//
#include "loom/Passes/Loom.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

namespace mlir::loom {
#define GEN_PASS_DEF_OFFLOADOPTIMIZER
#include "passes/Loom/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

/// `t` in pinned host memory.
RankedTensorType pinned(Type t) { return withMemSpace(cast<RankedTensorType>(t), MemSpace::pinned); }
/// `t` in device memory (no placement).
RankedTensorType unpinned(Type t) {
  auto rt = cast<RankedTensorType>(t);
  return RankedTensorType::get(rt.getShape(), rt.getElementType());
}
RankedTensorType withElement(Type t, Type elt) {
  auto rt = cast<RankedTensorType>(t);
  return RankedTensorType::get(rt.getShape(), elt, rt.getEncoding());
}

/// One parameter's update and where it runs.
struct Update {
  ParamOp param;
  FlatSymbolRefAttr sym;
  AdamOp adam;
  UpdatePlace where = UpdatePlace::gpu;
  int group = 0;        // updates of one group wait for their gradients together
  Value grad;           // what leaves the backward (bf16 when it can)
  Operation *ready = nullptr; // the op after which the gradient exists
  SmallVector<Value> gradTokens;
  /// Reads of the updated weights after the update (ZeRO 1-2: the
  /// all-gather that refreshes the whole parameters from the shard).
  SmallVector<Operation *> readsAfter;
};

struct OffloadOptimizer
    : public mlir::loom::impl::OffloadOptimizerBase<OffloadOptimizer> {
  using Base::Base;

  void runOnOperation() override {
    if (failed(applyOffload(getOperation(), mode, hostThread)))
      signalPassFailure();
  }
};

LogicalResult fail(Operation *at, const Twine &msg) {
  at->emitError() << "loom-offload-optimizer: " << msg;
  return failure();
}

} // namespace

namespace mlir::loom {

void inlineCall(func::CallOp call, func::FuncOp callee) {
  OpBuilder b(call);
  IRMapping map;
  Block &body = callee.getBody().front();
  for (auto [a, v] : llvm::zip(body.getArguments(), call.getOperands()))
    map.map(a, v);
  for (Operation &op : body.without_terminator())
    b.clone(op, map);
  for (auto [r, v] : llvm::zip(call.getResults(), body.getTerminator()->getOperands()))
    r.replaceAllUsesWith(map.lookupOrDefault(v));
  call.erase();
}

FailureOr<SmallVector<UpdatePlace>> offloadPlaces(ModuleOp module, OptimizerOffloadAttr mode,
                                                  ArrayRef<FlatSymbolRefAttr> params) {
  SmallVector<UpdatePlace> where(params.size(), UpdatePlace::cpu);
  if (mode.getMode() == OffloadMode::cpu)
    return where;
  if (mode.getMode() == OffloadMode::static_ratio) {
    double ratio = mode.getGpuFraction().convertToDouble();
    // In declaration order, as DeepSpeed fills its GPU share.
    // Over what the step updates (with data parallelism: this rank's
    // shards, not the whole parameters they partition).
    llvm::DenseSet<StringAttr> updated;
    for (FlatSymbolRefAttr s : params)
      updated.insert(s.getAttr());
    SmallVector<ParamOp> order;
    for (ParamOp p : module.getOps<ParamOp>())
      if (updated.contains(p.getSymNameAttr()))
        order.push_back(p);
    int64_t total = 0, kept = 0;
    for (ParamOp p : order)
      total += cast<RankedTensorType>(p.getType()).getNumElements();
    llvm::DenseSet<StringAttr> onGpu;
    for (ParamOp p : order) {
      int64_t n = cast<RankedTensorType>(p.getType()).getNumElements();
      if (double(kept + n) > ratio * double(total) + 0.5)
        break;
      kept += n;
      onGpu.insert(p.getSymNameAttr());
    }
    for (auto [i, s] : llvm::enumerate(params))
      if (onGpu.contains(s.getAttr()))
        where[i] = UpdatePlace::gpu;
    return where;
  }
  llvm::DenseMap<StringAttr, UpdatePlace> of;
  for (SubgroupOp sg : module.getOps<SubgroupOp>()) {
    std::optional<UpdatePlace> place = sg.getPlace();
    if (!place)
      return fail(sg, "mode=subgroups needs an 'update' on every loom.subgroup (run "
                      "loom-interleave-offload, or write gpu, stream or cpu)");
    UpdatePlace w = *place;
    for (Attribute a : sg.getParams())
      of[cast<FlatSymbolRefAttr>(a).getAttr()] = w;
  }
  for (auto [i, s] : llvm::enumerate(params)) {
    auto it = of.find(s.getAttr());
    if (it == of.end())
      return fail(module, "mode=subgroups: '@" + s.getValue() +
                              "' belongs to no loom.subgroup (run loom-optimizer-subgroups)");
    where[i] = it->second;
  }
  return where;
}

/// Streaming DiLoCo's functions (loom-diloco): its start, outer steps,
/// exchanges and merges.
bool dilocoFunction(func::FuncOp fn) {
  return fn && (fn.getName() == LoomDialect::kDilocoStart ||
                fn->hasAttr(LoomDialect::DilocoAttrHelper::getNameStr()));
}

/// The refreshed master weights `fresh` (host memory) on their way to the
/// device working copy `workSym`: cast to its element type (bf16) where
/// they differ, then copied up on h2d; the ops made are appended to `made`.
CopyOp refreshUp(OpBuilder &b, Location loc, ModuleOp module, Value fresh,
                 FlatSymbolRefAttr workSym, SmallVectorImpl<Operation *> &made) {
  auto workType = cast<RankedTensorType>(module.lookupSymbol<StateOp>(workSym).getType());
  if (workType.getElementType() != cast<RankedTensorType>(fresh.getType()).getElementType()) {
    fresh = CastOp::create(b, loc, pinned(workType), fresh);
    made.push_back(fresh.getDefiningOp());
  }
  auto up = CopyOp::create(b, loc, workType, TokenType::get(b.getContext()), fresh, ValueRange{},
                           StreamAttr::get(b.getContext(), StreamKind::h2d, 0));
  made.push_back(up);
  return up;
}

/// The ops that read a loaded buffer in place: the load's users, through
/// the ops the lowering makes aliases of their input (reshapes, shards,
/// slices).
void readersOf(Value v, SmallVectorImpl<Operation *> &out) {
  for (Operation *user : v.getUsers()) {
    out.push_back(user);
    if (isa<ReshapeOp, ShardOp, SliceOp>(user))
      readersOf(user->getResult(0), out);
  }
}

/// Moves each group of CPU-update ops (a wait for its gradients, the
/// updates, their stores and casts, the refresh copies), in order, to just
/// after the last op it depends on: what defines its operands (the
/// gradients' copies; the loads of the master weights and moments move
/// with it), every reader of the working copies it refreshes (the copy
/// writes their buffer), and the group before it (the host thread runs
/// them in order). `late` are reads meant to see the refresh (they stay
/// after it, at the end).
void hoistHostUpdates(Block &blk, ArrayRef<SmallVector<Operation *>> groups,
                      const llvm::SmallPtrSetImpl<Operation *> &late) {
  // The loads of each symbol, found once (the step is long).
  llvm::DenseMap<StringAttr, SmallVector<LoadOp>> loadsOf;
  for (Operation &o : blk)
    if (auto l = dyn_cast<LoadOp>(o))
      loadsOf[l.getNameAttr().getAttr()].push_back(l);
  // Where each op is, computed once (moving ops would make each
  // isBeforeInBlock a walk of the block): the original index, and for an
  // op already moved, the index of the op its group was moved after.
  llvm::DenseMap<Operation *, size_t> pos;
  for (Operation &o : blk)
    pos[&o] = pos.size();
  Operation *prev = nullptr;
  size_t prevPos = 0;
  for (const SmallVector<Operation *> &g : groups) {
    llvm::SmallPtrSet<Operation *, 16> in(g.begin(), g.end());
    SmallVector<Operation *> loads; // moved with the group
    Operation *after = prev;
    size_t afterPos = prevPos;
    // Strictly later only: on a tie the group before stays first.
    auto later = [&](Operation *op) {
      if (!op || op->getBlock() != &blk)
        return;
      size_t p = pos.lookup(op);
      if (!after || p > afterPos) {
        after = op;
        afterPos = p;
      }
    };
    for (Operation *op : g) {
      for (Value v : op->getOperands()) {
        Operation *def = v.getDefiningOp();
        if (!def || in.contains(def))
          continue;
        if (auto l = dyn_cast<LoadOp>(def); l && l->hasOneUse()) {
          loads.push_back(l);
          continue;
        }
        later(def);
      }
      if (auto copy = dyn_cast<CopyOp>(op))
        for (Operation *st : copy.getResult().getUsers())
          if (auto store = dyn_cast<StoreOp>(st))
            for (LoadOp l : loadsOf.lookup(store.getNameAttr().getAttr())) {
              SmallVector<Operation *> readers;
              readersOf(l.getResult(), readers);
              for (Operation *r : readers)
                if (!late.contains(r) && !in.contains(r))
                  later(blk.findAncestorOpInBlock(*r));
            }
    }
    if (!after)
      continue;
    Operation *at = after;
    for (Operation *op : llvm::concat<Operation *const>(loads, g)) {
      op->moveAfter(at);
      pos[op] = afterPos;
      at = op;
    }
    prev = at;
    prevPos = afterPos;
  }
}

/// Every update of @train_step, the symbol its weights are loaded from (a
/// parameter, or a ZeRO-3 shard of a bucket) and where `mode` places it.
FailureOr<SmallVector<Update>> collectUpdates(ModuleOp module, OptimizerOffloadAttr mode,
                                              func::FuncOp step, func::FuncOp fb) {
  // Its gradient comes from @forward_backward, directly or as a slice of a
  // reduced bucket.
  SmallVector<FlatSymbolRefAttr> syms;
  SmallVector<AdamOp> adams;
  for (Operation &op : step.getBody().front()) {
    if (isa<SgdOp>(op))
      return fail(&op, "offloading updates Adam's state; use --optimizer=adam|adamw");
    auto adam = dyn_cast<AdamOp>(op);
    if (!adam)
      continue;
    auto load = adam.getParam().getDefiningOp<LoadOp>();
    if (!load || !adam.getGrad().hasOneUse())
      return fail(adam, "an update's weights must be loaded from their symbol and its gradient "
                        "used by it alone (ZeRO stages 1 and 2: run loom-data-parallel with "
                        "master-shards)");
    syms.push_back(load.getNameAttr());
    adams.push_back(adam);
  }
  if (adams.empty())
    return fail(step, "has no loom.adam to offload (--optimizer=adam|adamw)");
  FailureOr<SmallVector<UpdatePlace>> where = offloadPlaces(module, mode, syms);
  if (failed(where))
    return failure();

  // Subgroups group the waits of CPU updates; without them each parameter
  // is its own group.
  llvm::DenseMap<StringAttr, int> groupOf;
  int groups = 0;
  for (SubgroupOp sg : module.getOps<SubgroupOp>()) {
    for (Attribute a : sg.getParams())
      groupOf[cast<FlatSymbolRefAttr>(a).getAttr()] = groups;
    ++groups;
  }

  SmallVector<Update> updates;
  for (auto [i, sym] : llvm::enumerate(syms)) {
    Update u;
    u.sym = sym;
    u.where = (*where)[i];
    u.param = module.lookupSymbol<ParamOp>(sym);
    if (!u.param)
      return fail(fb, "'" + sym.getValue() + "' is not a loom.param");
    u.adam = adams[i];
    if (cast<RankedTensorType>(u.param.getType()).getEncoding())
      return fail(u.param, "is placed already");
    auto it = groupOf.find(sym.getAttr());
    u.group = it != groupOf.end() ? it->second : groups + int(i);
    updates.push_back(u);
  }
  return updates;
}

/// The rewrite of @train_step for the updates placed off the device.
struct OffloadRewrite {
  ModuleOp module;
  MLIRContext *ctx;
  Block &blk;
  OpBuilder b;
  InitAttr zeros;
  StreamAttr h2d, d2h;
  Type tok;
  /// Each CPU group moves up to where its gradients land, for the step's
  /// host thread (loomc --host-thread).
  bool hostThread;
  SmallVector<Value> refreshTokens, backTokens;
  SmallVector<std::pair<Value, FlatSymbolRefAttr>> backStores, refreshStores;

  OffloadRewrite(ModuleOp module, Block &blk, bool hostThread)
      : module(module), ctx(module.getContext()), blk(blk), b(module.getContext()),
        zeros(InitAttr::get(ctx, InitKind::zeros, APFloat(0.0), APFloat(0.0))),
        h2d(StreamAttr::get(ctx, StreamKind::h2d, 0)),
        d2h(StreamAttr::get(ctx, StreamKind::d2h, 0)), tok(TokenType::get(ctx)),
        hostThread(hostThread) {}

  /// The device working copy `@P.work` of an offloaded update's weights,
  /// and its type; every read of the weights outside their updates reads
  /// it (made by the first step placed; a second finds it).
  std::pair<FlatSymbolRefAttr, Type> workingCopy(Update &u, RankedTensorType pt) {
    // The working copy: bf16 when every read of the parameter outside its
    // update (the step's forward and backward, and functions such as
    // @forward) is a cast to bf16.
    AdamOp adam = u.adam;
    SmallVector<LoadOp> reads;
    std::string work = (u.sym.getValue() + ".work").str();
    auto workSym = FlatSymbolRefAttr::get(ctx, work);
    auto existing = module.lookupSymbol<StateOp>(workSym);
    // (Not the master weights 1-bit Adam's frozen update reads: that one
    // stays an update, offloadFrozenStep's. Nothing when the working copy
    // exists: the first step placed redirected every function's reads.)
    // DiLoCo's outer steps read the master weights themselves
    // (placeDilocoOnHost).
    if (!existing)
      module.walk([&](LoadOp l) {
        if (dilocoFunction(l->getParentOfType<func::FuncOp>()))
          return;
        if (l.getNameAttr() == u.sym && l.getResult() != adam.getParam() &&
            llvm::none_of(l->getUsers(), [&](Operation *user) {
              auto a = dyn_cast<AdamOp>(user);
              return a && a.getParam() == l.getResult();
            }))
          reads.push_back(l);
      });
    bool bf16 = !reads.empty() && llvm::all_of(reads, [](LoadOp l) {
      return !l->use_empty() && llvm::all_of(l->getUsers(), isBf16Cast);
    });
    Type workType = bf16 ? withElement(pt, BFloat16Type::get(ctx)) : Type(pt);
    if (existing) {
      workType = existing.getType();
      bf16 = cast<RankedTensorType>(workType).getElementType().isBF16();
    } else {
      b.setInsertionPointAfter(u.param);
      auto workState = StateOp::create(b, u.param.getLoc(), b.getStringAttr(work),
                                       TypeAttr::get(workType),
                                       StateRoleAttr::get(ctx, StateRole::other),
                                       FlatSymbolRefAttr(), zeros);
      workState->setAttr(LoomDialect::MirrorOfAttrHelper::getNameStr(), u.sym);
    }
    if (bf16)
      readWorkingCopy(reads, workSym, workType);
    else
      for (LoadOp l : reads)
        l.setNameAttr(workSym);
    return {workSym, workType};
  }

  /// Places one update off the device: its working copy, its master
  /// weights and state in pinned memory, and the copies a streamed update
  /// needs (a CPU update is placed at the end by scheduleCpu).
  LogicalResult place(Update &u) {
    if (u.where == UpdatePlace::gpu)
      return success();
    AdamOp adam = u.adam;
    Location loc = adam.getLoc();
    // (Unpinned: the second step a module has, 1-bit Adam's frozen one at
    // ZeRO 1-2, is placed after the first moved the weights.)
    RankedTensorType pt = unpinned(u.param.getType());

    auto [workSym, workType] = workingCopy(u, pt);
    bool bf16 = cast<RankedTensorType>(workType).getElementType().isBF16();
    // A device refresh loom-working-copies made (the new weights cast and
    // stored to the working copy: a step compiled without offload and
    // offloaded by hand) gives way to the offload's own.
    for (Operation *user : llvm::make_early_inc_range(adam.getNewParam().getUsers())) {
      auto c = dyn_cast<CastOp>(user);
      if (!c || c->use_empty() || !llvm::all_of(c->getUsers(), [&](Operation *s) {
            auto st = dyn_cast<StoreOp>(s);
            return st && st.getNameAttr() == workSym;
          }))
        continue;
      for (Operation *s : llvm::make_early_inc_range(c->getUsers()))
        s->erase();
      c->erase();
    }

    // Master weights and Adam state move to pinned host memory.
    u.param.setTypeAttr(TypeAttr::get(pinned(pt)));
    Value ins[3] = {adam.getParam(), adam.getExpAvg(), adam.getExpAvgSq()};
    for (Value in : ins)
      if (!in.getDefiningOp<LoadOp>())
        return fail(adam, "Adam's operands must be loaded from their symbols");
    // The moments are whatever Adam loads (`P.exp_avg`, or a ZeRO bucket's
    // `zero.bucketK.exp_avg`).
    for (Value in : {ins[1], ins[2]}) {
      auto s = module.lookupSymbol<StateOp>(in.getDefiningOp<LoadOp>().getNameAttr());
      if (!s)
        return fail(adam, "Adam's moments must be loaded from loom.state symbols");
      s.setTypeAttr(TypeAttr::get(pinned(s.getType())));
    }
    for (Value in : ins)
      in.setType(pinned(in.getType()));

    // The gradient leaves the backward as bf16 when it was cast up from
    // bf16 only for the update (the update reads bf16 itself).
    u.grad = adam.getGrad();
    if (auto c = u.grad.getDefiningOp<CastOp>())
      if (cast<RankedTensorType>(c.getInput().getType()).getElementType().isBF16() &&
          u.grad.hasOneUse()) {
        u.grad = c.getInput();
        adam.getGradMutable().assign(u.grad);
        c.erase();
      }
    u.ready = u.grad.getDefiningOp();
    if (u.ready)
      b.setInsertionPointAfter(u.ready);
    else
      b.setInsertionPointToStart(&blk);

    StoreOp stores[3] = {};
    for (int k = 0; k < 3; ++k)
      for (Operation *user : adam->getResult(k).getUsers())
        if (auto st = dyn_cast<StoreOp>(user))
          stores[k] = st;
    // (1-bit Adam's frozen update leaves the variance as it was: no store.)
    bool frozenVariance = adam.getFreezeStepAttr() != nullptr;
    if (!stores[0] || !stores[1] || (!stores[2] && !frozenVariance))
      return fail(adam, "the updated weights and state must be stored");

    if (u.where == UpdatePlace::cpu) {
      // The CPU update moves to the end of the step: what reads its result
      // from the working copy (ZeRO 1-2's all-gather) moves after its
      // refresh.
      for (Operation &op : llvm::make_range(std::next(adam->getIterator()), blk.end()))
        if (auto l = dyn_cast<LoadOp>(op); l && l.getNameAttr() == workSym)
          u.readsAfter.push_back(l);
      // A gradient a collective produced (data parallelism) is copied once
      // the collective is done: its token orders the copy.
      SmallVector<Value> after;
      if (auto async = dyn_cast_or_null<AsyncOpInterface>(u.ready))
        after.push_back(async.getAsyncToken());
      auto copy = CopyOp::create(b, loc, pinned(u.grad.getType()), tok, u.grad, after, d2h);
      u.gradTokens.push_back(copy.getToken());
      adam.getGradMutable().assign(copy.getResult());
      for (Value out : adam->getResults())
        out.setType(pinned(out.getType()));
      return success(); // placed at the end, in gradient order (scheduleCpu)
    }

    // stream: the state comes to the device once the gradients exist (the
    // copies overlap the rest of the backward), Adam runs there after the
    // backward, and the state goes back.
    SmallVector<Value> upTokens;
    for (int k = 0; k < 3; ++k) {
      // Read the state where the copy starts (nothing stores it before the
      // update).
      Operation *load = ins[k].getDefiningOp();
      auto up = CopyOp::create(b, loc, pt, tok, ins[k], ValueRange{}, h2d);
      load->moveBefore(up); // (the load may be the op the builder inserts before)
      adam->setOperand(k == 0 ? 0 : k + 1, up.getResult());
      upTokens.push_back(up.getToken());
    }
    b.setInsertionPoint(adam);
    WaitOp::create(b, loc, upTokens);
    b.setInsertionPointAfter(adam);
    if (bf16) {
      Value w = CastOp::create(b, loc, workType, adam.getNewParam());
      StoreOp::create(b, loc, w, workSym);
    } else {
      StoreOp::create(b, loc, adam.getNewParam(), workSym);
    }
    for (int k = 0; k < 3; ++k) {
      if (!stores[k])
        continue;
      auto down = CopyOp::create(b, loc, pinned(pt), tok, adam->getResult(k),
                                 ValueRange{}, d2h);
      backTokens.push_back(down.getToken());
      backStores.push_back({down.getResult(), stores[k].getNameAttr()});
    }
    for (StoreOp st : stores) // not before: the builder inserts in front of one
      if (st)
        st.erase();
    return success();
  }

  /// Orders the CPU updates after the step's device work, by group in the
  /// order their gradients finish, with the refresh of each working copy;
  /// returns them.
  SmallVector<Update *> scheduleCpu(SmallVector<Update> &updates, func::ReturnOp ret) {
    // CPU updates run after every GPU op of the step has been issued (the
    // host blocks in them), one group at a time in the order the backward
    // finishes their gradients, each group starting as soon as its gradients
    // have landed in host memory.
    SmallVector<Update *> cpu;
    for (Update &u : updates)
      if (u.where == UpdatePlace::cpu)
        cpu.push_back(&u);
    // Positions in the step, to order CPU updates by when their gradients
    // exist.
    llvm::DenseMap<Operation *, int64_t> position;
    for (Operation &o : blk)
      position[&o] = int64_t(position.size());
    llvm::DenseMap<int, int64_t> groupReady;
    for (Update *u : cpu) {
      int64_t p = u->ready ? position.lookup(u->ready) : -1;
      auto [it, fresh] = groupReady.try_emplace(u->group, p);
      if (!fresh)
        it->second = std::max(it->second, p);
    }
    llvm::stable_sort(cpu, [&](Update *a, Update *c) {
      int64_t ra = groupReady[a->group], rc = groupReady[c->group];
      return ra != rc ? ra < rc : a->group < c->group;
    });
    // With the step's host thread (the host-thread option), each group then moves
    // up to where it can first run: the host thread waits for its gradients
    // there while the step goes on issuing the backward (Deep Optimizer
    // States, section 3: CPU updates overlap the backward).
    SmallVector<SmallVector<Operation *>> groupOps;
    for (size_t i = 0; i < cpu.size();) {
      size_t j = i;
      SmallVector<Value> waitFor;
      while (j < cpu.size() && cpu[j]->group == cpu[i]->group)
        waitFor.append(cpu[j++]->gradTokens);
      b.setInsertionPoint(ret);
      groupOps.emplace_back();
      groupOps.back().push_back(WaitOp::create(b, ret.getLoc(), waitFor));
      for (; i < j; ++i) {
        Update &u = *cpu[i];
        AdamOp adam = u.adam;
        Location loc = adam.getLoc();
        SmallVector<Operation *> after;
        for (Operation *user : adam->getUsers())
          after.push_back(user);
        adam->moveBefore(ret);
        for (Operation *op : after)
          op->moveBefore(ret);
        groupOps.back().push_back(adam);
        groupOps.back().append(after);
        b.setInsertionPoint(ret);
        auto workSym = FlatSymbolRefAttr::get(ctx, (u.sym.getValue() + ".work").str());
        CopyOp up = refreshUp(b, loc, module, adam.getNewParam(), workSym, groupOps.back());
        refreshTokens.push_back(up.getToken());
        refreshStores.push_back({up.getResult(), workSym});
      }
    }

    if (hostThread) {
      llvm::SmallPtrSet<Operation *, 16> late;
      for (Update *u : cpu)
        late.insert(u->readsAfter.begin(), u->readsAfter.end());
      hoistHostUpdates(blk, groupOps, late);
    }
    return cpu;
  }

  /// What the step waits for before it returns: the refreshed working
  /// copies (and the reads of them moved after), the streamed state back.
  void finish(ArrayRef<Update *> cpu, func::ReturnOp ret) {
    // Before the step returns: the next forward reads the refreshed working
    // copies (the compute stream waits), and the streamed state is back in
    // host memory (the host waits, then stores it).
    b.setInsertionPoint(ret);
    if (!refreshTokens.empty()) {
      WaitOp::create(b, ret.getLoc(), refreshTokens);
      for (auto &[v, sym] : refreshStores)
        StoreOp::create(b, ret.getLoc(), v, sym);
    }
    // Reads of refreshed weights, and everything computed from them, after
    // the refresh (in their order).
    llvm::SmallPtrSet<Operation *, 16> moved;
    for (Update *u : cpu)
      moved.insert(u->readsAfter.begin(), u->readsAfter.end());
    if (!moved.empty()) {
      SmallVector<Operation *> slice;
      for (Operation &op : blk) {
        if (&op == ret)
          break;
        if (!moved.contains(&op) && llvm::none_of(op.getOperands(), [&](Value v) {
              return v.getDefiningOp() && moved.contains(v.getDefiningOp());
            }))
          continue;
        moved.insert(&op);
        slice.push_back(&op);
      }
      for (Operation *op : slice)
        op->moveBefore(ret);
    }
    if (!backTokens.empty()) {
      WaitOp::create(b, ret.getLoc(), backTokens);
      for (auto &[v, sym] : backStores)
        StoreOp::create(b, ret.getLoc(), v, sym);
    }
  }
};

/// 1-bit Adam's step after the freeze (@train_step_frozen), for the
/// updates @train_step placed off the device (their master weights and
/// moments are in pinned memory now). Its forward already reads the working
/// copies (place() rewrote every read). What is left is the update: the
/// momentum, which the device compresses each step (worker side: a lerp of
/// the stored momentum and the local gradient), comes up from host memory
/// at the start of the step; the compressed all-reduce's momentum goes down
/// once it exists; the frozen update (the variance fixed at the freeze)
/// runs on the CPU after the step's device work and stores the weights and
/// momentum in host memory; the working copy is refreshed before the step
/// returns. A streamed subgroup's frozen update also runs on the CPU (the
/// same bits: both backends' Adam round alike). Data parallelism at ZeRO
/// stage 0 (stages 1 and 2: offloadShardedFrozenStep).
LogicalResult offloadFrozenStep(ModuleOp module, func::FuncOp frozen,
                                ArrayRef<Update> updates) {
  MLIRContext *ctx = module.getContext();
  llvm::DenseMap<StringAttr, const Update *> offloaded;
  for (const Update &u : updates)
    if (u.where != UpdatePlace::gpu)
      offloaded[u.sym.getAttr()] = &u;
  Block &blk = frozen.getBody().front();
  auto ret = cast<func::ReturnOp>(blk.getTerminator());
  OpBuilder b(ctx);
  auto tok = TokenType::get(ctx);
  auto h2d = StreamAttr::get(ctx, StreamKind::h2d, 0);
  auto d2h = StreamAttr::get(ctx, StreamKind::d2h, 0);
  SmallVector<AdamOp> adams;
  for (Operation &op : blk)
    if (auto a = dyn_cast<AdamOp>(op))
      if (auto l = a.getParam().getDefiningOp<LoadOp>();
          l && offloaded.count(l.getNameAttr().getAttr()))
        adams.push_back(a);
  SmallVector<Value> downTokens, refreshTokens;
  SmallVector<std::pair<Value, FlatSymbolRefAttr>> refreshStores;
  SmallVector<Operation *> hostOps;
  for (AdamOp adam : adams) {
    Location loc = adam.getLoc();
    auto sym = adam.getParam().getDefiningOp<LoadOp>().getNameAttr();
    Value ins[3] = {adam.getParam(), adam.getExpAvg(), adam.getExpAvgSq()};
    for (Value in : ins) {
      auto l = in.getDefiningOp<LoadOp>();
      if (!l)
        return fail(adam, "1-bit Adam's frozen update must load its weights and moments");
      in.setType(pinned(in.getType()));
    }
    // The stored momentum's device reads (the worker's lerp): a copy up,
    // waited for where it is first read.
    Value m = ins[1];
    SmallVector<OpOperand *> deviceUses;
    for (OpOperand &use : m.getUses())
      if (use.getOwner() != adam.getOperation())
        deviceUses.push_back(&use);
    if (!deviceUses.empty()) {
      b.setInsertionPointAfter(m.getDefiningOp());
      auto up = CopyOp::create(b, loc, unpinned(m.getType()), tok, m, ValueRange{}, h2d);
      WaitOp::create(b, loc, ValueRange{up.getToken()});
      for (OpOperand *use : deviceUses)
        use->set(up.getResult());
    }
    // The exchanged momentum goes down as soon as it exists.
    Value mom = adam.getGrad();
    Operation *ready = mom.getDefiningOp();
    if (ready)
      b.setInsertionPointAfter(ready);
    else
      b.setInsertionPointToStart(&blk);
    SmallVector<Value> after;
    if (auto async = dyn_cast_or_null<AsyncOpInterface>(ready))
      after.push_back(async.getAsyncToken());
    auto down = CopyOp::create(b, loc, pinned(mom.getType()), tok, mom, after, d2h);
    downTokens.push_back(down.getToken());
    adam.getGradMutable().assign(down.getResult());
    for (Value out : adam->getResults())
      out.setType(pinned(out.getType()));
    // The update and its stores at the end, then the working copy's
    // refresh.
    hostOps.push_back(adam);
    for (Operation *user : adam->getUsers())
      hostOps.push_back(user);
    auto workSym = FlatSymbolRefAttr::get(ctx, (sym.getValue() + ".work").str());
    auto workState = module.lookupSymbol<StateOp>(workSym);
    if (!workState)
      return fail(adam, "no working copy '" + workSym.getValue() + "' (run on @train_step first)");
    refreshStores.push_back({adam.getNewParam(), workSym});
  }
  if (adams.empty())
    return success();
  b.setInsertionPoint(ret);
  WaitOp::create(b, ret.getLoc(), downTokens);
  for (Operation *op : hostOps)
    op->moveBefore(ret);
  b.setInsertionPoint(ret);
  SmallVector<std::pair<Value, FlatSymbolRefAttr>> ups;
  SmallVector<Operation *> made;
  for (auto &[fresh, workSym] : refreshStores) {
    CopyOp up = refreshUp(b, ret.getLoc(), module, fresh, workSym, made);
    refreshTokens.push_back(up.getToken());
    ups.push_back({up.getResult(), workSym});
  }
  WaitOp::create(b, ret.getLoc(), refreshTokens);
  for (auto &[v, workSym] : ups)
    StoreOp::create(b, ret.getLoc(), v, workSym);
  return success();
}

/// `v` copied to the other side of PCIe (to pinned host memory or to the
/// device) before `at`, the copy waited for there: the functions that run
/// every few steps (DiLoCo's, @enter_frozen) copy where they need a value.
static Value copiedAcross(OpBuilder &b, Value v, Operation *at, bool toHost) {
  MLIRContext *ctx = b.getContext();
  b.setInsertionPoint(at);
  Type t = toHost ? Type(pinned(v.getType())) : Type(unpinned(v.getType()));
  auto copy = CopyOp::create(b, at->getLoc(), t, TokenType::get(ctx), v, ValueRange{},
                             StreamAttr::get(ctx, toHost ? StreamKind::d2h : StreamKind::h2d, 0));
  WaitOp::create(b, at->getLoc(), ValueRange{copy.getToken()});
  return copy.getResult();
}

/// Moves each resident (`gpu`) update of `blk` up to where its gradient is
/// first waited for, with the loads it alone reads and the stores of what
/// it writes, so that its gradient goes back during the backward instead
/// of after it. Left at the step's end, every resident gradient stayed
/// until then: with ZeRO-3 on a 13B model, 26 reduce-scattered shards of
/// 0.6 GB each, memory the planner could have given to resident state.
/// An update stays where it is when anything between there and here reads
/// or writes the symbols it updates, or when an operand is made later (a
/// clipped gradient needs the global norm, known only at the end).
static void hoistDeviceUpdates(Block &blk, ArrayRef<Update> updates) {
  llvm::DenseMap<Operation *, size_t> pos;
  for (Operation &o : blk)
    pos[&o] = pos.size();
  // The first wait for each token.
  llvm::DenseMap<Value, Operation *> waitOf;
  for (Operation &o : blk)
    if (auto w = dyn_cast<WaitOp>(o))
      for (Value t : w->getOperands())
        waitOf.try_emplace(t, w);
  // Which ops touch each symbol, in order.
  llvm::DenseMap<StringAttr, SmallVector<Operation *>> touching;
  for (Operation &o : blk) {
    if (auto l = dyn_cast<LoadOp>(o))
      touching[l.getNameAttr().getAttr()].push_back(&o);
    else if (auto st = dyn_cast<StoreOp>(o))
      touching[st.getNameAttr().getAttr()].push_back(&o);
  }
  for (const Update &u : updates) {
    AdamOp adam = u.adam;
    if (u.where != UpdatePlace::gpu || !adam || adam->getBlock() != &blk)
      continue;
    SmallVector<Operation *> loads, stores;
    llvm::SmallPtrSet<Operation *, 8> moving;
    Operation *after = nullptr;
    size_t afterPos = 0;
    bool ok = true;
    auto later = [&](Operation *op) {
      if (!op || op->getBlock() != &blk) {
        ok = ok && op == nullptr; // a block argument is there from the start
        return;
      }
      if (!after || pos.lookup(op) > afterPos) {
        after = op;
        afterPos = pos.lookup(op);
      }
    };
    for (Value v : adam->getOperands()) {
      Operation *def = v.getDefiningOp();
      if (auto l = dyn_cast_or_null<LoadOp>(def); l && l->hasOneUse()) {
        loads.push_back(l);
        moving.insert(l);
        continue;
      }
      later(def);
      if (auto async = dyn_cast_or_null<AsyncOpInterface>(def)) {
        Operation *w = waitOf.lookup(async.getAsyncToken());
        if (!w) {
          ok = false;
          break;
        }
        later(w);
      }
    }
    for (Operation *user : adam->getUsers()) {
      if (auto st = dyn_cast<StoreOp>(user)) {
        stores.push_back(st);
        moving.insert(st);
      }
    }
    if (!ok || !after || afterPos >= pos.lookup(adam))
      continue;
    // The update writes its weights and moments in place: every other
    // reader of them (through the views the lowering makes of a load)
    // must come before (a weight's input gradient dX = dY W may follow its
    // own weight gradient).
    for (Value v : {adam.getParam(), adam.getExpAvg(), adam.getExpAvgSq()}) {
      SmallVector<Operation *> readers;
      readersOf(v, readers);
      for (Operation *r : readers) {
        Operation *top = blk.findAncestorOpInBlock(*r);
        if (r != adam.getOperation() && (!top || pos.lookup(top) > afterPos))
          ok = false;
      }
    }
    // Nothing in between may touch what the update reads or writes.
    size_t here = pos.lookup(adam);
    for (Operation *op : llvm::concat<Operation *const>(loads, stores)) {
      StringAttr sym = isa<LoadOp>(op) ? cast<LoadOp>(op).getNameAttr().getAttr()
                                       : cast<StoreOp>(op).getNameAttr().getAttr();
      for (Operation *t : touching.lookup(sym)) {
        size_t p = pos.lookup(t);
        if (!moving.contains(t) && p > afterPos && p < here)
          ok = false;
      }
    }
    // The stores must be able to follow: their other operands exist by then.
    for (Operation *st : stores)
      for (Value v : st->getOperands())
        if (Operation *def = v.getDefiningOp(); def && def != adam && !moving.contains(def) &&
                                                def->getBlock() == &blk &&
                                                pos.lookup(def) > afterPos)
          ok = false;
    if (!ok)
      continue;
    Operation *at = after;
    SmallVector<Operation *> move(loads);
    move.push_back(adam);
    move.append(stores);
    for (Operation *op : move) {
      op->moveAfter(at);
      pos[op] = afterPos;
      at = op;
    }
  }
}

/// Places `updates` of `blk` (one step function) off the device: each
/// update, then the CPU's in order, then what the step waits for; the
/// resident updates move up to their gradients.
static LogicalResult placeUpdates(ModuleOp module, Block &blk, SmallVector<Update> &updates,
                                  bool hostThread) {
  auto ret = cast<func::ReturnOp>(blk.getTerminator());
  OffloadRewrite rw(module, blk, hostThread);
  for (Update &u : updates)
    if (failed(rw.place(u)))
      return failure();
  SmallVector<Update *> cpu = rw.scheduleCpu(updates, ret);
  rw.finish(cpu, ret);
  hoistDeviceUpdates(blk, updates);
  return success();
}

/// 1-bit Adam's step after the freeze at ZeRO stages 1 and 2 with the
/// sharded frozen variance (loom-data-parallel with master-shards): each
/// rank's update of its shard of a bucket has the form of @train_step's
/// (the master shard, this rank's slice of the exchanged momentum for a
/// gradient, the bucket's moment shards; the gather after it reads the
/// shard back), so it is placed by the same rewrite with @train_step's
/// placements and working copies. The whole momentum the worker's lerp
/// reads (@P.exp_avg) stays on the device. @enter_frozen gathers the
/// momentum shards, now in host memory: each comes up first.
LogicalResult offloadShardedFrozenStep(ModuleOp module, func::FuncOp frozen,
                                       ArrayRef<Update> updates, bool hostThread) {
  MLIRContext *ctx = module.getContext();
  llvm::DenseMap<StringAttr, AdamOp> adamOf;
  for (Operation &op : frozen.getBody().front())
    if (auto a = dyn_cast<AdamOp>(op))
      if (auto l = a.getParam().getDefiningOp<LoadOp>())
        adamOf[l.getNameAttr().getAttr()] = a;
  SmallVector<Update> placed;
  for (const Update &u : updates) {
    if (u.where == UpdatePlace::gpu)
      continue;
    AdamOp a = adamOf.lookup(u.sym.getAttr());
    if (!a)
      return fail(frozen, "has no update of '@" + u.sym.getValue() +
                              "' (loom-data-parallel with master-shards writes it)");
    if (!a.getGrad().hasOneUse())
      return fail(a, "the exchanged momentum must be used by the update alone");
    Update f;
    f.param = u.param;
    f.sym = u.sym;
    f.adam = a;
    f.where = u.where;
    f.group = u.group;
    placed.push_back(f);
  }
  if (failed(placeUpdates(module, frozen.getBody().front(), placed, hostThread)))
    return failure();

  auto enter = module.lookupSymbol<func::FuncOp>(LoomDialect::kEnterFrozen);
  OpBuilder b(ctx);
  for (LoadOp l : llvm::to_vector(enter.getOps<LoadOp>())) {
    auto s = module.lookupSymbol<StateOp>(l.getNameAttr());
    auto st = s ? dyn_cast<RankedTensorType>(s.getType()) : RankedTensorType();
    if (!st || !st.getEncoding())
      continue;
    l.getResult().setType(st);
    Value up = copiedAcross(b, l.getResult(), l->getNextNode(), /*toHost=*/false);
    l.getResult().replaceAllUsesExcept(up, up.getDefiningOp());
  }
  return success();
}

/// Streaming DiLoCo with offloaded inner updates (issue 44): the outer
/// step's global copy and momentum live where the master weights do. For
/// each parameter whose master weights are in pinned memory, both states
/// move there too (8 more bytes a parameter off the card), and DiLoCo's
/// functions run their arithmetic where its operands are: the
/// pseudo-gradient (global − local), the outer SGD and the merge on the
/// CPU (the runtime's host stream), the exchange on the device (each
/// collective's or codec's host operand copied up first, a host operation's
/// device operand copied down). A merged parameter stored into its master
/// weights refreshes its device working copy too. These functions run
/// every H steps (a fragment's share of the model each time), so their
/// copies wait where they are made.
LogicalResult placeDilocoOnHost(ModuleOp module, ArrayRef<Update> updates) {
  MLIRContext *ctx = module.getContext();
  llvm::DenseSet<StringAttr> masters;
  for (const Update &u : updates) {
    if (u.where == UpdatePlace::gpu)
      continue;
    masters.insert(u.sym.getAttr());
    for (StringRef suffix : {".diloco.global", ".diloco.momentum"})
      if (auto st = module.lookupSymbol<StateOp>((u.sym.getValue() + suffix).str()))
        st.setTypeAttr(TypeAttr::get(pinned(st.getType())));
  }
  OpBuilder b(ctx);
  auto symbolType = [&](FlatSymbolRefAttr sym) -> Type {
    if (auto p = module.lookupSymbol<ParamOp>(sym))
      return p.getType();
    if (auto st = module.lookupSymbol<StateOp>(sym))
      return st.getType();
    return Type();
  };
  for (auto fn : llvm::to_vector(module.getOps<func::FuncOp>())) {
    if (!dilocoFunction(fn))
      continue;
    for (Operation &opRef : llvm::make_early_inc_range(fn.getBody().front())) {
      Operation *op = &opRef;
      if (auto l = dyn_cast<LoadOp>(op)) {
        if (Type t = symbolType(l.getNameAttr()); t && isHostMemory(t))
          l.getResult().setType(cast<RankedTensorType>(t));
        continue;
      }
      if (auto st = dyn_cast<StoreOp>(op)) {
        Type t = symbolType(st.getNameAttr());
        Value v = st.getValue();
        if (t && isHostMemory(t) != isHostMemory(v.getType()))
          st.getValueMutable().assign(copiedAcross(b, v, st, isHostMemory(t)));
        if (!masters.contains(st.getNameAttr().getAttr()))
          continue;
        // The merged weights' working copy (bf16 where the step reads bf16).
        auto workSym = FlatSymbolRefAttr::get(ctx, (st.getNameAttr().getValue() + ".work").str());
        auto work = module.lookupSymbol<StateOp>(workSym);
        if (!work)
          return fail(st, "no working copy '" + workSym.getValue() + "'");
        b.setInsertionPointAfter(st);
        SmallVector<Operation *> made;
        CopyOp up = refreshUp(b, st.getLoc(), module, st.getValue(), workSym, made);
        b.setInsertionPointAfter(up);
        WaitOp::create(b, st.getLoc(), ValueRange{up.getToken()});
        StoreOp::create(b, st.getLoc(), up.getResult(), workSym);
        continue;
      }
      if (isa<func::ReturnOp, WaitOp>(op))
        continue;
      bool anyHost = llvm::any_of(op->getOperandTypes(), isHostMemory);
      if (!anyHost)
        continue;
      if (isa<SubOp, LerpOp, SgdOp, ReshapeOp, SliceOp, ConcatOp>(op)) {
        // On the host: its device operands come down, its results are
        // host memory.
        for (OpOperand &o : op->getOpOperands())
          if (isa<RankedTensorType>(o.get().getType()) && !isHostMemory(o.get().getType()))
            o.set(copiedAcross(b, o.get(), op, true));
        for (Value r : op->getResults())
          r.setType(pinned(r.getType()));
        continue;
      }
      // On the device (a collective, a codec, a reduction).
      for (OpOperand &o : op->getOpOperands())
        if (isHostMemory(o.get().getType()))
          o.set(copiedAcross(b, o.get(), op, false));
    }
  }
  return success();
}

LogicalResult applyOffload(ModuleOp module, StringRef modeName, bool hostThread) {
  MLIRContext *ctx = module.getContext();
  std::string error;
  FailureOr<OptimizerOffloadAttr> mode = parseOffloadMode(ctx, modeName, error);
  if (failed(mode))
    return fail(module, error);
  auto step = module.lookupSymbol<func::FuncOp>(LoomDialect::kTrainStep);
  auto fb = module.lookupSymbol<func::FuncOp>(LoomDialect::kForwardBackward);
  if (!step || !fb)
    return fail(module, "needs @forward_backward and @train_step (run "
                        "loom-attach-optimizer first)");
  // A data-parallel step (loom-data-parallel before this pass): at ZeRO
  // stage 0 each rank updates every parameter from the averaged gradient,
  // at stages 1-3 its shard of each bucket (`@zero.bucketK.params`; at
  // stages 1 and 2 loom-data-parallel's master-shards makes it a symbol,
  // and an all-gather after the update reads it back) from its slice of
  // the reduced gradient; either way each update loads its weights from a
  // symbol and takes one gradient, which is all this pass needs, and each
  // rank offloads what it updates.
  func::CallOp call = findCall(step, LoomDialect::kForwardBackward);
  if (!call)
    return fail(fb, "@train_step must call @forward_backward");
  FailureOr<SmallVector<Update>> collected = collectUpdates(module, *mode, step, fb);
  if (failed(collected))
    return failure();
  SmallVector<Update> &updates = *collected;
  step->setAttr(LoomDialect::OptimizerOffloadAttrHelper::getNameStr(), *mode);
  if (llvm::all_of(updates, [](const Update &u) { return u.where == UpdatePlace::gpu; }))
    return success();

  inlineCall(call, fb);
  if (SymbolTable::symbolKnownUseEmpty(fb, module))
    fb.erase();

  if (failed(placeUpdates(module, step.getBody().front(), updates, hostThread)))
    return failure();
  if (module.lookupSymbol(LoomDialect::kDilocoStart))
    return placeDilocoOnHost(module, updates);
  if (auto frozen = module.lookupSymbol<func::FuncOp>(LoomDialect::kTrainStepFrozen)) {
    if (module.lookupSymbol(LoomDialect::kEnterFrozen))
      return offloadShardedFrozenStep(module, frozen, updates, hostThread);
    return offloadFrozenStep(module, frozen, updates);
  }
  return success();
}

} // namespace mlir::loom
