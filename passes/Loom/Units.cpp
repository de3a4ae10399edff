//===- Units.cpp - units of sharding and recomputation --------------------===//
//
// A unit is what FSDP wraps with `fully_shard` and what Megatron checkpoints
// with `checkpoint_activations`: one transformer block. ZeRO-3 gathers a
// unit's parameters in one collective just before the unit runs and
// releases them after (loom-data-parallel), and activation checkpointing
// keeps only what crosses a unit's boundary, recomputing the rest during the
// unit's backward (loom-autodiff). Both read the same partition, made here
// from the forward pass alone:
//
//  * a parameter belongs to a block when a dotted component of its name is
//    a number: `model.layers.3.mlp.up_proj.weight` and `h.3.attn.c_attn.w`
//    to the blocks `model.layers.3` and `h.3` (the names PyTorch modules,
//    Hugging Face exports and loomc's generators give); blocks are numbered
//    1, 2, ... in the order the forward first reads them;
//  * an op's unit is the largest unit among its inputs (a block's norm reads
//    the previous block's output and its own weight: it is the block's), 0
//    when none (the embedding, and whatever precedes the first block); the
//    final norm, the head and the loss join the last block;
//  * "free" ops - parameter loads, constants, and casts, reshapes,
//    transposes and broadcasts of free values - belong to no unit: they cost
//    nothing to make again, so each unit that reads one makes its own copy
//    when it is recomputed (and ZeRO-3 gathers a parameter where it is
//    read);
//  * a parameter outside every block (the embedding table, the final norm,
//    the head) belongs to the first unit that reads it.
//
// A model without numbered parameters is one unit: recompute is then the
// whole forward again (the previous behaviour) and ZeRO-3 gathers it in
// buckets of `bucket-size`.
//
//===----------------------------------------------------------------------===//
#include "loom/Passes/Loom.h"

using namespace mlir;
using namespace mlir::loom;

StringRef mlir::loom::blockOfParam(StringRef name) {
  size_t start = 0;
  while (start < name.size()) {
    size_t dot = name.find('.', start);
    StringRef part = name.slice(start, dot == StringRef::npos ? name.size() : dot);
    if (!part.empty() && llvm::all_of(part, [](char c) { return c >= '0' && c <= '9'; }))
      return name.take_front(start + part.size());
    if (dot == StringRef::npos)
      break;
    start = dot + 1;
  }
  return {};
}

bool mlir::loom::isFreeOp(Operation *op, const llvm::DenseSet<Operation *> &free) {
  if (isa<LoadOp>(op) || op->getNumOperands() == 0)
    return op->getNumRegions() == 0;
  if (!isa<CastOp, ReshapeOp, TransposeOp, BroadcastOp>(op))
    return false;
  return llvm::all_of(op->getOperands(), [&](Value v) {
    Operation *d = v.getDefiningOp();
    return d && free.contains(d);
  });
}

UnitPlan mlir::loom::planUnits(ArrayRef<Operation *> forwardOps) {
  UnitPlan plan;
  llvm::StringMap<int64_t> blockIndex;
  // The block a free value reads (through casts and reshapes), or -1.
  llvm::DenseMap<Value, int64_t> freeBlock, unitOf;
  // The parameters a free value reads.
  llvm::DenseMap<Value, SmallVector<StringRef, 1>> freeParams;
  for (Operation *op : forwardOps) {
    if (isFreeOp(op, plan.free)) {
      plan.free.insert(op);
      int64_t blk = -1;
      SmallVector<StringRef, 1> params;
      if (auto l = dyn_cast<LoadOp>(op)) {
        StringRef key = blockOfParam(l.getName());
        if (!key.empty()) {
          auto [it, added] = blockIndex.try_emplace(key, int64_t(plan.blocks.size()) + 1);
          if (added)
            plan.blocks.push_back(key.str());
          blk = it->second;
        }
        params.push_back(l.getName());
      }
      for (Value in : op->getOperands()) {
        blk = std::max(blk, freeBlock.lookup_or(in, -1));
        auto it = freeParams.find(in);
        if (it != freeParams.end())
          params.append(it->second.begin(), it->second.end());
      }
      for (Value r : op->getResults()) {
        freeBlock[r] = blk;
        freeParams[r] = params;
      }
      continue;
    }
    int64_t unit = 0;
    for (Value in : op->getOperands()) {
      if (Operation *d = in.getDefiningOp(); d && plan.free.contains(d))
        unit = std::max(unit, freeBlock.lookup_or(in, -1));
      else
        unit = std::max(unit, unitOf.lookup_or(in, 0));
    }
    plan.ofOp[op] = unit;
    for (Value r : op->getResults())
      unitOf[r] = unit;
  }
  // Parameters: the first unit that reads them.
  for (Operation *op : forwardOps) {
    auto it = plan.ofOp.find(op);
    if (it == plan.ofOp.end())
      continue;
    for (Value in : op->getOperands()) {
      auto p = freeParams.find(in);
      if (p == freeParams.end())
        continue;
      for (StringRef name : p->second) {
        auto [slot, added] = plan.ofParam.try_emplace(name, it->second);
        if (!added)
          slot->second = std::min(slot->second, it->second);
      }
    }
  }
  return plan;
}
