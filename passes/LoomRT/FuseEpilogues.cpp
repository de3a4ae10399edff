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
// parallelism) becomes one product writing fp32 into the bucket. And an
// activation with a GEMM epilogue (GELU, tanh form) joins its GEMMs: the
// bias GEMM before it writes the activation and keeps its input
// (`loomrt.matmul_bias_act`), and the GEMM that computes its output's
// gradient applies its derivative (`loomrt.matmul_act_grad`): GPT-2's
// GELU passes over [rows, 4d] (forward and backward) are gone. And a
// weight gradient's GEMM sums its bias's gradient from the dY it reads
// (`loomrt.matmul_bgrad`), so that reduce's pass over dY goes too.
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
Operation *nextWork(Operation *m, Value x, SmallVectorImpl<Operation *> &hoist,
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

/// The one free of `x` besides the reads by `a` and `b`; fails (nullopt)
/// when anything else reads it or it is freed twice. A null FreeOp when
/// it is never freed.
std::optional<rt::FreeOp> onlyFree(Value x, Operation *a, Operation *b) {
  rt::FreeOp xFree;
  for (Operation *user : x.getUsers()) {
    if (user == a || user == b)
      continue;
    auto f = dyn_cast<rt::FreeOp>(user);
    if (!f || xFree)
      return std::nullopt;
    xFree = f;
  }
  return xFree;
}

/// Moves `hoist` up to `m` (in order), then builds NewOp in m's place from
/// `head` (its operands before the GEMM's attributes) and m's GEMM
/// attributes, with `out` as C's dtype.
template <typename NewOp, typename Op, typename... Head>
NewOp rebuildGemm(Op m, ArrayRef<Operation *> hoist, ::loom::OpPositions &pos, rt::DType out,
                  Head... head) {
  for (Operation *op : hoist) {
    op->moveBefore(m);
    pos.placed(op);
  }
  OpBuilder b(m);
  auto made = NewOp::create(b, m.getLoc(), m.getStream(), head..., m.getTransA(), m.getTransB(),
                            m.getBatch(), m.getM(), m.getN(), m.getK(), m.getStrideA(),
                            m.getStrideB(), m.getStrideC(), m.getIn(), out);
  pos.placed(made);
  return made;
}

/// Fuses `m` with the add after it when that add is a bias add of m's
/// whole result, the result is read by nothing else, and both buffers are
/// plain step-arena allocations of the same size. Returns the fused op
/// (null where it did not fuse).
rt::MatmulBiasOp fuse(rt::MatmulOp m, DominanceInfo &dom, ::loom::OpPositions &pos) {
  Value x = m.getC();
  SmallVector<Operation *> hoist;
  auto add = dyn_cast_or_null<rt::BinaryOp>(nextWork(m, x, hoist, pos));
  if (!add || add.getKind() != rt::BinaryKind::add || add.getStream() != m.getStream() ||
      add.getDtype() != m.getOut())
    return {};
  bool xFirst = add.getA() == x;
  if (!xFirst && add.getB() != x)
    return {};
  Value bias = xFirst ? add.getB() : add.getA();
  ArrayRef<int64_t> xShape = xFirst ? add.getAShape() : add.getBShape(),
                    biasShape = xFirst ? add.getBShape() : add.getAShape(),
                    outShape = add.getOutShape();
  const int64_t n = int64_t(m.getN());
  if (bias == x || xShape != outShape || outShape.empty() || outShape.back() != n ||
      biasShape.back() != n ||
      llvm::any_of(biasShape.drop_back(), [](int64_t d) { return d != 1; }))
    return {};
  int64_t elems = 1;
  for (int64_t d : outShape)
    elems *= d;
  // C must be the whole [batch, m, n] block, contiguous.
  if (elems != int64_t(m.getBatch() * m.getM()) * n ||
      (m.getBatch() > 1 && m.getStrideC() != m.getM() * m.getN()))
    return {};
  Value y = add.getOut();
  auto xAlloc = x.getDefiningOp<rt::AllocOp>(), yAlloc = y.getDefiningOp<rt::AllocOp>();
  bool biasMoves = llvm::is_contained(hoist, rt::bufferRoot(bias).getDefiningOp());
  if (!xAlloc || !yAlloc || xAlloc.getBytes() != yAlloc.getBytes() ||
      xAlloc.getHost() != yAlloc.getHost() || (!biasMoves && !dominates(bias, m, dom, pos)))
    return {};
  std::optional<rt::FreeOp> xFree = onlyFree(x, m, add);
  if (!xFree)
    return {}; // read elsewhere, or freed twice: leave it
  auto fused =
      rebuildGemm<rt::MatmulBiasOp>(m, hoist, pos, m.getOut(), m.getA(), m.getB(), bias, x);
  y.replaceAllUsesWith(x);
  for (Operation *gone : {xFree->getOperation(), add.getOperation(), yAlloc.getOperation(),
                          m.getOperation()})
    pos.erase(gone);
  return fused;
}

/// Whether `v` is a buffer the fused GEMM may write in place of the
/// elementwise call: the call's whole output, made in this block by an
/// allocation (or views of one) that can move up to `m`; `hoist` gets
/// what moves, in order. `fresh`: the buffer itself must be allocated
/// after `m` (not a view into one that the ops between may touch).
bool hoistOutput(Value v, Operation *m, SmallVectorImpl<Operation *> &hoist,
                 const ::loom::OpPositions &pos, bool fresh = false) {
  SmallVector<Operation *> chain;
  for (Operation *d = v.getDefiningOp(); d;) {
    if (d->getBlock() != m->getBlock() || pos.before(d, m) || llvm::is_contained(hoist, d)) {
      if (fresh)
        return false;
      break;
    }
    if (!isa<rt::AllocOp, rt::ViewOp>(d))
      return false;
    chain.insert(chain.begin(), d);
    auto view = dyn_cast<rt::ViewOp>(d);
    d = view ? view.getSource().getDefiningOp() : nullptr;
  }
  hoist.append(chain.begin(), chain.end());
  return true;
}

/// The first op after `m` in its block that takes `x`; null if none.
Operation *nextReader(Operation *m, Value x) {
  for (Operation *n = m->getNextNode(); n; n = n->getNextNode())
    if (llvm::is_contained(n->getOperands(), x))
      return n;
  return nullptr;
}

/// Whether the work the fused op takes from `last` may run where `m` is:
/// every op between is bookkeeping (comments, allocations, views,
/// globals, frees) or a call on m's stream, and none takes a buffer of
/// `keep` (the saved input `last` reads, which nothing between may write;
/// the output it writes, which nothing between may touch), and no wait on
/// another stream stands between.
bool independentUntil(Operation *m, Operation *last, ArrayRef<Value> keep) {
  for (Operation *n = m->getNextNode(); n && n != last; n = n->getNextNode()) {
    if (llvm::any_of(keep, [&](Value k) { return llvm::is_contained(n->getOperands(), k); }))
      return false;
    if (isa<rt::CommentOp, rt::AllocOp, rt::FreeOp, rt::ViewOp, rt::GlobalOp>(n))
      continue;
    if (!isa<rt::WorkOpInterface>(n) || n->getNumOperands() == 0 ||
        n->getOperand(0) != m->getOperand(0))
      return false;
  }
  return true;
}

/// The number of elements of a matmul-like op's C, or -1 where C is not
/// one contiguous block (strided batches).
template <typename Op> int64_t contiguousC(Op m) {
  if (m.getBatch() > 1 && m.getStrideC() != m.getM() * m.getN())
    return -1;
  return int64_t(m.getBatch() * m.getM() * m.getN());
}

/// Fuses a bias GEMM `m` with the GELU (tanh form) after it that reads its
/// whole result: the GEMM writes the activation into the unary's output
/// and keeps its own result (the activation's input, which the gradient
/// reads) as aux. Returns whether it did.
bool fuseActivation(rt::MatmulBiasOp m, ::loom::OpPositions &pos) {
  Value x = m.getC();
  SmallVector<Operation *> hoist;
  auto u = dyn_cast_or_null<rt::UnaryOp>(nextWork(m, x, hoist, pos));
  const int64_t count = contiguousC(m);
  if (!u || u.getKind() != rt::UnaryKind::gelu_tanh || u.getX() != x || u.getY() == x ||
      u.getStream() != m.getStream() || u.getDtype() != m.getOut() || count < 0 ||
      int64_t(u.getN()) != count || !hoistOutput(u.getY(), m, hoist, pos))
    return false;
  rebuildGemm<rt::MatmulBiasActOp>(m, hoist, pos, m.getOut(), u.getKind(), m.getA(), m.getB(),
                                   m.getBias(), x, u.getY());
  pos.erase(u);
  pos.erase(m);
  return true;
}

/// Fuses a GEMM `m` with the GELU (tanh form) gradient after it that takes
/// its whole result as the output's gradient: the GEMM applies the
/// derivative at the saved input in its epilogue and writes the
/// gradient's buffer; its own result buffer goes. Returns whether it did.
bool fuseActivationGrad(rt::MatmulOp m, DominanceInfo &dom, ::loom::OpPositions &pos) {
  Value x = m.getC();
  SmallVector<Operation *> hoist;
  auto g = dyn_cast_or_null<rt::UnaryGradOp>(nextReader(m, x));
  if (g && !independentUntil(m, g, {g.getX(), g.getDx()}))
    return false;
  const int64_t count = contiguousC(m);
  if (!g || g.getKind() != rt::UnaryKind::gelu_tanh || g.getDy() != x || g.getX() == x ||
      g.getStream() != m.getStream() || g.getDtype() != m.getOut() ||
      m.getIn() != m.getOut() || count < 0 || int64_t(g.getN()) != count ||
      !dominates(g.getX(), m, dom, pos))
    return false;
  Value dx = g.getDx();
  std::optional<rt::FreeOp> xFree = onlyFree(x, m, g);
  if (!xFree || (dx != x && !hoistOutput(dx, m, hoist, pos, /*fresh=*/true)))
    return false;
  rebuildGemm<rt::MatmulActGradOp>(m, hoist, pos, m.getOut(), g.getKind(), m.getA(), m.getB(),
                                   g.getX(), dx);
  pos.erase(g);
  pos.erase(m);
  if (dx != x) { // the product's own buffer goes (in place, its free frees dx)
    pos.erase(*xFree);
    if (auto xAlloc = x.getDefiningOp<rt::AllocOp>(); xAlloc && xAlloc->use_empty())
      pos.erase(xAlloc);
  }
  return true;
}

/// Whether the ops strictly between `from` and `to` (one block) leave
/// `dy` as it is and do not take `db`: an op that takes dy must be a
/// product reading it (as a or b).
bool untouchedBetween(Operation *from, Operation *to, Value dy, Value db) {
  for (Operation *n = from->getNextNode(); n && n != to; n = n->getNextNode()) {
    if (llvm::is_contained(n->getOperands(), db))
      return false;
    if (!llvm::is_contained(n->getOperands(), dy))
      continue;
    // A product of any kind that takes dy only as an input (a or b).
    Value a, b;
    if (auto p = dyn_cast<rt::MatmulOp>(n))
      a = p.getA(), b = p.getB();
    else if (auto p = dyn_cast<rt::MatmulBiasOp>(n))
      a = p.getA(), b = p.getB();
    else if (auto p = dyn_cast<rt::MatmulActGradOp>(n))
      a = p.getA(), b = p.getB();
    else if (auto p = dyn_cast<rt::MatmulBiasActOp>(n))
      a = p.getA(), b = p.getB();
    else if (auto p = dyn_cast<rt::MatmulBgradOp>(n))
      a = p.getA(), b = p.getB();
    else
      return false;
    int inputs = (a == dy) + (b == dy);
    if (int(llvm::count(n->getOperands(), dy)) != inputs)
      return false;
  }
  return true;
}

/// Fuses a weight gradient's GEMM `m` (dW = dYᵀ · X: A is dY, transposed,
/// one batch) with the reduce that sums dY's rows into the bias's
/// gradient (before or after it, on its stream): the product computes the
/// sum from the dY it reads anyway, and the reduce's pass goes. Where the
/// reduce came first, nothing between may take its result; where it came
/// after, its buffer is allocated after `m` and moves up. Returns whether
/// it did.
bool fuseBiasGrad(rt::MatmulOp m, ::loom::OpPositions &pos) {
  Value dy = m.getA();
  if (!m.getTransA() || m.getBatch() != 1 || m.getIn() != m.getOut() || m.getC() == dy)
    return false;
  rt::ReduceOp r;
  for (Operation *u : dy.getUsers()) {
    auto c = dyn_cast<rt::ReduceOp>(u);
    if (c && c.getX() == dy && c.getKind() == rt::ReduceKind::sum &&
        c.getDtype() == m.getIn() && c.getOuter() == 1 && c.getLen() == m.getK() &&
        c.getInner() == m.getM() && c.getStream() == m.getStream() &&
        c->getBlock() == m->getBlock() && c.getY() != m.getB()) {
      r = c;
      break;
    }
  }
  if (!r)
    return false;
  Value db = r.getY();
  SmallVector<Operation *> hoist;
  if (pos.before(r, m) ? !untouchedBetween(r, m, dy, db)
                       : !untouchedBetween(m, r, dy, db) ||
                             !hoistOutput(db, m, hoist, pos, /*fresh=*/true))
    return false;
  rebuildGemm<rt::MatmulBgradOp>(m, hoist, pos, m.getOut(), m.getA(), m.getB(), m.getC(), db);
  pos.erase(r);
  pos.erase(m);
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
  std::optional<rt::FreeOp> xFree = onlyFree(x, m, c);
  if (!xFree)
    return false;
  // The slot must exist where the product runs.
  Value y = c.getY();
  SmallVector<Operation *> hoist;
  if (!hoistOutput(y, m, hoist, pos))
    return false;
  rebuildGemm<rt::MatmulOp>(m, hoist, pos, rt::DType::f32, m.getA(), m.getB(), y);
  for (Operation *gone : {c.getOperation(), xFree->getOperation(), m.getOperation()})
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
  SmallVector<rt::MatmulBiasOp> biased;
  module.walk([&](rt::MatmulBiasOp m) { // made earlier
    pos.numberBlockOf(m);
    biased.push_back(m);
  });
  for (rt::MatmulOp m : matmuls) {
    if (rt::MatmulBiasOp mb = fuse(m, dom, pos)) {
      ++n;
      biased.push_back(mb);
      continue;
    }
    n += fuseUpcast(m, pos) || fuseActivationGrad(m, dom, pos) || fuseBiasGrad(m, pos);
  }
  for (rt::MatmulBiasOp m : biased)
    n += fuseActivation(m, pos);
  return n;
}
