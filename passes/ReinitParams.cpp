//===- ReinitParams.cpp - loom-reinit-params ------------------------------===//
//
// Trades imported parameter values for initialisers (benchmark runs of
// imported models need no weights).
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

namespace mlir::loom {
#define GEN_PASS_DEF_REINITPARAMS
#include "passes/Passes.h.inc"
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
    MLIRContext *ctx = &getContext();
    for (ParamOp p : getOperation().getOps<ParamOp>()) {
      if (!p.getValue())
        continue;
      auto type = cast<RankedTensorType>(p.getType());
      InitAttr init;
      if (type.getRank() >= 2)
        init = InitAttr::get(ctx, InitKind::normal, APFloat(0.0), APFloat(double(stddev)));
      else if (p.getSymName().ends_with("bias"))
        init = InitAttr::get(ctx, InitKind::zeros, APFloat(0.0), APFloat(0.0));
      else
        init = InitAttr::get(ctx, InitKind::ones, APFloat(0.0), APFloat(0.0));
      p.removeValueAttr();
      p.setInitAttr(init);
    }
  }
};
} // namespace
