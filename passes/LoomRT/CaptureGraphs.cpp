//===- CaptureGraphs.cpp - loom-capture-graphs ----------------------------===//
//
// Which lowered functions the runtime may capture once as a graph (CUDA
// graphs, hipGraph) and replay every step instead of issuing their calls
// one by one. GPT-2's forward and backward are about 1,000 kernels a step,
// many of a few microseconds, and between two kernels issued apart the
// compute stream idles 2.5-2.7 us on the H200 (CUPTI, bench/RESULTS.md,
// 2026-11-29): launches replayed from a graph leave less.
//
// A capture records the calls, not what the host computed to make them,
// so a function qualifies when every call in it would be issued the same
// way every step: kernels and copies on the compute stream (constants from
// the device copy loomrt_step_const keeps), each buffer a global, an
// argument or a buffer at a planned offset (loom-plan-arena),
// and nothing the host waits for or computes per step (the step counter,
// the learning rate, dropout keys), no collectives, no other streams, no
// host tasks. The runtime checks the rest when it runs (the globals,
// inputs and planned region a graph was captured with: loomrt_step_graph).
//
//===----------------------------------------------------------------------===//
#include "dialects/LoomRT/LoomRTDialect.h"
#include "loom/Passes/LoomRT.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir::loom {
#define GEN_PASS_DEF_CAPTUREGRAPHS
#include "passes/LoomRT/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
namespace rt = mlir::loomrt;

namespace {

/// Why `fn` cannot be captured ("" when it can), memoised in `why` (a
/// function being decided counts as not capturable: recursion is not).
std::string decide(func::FuncOp fn, SymbolTable &symbols,
                   llvm::DenseMap<Operation *, std::string> &why) {
  auto known = why.find(fn);
  if (known != why.end())
    return known->second;
  why[fn] = "it calls itself";
  std::string reason;
  // (The op's name, not its location: a location names the input file,
  // and the same step compiled from two files must lower the same.)
  auto refuse = [&](Operation *op, const Twine &what) {
    reason = (what + " ('" + op->getName().getStringRef() + "')").str();
  };
  for (Operation &op : fn.getBody().front()) {
    if (!reason.empty())
      break;
    llvm::TypeSwitch<Operation *>(&op)
        .Case<rt::CommentOp, rt::GlobalOp, rt::ViewOp, rt::FreeOp, func::ReturnOp>(
            [](Operation *) {})
        .Case([&](rt::StreamOp s) {
          if (s.getRole() != rt::StreamRole::compute)
            refuse(s, "it uses the " + rt::stringifyStreamRole(s.getRole()) + " stream");
        })
        .Case([&](rt::AllocOp a) {
          // (Host buffers have no planned offset: the verifier's rule.)
          if (!a.getOffset())
            refuse(a, "a buffer the runtime places (loom-plan-arena did not place it)");
        })
        .Case([&](rt::CommOp o) { refuse(o, "a collective's communicator"); })
        .Case([&](rt::RandomKeyOp o) { refuse(o, "a dropout key drawn for each step"); })
        .Case<rt::ReadI64Op, rt::AddI64Op>(
            [&](Operation *o) { refuse(o, "the host reads a value back"); })
        .Case<rt::HostTaskOp, rt::JoinOp>(
            [&](Operation *o) { refuse(o, "work on the step's host thread"); })
        .Case<rt::RecordOp, rt::WaitOp, rt::SyncOp, rt::BackwardDoneOp>(
            [&](Operation *o) { refuse(o, "an event the step records or waits for"); })
        .Case<rt::AdamOp, rt::AdamMultiOp, rt::SgdOp>([&](Operation *o) {
          refuse(o, "an update with the step's learning rate and count");
        })
        .Case([&](func::CallOp call) {
          auto callee = symbols.lookup<func::FuncOp>(call.getCallee());
          if (!callee || callee.isExternal())
            return refuse(call, "a call of an unknown function");
          if (std::string r = decide(callee, symbols, why); !r.empty())
            refuse(call, "it calls @" + callee.getName() + ", which cannot be captured");
        })
        .Default([&](Operation *o) {
          // A call on a stream (loomrt.stream compute, checked above):
          // a kernel or a copy, issued the same way every step.
          if (isa<rt::WorkOpInterface>(o) && o->getNumOperands() &&
              isa<rt::StreamType>(o->getOperand(0).getType()))
            return;
          refuse(o, "not a kernel on the compute stream");
        });
  }
  why[fn] = reason;
  return reason;
}

struct CaptureGraphsPass : mlir::loom::impl::CaptureGraphsBase<CaptureGraphsPass> {
  void runOnOperation() override { captured += mlir::loom::captureGraphs(getOperation()); }
};

} // namespace

int64_t mlir::loom::captureGraphs(ModuleOp module) {
  SymbolTable symbols(module);
  llvm::DenseMap<Operation *, std::string> why;
  // A function called more than once a step (each micro-batch's forward
  // and backward) reads other inputs at each call: one graph would be
  // captured again at every call (the runtime keeps one a function).
  llvm::StringMap<int64_t> calls;
  module.walk([&](func::CallOp c) { ++calls[c.getCallee()]; });
  for (func::FuncOp fn : module.getOps<func::FuncOp>())
    if (int64_t n = calls.lookup(fn.getName()); n > 1)
      why[fn] = "it is called " + std::to_string(n) +
                " times a step, with other inputs each time (one graph a function)";
  int64_t n = 0;
  for (func::FuncOp fn : module.getOps<func::FuncOp>()) {
    if (fn.isExternal() || !fn.getBody().hasOneBlock())
      continue;
    fn->removeAttr(rt::kGraphAttr);
    fn->removeAttr(rt::kGraphDeclinedAttr);
    std::string reason = decide(fn, symbols, why);
    if (reason.empty()) {
      fn->setAttr(rt::kGraphAttr, UnitAttr::get(module.getContext()));
      ++n;
    } else {
      fn->setAttr(rt::kGraphDeclinedAttr, StringAttr::get(module.getContext(), reason));
    }
  }
  return n;
}
