//===- AttachOptimizer.cpp - loom-attach-optimizer ------------------------===//
//
// Turns "loss and gradients" into a training step: optimizer state as
// loom.state symbols next to each parameter, and @train_step applying the
// update (torch.optim.AdamW / Adam / SGD semantics, see loom.adam / loom.sgd).
//
//===----------------------------------------------------------------------===//
#include "loom/Passes/Loom.h"

#include "mlir/IR/Builders.h"

namespace mlir::loom {
#define GEN_PASS_DEF_ATTACHOPTIMIZER
#include "passes/Loom/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

struct AttachOptimizer
    : public mlir::loom::impl::AttachOptimizerBase<AttachOptimizer> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();
    auto fail = [&](Operation *at, const Twine &msg) {
      at->emitError() << "loom-attach-optimizer: " << msg;
      signalPassFailure();
    };
    if (!(lr > 0))
      return fail(module, "lr must be positive");
    auto fb = module.lookupSymbol<func::FuncOp>(function);
    if (!fb)
      return fail(module, "no function @" + function +
                              " (run loom-autodiff first)");
    auto names = fb->getAttrOfType<ArrayAttr>(LoomDialect::GradParamsAttrHelper::getNameStr());
    if (!names || fb.getNumResults() != names.size() + 1)
      return fail(fb, "@" + function +
                          " must return the loss and one gradient per entry "
                          "of its loom.grad_params");
    if (module.lookupSymbol(LoomDialect::kTrainStep))
      return fail(fb, "@train_step already exists");

    OpBuilder b(ctx);
    Location loc = fb.getLoc();
    auto zeros = InitAttr::get(ctx, InitKind::zeros, APFloat(0.0), APFloat(0.0));
    bool adam = optimizer != OptimizerKind::sgd;

    // State declarations, right after each parameter.
    auto i64 = RankedTensorType::get({}, IntegerType::get(ctx, 64));
    std::string stepName = "optimizer.step";
    if (adam) {
      b.setInsertionPoint(fb);
      for (Operation &op : module.getBody()->getOperations())
        if (isa<func::FuncOp>(op)) {
          b.setInsertionPoint(&op);
          break;
        }
      StateOp::create(b, loc, b.getStringAttr(stepName), TypeAttr::get(i64),
                      StateRoleAttr::get(ctx, StateRole::step), FlatSymbolRefAttr(),
                      zeros);
    }
    for (Attribute a : names) {
      auto ref = cast<FlatSymbolRefAttr>(a);
      auto param = module.lookupSymbol<ParamOp>(ref.getValue());
      if (!param)
        return fail(fb, "'" + ref.getValue() + "' is not a loom.param");
      b.setInsertionPointAfter(param);
      auto type = TypeAttr::get(param.getType());
      auto declare = [&](StringRef suffix, StateRole role) {
        std::string n = (ref.getValue() + suffix).str();
        if (module.lookupSymbol(n))
          return false;
        StateOp::create(b, loc, b.getStringAttr(n), type,
                        StateRoleAttr::get(ctx, role), ref, zeros);
        return true;
      };
      bool ok = adam ? declare(".exp_avg", StateRole::adam_m) &&
                           declare(".exp_avg_sq", StateRole::adam_v)
                     : declare(".momentum_buffer", StateRole::momentum);
      if (!ok)
        return fail(param, "optimizer state of '" + ref.getValue() +
                               "' exists already");
    }

    // @train_step: advance the step, call, update, store. The step counter
    // comes first: code generation reads it back to the host for the
    // updates (one synchronisation per step), which at the start of the
    // step waits for nothing; after the backward it made the host wait for
    // the whole backward before issuing anything else (measured on the
    // H100: the CPU updates of an offloaded 5B step started ~45 ms late).
    b.setInsertionPointAfter(fb);
    auto lossType = fb.getFunctionType().getResult(0);
    auto step = func::FuncOp::create(b, loc, LoomDialect::kTrainStep,
                                     b.getFunctionType(fb.getArgumentTypes(), {lossType}));
    Block *entry = step.addEntryBlock();
    b.setInsertionPointToStart(entry);
    Value t;
    if (adam) {
      Value t0 = LoadOp::create(b, loc, i64, stepName);
      auto one = arith::ConstantOp::create(
          b, loc, i64, DenseElementsAttr::get(i64, b.getI64IntegerAttr(1).getValue()));
      t = arith::AddIOp::create(b, loc, t0, one);
      StoreOp::create(b, loc, t, stepName);
    }
    auto call = func::CallOp::create(b, loc, fb, entry->getArguments());
    for (auto [i, a] : llvm::enumerate(names)) {
      StringRef p = cast<FlatSymbolRefAttr>(a).getValue();
      auto type = cast<RankedTensorType>(call.getResult(i + 1).getType());
      Value g = call.getResult(i + 1);
      Value w = LoadOp::create(b, loc, type, p);
      if (adam) {
        std::string mName = (p + ".exp_avg").str(), vName = (p + ".exp_avg_sq").str();
        Value m = LoadOp::create(b, loc, type, mName);
        Value v = LoadOp::create(b, loc, type, vName);
        auto upd = AdamOp::create(
            b, loc, type, type, type, w, g, m, v, t, b.getF64FloatAttr(lr),
            b.getF64FloatAttr(beta1), b.getF64FloatAttr(beta2),
            b.getF64FloatAttr(eps), b.getF64FloatAttr(weightDecay),
            optimizer == OptimizerKind::adamw ? b.getUnitAttr() : UnitAttr(),
            FlatSymbolRefAttr(), IntegerAttr());
        StoreOp::create(b, loc, upd.getNewParam(), p);
        StoreOp::create(b, loc, upd.getNewExpAvg(), mName);
        StoreOp::create(b, loc, upd.getNewExpAvgSq(), vName);
      } else {
        std::string bName = (p + ".momentum_buffer").str();
        Value buf = LoadOp::create(b, loc, type, bName);
        auto upd = SgdOp::create(b, loc, type, type, w, g, buf,
                                 b.getF64FloatAttr(lr),
                                 b.getF64FloatAttr(momentum),
                                 nesterov ? b.getUnitAttr() : UnitAttr());
        StoreOp::create(b, loc, upd.getNewParam(), p);
        StoreOp::create(b, loc, upd.getNewMomentumBuf(), bName);
      }
    }
    func::ReturnOp::create(b, loc, call.getResult(0));
  }
};

} // namespace
