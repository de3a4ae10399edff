//===- PipelineCut.cpp - loom-pipeline-cut --------------------------------===//
//
// Where a pipeline's stages begin: the forward's units (one a transformer
// block, Units.cpp; the embedding before the first, the head and the loss
// with the last) cut into `stages` contiguous runs so that the slowest
// stage is as fast as it can be, under each stage's memory.
//
// A unit's time is its forward and backward on one micro-batch on the
// hardware description's GPU: each op's FLOPs and bytes priced by the step
// simulation's roofline (cost::gpuKernelTime), the backward of a product or
// attention twice its forward (two products a product: the input's and the
// weight's gradients), of anything else one more pass over the same bytes.
// A stage's memory is its parameters at 16 bytes each (fp32 weight,
// gradient and AdamW's two moments) plus its units' forward outputs (what
// the backward may read; recompute keeps less) for each micro-batch in
// flight: under 1F1B stage s holds min(P - s, M) (Narayanan et al., SC
// 2021, §2.2: the first stage the most).
//
// The cut minimises the slowest stage's time over every contiguous split
// that fits (dynamic programming over units and stages, exact). A 1F1B step
// is then about (M + P - 1) times the slowest stage's micro-batch; the
// bubble is the rest of it: 1 - M x (mean stage) / ((M + P - 1) x slowest).
//
//===----------------------------------------------------------------------===//
#include "loom/Passes/Loom.h"
#include "loom/PipelineTimeline.h"
#include "loom/StepSimulation.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <limits>
#include <set>

namespace mlir::loom {
#define GEN_PASS_DEF_PIPELINECUT
#include "passes/Loom/Passes.h.inc"

} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;
namespace cost = ::loom::cost;

namespace {

/// An op's forward and backward time on one micro-batch.
double opSeconds(Operation *op, const cost::Hardware &hw) {
  double bytes = 0, flops = 0, backward = 2;
  for (Value v : op->getOperands())
    bytes += double(storageBytesOf(v.getType()));
  for (Value v : op->getResults())
    bytes += double(storageBytesOf(v.getType()));
  auto shaped = op->getNumResults() ? dyn_cast<ShapedType>(op->getResult(0).getType())
                                    : ShapedType();
  Type et = shaped ? shaped.getElementType() : Type();
  cost::DType dt = et && et.isBF16() ? cost::DType::BF16 : cost::DType::F32;
  auto stat = [](Value v) {
    auto t = dyn_cast<RankedTensorType>(v.getType());
    return t && t.hasStaticShape() ? t : RankedTensorType();
  };
  if (auto mm = dyn_cast<MatmulOp>(op)) {
    auto lhs = stat(mm.getLhs()), out = stat(mm.getResult());
    if (lhs && out && lhs.getRank() >= 2) {
      int64_t k = lhs.getDimSize(lhs.getRank() - (mm.getTransposeLhs() ? 2 : 1));
      flops = 2 * double(out.getNumElements()) * double(k);
    }
  } else if (auto at = dyn_cast<AttentionOp>(op)) {
    auto q = stat(at.getQuery()), k = stat(at.getKey());
    // Two products of T x S x D a head, half of them under a causal mask.
    if (q && k && k.getRank() >= 2)
      flops = 4 * double(q.getNumElements()) * double(k.getDimSize(k.getRank() - 2)) *
              (at.getCausal() ? 0.5 : 1.0);
    backward = 2.5; // FlashAttention's backward: five products to the forward's two
  } else {
    backward = 1;
  }
  return (1 + backward) * cost::gpuKernelTime(hw, dt, flops, bytes);
}

struct PipelineCut : public mlir::loom::impl::PipelineCutBase<PipelineCut> {
  using Base::Base;

  void runOnOperation() override;

private:
  void printPlan(ArrayRef<int64_t> begin, ArrayRef<double> time,
                 const std::function<double(int64_t, int64_t, int64_t)> &memory,
                 const UnitPlan &units, StringRef hwName, const std::string &shared);
};

void PipelineCut::runOnOperation() {
  ModuleOp module = getOperation();
  auto fail = [&](Operation *at, const Twine &msg) {
    at->emitError() << "loom-pipeline-cut: " << msg;
    signalPassFailure();
  };
  if (stages < 1 || microBatches < 1)
    return fail(module, "stages and micro-batches must be positive");
  auto fwd = module.lookupSymbol<func::FuncOp>(LoomDialect::kForward);
  if (!fwd || !fwd.getBody().hasOneBlock())
    return fail(module, "no single-block function @forward (run before loom-autodiff)");
  std::string err;
  std::optional<cost::Hardware> hw = loadHardware(hardware, err);
  if (!hw)
    return fail(module, err);
  SmallVector<Operation *> ops;
  for (Operation &op : fwd.getBody().front().without_terminator())
    ops.push_back(&op);
  UnitPlan units = planUnits(ops);
  int64_t n = units.count(), p = stages;
  if (p > n)
    return fail(fwd, llvm::formatv("{0} stages but the forward has {1} units (the embedding "
                                   "and {2} blocks): a stage needs one",
                                   p, n, n - 1)
                         .str());
  // Each unit's time, activations and parameter bytes.
  SmallVector<double> time(n, 0), act(n, 0), param(n, 0);
  for (Operation *op : ops) {
    if (units.free.contains(op))
      continue;
    int64_t u = units.unitOf(op);
    time[u] += opSeconds(op, *hw);
    for (Value r : op->getResults())
      act[u] += double(storageBytesOf(r.getType()));
  }
  for (ParamOp prm : module.getOps<ParamOp>()) {
    auto it = units.ofParam.find(prm.getSymName());
    if (it != units.ofParam.end())
      param[it->second] += 4 * double(storageBytesOf(prm.getType())); // fp32: 16 bytes a parameter
  }
  auto memory = [&](int64_t s, int64_t from, int64_t to) {
    double a = 0, w = 0;
    for (int64_t u = from; u < to; ++u)
      a += act[u], w += param[u];
    return w + a * double(std::min<int64_t>(p - s, microBatches));
  };
  // (A description without a GPU: the stages run on CPU ranks, whose
  // memory the cut does not bound.)
  double budget = deviceMemory > 0 ? deviceMemory * double(1ull << 30)
                  : hw->hasGpu     ? usableDeviceBytes(*hw)
                                   : std::numeric_limits<double>::infinity();
  // best[s][u]: the slowest stage's time when stages 0..s-1 hold units
  // 0..u-1 and each fits, then the sum of the stages' squared times (of
  // the cuts with the same slowest stage, the most even); cut[s][u]: where
  // stage s-1 begins.
  const double inf = std::numeric_limits<double>::infinity();
  using Score = std::pair<double, double>;
  std::vector<std::vector<Score>> best(p + 1, std::vector<Score>(n + 1, {inf, inf}));
  std::vector<std::vector<int64_t>> cut(p + 1, std::vector<int64_t>(n + 1, -1));
  best[0][0] = {0, 0};
  for (int64_t s = 1; s <= p; ++s)
    for (int64_t u = s; u <= n; ++u)
      for (int64_t from = s - 1; from < u; ++from) {
        if (best[s - 1][from].first == inf || memory(s - 1, from, u) > budget)
          continue;
        double t = 0;
        for (int64_t k = from; k < u; ++k)
          t += time[k];
        Score v{std::max(best[s - 1][from].first, t), best[s - 1][from].second + t * t};
        if (v < best[s][u])
          best[s][u] = v, cut[s][u] = from;
      }
  if (best[p][n].first == inf)
    return fail(fwd, llvm::formatv("no cut into {0} stages fits {1:F1} GiB a stage with {2} "
                                   "micro-batches in flight",
                                   p, budget / double(1ull << 30), microBatches)
                         .str());
  SmallVector<int64_t> begin(p + 1, n);
  for (int64_t s = p, u = n; s > 0; --s)
    begin[s - 1] = u = cut[s][u];
  // Mark every op and parameter with its stage.
  OpBuilder b(&getContext());
  auto stageOf = [&](int64_t u) {
    return int64_t(llvm::upper_bound(ArrayRef<int64_t>(begin).take_front(p), u) -
                   begin.begin()) -
           1;
  };
  StringRef attr = LoomDialect::StageAttrHelper::getNameStr();
  for (Operation *op : ops)
    if (!units.free.contains(op))
      op->setAttr(attr, b.getI64IntegerAttr(stageOf(units.unitOf(op))));
  for (ParamOp prm : module.getOps<ParamOp>())
    if (auto it = units.ofParam.find(prm.getSymName()); it != units.ofParam.end())
      prm->setAttr(attr, b.getI64IntegerAttr(stageOf(it->second)));
  // A parameter read on several stages (GPT's embedding, tied to its head):
  // each holds a copy and their gradients are summed (loom-pipeline-split,
  // loom-pipeline-join), as Megatron does.
  llvm::StringMap<std::set<int64_t>> readers;
  std::function<void(StringRef, Operation *)> reach = [&](StringRef name, Operation *op) {
    for (Operation *u : op->getUsers()) {
      if (units.free.contains(u))
        reach(name, u);
      else if (auto st = u->getAttrOfType<IntegerAttr>(attr))
        readers[name].insert(st.getInt());
    }
  };
  for (Operation *op : ops)
    if (auto l = dyn_cast<LoadOp>(op))
      reach(l.getName(), op);
  std::string shared;
  for (auto &[name, st] : readers)
    if (st.size() > 1) {
      shared += (shared.empty() ? "" : ", ") + name.str() + (chunks > 1 ? " (chunks" : " (stages");
      for (int64_t s : st)
        shared += " " + std::to_string(s);
      shared += ")";
    }
  if (quiet)
    return;
  printPlan(begin, time, memory, units, hw->name, shared);
}

/// The plan, for a person (loomc prints it): each stage's (or chunk's)
/// units, time and memory, the step and its bubble.
void PipelineCut::printPlan(ArrayRef<int64_t> begin, ArrayRef<double> time,
                            const std::function<double(int64_t, int64_t, int64_t)> &memory,
                            const UnitPlan &units, StringRef hwName, const std::string &shared) {
  int64_t p = stages;
  double slowest = 0, sum = 0;
  std::string lines;
  for (int64_t s = 0; s < p; ++s) {
    double t = 0;
    for (int64_t u = begin[s]; u < begin[s + 1]; ++u)
      t += time[u];
    slowest = std::max(slowest, t), sum += t;
    auto name = [&](int64_t u) {
      return u == 0 ? std::string("embedding") : units.blocks[u - 1];
    };
    int64_t k = begin[s + 1] - begin[s];
    lines += llvm::formatv("\n  {7} {0}: {1} .. {2} ({3} unit{4}), {5:F2} ms a micro-batch "
                           "(forward and backward), {6:F1} GiB",
                           s, name(begin[s]), name(begin[s + 1] - 1), k, k == 1 ? "" : "s",
                           t * 1e3, memory(s, begin[s], begin[s + 1]) / double(1ull << 30),
                           chunks > 1 ? "chunk" : "stage")
                 .str();
  }
  double m = double(microBatches), steps = m + double(p) - 1;
  if (chunks > 1) {
    // Interleaved: chunk c on stage c mod (p / chunks), in Megatron-LM's
    // order; each chunk's forward a third of its time.
    int64_t ranks = p / chunks;
    cost::PipelineShape shape{ranks, chunks, microBatches, "interleaved"};
    std::optional<double> step;
    if (p % chunks == 0 && !cost::checkPipelineShape(shape)) {
      auto order = cost::pipelineOrder(shape);
      step = cost::timePipeline(
          order, ranks,
          [&](const cost::PipeUnit &u) {
            double t = 0;
            for (int64_t k = begin[u.chunk]; k < begin[u.chunk + 1]; ++k)
              t += time[k];
            return u.work == cost::PipeWork::Forward ? t / 3 : 2 * t / 3;
          },
          0);
    }
    llvm::errs() << llvm::formatv("loom-pipeline-cut: {0} chunks on '{1}' ({2} a stage, "
                                  "chunk c on stage c mod {3}), {4} micro-batches "
                                  "(interleaved 1F1B):{5}",
                                  p, hwName, int64_t(chunks), ranks, microBatches, lines);
    if (step)
      llvm::errs() << llvm::formatv("\n  step about {0:F1} ms, bubble {1:F1}% ((P-1)/(VM+P-1) "
                                    "= {2:F1}% for balanced chunks)",
                                    *step * 1e3, 100 * (1 - sum * double(microBatches) / double(ranks) / *step),
                                    100 * double(ranks - 1) /
                                        double(chunks * microBatches + ranks - 1));
    llvm::errs() << "\n";
    if (!shared.empty())
      llvm::errs() << "  read on several chunks (a copy on each stage, their gradients "
                      "summed): "
                   << shared << "\n";
    return;
  }
  llvm::errs() << llvm::formatv(
                          "loom-pipeline-cut: {0} stages on '{1}', {2} micro-batches (1F1B):{3}"
                          "\n  step about {4:F1} ms, bubble {5:F1}% ((P-1)/(M+P-1) = {6:F1}% "
                          "for balanced stages)",
                          p, hwName, microBatches, lines, steps * slowest * 1e3,
                          100 * (1 - m * sum / double(p) / (steps * slowest)),
                          100 * (double(p) - 1) / steps)
               << "\n";
  if (!shared.empty())
    llvm::errs() << "  read on several stages (a copy on each, their gradients summed): " << shared
                 << "\n";
}

} // namespace
