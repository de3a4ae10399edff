//===- ReinitParams.cpp - loom-reinit-params ------------------------------===//
//
// Trades imported parameter values for initialisers (benchmark runs of
// imported models need no weights).
//
//===----------------------------------------------------------------------===//
#include "loom/Passes/Loom.h"

namespace mlir::loom {
#define GEN_PASS_DEF_REINITPARAMS
#include "passes/Loom/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {
struct ReinitParams
    : public mlir::loom::impl::ReinitParamsBase<ReinitParams> {
  using Base::Base;

  void runOnOperation() override {
    if (!(stddev > 0)) {
      getOperation().emitError() << "loom-reinit-params: std must be positive";
      return signalPassFailure();
    }
    for (ParamOp p : getOperation().getOps<ParamOp>()) {
      if (!p.getValue())
        continue;
      InitAttr init = defaultInitFor(p, stddev);
      p.removeValueAttr();
      p.setInitAttr(init);
    }
  }
};
} // namespace
