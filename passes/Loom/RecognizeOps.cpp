//===- RecognizeOps.cpp - loom-recognize-ops ------------------------------===//
//
// Exporters write attention as matmul, scale, additive mask, softmax and
// matmul, RMS norm as six elementwise ops and a mean, SiLU as a sigmoid and
// a product, rotary embeddings as slices, a negation, a concatenation, two
// products and a sum; this pass recognises those patterns, when every part
// is exactly the op, and rewrites them as loom.attention (one fused kernel:
// the scores [B, H, T, T] never reach memory), loom.rms_norm, loom.silu and
// loom.rotary.
// What it matches is in Passes.td; everything else is left as it is.
//
//===----------------------------------------------------------------------===//
#include "loom/Passes/Loom.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/SetVector.h"

#include <functional>

namespace mlir::loom {
#define GEN_PASS_DEF_RECOGNIZEOPS
#include "passes/Loom/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

RankedTensorType tt(Value v) { return cast<RankedTensorType>(v.getType()); }

/// The value of a constant holding one number (a splat of any shape), if
/// `v` is one.
std::optional<double> scalarConstant(Value v) {
  DenseElementsAttr d;
  if (!matchPattern(v, m_Constant(&d)) || !isa<FloatType>(d.getElementType()) || !d.isSplat())
    return std::nullopt;
  return d.getSplatValue<APFloat>().convertToDouble();
}

/// `x * c` with c a scalar constant (either side) whose product keeps x's
/// type: returns x and multiplies `scale` by c; otherwise returns `v`.
Value stripScale(Value v, double &scale, SmallVectorImpl<Operation *> &parts) {
  auto mul = v.getDefiningOp<MulOp>();
  if (!mul || mul.getResult().getType() != v.getType())
    return v;
  for (auto [x, c] : {std::pair(mul.getLhs(), mul.getRhs()), std::pair(mul.getRhs(), mul.getLhs())})
    if (x.getType() == v.getType())
      if (std::optional<double> k = scalarConstant(c)) {
        scale *= *k;
        parts.push_back(mul);
        return x;
      }
  return v;
}

/// Whether `mask` is the causal mask broadcast over [B, H, T, T]: 0 where
/// the key is at or before the query, very negative (-inf, or the float
/// minimum transformers uses) after it, in every batch and head. The mask
/// is a constant, or a select between two scalar constants on a constant
/// condition (the exporter's Where, left unfolded at large sizes).
bool isCausalMask(Value mask, RankedTensorType scores) {
  DenseElementsAttr d, cond;
  std::optional<double> onTrue, onFalse;
  if (auto sel = mask.getDefiningOp<SelectOp>()) {
    onTrue = scalarConstant(sel.getLhs());
    onFalse = scalarConstant(sel.getRhs());
    if (!onTrue || !onFalse || !matchPattern(sel.getCond(), m_Constant(&cond)))
      return false;
  } else if (!matchPattern(mask, m_Constant(&d)) || !isa<FloatType>(d.getElementType())) {
    return false;
  }
  auto mt = cast<RankedTensorType>((cond ? cond : d).getType());
  ArrayRef<int64_t> ms = mt.getShape(), ss = scores.getShape();
  if (mt.getRank() > 4 || ss[2] != ss[3])
    return false;
  // Align trailing dimensions; leading ones broadcast.
  int64_t t = ss[2];
  SmallVector<int64_t> full(4 - mt.getRank(), 1);
  full.append(ms.begin(), ms.end());
  for (int i = 0; i < 4; ++i)
    if (full[i] != ss[i] && !(i < 2 && full[i] == 1))
      return false;
  if ((cond ? cond : d).isSplat())
    return false; // one value everywhere hides everything or nothing
  std::function<double(int64_t)> at;
  if (cond) {
    auto c = cond.tryGetValues<bool>();
    if (failed(c))
      return false;
    at = [c = *c, a = *onTrue, b = *onFalse](int64_t k) { return c[k] ? a : b; };
  } else {
    at = [v = d.getValues<APFloat>()](int64_t k) { return v[k].convertToDouble(); };
  }
  int64_t planes = full[0] * full[1];
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < t; ++j) {
        double x = at((p * t + i) * t + j);
        if (j <= i ? x != 0.0 : !(x <= -1e30))
          return false;
      }
  return true;
}

/// The key [B, H, S, D] a transposed key [B, H, D, S] was made from, when
/// it was made by swapping the last two dimensions: transpose [0, 1, 3, 2],
/// or (the dynamo exporter's SDPA) reshape to [B·H, S, D], transpose
/// [0, 2, 1], reshape back. Null otherwise; the ops that did it join
/// `parts` (erased with the pattern when nothing else reads them).
Value untransposed(Value kT, SmallVectorImpl<Operation *> &parts) {
  RankedTensorType t = tt(kT);
  if (t.getRank() != 4)
    return nullptr;
  SmallVector<int64_t> want{t.getDimSize(0), t.getDimSize(1), t.getDimSize(3), t.getDimSize(2)};
  auto is = [&](Value v) { return v && tt(v).getShape() == ArrayRef<int64_t>(want); };
  if (auto tr = kT.getDefiningOp<TransposeOp>()) {
    if (tr.getPerm() != ArrayRef<int64_t>{0, 1, 3, 2} || !is(tr.getInput()))
      return nullptr;
    parts.push_back(tr);
    return tr.getInput();
  }
  auto r2 = kT.getDefiningOp<ReshapeOp>();
  auto tr = r2 ? r2.getInput().getDefiningOp<TransposeOp>() : TransposeOp();
  auto r1 = tr ? tr.getInput().getDefiningOp<ReshapeOp>() : ReshapeOp();
  if (!r1 || tr.getPerm() != ArrayRef<int64_t>{0, 2, 1} || tt(tr.getInput()).getRank() != 3 ||
      tt(tr.getInput()).getDimSize(0) != want[0] * want[1])
    return nullptr;
  if (!is(r1.getInput()))
    return nullptr;
  parts.append({r2, tr, r1});
  return r1.getInput();
}

/// Erases the ops of a recognised pattern (consumer first) that nothing
/// reads any more, then the constants only they read.
void eraseParts(ArrayRef<Operation *> parts) {
  llvm::SmallSetVector<Operation *, 4> constants;
  for (Operation *op : parts) {
    for (Value in : op->getOperands())
      if (Operation *c = in.getDefiningOp(); c && c->hasTrait<OpTrait::ConstantLike>())
        constants.insert(c);
    if (op->use_empty())
      op->erase();
  }
  for (Operation *c : constants)
    if (c->use_empty())
      c->erase();
}

/// y = w · x / sqrt(mean(x², last) + eps) as loom.rms_norm.
LogicalResult recognizeRmsNorm(MulOp out) {
  // w · n (either side), w of shape [D], n = x · inv.
  RankedTensorType yt = tt(out.getResult());
  if (yt.getRank() < 1)
    return failure();
  int64_t d = yt.getShape().back();
  for (auto [w, n] : {std::pair(out.getLhs(), out.getRhs()), std::pair(out.getRhs(), out.getLhs())}) {
    auto nm = n.getDefiningOp<MulOp>();
    if (!nm || !nm->hasOneUse() || tt(w).getRank() != 1 || tt(w).getDimSize(0) != d ||
        n.getType() != yt)
      continue;
    for (auto [x, inv] :
         {std::pair(nm.getLhs(), nm.getRhs()), std::pair(nm.getRhs(), nm.getLhs())}) {
      if (x.getType() != yt || !inv.hasOneUse())
        continue;
      SmallVector<Operation *> parts{out, nm};
      // inv = 1 / sqrt(a) or rsqrt(a)
      Value a;
      if (auto r = inv.getDefiningOp<RsqrtOp>()) {
        a = r.getInput();
        parts.push_back(r);
      } else if (auto div = inv.getDefiningOp<DivOp>()) {
        std::optional<double> one = scalarConstant(div.getLhs());
        auto sq = div.getRhs().getDefiningOp<SqrtOp>();
        if (!one || *one != 1.0 || !sq || !sq->hasOneUse())
          continue;
        a = sq.getInput();
        parts.append({div, sq});
      } else {
        continue;
      }
      // a = mean + eps
      auto add = a.getDefiningOp<AddOp>();
      if (!add || !a.hasOneUse())
        continue;
      std::optional<double> eps;
      Value mean;
      for (auto [m, e] : {std::pair(add.getLhs(), add.getRhs()), std::pair(add.getRhs(), add.getLhs())})
        if ((eps = scalarConstant(e)) && m.getType() == add.getResult().getType()) {
          mean = m;
          break;
        }
      auto red = mean ? mean.getDefiningOp<ReduceOp>() : ReduceOp();
      if (!eps || *eps < 0 || !red || !mean.hasOneUse() || red.getKind() != ReduceKind::mean ||
          !red.getKeepdim() || red.getDims().size() != 1 ||
          (red.getDims()[0] != yt.getRank() - 1 && red.getDims()[0] != -1))
        continue;
      parts.append({add, red});
      // x² as pow(x, 2) or x · x
      Value sq = red.getInput();
      Operation *sqOp = sq.getDefiningOp();
      bool isSquare = false;
      if (auto pw = dyn_cast_or_null<PowOp>(sqOp)) {
        std::optional<double> two = scalarConstant(pw.getRhs());
        isSquare = pw.getLhs() == x && two && *two == 2.0;
      } else if (auto mm = dyn_cast_or_null<MulOp>(sqOp)) {
        isSquare = mm.getLhs() == x && mm.getRhs() == x;
      }
      if (!isSquare || !sq.hasOneUse())
        continue;
      parts.push_back(sqOp);
      OpBuilder b(out);
      auto norm = RmsNormOp::create(b, out.getLoc(), yt, x, w, b.getF64FloatAttr(*eps));
      out.getResult().replaceAllUsesWith(norm.getResult());
      eraseParts(parts);
      return success();
    }
  }
  return failure();
}

/// y = x · sigmoid(x) as loom.silu.
LogicalResult recognizeSilu(MulOp out) {
  for (auto [x, s] : {std::pair(out.getLhs(), out.getRhs()), std::pair(out.getRhs(), out.getLhs())}) {
    auto sig = s.getDefiningOp<SigmoidOp>();
    if (!sig || sig.getInput() != x || !s.hasOneUse() || x.getType() != out.getType())
      continue;
    OpBuilder b(out);
    auto silu = SiluOp::create(b, out.getLoc(), out.getType(), x);
    out.getResult().replaceAllUsesWith(silu.getResult());
    eraseParts({out.getOperation(), sig.getOperation()});
    return success();
  }
  return failure();
}

/// Whether `s` is x[..., from:to] (the whole of every other dimension,
/// step 1) of the tensor `x`.
bool lastSlice(SliceOp s, Value x, int64_t from, int64_t to) {
  if (!s || s.getInput() != x)
    return false;
  RankedTensorType t = tt(x);
  int64_t r = t.getRank();
  for (int64_t k = 0; k < r; ++k) {
    int64_t lo = k == r - 1 ? from : 0, hi = k == r - 1 ? to : t.getDimSize(k);
    if (s.getStart()[k] != lo || s.getLimit()[k] != hi || s.getStep()[k] != 1)
      return false;
  }
  return true;
}

/// Whether `v` is computed from a loaded symbol (a parameter or state,
/// which loom.rotary's tables may not be: they take no gradient).
bool fromLoad(Value v) {
  SmallVector<Value> work{v};
  llvm::SmallPtrSet<Operation *, 16> seen;
  while (!work.empty()) {
    Operation *d = work.pop_back_val().getDefiningOp();
    if (!d || !seen.insert(d).second)
      continue;
    if (isa<LoadOp>(d))
      return true;
    llvm::append_range(work, d->getOperands());
  }
  return false;
}

/// x · cos + rotate_half(x) · sin, rotate_half(x) = concat(-x[..., D/2:],
/// x[..., :D/2]) along the last dimension, as loom.rotary when the tables
/// are [T, D] (leading dimensions of 1 allowed) and x is [..., T, D].
LogicalResult recognizeRotary(AddOp out) {
  RankedTensorType t = tt(out.getResult());
  int64_t r = t.getRank();
  if (r < 2 || t.getDimSize(r - 1) % 2)
    return failure();
  int64_t d = t.getDimSize(r - 1), h = d / 2;
  // The two products, each of a tensor like x and a table.
  auto product = [&](Value v, Value &x, Value &table) {
    auto m = v.getDefiningOp<MulOp>();
    if (!m || !v.hasOneUse())
      return false;
    for (auto [a, c] : {std::pair(m.getLhs(), m.getRhs()), std::pair(m.getRhs(), m.getLhs())})
      if (a.getType() == t && c.getType() != t) {
        x = a;
        table = c;
        return true;
      }
    return false;
  };
  for (auto [p, q] : {std::pair(out.getLhs(), out.getRhs()), std::pair(out.getRhs(), out.getLhs())}) {
    Value x, cos, rot, sin;
    if (!product(p, x, cos) || !product(q, rot, sin))
      continue;
    auto cat = rot.getDefiningOp<ConcatOp>();
    if (!cat || cat.getInputs().size() != 2 ||
        (int64_t(cat.getDim()) != r - 1 && int64_t(cat.getDim()) != -1))
      continue;
    // Tables [T, D] of x's element type (leading 1s allowed), one type.
    auto ct = dyn_cast<RankedTensorType>(cos.getType());
    if (!ct || ct != sin.getType() || ct.getElementType() != t.getElementType() ||
        ct.getRank() < 2 || ct.getRank() > r || ct.getDimSize(ct.getRank() - 1) != d ||
        ct.getDimSize(ct.getRank() - 2) != t.getDimSize(r - 2) ||
        llvm::any_of(ct.getShape().drop_back(2), [](int64_t n) { return n != 1; }) ||
        fromLoad(cos) || fromLoad(sin))
      continue;
    auto neg = cat.getInputs()[0].getDefiningOp<NegOp>();
    if (!neg || !lastSlice(neg.getInput().getDefiningOp<SliceOp>(), x, h, d) ||
        !lastSlice(cat.getInputs()[1].getDefiningOp<SliceOp>(), x, 0, h))
      continue;
    OpBuilder b(out);
    auto rotary = RotaryOp::create(b, out.getLoc(), t, x, cos, sin, false);
    out.getResult().replaceAllUsesWith(rotary.getResult());
    eraseParts({out.getOperation(), p.getDefiningOp(), q.getDefiningOp(), cat.getOperation(),
                neg.getOperation(), neg.getInput().getDefiningOp(),
                cat.getInputs()[1].getDefiningOp()});
    return success();
  }
  return failure();
}

struct RecognizeOps : public mlir::loom::impl::RecognizeOpsBase<RecognizeOps> {
  void runOnOperation() override {
    SmallVector<MatmulOp> outputs;
    getOperation().walk([&](MatmulOp m) { outputs.push_back(m); });
    for (MatmulOp out : outputs)
      (void)fuse(out);
    // Then products, in program order: a pattern's parts are producers of
    // its root, visited (and left alone) before it, so nothing erased is
    // visited afterwards.
    SmallVector<MulOp> muls;
    getOperation().walk([&](MulOp m) { muls.push_back(m); });
    for (MulOp m : muls)
      if (failed(recognizeRmsNorm(m)))
        (void)recognizeSilu(m);
    SmallVector<AddOp> adds;
    getOperation().walk([&](AddOp a) { adds.push_back(a); });
    for (AddOp a : adds)
      (void)recognizeRotary(a);
  }

  /// out = softmax(mask + scale · (q kᵀ)) v, rewritten as loom.attention.
  LogicalResult fuse(MatmulOp out) {
    if (out.getTransposeLhs() || out.getTransposeRhs())
      return failure();
    auto softmax = out.getLhs().getDefiningOp<SoftmaxOp>();
    if (!softmax || softmax.getLog() || !softmax->hasOneUse())
      return failure();
    RankedTensorType st = tt(softmax.getResult());
    int64_t dim = int64_t(softmax.getDim());
    if (st.getRank() != 4 || (dim != -1 && dim != 3))
      return failure();
    SmallVector<Operation *> parts{softmax};
    // The additive mask, if any.
    Value scores = softmax.getInput();
    bool causal = false;
    if (auto add = scores.getDefiningOp<AddOp>(); add && add->hasOneUse()) {
      bool masked = false;
      for (auto [s, m] : {std::pair(add.getLhs(), add.getRhs()), std::pair(add.getRhs(), add.getLhs())}) {
        if (s.getType() != st)
          continue;
        // A mask of zeros (an all-ones attention mask, BERT's without
        // padding) hides nothing.
        std::optional<double> zero = scalarConstant(m);
        if (isCausalMask(m, st) || (zero && *zero == 0.0)) {
          causal = !zero;
          masked = true;
          scores = s;
          parts.push_back(add);
          if (Operation *sel = m.getDefiningOp<SelectOp>())
            parts.push_back(sel); // the mask, if the add was its last reader
          break;
        }
      }
      if (!masked)
        return failure(); // another mask: not attention as loom.attention has it
    }
    double scale = 1.0;
    if (!scores.hasOneUse())
      return failure();
    scores = stripScale(scores, scale, parts);
    auto qk = scores.getDefiningOp<MatmulOp>();
    if (!qk || qk.getTransposeLhs() || !qk->hasOneUse())
      return failure();
    parts.push_back(qk);
    Value q = qk.getLhs(), k = qk.getRhs();
    if (q.hasOneUse())
      q = stripScale(q, scale, parts);
    if (k.hasOneUse())
      k = stripScale(k, scale, parts);
    Value v = out.getRhs();
    if (tt(q).getRank() != 4 || tt(k).getRank() != 4 || tt(v).getRank() != 4)
      return failure();
    OpBuilder b(out);
    Operation *made = nullptr;
    if (!qk.getTransposeRhs()) {
      if (Value k0 = untransposed(k, parts)) {
        k = k0; // the exporter transposed the key itself: take it from before
      } else {
        // The key came transposed, [B, H, D, S]: one copy back.
        RankedTensorType kt = tt(k);
        auto kType = RankedTensorType::get(
            {kt.getDimSize(0), kt.getDimSize(1), kt.getDimSize(3), kt.getDimSize(2)},
            kt.getElementType());
        made = TransposeOp::create(b, qk.getLoc(), kType, k, b.getDenseI64ArrayAttr({0, 1, 3, 2}));
        k = made->getResult(0);
      }
    }
    // q [B, H, T, D], k [B, H, S, D], v [B, H, S, Dv] (loom.attention's
    // shapes; the transposed key made above goes if they are not).
    RankedTensorType qt = tt(q), kt = tt(k), vt = tt(v);
    if (qt.getShape().take_front(2) != kt.getShape().take_front(2) ||
        qt.getShape().take_front(2) != vt.getShape().take_front(2) ||
        qt.getDimSize(3) != kt.getDimSize(3) || kt.getDimSize(2) != vt.getDimSize(2) ||
        (causal && qt.getDimSize(2) != kt.getDimSize(2)) ||
        qt.getElementType() != vt.getElementType() || kt.getElementType() != vt.getElementType()) {
      if (made)
        made->erase();
      return failure();
    }
    auto attn = AttentionOp::create(b, out.getLoc(), out.getResult().getType(), q, k, v,
                                    causal ? b.getUnitAttr() : UnitAttr(),
                                    b.getF64FloatAttr(scale));
    out.getResult().replaceAllUsesWith(attn.getResult());
    parts.insert(parts.begin(), out);
    eraseParts(parts);
    return success();
  }
};

} // namespace
