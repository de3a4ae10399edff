//===- MicroBatches.cpp - loom-micro-batches -------------------------------===//
//
// Gradient accumulation as a graph transform, the first step of pipeline
// parallelism (GPipe, Huang et al., NeurIPS 2019, §2.2: a mini-batch split
// into M micro-batches whose gradients are summed before one update). Runs
// on @forward before loom-autodiff: the function built for one micro-batch
// of b rows becomes one that reads M*b rows, runs the model once on each
// slice of b rows and returns the mean of the M losses. loom-autodiff then
// derives the backward of every micro-batch, and each parameter's gradient
// is the sum of its M contributions, each scaled by 1/M: the gradient of
// the mean over M*b rows, so the step trains like one run on the whole
// batch (equal micro-batches, a loss that is a mean over its rows).
//
// What does not depend on the data (parameter loads, their casts, anything
// computed from parameters and constants alone) is computed once and shared
// by the micro-batches, so a parameter is read, cast or gathered once a
// step whatever M is.
//
// The copies are written last micro-batch first. loom-autodiff adds a
// value's gradient contributions in reverse program order, so each
// parameter's gradient is then summed from micro-batch 0 upwards, the order
// in which loom-pipeline-schedule's 1F1B order computes them: one running
// sum a parameter, not M gradients waiting for the last. Each input slice
// carries `loom.micro_batch`, which that pass orders by.
//
//===----------------------------------------------------------------------===//
#include "loom/Passes/Loom.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/MapVector.h"

namespace mlir::loom {
#define GEN_PASS_DEF_MICROBATCHES
#include "passes/Loom/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

constexpr llvm::StringLiteral kMetricPrefix = "metrics.";

struct MicroBatches : public mlir::loom::impl::MicroBatchesBase<MicroBatches> {
  using Base::Base;

  /// One store a metric: the mean of its micro-batches' values, or their
  /// sum where its state says it is a count (loom.metric_sum), so the log
  /// describes the whole step as it does without micro-batches.
  LogicalResult storeMetrics(ModuleOp module, OpBuilder &b, Location loc,
                             llvm::MapVector<StringRef, SmallVector<Value>> &metrics) {
    for (auto &[name, vals] : metrics) {
      auto state = module.lookupSymbol<StateOp>(name);
      auto type = dyn_cast<RankedTensorType>(vals.front().getType());
      if (!state || !type || !isa<FloatType>(type.getElementType()))
        return module.emitError() << "loom-micro-batches: metric '" << name
                                  << "' must be a float loom.state to be combined over the "
                                     "micro-batches";
      Value total = vals.front();
      for (Value v : ArrayRef<Value>(vals).drop_front())
        total = AddOp::create(b, loc, type, total, v);
      if (!state->hasAttr(LoomDialect::MetricSumAttrHelper::getNameStr())) {
        auto elt = cast<FloatType>(type.getElementType());
        APFloat inv(1.0 / double(vals.size()));
        bool lost;
        inv.convert(elt.getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
        auto plain = RankedTensorType::get(type.getShape(), elt);
        Value scale = arith::ConstantOp::create(b, loc, plain, DenseElementsAttr::get(plain, inv));
        total = MulOp::create(b, loc, type, total, scale);
      }
      StoreOp::create(b, loc, total, name);
    }
    return success();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fail = [&](Operation *at, const Twine &msg) {
      at->emitError() << "loom-micro-batches: " << msg;
      signalPassFailure();
    };
    if (count < 1 || count > 1024)
      return fail(module, "count must be a number of micro-batches in [1, 1024] (each is a "
                          "copy of the forward)");
    if (count == 1)
      return;
    auto fwd = module.lookupSymbol<func::FuncOp>(LoomDialect::kForward);
    if (!fwd)
      return fail(module, "no function @forward");
    if (module.lookupSymbol(LoomDialect::kForwardBackward) ||
        module.lookupSymbol(LoomDialect::kTrainStep))
      return fail(fwd, "run before loom-autodiff: the backward is derived from the "
                       "micro-batches' forwards");
    if (module->hasAttr(LoomDialect::GraphAttrHelper::getNameStr()))
      return fail(fwd, "a graph model samples its mini-batch as one tree of neighbours: "
                       "micro-batches are not built for graph models");
    if (!fwd.getBody().hasOneBlock())
      return fail(fwd, "@forward must be a single block");
    if (fwd.getNumArguments() == 0)
      return fail(fwd, "@forward has no inputs to split into micro-batches");
    // Every input's first dimension is its rows (train.h: shape[0] is the
    // batch); every result is a loss, a scalar mean over those rows.
    SmallVector<Type> wide;
    for (BlockArgument a : fwd.getArguments()) {
      auto t = dyn_cast<RankedTensorType>(a.getType());
      if (!t || t.getRank() < 1 || t.isDynamicDim(0) || isHostMemory(t))
        return fail(fwd, "input " + Twine(a.getArgNumber()) +
                             " is not a device tensor with a static batch dimension");
      SmallVector<int64_t> shape(t.getShape());
      shape[0] *= count;
      wide.push_back(RankedTensorType::get(shape, t.getElementType(), t.getEncoding()));
    }
    for (Type r : fwd.getResultTypes()) {
      auto t = dyn_cast<RankedTensorType>(r);
      if (!t || t.getRank() != 0 || !isa<FloatType>(t.getElementType()))
        return fail(fwd, "each result must be a scalar loss (a mean over the batch) to be "
                         "averaged over the micro-batches");
    }

    // The one-micro-batch body, kept aside as the template of every copy.
    func::FuncOp tmpl = fwd.clone();
    Block &from = tmpl.getBody().front();
    Block &body = fwd.getBody().front();
    while (!body.empty())
      body.back().erase();
    for (auto [a, t] : llvm::zip(body.getArguments(), wide))
      a.setType(t);
    fwd.setFunctionType(FunctionType::get(&getContext(), wide, fwd.getResultTypes()));

    // Values of the template that depend on an input: recomputed for each
    // micro-batch. The rest is built once, in the first copy.
    // (An op with no results, a collective's wait, goes with what it reads.)
    DenseSet<Value> perBatch(from.getArguments().begin(), from.getArguments().end());
    DenseSet<Operation *> perBatchOps;
    // (A pipeline transfer carries each micro-batch's activation: one per
    // micro-batch, whatever it reads.)
    for (Operation &op : from)
      if (isa<P2POp>(op) ||
          llvm::any_of(op.getOperands(), [&](Value v) { return perBatch.contains(v); })) {
        perBatchOps.insert(&op);
        perBatch.insert(op.getResults().begin(), op.getResults().end());
      }

    OpBuilder b = OpBuilder::atBlockEnd(&body);
    Location loc = fwd.getLoc();
    IRMapping shared;
    SmallVector<SmallVector<Value>> losses(fwd.getNumResults(), SmallVector<Value>(count));
    // A metric stored from each micro-batch's values (a store of a
    // metrics.* state that depends on the inputs): its M values, combined
    // into one store below instead of the last copy's overwriting the rest.
    llvm::MapVector<StringRef, SmallVector<Value>> metrics;
    StringRef tag = LoomDialect::MicroBatchAttrHelper::getNameStr();
    for (int64_t m = count - 1; m >= 0; --m) {
      IRMapping map = shared;
      for (auto [arg, slot] : llvm::zip(from.getArguments(), body.getArguments())) {
        auto t = cast<RankedTensorType>(arg.getType());
        SmallVector<int64_t> start(t.getRank(), 0), limit(t.getShape()), step(t.getRank(), 1);
        start[0] = m * t.getDimSize(0);
        limit[0] = (m + 1) * t.getDimSize(0);
        auto slice = SliceOp::create(b, loc, t, slot, b.getDenseI64ArrayAttr(start),
                                     b.getDenseI64ArrayAttr(limit), b.getDenseI64ArrayAttr(step));
        slice->setAttr(tag, b.getI64IntegerAttr(m));
        map.map(arg, slice);
      }
      for (Operation &op : from) {
        if (auto ret = dyn_cast<func::ReturnOp>(op)) {
          for (auto [i, v] : llvm::enumerate(ret.getOperands()))
            losses[i][m] = map.lookup(v);
          continue;
        }
        bool batch = perBatchOps.contains(&op);
        if (auto st = dyn_cast<StoreOp>(op);
            st && batch && st.getName().starts_with(kMetricPrefix)) {
          auto &vals = metrics[st.getName()];
          vals.resize(count);
          vals[m] = map.lookup(st.getValue());
          continue;
        }
        if (!batch && m < count - 1)
          continue; // built in the first copy, mapped in `shared`
        Operation *c = b.clone(op, map);
        if (isa<P2POp>(c))
          c->setAttr(tag, b.getI64IntegerAttr(m));
        if (!batch)
          for (auto [o, n] : llvm::zip(op.getResults(), c->getResults()))
            shared.map(o, n);
      }
    }
    tmpl.erase();
    if (failed(storeMetrics(module, b, loc, metrics)))
      return signalPassFailure();

    // Each loss: the mean of its micro-batches' (concatenated as [M]).
    SmallVector<Value> results;
    for (auto [i, ls] : llvm::enumerate(losses)) {
      auto scalar = cast<RankedTensorType>(fwd.getResultTypes()[i]);
      auto one = RankedTensorType::get({1}, scalar.getElementType());
      SmallVector<Value> rows;
      for (Value l : ls)
        rows.push_back(ReshapeOp::create(b, loc, one, l));
      auto all = RankedTensorType::get({count}, scalar.getElementType());
      Value cat = ConcatOp::create(b, loc, all, rows, b.getI64IntegerAttr(0));
      results.push_back(ReduceOp::create(b, loc, scalar, ReduceKind::mean, cat,
                                         b.getDenseI64ArrayAttr({0}), /*keepdim=*/false));
    }
    func::ReturnOp::create(b, loc, results);
  }
};

} // namespace
