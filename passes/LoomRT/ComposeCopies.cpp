//===- ComposeCopies.cpp - loom-compose-copies ----------------------------===//
//
// Two strided copies in a row become one: `loomrt.copy_strided` of %a into
// a fresh buffer %t, then of %t into %d, is one copy of %a into %d where %t
// is a dense temporary read by nothing else. The lowering makes these
// chains at every attention: the slice of q, k or v out of the fused qkv
// projection is one copy and its head transpose ([B, T, H, D] to
// [B, H, T, D]) another; in the backward, the gradient's head transpose
// and its copy into the concatenated qkv gradient. Six of GPT-2's fourteen
// copies a layer go, each a read and a write of a [B, T, C] activation.
//
// The composed copy's source strides: %t is dense over the first copy's
// shape P, so an offset into it is a mixed-radix number with digits P. A
// dimension of the second copy that moves r whole units of one digit k
// (its stride r * stride_k of %t) moves r * a_k in %a, provided the digits
// never carry: the largest value each dimension can add to digit k, summed
// over the dimensions that land on it, stays below P_k. A dimension that
// spans several digits at unit step (a merged [H * D] row) is split into
// them first. Where that fails the pair is left alone.
//
//===----------------------------------------------------------------------===//
#include "dialects/LoomRT/LoomRTDialect.h"
#include "loom/Passes/LoomRT.h"
#include "loom/Support/OpPositions.h"

#include "mlir/Interfaces/CallInterfaces.h"
#include "llvm/Support/MathExtras.h"

namespace mlir::loom {
#define GEN_PASS_DEF_COMPOSECOPIES
#include "passes/LoomRT/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
namespace rt = mlir::loomrt;

namespace {

Value rootOf(Value v) { return rt::bufferRoot(v); }

struct Dim {
  int64_t size, src, dst;
};

/// The second copy's dimensions (size, stride into the dense temporary of
/// shape `p`, stride into its destination) re-expressed over the first
/// copy's source strides `a`; nullopt where a dimension's steps would carry
/// from one digit of the temporary's offset into the next.
std::optional<SmallVector<Dim>> composeDims(ArrayRef<int64_t> p, ArrayRef<int64_t> a,
                                            ArrayRef<int64_t> q, ArrayRef<int64_t> c,
                                            ArrayRef<int64_t> d) {
  // Empty copies, and sizes or strides past 2^40 (hand-written IR; the
  // products below must not overflow) are left alone.
  constexpr int64_t kMax = int64_t(1) << 40;
  auto fits = [&](ArrayRef<int64_t> xs, int64_t lo) {
    return llvm::all_of(xs, [&](int64_t x) { return x >= lo && x <= kMax; });
  };
  if (!fits(p, 1) || !fits(q, 1) || !fits(c, 0) ||
      !llvm::all_of(a, [&](int64_t x) { return x >= -kMax && x <= kMax; }) ||
      !llvm::all_of(d, [&](int64_t x) { return x >= -kMax && x <= kMax; }))
    return std::nullopt;
  // The temporary's digits (dimensions of size 1 hold none) and their
  // dense strides, outermost first.
  SmallVector<int64_t> digits, place(p.size());
  int64_t stride = 1;
  for (int64_t k = int64_t(p.size()) - 1; k >= 0; --k) {
    place[k] = stride;
    stride *= p[k];
  }
  for (size_t k = 0; k < p.size(); ++k)
    if (p[k] > 1)
      digits.push_back(int64_t(k));
  SmallVector<int64_t> used(p.size(), 0); // the most each digit can receive
  SmallVector<Dim> out;
  for (size_t j = 0; j < q.size(); ++j) {
    // A dimension may split into several (outermost first); `rest` holds
    // what is left of it, innermost digits taken first.
    SmallVector<Dim> parts;
    Dim rest{q[j], c[j], d[j]};
    while (true) {
      if (rest.size == 1 || rest.src == 0) {
        parts.push_back({rest.size, 0, rest.dst});
        break;
      }
      auto it = llvm::find_if(digits, [&](int64_t k) {
        return place[k] <= rest.src && rest.src % place[k] == 0;
      });
      if (it == digits.end())
        return std::nullopt;
      int64_t k = *it, r = rest.src / place[k];
      // (size - 1) * r + used < p, in a form that cannot overflow.
      if (rest.size - 1 <= (p[k] - 1 - used[k]) / r) {
        int64_t src;
        if (llvm::MulOverflow(r, a[k], src))
          return std::nullopt;
        used[k] += (rest.size - 1) * r;
        parts.push_back({rest.size, src, rest.dst});
        break;
      }
      // A unit step over a whole digit and more: the digit's part, then
      // the rest as the next digit out.
      if (r != 1 || used[k] != 0 || rest.size % p[k] != 0)
        return std::nullopt;
      Dim outer{rest.size / p[k], 0, 0};
      if (llvm::MulOverflow(rest.src, p[k], outer.src) ||
          llvm::MulOverflow(rest.dst, p[k], outer.dst))
        return std::nullopt;
      used[k] = p[k] - 1;
      parts.push_back({p[k], a[k], rest.dst});
      rest = outer;
    }
    out.append(parts.rbegin(), parts.rend());
  }
  if (out.size() > 8) // the op's (and the runtime's) largest rank
    return std::nullopt;
  return out;
}

/// Whether two roots name the same memory: one value, or two
/// `loomrt.global` ops of one symbol.
bool sameMemory(Value a, Value b) {
  if (a == b)
    return true;
  auto ga = a.getDefiningOp<rt::GlobalOp>(), gb = b.getDefiningOp<rt::GlobalOp>();
  return ga && gb && ga.getName() == gb.getName();
}

/// Whether `op` (or an op inside it) may use the memory of `root`: it uses
/// a buffer rooted there, or it calls a function while `root` is not an
/// allocation of this function's own (a callee reaches globals and its
/// arguments without naming them here).
bool touches(Operation *op, Value root) {
  bool local = root.getDefiningOp<rt::AllocOp>() != nullptr;
  bool hit = false;
  op->walk([&](Operation *inner) {
    if (!local && isa<CallOpInterface>(inner))
      hit = true;
    for (Value v : inner->getOperands())
      if (isa<rt::BufferType>(v.getType()) && sameMemory(rootOf(v), root))
        hit = true;
  });
  return hit;
}

/// Composes `second` with the copy that wrote its source, when that source
/// is a fresh device allocation the first copy writes whole and densely and
/// nothing else reads, both copies run on one stream in one block, and the
/// first copy's source is neither used between them (frees of it move past
/// the composed copy) nor the destination's buffer. Returns whether it did.
bool compose(rt::CopyStridedOp second, ::loom::OpPositions &pos) {
  Value tmp = second.getSrc();
  auto alloc = tmp.getDefiningOp<rt::AllocOp>();
  if (!alloc || alloc.getHost() || second.getDst() == tmp)
    return false;
  rt::CopyStridedOp first;
  rt::FreeOp tmpFree;
  for (Operation *user : tmp.getUsers()) {
    if (user == second.getOperation())
      continue;
    auto c = dyn_cast<rt::CopyStridedOp>(user);
    if (c && c.getDst() == tmp && c.getSrc() != tmp && !first) {
      first = c;
      continue;
    }
    auto f = dyn_cast<rt::FreeOp>(user);
    if (!f || tmpFree)
      return false;
    tmpFree = f;
  }
  if (!first || first->getBlock() != second->getBlock() || !pos.before(first, second) ||
      first.getStream() != second.getStream() ||
      first.getElemBytes() != second.getElemBytes() ||
      (tmpFree && (tmpFree->getBlock() != second->getBlock() ||
                   !pos.before(second, tmpFree))))
    return false;
  // The first copy fills the temporary densely.
  ArrayRef<int64_t> p = first.getShape(), b = first.getDstStrides();
  int64_t elems = 1;
  for (int64_t k = int64_t(p.size()) - 1; k >= 0; --k) {
    if ((p[k] > 1 && b[k] != elems) || p[k] < 1 || elems > (int64_t(1) << 40) / p[k])
      return false;
    elems *= p[k];
  }
  int64_t bytes;
  if (llvm::MulOverflow(elems, int64_t(first.getElemBytes()), bytes) ||
      bytes != int64_t(alloc.getBytes()))
    return false;
  Value root = rootOf(first.getSrc());
  if (sameMemory(rootOf(second.getDst()), root))
    return false;
  SmallVector<rt::FreeOp> moved;
  for (Operation *op = first->getNextNode(); op != second.getOperation();
       op = op->getNextNode()) {
    if (auto f = dyn_cast<rt::FreeOp>(op); f && rootOf(f.getBuffer()) == root) {
      moved.push_back(f);
      continue;
    }
    if (!isa<rt::ViewOp, rt::RankViewOp>(op) && touches(op, root))
      return false;
  }
  std::optional<SmallVector<Dim>> dims =
      composeDims(p, first.getSrcStrides(), second.getShape(), second.getSrcStrides(),
                  second.getDstStrides());
  if (!dims)
    return false;
  SmallVector<int64_t> shape, src, dst;
  for (const Dim &dim : *dims) {
    shape.push_back(dim.size);
    src.push_back(dim.src);
    dst.push_back(dim.dst);
  }
  OpBuilder builder(second);
  auto composed = rt::CopyStridedOp::create(builder, second.getLoc(), second.getStream(),
                                            first.getSrc(), second.getDst(),
                                            second.getElemBytes(), src, dst, shape);
  pos.placed(composed);
  for (rt::FreeOp f : moved) {
    f->moveAfter(composed);
    pos.placed(f);
  }
  pos.erase(second);
  pos.erase(first);
  pos.erase(tmpFree);
  pos.erase(alloc);
  return true;
}

struct ComposeCopies : public mlir::loom::impl::ComposeCopiesBase<ComposeCopies> {
  using Base::Base;
  void runOnOperation() override { composed += mlir::loom::composeCopies(getOperation()); }
};

} // namespace

int64_t mlir::loom::composeCopies(ModuleOp module) {
  SmallVector<rt::CopyStridedOp> copies;
  // (Positions numbered once: composing moves frees, and asking MLIR the
  // order after each move renumbered the whole block, OpPositions.h.)
  ::loom::OpPositions pos;
  module.walk([&](rt::CopyStridedOp c) {
    copies.push_back(c);
    pos.numberBlockOf(c);
  });
  int64_t n = 0;
  // In program order, so a chain of three composes into one; a composed
  // pair's first copy was visited before its second.
  for (rt::CopyStridedOp c : copies)
    n += compose(c, pos);
  return n;
}
