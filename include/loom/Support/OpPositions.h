//===- OpPositions.h - op order within a block, kept across moves -*- C++ -*-===//
//
// `Operation::isBeforeInBlock` numbers a block's ops lazily, and every move
// inside a block (`moveBefore`, `moveAfter`: a splice) invalidates the
// numbering, so a pass that moves an op and then asks an order question
// renumbers the whole block each time: quadratic. On an 80-block Llama's
// lowered step (~100k ops a block) that was 70% of a compile for a step
// prediction (loom-compose-copies) and 45% of a ZeRO-3 one
// (loom-fuse-epilogues). OpPositions numbers the blocks once and places
// each op a pass creates or moves between its neighbours' numbers; an op
// it does not know falls back to MLIR's order.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_SUPPORT_OPPOSITIONS_H
#define LOOM_SUPPORT_OPPOSITIONS_H

#include "mlir/IR/Block.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace loom {

class OpPositions {
public:
  /// Numbers the ops of `op`'s block in order, once per block.
  void numberBlockOf(mlir::Operation *op) {
    mlir::Block *block = op->getBlock();
    if (!numbered.insert(block).second)
      return;
    double i = 0;
    for (mlir::Operation &o : *block)
      at[&o] = (i += 1024);
  }
  /// Whether `a` comes before `b`, both in one block.
  bool before(mlir::Operation *a, mlir::Operation *b) const {
    auto ia = at.find(a), ib = at.find(b);
    if (ia == at.end() || ib == at.end())
      return a->isBeforeInBlock(b);
    return ia->second < ib->second;
  }
  /// `op` was just created or moved where it now is: it takes a number
  /// between its neighbours' (forgotten, so asked of MLIR, when they have
  /// none or no number is left between them).
  void placed(mlir::Operation *op) {
    mlir::Operation *prev = op->getPrevNode(), *next = op->getNextNode();
    auto ip = prev ? at.find(prev) : at.end(), in = next ? at.find(next) : at.end();
    double lo, hi;
    if (prev && next && ip != at.end() && in != at.end())
      lo = ip->second, hi = in->second;
    else if (!prev && next && in != at.end())
      lo = in->second - 2048, hi = in->second;
    else if (prev && !next && ip != at.end())
      lo = ip->second, hi = ip->second + 2048;
    else
      return forget(op);
    double mid = lo + (hi - lo) / 2;
    if (!(mid > lo && mid < hi))
      return forget(op);
    at[op] = mid;
  }
  /// Erases `op` (null: nothing), forgetting its number first (its
  /// address may be reused).
  void erase(mlir::Operation *op) {
    if (!op)
      return;
    forget(op);
    op->erase();
  }

private:
  void forget(mlir::Operation *op) { at.erase(op); }
  llvm::DenseMap<mlir::Operation *, double> at;
  llvm::SmallPtrSet<mlir::Block *, 8> numbered;
};

} // namespace loom

#endif // LOOM_SUPPORT_OPPOSITIONS_H
