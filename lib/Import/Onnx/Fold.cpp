//===- Fold.cpp - ONNX operators folded on the host ----------------------===//
//
// Shape arithmetic, masks and small constants fold at import, so the
// graph is static: each family's folder, fold's dispatch by the operator
// table, and the rows of Constant and the operators that only fold.
//
//===----------------------------------------------------------------------===//
#include "lib/Import/Onnx/Importer.h"

namespace loom::onnximport {

ArrayRef<OnnxOp> Importer::constantOps() {
  // Constants and the operators that fold on constants only.
  static const OnnxOp rows[] = {
      {"Constant", 13, 0, 0, 1, 1,
       "tensor constants (float, int64, bool), value_int(s), value_float(s)",
       &Importer::convertConstant, nullptr},
      {"ConstantOfShape", 13, 1, 1, 1, 1,
       kFolds,
       nullptr, &Importer::foldGenerators},
      {"Range", 13, 3, 3, 1, 1,
       kFolds,
       nullptr, &Importer::foldGenerators},
      {"Trilu", 13, 1, 2, 1, 1,
       kFolds,
       nullptr, &Importer::foldGenerators},
  };
  return rows;
}

bool Importer::foldable(const onnx::NodeProto &n, ArrayRef<int64_t> shape) {
  if (checkedNumel(shape, kMaxFolded) < 0)
    return nodeFail(n, "folds to a constant of shape " + shapeStr(shape) +
                           ", which is negative or larger than the importer folds (" +
                           std::to_string(kMaxFolded) + " elements)");
  return true;
}

std::optional<Val> Importer::fold(const onnx::NodeProto &n, bool &bad) {
  const OnnxOp *row = findOnnxOp(n.op_type());
  if (!row || !row->fold)
    return std::nullopt;
  Folding f{[&](int i) -> const Val & { return *constInput(n, i); },
            [&](const std::string &msg) -> std::optional<Val> {
              bad = true;
              nodeFail(n, msg);
              return std::nullopt;
            },
            bad};
  return (this->*row->fold)(n, f);
}

/// Folds arithmetic, comparisons, logic, casts and cumulative sums over host constants
/// (fold's contract, Importer.h).
std::optional<Val> Importer::foldArithmetic(const onnx::NodeProto &n, const Folding &f) {
  const std::string &op = n.op_type();
  auto &in = f.in;
  auto &invalid = f.invalid;
  Val r;
  // Folds with numpy broadcasting (shape arithmetic, masks built from
  // ranges: [1, 1, T, 1] against [1, 1, 1, T]), up to kMaxFolded elements.
  auto elementwise = [&](auto f) -> std::optional<Val> {
    const Val &a = in(0), &c = in(1);
    SmallVector<int64_t> shape;
    if (!OpTrait::util::getBroadcastedShape(a.shape, c.shape, shape))
      return std::nullopt;
    int64_t total = checkedNumel(shape, kMaxFolded);
    if (total < 0)
      return invalid("folds to a constant of shape " + shapeStr(shape) +
                     ", larger than the importer folds");
    SmallVector<int64_t> sa = broadcastStrides(a.shape, shape.size()),
                         sc = broadcastStrides(c.shape, shape.size());
    r.elem = a.elem;
    r.shape.assign(shape.begin(), shape.end());
    r.data.resize(size_t(total));
    for (int64_t i = 0; i < total; ++i)
      r.data[size_t(i)] = f(a.data[size_t(offsetAt(i, shape, sa))],
                            c.data[size_t(offsetAt(i, shape, sc))]);
    return r;
  };
  if (op == "Add")
    return elementwise([](double x, double y) { return x + y; });
  if (op == "Sub")
    return elementwise([](double x, double y) { return x - y; });
  if (op == "Mul")
    return elementwise([](double x, double y) { return x * y; });
  if (op == "Div")
    return elementwise([&](double x, double y) {
      return in(0).elem == onnx::TensorProto::INT64 ? std::floor(x / y) : x / y;
    });
  // Comparisons give booleans; the predicate is picked once, not per element.
  static const std::pair<StringRef, bool (*)(double, double)> kCompare[] = {
      {"Equal", [](double x, double y) { return x == y; }},
      {"Greater", [](double x, double y) { return x > y; }},
      {"Less", [](double x, double y) { return x < y; }},
      {"GreaterOrEqual", [](double x, double y) { return x >= y; }},
      {"LessOrEqual", [](double x, double y) { return x <= y; }},
  };
  for (const auto &[name, pred] : kCompare)
    if (op == name) {
      auto v = elementwise([pred = pred](double x, double y) { return double(pred(x, y)); });
      if (v)
        v->elem = onnx::TensorProto::BOOL;
      return v;
    }
  if (op == "Sqrt" || op == "Reciprocal" || op == "Neg" || op == "Sin" ||
      op == "Cos") {
    r = in(0);
    for (double &x : r.data)
      x = op == "Sqrt"   ? std::sqrt(x)
          : op == "Neg"  ? -x
          : op == "Sin"  ? std::sin(x)
          : op == "Cos"  ? std::cos(x)
                         : 1.0 / x;
    return r;
  }
  if (op == "Pow")
    return elementwise([](double x, double y) { return std::pow(x, y); });
  if (op == "Not") {
    r = in(0);
    for (double &x : r.data)
      x = x == 0;
    return r;
  }
  // Casts convert the values: to int64 truncating toward zero, to bool
  // non-zero, to float rounded to float. CastLike takes the type of its
  // second input.
  if (op == "Cast" || op == "CastLike") {
    r = in(0);
    int to = op == "Cast" ? int(intAttr(n, "to", 1)) : in(1).elem;
    if (to != onnx::TensorProto::INT64 && to != onnx::TensorProto::FLOAT &&
        to != onnx::TensorProto::BOOL)
      return std::nullopt;
    for (double &x : r.data)
      x = to == onnx::TensorProto::INT64  ? std::trunc(x)
          : to == onnx::TensorProto::BOOL ? double(x != 0)
                                          : double(float(x));
    r.elem = to;
    return r;
  }
  if ((op == "Max" || op == "Min") && n.input_size() == 2)
    return elementwise([&](double x, double y) {
      return op == "Max" ? std::max(x, y) : std::min(x, y);
    });
  if (op == "And")
    return elementwise([](double x, double y) { return double(x != 0 && y != 0); });
  if (op == "Or")
    return elementwise([](double x, double y) { return double(x != 0 || y != 0); });
  // CumSum along one axis (masks and position ids built from a mask).
  if (op == "CumSum") {
    r = in(0);
    std::vector<int64_t> axisV = ints(in(1));
    int64_t rank = int64_t(r.shape.size());
    if (axisV.size() != 1 || rank == 0)
      return invalid("needs a tensor and one axis");
    int64_t axis = axisV[0];
    if (axis < -rank || axis >= rank)
      return invalid("axis " + std::to_string(axis) + " is out of range");
    if (axis < 0)
      axis += rank;
    bool exclusive = intAttr(n, "exclusive", 0), reverse = intAttr(n, "reverse", 0);
    int64_t len = r.shape[size_t(axis)], inner = 1;
    for (int64_t d = axis + 1; d < rank; ++d)
      inner *= r.shape[size_t(d)];
    int64_t outer = len ? r.numel() / (len * inner) : 0;
    const std::vector<double> x = r.data;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        double acc = 0;
        for (int64_t k = 0; k < len; ++k) {
          int64_t j = reverse ? len - 1 - k : k;
          size_t at = size_t((o * len + j) * inner + i);
          if (exclusive) {
            r.data[at] = acc;
            acc += x[at];
          } else {
            acc += x[at];
            r.data[at] = acc;
          }
        }
      }
    return r;
  }
  return std::nullopt;
}

/// Folds shape ops (expand, transpose, squeeze, concat, reshape, slice) over host constants
/// (fold's contract, Importer.h).
std::optional<Val> Importer::foldShapes(const onnx::NodeProto &n, const Folding &f) {
  const std::string &op = n.op_type();
  auto &in = f.in;
  auto &invalid = f.invalid;
  Val r;
  // Expand of a constant (a mask of ones for the batch).
  if (op == "Expand") {
    const Val &x = in(0);
    std::vector<int64_t> target = ints(in(1));
    SmallVector<int64_t> shape;
    if (!OpTrait::util::getBroadcastedShape(x.shape, target, shape))
      return invalid("shape " + shapeStr(x.shape) + " does not broadcast to " +
                     shapeStr(target));
    int64_t total = checkedNumel(shape, kMaxFolded);
    if (total < 0)
      return invalid("folds to a constant of shape " + shapeStr(shape) +
                     ", larger than the importer folds");
    r.elem = x.elem;
    r.shape.assign(shape.begin(), shape.end());
    r.data.resize(size_t(total));
    SmallVector<int64_t> st = broadcastStrides(x.shape, shape.size());
    for (int64_t i = 0; i < total; ++i)
      r.data[size_t(i)] = x.data[size_t(offsetAt(i, shape, st))];
    return r;
  }
  if (op == "Identity")
    return in(0);
  if (op == "Transpose") {
    const Val &x = in(0);
    SmallVector<int64_t> perm;
    if (!transposePerm(n, int64_t(x.shape.size()), perm))
      return f.bad = true, std::nullopt;
    // Output dimension d walks input dimension perm[d].
    SmallVector<int64_t> inStride = broadcastStrides(x.shape, x.shape.size()), st;
    r.elem = x.elem;
    r.shape.clear();
    for (int64_t p : perm) {
      r.shape.push_back(x.shape[size_t(p)]);
      st.push_back(inStride[size_t(p)]);
    }
    r.data.resize(x.data.size());
    for (int64_t i = 0; i < x.numel(); ++i)
      r.data[size_t(i)] = x.data[size_t(offsetAt(i, r.shape, st))];
    return r;
  }
  if (op == "Unsqueeze" || op == "Squeeze") {
    r = in(0);
    const Val *axesC;
    if (!optionalConst(n, 1, axesC, "axes"))
      return f.bad = true, std::nullopt;
    if (!squeezeShape(n, op == "Unsqueeze", axesC ? ints(*axesC) : intsAttr(n, "axes"), r.shape))
      return f.bad = true, std::nullopt;
    return r;
  }
  if (op == "Concat") {
    // Along any axis: shape vectors, and masks built from ranges.
    r = in(0);
    int64_t rank = int64_t(r.shape.size()), axis = intAttr(n, "axis", 0);
    if (rank == 0 || axis < -rank || axis >= rank)
      return invalid("axis " + std::to_string(axis) + " is out of range");
    if (axis < 0)
      axis += rank;
    int64_t outer = 1;
    for (int64_t d = 0; d < axis; ++d)
      outer *= r.shape[size_t(d)];
    for (int i = 1; i < n.input_size(); ++i) {
      const Val &x = in(i);
      if (int64_t(x.shape.size()) != rank)
        return invalid("inputs of different ranks");
      for (int64_t d = 0; d < rank; ++d)
        if (d != axis && x.shape[size_t(d)] != r.shape[size_t(d)])
          return invalid("input shapes " + shapeStr(r.shape) + " and " + shapeStr(x.shape) +
                         " differ off the axis");
      r.shape[size_t(axis)] += x.shape[size_t(axis)];
    }
    if (!foldable(n, r.shape))
      return f.bad = true, std::nullopt;
    // Each outer index takes its block from every input in turn.
    r.data.clear();
    for (int64_t o = 0; o < outer; ++o)
      for (int i = 0; i < n.input_size(); ++i) {
        const Val &x = in(i);
        int64_t block = outer ? x.numel() / outer : 0;
        r.data.insert(r.data.end(), x.data.begin() + o * block, x.data.begin() + (o + 1) * block);
      }
    return r;
  }
  if (op == "Reshape") {
    r = in(0);
    std::vector<int64_t> shape;
    if (!reshapeTarget(n, r.shape, in(1), shape))
      return f.bad = true, std::nullopt;
    r.shape = shape;
    return r;
  }
  if (op == "Slice") {
    const Val &data = in(0);
    const Val *axesC, *stepsC;
    if (!optionalConst(n, 3, axesC, "axes") || !optionalConst(n, 4, stepsC, "steps"))
      return f.bad = true, std::nullopt;
    SmallVector<int64_t> lo, hi, st, out;
    if (!sliceBounds(n, data.shape, in(1), in(2), axesC, stepsC, lo, hi, st, out))
      return f.bad = true, std::nullopt;
    int64_t rank = int64_t(data.shape.size());
    r.elem = data.elem;
    r.shape.assign(out.begin(), out.end());
    std::vector<int64_t> strides(rank, 1);
    for (int64_t d = rank - 2; d >= 0; --d)
      strides[d] = strides[d + 1] * data.shape[d + 1];
    int64_t total = r.numel();
    for (int64_t i = 0; i < total; ++i) {
      int64_t rem = i, off = 0;
      for (int64_t d = rank - 1; d >= 0; --d) {
        int64_t c = rem % r.shape[d];
        rem /= r.shape[d];
        off += (lo[d] + c * st[d]) * strides[d];
      }
      r.data.push_back(data.data[off]);
    }
    return r;
  }
  return std::nullopt;
}

/// Folds gathers (Gather, GatherElements, GatherND) over host constants
/// (fold's contract, Importer.h).
std::optional<Val> Importer::foldGathers(const onnx::NodeProto &n, const Folding &f) {
  const std::string &op = n.op_type();
  auto &in = f.in;
  auto &invalid = f.invalid;
  Val r;
  if (op == "Gather") {
    const Val &data = in(0), &idx = in(1);
    if (intAttr(n, "axis", 0) != 0 || data.shape.empty())
      return std::nullopt;
    int64_t rows = data.shape[0], inner = 1;
    for (size_t d = 1; d < data.shape.size(); ++d)
      inner *= data.shape[d];
    r.elem = data.elem;
    r.shape = idx.shape;
    r.shape.insert(r.shape.end(), data.shape.begin() + 1, data.shape.end());
    if (!foldable(n, r.shape))
      return f.bad = true, std::nullopt;
    for (int64_t row : ints(idx)) {
      if (row < -rows || row >= rows)
        return invalid("index " + std::to_string(row) + " is out of range for " +
                       std::to_string(rows) + " rows");
      if (row < 0)
        row += rows;
      r.data.insert(r.data.end(), data.data.begin() + row * inner,
                    data.data.begin() + (row + 1) * inner);
    }
    return r;
  }
  // GatherElements and GatherND on constants (rotary tables indexed by
  // position ids, GPT-J and Falcon): the indices are checked, then read.
  if (op == "GatherElements") {
    const Val &data = in(0), &idx = in(1);
    int64_t rank = int64_t(data.shape.size()), axis = intAttr(n, "axis", 0);
    if (rank == 0 || int64_t(idx.shape.size()) != rank)
      return invalid("data and indices must have the same rank (at least 1)");
    if (axis < -rank || axis >= rank)
      return invalid("axis " + std::to_string(axis) + " is out of range");
    if (axis < 0)
      axis += rank;
    for (int64_t d = 0; d < rank; ++d)
      if (d != axis && idx.shape[d] > data.shape[d])
        return invalid("indices of shape " + shapeStr(idx.shape) + " exceed data of shape " +
                       shapeStr(data.shape));
    r.elem = data.elem;
    r.shape = idx.shape;
    if (!foldable(n, r.shape))
      return f.bad = true, std::nullopt;
    std::vector<int64_t> at = ints(idx);
    r.data.resize(size_t(idx.numel()));
    for (int64_t i = 0; i < idx.numel(); ++i) {
      int64_t rem = i, flat = 0, stride = 1;
      SmallVector<int64_t> coord(static_cast<size_t>(rank), 0);
      for (int64_t d = rank - 1; d >= 0; --d) {
        coord[size_t(d)] = rem % idx.shape[size_t(d)];
        rem /= idx.shape[size_t(d)];
      }
      int64_t j = at[size_t(i)], len = data.shape[size_t(axis)];
      if (j < -len || j >= len)
        return invalid("index " + std::to_string(j) + " is out of range for " +
                       std::to_string(len) + " elements");
      coord[size_t(axis)] = j < 0 ? j + len : j;
      for (int64_t d = rank - 1; d >= 0; --d) {
        flat += coord[size_t(d)] * stride;
        stride *= data.shape[size_t(d)];
      }
      r.data[size_t(i)] = data.data[size_t(flat)];
    }
    return r;
  }
  if (op == "GatherND") {
    const Val &data = in(0), &idx = in(1);
    int64_t rank = int64_t(data.shape.size()), batch = intAttr(n, "batch_dims", 0);
    if (idx.shape.empty() || batch < 0 || batch >= rank ||
        batch >= int64_t(idx.shape.size()))
      return invalid("batch_dims " + std::to_string(batch) + " does not fit data of rank " +
                     std::to_string(rank));
    int64_t k = idx.shape.back();
    if (k < 1 || batch + k > rank)
      return invalid("index tuples of " + std::to_string(k) + " do not fit data of shape " +
                     shapeStr(data.shape));
    for (int64_t d = 0; d < batch; ++d)
      if (idx.shape[size_t(d)] != data.shape[size_t(d)])
        return invalid("the batch dimensions of data and indices differ");
    int64_t inner = 1, bsize = 1, tuples = 1;
    for (int64_t d = batch + k; d < rank; ++d)
      inner *= data.shape[size_t(d)];
    for (int64_t d = 0; d < batch; ++d)
      bsize *= data.shape[size_t(d)];
    for (size_t d = size_t(batch); d + 1 < idx.shape.size(); ++d)
      tuples *= idx.shape[d];
    r.elem = data.elem;
    r.shape.assign(idx.shape.begin(), idx.shape.end() - 1);
    r.shape.insert(r.shape.end(), data.shape.begin() + batch + k, data.shape.end());
    if (!foldable(n, r.shape))
      return f.bad = true, std::nullopt;
    std::vector<int64_t> at = ints(idx);
    int64_t perBatch = data.numel() / std::max<int64_t>(1, bsize);
    for (int64_t bi = 0; bi < bsize; ++bi)
      for (int64_t t = 0; t < tuples; ++t) {
        int64_t off = 0;
        if (std::string why = tupleOffset(ArrayRef<int64_t>(data.shape).slice(batch, k),
                                          &at[size_t((bi * tuples + t) * k)], off);
            !why.empty())
          return invalid(why);
        auto from = data.data.begin() + bi * perBatch + off * inner;
        r.data.insert(r.data.end(), from, from + inner);
      }
    return r;
  }
  return std::nullopt;
}

/// Folds generators (Trilu, Range, ConstantOfShape) over host constants
/// (fold's contract, Importer.h).
std::optional<Val> Importer::foldGenerators(const onnx::NodeProto &n, const Folding &f) {
  const std::string &op = n.op_type();
  auto &in = f.in;
  auto &invalid = f.invalid;
  Val r;
  if (op == "Trilu") {
    // A causal mask built in forward (torch.tril of ones): keep the band
    // j - i >= k (upper) or j - i <= k (lower) of the last two dims.
    r = in(0);
    const Val *kC;
    if (!optionalConst(n, 1, kC, "k"))
      return f.bad = true, std::nullopt;
    if (kC && kC->numel() != 1)
      return invalid("k must be a scalar");
    int64_t k = kC ? ints(*kC)[0] : 0;
    bool upper = intAttr(n, "upper", 1) != 0;
    if (r.shape.size() < 2)
      return invalid("Trilu needs a matrix");
    int64_t rows = r.shape[r.shape.size() - 2], cols = r.shape.back();
    for (int64_t i = 0; i < r.numel(); ++i) {
      int64_t row = (i / cols) % rows, col = i % cols;
      if (upper ? col - row < k : col - row > k)
        r.data[i] = 0;
    }
    return r;
  }
  if (op == "Range") {
    for (int i = 0; i < 3; ++i)
      if (in(i).numel() != 1 || !std::isfinite(in(i).data[0]))
        return invalid("start, limit and delta must be finite scalars");
    double start = in(0).data[0], limit = in(1).data[0], delta = in(2).data[0];
    if (delta == 0)
      return invalid("delta is 0");
    // ONNX: max(ceil((limit - start) / delta), 0) elements.
    double count = std::max(0.0, std::ceil((limit - start) / delta));
    if (count > double(kMaxFolded))
      return invalid("folds to " + std::to_string(int64_t(count)) +
                     " elements, more than the importer folds (" + std::to_string(kMaxFolded) + ")");
    r.elem = in(0).elem;
    for (int64_t i = 0; i < int64_t(count); ++i)
      r.data.push_back(start + double(i) * delta);
    r.shape = {int64_t(r.data.size())};
    return r;
  }
  if (op == "ConstantOfShape") {
    if (in(0).shape.size() != 1)
      return invalid("the shape must be 1-d");
    std::vector<int64_t> shape = ints(in(0));
    if (!foldable(n, shape))
      return f.bad = true, std::nullopt;
    const auto *v = attr(n, "value");
    r.elem = v ? v->t().data_type() : onnx::TensorProto::FLOAT;
    double x = 0;
    if (v) {
      if (r.elem != onnx::TensorProto::INT64 && r.elem != onnx::TensorProto::FLOAT)
        return invalid("value must be a float or int64 tensor");
      if (!holds(v->t(), 1))
        return invalid("value must hold exactly one element");
      x = elementAt(v->t(), 0);
    }
    r.shape = shape;
    r.data.assign(size_t(r.numel()), x);
    return r;
  }
  return std::nullopt;
}

} // namespace loom::onnximport
