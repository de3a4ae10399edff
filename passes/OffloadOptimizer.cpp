//===- OffloadOptimizer.cpp - loom-offload-optimizer ----------------------===//
//
// The ZeRO-Offload schedule (Ren et al., "ZeRO-Offload", ATC 2021, §4):
// master weights and Adam state live in pinned host memory and the CPU
// updates them; the GPU keeps a working copy of each parameter. Every step,
// each gradient is copied to the host right after the backward computes it
// (so the copies overlap the rest of the backward), the CPU runs Adam, and
// the updated weights are copied back into the working copies.
//
// This is the `cpu` baseline of issue 7's offload modes; the interleaved
// schedule (Deep Optimizer States) splits the same update between CPU and
// GPU by the cost model and builds on these placements and copies.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"

namespace mlir::loom {
#define GEN_PASS_DEF_OFFLOADOPTIMIZER
#include "passes/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

RankedTensorType placed(Type t, MemSpace space) {
  auto rt = cast<RankedTensorType>(t);
  return RankedTensorType::get(rt.getShape(), rt.getElementType(),
                               MemSpaceAttr::get(t.getContext(), space));
}

struct OffloadOptimizer
    : public mlir::loom::impl::OffloadOptimizerBase<OffloadOptimizer> {
  using Base::Base;

  LogicalResult fail(Operation *at, const Twine &msg) {
    at->emitError() << "loom-offload-optimizer: " << msg;
    return failure();
  }

  void runOnOperation() override {
    if (failed(run()))
      signalPassFailure();
  }

  LogicalResult run() {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    // cpu: every update on the CPU; static:R: the first parameters (in
    // declaration order) holding a fraction R of all elements keep their
    // state and update on the GPU, the rest go to the CPU (DeepSpeed's
    // fixed split, the baseline the interleaved schedule is measured
    // against).
    double ratio = 0;
    if (StringRef(mode).starts_with("static:")) {
      if (StringRef(mode).drop_front(7).getAsDouble(ratio) || !(ratio >= 0 && ratio <= 1))
        return fail(module, "static:R needs a fraction R in [0, 1], got '" + mode + "'");
    } else if (mode != "cpu") {
      return fail(module, "unknown mode '" + mode + "': expected cpu or static:R");
    }
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    auto fb = module.lookupSymbol<func::FuncOp>("forward_backward");
    if (!step || !fb)
      return fail(module, "needs @forward_backward and @train_step (run "
                          "loom-attach-optimizer first)");
    if (step->hasAttr("loom.data_parallel"))
      return fail(step, "offloading a data-parallel step is not supported yet");
    auto names = fb->getAttrOfType<ArrayAttr>("loom.grad_params");
    func::CallOp call;
    step.walk([&](func::CallOp c) {
      if (c.getCallee() == "forward_backward")
        call = c;
    });
    if (!names || !call || call.getNumResults() != names.size() + 1)
      return fail(fb, "@forward_backward must return the loss and one gradient per "
                      "loom.grad_params entry, and @train_step must call it");

    Block &fbBody = fb.getBody().front();
    auto ret = cast<func::ReturnOp>(fbBody.getTerminator());
    OpBuilder b(ctx);
    auto zeros = InitAttr::get(ctx, InitKind::zeros, APFloat(0.0), APFloat(0.0));
    auto h2d = StreamAttr::get(ctx, StreamKind::h2d, 0);
    auto d2h = StreamAttr::get(ctx, StreamKind::d2h, 0);
    auto tokType = TokenType::get(ctx);
    SmallVector<Value> tokens;

    // The parameters that stay on the GPU (static:R).
    llvm::DenseSet<StringAttr> onGpu;
    {
      int64_t total = 0, kept = 0;
      for (ParamOp p : module.getOps<ParamOp>())
        total += cast<RankedTensorType>(p.getType()).getNumElements();
      for (ParamOp p : module.getOps<ParamOp>()) {
        int64_t n = cast<RankedTensorType>(p.getType()).getNumElements();
        if (double(kept + n) > ratio * double(total) + 0.5)
          break;
        kept += n;
        onGpu.insert(p.getSymNameAttr());
      }
    }
    for (auto [i, a] : llvm::enumerate(names)) {
      auto sym = cast<FlatSymbolRefAttr>(a);
      auto param = module.lookupSymbol<ParamOp>(sym);
      if (!param)
        return fail(fb, "'" + sym.getValue() + "' is not a loom.param");
      if (onGpu.contains(param.getSymNameAttr()))
        continue;
      Value grad = call.getResult(i + 1);
      AdamOp adam;
      for (Operation *u : grad.getUsers())
        adam = dyn_cast<AdamOp>(u);
      if (!adam || !grad.hasOneUse())
        return fail(step, "the gradient of '@" + sym.getValue() +
                              "' must feed one loom.adam (--optimizer=adam|adamw)");
      auto pt = cast<RankedTensorType>(param.getType());
      if (pt.getEncoding())
        return fail(param, "is placed already");

      // The device working copy, initialised from the master weights.
      b.setInsertionPointAfter(param);
      std::string work = (sym.getValue() + ".work").str();
      auto workState = StateOp::create(b, param.getLoc(), b.getStringAttr(work),
                                       TypeAttr::get(pt), StateRoleAttr::get(ctx, StateRole::other),
                                       FlatSymbolRefAttr(), zeros);
      workState->setAttr("loom.mirror_of", sym);
      auto workSym = FlatSymbolRefAttr::get(ctx, work);

      // Master weights and Adam state move to pinned host memory.
      param.setTypeAttr(TypeAttr::get(placed(pt, MemSpace::pinned)));
      for (StringRef suffix : {".exp_avg", ".exp_avg_sq"}) {
        auto s = module.lookupSymbol<StateOp>((sym.getValue() + suffix).str());
        if (!s)
          return fail(param, "has no '" + suffix + "' state");
        s.setTypeAttr(TypeAttr::get(placed(s.getType(), MemSpace::pinned)));
      }

      // Everything but the update reads the working copy.
      module.walk([&](LoadOp l) {
        if (l.getNameAttr() == sym && l->getParentOp() != step.getOperation())
          l.setNameAttr(workSym);
      });

      // The gradient goes to the host as soon as it exists.
      Value g = ret.getOperand(i + 1);
      if (Operation *d = g.getDefiningOp())
        b.setInsertionPointAfter(d);
      else
        b.setInsertionPointToStart(&fbBody);
      auto copy = CopyOp::create(b, g.getLoc(), placed(g.getType(), MemSpace::pinned), tokType,
                                 g, ValueRange{}, d2h);
      tokens.push_back(copy.getToken());
      ret.setOperand(i + 1, copy.getResult());

      // @train_step: the update reads and writes host memory (the CPU runs
      // it), then the new weights go back to the working copy.
      for (Value in : {adam.getParam(), adam.getExpAvg(), adam.getExpAvgSq()}) {
        auto l = in.getDefiningOp<LoadOp>();
        if (!l)
          return fail(adam, "Adam's operands must be loaded from their symbols");
        in.setType(placed(in.getType(), MemSpace::pinned));
      }
      for (Value out : adam->getResults())
        out.setType(placed(out.getType(), MemSpace::pinned));
      StoreOp lastStore;
      for (Operation *u : adam.getNewParam().getUsers())
        if (auto st = dyn_cast<StoreOp>(u))
          lastStore = st;
      if (!lastStore)
        return fail(adam, "the updated parameter must be stored");
      Operation *after = adam;
      for (Operation *u : adam->getUsers())
        if (after->isBeforeInBlock(u))
          after = u;
      b.setInsertionPointAfter(after);
      Location loc = adam.getLoc();
      Value master = LoadOp::create(b, loc, placed(pt, MemSpace::pinned), sym);
      auto up = CopyOp::create(b, loc, pt, tokType, master, ValueRange{}, h2d);
      WaitOp::create(b, loc, ValueRange{up.getToken()});
      StoreOp::create(b, loc, up.getResult(), workSym);
    }
    // Gradients are on the host before the step reads them.
    b.setInsertionPoint(ret);
    if (!tokens.empty())
      WaitOp::create(b, ret.getLoc(), tokens);
    fb.setFunctionType(FunctionType::get(ctx, fb.getArgumentTypes(), ret.getOperandTypes()));
    b.setInsertionPoint(call);
    auto newCall = func::CallOp::create(b, call.getLoc(), fb, call.getOperands());
    for (auto [o, n] : llvm::zip(call.getResults(), newCall.getResults()))
      o.replaceAllUsesWith(n);
    call.erase();
    step->setAttr("loom.optimizer_offload", StringAttr::get(ctx, mode));
    return success();
  }
};

} // namespace
