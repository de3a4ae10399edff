//===- Autodiff.cpp - loom-autodiff ---------------------------------------===//
//
// Reverse-mode differentiation of a scalar loss. The forward ops are cloned
// into a new function, then walked backwards; each op's vector-Jacobian
// product (VJP) rule emits the adjoints of its operands from the adjoints of
// its results. Adjoints that reach the same value are summed; those that
// reach a loom.load become that parameter's gradient.
//
//===----------------------------------------------------------------------===//
#include "loom/Passes/Loom.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Transforms/RegionUtils.h"
#include "mlir/Interfaces/CallInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <functional>

namespace mlir::loom {
#define GEN_PASS_DEF_AUTODIFF
#include "passes/Loom/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

RankedTensorType tt(Value v) { return cast<RankedTensorType>(v.getType()); }

bool differentiable(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && isa<FloatType>(t.getElementType());
}

/// Emits the backward graph of one function.
class Differentiator {
public:
  Differentiator(OpBuilder &b, Location loc) : b(b), loc(loc) {}

  /// Marks what depends on a parameter: only those values get adjoints, so
  /// no backward work is spent on constants or inputs.
  void markActive(ArrayRef<Operation *> ops) {
    for (Operation *op : ops) {
      // A comparison is piecewise constant: its 1/0 result carries no
      // gradient, even of floats.
      // A received activation depends on the previous stage's parameters.
      bool act = isa<LoadOp, P2POp>(op) ||
                 (!isa<EqOp, NeOp, LtOp, LeOp, StopGradientOp>(op) &&
                  llvm::any_of(op->getOperands(),
                               [&](Value v) { return active.contains(v); }));
      if (act)
        for (Value r : op->getResults())
          if (differentiable(r))
            active.insert(r);
    }
  }

  /// Adds `g` to the adjoint of `v`.
  void accumulate(Value v, Value g) {
    if (!g || !active.contains(v))
      return;
    auto it = adjoint.find(v);
    if (it == adjoint.end()) {
      adjoint[v] = g;
      return;
    }
    if (Value merged = mergePadded(it->second, g)) {
      Value old = it->second;
      it->second = merged;
      eraseIfDead(old);
      eraseIfDead(g);
      return;
    }
    it->second = AddOp::create(b, loc, v.getType(), it->second, g);
  }

  /// A zero-padded gradient (a slice's: concat(zeros, g, zeros) along one
  /// dimension) as its pieces along that dimension: (length, value), the
  /// value null for zeros.
  using Pieces = SmallVector<std::pair<int64_t, Value>>;
  static bool isZeros(Value v) { return matchPattern(v, m_AnyZeroFloat()); }
  static std::optional<std::pair<int64_t, Pieces>> piecesOf(Value x) {
    auto cat = x.getDefiningOp<ConcatOp>();
    if (!cat)
      return std::nullopt;
    int64_t dim = cat.getDim();
    Pieces p;
    for (Value in : cat.getInputs())
      p.push_back({tt(in).getDimSize(dim), isZeros(in) ? Value() : in});
    return std::make_pair(dim, p);
  }

  /// a + b where both are zero-padded along one dimension and no element is
  /// non-zero in both (the gradients of disjoint slices of one tensor: the
  /// q, k and v of a fused projection): one concat of their pieces instead
  /// of the zeros, the padded copies and the adds, with the same values.
  /// Null where that does not hold.
  Value mergePadded(Value a, Value bv) {
    std::optional<std::pair<int64_t, Pieces>> pa = piecesOf(a), pb = piecesOf(bv);
    if (!pa || !pb || pa->first != pb->first || tt(a) != tt(bv))
      return Value();
    int64_t dim = pa->first;
    // Non-zero pieces of either side with their offsets; each must lie in
    // zeros of the other.
    SmallVector<std::tuple<int64_t, int64_t, Value>> spans; // offset, length, value
    auto collect = [&](const Pieces &mine, const Pieces &other) {
      int64_t off = 0;
      for (auto [len, val] : mine) {
        if (val) {
          int64_t o = 0;
          for (auto [olen, oval] : other) {
            if (oval && o < off + len && off < o + olen)
              return false;
            o += olen;
          }
          spans.push_back({off, len, val});
        }
        off += len;
      }
      return true;
    };
    if (!collect(pa->second, pb->second) || !collect(pb->second, pa->second))
      return Value();
    llvm::sort(spans, [](auto &x, auto &y) { return std::get<0>(x) < std::get<0>(y); });
    auto type = tt(a);
    SmallVector<Value> parts;
    auto zeros = [&](int64_t n) {
      SmallVector<int64_t> shape(type.getShape());
      shape[dim] = n;
      parts.push_back(splat(like(type, shape), 0.0));
    };
    int64_t at = 0;
    for (auto [off, len, val] : spans) {
      if (off > at)
        zeros(off - at);
      parts.push_back(val);
      at = off + len;
    }
    if (at < type.getDimSize(dim))
      zeros(type.getDimSize(dim) - at);
    Value merged = parts.size() == 1
                       ? parts[0]
                       : ConcatOp::create(b, loc, type, parts, b.getI64IntegerAttr(dim)).getResult();
    return merged;
  }

  /// Erases a padded concat that `mergePadded` replaced, with its zeros,
  /// unless something still uses it or another adjoint is it.
  void eraseIfDead(Value x) {
    Operation *cat = x.getDefiningOp();
    if (!cat || !cat->use_empty() ||
        llvm::any_of(adjoint, [&](auto &kv) { return kv.second == x; }))
      return;
    SmallVector<Operation *> zeroOps;
    for (Value in : cat->getOperands())
      if (isZeros(in))
        zeroOps.push_back(in.getDefiningOp());
    cat->erase();
    for (Operation *z : zeroOps)
      if (z->use_empty())
        z->erase();
  }
  Value get(Value v) const { return adjoint.lookup(v); }
  /// Drops what is known of `v` (before its op is erased: a later op may
  /// reuse the address).
  void forget(Value v) {
    adjoint.erase(v);
    active.erase(v);
  }

  //===--------------------------------------------------------------===//
  // Building blocks
  //===--------------------------------------------------------------===//

  RankedTensorType like(RankedTensorType t, ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, t.getElementType(), t.getEncoding());
  }
  /// A splat constant of `type` (scalars: rank 0).
  Value splat(RankedTensorType type, double v) {
    auto plain = RankedTensorType::get(type.getShape(), type.getElementType());
    auto attr = DenseElementsAttr::get(
        plain, FloatAttr::get(type.getElementType(), v).getValue());
    return arith::ConstantOp::create(b, loc, type, attr);
  }
  Value scalar(Value like, double v) {
    return splat(this->like(tt(like), {}), v);
  }
  Value mul(Value x, Value y) {
    return MulOp::create(b, loc, broadcastType(x, y), x, y);
  }
  Value div(Value x, Value y) {
    return DivOp::create(b, loc, broadcastType(x, y), x, y);
  }
  Value sub(Value x, Value y) {
    return SubOp::create(b, loc, broadcastType(x, y), x, y);
  }
  Value neg(Value x) { return NegOp::create(b, loc, x.getType(), x); }
  /// The result type of a broadcasting op on x and y (the larger shape).
  Type broadcastType(Value x, Value y) {
    return tt(x).getRank() >= tt(y).getRank() ? x.getType() : y.getType();
  }

  /// Undoes broadcasting: sums `g` down to the shape of `target`.
  Value sumTo(Value g, RankedTensorType target) {
    auto gt = tt(g);
    if (gt.getShape() == target.getShape())
      return g;
    int64_t lead = gt.getRank() - target.getRank();
    SmallVector<int64_t> dims, kept;
    for (int64_t i = 0; i < gt.getRank(); ++i) {
      bool reduce =
          i < lead || (target.getDimSize(i - lead) == 1 && gt.getDimSize(i) != 1);
      if (reduce)
        dims.push_back(i);
      else
        kept.push_back(gt.getDimSize(i));
    }
    Value r = g;
    if (!dims.empty())
      r = ReduceOp::create(b, loc, like(gt, kept), ReduceKind::sum, g,
                           b.getDenseI64ArrayAttr(dims), false);
    if (tt(r).getShape() != target.getShape())
      r = ReshapeOp::create(b, loc, like(gt, target.getShape()), r);
    return r;
  }

  Value matmul(Value x, Value y, bool tx, bool ty, RankedTensorType elt) {
    auto a = tt(x), c = tt(y);
    int64_t m = a.getDimSize(a.getRank() - (tx ? 1 : 2));
    int64_t n = c.getDimSize(c.getRank() - (ty ? 2 : 1));
    SmallVector<int64_t> batch;
    OpTrait::util::getBroadcastedShape(a.getShape().drop_back(2),
                                       c.getShape().drop_back(2), batch);
    batch.push_back(m);
    batch.push_back(n);
    return MatmulOp::create(b, loc, like(elt, batch), x, y, tx, ty);
  }
  /// Collapses the leading dims of a rank > 2 tensor: [..., k] -> [N, k].
  Value flatten2d(Value x) {
    auto t = tt(x);
    int64_t rows = t.getNumElements() / t.getShape().back();
    return ReshapeOp::create(b, loc, like(t, {rows, t.getShape().back()}), x);
  }

  //===--------------------------------------------------------------===//
  // VJP rules
  //===--------------------------------------------------------------===//

  /// Emits the adjoints of op's operands; fails for ops without a rule.
  /// An op of a pipeline's chunk (`loom.stage`) gives its chunk to the ops
  /// its rule emits: loom-pipeline-schedule orders an interleaved stage's
  /// backward by chunk.
  LogicalResult vjp(Operation *op) {
    struct Tagger : OpBuilder::Listener {
      Attribute stage;
      void notifyOperationInserted(Operation *o, OpBuilder::InsertPoint) override {
        StringRef name = LoomDialect::StageAttrHelper::getNameStr();
        if (!o->hasAttr(name))
          o->setAttr(name, stage);
      }
    } tagger;
    OpBuilder::Listener *previous = b.getListener();
    tagger.stage = op->getAttr(LoomDialect::StageAttrHelper::getNameStr());
    if (tagger.stage)
      b.setListener(&tagger);
    LogicalResult r = vjpRule(op);
    b.setListener(previous);
    return r;
  }

  LogicalResult vjpRule(Operation *op) {
    SmallVector<Value> dys;
    bool any = false;
    for (Value r : op->getResults()) {
      dys.push_back(get(r));
      any |= bool(dys.back());
    }
    // A pipeline transfer's rule runs whatever reached it: the peer waits
    // for its side of the backward's transfer.
    if (auto p2p = dyn_cast<P2POp>(op))
      return p2pVjp(p2p, p2p.getResult() ? get(p2p.getResult()) : Value());
    if (!any)
      return success(); // not on the path to the loss
    Value dy = dys.empty() ? Value() : dys[0];

    if (std::optional<LogicalResult> r = elementwiseVjp(op, dy))
      return *r;
    if (std::optional<LogicalResult> r = structuredVjp(op, dy))
      return *r;
    if (std::optional<LogicalResult> r = communicationVjp(op, dy))
      return *r;
    return op->emitOpError() << "has no gradient rule (loom-autodiff), but it lies on the "
                                "path from a parameter to the loss";
  }

  /// The rules of elementwise ops (and loads, which end the walk); nullopt
  /// for other ops.
  std::optional<LogicalResult> elementwiseVjp(Operation *op, Value dy) {
    auto binaryTo = [&](Value operand, Value g) { accumulate(operand, sumTo(g, tt(operand))); };
    return llvm::TypeSwitch<Operation *, std::optional<LogicalResult>>(op)
        .Case([&](LoadOp) { return success(); })
        .Case([&](AddOp o) {
          binaryTo(o.getLhs(), dy);
          binaryTo(o.getRhs(), dy);
          return success();
        })
        .Case([&](CumsumOp o) {
          // y_i = Σ_{j ≤ i} x_j, so dx_j = Σ_{i ≥ j} dy_i: the same sum
          // from the other end (exclusive stays exclusive).
          auto g = CumsumOp::create(b, loc, dy.getType(), dy, o.getDim());
          g.setExclusive(o.getExclusive());
          g.setReverse(!o.getReverse());
          accumulate(o.getInput(), g);
          return success();
        })
        .Case([&](SubOp o) {
          binaryTo(o.getLhs(), dy);
          binaryTo(o.getRhs(), neg(dy));
          return success();
        })
        .Case([&](MulOp o) {
          binaryTo(o.getLhs(), mul(dy, o.getRhs()));
          binaryTo(o.getRhs(), mul(dy, o.getLhs()));
          return success();
        })
        .Case([&](DivOp o) {
          binaryTo(o.getLhs(), div(dy, o.getRhs()));
          // d(a/b)/db = -a / b^2 = -(a/b) / b
          binaryTo(o.getRhs(), neg(div(mul(dy, o.getResult()), o.getRhs())));
          return success();
        })
        .Case([&](PowOp o) {
          // d(a^b)/da = b a^(b-1), not b y / a: that is 0/0 wherever a = 0,
          // which bf16 residual sums do produce (rms norm's x^2).
          // d(a^b)/db = y log(a), only when the exponent is not a constant.
          Value a = o.getLhs(), e = o.getRhs();
          if (active.contains(a)) {
            Value em1 = sub(e, scalar(e, 1.0));
            Value p = PowOp::create(b, loc, broadcastType(a, em1), a, em1);
            binaryTo(a, mul(dy, mul(e, p)));
          }
          if (active.contains(e)) {
            Value loga = LogOp::create(b, loc, a.getType(), a);
            binaryTo(e, mul(dy, mul(o.getResult(), loga)));
          }
          return success();
        })
        .Case<EqOp, NeOp, LtOp, LeOp>([&](Operation *) { return success(); }) // flat 1/0
        .Case([&](NegOp o) {
          accumulate(o.getInput(), neg(dy));
          return success();
        })
        .Case([&](ExpOp o) {
          accumulate(o.getInput(), mul(dy, o.getResult()));
          return success();
        })
        .Case([&](LogOp o) {
          accumulate(o.getInput(), div(dy, o.getInput()));
          return success();
        })
        .Case([&](SqrtOp o) {
          // d sqrt(x) = 1 / (2 sqrt(x))
          accumulate(o.getInput(),
                     div(mul(dy, scalar(dy, 0.5)), o.getResult()));
          return success();
        })
        .Case([&](RsqrtOp o) {
          // d x^-1/2 = -1/2 x^-3/2 = -1/2 y^3
          Value y = o.getResult();
          accumulate(o.getInput(),
                     mul(mul(dy, scalar(dy, -0.5)), mul(y, mul(y, y))));
          return success();
        })
        .Case([&](TanhOp o) {
          Value y = o.getResult();
          accumulate(o.getInput(), mul(dy, sub(scalar(y, 1.0), mul(y, y))));
          return success();
        })
        .Case([&](SigmoidOp o) {
          Value y = o.getResult();
          accumulate(o.getInput(), mul(dy, mul(y, sub(scalar(y, 1.0), y))));
          return success();
        })
        .Case([&](ErfOp o) {
          // d erf(x) = 2/sqrt(pi) exp(-x^2)
          Value x = o.getInput();
          Value e = ExpOp::create(b, loc, x.getType(), neg(mul(x, x)));
          accumulate(x, mul(dy, mul(e, scalar(x, 2.0 / std::sqrt(M_PI)))));
          return success();
        })
        .Case([&](SinOp o) {
          Value c = CosOp::create(b, loc, o.getInput().getType(), o.getInput());
          accumulate(o.getInput(), mul(dy, c));
          return success();
        })
        .Case([&](CosOp o) {
          Value s = SinOp::create(b, loc, o.getInput().getType(), o.getInput());
          accumulate(o.getInput(), neg(mul(dy, s)));
          return success();
        })
        .Case([&](ReluOp o) {
          accumulate(o.getInput(), ReluGradOp::create(b, loc, dy.getType(), dy,
                                                      o.getInput()));
          return success();
        })
        .Case([&](SiluOp o) {
          accumulate(o.getInput(), SiluGradOp::create(b, loc, dy.getType(), dy,
                                                      o.getInput()));
          return success();
        })
        .Case([&](GeluOp o) {
          accumulate(o.getInput(),
                     GeluGradOp::create(b, loc, dy.getType(), dy, o.getInput(),
                                        o.getApproximate()));
          return success();
        })
        .Case([&](LerpOp o) {
          // y = (1 - w) a + w b.
          double w = o.getWeight().convertToDouble();
          accumulate(o.getLhs(), mul(dy, scalar(dy, 1.0 - w)));
          accumulate(o.getRhs(), mul(dy, scalar(dy, w)));
          return success();
        })
        .Case([&](DropoutOp o) {
          // y = x * m / (1 - p): dx = dy * m / (1 - p), the same op with the
          // same key, so the same mask, drawn again.
          accumulate(o.getInput(), DropoutOp::create(b, loc, dy.getType(), dy, o.getRatioAttr(),
                                                     o.getKeyAttr()));
          return success();
        })
        .Case([&](SelectOp o) {
          Value zero = splat(like(tt(dy), {}), 0.0);
          binaryTo(o.getLhs(), SelectOp::create(b, loc, dy.getType(),
                                                o.getCond(), dy, zero));
          binaryTo(o.getRhs(), SelectOp::create(b, loc, dy.getType(),
                                                o.getCond(), zero, dy));
          return success();
        })
        .Case([&](CastOp o) {
          accumulate(o.getInput(),
                     CastOp::create(b, loc, o.getInput().getType(), dy));
          return success();
        })
        .Default([](Operation *) { return std::nullopt; });
  }

  /// The rules of communication: each collective's gradient is its
  /// transpose's; nullopt for other ops.
  std::optional<LogicalResult> communicationVjp(Operation *op, Value dy) {
    return llvm::TypeSwitch<Operation *, std::optional<LogicalResult>>(op)
        // Tensor parallelism (loom-tensor-parallel): Megatron's g, the
        // all-reduce of the row-parallel products' partial sums, passes the
        // gradient through (every rank holds the whole sum); its f,
        // tp_enter, sums the ranks' gradients of the replicated input.
        .Case([&](AllReduceOp o) -> LogicalResult {
          if (o.getReduce() != ReduceKind::sum)
            return o.emitOpError() << "has a gradient rule only for reduce sum (loom-autodiff)";
          accumulate(o.getInput(), dy);
          return success();
        })
        // Sequence parallelism: the shards' gather and the partial sums'
        // scatter are each other's transpose; a shard of a value every
        // rank holds whole passes back the gather of the shards'
        // gradients (each rank's loss is its share of the step's, so the
        // whole value's gradient is every share's).
        .Case([&](AllGatherOp o) {
          auto r = ReduceScatterOp::create(b, loc, o.getInput().getType(),
                                           TokenType::get(b.getContext()), dy, ValueRange{},
                                           o.getGroup(), ReduceKind::sum, o.getStream());
          WaitOp::create(b, loc, ValueRange{r.getToken()});
          accumulate(o.getInput(), r.getResult());
          return success();
        })
        // An all-to-all is a permutation of the group's chunks whose
        // inverse is itself: chunk j of rank i went to chunk i of rank j, so
        // the gradient goes back by another all-to-all (expert parallelism's
        // dispatch and combine).
        .Case([&](AllToAllOp o) -> LogicalResult {
          if (!isa<RankedTensorType>(o.getInput().getType()))
            return o.emitOpError() << "has a gradient rule only for tensors (loom-autodiff)";
          auto g = AllToAllOp::create(b, loc, o.getInput().getType(), TokenType::get(b.getContext()),
                                      dy, ValueRange{}, o.getGroup(), o.getStream());
          WaitOp::create(b, loc, ValueRange{g.getToken()});
          accumulate(o.getInput(), g.getResult());
          return success();
        })
        // Pipeline stages: y_r = x_{r-k} (zeros where r-k is outside the
        // group), so dx_s = dy_{s+k} (zeros where s+k is outside): the
        // gradient goes back the other way, shift -k.
        .Case([&](SendRecvOp o) {
          auto g = SendRecvOp::create(b, loc, o.getInput().getType(),
                                      TokenType::get(b.getContext()), dy, ValueRange{},
                                      o.getGroup(), -int64_t(o.getShift()), o.getStream());
          WaitOp::create(b, loc, ValueRange{g.getToken()});
          accumulate(o.getInput(), g.getResult());
          return success();
        })
        .Case([&](ReduceScatterOp o) -> LogicalResult {
          if (o.getReduce() != ReduceKind::sum)
            return o.emitOpError() << "has a gradient rule only for reduce sum (loom-autodiff)";
          auto g = AllGatherOp::create(b, loc, o.getInput().getType(),
                                       TokenType::get(b.getContext()), dy, ValueRange{},
                                       o.getGroup(), o.getStream());
          WaitOp::create(b, loc, ValueRange{g.getToken()});
          accumulate(o.getInput(), g.getResult());
          return success();
        })
        .Case([&](ShardOp o) {
          auto g = AllGatherOp::create(b, loc, o.getInput().getType(),
                                       TokenType::get(b.getContext()), dy, ValueRange{},
                                       o.getGroup(),
                                       StreamAttr::get(b.getContext(), StreamKind::comm, 0));
          WaitOp::create(b, loc, ValueRange{g.getToken()});
          accumulate(o.getInput(), g.getResult());
          return success();
        })
        .Case([&](TpEnterOp o) {
          auto r = AllReduceOp::create(b, loc, dy.getType(), TokenType::get(b.getContext()), dy,
                                       ValueRange{}, o.getGroup(), ReduceKind::sum,
                                       StreamAttr::get(b.getContext(), StreamKind::comm, 0));
          WaitOp::create(b, loc, ValueRange{r.getToken()});
          accumulate(o.getInput(), r.getResult());
          return success();
        })
        .Default([](Operation *) { return std::nullopt; });
  }

  /// The rules of products, rows (norms, softmax, embeddings, attention,
  /// losses), shapes and reductions; nullopt for other ops.
  std::optional<LogicalResult> structuredVjp(Operation *op, Value dy) {
    return llvm::TypeSwitch<Operation *, std::optional<LogicalResult>>(op)
        .Case([&](MatmulOp o) { return matmulVjp(o, dy); })
        .Case([&](LayerNormOp o) {
          auto w = o.getWeight().getType();
          auto g = LayerNormGradOp::create(b, loc, o.getInput().getType(), w, w,
                                           dy, o.getInput(), o.getWeight(),
                                           o.getEpsAttr());
          accumulate(o.getInput(), g.getGradInput());
          accumulate(o.getWeight(), g.getGradWeight());
          if (o.getBias())
            accumulate(o.getBias(), g.getGradBias());
          return success();
        })
        .Case([&](RotaryOp o) {
          if (active.contains(o.getCos()) || active.contains(o.getSin()))
            return LogicalResult(o.emitOpError()
                                 << "has a gradient rule for its input only, but its cos or sin "
                                    "table depends on a parameter (loom-autodiff)");
          // The rotation is orthogonal-like: its transpose carries dy back.
          accumulate(o.getInput(), RotaryOp::create(b, loc, dy.getType(), dy, o.getCos(),
                                                    o.getSin(), !o.getTranspose()));
          return success();
        })
        .Case([&](RmsNormOp o) {
          auto g = RmsNormGradOp::create(b, loc, o.getInput().getType(),
                                         o.getWeight().getType(), dy,
                                         o.getInput(), o.getWeight(),
                                         o.getEpsAttr());
          accumulate(o.getInput(), g.getGradInput());
          accumulate(o.getWeight(), g.getGradWeight());
          return success();
        })
        .Case([&](SoftmaxOp o) {
          accumulate(o.getInput(),
                     SoftmaxGradOp::create(b, loc, dy.getType(), dy,
                                           o.getResult(), o.getDimAttr(),
                                           o.getLogAttr()));
          return success();
        })
        .Case([&](EmbeddingOp o) {
          accumulate(o.getTable(),
                     EmbeddingGradOp::create(b, loc, o.getTable().getType(), dy,
                                             o.getIndices()));
          return success();
        })
        // Mixture of experts: the values' gradients go back to the chosen
        // positions; a move into slots and a move out of them are each
        // other's transposes, and a weight's gradient is the dot product of
        // the token with its slot's row.
        .Case([&](TopKOp o) {
          if (active.contains(o.getInput()))
            accumulate(o.getInput(), TopKGradOp::create(b, loc, o.getInput().getType(), dy,
                                                        o.getIndices()));
          return success();
        })
        .Case([&](MoeDispatchOp o) {
          if (active.contains(o.getInput()))
            accumulate(o.getInput(), MoeCombineOp::create(b, loc, o.getInput().getType(), dy,
                                                          o.getSlots(), o.getWeights()));
          if (o.getWeights() && active.contains(o.getWeights()))
            accumulate(o.getWeights(),
                       MoeSlotDotOp::create(b, loc, o.getWeights().getType(), o.getInput(), dy,
                                            o.getSlots()));
          return success();
        })
        .Case([&](MoeCombineOp o) {
          if (active.contains(o.getInput()))
            accumulate(o.getInput(), MoeDispatchOp::create(b, loc, o.getInput().getType(), dy,
                                                           o.getSlots(), o.getWeights()));
          if (o.getWeights() && active.contains(o.getWeights()))
            accumulate(o.getWeights(),
                       MoeSlotDotOp::create(b, loc, o.getWeights().getType(), dy, o.getInput(),
                                            o.getSlots()));
          return success();
        })
        .Case([&](AttentionOp o) {
          auto g = AttentionGradOp::create(
              b, loc, o.getQuery().getType(), o.getKey().getType(),
              o.getValue().getType(), dy, o.getQuery(), o.getKey(),
              o.getValue(), o.getCausalAttr(), o.getScaleAttr());
          accumulate(o.getQuery(), g.getGradQuery());
          accumulate(o.getKey(), g.getGradKey());
          accumulate(o.getValue(), g.getGradValue());
          return success();
        })
        .Case([&](CrossEntropyOp o) {
          accumulate(o.getLogits(), CrossEntropyGradOp::create(
                                        b, loc, o.getLogits().getType(),
                                        o.getLogits(), o.getLabels(), dy));
          return success();
        })
        .Case([&](ReshapeOp o) {
          accumulate(o.getInput(),
                     ReshapeOp::create(b, loc, o.getInput().getType(), dy));
          return success();
        })
        .Case([&](TransposeOp o) {
          SmallVector<int64_t> inv(o.getPerm().size());
          for (auto [i, p] : llvm::enumerate(o.getPerm()))
            inv[p] = int64_t(i);
          accumulate(o.getInput(),
                     TransposeOp::create(b, loc, o.getInput().getType(), dy,
                                         b.getDenseI64ArrayAttr(inv)));
          return success();
        })
        .Case([&](SliceOp o) { return sliceVjp(o, dy); })
        .Case([&](ConcatOp o) {
          auto t = tt(dy);
          int64_t dim = int64_t(o.getDim());
          if (dim < 0)
            dim += t.getRank();
          int64_t offset = 0;
          for (Value in : o.getInputs()) {
            auto it = tt(in);
            SmallVector<int64_t> start(t.getRank(), 0), limit(t.getShape()),
                step(t.getRank(), 1);
            start[dim] = offset;
            limit[dim] = offset + it.getDimSize(dim);
            offset = limit[dim];
            accumulate(in, SliceOp::create(b, loc, in.getType(), dy,
                                           b.getDenseI64ArrayAttr(start),
                                           b.getDenseI64ArrayAttr(limit),
                                           b.getDenseI64ArrayAttr(step)));
          }
          return success();
        })
        .Case([&](BroadcastOp o) {
          accumulate(o.getInput(), sumTo(dy, tt(o.getInput())));
          return success();
        })
        .Case([&](ReduceOp o) { return reduceVjp(o, dy); })
        .Default([](Operation *) { return std::nullopt; });
  }

  /// Pipeline stages: `send x to a, recv r from b` has the rule `send dr
  /// to b, recv dx from a` (zeros sent where no gradient reached r), in the
  /// forward's micro-batch.
  LogicalResult p2pVjp(P2POp o, Value dr) {
    Value send;
    if (o.getResult())
      send = dr ? dr : splat(tt(o.getResult()), 0.0);
    Type recvType = o.getInput() ? o.getInput().getType() : Type();
    auto g = P2POp::create(b, loc, recvType, TokenType::get(b.getContext()), send, ValueRange{},
                           o.getGroup(), o.getFromAttr(), o.getToAttr(), o.getStream());
    for (StringRef tag : {LoomDialect::MicroBatchAttrHelper::getNameStr(),
                          LoomDialect::StageAttrHelper::getNameStr()})
      if (Attribute m = o->getAttr(tag))
        g->setAttr(tag, m);
    WaitOp::create(b, loc, ValueRange{g.getToken()});
    if (o.getInput())
      accumulate(o.getInput(), g.getResult());
    return success();
  }

  LogicalResult matmulVjp(MatmulOp o, Value dc) {
    // C = A' B' with A' = op(A), B' = op(B):
    //   dA' = dC B'^T,  dB' = A'^T dC;  dA = ta ? dA'^T : dA' (same for B).
    Value a = o.getLhs(), bv = o.getRhs();
    bool ta = o.getTransposeLhs(), tb = o.getTransposeRhs();
    auto elt = tt(a);
    if (differentiable(a)) {
      Value da = ta ? matmul(bv, dc, tb, true, elt) : matmul(dc, bv, false, !tb, elt);
      accumulate(a, sumTo(da, tt(a)));
    }
    if (differentiable(bv)) {
      Value db;
      // A shared rank-2 weight (a linear layer): fold the batch into the
      // contraction, [N, k]^T [N, n], instead of a batch of products summed.
      if (tt(bv).getRank() == 2 && tt(a).getRank() > 2 && !ta) {
        Value a2 = flatten2d(a), dc2 = flatten2d(dc);
        db = tb ? matmul(dc2, a2, true, false, elt) : matmul(a2, dc2, true, false, elt);
      } else {
        db = tb ? matmul(dc, a, true, ta, elt) : matmul(a, dc, !ta, false, elt);
      }
      accumulate(bv, sumTo(db, tt(bv)));
    }
    return success();
  }

  LogicalResult sliceVjp(SliceOp o, Value dy) {
    // Put the slice back in the input's shape with zeros, one dimension at a
    // time. A strided dimension (step s, GPT-J's x[..., ::2] / x[..., 1::2])
    // is first spread out: [.., m, ..] -> [.., m, 1, ..] next to zeros
    // [.., m, s-1, ..] -> [.., m*s, ..] puts element i at i*s, and the zeros
    // past the input's end are cut. Then concat(zeros[before], g,
    // zeros[after]) pads it to the input's length.
    auto in = tt(o.getInput());
    Value g = dy;
    for (int64_t d = 0; d < in.getRank(); ++d) {
      int64_t st = o.getStart()[d], step = o.getStep()[d], full = in.getDimSize(d);
      auto zerosLike = [&](RankedTensorType t, int64_t dim, int64_t n) {
        SmallVector<int64_t> s(t.getShape());
        s[dim] = n;
        return splat(like(t, s), 0.0);
      };
      int64_t len = tt(g).getDimSize(d);
      if (step < 1)
        return o.emitOpError() << "has no gradient rule for step " << step << " (loom-autodiff)";
      // One element: no spacing to restore (and a step near INT64_MAX, legal
      // there, would overflow len * step).
      if (len <= 1)
        step = 1;
      if (step > 1 && len > 0) {
        auto gt = tt(g);
        SmallVector<int64_t> split(gt.getShape());
        split.insert(split.begin() + d + 1, 1);
        Value g1 = ReshapeOp::create(b, loc, like(gt, split), g);
        SmallVector<int64_t> spread(split);
        spread[d + 1] = step;
        Value z = zerosLike(tt(g1), d + 1, step - 1);
        Value cat = ConcatOp::create(b, loc, like(gt, spread), ValueRange{g1, z},
                                     b.getI64IntegerAttr(d + 1));
        SmallVector<int64_t> flat(gt.getShape());
        flat[d] = len * step;
        g = ReshapeOp::create(b, loc, like(gt, flat), cat);
        len *= step;
        if (st + len > full) { // the last group's zeros past the end
          int64_t keep = full - st;
          auto t = tt(g);
          SmallVector<int64_t> lo(t.getRank(), 0), hi(t.getShape()), one(t.getRank(), 1),
              shape(t.getShape());
          hi[d] = shape[d] = keep;
          g = SliceOp::create(b, loc, like(t, shape), g, b.getDenseI64ArrayAttr(lo),
                              b.getDenseI64ArrayAttr(hi), b.getDenseI64ArrayAttr(one));
          len = keep;
        }
      }
      int64_t before = st, after = full - st - len;
      if (!before && !after)
        continue;
      auto gt = tt(g);
      SmallVector<Value> parts;
      if (before)
        parts.push_back(zerosLike(gt, d, before));
      parts.push_back(g);
      if (after)
        parts.push_back(zerosLike(gt, d, after));
      SmallVector<int64_t> s(gt.getShape());
      s[d] = full;
      g = ConcatOp::create(b, loc, like(gt, s), parts, b.getI64IntegerAttr(d));
    }
    accumulate(o.getInput(), g);
    return success();
  }

  LogicalResult reduceVjp(ReduceOp o, Value dy) {
    auto in = tt(o.getInput());
    // Put the reduced dims back as size 1, then broadcast.
    SmallVector<int64_t> kept(in.getShape());
    int64_t count = 1;
    for (int64_t d : o.getDims()) {
      int64_t nd = d < 0 ? d + in.getRank() : d;
      count *= kept[nd];
      kept[nd] = 1;
    }
    Value g = dy;
    if (tt(g).getShape() != ArrayRef<int64_t>(kept))
      g = ReshapeOp::create(b, loc, like(tt(dy), kept), g);
    g = BroadcastOp::create(b, loc, like(tt(dy), in.getShape()), g);
    if (o.getKind() == ReduceKind::mean)
      g = mul(g, scalar(g, 1.0 / double(count)));
    if (o.getKind() == ReduceKind::max || o.getKind() == ReduceKind::min) {
      // To the elements equal to the result (MaxPool's winner), split
      // evenly between ties; PyTorch gives a tie's gradient to one of them.
      Value y = o.getResult();
      if (tt(y).getShape() != ArrayRef<int64_t>(kept))
        y = ReshapeOp::create(b, loc, like(tt(y), kept), y);
      y = BroadcastOp::create(b, loc, like(tt(y), in.getShape()), y);
      Value hit = EqOp::create(b, loc, in, o.getInput(), y);
      Value ties = ReduceOp::create(b, loc, like(in, kept), ReduceKind::sum, hit,
                                    o.getDimsAttr(), true);
      g = mul(g, div(hit, BroadcastOp::create(b, loc, in, ties)));
    }
    accumulate(o.getInput(), g);
    return success();
  }

private:
  OpBuilder &b;
  Location loc;
  llvm::DenseMap<Value, Value> adjoint;
  llvm::DenseSet<Value> active;
};

struct Autodiff : public mlir::loom::impl::AutodiffBase<Autodiff> {
  using Base::Base;

  /// The backward with activation checkpointing: unit by unit, last first.
  /// A recomputed unit's ops are cloned (after everything emitted so far)
  /// with their inputs from other units taken as the forward computed them
  /// and free ops (loads, constants, their casts) made afresh; the clones
  /// are differentiated instead of the originals, so the originals' values
  /// die in the forward except those a later unit reads. An op's adjoint
  /// gathered on the original (from later units) moves to its clone just
  /// before the clone's rule runs, when every user has contributed.
  LogicalResult backwardByUnits(Differentiator &d, OpBuilder &b,
                                ArrayRef<Operation *> forwardOps) {
    UnitPlan plan = planUnits(forwardOps);
    int64_t units = plan.count();
    int64_t recomputed = recomputeUnits < 0 ? units : std::min(recomputeUnits.getValue(), units);
    SmallVector<SmallVector<Operation *>> byUnit(units);
    for (Operation *op : forwardOps)
      if (!plan.free.contains(op))
        byUnit[plan.unitOf(op)].push_back(op);
    for (int64_t u = units - 1; u >= 0; --u) {
      if (u >= recomputed) {
        for (Operation *op : llvm::reverse(byUnit[u]))
          if (failed(d.vjp(op)))
            return failure();
        continue;
      }
      IRMapping again;
      // Each clone with the op it stands for (null: a free op's copy).
      SmallVector<std::pair<Operation *, Operation *>> clones;
      // Selective: products and attention are not run again; a copy made
      // only for their gradient rule goes once the rule has run.
      // A linear layer's bias add counts as part of its product: kept with
      // it, so the step and the recomputed block both add the bias in the
      // GEMM's epilogue (loom-fuse-epilogues), where a CUDA GEMM adds it
      // before rounding to bf16; recomputed apart, the bias was added to
      // the rounded product and the bits differed from the step without
      // recompute.
      auto kept = [&](Operation *op) {
        if (recompute != RecomputeKind::selective)
          return false;
        if (isa<MatmulOp, AttentionOp>(op))
          return true;
        auto add = dyn_cast<AddOp>(op);
        if (!add)
          return false;
        for (auto [p, q] : {std::pair(add.getLhs(), add.getRhs()), {add.getRhs(), add.getLhs()}})
          if (p.getDefiningOp<MatmulOp>() && p.hasOneUse() &&
              cast<RankedTensorType>(q.getType()).getRank() == 1)
            return true;
        return false;
      };
      std::function<void(Value)> remake = [&](Value v) {
        Operation *def = v.getDefiningOp();
        if (!def || again.contains(v) || !plan.free.contains(def))
          return;
        // Constants are data, not work: every unit reads the one copy
        // (a copy each would repeat a rotary table in every block's code).
        if (def->getNumOperands() == 0 && !isa<LoadOp>(def))
          return;
        for (Value in : def->getOperands())
          remake(in);
        clones.push_back({nullptr, b.clone(*def, again)});
      };
      for (Operation *op : byUnit[u]) {
        // A pipeline transfer is not run again (its peer would not send
        // twice): the received value is kept, the rule runs on the op.
        if (isa<P2POp>(op)) {
          clones.push_back({op, op});
          continue;
        }
        if (auto w = dyn_cast<WaitOp>(op);
            w && llvm::all_of(w.getTokens(), [](Value t) { return t.getDefiningOp<P2POp>(); }))
          continue; // (its transfer is waited once, in the forward)
        for (Value in : op->getOperands())
          remake(in);
        bool keep = kept(op); // (before its clone adds a use)
        Operation *c = b.clone(*op, again);
        if (keep)
          for (Value r : op->getResults())
            again.erase(r);
        clones.push_back({op, c});
      }
      SmallVector<Operation *> made;
      for (auto &[orig, c] : clones)
        made.push_back(c);
      d.markActive(made);
      for (auto &[orig, c] : llvm::reverse(clones)) {
        if (orig && orig != c)
          for (auto [r, rc] : llvm::zip(orig->getResults(), c->getResults()))
            d.accumulate(rc, d.get(r));
        if (failed(d.vjp(c)))
          return failure();
        if (orig && kept(orig)) {
          for (Value rc : c->getResults())
            d.forget(rc);
          c->replaceAllUsesWith(orig->getResults());
          c->erase();
        }
      }
    }
    // The forward's own free ops (the casts of parameters the units that
    // keep their activations read), once all their users are done.
    for (Operation *op : llvm::reverse(forwardOps))
      if (plan.free.contains(op) && failed(d.vjp(op)))
        return failure();
    return success();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fwd = module.lookupSymbol<func::FuncOp>(function);
    if (!fwd) {
      module.emitError() << "loom-autodiff: no function @" << function
                         << " to differentiate";
      return signalPassFailure();
    }
    auto results = fwd.getFunctionType().getResults();
    auto lossType = results.size() == 1
                        ? dyn_cast<RankedTensorType>(results[0])
                        : RankedTensorType();
    if (!lossType || lossType.getRank() != 0 ||
        !isa<FloatType>(lossType.getElementType())) {
      fwd.emitError() << "loom-autodiff: @" << function
                      << " must return one floating-point scalar (the loss)";
      return signalPassFailure();
    }
    if (!fwd.getBody().hasOneBlock()) {
      fwd.emitError() << "loom-autodiff: @" << function
                      << " must be a single block (no control flow)";
      return signalPassFailure();
    }
    // Parameters loaded inside a callee never appear on a path in this
    // function: differentiating past a call would silently give no
    // gradients for them.
    WalkResult calls = fwd.walk([&](CallOpInterface call) {
      call->emitError() << "loom-autodiff: @" << function
                        << " calls another function; differentiation does not cross calls "
                           "(inline it first, e.g. loom-opt --inline)";
      return WalkResult::interrupt();
    });
    if (calls.wasInterrupted())
      return signalPassFailure();
    std::string name = function + "_backward";
    if (module.lookupSymbol(name)) {
      fwd.emitError() << "loom-autodiff: @" << name << " already exists";
      return signalPassFailure();
    }

    // Clone the forward pass into the new function.
    OpBuilder b(module.getContext());
    b.setInsertionPointAfter(fwd);
    auto bwd = func::FuncOp::create(b, fwd.getLoc(), name, fwd.getFunctionType());
    Block *entry = bwd.addEntryBlock();
    IRMapping map;
    for (auto [from, to] : llvm::zip(fwd.getArguments(), entry->getArguments()))
      map.map(from, to);
    b.setInsertionPointToStart(entry);
    SmallVector<Operation *> forwardOps;
    Value loss;
    for (Operation &op : fwd.getBody().front()) {
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        loss = map.lookup(ret.getOperand(0));
        continue;
      }
      forwardOps.push_back(b.clone(op, map));
    }

    Location loc = fwd.getLoc();
    Differentiator d(b, loc);
    d.markActive(forwardOps);
    d.accumulate(loss, d.splat(cast<RankedTensorType>(loss.getType()), 1.0));
    if (recompute == RecomputeKind::none) {
      for (Operation *op : llvm::reverse(forwardOps))
        if (failed(d.vjp(op)))
          return signalPassFailure();
    } else if (failed(backwardByUnits(d, b, forwardOps))) {
      return signalPassFailure();
    }

    // One gradient per parameter, in module order; tied loads are summed.
    llvm::MapVector<StringRef, Value> grads;
    llvm::StringMap<Type> gradType;
    // (Recomputed units load their parameters again: every load counts.)
    SmallVector<LoadOp> loads;
    for (auto load : entry->getOps<LoadOp>())
      loads.push_back(load);
    for (LoadOp load : loads)
      if (differentiable(load.getResult())) {
        gradType[load.getName()] = load.getType();
        grads[load.getName()] = Value();
      }
    for (LoadOp load : loads)
      if (Value g = d.get(load.getResult())) {
        Value &acc = grads[load.getName()];
        acc = acc ? AddOp::create(b, loc, g.getType(), acc, g).getResult() : g;
      }
    SmallVector<Value> outs{loss};
    SmallVector<Type> types{loss.getType()};
    SmallVector<Attribute> names;
    SmallVector<std::pair<StringRef, Value>> ordered;
    for (ParamOp p : module.getOps<ParamOp>())
      if (grads.count(p.getSymName()))
        ordered.push_back({p.getSymName(), grads[p.getSymName()]});
    for (auto &[pname, g] : ordered) {
      // A parameter loaded but not on the path to the loss: zero gradient.
      Value v = g ? g
                  : d.splat(cast<RankedTensorType>(gradType[pname]), 0.0);
      outs.push_back(v);
      types.push_back(v.getType());
      names.push_back(FlatSymbolRefAttr::get(&getContext(), pname));
    }
    func::ReturnOp::create(b, loc, outs);
    bwd.setFunctionType(b.getFunctionType(fwd.getArgumentTypes(), types));
    // VJP rules build every operand's contribution before knowing whether
    // it is needed (an input's gradient, say); drop what nothing uses.
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(*entry)))
      if (isOpTriviallyDead(&op))
        op.erase();
    bwd->setAttr(LoomDialect::GradParamsAttrHelper::getNameStr(), b.getArrayAttr(names));
    // tp_enter and stop_gradient have done their work (their rules above):
    // from here on each is the identity it computes, in every function.
    module.walk([](Operation *op) {
      if (isa<TpEnterOp, StopGradientOp>(op)) {
        op->getResult(0).replaceAllUsesWith(op->getOperand(0));
        op->erase();
      }
    });
  }
};

} // namespace
