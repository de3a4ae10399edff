//===- PipelineSplit.cpp - loom-pipeline-split -----------------------------===//
//
// One pipeline stage's program: the module's @forward after
// loom-pipeline-cut has marked each op with its stage, reduced to what
// stage `stage` runs (GPipe, Huang et al. 2019; PipeDream, Narayanan et al.
// 2019: a model cut into contiguous stages, each on its own ranks).
//
// What a stage keeps:
//  * its ops (those the cut marked with its number);
//  * the ops every stage can compute for itself: parameter loads and their
//    casts (loom-pipeline-cut leaves them unmarked), and anything computed
//    from the inputs and constants alone (positions, masks, rotary tables):
//    made again wherever they are read, never sent;
//  * the parameters its ops read. A parameter read on two stages (GPT's
//    embedding, tied to its head) is held by both, each copy marked
//    `loom.tied_peer` with the other's offset; loom-pipeline-join sums the
//    two gradients, so the copies stay equal (Megatron-LM keeps shared word
//    embeddings the same way, Narayanan et al. SC 2021).
//
// A value one stage computes and the next reads (the residual stream at a
// cut) becomes a `loom.p2p` send at the end of the first stage's forward and
// a receive at the beginning of the next's; loom-autodiff's rule for them
// sends the gradient back. A stage's loss is the model's on the last stage
// and zero on the others (their backward starts from the gradient they
// receive). Every stage reads the step's inputs (the first the tokens, the
// last the targets).
//
// Each kept parameter carries `loom.init_skip`: the elements the one-rank
// model draws from the seed's stream for the parameters before it that
// this stage does not hold, so the driver starts every stage from the
// one-rank model's values.
//
//===----------------------------------------------------------------------===//
#include "loom/Passes/Loom.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"

#include <set>

namespace mlir::loom {
#define GEN_PASS_DEF_PIPELINESPLIT
#include "passes/Loom/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

/// What a stage's forward reads and keeps (classify, then collect).
struct Cut {
  /// Values every stage may compute for itself, and the parameters each
  /// of those reads.
  DenseSet<Value> anywhere;
  DenseMap<Value, std::set<std::string>> paramsOf;
  /// This stage's ops, the stages that read each parameter, and the
  /// values crossing into and out of this stage.
  DenseSet<Operation *> kept;
  llvm::StringMap<std::set<int64_t>> readers;
  /// By the chunk that reads them (incoming) or computes them (outgoing):
  /// one chunk a stage unless interleaved.
  std::map<int64_t, llvm::SetVector<Value>> incoming, outgoing;
};

int64_t stageOf(Operation *op) {
  auto a = op ? op->getAttrOfType<IntegerAttr>(LoomDialect::StageAttrHelper::getNameStr())
              : IntegerAttr();
  return a ? a.getInt() : -1;
}

/// Which values every stage may compute for itself: unmarked ops
/// (loads, casts, constants) and what is computed from the inputs and
/// constants alone.
void classify(Block &body, Cut &cut) {
  cut.anywhere.insert(body.getArguments().begin(), body.getArguments().end());
  for (Operation &op : body.without_terminator()) {
    bool allAnywhere =
        llvm::all_of(op.getOperands(), [&](Value v) { return cut.anywhere.count(v); });
    std::set<std::string> reads;
    for (Value v : op.getOperands())
      if (auto it = cut.paramsOf.find(v); it != cut.paramsOf.end())
        reads.insert(it->second.begin(), it->second.end());
    if (auto load = dyn_cast<LoadOp>(op))
      reads.insert(load.getName().str());
    bool free = stageOf(&op) < 0 || (allAnywhere && reads.empty());
    if (isa<P2POp>(op) || !free || !allAnywhere || op.getNumResults() == 0)
      continue;
    for (Value r : op.getResults()) {
      cut.anywhere.insert(r);
      if (!reads.empty())
        cut.paramsOf[r] = reads;
    }
  }
}

struct PipelineSplit : public mlir::loom::impl::PipelineSplitBase<PipelineSplit> {
  using Base::Base;

  void runOnOperation() override;

private:
  LogicalResult fail(Operation *at, const Twine &msg) {
    at->emitError() << "loom-pipeline-split: " << msg;
    return failure();
  }
  LogicalResult collect(Block &body, Cut &cut);
  /// The stage holding chunk `c` (chunk c on stage c mod stages).
  int64_t stageOfChunk(int64_t c) const { return c % stages; }
  void rewrite(func::FuncOp fwd, TopologyOp topo, Cut &cut);
  LogicalResult keepParams(ModuleOp module, const Cut &cut);
};

/// This stage's ops, the values that cross its cuts, and which stages
/// read each parameter.
LogicalResult PipelineSplit::collect(Block &body, Cut &cut) {
  for (Operation &op : body.without_terminator()) {
    if (op.getNumResults() &&
        llvm::all_of(op.getResults(), [&](Value r) { return cut.anywhere.count(r); }))
      continue;
    int64_t st = stageOf(&op);
    if (st < 0)
      return fail(&op, "has no loom.stage (run loom-pipeline-cut first)");
    for (Value v : op.getOperands()) {
      if (auto it = cut.paramsOf.find(v); it != cut.paramsOf.end())
        for (const std::string &p : it->second)
          cut.readers[p].insert(st);
      if (cut.anywhere.count(v))
        continue;
      int64_t from = stageOf(v.getDefiningOp());
      if (from == st)
        continue;
      if (from > st || from < st - 1)
        return fail(&op, llvm::formatv("reads a value of stage {0} on stage {1}: only the "
                                       "next stage may read a stage's values (a cut that "
                                       "skips a stage is not built)",
                                       from, st)
                             .str());
      if (stageOfChunk(st) == stage)
        cut.incoming[st].insert(v);
      if (stageOfChunk(from) == stage)
        cut.outgoing[from].insert(v);
    }
    if (stageOfChunk(st) == stage)
      cut.kept.insert(&op);
  }
  // One activation crosses each cut: a stage's transfers then pair with
  // its neighbour's in one order (more would need their own schedule).
  for (auto [what, map] : {std::pair("into", &cut.incoming), {"out of", &cut.outgoing}})
    for (auto &[c, set] : *map)
      if (set.size() > 1) {
        // Name what crosses: a value carried past every layer (a mixture's
        // load-balancing loss, summed over the layers' routing) shows here.
        std::string ops;
        for (Value v : set)
          ops += (ops.empty() ? "" : ", ") +
                 (v.getDefiningOp() ? v.getDefiningOp()->getName().getStringRef().str()
                                    : std::string("an argument"));
        return fail(body.getParentOp(),
                    llvm::formatv("{0} values go {1} {2} {3} ({4}); one activation a cut is "
                                  "built: cut at a block boundary, with no value carried "
                                  "across the layers (a mixture of experts: aux=0)",
                                  set.size(), what, chunks > 1 ? "chunk" : "stage",
                                  chunks > 1 ? c : int64_t(stage), ops)
                        .str());
      }
  return success();
}

/// The stage's program: receives first, its ops, then sends; the loss
/// (zero before the last stage); everything else erased.
void PipelineSplit::rewrite(func::FuncOp fwd, TopologyOp topo, Cut &cut) {
  MLIRContext *ctx = &getContext();
  Block &body = fwd.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  OpBuilder b(ctx);
  Location loc = fwd.getLoc();
  auto group = GroupAttr::get(ctx, FlatSymbolRefAttr::get(topo.getSymNameAttr()),
                              b.getStrArrayAttr({StringRef(level)}));
  auto comm = StreamAttr::get(ctx, StreamKind::comm, 0);
  auto tokenType = TokenType::get(ctx);
  DenseSet<Operation *> made;
  // Interleaved, each transfer carries its chunk (loom-pipeline-schedule
  // orders by it) and sits where it is read or computed; with one chunk a
  // stage, receives come first and sends last.
  auto chunkAttr = [&](Operation *op, int64_t c) {
    if (chunks > 1)
      op->setAttr(LoomDialect::StageAttrHelper::getNameStr(), b.getI64IntegerAttr(c));
  };
  for (auto &[c, values] : cut.incoming)
    for (Value v : values) {
      b.setInsertionPointToStart(&body);
      if (chunks > 1)
        for (Operation &op : body)
          if (cut.kept.count(&op) && llvm::is_contained(op.getOperands(), v)) {
            b.setInsertionPoint(&op);
            break;
          }
      auto r = P2POp::create(b, loc, v.getType(), tokenType, Value(), ValueRange{}, group,
                             IntegerAttr(), b.getI64IntegerAttr(stageOfChunk(c - 1) - stage),
                             comm);
      auto w = WaitOp::create(b, loc, ValueRange{r.getToken()});
      chunkAttr(r, c);
      made.insert(r), made.insert(w);
      v.replaceUsesWithIf(r.getResult(),
                          [&](OpOperand &u) { return cut.kept.count(u.getOwner()); });
    }
  for (auto &[c, values] : cut.outgoing)
    for (Value v : values) {
      if (chunks > 1)
        b.setInsertionPointAfter(v.getDefiningOp());
      else
        b.setInsertionPoint(ret);
      auto s = P2POp::create(b, loc, Type(), tokenType, v, ValueRange{}, group,
                             b.getI64IntegerAttr(stageOfChunk(c + 1) - stage), IntegerAttr(),
                             comm);
      auto w = WaitOp::create(b, loc, ValueRange{s.getToken()});
      chunkAttr(s, c);
      made.insert(s), made.insert(w);
    }
  b.setInsertionPoint(ret);
  if (stage != stages - 1) {
    Value loss = ret.getOperand(0);
    auto t = cast<RankedTensorType>(loss.getType());
    auto zero = arith::ConstantOp::create(
        b, loc, t,
        DenseElementsAttr::get(RankedTensorType::get({}, t.getElementType()),
                               FloatAttr::get(t.getElementType(), 0.0).getValue()));
    made.insert(zero);
    ret->setOperand(0, zero);
  }
  // Everything else goes (users before what they read); what is computable
  // anywhere stays while something kept reads it.
  SmallVector<Operation *> all;
  for (Operation &op : body.without_terminator())
    all.push_back(&op);
  for (Operation *op : llvm::reverse(all))
    if (!made.count(op) && !cut.kept.count(op) && op->use_empty())
      op->erase(); // (an op still read is read by a kept op, or by one that stays for it)
}

/// The parameters still loaded stay, with the stream positions of the
/// ones before them that went (dropUnloadedParams); tied ones learn their
/// peer.
LogicalResult PipelineSplit::keepParams(ModuleOp module, const Cut &cut) {
  dropUnloadedParams(module, module.lookupSymbol<func::FuncOp>(LoomDialect::kForward));
  OpBuilder b(&getContext());
  for (ParamOp p : module.getOps<ParamOp>()) {
    auto it = cut.readers.find(p.getSymName());
    if (it == cut.readers.end())
      continue;
    std::set<int64_t> holders; // (two chunks of one stage share its copy)
    for (int64_t c : it->second)
      holders.insert(stageOfChunk(c));
    if (holders.size() < 2)
      continue;
    if (holders.size() > 2)
      return fail(p, "is read on more than two stages (one copy a stage, their gradients "
                     "summed, is built for two)");
    int64_t other = *holders.begin() == stage ? *holders.rbegin() : *holders.begin();
    p->setAttr(LoomDialect::TiedPeerAttrHelper::getNameStr(), b.getI64IntegerAttr(other - stage));
  }
  return success();
}

void PipelineSplit::runOnOperation() {
  ModuleOp module = getOperation();
  auto bad = [&](Operation *at, const Twine &msg) {
    (void)fail(at, msg);
    signalPassFailure();
  };
  if (stages < 2 || stage < 0 || stage >= stages || chunks < 1)
    return bad(module, "stages must be at least 2, stage in [0, stages) and chunks positive");
  auto fwd = module.lookupSymbol<func::FuncOp>(LoomDialect::kForward);
  if (!fwd || !fwd.getBody().hasOneBlock())
    return bad(module, "no single-block function @forward (run after "
                              "loom-pipeline-cut, before loom-autodiff)");
  if (module.lookupSymbol(LoomDialect::kForwardBackward))
    return bad(fwd, "run before loom-autodiff: each stage's backward is derived from "
                           "its forward");
  FailureOr<TopologyOp> topo = findTopology(module, "", "loom-pipeline-split");
  if (failed(topo))
    return signalPassFailure();
  if (!*topo || (*topo).getLevelSize(level) != stages)
    return bad(module, llvm::formatv("needs a loom.topology with a level '{0}' of {1} "
                                            "ranks (loomc --pipeline-parallel: the outermost "
                                            "level)",
                                            std::string(level), int64_t(stages))
                                  .str());
  int64_t levelIndex = 0;
  for (auto [i, name] : llvm::enumerate((*topo).getLevels()))
    if (cast<StringAttr>(name).getValue() == level)
      levelIndex = int64_t(i);
  Block &body = fwd.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  if (ret.getNumOperands() != 1)
    return bad(fwd, "@forward must return one loss");
  Cut cut;
  classify(body, cut);
  if (failed(collect(body, cut)))
    return signalPassFailure();
  Operation *lossOp = ret.getOperand(0).getDefiningOp();
  if (!lossOp || stageOf(lossOp) != stages * chunks - 1)
    return bad(fwd, llvm::formatv("the loss must be computed on the last {0} (loom.stage {1})",
                                  chunks > 1 ? "chunk" : "stage", stages * chunks - 1)
                        .str());
  for (auto &[c, values] : cut.outgoing)
    for (Value v : values)
      cut.kept.insert(v.getDefiningOp());
  rewrite(fwd, *topo, cut);
  if (failed(keepParams(module, cut)))
    return signalPassFailure();
  OpBuilder b(&getContext());
  module->setAttr(LoomDialect::PipelineAttrHelper::getNameStr(),
                  chunks > 1 ? b.getDenseI64ArrayAttr({int64_t(stage), int64_t(stages),
                                                       levelIndex, int64_t(chunks)})
                             : b.getDenseI64ArrayAttr({int64_t(stage), int64_t(stages),
                                                       levelIndex}));
}

} // namespace

void mlir::loom::dropUnloadedParams(ModuleOp module, func::FuncOp fwd) {
  OpBuilder b(module.getContext());
  llvm::StringSet<> loaded;
  fwd.walk([&](LoadOp l) { loaded.insert(l.getName()); });
  int64_t skip = 0;
  for (ParamOp p : llvm::make_early_inc_range(module.getOps<ParamOp>())) {
    if (!loaded.contains(p.getSymName())) {
      InitAttr init = p.getInitAttr() ? p.getInitAttr() : defaultInitFor(p);
      // (A tensor-parallel slice's draw is the whole tensor's.)
      int64_t parts = 1;
      if (p->hasAttr(LoomDialect::TpSliceAttrHelper::getNameStr()))
        if (auto tp = module->getAttrOfType<IntegerAttr>(
                LoomDialect::TensorParallelAttrHelper::getNameStr()))
          parts = tp.getInt();
      if (init && (init.getKind() == InitKind::normal || init.getKind() == InitKind::uniform))
        skip += cast<RankedTensorType>(p.getType()).getNumElements() * parts;
      p.erase();
      continue;
    }
    if (skip > 0)
      p->setAttr(LoomDialect::InitSkipAttrHelper::getNameStr(), b.getI64IntegerAttr(skip));
    skip = 0;
  }
}
