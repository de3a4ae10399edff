//===- Elementwise.cpp - elementwise ONNX operators ----------------------===//
//
// Arithmetic, activations, comparisons and logic, casts, Where, Dropout:
// their rows of the operator table and their converters.
//
//===----------------------------------------------------------------------===//
#include "lib/Import/Onnx/Importer.h"

namespace loom::onnximport {

ArrayRef<OnnxOp> Importer::elementwiseOps() {
  // One row per operator (Importer.h, OnnxOp).
  static const OnnxOp rows[] = {
      {"Add", 13, 2, 2, 1, 1,
       "loom.add (broadcasting); folds on constants",
       &Importer::binaryOp<AddOp>, &Importer::foldArithmetic},
      {"And", 13, 2, 2, 1, 1,
       kIntLogic,
       &Importer::convertLogic, &Importer::foldArithmetic},
      {"Cast", 13, 1, 1, 1, 1,
       "float to float, integer to integer: the identity (device integers are int64); integer to bool: x != 0; integer to float, float to integer: loom.cast; folds on constants",
       &Importer::convertCast, &Importer::foldArithmetic},
      {"CastLike", 13, 2, 2, 1, 1,
       "as Cast, to the second input's type",
       &Importer::convertCast, &Importer::foldArithmetic},
      {"Cos", 13, 1, 1, 1, 1,
       "loom.cos; folds on constants",
       &Importer::unary<CosOp>, &Importer::foldArithmetic},
      {"Div", 13, 2, 2, 1, 1,
       "loom.div; folds on constants",
       &Importer::binaryOp<DivOp>, &Importer::foldArithmetic},
      {"Dropout", 13, 1, 3, 1, 2,
       "loom.dropout in training mode (a counter-based mask per step; --dropout=off: the " "identity); the identity in inference mode or at ratio 0; the mask output is not " "computed",
       &Importer::convertDropout, nullptr},
      {"Equal", 13, 2, 2, 1, 1,
       kIntLogic,
       &Importer::convertLogic, &Importer::foldArithmetic},
      {"Erf", 13, 1, 1, 1, 1,
       "loom.erf",
       &Importer::unary<ErfOp>, nullptr},
      {"Exp", 13, 1, 1, 1, 1,
       "loom.exp",
       &Importer::unary<ExpOp>, nullptr},
      {"Gelu", 13, 1, 1, 1, 1,
       "loom.gelu (approximate none or tanh)",
       &Importer::convertGelu, nullptr},
      {"Greater", 13, 2, 2, 1, 1,
       kIntLogic,
       &Importer::convertLogic, &Importer::foldArithmetic},
      {"GreaterOrEqual", 13, 2, 2, 1, 1,
       kIntLogic,
       &Importer::convertLogic, &Importer::foldArithmetic},
      {"Identity", 13, 1, 1, 1, 1,
       "the identity",
       &Importer::convertIdentity, &Importer::foldShapes},
      {"IsNaN", 13, 1, 1, 1, 1,
       "only as scaled_dot_product_attention's guard Where(IsNaN(p), 0, p) after a Softmax: p",
       &Importer::convertIsNaN, nullptr},
      {"Less", 13, 2, 2, 1, 1,
       kIntLogic,
       &Importer::convertLogic, &Importer::foldArithmetic},
      {"LessOrEqual", 13, 2, 2, 1, 1,
       kIntLogic,
       &Importer::convertLogic, &Importer::foldArithmetic},
      {"Log", 13, 1, 1, 1, 1,
       "loom.log",
       &Importer::unary<LogOp>, nullptr},
      {"Max", 13, 1, 2, 1, 1,
       "loom.max (two inputs; of one, the input); folds on constants",
       &Importer::convertMaxMin<MaxOp>, &Importer::foldArithmetic},
      {"Min", 13, 1, 2, 1, 1,
       "loom.min (two inputs; of one, the input); folds on constants",
       &Importer::convertMaxMin<MinOp>, &Importer::foldArithmetic},
      {"Mul", 13, 2, 2, 1, 1,
       "loom.mul; folds on constants",
       &Importer::binaryOp<MulOp>, &Importer::foldArithmetic},
      {"Neg", 13, 1, 1, 1, 1,
       "loom.neg; folds on constants",
       &Importer::unary<NegOp>, &Importer::foldArithmetic},
      {"Not", 13, 1, 1, 1, 1,
       kIntLogic,
       &Importer::convertLogic, &Importer::foldArithmetic},
      {"Or", 13, 2, 2, 1, 1,
       kIntLogic,
       &Importer::convertLogic, &Importer::foldArithmetic},
      {"Pow", 13, 2, 2, 1, 1,
       "loom.pow; folds on constants",
       &Importer::binaryOp<PowOp>, &Importer::foldArithmetic},
      {"Reciprocal", 13, 1, 1, 1, 1,
       "1 / x (loom.div); folds on constants",
       &Importer::convertReciprocal, &Importer::foldArithmetic},
      {"Relu", 13, 1, 1, 1, 1,
       "loom.relu",
       &Importer::unary<ReluOp>, nullptr},
      {"Sigmoid", 13, 1, 1, 1, 1,
       "loom.sigmoid",
       &Importer::unary<SigmoidOp>, nullptr},
      {"Sin", 13, 1, 1, 1, 1,
       "loom.sin; folds on constants",
       &Importer::unary<SinOp>, &Importer::foldArithmetic},
      {"Softplus", 13, 1, 1, 1, 1,
       "relu(x) + log(1 + exp(x - 2 relu(x))): log(1 + exp(x)) without overflow",
       &Importer::convertSoftplus, nullptr},
      {"Sqrt", 13, 1, 1, 1, 1,
       "loom.sqrt (a warning for the root of a mean of squares with no epsilon); folds on "
       "constants",
       &Importer::convertSqrt, &Importer::foldArithmetic},
      {"Sub", 13, 2, 2, 1, 1,
       "loom.sub; folds on constants",
       &Importer::binaryOp<SubOp>, &Importer::foldArithmetic},
      {"Tanh", 13, 1, 1, 1, 1,
       "loom.tanh",
       &Importer::unary<TanhOp>, nullptr},
      {"Where", 13, 3, 3, 1, 1,
       "loom.select; folds on constants",
       &Importer::convertWhere, nullptr},
  };
  return rows;
}

bool Importer::convertIdentity(const onnx::NodeProto &n) {
  Value x;
  if (!input(n, 0, x))
    return false;
  define(n, x);
  return true;
}

bool Importer::convertReciprocal(const onnx::NodeProto &n) {
  if (allConst(n))
    return nodeFail(n, "operator not supported by the ONNX importer yet");
  Value x;
  if (!input(n, 0, x))
    return false;
  auto type = RankedTensorType::get({}, tt(x).getElementType());
  Value one = arith::ConstantOp::create(b, loc, type, DenseElementsAttr::get(type, 1.0f));
  define(n, DivOp::create(b, loc, x.getType(), one, x));
  return true;
}

bool Importer::convertSoftplus(const onnx::NodeProto &n) {
  // log(1 + e^x) = relu(x) + log(1 + e^-|x|), with -|x| = x - 2 relu(x):
  // e^x never overflows, and every piece has a gradient (sigmoid(x) in all).
  Value x;
  if (!input(n, 0, x))
    return false;
  auto t = x.getType();
  auto st = RankedTensorType::get({}, tt(x).getElementType());
  Value one = arith::ConstantOp::create(b, loc, st, DenseElementsAttr::get(st, 1.0f));
  Value two = arith::ConstantOp::create(b, loc, st, DenseElementsAttr::get(st, 2.0f));
  Value r = ReluOp::create(b, loc, t, x);
  Value e = ExpOp::create(b, loc, t, SubOp::create(b, loc, t, x, MulOp::create(b, loc, t, r, two)));
  Value l = LogOp::create(b, loc, t, AddOp::create(b, loc, t, e, one));
  define(n, AddOp::create(b, loc, t, r, l));
  return true;
}

bool Importer::convertSqrt(const onnx::NodeProto &n) {
  // sqrt(mean(x^2)) with nothing added: an RMS norm whose epsilon the
  // dynamo exporter's optimizer removed (it rewrites x + c as x for a
  // constant c of 1e-8 or less: Helium's rms_norm_eps 1e-8). The file then
  // is not the module (gradients 1e-5 apart) and a row of zeros is NaN.
  StringRef in = n.input(0);
  std::string sq = producer.lookup(producerInput.lookup(in));
  if (!notedNoEpsilon && producer.lookup(in) == "ReduceMean" && (sq == "Pow" || sq == "Mul")) {
    llvm::errs() << "loomc: warning: node '" << n.name()
                 << "' (Sqrt) takes the root of a mean of squares with no epsilon added: an "
                    "RMS norm whose small epsilon the exporter's optimizer removed (1e-8 or "
                    "less); a row of zeros gives NaN and the model is not PyTorch's. Export "
                    "with torch.onnx.export(..., optimize=False) to keep it"
                 << pytorchSource(n) << "\n";
    notedNoEpsilon = true;
  }
  return unary<SqrtOp>(n);
}

bool Importer::convertIsNaN(const onnx::NodeProto &n) {
  Val guard;
  guard.nanOf = n.input(0);
  values[n.output(0)] = guard;
  return true;
}

bool Importer::blendWhere(const onnx::NodeProto &n, const Val &mask) {
  // cond ? x : y as x m + y (1 - m): exact for finite
  // branches (x * 1 + y * 0), and the gradient is select's (dx = dy m,
  // dy' = dy (1 - m); the mask's own is zero). A constant branch that is
  // not finite (masked_fill with -inf) would make NaN: refused, as any
  // other use of a computed float mask is.
  for (int i = 1; i < 3; ++i)
    if (const Val *c = constInput(n, i))
      if (llvm::any_of(c->data, [](double v) { return !std::isfinite(v); }))
        return nodeFail(n, "a branch is a constant that is not finite (masked_fill with -inf), "
                           "which a blend on a computed condition would make NaN; " +
                               mask.maskWhy);
  Value x, y;
  if (!input(n, 1, x) || !input(n, 2, y))
    return false;
  Value m = mask.v;
  // The broadcast type of two operands (null if they do not broadcast).
  auto joint = [&](Value p, Value q) {
    SmallVector<int64_t> s;
    return OpTrait::util::getBroadcastedShape(tt(p).getShape(), tt(q).getShape(), s)
               ? RankedTensorType::get(s, tt(x).getElementType())
               : RankedTensorType();
  };
  RankedTensorType xm = joint(x, m), ym = joint(y, m);
  if (!xm || !ym || !joint(x, y))
    return nodeFail(n, "shapes do not broadcast");
  auto st = RankedTensorType::get({}, tt(x).getElementType());
  Value one = arith::ConstantOp::create(b, loc, st, DenseElementsAttr::get(st, 1.0f));
  Value notM = SubOp::create(b, loc, m.getType(), one, m);
  Value a = MulOp::create(b, loc, xm, x, m);
  Value c = MulOp::create(b, loc, ym, y, notM);
  RankedTensorType t = joint(a, c);
  define(n, AddOp::create(b, loc, t, a, c));
  return true;
}

bool Importer::convertWhere(const onnx::NodeProto &n) {
  if (auto g = values.find(n.input(0)); g != values.end() && !g->second.nanOf.empty()) {
    const Val *zero = constInput(n, 1);
    bool zeros = zero && llvm::all_of(zero->data, [](double v) { return v == 0; });
    if (n.input(2) != g->second.nanOf || !zeros || producer.lookup(n.input(2)) != "Softmax")
      return nodeFail(n, "IsNaN is supported only as scaled_dot_product_attention exports "
                         "it: Where(IsNaN(p), 0, p) on a Softmax output p");
    Value p;
    if (!input(n, 2, p))
      return false;
    if (!notedNanGuard)
      llvm::errs() << "loomc: note: node '" << n.name()
                   << "': Where(IsNaN(p), 0, p) after a softmax (scaled_dot_product_"
                      "attention's guard) imported as p: exact unless a mask row hides "
                      "every key\n";
    notedNanGuard = true;
    define(n, p);
    return true;
  }
  if (auto m = values.find(n.input(0)); m != values.end() && m->second.floatMask)
    return blendWhere(n, m->second);
  Value c, x, y;
  if (!input(n, 0, c) || !input(n, 1, x) || !input(n, 2, y))
    return false;
  if (!tt(c).getElementType().isInteger(1))
    return nodeFail(n, "the condition is computed on the device (an integer mask); Where "
                       "takes a condition that folds to a constant");
  SmallVector<int64_t> xy, shape;
  if (!OpTrait::util::getBroadcastedShape(tt(x).getShape(), tt(y).getShape(), xy) ||
      !OpTrait::util::getBroadcastedShape(xy, tt(c).getShape(), shape))
    return nodeFail(n, "shapes do not broadcast");
  define(n, SelectOp::create(b, loc, RankedTensorType::get(shape, tt(x).getElementType()), c, x, y));
  return true;
}

bool Importer::convertDropout(const onnx::NodeProto &n) {
  Value x;
  if (!input(n, 0, x))
    return false;
  if (n.output_size() > 1 && !n.output(1).empty()) {
    Val mask;
    mask.refuse = "input '" + n.output(1) + "' is the mask of Dropout '" + n.name() +
                  "', which the importer does not compute";
    values[n.output(1)] = mask;
  }
  const Val *ratioC = nullptr, *trainC = nullptr;
  if (!optionalConst(n, 1, ratioC, "ratio") || !optionalConst(n, 2, trainC, "training_mode"))
    return false;
  double ratio = ratioC ? (ratioC->numel() == 1 ? ratioC->data[0] : -1) : 0.5;
  bool training = trainC && trainC->numel() == 1 && trainC->data[0] != 0;
  if (ratioC && (ratio < 0 || ratio >= 1))
    return nodeFail(n, "ratio must be one number in [0, 1)");
  if (training && ratio > 0) {
    if (!dropoutOff) {
      if (!isa<FloatType>(tt(x).getElementType()))
        return nodeFail(n, "dropout in training mode needs a float input, got " +
                               typeStr(x.getType()));
      // The ratio as the decimal it was written as (0.1, not the float
      // 0.10000000149): the shortest one that rounds to the stored float.
      char text[32];
      auto r = std::to_chars(text, text + sizeof text, float(ratio));
      ratio = std::strtod(std::string(text, r.ptr).c_str(), nullptr);
      define(n, DropoutOp::create(b, loc, x.getType(), x, b.getF64FloatAttr(ratio),
                                  b.getI64IntegerAttr(dropoutKeys++)));
      return true;
    }
    if (!notedDropout)
      llvm::errs() << "loomc: note: --dropout=off: Dropout nodes (ratio " << ratio
                   << " in training mode) import as the identity\n";
    notedDropout = true;
  }
  define(n, x);
  return true;
}

bool Importer::convertGelu(const onnx::NodeProto &n) {
  Value x;
  if (!input(n, 0, x))
    return false;
  std::string approximate = "none";
  if (const auto *a = attr(n, "approximate"))
    approximate = a->s();
  if (approximate != "none" && approximate != "tanh")
    return nodeFail(n, "approximate='" + approximate + "': expected 'none' or 'tanh'");
  define(n, GeluOp::create(b, loc, x.getType(), x,
                           approximate == "tanh" ? b.getUnitAttr() : UnitAttr()));
  return true;
}

bool Importer::convertCast(const onnx::NodeProto &n) {
  using TP = onnx::TensorProto;
  Value x;
  if (!input(n, 0, x))
    return false;
  // CastLike: the type of the second input (a value or a constant).
  int to = int(intAttr(n, "to", 0));
  if (n.op_type() == "CastLike") {
    auto like = values.find(n.input(1));
    to = like == values.end() ? 0
         : like->second.v     ? (tt(like->second.v).getElementType().isF32()          ? TP::FLOAT
                                 : tt(like->second.v).getElementType().isInteger(64) ? TP::INT64
                                                                                      : 0)
                              : like->second.elem;
  }
  Type from = tt(x).getElementType();
  bool fromInt = from.isInteger(64);
  if ((from.isF32() && to == TP::FLOAT) || (fromInt && (isIntElem(to) || to == TP::BOOL))) {
    if (to == TP::BOOL) {
      Val zero;
      zero.elem = TP::INT64;
      zero.data = {0};
      return broadcastOp<NeOp>(n, x, materialize(zero));
    }
    define(n, x);
    return true;
  }
  if ((fromInt && to == TP::FLOAT) || (from.isF32() && isIntElem(to))) {
    define(n, CastOp::create(b, loc, RankedTensorType::get(tt(x).getShape(), to == TP::FLOAT ? f32 : i64), x));
    return true;
  }
  return nodeFail(n, "casts of computed tensors between float, integer and (from integer) "
                     "boolean types are supported; this one is from " +
                     typeStr(from) + " to ONNX type " + std::to_string(to));
}

bool Importer::floatComparison(const onnx::NodeProto &n) {
  // Constants as f32, computed floats as they are.
  SmallVector<Value, 2> xs;
  std::string why;
  for (int i = 0; i < 2; ++i) {
    Value v;
    if (const Val *c = constInput(n, i)) {
      Val f = *c;
      f.elem = onnx::TensorProto::FLOAT;
      v = materialize(f);
    } else if (!input(n, i, v)) {
      return false;
    } else if (!isa<FloatType>(tt(v).getElementType())) {
      return nodeFail(n, "compares a float with an integer tensor computed on the device");
    } else if (why.empty()) {
      why = notInteger(n, i, v);
    }
    xs.push_back(v);
  }
  const std::string &op = n.op_type();
  bool swap = op == "Greater" || op == "GreaterOrEqual";
  Value l = xs[swap ? 1 : 0], r = xs[swap ? 0 : 1];
  if (!(op == "Equal"           ? broadcastOp<EqOp>(n, l, r)
        : op == "Less" || op == "Greater" ? broadcastOp<LtOp>(n, l, r)
                                          : broadcastOp<LeOp>(n, l, r)))
    return false;
  Val &m = values[n.output(0)];
  m.floatMask = true;
  m.maskWhy = "node '" + n.name() + "' (" + op + ") compares computed floats: " + why;
  m.refuse = "input '" + n.output(0) + "' is a mask only a Where condition takes; " + m.maskWhy;
  return true;
}

bool Importer::convertLogic(const onnx::NodeProto &n) {
  const std::string &op = n.op_type();
  // Comparisons of computed floats (Mamba's softplus threshold) give a
  // mask for Where.
  if (op != "Not" && op != "And" && op != "Or")
    for (int i = 0; i < 2; ++i)
      if (!constInput(n, i))
        if (auto it = values.find(n.input(i)); it != values.end() && it->second.v &&
                                               isa<FloatType>(tt(it->second.v).getElementType()))
          return floatComparison(n);
  Value l, r;
  if (!intInput(n, 0, l) || (n.input_size() > 1 && !intInput(n, 1, r)))
    return false;
  if (op == "Not") {
    Val one;
    one.elem = onnx::TensorProto::INT64;
    one.data = {1};
    return broadcastOp<SubOp>(n, materialize(one), l);
  }
  if (op == "Equal")
    return broadcastOp<EqOp>(n, l, r);
  if (op == "Less")
    return broadcastOp<LtOp>(n, l, r);
  if (op == "LessOrEqual")
    return broadcastOp<LeOp>(n, l, r);
  if (op == "Greater")
    return broadcastOp<LtOp>(n, r, l);
  if (op == "GreaterOrEqual")
    return broadcastOp<LeOp>(n, r, l);
  if (op == "And")
    return broadcastOp<MulOp>(n, l, r);
  return broadcastOp<MaxOp>(n, l, r); // Or
}

} // namespace loom::onnximport
