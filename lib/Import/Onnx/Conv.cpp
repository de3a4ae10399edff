//===- Conv.cpp - convolutions, pooling and batch norm -------------------===//
//
// Conv (1-d, 2-d and more; grouped and depthwise; padding, stride and
// dilation), MaxPool, AveragePool, GlobalAveragePool and inference-mode
// BatchNormalization: their rows and converters.
//
// A convolution is an im2col and a GEMM, both ops Loom already has with
// gradients on every backend: the input's positions become the rows of a
// table ([positions, batch * channels], plus one padding row), a constant
// index tensor [output positions, kernel offsets] gathers each output's
// receptive field (loom.embedding: its gradient is the scatter-add that is
// the convolution's input gradient), and a batched matmul per group takes
// it against the weight. The index tensor has no batch dimension, so it
// stays small (ResNet's 7x7 stem on 224x224: 12544 x 49). The patches cost
// kernel-size times the input in memory; a direct kernel (cuDNN) would
// not. Pooling gathers the same fields and reduces them.
//
//===----------------------------------------------------------------------===//
#include "lib/Import/Onnx/Importer.h"

#include <cfloat>

namespace loom::onnximport {

ArrayRef<OnnxOp> Importer::convOps() {
  static const OnnxOp rows[] = {
      {"AveragePool", 13, 1, 1, 1, 1,
       "receptive fields gathered (loom.embedding of constant positions), loom.reduce sum, "
       "divided by the field's size (count_include_pad) or its positions inside the input",
       &Importer::convertPool, nullptr},
      {"BatchNormalization", 13, 5, 5, 1, 1,
       "inference mode: (x - mean) / sqrt(var + eps) * scale + bias per channel (mean and var "
       "as the file holds them); training mode is refused",
       &Importer::convertBatchNorm, nullptr},
      {"Conv", 13, 2, 3, 1, 1,
       "im2col (loom.embedding of constant positions) and a batched loom.matmul per group "
       "(+ bias); any rank, groups, pads, strides, dilations; auto_pad NOTSET or VALID",
       &Importer::convertConv, nullptr},
      {"GlobalAveragePool", 13, 1, 1, 1, 1,
       "loom.reduce mean over the spatial dimensions (kept as 1)",
       &Importer::convertPool, nullptr},
      {"MaxPool", 13, 1, 1, 1, 1,
       "receptive fields gathered (loom.embedding of constant positions), loom.reduce max; "
       "the Indices output and ceil_mode are refused",
       &Importer::convertPool, nullptr},
  };
  return rows;
}

bool Importer::windowAttrs(const onnx::NodeProto &n, ArrayRef<int64_t> spatial,
                           ArrayRef<int64_t> kernel, Window &w) {
  size_t d = spatial.size();
  w.kernel.assign(kernel.begin(), kernel.end());
  w.strides = intsAttr(n, "strides");
  w.dilations = intsAttr(n, "dilations");
  std::vector<int64_t> pads = intsAttr(n, "pads");
  if (w.strides.empty())
    w.strides.assign(d, 1);
  if (w.dilations.empty())
    w.dilations.assign(d, 1);
  if (pads.empty())
    pads.assign(2 * d, 0);
  const auto *ap = attr(n, "auto_pad");
  std::string autoPad = ap ? ap->s() : "NOTSET";
  if (autoPad != "NOTSET" && autoPad != "VALID")
    return nodeFail(n, "auto_pad " + autoPad + " is not supported (export with explicit pads)");
  if (w.strides.size() != d || w.dilations.size() != d || pads.size() != 2 * d)
    return nodeFail(n, "strides, dilations and pads must give " + std::to_string(d) +
                           ", " + std::to_string(d) + " and " + std::to_string(2 * d) +
                           " values for " + std::to_string(d) + " spatial dimensions");
  w.out.clear();
  w.begin.assign(pads.begin(), pads.begin() + d);
  w.positions = 1;
  w.offsets = 1;
  for (size_t i = 0; i < d; ++i) {
    if (w.strides[i] < 1 || w.dilations[i] < 1 || kernel[i] < 1 || pads[i] < 0 ||
        pads[i + d] < 0 || pads[i] >= (kernel[i] - 1) * w.dilations[i] + 1 + spatial[i])
      return nodeFail(n, "kernel " + shapeStr(kernel) + ", strides " + shapeStr(w.strides) +
                             ", dilations " + shapeStr(w.dilations) + " and pads " +
                             shapeStr(pads) + " are not a window on " + shapeStr(spatial));
    int64_t span = (kernel[i] - 1) * w.dilations[i] + 1;
    int64_t o = (spatial[i] + pads[i] + pads[i + d] - span) / w.strides[i] + 1;
    if (spatial[i] + pads[i] + pads[i + d] < span || o < 1)
      return nodeFail(n, "the kernel (span " + std::to_string(span) + ") does not fit " +
                             "spatial dimension " + std::to_string(i) + " (" +
                             std::to_string(spatial[i]) + " with pads)");
    w.out.push_back(o);
    w.positions *= o;
    w.offsets *= kernel[i];
  }
  return true;
}

Value Importer::receptiveFields(Value x, const Window &w, float padValue,
                                SmallVectorImpl<int64_t> &valid) {
  auto xt = tt(x);
  int64_t rank = xt.getRank(), d = rank - 2, batch = xt.getDimSize(0), ch = xt.getDimSize(1);
  ArrayRef<int64_t> spatial = xt.getShape().drop_front(2);
  int64_t S = 1;
  for (int64_t s : spatial)
    S *= s;
  // Positions as rows: [s1..sd, N, C] -> [S, N*C].
  SmallVector<int64_t> perm, moved;
  for (int64_t i = 0; i < d; ++i) {
    perm.push_back(2 + i);
    moved.push_back(spatial[i]);
  }
  perm.append({0, 1});
  moved.append({batch, ch});
  Type elt = xt.getElementType();
  Value table = TransposeOp::create(b, loc, RankedTensorType::get(moved, elt), x,
                                    b.getDenseI64ArrayAttr(perm));
  table = ReshapeOp::create(b, loc, RankedTensorType::get({S, batch * ch}, elt), table);
  // Every output position's field, flat, S for a position in the padding.
  std::vector<int64_t> idx(size_t(w.positions * w.offsets));
  valid.assign(size_t(w.positions), 0);
  bool padded = false;
  for (int64_t p = 0; p < w.positions; ++p)
    for (int64_t k = 0; k < w.offsets; ++k) {
      int64_t pr = p, kr = k, flat = 0;
      bool inside = true;
      for (int64_t i = d; i-- > 0;) {
        int64_t o = pr % w.out[i], kk = kr % w.kernel[i];
        pr /= w.out[i];
        kr /= w.kernel[i];
        int64_t pos = o * w.strides[i] + kk * w.dilations[i] - w.begin[i];
        inside &= pos >= 0 && pos < spatial[i];
        int64_t stride = 1;
        for (int64_t j = i + 1; j < d; ++j)
          stride *= spatial[j];
        flat += pos * stride;
      }
      idx[size_t(p * w.offsets + k)] = inside ? flat : S;
      valid[size_t(p)] += inside;
      padded |= !inside;
    }
  if (padded) {
    auto rowT = RankedTensorType::get({1, batch * ch}, elt);
    Value row = arith::ConstantOp::create(b, loc, DenseElementsAttr::get(rowT, padValue));
    table = ConcatOp::create(b, loc, RankedTensorType::get({S + 1, batch * ch}, elt),
                             ValueRange{table, row}, b.getI64IntegerAttr(0));
  }
  auto idxT = RankedTensorType::get({w.positions, w.offsets}, i64);
  Value ids = arith::ConstantOp::create(b, loc, DenseElementsAttr::get(idxT, ArrayRef<int64_t>(idx)));
  Value f = EmbeddingOp::create(
      b, loc, RankedTensorType::get({w.positions, w.offsets, batch * ch}, elt), table, ids);
  return ReshapeOp::create(b, loc,
                           RankedTensorType::get({w.positions, w.offsets, batch, ch}, elt), f);
}

bool Importer::convertConv(const onnx::NodeProto &n) {
  Value x, wv;
  if (!input(n, 0, x) || !input(n, 1, wv))
    return false;
  auto xt = tt(x), wt = tt(wv);
  int64_t rank = xt.getRank(), groups = intAttr(n, "group", 1);
  if (rank < 3 || wt.getRank() != rank)
    return nodeFail(n, "expects an input [N, C, spatial...] and a weight [O, C/group, "
                       "kernel...] of the same rank (at least 3), got " +
                           shapeStr(xt.getShape()) + " and " + shapeStr(wt.getShape()));
  int64_t batch = xt.getDimSize(0), ch = xt.getDimSize(1), och = wt.getDimSize(0);
  if (groups < 1 || ch % groups || och % groups || wt.getDimSize(1) * groups != ch)
    return nodeFail(n, "group " + std::to_string(groups) + " does not split " +
                           std::to_string(ch) + " input channels (weight " +
                           shapeStr(wt.getShape()) + ")");
  std::vector<int64_t> ks = intsAttr(n, "kernel_shape");
  if (!ks.empty() && ArrayRef<int64_t>(ks) != wt.getShape().drop_front(2))
    return nodeFail(n, "kernel_shape " + shapeStr(ks) + " is not the weight's " +
                           shapeStr(wt.getShape().drop_front(2)));
  Window w;
  if (!windowAttrs(n, xt.getShape().drop_front(2), wt.getShape().drop_front(2), w))
    return false;
  SmallVector<int64_t> valid;
  Value f = receptiveFields(x, w, 0.0f, valid); // [P, K, N, C]
  int64_t P = w.positions, K = w.offsets, cg = ch / groups, og = och / groups;
  auto T = [&](ArrayRef<int64_t> s) { return RankedTensorType::get(s, f32); };
  // Patches [g, N*P, K*Cg] (offset-major, then channel).
  f = ReshapeOp::create(b, loc, T({P, K, batch, groups, cg}), f);
  f = TransposeOp::create(b, loc, T({groups, batch, P, K, cg}), f,
                          b.getDenseI64ArrayAttr({3, 2, 0, 1, 4}));
  f = ReshapeOp::create(b, loc, T({groups, batch * P, K * cg}), f);
  // The weight as [g, K*Cg, Og] in the same order.
  Value wm = ReshapeOp::create(b, loc, T({groups, og, cg, K}), wv);
  wm = TransposeOp::create(b, loc, T({groups, K, cg, og}), wm, b.getDenseI64ArrayAttr({0, 3, 2, 1}));
  wm = ReshapeOp::create(b, loc, T({groups, K * cg, og}), wm);
  Value y = MatmulOp::create(b, loc, T({groups, batch * P, og}), f, wm, false, false);
  y = ReshapeOp::create(b, loc, T({groups, batch, P, og}), y);
  y = TransposeOp::create(b, loc, T({batch, groups, og, P}), y, b.getDenseI64ArrayAttr({1, 0, 3, 2}));
  SmallVector<int64_t> out{batch, och};
  out.append(w.out.begin(), w.out.end());
  y = ReshapeOp::create(b, loc, T(out), y);
  if (n.input_size() > 2 && !n.input(2).empty()) {
    Value bias;
    if (!input(n, 2, bias))
      return false;
    if (tt(bias).getRank() != 1 || tt(bias).getDimSize(0) != och)
      return nodeFail(n, "the bias " + shapeStr(tt(bias).getShape()) + " is not [" +
                             std::to_string(och) + "]");
    SmallVector<int64_t> bs(rank, 1);
    bs[1] = och;
    bias = ReshapeOp::create(b, loc, T(bs), bias);
    y = AddOp::create(b, loc, T(out), y, bias);
  }
  define(n, y);
  return true;
}

bool Importer::convertPool(const onnx::NodeProto &n) {
  const std::string &op = n.op_type();
  Value x;
  if (!input(n, 0, x))
    return false;
  auto xt = tt(x);
  int64_t rank = xt.getRank();
  if (rank < 3 || !isa<FloatType>(xt.getElementType()))
    return nodeFail(n, "expects a float input [N, C, spatial...], got " + typeStr(xt));
  auto T = [&](ArrayRef<int64_t> s) { return RankedTensorType::get(s, xt.getElementType()); };
  if (op == "GlobalAveragePool") {
    SmallVector<int64_t> dims, out(xt.getShape());
    for (int64_t d = 2; d < rank; ++d) {
      dims.push_back(d);
      out[d] = 1;
    }
    define(n, ReduceOp::create(b, loc, T(out), ReduceKind::mean, x, b.getDenseI64ArrayAttr(dims),
                               true));
    return true;
  }
  if (n.output_size() > 1 && !n.output(1).empty())
    return nodeFail(n, "the Indices output is not supported");
  if (intAttr(n, "ceil_mode", 0))
    return nodeFail(n, "ceil_mode 1 is not supported (export with ceil_mode=False)");
  std::vector<int64_t> ks = intsAttr(n, "kernel_shape");
  if (int64_t(ks.size()) != rank - 2)
    return nodeFail(n, "kernel_shape must give " + std::to_string(rank - 2) + " values");
  Window w;
  if (!windowAttrs(n, xt.getShape().drop_front(2), ks, w))
    return false;
  bool max = op == "MaxPool";
  SmallVector<int64_t> valid;
  Value f = receptiveFields(x, w, max ? -FLT_MAX : 0.0f, valid); // [P, K, N, C]
  int64_t P = w.positions, batch = xt.getDimSize(0), ch = xt.getDimSize(1);
  Value r = ReduceOp::create(b, loc, T({P, batch, ch}), max ? ReduceKind::max : ReduceKind::sum,
                             f, b.getDenseI64ArrayAttr({1}), false);
  if (!max) {
    // The mean over the field (count_include_pad) or its inside positions.
    bool all = intAttr(n, "count_include_pad", 0);
    std::vector<float> inv(static_cast<size_t>(P));
    for (int64_t p = 0; p < P; ++p)
      inv[size_t(p)] = 1.0f / float(all ? w.offsets : std::max<int64_t>(valid[size_t(p)], 1));
    auto it = RankedTensorType::get({P, 1, 1}, xt.getElementType());
    Value c = arith::ConstantOp::create(b, loc, DenseElementsAttr::get(it, ArrayRef<float>(inv)));
    r = MulOp::create(b, loc, T({P, batch, ch}), r, c);
  }
  r = TransposeOp::create(b, loc, T({batch, ch, P}), r, b.getDenseI64ArrayAttr({1, 2, 0}));
  SmallVector<int64_t> out{batch, ch};
  out.append(w.out.begin(), w.out.end());
  define(n, ReshapeOp::create(b, loc, T(out), r));
  return true;
}

bool Importer::convertBatchNorm(const onnx::NodeProto &n) {
  if (intAttr(n, "training_mode", 0))
    return nodeFail(n, "training mode (batch statistics) is not supported: export the model "
                       "in eval mode (model.eval()), whose running statistics the file holds");
  if (n.output_size() > 1)
    return nodeFail(n, "the running-statistics outputs are not supported (eval-mode export)");
  Value x, scale, bias, mean, var;
  if (!input(n, 0, x) || !input(n, 1, scale) || !input(n, 2, bias) || !input(n, 3, mean) ||
      !input(n, 4, var))
    return false;
  auto xt = tt(x);
  int64_t rank = xt.getRank();
  if (rank < 2)
    return nodeFail(n, "expects an input [N, C, ...]");
  int64_t ch = xt.getDimSize(1);
  SmallVector<int64_t> bs(rank, 1);
  bs[1] = ch;
  auto T = RankedTensorType::get(bs, f32);
  for (Value *v : {&scale, &bias, &mean, &var}) {
    if (tt(*v).getRank() != 1 || tt(*v).getDimSize(0) != ch)
      return nodeFail(n, "scale, bias, mean and var must be [" + std::to_string(ch) + "]");
    *v = ReshapeOp::create(b, loc, T, *v);
  }
  const auto *epsA = attr(n, "epsilon");
  float eps = epsA ? epsA->f() : 1e-5f;
  auto S = RankedTensorType::get({}, f32);
  Value epsC = arith::ConstantOp::create(b, loc, DenseElementsAttr::get(S, eps));
  Value sd = SqrtOp::create(b, loc, T, AddOp::create(b, loc, T, var, epsC));
  Value y = SubOp::create(b, loc, xt, x, mean);
  y = DivOp::create(b, loc, xt, y, sd);
  y = MulOp::create(b, loc, xt, y, scale);
  define(n, AddOp::create(b, loc, xt, y, bias));
  return true;
}

} // namespace loom::onnximport
