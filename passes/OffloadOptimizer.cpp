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

#include "loom/CostModel.h"

#include "mlir/IR/Builders.h"
#include "llvm/Support/MemoryBuffer.h"

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

NamedAttribute b0(MLIRContext *ctx, StringRef name, double v) {
  return NamedAttribute(StringAttr::get(ctx, name), FloatAttr::get(Float64Type::get(ctx), v));
}

struct OffloadOptimizer
    : public mlir::loom::impl::OffloadOptimizerBase<OffloadOptimizer> {
  using Base::Base;

  LogicalResult fail(Operation *at, const Twine &msg) {
    at->emitError() << "loom-offload-optimizer: " << msg;
    return failure();
  }

  SmallVector<std::pair<Value, FlatSymbolRefAttr>> pendingStores;
  SmallVector<Value> pendingTokens;

  void runOnOperation() override {
    if (failed(run()))
      signalPassFailure();
  }

  /// The streamed updates' state, waited and stored before @train_step
  /// returns.
  void finishStreamed(func::FuncOp step) {
    if (pendingTokens.empty())
      return;
    auto ret = cast<func::ReturnOp>(step.getBody().front().getTerminator());
    OpBuilder b(ret);
    WaitOp::create(b, ret.getLoc(), pendingTokens);
    for (auto &[v, sym] : pendingStores)
      StoreOp::create(b, ret.getLoc(), v, sym);
  }

  /// A parameter updated on the GPU while its state lives in host memory:
  /// weights, momentum and variance go to the device, Adam runs there, the
  /// state comes back, and the new weights are also the working copy.
  LogicalResult streamUpdate(OpBuilder &b, AdamOp adam, FlatSymbolRefAttr workSym,
                             RankedTensorType pt) {
    MLIRContext *ctx = adam.getContext();
    auto tok = TokenType::get(ctx);
    auto h2d = StreamAttr::get(ctx, StreamKind::h2d, 0);
    auto d2h = StreamAttr::get(ctx, StreamKind::d2h, 0);
    Location loc = adam.getLoc();
    b.setInsertionPoint(adam);
    SmallVector<Value> tokens;
    Value ins[3] = {adam.getParam(), adam.getExpAvg(), adam.getExpAvgSq()};
    for (int k = 0; k < 3; ++k) {
      auto l = ins[k].getDefiningOp<LoadOp>();
      if (!l)
        return fail(adam, "Adam's operands must be loaded from their symbols");
      l.getResult().setType(placed(pt, MemSpace::pinned));
      b.setInsertionPointAfter(l);
      auto up = CopyOp::create(b, loc, pt, tok, l.getResult(), ValueRange{}, h2d);
      l.getResult().replaceUsesWithIf(up.getResult(), [&](OpOperand &u) {
        return u.getOwner() == adam.getOperation();
      });
      tokens.push_back(up.getToken());
    }
    b.setInsertionPoint(adam);
    WaitOp::create(b, loc, tokens);
    // The state returns to host memory; the weights also to the working copy.
    StoreOp stores[3] = {};
    for (int k = 0; k < 3; ++k)
      for (Operation *u : adam->getResult(k).getUsers())
        if (auto st = dyn_cast<StoreOp>(u))
          stores[k] = st;
    if (!stores[0] || !stores[1] || !stores[2])
      return fail(adam, "the updated weights and state must be stored");
    SmallVector<Value> back;
    SmallVector<Value> downTokens;
    b.setInsertionPointAfter(adam);
    for (int k = 0; k < 3; ++k) {
      auto down = CopyOp::create(b, loc, placed(pt, MemSpace::pinned), tok, adam->getResult(k),
                                 ValueRange{}, d2h);
      back.push_back(down.getResult());
      downTokens.push_back(down.getToken());
    }
    StoreOp::create(b, loc, adam.getNewParam(), workSym);
    // The state reaches host memory while the CPU updates the other
    // parameters: the host waits for it (and stores it) only at the end of
    // the step (finishStreamed), so the two paths overlap.
    for (int k = 0; k < 3; ++k)
      pendingStores.push_back({back[k], stores[k].getNameAttr()});
    pendingTokens.append(downTokens);
    for (StoreOp st : stores)
      st.erase();
    return success();
  }

  LogicalResult run() {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    // cpu: every update on the CPU; static:R: the first parameters (in
    // declaration order) holding a fraction R of all elements keep their
    // state and update on the GPU, the rest go to the CPU (DeepSpeed's
    // fixed split, the baseline the interleaved schedule is measured
    // against).
    // interleaved: the state of every parameter stays in host memory; the
    // fraction the cost model finds fastest for this machine (Deep
    // Optimizer States §3: the CPU update and the PCIe round trip share
    // one host-memory budget) is streamed to the GPU, updated there and
    // streamed back each step, the rest updated by the CPU.
    double ratio = 0;
    bool stream = mode == "interleaved";
    if (StringRef(mode).starts_with("static:")) {
      if (StringRef(mode).drop_front(7).getAsDouble(ratio) || !(ratio >= 0 && ratio <= 1))
        return fail(module, "static:R needs a fraction R in [0, 1], got '" + mode + "'");
    } else if (stream) {
      std::optional<::loom::cost::Hardware> hw = ::loom::cost::preset(hardware);
      if (!hw) {
        auto buf = llvm::MemoryBuffer::getFile(hardware);
        if (!buf)
          return fail(module, "hardware '" + hardware + "' is neither a preset (" +
                                  ::loom::cost::presetNames() + ") nor a readable file");
        std::string err;
        hw = ::loom::cost::parseHardware((*buf)->getBuffer(), err);
        if (!hw)
          return fail(module, "hardware file '" + hardware + "': " + err);
      }
      int64_t total = 0;
      for (ParamOp p : module.getOps<ParamOp>())
        total += cast<RankedTensorType>(p.getType()).getNumElements();
      auto [f, est] = ::loom::cost::bestUpdateSplit(*hw, double(total));
      ratio = f;
      module->setAttr("loom.offload_plan",
                      DictionaryAttr::get(ctx, {b0(ctx, "gpu_fraction", f),
                                                b0(ctx, "predicted_update_s", est.total)}));
    } else if (mode != "cpu") {
      return fail(module, "unknown mode '" + mode + "': expected cpu, static:R or interleaved");
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
      bool streamed = false;
      if (onGpu.contains(param.getSymNameAttr())) {
        if (!stream)
          continue; // static: state stays on the device
        streamed = true;
      }
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

      if (streamed) {
        if (failed(streamUpdate(b, adam, workSym, pt)))
          return failure();
        continue;
      }
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
    finishStreamed(step);
    step->setAttr("loom.optimizer_offload", StringAttr::get(ctx, mode));
    return success();
  }
};

} // namespace
