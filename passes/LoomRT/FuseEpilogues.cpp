//===- FuseEpilogues.cpp - loom-fuse-epilogues ----------------------------===//
//
// A linear layer's bias add folded into its GEMM: in the lowered step,
// `loomrt.matmul` into %x followed by `loomrt.binary add` of %x and a
// vector broadcast along the last dimension becomes one
// `loomrt.matmul_bias` writing %x, and the add's result buffer goes away
// (its uses read %x). On CUDA the bias then joins the GEMM's fp32
// accumulator in cuBLASLt's epilogue, and the add's pass over the
// activation (a read and a write of [rows, n]) is gone: four a GPT block in
// the forward. Likewise a bf16 product cast up to fp32 into a gradient
// bucket at once (a weight's gradient under mixed precision and data
// parallelism) becomes one product writing fp32 into the bucket.
//
//===----------------------------------------------------------------------===//
#include "dialects/LoomRT/LoomRTDialect.h"
#include "loom/Passes/LoomRT.h"
#include "loom/Support/OpPositions.h"

#include "mlir/IR/Dominance.h"

namespace mlir::loom {
#define GEN_PASS_DEF_FUSEEPILOGUES
#include "passes/LoomRT/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
namespace rt = mlir::loomrt;

namespace {

/// The next op after `m` that does work on its result `x`, and the ops
/// before it that move up to `m` for the fusion: comments, allocations
/// and the releases of other buffers are skipped; an op that makes the
/// bias from what exists before `m` (a parameter's bf16 cast: under
/// recompute the cloned block casts its bias after the product) moves up.
/// Under recompute the product's inputs are released right after it and
/// the bias's cast came between; the add then stayed apart, and the
/// recomputed step rounded the product to bf16 before adding the bias
/// where the step without recompute did not: the two parted in the fifth
/// digit on an H200. Null when anything else comes first.
Operation *nextWork(rt::MatmulOp m, Value x, SmallVectorImpl<Operation *> &hoist,
                    const ::loom::OpPositions &pos) {
  llvm::SmallPtrSet<Operation *, 8> moving;
  auto before = [&](Value v) {
    Operation *d = v.getDefiningOp();
    return !d || moving.contains(d) || d->getBlock() != m->getBlock() || pos.before(d, m);
  };
  for (Operation *n = m->getNextNode(); n; n = n->getNextNode()) {
    if (isa<rt::CommentOp, rt::AllocOp>(n) || (isa<rt::FreeOp>(n) && n->getOperand(0) != x))
      continue;
    if (llvm::is_contained(n->getOperands(), x))
      return n;
    if (!isa<rt::GlobalOp, rt::ViewOp, rt::CastOp>(n))
      return nullptr;
    // What it reads exists before `m`; what it writes is a buffer made
    // after `m` (which moves up with it).
    for (Value v : n->getOperands()) {
      auto a = v.getDefiningOp<rt::AllocOp>();
      if (a && a->getBlock() == m->getBlock() && pos.before(m, a) && !moving.contains(a)) {
        moving.insert(a);
        hoist.push_back(a);
      } else if (!before(v)) {
        return nullptr;
      }
    }
    moving.insert(n);
    hoist.push_back(n);
  }
  return nullptr;
}

/// Whether `v` exists before `m` runs: MLIR's dominance, with the order
/// inside one block from `pos`.
bool dominates(Value v, Operation *m, DominanceInfo &dom, const ::loom::OpPositions &pos) {
  Operation *d = v.getDefiningOp();
  if (d && d->getBlock() == m->getBlock())
    return d != m && pos.before(d, m);
  return dom.properlyDominates(v, m);
}

/// Fuses `m` with the add after it when that add is a bias add of m's
/// whole result, the result is read by nothing else, and both buffers are
/// plain step-arena allocations of the same size. Returns whether it did.
bool fuse(rt::MatmulOp m, DominanceInfo &dom, ::loom::OpPositions &pos) {
  Value x = m.getC();
  SmallVector<Operation *> hoist;
  auto add = dyn_cast_or_null<rt::BinaryOp>(nextWork(m, x, hoist, pos));
  if (!add || add.getKind() != rt::BinaryKind::add || add.getStream() != m.getStream() ||
      add.getDtype() != m.getOut())
    return false;
  bool xFirst = add.getA() == x;
  if (!xFirst && add.getB() != x)
    return false;
  Value bias = xFirst ? add.getB() : add.getA();
  ArrayRef<int64_t> xShape = xFirst ? add.getAShape() : add.getBShape(),
                    biasShape = xFirst ? add.getBShape() : add.getAShape(),
                    outShape = add.getOutShape();
  const int64_t n = int64_t(m.getN());
  if (bias == x || xShape != outShape || outShape.empty() || outShape.back() != n ||
      biasShape.back() != n ||
      llvm::any_of(biasShape.drop_back(), [](int64_t d) { return d != 1; }))
    return false;
  int64_t elems = 1;
  for (int64_t d : outShape)
    elems *= d;
  // C must be the whole [batch, m, n] block, contiguous.
  if (elems != int64_t(m.getBatch() * m.getM()) * n ||
      (m.getBatch() > 1 && m.getStrideC() != m.getM() * m.getN()))
    return false;
  Value y = add.getOut();
  auto xAlloc = x.getDefiningOp<rt::AllocOp>(), yAlloc = y.getDefiningOp<rt::AllocOp>();
  bool biasMoves = llvm::is_contained(hoist, rt::bufferRoot(bias).getDefiningOp());
  if (!xAlloc || !yAlloc || xAlloc.getBytes() != yAlloc.getBytes() ||
      xAlloc.getHost() != yAlloc.getHost() || (!biasMoves && !dominates(bias, m, dom, pos)))
    return false;
  rt::FreeOp xFree;
  for (Operation *user : x.getUsers()) {
    if (user == m || user == add)
      continue;
    auto f = dyn_cast<rt::FreeOp>(user);
    if (!f || xFree)
      return false; // read elsewhere, or freed twice: leave it
    xFree = f;
  }
  for (Operation *op : hoist) {
    op->moveBefore(m);
    pos.placed(op);
  }
  OpBuilder b(m);
  auto fused = rt::MatmulBiasOp::create(b, m.getLoc(), m.getStream(), m.getA(), m.getB(), bias,
                                        x, m.getTransA(), m.getTransB(), m.getBatch(), m.getM(),
                                        m.getN(), m.getK(), m.getStrideA(), m.getStrideB(),
                                        m.getStrideC(), m.getIn(), m.getOut());
  pos.placed(fused);
  y.replaceAllUsesWith(x);
  for (Operation *gone : {xFree.getOperation(), add.getOperation(), yAlloc.getOperation(),
                          m.getOperation()})
    pos.erase(gone);
  return true;
}

/// A buffer's root and its byte offset into it (through views; nullopt
/// through anything else that aliases).
std::optional<std::pair<Value, int64_t>> placeOf(Value v) {
  int64_t off = 0;
  while (Operation *d = v.getDefiningOp()) {
    if (auto vw = dyn_cast<rt::ViewOp>(d)) {
      off += int64_t(vw.getOffset());
      v = vw.getSource();
      continue;
    }
    if (!isa<rt::AllocOp, rt::GlobalOp>(d))
      return std::nullopt;
    break;
  }
  return std::pair(v, off);
}

/// Whether `n`, between a product `m` and the cast of its result into
/// the slot `slot` of `bytes` bytes, may stay between once `m` writes the
/// slot itself: every buffer it takes lies outside the slot's bucket, or
/// it is a cast into another slot of the bucket that does not overlap
/// (the bias gradient's upcast of the same layer comes between the weight
/// gradient's product and its upcast: the upcast fused only where
/// recompute ordered the two the other way, and under ZeRO-3 the steps
/// with and without recompute differed in the weight gradients' bits).
bool independent(Operation *n, std::pair<Value, int64_t> slot, int64_t bytes) {
  for (Value v : n->getOperands()) {
    if (!isa<rt::BufferType>(v.getType()))
      continue;
    std::optional<std::pair<Value, int64_t>> at = placeOf(v);
    if (!at)
      return false;
    if (at->first != slot.first)
      continue;
    auto c = dyn_cast<rt::CastOp>(n);
    if (!c || v != c.getY())
      return false;
    int64_t size = int64_t(c.getN()) * rt::dtypeBytes(c.getTo());
    if (at->second < slot.second + bytes && slot.second < at->second + size)
      return false;
  }
  return true;
}

/// Fuses a bf16 `m` with the cast of its whole result to fp32 right after
/// it into a slot of a larger buffer (a gradient bucket of data
/// parallelism, where mixed precision's weight gradients are flattened in
/// fp32 for their reduction): the GEMM writes fp32 from its fp32
/// accumulator straight into the slot, so the bf16 buffer, its rounding and
/// the cast's pass (2 + 4 bytes an element) go. Only into a slot: a cast
/// into a buffer of its own feeds an update that the offload path feeds
/// with the bf16 gradient itself (offloaded and on-device steps stay equal
/// bit for bit), while a bucket is reduced in fp32 either way. Only
/// comments, allocations, views and other buffers' frees may stand between;
/// the slot's view (and its buffer's allocation) moves up to the product.
/// Returns whether it did.
bool fuseUpcast(rt::MatmulOp m, ::loom::OpPositions &pos) {
  Value x = m.getC();
  if (m.getOut() != rt::DType::bf16)
    return false;
  Operation *n = m->getNextNode();
  SmallVector<Operation *> between; // checked once the slot is known
  for (; n; n = n->getNextNode()) {
    if (isa<rt::CommentOp, rt::AllocOp, rt::ViewOp>(n) ||
        (isa<rt::FreeOp>(n) && n->getOperand(0) != x))
      continue;
    if (llvm::is_contained(n->getOperands(), x))
      break;
    if (!isa<rt::CastOp>(n))
      return false;
    between.push_back(n);
  }
  auto c = dyn_cast_or_null<rt::CastOp>(n);
  if (!c || c.getX() != x || c.getFrom() != rt::DType::bf16 || c.getTo() != rt::DType::f32 ||
      c.getStream() != m.getStream() || !c.getY().getDefiningOp<rt::ViewOp>())
    return false;
  if (int64_t(c.getN()) != int64_t(m.getBatch() * m.getM() * m.getN()) ||
      (m.getBatch() > 1 && m.getStrideC() != m.getM() * m.getN()))
    return false;
  std::optional<std::pair<Value, int64_t>> slot = placeOf(c.getY());
  if (!slot || !llvm::all_of(between, [&](Operation *o) {
        return independent(o, *slot, int64_t(c.getN()) * 4);
      }))
    return false;
  auto xAlloc = x.getDefiningOp<rt::AllocOp>();
  rt::FreeOp xFree;
  for (Operation *user : x.getUsers()) {
    if (user == m || user == c)
      continue;
    auto f = dyn_cast<rt::FreeOp>(user);
    if (!f || xFree)
      return false;
    xFree = f;
  }
  // The slot must exist where the product runs.
  Value y = c.getY();
  SmallVector<Operation *> hoist;
  for (Value v = y; Operation *d = v.getDefiningOp();) {
    if (d->getBlock() != m->getBlock() || pos.before(d, m))
      break;
    if (!isa<rt::AllocOp, rt::ViewOp>(d))
      return false;
    hoist.insert(hoist.begin(), d);
    if (auto view = dyn_cast<rt::ViewOp>(d))
      v = view.getSource();
    else
      break;
  }
  for (Operation *d : hoist) {
    d->moveBefore(m);
    pos.placed(d);
  }
  OpBuilder b(m);
  auto upcast = rt::MatmulOp::create(b, m.getLoc(), m.getStream(), m.getA(), m.getB(), y,
                                     m.getTransA(), m.getTransB(), m.getBatch(), m.getM(),
                                     m.getN(), m.getK(), m.getStrideA(), m.getStrideB(),
                                     m.getStrideC(), m.getIn(), rt::DType::f32);
  pos.placed(upcast);
  for (Operation *gone : {c.getOperation(), xFree.getOperation(), m.getOperation()})
    pos.erase(gone);
  if (xAlloc && xAlloc->use_empty())
    pos.erase(xAlloc);
  return true;
}

struct FuseEpilogues : public mlir::loom::impl::FuseEpiloguesBase<FuseEpilogues> {
  using Base::Base;
  void runOnOperation() override { fused += mlir::loom::fuseEpilogues(getOperation()); }
};

} // namespace

int64_t mlir::loom::fuseEpilogues(ModuleOp module) {
  SmallVector<rt::MatmulOp> matmuls;
  module.walk([&](rt::MatmulOp m) { matmuls.push_back(m); });
  DominanceInfo dom(module);
  // (Numbered once: fusing moves ops, and asking MLIR the order after each
  // move renumbered the whole block, OpPositions.h.)
  ::loom::OpPositions pos;
  for (rt::MatmulOp m : matmuls)
    pos.numberBlockOf(m);
  int64_t n = 0;
  for (rt::MatmulOp m : matmuls)
    n += fuse(m, dom, pos) || fuseUpcast(m, pos);
  return n;
}
