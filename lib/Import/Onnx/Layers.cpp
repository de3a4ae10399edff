//===- Layers.cpp - GEMMs, norms, softmax, attention ---------------------===//
//
// MatMul and Gemm, Softmax, LayerNormalization and RMSNormalization,
// Attention, the reductions and CumSum: their rows and converters.
//
//===----------------------------------------------------------------------===//
#include "lib/Import/Onnx/Importer.h"

namespace loom::onnximport {

ArrayRef<OnnxOp> Importer::layerOps() {
  // One row per operator (Importer.h, OnnxOp).
  static const OnnxOp rows[] = {
      {"Attention", 23, 3, 6, 1, 4,
       "loom.attention (opset 23; 4-D, causal or unmasked, key/value heads repeated)",
       &Importer::convertAttention, nullptr},
      {"CumSum", 13, 2, 2, 1, 1,
       "loom.cumsum (constant axis; floats and device integers); folds on constants",
       &Importer::convertCumSum, &Importer::foldArithmetic},
      {"Gemm", 13, 2, 3, 1, 1,
       "loom.matmul (+ bias); alpha and beta 1",
       &Importer::convertGemm, nullptr},
      {"LayerNormalization", 13, 2, 3, 1, 3,
       "loom.layer_norm (last axis; a constant scale or bias repeated over rows is taken once)",
       &Importer::convertLayerNormalization, nullptr},
      {"LogSoftmax", 13, 1, 1, 1, 1,
       "loom.softmax log (last axis)",
       &Importer::convertSoftmax, nullptr},
      {"MatMul", 13, 2, 2, 1, 1,
       "loom.matmul (batched, broadcast)",
       &Importer::convertGemm, nullptr},
      {"RMSNormalization", 23, 2, 2, 1, 1,
       "loom.rms_norm (opset 23; last axis)",
       &Importer::convertLayerNormalization, nullptr},
      {"ReduceMean", 13, 1, 2, 1, 1,
       "loom.reduce mean",
       &Importer::convertReduceMean, nullptr},
      {"ReduceSum", 13, 1, 2, 1, 1,
       "loom.reduce sum",
       &Importer::convertReduceMean, nullptr},
      {"Softmax", 13, 1, 1, 1, 1,
       "loom.softmax (last axis)",
       &Importer::convertSoftmax, nullptr},
  };
  return rows;
}

bool Importer::convertGemm(const onnx::NodeProto &n) {
  const std::string &op = n.op_type();
  Value a, w;
  if (!input(n, 0, a) || !input(n, 1, w))
    return false;
  bool ta = op == "Gemm" && intAttr(n, "transA", 0);
  bool tb = op == "Gemm" && intAttr(n, "transB", 0);
  const auto *alpha = attr(n, "alpha"), *beta = attr(n, "beta");
  if ((alpha && alpha->f() != 1.0f) || (beta && beta->f() != 1.0f))
    return nodeFail(n, "alpha and beta other than 1 are not supported");
  auto at = tt(a), wt = tt(w);
  if (at.getRank() < 2 || wt.getRank() < 2)
    return nodeFail(n, "operands of rank < 2 are not supported");
  // The batch dimensions broadcast as in NumPy. An operand whose batch is
  // neither the whole result's nor a single matrix (multi-query
  // attention: keys [B, 1, D, T] against queries [B, H, T, D]) is
  // broadcast to the result's batch first: the runtime's GEMM takes a
  // batch stride per operand, not per dimension.
  ArrayRef<int64_t> ab = at.getShape().drop_back(2), wb = wt.getShape().drop_back(2);
  size_t nb = std::max(ab.size(), wb.size());
  SmallVector<int64_t> shape(nb, 1);
  for (size_t i = 0; i < nb; ++i) {
    int64_t x = i + ab.size() >= nb ? ab[i + ab.size() - nb] : 1;
    int64_t y = i + wb.size() >= nb ? wb[i + wb.size() - nb] : 1;
    if (x != y && x != 1 && y != 1)
      return nodeFail(n, "batch dimensions " + shapeStr(ab) + " and " + shapeStr(wb) +
                             " do not broadcast");
    shape[i] = x == 1 ? y : x;
  }
  auto widen = [&](Value v) {
    auto vt = tt(v);
    ArrayRef<int64_t> vb = vt.getShape().drop_back(2);
    int64_t count = 1;
    for (int64_t d : vb)
      count *= d;
    if (count == 1 || (vb.size() == nb && vb == ArrayRef<int64_t>(shape)))
      return v;
    SmallVector<int64_t> full(shape);
    full.append(vt.getShape().take_back(2).begin(), vt.getShape().take_back(2).end());
    return Value(BroadcastOp::create(b, loc, RankedTensorType::get(full, vt.getElementType()), v));
  };
  a = widen(a);
  w = widen(w);
  shape.push_back(at.getDimSize(at.getRank() - (ta ? 1 : 2)));
  shape.push_back(wt.getDimSize(wt.getRank() - (tb ? 2 : 1)));
  Value y = MatmulOp::create(b, loc, RankedTensorType::get(shape, f32), a, w, ta, tb);
  if (op == "Gemm" && n.input_size() > 2 && !n.input(2).empty()) {
    Value c;
    if (!input(n, 2, c))
      return false;
    y = AddOp::create(b, loc, y.getType(), y, c);
  }
  define(n, y);
  return true;
}

bool Importer::convertSoftmax(const onnx::NodeProto &n) {
  const std::string &op = n.op_type();
  Value x;
  if (!input(n, 0, x))
    return false;
  // Checked, but kept as written (-1 stays -1 in the IR).
  int64_t axis = intAttr(n, "axis", -1), checked = axis;
  if (!normAxis(n, checked, tt(x).getRank()))
    return false;
  define(n, SoftmaxOp::create(b, loc, x.getType(), x, b.getI64IntegerAttr(axis),
                              op == "LogSoftmax" ? b.getUnitAttr() : UnitAttr()));
  return true;
}

bool Importer::convertAttention(const onnx::NodeProto &n) {
  // (Opset 23 or later: checkNode checks each row's since-opset.)
  Value q, k, v;
  if (!input(n, 0, q) || !input(n, 1, k) || !input(n, 2, v))
    return false;
  for (int i = 4; i < n.input_size(); ++i)
    if (!n.input(i).empty())
      return nodeFail(n, "a past key or value (a KV cache) is not supported: export for "
                         "training without a cache");
  for (int i = 1; i < n.output_size(); ++i)
    if (!n.output(i).empty()) {
      Val no;
      no.refuse = "input '" + n.output(i) + "' is output #" + std::to_string(i) +
                  " of Attention '" + n.name() + "', which the importer does not compute";
      values[n.output(i)] = no;
    }
  if (const auto *sc = attr(n, "softcap"); sc && sc->f() != 0.0f)
    return nodeFail(n, "softcap is not supported");
  auto qt = tt(q), kt = tt(k), vt = tt(v);
  if (qt.getRank() != 4 || kt.getRank() != 4 || vt.getRank() != 4)
    return nodeFail(n, "only 4-D [batch, heads, sequence, head size] inputs are supported");
  int64_t heads = qt.getDimSize(1), kvHeads = kt.getDimSize(1);
  if (vt.getDimSize(1) != kvHeads || kvHeads < 1 || heads % kvHeads)
    return nodeFail(n, "query heads (" + std::to_string(heads) +
                           ") must be a multiple of the key and value heads (" +
                           std::to_string(kvHeads) + ", " + std::to_string(vt.getDimSize(1)) +
                           ")");
  bool causal = intAttr(n, "is_causal", 0) != 0;
  if (n.input_size() > 3 && !n.input(3).empty()) {
    const Val *mask = constInput(n, 3);
    int64_t tq = qt.getDimSize(2), tk = kt.getDimSize(2);
    if (!mask || mask->shape.size() < 2 || mask->shape[mask->shape.size() - 2] != tq ||
        mask->shape.back() != tk)
      return nodeFail(n, "attn_mask must be a constant [.., " + std::to_string(tq) + ", " +
                             std::to_string(tk) + "] mask (causal or hiding nothing)");
    bool isBool = mask->elem == onnx::TensorProto::BOOL, all = true, tril = tq == tk;
    for (int64_t e = 0; e < mask->numel(); ++e) {
      int64_t i = (e / tk) % tq, j = e % tk;
      double x = mask->data[size_t(e)];
      bool attends = isBool ? x != 0 : x == 0.0;
      bool hides = isBool ? x == 0 : x <= -1e30;
      if (!attends && !hides)
        return nodeFail(n, "attn_mask holds " + std::to_string(x) +
                               ": only masks that attend or hide are supported");
      all = all && attends;
      tril = tril && attends == (j <= i);
    }
    if (!all && !tril)
      return nodeFail(n, "attn_mask is neither the causal mask nor all-attending (a padding "
                         "mask is not supported)");
    causal = causal || !all;
  }
  double scale = 1.0 / std::sqrt(double(qt.getDimSize(3)));
  if (const auto *sa = attr(n, "scale"))
    scale = sa->f();
  auto repeat = [&](Value x) {
    // [B, kv, S, D] -> [B, kv, g, S, D] -> [B, kv·g, S, D]
    auto xt = tt(x);
    int64_t g = heads / kvHeads;
    if (g == 1)
      return x;
    ArrayRef<int64_t> s = xt.getShape();
    Type e = xt.getElementType();
    Value r = ReshapeOp::create(b, loc, RankedTensorType::get({s[0], s[1], 1, s[2], s[3]}, e), x);
    r = BroadcastOp::create(b, loc, RankedTensorType::get({s[0], s[1], g, s[2], s[3]}, e), r);
    return Value(ReshapeOp::create(b, loc, RankedTensorType::get({s[0], heads, s[2], s[3]}, e), r));
  };
  k = repeat(k);
  v = repeat(v);
  SmallVector<int64_t> out(qt.getShape());
  out[3] = vt.getDimSize(3);
  define(n, AttentionOp::create(b, loc, RankedTensorType::get(out, qt.getElementType()), q, k, v,
                                causal ? b.getUnitAttr() : UnitAttr(), b.getF64FloatAttr(scale)));
  return true;
}

bool Importer::rowInvariantVector(const onnx::NodeProto &n, int i, int64_t d, Value &out) {
  const Val *c = constInput(n, i);
  if (!c || c->shape.empty() || c->shape.back() != d || c->numel() == d)
    return input(n, i, out);
  for (int64_t k = d; k < c->numel(); ++k)
    if (c->data[size_t(k)] != c->data[size_t(k % d)])
      return nodeFail(n, "input #" + std::to_string(i) + " differs between rows: a "
                         "per-row scale or bias is not supported");
  Val row = *c;
  row.shape = {d};
  row.data.resize(size_t(d));
  out = materialize(row);
  return true;
}

bool Importer::convertLayerNormalization(const onnx::NodeProto &n) {
  bool rms = n.op_type() == "RMSNormalization";
  Value x, w, bias;
  if (!input(n, 0, x))
    return false;
  int64_t d = tt(x).getShape().empty() ? 0 : tt(x).getShape().back();
  if (!rowInvariantVector(n, 1, d, w))
    return false;
  if (!rms && n.input_size() > 2 && !n.input(2).empty() && !rowInvariantVector(n, 2, d, bias))
    return false;
  int64_t axis = intAttr(n, "axis", -1);
  if (axis != -1 && axis != tt(x).getRank() - 1)
    return nodeFail(n, "only normalisation over the last axis is supported");
  if (rms && (tt(w).getRank() != 1 || tt(w).getDimSize(0) != d))
    return nodeFail(n, "scale must be a vector of the last axis' " + std::to_string(d) +
                           " elements");
  const auto *eps = attr(n, "epsilon");
  FloatAttr e = b.getF64FloatAttr(eps ? eps->f() : 1e-5);
  define(n, rms ? RmsNormOp::create(b, loc, x.getType(), x, w, e).getResult()
                : LayerNormOp::create(b, loc, x.getType(), x, w, bias, e).getResult());
  return true;
}

bool Importer::convertReduceMean(const onnx::NodeProto &n) {
  const std::string &op = n.op_type();
  Value x;
  if (!input(n, 0, x))
    return false;
  const Val *axesC;
  if (!optionalConst(n, 1, axesC, "axes"))
    return false;
  std::vector<int64_t> axes = axesC ? ints(*axesC) : intsAttr(n, "axes");
  int64_t rank = tt(x).getRank();
  if (axes.empty())
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  bool keep = intAttr(n, "keepdims", 1);
  SmallVector<int64_t> shape;
  if (!normAxes(n, axes, rank))
    return false;
  for (int64_t d = 0; d < rank; ++d) {
    if (!llvm::is_contained(axes, d))
      shape.push_back(tt(x).getDimSize(d));
    else if (keep)
      shape.push_back(1);
  }
  define(n, ReduceOp::create(b, loc, RankedTensorType::get(shape, tt(x).getElementType()),
                             op == "ReduceMean" ? ReduceKind::mean : ReduceKind::sum, x,
                             b.getDenseI64ArrayAttr(axes), keep));
  return true;
}

bool Importer::convertCumSum(const onnx::NodeProto &n) {
  Value x;
  if (!input(n, 0, x))
    return false;
  const Val *axis = constInput(n, 1);
  int64_t rank = tt(x).getRank();
  if (!axis || axis->numel() != 1)
    return nodeFail(n, "the axis must be a constant scalar");
  int64_t a = ints(*axis)[0];
  if (rank == 0 || a < -rank || a >= rank)
    return nodeFail(n, "axis " + std::to_string(a) + " is out of range for rank " +
                           std::to_string(rank));
  Type e = tt(x).getElementType();
  if (!e.isF32() && !e.isInteger(64))
    return nodeFail(n, "sums float or integer tensors, not " + typeStr(e));
  auto sum = CumsumOp::create(b, loc, x.getType(), x, a < 0 ? a + rank : a);
  sum.setExclusive(intAttr(n, "exclusive", 0) != 0);
  sum.setReverse(intAttr(n, "reverse", 0) != 0);
  define(n, sum);
  return true;
}

} // namespace loom::onnximport
