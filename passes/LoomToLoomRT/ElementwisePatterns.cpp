//===- ElementwisePatterns.cpp - lowering patterns: elementwise ops, compression ---===//
//
// The lowering of elementwise ops, compression: one `lower(Op, Adaptor, Emit &)` per op.
//
//===----------------------------------------------------------------------===//
#include "passes/LoomToLoomRT/Lowering.h"

using namespace mlir;
using namespace mlir::loom;

namespace mlir::loom::lowering {

//--- Elementwise -----------------------------------------------------------//

template <typename OpT> constexpr rt::UnaryKind unaryKind() {
  if constexpr (std::is_same_v<OpT, NegOp>)
    return rt::UnaryKind::neg;
  else if constexpr (std::is_same_v<OpT, ExpOp>)
    return rt::UnaryKind::exp;
  else if constexpr (std::is_same_v<OpT, LogOp>)
    return rt::UnaryKind::log;
  else if constexpr (std::is_same_v<OpT, SqrtOp>)
    return rt::UnaryKind::sqrt;
  else if constexpr (std::is_same_v<OpT, RsqrtOp>)
    return rt::UnaryKind::rsqrt;
  else if constexpr (std::is_same_v<OpT, TanhOp>)
    return rt::UnaryKind::tanh;
  else if constexpr (std::is_same_v<OpT, ErfOp>)
    return rt::UnaryKind::erf;
  else if constexpr (std::is_same_v<OpT, SinOp>)
    return rt::UnaryKind::sin;
  else if constexpr (std::is_same_v<OpT, CosOp>)
    return rt::UnaryKind::cos;
  else if constexpr (std::is_same_v<OpT, SigmoidOp>)
    return rt::UnaryKind::sigmoid;
  else if constexpr (std::is_same_v<OpT, ReluOp> || std::is_same_v<OpT, ReluGradOp>)
    return rt::UnaryKind::relu;
  else
    return rt::UnaryKind::silu; // SiluOp, SiluGradOp
}
template <typename OpT> rt::UnaryKind unaryKindOf(OpT o) {
  if constexpr (std::is_same_v<OpT, GeluOp> || std::is_same_v<OpT, GeluGradOp>)
    return o.getApproximate() ? rt::UnaryKind::gelu_tanh : rt::UnaryKind::gelu;
  else
    return unaryKind<OpT>();
}

template <typename OpT> LogicalResult lowerUnary(OpT o, Value x, Emit &e) {
  Value y = e.alloc(o.getResult());
  rt::UnaryOp::create(e.rw, e.loc, e.f.compute, unaryKindOf(o), dt(o.getInput()), x, y,
                      numel(o.getInput()));
  return e.done(y);
}
template <typename OpT> LogicalResult lowerUnaryGrad(OpT o, Value dy, Value x, Emit &e) {
  Value dx = e.alloc(o.getResult());
  rt::UnaryGradOp::create(e.rw, e.loc, e.f.compute, unaryKindOf(o), dt(o.getInput()), dy, x, dx,
                          numel(o.getInput()));
  return e.done(dx);
}
template <typename OpT>
LogicalResult lowerBinary(OpT o, rt::BinaryKind k, Value a, Value b, Emit &e) {
  int rank = tt(o.getResult()).getRank();
  Value out = e.alloc(o.getResult());
  // (On host memory, Streaming DiLoCo's outer step beside offloaded
  // master weights: the host stream, the CPU.)
  rt::BinaryOp::create(e.rw, e.loc, e.stream(), k, dt(o.getResult()), a, alignedShape(o.getLhs(), rank),
                       b, alignedShape(o.getRhs(), rank), out, alignedShape(o.getResult(), rank));
  return e.done(out);
}

/// The mask's key comes from the driver (the run's seed and the step); the
/// element offset from the rank (a data-parallel rank's rows of the batch).
LogicalResult lower(DropoutOp o, DropoutOp::Adaptor a, Emit &e) {
  Value y = e.alloc(o.getResult());
  Value key = rt::RandomKeyOp::create(e.rw, e.loc, e.rw.getI64Type(), o.getKey());
  rt::DropoutOp::create(e.rw, e.loc, e.f.compute, dt(o.getInput()), a.getInput(), y, key, e.f.world,
                        f64(o.getRatio()), numel(o.getInput()));
  return e.done(y);
}

//--- Compression -------------------------------------------------------------//

/// sign_scale (1-bit Adam): the payload's fp32 scale, then its signs. The
/// kernel updates the error in place: in the incoming error's own buffer
/// where the plan allows (a state loaded and stored back, or a value only
/// the compression reads), else in a copy of it (updateBuffers); without
/// feedback it starts from zeros (a scratch buffer).
SmallVector<Value> updateBuffers(Emit &e, ValueRange ins, ArrayRef<Value> outs);

LogicalResult lower(CompressOp o, CompressOp::Adaptor a, Emit &e) {
  Value packed = e.alloc(o.getResult());
  int64_t n = numel(o.getInput());
  if (isBlockCodec(o.getResult().getType())) {
    rt::BlockCompressOp::create(e.rw, e.loc, e.f.compute, blockCodecOf(o.getResult().getType()),
                                a.getInput(), packed, n, o.getResult().getType().getCodec().getBlock());
    return e.done(packed);
  }
  Value err;
  if (o.getError()) {
    err = updateBuffers(e, {a.getError()}, {o.getNewError()})[0];
  } else {
    err = e.allocBytes(n * 4);
    rt::FillOp::create(e.rw, e.loc, e.f.compute, rt::DType::f32, err, APFloat(0.0), n);
  }
  rt::OnebitCompressOp::create(e.rw, e.loc, e.f.compute, a.getInput(), err, packed, n);
  if (o.getError())
    return e.done({packed, err});
  return e.done(packed);
}
LogicalResult lower(DecompressOp o, DecompressOp::Adaptor a, Emit &e) {
  // Averaged where it is read (Plan::average): the payload passes through.
  if (e.plan.averaged.contains(o))
    return e.done(a.getInput());
  if (isBlockCodec(o.getInput().getType())) {
    Value out = e.alloc(o.getResult());
    rt::BlockDecompressOp::create(e.rw, e.loc, e.f.compute, blockCodecOf(o.getInput().getType()),
                                  a.getInput(), out, numel(o.getResult()),
                                  o.getInput().getType().getCodec().getBlock());
    return e.done(out);
  }
  Value out = e.alloc(o.getResult());
  int64_t n = numel(o.getResult()), block = o.getInput().getType().getCodec().getBlock();
  int64_t chunk = block > 0 ? block : n;
  auto d = rt::OnebitDecompressOp::create(e.rw, e.loc, e.f.compute, a.getInput(), out, chunk);
  d.setChunks(n / chunk);
  return e.done(out);
}

// clang-format off
#define LOOM_UNARY(OP)                                                                             \
  LogicalResult lower(OP o, OP::Adaptor a, Emit &e) { return lowerUnary(o, a.getInput(), e); }
LOOM_UNARY(NegOp)
LOOM_UNARY(ExpOp)
LOOM_UNARY(LogOp)
LOOM_UNARY(SqrtOp)
LOOM_UNARY(RsqrtOp)
LOOM_UNARY(TanhOp)
LOOM_UNARY(ErfOp)
LOOM_UNARY(SinOp)
LOOM_UNARY(CosOp)
LOOM_UNARY(SigmoidOp)
LOOM_UNARY(ReluOp)
LOOM_UNARY(SiluOp)
LOOM_UNARY(GeluOp)
#undef LOOM_UNARY
#define LOOM_UNARY_GRAD(OP)                                                                        \
  LogicalResult lower(OP o, OP::Adaptor a, Emit &e) {                                              \
    return lowerUnaryGrad(o, a.getGrad(), a.getInput(), e);                                        \
  }
LOOM_UNARY_GRAD(ReluGradOp)
LOOM_UNARY_GRAD(SiluGradOp)
LOOM_UNARY_GRAD(GeluGradOp)
#undef LOOM_UNARY_GRAD
#define LOOM_BINARY(OP, KIND)                                                                      \
  LogicalResult lower(OP o, OP::Adaptor a, Emit &e) {                                              \
    return lowerBinary(o, rt::BinaryKind::KIND, a.getLhs(), a.getRhs(), e);                        \
  }
LOOM_BINARY(AddOp, add)
LOOM_BINARY(SubOp, sub)
LOOM_BINARY(MulOp, mul)
LOOM_BINARY(DivOp, div)
LOOM_BINARY(PowOp, pow)
LOOM_BINARY(MaxOp, max)
LOOM_BINARY(MinOp, min)
LOOM_BINARY(EqOp, eq)
LOOM_BINARY(NeOp, ne)
LOOM_BINARY(LtOp, lt)
LOOM_BINARY(LeOp, le)
#undef LOOM_BINARY
// clang-format on

LogicalResult lower(LerpOp o, LerpOp::Adaptor a, Emit &e) {
  Value y = e.alloc(o.getResult());
  rt::LerpOp::create(e.rw, e.loc, e.stream(), dt(o.getResult()), a.getLhs(), a.getRhs(), y,
                     numel(o.getResult()), f64(o.getWeight()));
  return e.done(y);
}

LogicalResult lower(SelectOp o, SelectOp::Adaptor a, Emit &e) {
  int rank = tt(o.getResult()).getRank();
  Value out = e.alloc(o.getResult());
  rt::SelectOp::create(e.rw, e.loc, e.f.compute, dt(o.getResult()), a.getCond(),
                       alignedShape(o.getCond(), rank), a.getLhs(), alignedShape(o.getLhs(), rank),
                       a.getRhs(), alignedShape(o.getRhs(), rank), out,
                       alignedShape(o.getResult(), rank));
  return e.done(out);
}

LogicalResult lower(CastOp o, CastOp::Adaptor a, Emit &e) {
  // Adam writes a fused refresh cast's result itself.
  if (e.plan.elided.contains(o))
    return e.done(e.plan.refreshBuffer.lookup(o));
  Value y = e.alloc(o.getResult());
  // On host memory (the bf16 refresh of an offloaded update whose gradient
  // arrives in fp32, data parallelism's reduced buckets) the CPU casts.
  rt::CastOp::create(e.rw, e.loc, e.stream(), dt(o.getInput()), a.getInput(), dt(o.getResult()), y,
                     numel(o.getInput()));
  return e.done(y);
}

LogicalResult lower(arith::ConstantOp o, arith::ConstantOp::Adaptor, Emit &e) {
  auto elems = cast<DenseElementsAttr>(o.getValue());
  Type elt = elems.getElementType();
  Value y = e.alloc(o.getResult());
  if (elems.isSplat() && (elt.isF32() || elt.isBF16()))
    rt::FillOp::create(e.rw, e.loc, e.f.compute, *dtypeOf(elt), y, f64(elems.getSplatValue<APFloat>()),
                       elems.getNumElements());
  else
    rt::WriteConstOp::create(e.rw, e.loc, e.f.compute, y, elems);
  return e.done(y);
}


void populateElementwisePatterns(RewritePatternSet &patterns, const TypeConverter &tc, Plan &plan) {
  addPatterns<NegOp, ExpOp, LogOp, SqrtOp, RsqrtOp, TanhOp, ErfOp, SinOp, CosOp, SigmoidOp,
              ReluOp, SiluOp, GeluOp, DropoutOp, CompressOp, DecompressOp, ReluGradOp, SiluGradOp,
              GeluGradOp, AddOp, SubOp, MulOp, DivOp, PowOp, MaxOp, MinOp, EqOp, NeOp, LtOp, LeOp,
              SelectOp, CastOp, arith::ConstantOp, LerpOp>(patterns, tc, plan);
}

} // namespace mlir::loom::lowering
