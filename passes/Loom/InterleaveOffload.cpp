//===- InterleaveOffload.cpp - loom-interleave-offload --------------------===//
//
// Plans the Deep Optimizer States schedule (Maurya et al. 2024, §3): for
// each optimizer subgroup, whether its update runs on the GPU with its state
// resident in device memory (`gpu`), on the GPU with its state streamed in
// from pinned host memory and back (`stream`), or on the CPU (`cpu`). The
// plan is written on the loom.subgroup ops (`update`), where
// loom-offload-optimizer{mode=subgroups} applies it, a test can check it
// and a user can change it.
//
// How (docs/cost-model.md, "Planning the interleaved schedule"):
//  1. The GPU memory timeline of each candidate comes from simulating its
//     step (StepSimulation.cpp): parameters and state that stay in device
//     memory, plus the step arena's peak (activations at the start of the
//     backward, streamed state after it). Resident state is the cheapest
//     update there is (no PCIe traffic, the GPU's Adam rate), so the first
//     step keeps as many subgroups resident as fit: the largest k such that
//     the first k subgroups resident (the embedding and first layers, whose
//     gradients the backward produces last, when nothing else is left to
//     overlap) stay under the usable device memory.
//  2. Of the rest, s subgroups are streamed, spread evenly among the CPU's
//     (the paper's interleaving: the CPU and the GPU path work on
//     alternating subgroups), for every s that fits, with k or up to 8
//     fewer resident subgroups; each candidate's step is simulated and the
//     fastest kept. The simulation charges the CPU
//     updates and the DMA against one host-memory budget (Deep Optimizer
//     States §3, "competition for shared resources").
//
// Same plan every iteration: the decision depends on sizes and rates that
// do not change between iterations.
//
//===----------------------------------------------------------------------===//
#include "dialects/LoomRT/LoomRTDialect.h"
#include "loom/Passes/Loom.h"
#include "loom/Passes/LoomToLoomRT.h"

#include "mlir/IR/Builders.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <limits>

namespace mlir::loom {
#define GEN_PASS_DEF_INTERLEAVEOFFLOAD
#include "passes/Loom/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;
namespace cost = ::loom::cost;

namespace {

/// How many subgroups fewer than fit the planner keeps resident, at most,
/// when looking for a better mix with streamed ones.
constexpr size_t kFewerResident = 8;

struct InterleaveOffload
    : public mlir::loom::impl::InterleaveOffloadBase<InterleaveOffload> {
  using Base::Base;
  /// Set by createInterleaveOffloadFor: plan for this, not the option.
  std::optional<cost::Hardware> given;

  struct Outcome {
    bool ok = false;
    StepPrediction p;
    double cost() const { return p.stepSeconds; }
  };

  /// Simulates `module` with the subgroups placed as `plan`.
  Outcome evaluate(ModuleOp module, ArrayRef<UpdatePlace> plan, const cost::Hardware &hw) {
    OwningOpRef<ModuleOp> copy = module.clone();
    for (auto [sg, w] : llvm::zip(copy->getOps<SubgroupOp>(), plan))
      sg.setPlace(w);
    Outcome o;
    // The copy is ours: lowered in place, without the comments, fused as
    // the binary will be.
    if (failed(applyOffload(*copy, "subgroups", hostThread)) ||
        failed(lowerForSimulation(*copy, LoweringOptions::ofStep(hostThread, fuse, planArena, graphs))))
      return o;
    FailureOr<StepPrediction> p = simulateLoweredStep(*copy, hw, false);
    if (failed(p))
      return o;
    o.p = *p;
    o.ok = true;
    return o;
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::string err;
    std::optional<cost::Hardware> hw = given ? given : loadHardware(hardware, err);
    if (!hw) {
      module.emitError() << "loom-interleave-offload: " << err;
      return signalPassFailure();
    }
    SmallVector<SubgroupOp> sgs(module.getOps<SubgroupOp>());
    if (sgs.empty()) {
      module.emitError() << "loom-interleave-offload: no loom.subgroup (run "
                            "loom-optimizer-subgroups first)";
      return signalPassFailure();
    }
    size_t n = sgs.size();
    // Without a GPU the "device" is host memory (the CPU target): no limit
    // unless one is given.
    double usable = memoryLimit > 0 ? double(memoryLimit)
                    : hw->hasGpu    ? usableDeviceBytes(*hw)
                                    : std::numeric_limits<double>::infinity();
    auto plan = [&](size_t resident, size_t streamed) {
      SmallVector<UpdatePlace> p(n, UpdatePlace::cpu);
      for (size_t i = 0; i < resident; ++i)
        p[i] = UpdatePlace::gpu;
      size_t rest = n - resident;
      // Spread evenly: the j-th streamed subgroup at resident + (j+1/2)·rest/s.
      for (size_t j = 0; j < streamed && rest; ++j)
        p[resident + std::min(rest - 1, size_t((double(j) + 0.5) * double(rest) / double(streamed)))] =
            UpdatePlace::stream;
      return p;
    };
    auto fits = [&](const Outcome &o) { return o.ok && o.p.peakDeviceBytes() <= usable; };

    // 1. As many resident subgroups as fit (fewer resident never uses
    //    more memory, so the largest fitting k is found by bisection).
    Outcome none = evaluate(module, plan(0, 0), *hw);
    if (!none.ok)
      return signalPassFailure();
    if (!std::isfinite(none.cost())) {
      module.emitError() << "loom-interleave-offload: the step's predicted time on '" << hw->name
                         << "' is not finite (a collective over a level whose link the "
                            "hardware description lacks?): nothing to plan by";
      return signalPassFailure();
    }
    if (!fits(none)) {
      module.emitError() << llvm::formatv(
          "loom-interleave-offload: the step needs {0:F1} GiB of device memory with every "
          "update on the CPU, more than the {1:F1} GiB usable on '{2}'",
          none.p.peakDeviceBytes() / double(1ull << 30), usable / double(1ull << 30), hw->name);
      return signalPassFailure();
    }
    size_t lo = 0, hi = n;
    while (lo < hi) {
      size_t mid = (lo + hi + 1) / 2;
      if (fits(evaluate(module, plan(mid, 0), *hw)))
        lo = mid;
      else
        hi = mid - 1;
    }
    size_t resident = lo;

    // 2. How many of the rest to stream; and whether giving up a few
    //    resident subgroups leaves room for more streamed ones that pay
    //    more (streamed state occupies memory only after its gradients
    //    exist, when activations are being freed).
    size_t bestK = resident, bestS = 0;
    Outcome best = evaluate(module, plan(resident, 0), *hw);
    for (size_t k = resident; k + kFewerResident >= resident; --k) {
      size_t rest = n - k;
      size_t stride = std::max<size_t>(1, rest / 32);
      for (size_t s = k == resident ? stride : 0; s <= rest; s += stride) {
        Outcome o = evaluate(module, plan(k, s), *hw);
        if (fits(o) && o.cost() < best.cost()) {
          best = o;
          bestK = k;
          bestS = s;
        }
      }
      if (k == 0)
        break;
    }
    resident = bestK;
    SmallVector<UpdatePlace> chosen = plan(resident, bestS);
    MLIRContext *ctx = module.getContext();
    for (auto [sg, w] : llvm::zip(sgs, chosen))
      sg.setPlace(w);
    // Byte counts as integers; an unbounded one (no device memory limit on
    // a host without a GPU) is recorded as 0, "not given".
    auto bytes = [](double v) {
      return std::isfinite(v) && v >= 0 && v < 9.2e18 ? int64_t(v) : int64_t(0);
    };
    auto seconds = [](double v) { return APFloat(std::isfinite(v) && v >= 0 ? v : 0.0); };
    module->setAttr(LoomDialect::OffloadPlanAttrHelper::getNameStr(),
                    OffloadPlanAttr::get(ctx, int64_t(resident), int64_t(bestS),
                                         int64_t(n - resident - bestS), hw->name,
                                         seconds(best.cost()), seconds(best.p.updateSeconds),
                                         bytes(best.p.peakDeviceBytes()), bytes(usable)));
  }
};

} // namespace

std::unique_ptr<Pass> mlir::loom::createInterleaveOffloadFor(const cost::Hardware &hw,
                                                             const InterleaveOffloadOptions &o) {
  auto pass = std::make_unique<InterleaveOffload>(o);
  pass->given = hw;
  return pass;
}
