//===- PrintSchedule.cpp - loom-print-schedule ----------------------------===//
//
// Prints the order of work on each lane (stream, GPU, CPU, host) of every
// function, with the bytes each transfer moves.
//
//===----------------------------------------------------------------------===//
#include "loom/Passes/Loom.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/ToolOutputFile.h"

namespace mlir::loom {
#define GEN_PASS_DEF_PRINTSCHEDULE
#include "passes/Loom/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

std::string laneName(StreamAttr s) {
  std::string name = stringifyStreamKind(s.getKind()).str();
  if (s.getIndex())
    name += "[" + std::to_string(s.getIndex()) + "]";
  return name;
}

/// A tensor type without its placement, for compact printing.
std::string shortType(Type t) {
  std::string out;
  llvm::raw_string_ostream os(out);
  if (auto packed = dyn_cast<PackedType>(t)) {
    os << "packed " << stringifyCodecKind(packed.getCodec().getKind()) << " ";
    t = packed.getLogical();
  }
  if (auto tensor = dyn_cast<RankedTensorType>(t))
    os << RankedTensorType::get(tensor.getShape(), tensor.getElementType());
  else
    os << t;
  return out;
}

int64_t payloadBytes(Type t) {
  if (auto packed = dyn_cast<PackedType>(t))
    return packed.getStorageBytes();
  auto tensor = cast<RankedTensorType>(t);
  return tensor.getNumElements() *
         ((tensor.getElementTypeBitWidth() + 7) / 8);
}

struct PrintSchedule
    : public mlir::loom::impl::PrintScheduleBase<PrintSchedule> {
  using Base::Base;

  void runOnOperation() override {
    std::string error;
    std::unique_ptr<llvm::ToolOutputFile> file;
    if (outputFile != "-") {
      file = openOutputFile(outputFile, &error);
      if (!file) {
        getOperation().emitError() << "loom-print-schedule: " << error;
        return signalPassFailure();
      }
    }
    llvm::raw_ostream &os = file ? file->os() : llvm::errs();
    getOperation().walk([&](func::FuncOp f) { print(f, os); });
    if (file)
      file->keep();
  }

  void print(func::FuncOp f, llvm::raw_ostream &os) {
    os << "schedule of @" << f.getName() << "\n";
    llvm::StringMap<unsigned> counters;
    llvm::DenseMap<Value, std::string> tokenLane;
    llvm::MapVector<StringRef, int64_t> bytes;
    auto row = [&](StringRef lane, bool numbered, Operation *op,
                   const std::string &detail) {
      std::string label = lane.str();
      if (numbered)
        label += "#" + std::to_string(counters[lane]++);
      os << "  " << llvm::left_justify(label, 12) << "  "
         << llvm::left_justify(op->getName().getStringRef(), 26) << detail
         << "\n";
      return label;
    };
    for (Operation &op : f.getBody().getOps()) {
      if (auto async = dyn_cast<AsyncOpInterface>(&op)) {
        std::string lane = laneName(async.getStreamAttr());
        // (A pipeline's receive reads nothing: what it moves is its result.)
        Type in = op.getNumOperands() ? op.getOperand(0).getType() : op.getResult(0).getType();
        int64_t n = payloadBytes(in);
        std::string detail = shortType(in);
        if (auto copy = dyn_cast<CopyOp>(&op))
          detail += " " + memName(getMemSpace(in)) + " -> " +
                    memName(getMemSpace(copy.getResult().getType()));
        detail += ", " + std::to_string(n) + " B";
        if (!async.getAsyncDeps().empty()) {
          detail += " after";
          for (Value d : async.getAsyncDeps())
            detail += " " + tokenLane.lookup(d);
        }
        bytes[StringAttr::get(&getContext(), lane).getValue()] += n;
        tokenLane[async.getAsyncToken()] = row(lane, true, &op, detail);
        continue;
      }
      if (auto wait = dyn_cast<WaitOp>(&op)) {
        std::string detail;
        for (Value t : wait.getTokens())
          detail += (detail.empty() ? "" : ", ") + tokenLane.lookup(t);
        row("host", false, &op, detail);
        continue;
      }
      if (op.hasTrait<ComputeOp>()) {
        ExecSide side = ExecSide::Unplaced;
        for (Type t : op.getOperandTypes())
          if (getExecSide(t) != ExecSide::Unplaced)
            side = getExecSide(t);
        StringRef lane = side == ExecSide::Gpu   ? "gpu"
                         : side == ExecSide::Cpu ? "cpu"
                                                 : "unplaced";
        std::string detail;
        for (Type t : op.getResultTypes())
          detail += (detail.empty() ? "" : ", ") + shortType(t);
        row(lane, true, &op, detail);
        continue;
      }
      if (isa<LoadOp, StoreOp, ReleaseOp, ZeroCopyOp>(op)) {
        std::string detail;
        if (auto load = dyn_cast<LoadOp>(&op))
          detail = "@" + load.getName().str();
        else if (auto store = dyn_cast<StoreOp>(&op))
          detail = "@" + store.getName().str();
        else
          detail = shortType(op.getOperand(0).getType());
        row("host", false, &op, detail);
      }
    }
    if (!bytes.empty()) {
      os << "bytes moved:";
      for (auto &[lane, n] : bytes)
        os << " " << lane << " " << n;
      os << "\n";
    }
  }

  static std::string memName(std::optional<MemSpace> m) {
    return m ? stringifyMemSpace(*m).str() : std::string("unplaced");
  }
};
} // namespace
