//===- ExpertParallel.cpp - one rank's experts, tokens moved to them ------===//
//
// Expert parallelism (GShard, Lepikhin et al. 2021; DeepSpeed-MoE): the
// experts of each mixture-of-experts layer split over the N ranks of a
// topology level, rank j holding experts j E/N ... (j+1) E/N - 1. The
// generator's dispatch buffer [E x C, D] is ordered by expert, so its chunk
// j (of N) is rank j's experts' rows: one all-to-all over the level sends
// each chunk to its rank, which receives [source][local expert][C] rows;
// each local expert runs on each source's C rows (its ops cloned once a
// source: the shapes stay the generator's); the outputs, laid out
// [destination][local expert][C], go back by a second all-to-all, in the
// buffer's order again, for moe_combine. loom-autodiff's rule for an
// all-to-all is another, so the backward moves the gradients the same way.
//
// Run once per EP rank on a copy of the module, before loom-autodiff, as
// loom-pipeline-split is; the parameters of the experts this rank does not
// hold go, and each kept parameter after them records the random draws
// they took (`loom.init_skip`), so every rank starts from the one-rank
// model's values. The kept experts' parameters get `loom.expert` (their
// gradients are averaged only over the ranks holding the same experts, by
// loom-data-parallel) and the module `loom.expert_parallel` (the driver
// runs the program of the rank's position on the level).
//
//===----------------------------------------------------------------------===//
#include "loom/Passes/Loom.h"

#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/FormatVariadic.h"

namespace mlir::loom {
#define GEN_PASS_DEF_EXPERTPARALLEL
#include "passes/Loom/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

/// One mixture-of-experts layer as the generator builds it.
struct MoeLayer {
  MoeDispatchOp dispatch;
  MoeCombineOp combine;
  ConcatOp outputs;                    // the experts' outputs, expert order
  SmallVector<SliceOp> inputs;         // expert e's C rows of the buffer
  SmallVector<SetVector<Operation *>> ops; // expert e's ops, in block order
  int64_t experts = 0, capacity = 0;
};

struct ExpertParallel : public mlir::loom::impl::ExpertParallelBase<ExpertParallel> {
  using Base::Base;
  void runOnOperation() override;

private:
  LogicalResult fail(Operation *at, const Twine &msg) {
    at->emitError() << "loom-expert-parallel: " << msg;
    return failure();
  }
  LogicalResult match(MoeDispatchOp d, MoeLayer &layer);
  void rewrite(MoeLayer &layer, GroupAttr group, int64_t ranks);
};

/// The slice of rows [lo, lo + n) of a [rows, D] buffer, or null.
SliceOp rowSlice(Operation *op, int64_t &lo, int64_t &n) {
  auto s = dyn_cast<SliceOp>(op);
  if (!s || s.getStart().size() != 2 || s.getStart()[1] != 0 || s.getStep()[0] != 1 ||
      s.getStep()[1] != 1 ||
      s.getLimit()[1] != cast<RankedTensorType>(s.getInput().getType()).getDimSize(1))
    return {};
  lo = s.getStart()[0];
  n = s.getLimit()[0] - lo;
  return s;
}

LogicalResult ExpertParallel::match(MoeDispatchOp d, MoeLayer &layer) {
  auto slots = d.getSlots().getDefiningOp<MoeSlotsOp>();
  if (!slots)
    return fail(d, "its slots do not come from loom.moe_slots");
  layer.dispatch = d;
  layer.experts = int64_t(slots.getNumExperts());
  layer.capacity = int64_t(slots.getCapacity());
  int64_t E = layer.experts, C = layer.capacity;
  if (d.getWeights())
    return fail(d, "a weighted dispatch is not split (the generator weights the combine)");
  for (Operation *u : slots.getSlots().getUsers())
    if (auto c = dyn_cast<MoeCombineOp>(u))
      layer.combine = c;
  layer.outputs = layer.combine ? layer.combine.getInput().getDefiningOp<ConcatOp>() : ConcatOp();
  if (!layer.outputs || layer.outputs.getDim() != 0 ||
      int64_t(layer.outputs.getInputs().size()) != E)
    return fail(d, llvm::formatv("needs its loom.moe_combine to read a concat of the {0} "
                                 "experts' outputs (the generator's layer)",
                                 E)
                       .str());
  layer.inputs.assign(E, SliceOp());
  for (Operation *u : d.getResult().getUsers()) {
    int64_t lo = 0, n = 0;
    SliceOp s = rowSlice(u, lo, n);
    if (!s || n != C || lo % C != 0 || layer.inputs[lo / C])
      return fail(u, llvm::formatv("reads the dispatch buffer other than as one expert's {0} "
                                   "rows",
                                   C)
                         .str());
    layer.inputs[lo / C] = s;
  }
  // Expert e's ops: those its slice reaches on the way to its output.
  layer.ops.resize(E);
  for (int64_t e = 0; e < E; ++e) {
    if (!layer.inputs[e])
      return fail(d, llvm::formatv("expert {0}'s rows are never read", e).str());
    DenseSet<Operation *> reached{layer.inputs[e]};
    Operation *out = layer.outputs.getInputs()[e].getDefiningOp();
    for (Operation *op = layer.inputs[e]; op; op = op->getNextNode()) {
      if (op != layer.inputs[e] &&
          llvm::any_of(op->getOperands(), [&](Value v) { return reached.contains(v.getDefiningOp()); }))
        reached.insert(op);
      if (op == out)
        break;
    }
    if (!out || !reached.contains(out))
      return fail(d, llvm::formatv("expert {0}'s output does not come from its rows", e).str());
    for (Operation &op : *d->getBlock())
      if (reached.contains(&op))
        layer.ops[e].insert(&op);
    for (Operation *op : layer.ops[e])
      for (Value r : op->getResults())
        for (Operation *u : r.getUsers())
          if (!layer.ops[e].contains(u) && u != layer.outputs)
            return fail(u, llvm::formatv("reads expert {0}'s work outside it", e).str());
  }
  return success();
}

void ExpertParallel::rewrite(MoeLayer &layer, GroupAttr group, int64_t ranks) {
  int64_t E = layer.experts, C = layer.capacity, local = E / ranks;
  OpBuilder b(layer.combine);
  Location loc = layer.dispatch.getLoc();
  Value buf = layer.dispatch.getResult();
  auto type = cast<RankedTensorType>(buf.getType());
  auto stream = StreamAttr::get(b.getContext(), StreamKind::comm, 0);
  auto exchange = [&](Value v) {
    auto a = AllToAllOp::create(b, loc, v.getType(), TokenType::get(b.getContext()), v,
                                ValueRange{}, group, stream);
    WaitOp::create(b, loc, ValueRange{a.getToken()});
    return a.getResult();
  };
  Value received = exchange(buf);
  SmallVector<Value> outs;
  for (int64_t src = 0; src < ranks; ++src)
    for (int64_t l = 0; l < local; ++l) {
      int64_t e = rank * local + l, lo = (src * local + l) * C;
      SliceOp orig = layer.inputs[e];
      auto rows = SliceOp::create(b, loc, orig.getType(), received,
                                  b.getDenseI64ArrayAttr({lo, 0}),
                                  b.getDenseI64ArrayAttr({lo + C, type.getDimSize(1)}),
                                  b.getDenseI64ArrayAttr({1, 1}));
      IRMapping map;
      map.map(orig.getResult(), rows.getResult());
      for (Operation *op : layer.ops[e])
        if (op != orig) {
          b.clone(*op, map);
          // The expert's parameters: this rank's alone (loom-data-parallel
          // averages them over the ranks that hold the same expert).
          for (Value v : op->getOperands())
            if (auto load = v.getDefiningOp<LoadOp>())
              if (auto p = SymbolTable::lookupNearestSymbolFrom<ParamOp>(op, load.getNameAttr()))
                p->setAttr(LoomDialect::ExpertAttrHelper::getNameStr(),
                           UnitAttr::get(b.getContext()));
        }
      outs.push_back(map.lookup(layer.outputs.getInputs()[e]));
    }
  Value sent = ConcatOp::create(b, loc, layer.outputs.getType(), outs, b.getI64IntegerAttr(0));
  layer.combine.getInputMutable().assign(exchange(sent));
  // The one-rank layer's experts go (their parameters' loads with them,
  // where nothing else reads them).
  layer.outputs.erase();
  for (SetVector<Operation *> &ops : layer.ops)
    for (Operation *op : llvm::reverse(ops)) {
      SmallVector<Operation *> defs;
      for (Value v : op->getOperands())
        if (Operation *def = v.getDefiningOp(); def && isa<LoadOp, CastOp>(def))
          defs.push_back(def);
      op->erase();
      for (Operation *def : defs)
        if (def->use_empty())
          def->erase();
    }
}

} // namespace

void ExpertParallel::runOnOperation() {
  ModuleOp module = getOperation();
  auto bad = [&](Operation *at, const Twine &msg) {
    (void)fail(at, msg);
    signalPassFailure();
  };
  auto fwd = module.lookupSymbol<func::FuncOp>(LoomDialect::kForward);
  if (!fwd || !fwd.getBody().hasOneBlock())
    return bad(module, "no single-block function @forward (run before loom-autodiff)");
  if (module.lookupSymbol(LoomDialect::kForwardBackward))
    return bad(fwd, "run before loom-autodiff: the backward's exchanges come from the forward's");
  FailureOr<TopologyOp> topo = findTopology(module, "", "loom-expert-parallel");
  if (failed(topo))
    return signalPassFailure();
  int64_t ranks = *topo ? (*topo).getLevelSize(level) : 0;
  if (ranks < 2 || rank < 0 || rank >= ranks)
    return bad(module, llvm::formatv("needs a loom.topology with a level '{0}' of 2 or more "
                                     "ranks, and rank in [0, its size)",
                                     std::string(level))
                           .str());
  auto group = GroupAttr::get(&getContext(), FlatSymbolRefAttr::get((*topo).getSymNameAttr()),
                              ArrayAttr::get(&getContext(), {StringAttr::get(&getContext(), level)}));
  SmallVector<MoeLayer> layers;
  for (MoeDispatchOp d : llvm::to_vector(fwd.getOps<MoeDispatchOp>())) {
    MoeLayer layer;
    if (failed(match(d, layer)))
      return signalPassFailure();
    if (layer.experts % ranks != 0)
      return bad(d, llvm::formatv("{0} experts do not divide over {1} ranks", layer.experts,
                                  ranks)
                        .str());
    layers.push_back(std::move(layer));
  }
  if (layers.empty())
    return bad(fwd, "has no mixture-of-experts layer (loom.moe_dispatch)");
  for (MoeLayer &layer : layers)
    rewrite(layer, group, ranks);
  dropUnloadedParams(module, fwd);
  int64_t index = 0;
  for (auto [k, name] : llvm::enumerate((*topo).getLevels()))
    if (cast<StringAttr>(name).getValue() == level)
      index = int64_t(k);
  module->setAttr(LoomDialect::ExpertParallelAttrHelper::getNameStr(),
                  DenseI64ArrayAttr::get(&getContext(), {rank, ranks, index}));
}
