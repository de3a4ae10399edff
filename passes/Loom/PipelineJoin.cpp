//===- PipelineJoin.cpp - loom-pipeline-join -------------------------------===//
//
// What one pipeline stage's step shares with the others (loom-pipeline-
// split made the stage's program):
//  * the loss: only the last stage computes it; the others report zero, so
//    the sum over the stages is every stage's report (one scalar
//    all-reduce a step);
//  * tied parameters (loom.tied_peer, a copy on each of two stages): each
//    copy's gradient is its stage's part, and the parameter's gradient is
//    the sum of the two (Megatron-LM's all-reduce of the shared word
//    embeddings' gradients between the first and last stages, Narayanan
//    et al., SC 2021), so the copies take the same update and stay equal.
//    The exchange goes at the end of @forward_backward, after every
//    transfer of activations: the two stages reach it in the same order.
//
//===----------------------------------------------------------------------===//
#include "loom/Passes/Loom.h"

namespace mlir::loom {
#define GEN_PASS_DEF_PIPELINEJOIN
#include "passes/Loom/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

struct PipelineJoin : public mlir::loom::impl::PipelineJoinBase<PipelineJoin> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fail = [&](Operation *at, const Twine &msg) {
      at->emitError() << "loom-pipeline-join: " << msg;
      signalPassFailure();
    };
    FailureOr<GroupAttr> stages = pipelineGroup(module, "loom-pipeline-join");
    if (failed(stages))
      return signalPassFailure();
    if (!*stages)
      return; // not a stage's program
    GroupAttr group = *stages;
    auto fb = module.lookupSymbol<func::FuncOp>(LoomDialect::kForwardBackward);
    auto step = module.lookupSymbol<func::FuncOp>(LoomDialect::kTrainStep);
    if (!fb || !step || !fb.getBody().hasOneBlock() || !step.getBody().hasOneBlock())
      return fail(module, "needs @forward_backward and @train_step (run after "
                          "loom-attach-optimizer)");
    MLIRContext *ctx = &getContext();
    auto comm = StreamAttr::get(ctx, StreamKind::comm, 0);
    auto token = TokenType::get(ctx);
    OpBuilder b(ctx);

    // Tied gradients: exchanged with the other copy's stage and summed.
    auto names = fb->getAttrOfType<ArrayAttr>(LoomDialect::GradParamsAttrHelper::getNameStr());
    auto ret = cast<func::ReturnOp>(fb.getBody().front().getTerminator());
    if (!names || names.size() + 1 != ret.getNumOperands())
      return fail(fb, "@forward_backward must return the loss and one gradient per "
                      "loom.grad_params entry");
    b.setInsertionPoint(ret);
    for (auto [i, n] : llvm::enumerate(names)) {
      auto p = module.lookupSymbol<ParamOp>(cast<FlatSymbolRefAttr>(n).getValue());
      auto peer = p ? p->getAttrOfType<IntegerAttr>(LoomDialect::TiedPeerAttrHelper::getNameStr())
                    : IntegerAttr();
      if (!peer)
        continue;
      Value g = ret.getOperand(i + 1);
      auto x = P2POp::create(b, fb.getLoc(), g.getType(), token, g, ValueRange{}, group, peer,
                             peer, comm);
      WaitOp::create(b, fb.getLoc(), ValueRange{x.getToken()});
      ret->setOperand(i + 1, AddOp::create(b, fb.getLoc(), g.getType(), g, x.getResult()));
    }

    // The loss: summed over the stages where the step returns it.
    auto stepRet = cast<func::ReturnOp>(step.getBody().front().getTerminator());
    if (stepRet.getNumOperands() < 1)
      return fail(step, "@train_step must return the loss");
    Value loss = stepRet.getOperand(0);
    b.setInsertionPoint(stepRet);
    auto sum = AllReduceOp::create(b, step.getLoc(), loss.getType(), token, loss, ValueRange{},
                                   group, ReduceKind::sum, comm);
    WaitOp::create(b, step.getLoc(), ValueRange{sum.getToken()});
    stepRet->setOperand(0, sum.getResult());
  }
};

} // namespace
