//===- Planning.cpp - loomc's plans made by the step simulation -----------===//
//
// The decisions loomc makes by compiling candidates and pricing each with
// the step simulation: ZeRO-3's hierarchy (--hierarchy=auto) and activation
// checkpointing (--recompute=auto).
//
//===----------------------------------------------------------------------===//
#include "Planning.h"

#include "dialects/Loom/LoomDialect.h"
#include "loom/Passes/LoomToLoomRT.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
namespace cost = ::loom::cost;

namespace loom {

/// " NAME BYTES B SECONDS s;" for each communicator of a prediction.
std::string commSummary(const mlir::loom::StepPrediction &p) {
  std::string out;
  for (auto &[key, comm] : p.comm)
    out += llvm::formatv(" {0} {1} B {2:F4} s;", p.groupName(key), uint64_t(comm.bytes),
                         comm.seconds)
               .str();
  return out;
}

/// The step `module` becomes under `po` (compiled to the lowered phase on a
/// copy), priced by the step simulation on `hw`; nullopt after an error
/// (reported). Every planner's candidate is one of these.
static std::optional<mlir::loom::StepPrediction>
predictCandidate(ModuleOp module, Phase reached, const PipelineOptions &po,
                 const cost::Hardware &hw) {
  OwningOpRef<ModuleOp> copy = module.clone();
  PassManager pm(module.getContext());
  buildPipeline(pm, reached, Phase::Lowered, po);
  if (failed(pm.run(*copy)))
    return std::nullopt;
  // (Lowered by the pipeline already: the options only matter for
  // unlowered input.)
  FailureOr<mlir::loom::StepPrediction> p =
      mlir::loom::simulateStep(*copy, hw, false, loweringOf(po));
  if (failed(p))
    return std::nullopt;
  return std::move(*p);
}

/// --hierarchy=auto: compiles the step once per candidate — hpZ's
/// secondary partition (none, then the innermost 1, 2, ... levels short of
/// the world) and, with qgZ, its first stage (the innermost 1, 2, ...
/// levels short of the world) — prices each with the step simulation and
/// keeps the fastest that fits the device (hpZ trades memory for traffic
/// between levels). Prints the plan; returns the chosen candidate, or
/// nullopt after an error.
std::optional<HierarchyCandidate>
planHierarchy(ModuleOp module, Phase reached, PipelineOptions po,
              const cost::Hardware &hw, ArrayRef<std::pair<std::string, int64_t>> levels) {
  // The innermost k levels, k = 0 .. L-1, skipping a k whose last level
  // has one rank (the same ranks as k-1).
  std::vector<std::string> prefixes;
  for (size_t k = 0; k < levels.size(); ++k) {
    if (k > 0 && levels[k - 1].second == 1)
      continue;
    std::string sec;
    for (size_t i = 0; i < k; ++i)
      sec += (i ? "," : "") + levels[i].first;
    prefixes.push_back(sec);
  }
  std::vector<HierarchyCandidate> cands;
  for (const std::string &sec : prefixes)
    for (const std::string &inner : prefixes) {
      if (po.qgzBlock > 0 ? inner.empty() : !inner.empty())
        continue;
      cands.push_back({sec, inner, {}});
    }
  for (HierarchyCandidate &c : cands) {
    po.hpzLevels = c.secondary;
    po.qgzInner = c.qgzInner;
    std::optional<mlir::loom::StepPrediction> p = predictCandidate(module, reached, po, hw);
    if (!p)
      return std::nullopt;
    c.pred = std::move(*p);
  }
  const HierarchyCandidate *best = nullptr;
  auto fits = [&](const HierarchyCandidate &c) {
    return !hw.hasGpu || c.pred.peakDeviceBytes() <= mlir::loom::usableDeviceBytes(hw);
  };
  for (const HierarchyCandidate &c : cands)
    if (!best || (fits(c) && !fits(*best)) ||
        (fits(c) == fits(*best) && c.pred.stepSeconds < best->pred.stepSeconds))
      best = &c;
  constexpr double GiB = double(1ull << 30);
  std::string topo;
  for (auto &l : llvm::reverse(levels))
    topo += (topo.empty() ? "" : " x ") + l.first + "=" + std::to_string(l.second);
  llvm::errs() << "loomc: hierarchy plan (auto) for ZeRO-3 over " << topo << " on '" << hw.name
               << "': bytes this rank sends a step and their link time, per communicator\n";
  // Levels as the plan's rows name them: "gcd,gpu" -> "gcd+gpu".
  auto joined = [](std::string levels) {
    std::replace(levels.begin(), levels.end(), ',', '+');
    return levels;
  };
  for (const HierarchyCandidate &c : cands) {
    std::string name = c.secondary.empty() ? "flat" : "hpZ inside " + joined(c.secondary);
    if (!c.qgzInner.empty())
      name += ", qgZ first inside " + joined(c.qgzInner);
    llvm::errs() << llvm::formatv("loomc:   {0,-44} step {1:F4} s, device memory {2:F2} GiB:", name,
                                  c.pred.stepSeconds, c.pred.peakDeviceBytes() / GiB)
                 << commSummary(c.pred) << (&c == best ? "  <- chosen" : "")
                 << (fits(c) ? "" : "  (does not fit)") << "\n";
  }
  return *best;
}

/// --recompute=auto: activation checkpointing only where memory needs it.
/// Compiles the step without recompute; if it fits `budget` bytes, that is
/// the plan. Otherwise it compiles selective and full recompute on every
/// unit, and for each mode the number of units (from the first) that
/// brings the predicted peak under the budget, interpolated linearly
/// between none and all (a unit's activations are the same size from one
/// block to the next) and then checked by compiling it (one unit more at a
/// time while it does not fit); it keeps the fastest candidate that fits.
/// When none fits the budget: the fastest that fits the device's usable
/// memory, else the one with the least memory. With the interleaved
/// offload: the fastest of none, selective and full. Prints the plan.
bool planRecompute(ModuleOp module, Phase reached, PipelineOptions &po,
                   const cost::Hardware &hw, double budget) {
  struct Candidate {
    mlir::loom::RecomputeKind kind;
    int64_t units;
    mlir::loom::StepPrediction pred;
  };
  auto compile = [&](mlir::loom::RecomputeKind kind, int64_t units)
      -> std::optional<Candidate> {
    PipelineOptions c = po;
    c.recompute = kind;
    c.recomputeUnits = units;
    std::optional<mlir::loom::StepPrediction> p = predictCandidate(module, reached, c, hw);
    if (!p)
      return std::nullopt;
    return Candidate{kind, units, std::move(*p)};
  };
  auto fits = [&](const Candidate &c) { return c.pred.peakDeviceBytes() <= budget; };
  constexpr double GiB = double(1ull << 30);
  auto name = [](const Candidate &c) {
    std::string mode = c.kind == mlir::loom::RecomputeKind::none        ? "none"
                       : c.kind == mlir::loom::RecomputeKind::selective ? "selective"
                                                                        : "full";
    return c.kind == mlir::loom::RecomputeKind::none || c.units < 0
               ? mode
               : mode + " on the first " + std::to_string(c.units) + " units";
  };
  // Prints the candidates tried under `header` and takes `best`
  // (`budgeted`: marks those over the budget).
  auto choose = [&](const std::string &header, const std::vector<Candidate> &tried,
                    const Candidate &best, bool budgeted) {
    llvm::errs() << header;
    for (const Candidate &c : tried)
      llvm::errs() << llvm::formatv("loomc:   {0,-36} step {1:F4} s, device memory {2:F2} GiB",
                                    name(c), c.pred.stepSeconds, c.pred.peakDeviceBytes() / GiB)
                   << (c.kind == best.kind && c.units == best.units ? "  <- chosen" : "")
                   << (budgeted && !fits(c) ? "  (over the budget)" : "") << "\n";
    po.recompute = best.kind;
    po.recomputeUnits = best.units;
    return true;
  };
  std::optional<Candidate> none = compile(mlir::loom::RecomputeKind::none, -1);
  if (!none)
    return false;
  // With the interleaved offload every candidate fits: the offload planner
  // fills what the step leaves of the device with resident optimizer state.
  // What recompute frees is then resident state instead of CPU updates, so
  // the question is speed alone: the fastest of no, selective and full
  // recompute (a 13B GPT with ZeRO-3 on two 80 GB cards: 26 of 41 subgroups
  // resident without recompute, 37 with full, the step predicted 2.2x
  // faster).
  if (po.offload == "interleaved") {
    std::vector<Candidate> tried{*none};
    for (auto kind : {mlir::loom::RecomputeKind::selective, mlir::loom::RecomputeKind::full}) {
      std::optional<Candidate> all = compile(kind, -1);
      if (!all)
        return false;
      tried.push_back(*all);
    }
    const Candidate *best = &tried.front();
    for (const Candidate &c : tried)
      if (c.pred.stepSeconds < best->pred.stepSeconds)
        best = &c;
    return choose(llvm::formatv("loomc: recompute plan (auto) on '{0}' with the interleaved "
                                "offload (what recompute frees holds resident optimizer state):\n",
                                hw.name),
                  tried, *best, false);
  }
  if (fits(*none)) {
    po.recompute = mlir::loom::RecomputeKind::none;
    return true;
  }
  // The number of units: what loom-autodiff finds in the forward.
  int64_t units = 1;
  if (auto fwd = module.lookupSymbol<func::FuncOp>(mlir::loom::LoomDialect::kForward)) {
    SmallVector<Operation *> ops;
    for (Operation &op : fwd.getBody().front().without_terminator())
      ops.push_back(&op);
    units = mlir::loom::planUnits(ops).count();
  }
  std::vector<Candidate> tried{*none};
  std::optional<Candidate> best;
  for (auto kind : {mlir::loom::RecomputeKind::selective, mlir::loom::RecomputeKind::full}) {
    std::optional<Candidate> all = compile(kind, -1);
    if (!all)
      return false;
    tried.push_back(*all);
    if (!fits(*all))
      continue;
    // Peak(k) ~ none - k * (none - all) / units.
    double saved = (none->pred.peakDeviceBytes() - all->pred.peakDeviceBytes()) / double(units);
    int64_t k = saved > 0 ? int64_t(std::ceil((none->pred.peakDeviceBytes() - budget) / saved))
                          : units;
    std::optional<Candidate> pick = *all;
    // (A step of a sixteenth of the units when the guess falls short.)
    for (k = std::clamp<int64_t>(k, 1, units); k < units;
         k += std::max<int64_t>(1, units / 16)) {
      std::optional<Candidate> c = compile(kind, k);
      if (!c)
        return false;
      tried.push_back(*c);
      if (fits(*c)) {
        pick = c;
        break;
      }
    }
    if (!best || pick->pred.stepSeconds < best->pred.stepSeconds)
      best = pick;
  }
  // Nothing under the budget: the fastest candidate that still fits the
  // device (the budget's headroom given up), else the least memory there is.
  if (!best) {
    double usable = mlir::loom::usableDeviceBytes(hw);
    for (const Candidate &c : tried)
      if (c.pred.peakDeviceBytes() <= usable &&
          (!best || c.pred.stepSeconds < best->pred.stepSeconds))
        best = c;
    if (!best)
      for (const Candidate &c : tried)
        if (!best || c.pred.peakDeviceBytes() < best->pred.peakDeviceBytes())
          best = c;
  }
  return choose(llvm::formatv("loomc: recompute plan (auto) on '{0}' for a budget of {1:F1} GiB "
                              "({2} units):\n",
                              hw.name, budget / GiB, units),
                tried, *best, true);
}

/// --prefetch=auto: each window from 0 to 3 gathers ahead compiled and
/// priced; the fastest that fits the budget (the window trades memory, a
/// gathered block more in flight for each, against the gathers' wait).
bool planPrefetch(ModuleOp module, Phase reached, PipelineOptions &po, const cost::Hardware &hw,
                  double budget) {
  struct Candidate {
    int64_t window;
    mlir::loom::StepPrediction pred;
  };
  std::vector<Candidate> tried;
  for (int64_t w = 0; w <= 3; ++w) {
    PipelineOptions c = po;
    c.prefetch = w;
    std::optional<mlir::loom::StepPrediction> p = predictCandidate(module, reached, c, hw);
    if (!p)
      return false;
    tried.push_back({w, std::move(*p)});
  }
  const Candidate *best = nullptr;
  for (const Candidate &c : tried)
    if (c.pred.peakDeviceBytes() <= budget &&
        (!best || c.pred.stepSeconds < best->pred.stepSeconds - 1e-9))
      best = &c;
  po.prefetch = best ? best->window : 1;
  constexpr double GiB = double(1ull << 30);
  llvm::errs() << llvm::formatv("loomc: prefetch plan (auto) for ZeRO-3's gathers on '{0}':",
                                hw.name);
  for (const Candidate &c : tried)
    llvm::errs() << llvm::formatv(" {0} ahead {1:F4} s {2:F2} GiB{3};", c.window,
                                  c.pred.stepSeconds, c.pred.peakDeviceBytes() / GiB,
                                  c.window == po.prefetch ? " <- chosen" : "");
  llvm::errs() << "\n";
  return true;
}

/// " R resident, S streamed, C on the CPU" of a compiled plan (`mode`:
/// --optimizer-offload, for the modes that record no subgroups).
static std::string splitText(ModuleOp m, llvm::StringRef mode) {
  mlir::loom::OffloadPlanAttr p = mlir::loom::getOffloadPlan(m);
  return p ? llvm::formatv("{0} resident, {1} streamed, {2} on the CPU", p.getGpu(),
                           p.getStream(), p.getCpu())
                 .str()
         : mode == "cpu" ? "every update on the CPU"
                         : ("optimizer-offload " + mode).str();
}

/// --replan: the description's host rates (the CPU Adam rate and the DRAM
/// bandwidth it follows: cost::scaled's "dram") times each factor, the plan
/// loom-interleave-offload makes for each, one program per distinct plan,
/// and each program's step priced at every factor. A binary that measures
/// its CPU Adam rate at f times the description's continues under the plan
/// predicted fastest there (runtime/driver/replan.h).
bool planReplan(ModuleOp input, ModuleOp compiled, Phase reached, Phase phase,
                PipelineOptions po, const cost::Hardware &hw, int mode, ReplanPlans &out) {
  static constexpr double kFactors[] = {0.25, 0.5, 0.71, 1.0, 1.41, 2.0, 4.0};
  std::vector<cost::Hardware> scaledHw;
  for (double f : kFactors) {
    std::string err;
    std::optional<cost::Hardware> h = cost::scaled(hw, "dram", f, err);
    if (!h) {
      llvm::errs() << "loomc: error: --replan: " << err << "\n";
      return false;
    }
    scaledHw.push_back(*h);
  }
  std::vector<ModuleOp> plans{compiled};
  std::vector<std::string> texts{splitText(compiled, po.offload)};
  out.madeFor = {1.0};
  for (auto [f, h] : llvm::zip(kFactors, scaledHw)) {
    // `compiled` is the description's own plan; `cpu` and `static:R` make
    // the same one for every rate (only the predictions differ).
    if (f == 1.0 || po.offload != "interleaved")
      continue;
    PipelineOptions pf = po;
    pf.hardware = &h;
    OwningOpRef<ModuleOp> m = input.clone();
    PassManager pm(input.getContext());
    buildPipeline(pm, reached, phase, pf);
    if (failed(pm.run(*m)))
      return false;
    std::string text = splitText(*m, po.offload);
    llvm::errs() << llvm::formatv("loomc: replan: for {0:F2}x the host's CPU Adam rate: {1}{2}\n",
                                  f, text,
                                  llvm::is_contained(texts, text) ? " (a plan already made)" : "");
    if (llvm::is_contained(texts, text))
      continue;
    texts.push_back(text);
    plans.push_back(*m);
    out.madeFor.push_back(f);
    out.modules.push_back(std::move(m));
  }
  ReplanTable &t = out.table;
  t.mode = mode;
  t.factors.assign(std::begin(kFactors), std::end(kFactors));
  for (auto [k, m] : llvm::enumerate(plans)) {
    t.namespaces.push_back("plan" + std::to_string(k));
    t.plans.push_back(texts[k]);
    llvm::errs() << "loomc: replan: plan " << k << " (" << texts[k] << "), predicted step at";
    for (auto [f, h] : llvm::zip(kFactors, scaledHw)) {
      FailureOr<mlir::loom::StepPrediction> p =
          mlir::loom::simulateStep(m, h, false, loweringOf(po));
      if (failed(p))
        return false;
      t.predicted.push_back(p->stepSeconds);
      if (f == 1.0)
        out.peakDeviceBytes.push_back(p->peakDeviceBytes());
      llvm::errs() << llvm::formatv(" {0:F2}x: {1:F3} s", f, p->stepSeconds);
    }
    llvm::errs() << "\n";
  }
  return true;
}

/// Streaming DiLoCo's outer steps (loom-diloco's functions, each run every
/// H inner steps): each function simulated on one lowered copy, and the
/// mean step over H they make. A synchronous function (the outer step
/// without overlap, an apply) runs between two steps. An overlapped
/// exchange runs beside the next tau steps where the transport can run two
/// collectives at once (the elastic TCP transport, `elastic=1`: its apply
/// waits only for what the tau steps did not hide) and between two steps
/// otherwise (NCCL, MPI without MPI_THREAD_MULTIPLE): train_main.cpp's
/// rule. Returns the mean step (`step` without DiLoCo), or a negative
/// value on failure.
double predictDiloco(mlir::ModuleOp module, const cost::Hardware &hw,
                           const mlir::loom::LoweringOptions &lowering, double step) {
  bool any = false;
  for (auto fn : module.getOps<mlir::func::FuncOp>())
    any |= fn->hasAttr(mlir::loom::LoomDialect::DilocoAttrHelper::getNameStr());
  if (!any)
    return step;
  mlir::OwningOpRef<mlir::ModuleOp> copy = module.clone();
  if (failed(mlir::loom::lowerForSimulation(*copy, lowering)))
    return -1;
  struct Fn {
    std::string name;
    mlir::loom::DilocoAttr when;
    double seconds;
  };
  std::vector<Fn> fns;
  for (auto fn : copy->getOps<mlir::func::FuncOp>())
    if (auto a = fn->getAttrOfType<mlir::loom::DilocoAttr>(
            mlir::loom::LoomDialect::DilocoAttrHelper::getNameStr())) {
      mlir::FailureOr<mlir::loom::StepPrediction> p =
          mlir::loom::simulateLoweredStep(*copy, hw, false, fn.getSymName());
      if (failed(p))
        return -1;
      fns.push_back({fn.getSymName().str(), a, p->stepSeconds});
    }
  double between = 0, every = 0;
  std::string detail, warnings;
  for (const Fn &f : fns) {
    every = double(f.when.getEvery());
    double cost = f.seconds;
    if (f.when.getAsync()) {
      // Its apply: the same fragment's, tau steps later.
      std::string apply = "diloco_apply_" + llvm::StringRef(f.name).rsplit('_').second.str();
      int64_t tau = 0;
      for (const Fn &g : fns)
        if (g.name == apply)
          tau = g.when.getOffset() - f.when.getOffset();
      if (f.when.getElastic()) {
        cost = std::max(0.0, f.seconds - double(tau) * step);
        detail += llvm::formatv("; {0} {1:F3} s beside {2} steps ({3:F3} s): waits {4:F3} s",
                                f.name, f.seconds, tau, double(tau) * step, cost)
                      .str();
        if (cost > 0) {
          // The overlap that would hide it, if the schedule has room for it
          // (overlap stays below inner-steps / fragments).
          int64_t need = int64_t(std::ceil(f.seconds / std::max(step, 1e-12)));
          int64_t fragments = 0;
          for (const Fn &g : fns)
            fragments += g.when.getAsync() ? 1 : 0;
          int64_t room = f.when.getEvery() / std::max<int64_t>(fragments, 1);
          warnings += llvm::formatv("loomc: warning: Streaming DiLoCo's {0} ({1:F3} s) does not "
                                    "hide behind its {2} steps ({3:F3} s): each exchange makes a "
                                    "step {4:F3} s longer; {5}\n",
                                    f.name, f.seconds, tau, double(tau) * step, cost,
                                    need < room
                                        ? llvm::formatv("overlap={0} would hide it", need).str()
                                        : llvm::formatv("no overlap below inner-steps/fragments "
                                                        "= {0} can (it needs {1}): fewer "
                                                        "fragments, a larger inner-steps or fp4",
                                                        room, need)
                                              .str())
                          .str();
        }
      } else {
        detail += llvm::formatv("; {0} {1:F3} s between steps", f.name, f.seconds).str();
      }
    } else {
      detail += llvm::formatv("; {0} {1:F3} s", f.name, f.seconds).str();
    }
    between += cost;
  }
  double mean = step + (every > 0 ? between / every : 0);
  llvm::errs() << llvm::formatv("loomc: predicted Streaming DiLoCo on '{0}': mean step {1:F4} s "
                                "over {2} inner steps ({3:F1}% over the inner step){4}\n",
                                hw.name, mean, int64_t(every), 100 * (mean / step - 1), detail)
               << warnings;
  return mean;
}

} // namespace loom
