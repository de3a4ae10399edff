//===- Shapes.cpp - shape and indexing ONNX operators --------------------===//
//
// Reshape, transpose, squeeze, concat, split, slice, expand, the gathers
// and sequences: their rows of the operator table, converters and the shape
// rules folding shares.
//
//===----------------------------------------------------------------------===//
#include "lib/Import/Onnx/Importer.h"

namespace loom::onnximport {

ArrayRef<OnnxOp> Importer::shapeOps() {
  // One row per operator (Importer.h, OnnxOp).
  static const OnnxOp rows[] = {
      {"Concat", 13, 1, kMany, 1, 1,
       "loom.concat; folds on constants",
       &Importer::convertConcat, &Importer::foldShapes},
      {"Expand", 13, 2, 2, 1, 1,
       "loom.broadcast_to (the shape must be constant)",
       &Importer::convertExpand, &Importer::foldShapes},
      {"Gather", 13, 2, 2, 1, 1,
       "any axis: constant indices in arithmetic progression as a strided loom.slice, others "
       "(computed ones included) as loom.embedding of the axis's rows (a transpose before "
       "and after on other axes); folds on constants",
       &Importer::convertGather, &Importer::foldGathers},
      {"GatherElements", 13, 2, 2, 1, 1,
       "folds on constants; at computed indices, of a constant whose elements are all equal: that value",
       &Importer::convertGatherElements, &Importer::foldGathers},
      {"GatherND", 13, 2, 2, 1, 1,
       "loom.embedding of the rows the indices address (computed ones: offsets computed on "
       "the device in int64); folds on constants",
       &Importer::convertGatherND, &Importer::foldGathers},
      {"Flatten", 13, 1, 1, 1, 1,
       "loom.reshape to [product of the dims before axis, product of the rest]",
       &Importer::convertFlatten, nullptr},
      {"Reshape", 13, 2, 2, 1, 1,
       "loom.reshape (constant shape); folds on constants",
       &Importer::convertReshape, &Importer::foldShapes},
      {"SequenceAt", 13, 2, 2, 1, 1,
       "a piece of SplitToSequence (constant position)",
       &Importer::convertSequenceAt, nullptr},
      {"Shape", 13, 1, 1, 1, 1,
       "folds (shapes are static; opset 15's start and end)",
       &Importer::convertShape, nullptr},
      {"Slice", 13, 3, 5, 1, 1,
       "loom.slice (any step > 0); folds on constants",
       &Importer::convertSlice, &Importer::foldShapes},
      {"Split", 13, 1, 2, 1, kMany,
       "loom.slice per output",
       &Importer::convertSplit, nullptr},
      {"SplitToSequence", 13, 1, 2, 1, 1,
       "loom.slice per piece, read by SequenceAt",
       &Importer::convertSplitToSequence, nullptr},
      {"Squeeze", 13, 1, 2, 1, 1,
       "loom.reshape; folds on constants",
       &Importer::convertUnsqueeze, &Importer::foldShapes},
      {"Transpose", 13, 1, 1, 1, 1,
       "loom.transpose",
       &Importer::convertTranspose, &Importer::foldShapes},
      {"Unsqueeze", 13, 1, 2, 1, 1,
       "loom.reshape; folds on constants",
       &Importer::convertUnsqueeze, &Importer::foldShapes},
  };
  return rows;
}

bool Importer::reshapeTarget(const onnx::NodeProto &n, ArrayRef<int64_t> in, const Val &target,
                   std::vector<int64_t> &shape) {
  if (target.shape.size() != 1)
    return nodeFail(n, "the target shape must be 1-d");
  shape = ints(target);
  int64_t numel = checkedNumel(in, kMaxElements), known = 1, infer = -1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) {
      if (d >= in.size())
        return nodeFail(n, "target dimension " + std::to_string(d) +
                               " is 0 (copy) but the input has rank " + std::to_string(in.size()));
      shape[d] = in[d];
    }
    if (shape[d] == -1) {
      if (infer >= 0)
        return nodeFail(n, "target shape has more than one -1");
      infer = int64_t(d);
      continue;
    }
    if (shape[d] < 0 || (shape[d] && known > kMaxElements / shape[d]))
      return nodeFail(n, "target shape " + shapeStr(shape) + " is invalid");
    known *= shape[d];
  }
  if (infer >= 0) {
    if (known == 0 || numel % known)
      return nodeFail(n, "cannot infer the -1 of " + shapeStr(shape) + " from " +
                             std::to_string(numel) + " elements");
    shape[infer] = numel / known;
  } else if (known != numel) {
    return nodeFail(n, "target shape " + shapeStr(shape) + " has " + std::to_string(known) +
                           " elements, the input " + std::to_string(numel));
  }
  return true;
}

bool Importer::squeezeShape(const onnx::NodeProto &n, bool unsqueeze, std::vector<int64_t> axes,
                  std::vector<int64_t> &shape) {
  if (unsqueeze) {
    if (!normAxes(n, axes, int64_t(shape.size() + axes.size())))
      return false;
    llvm::sort(axes);
    for (int64_t a : axes)
      shape.insert(shape.begin() + a, 1);
    return true;
  }
  if (!normAxes(n, axes, int64_t(shape.size())))
    return false;
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < int64_t(shape.size()); ++d) {
    bool drop = axes.empty() ? shape[d] == 1 : llvm::is_contained(axes, d);
    if (drop && shape[d] != 1)
      return nodeFail(n, "cannot squeeze dimension " + std::to_string(d) + " of size " +
                             std::to_string(shape[d]));
    if (!drop)
      kept.push_back(shape[d]);
  }
  shape = kept;
  return true;
}

bool Importer::sliceBounds(const onnx::NodeProto &n, ArrayRef<int64_t> shape, const Val &starts,
                 const Val &ends, const Val *axesV, const Val *stepsV,
                 SmallVector<int64_t> &lo, SmallVector<int64_t> &hi,
                 SmallVector<int64_t> &step, SmallVector<int64_t> &out) {
  int64_t rank = int64_t(shape.size());
  std::vector<int64_t> st = ints(starts), en = ints(ends);
  std::vector<int64_t> axes = axesV ? ints(*axesV) : std::vector<int64_t>();
  std::vector<int64_t> steps = stepsV ? ints(*stepsV) : std::vector<int64_t>();
  if (en.size() != st.size() || (axesV && axes.size() != st.size()) ||
      (stepsV && steps.size() != st.size()))
    return nodeFail(n, "starts, ends, axes and steps differ in length");
  if (axes.empty())
    for (int64_t k = 0; k < int64_t(st.size()); ++k)
      axes.push_back(k);
  if (!normAxes(n, axes, rank))
    return false;
  lo.assign(rank, 0);
  hi.assign(shape.begin(), shape.end());
  step.assign(rank, 1);
  for (size_t k = 0; k < st.size(); ++k) {
    int64_t a = axes[k], dim = shape[a];
    auto clampIdx = [&](int64_t v) {
      if (v < 0)
        v = v < -dim ? 0 : v + dim;
      return std::min(v, dim);
    };
    step[a] = steps.empty() ? 1 : steps[k];
    if (step[a] < 1)
      return nodeFail(n, "negative or zero slice steps are not supported");
    lo[a] = clampIdx(st[k]);
    hi[a] = std::max(lo[a], clampIdx(en[k]));
  }
  out.clear();
  for (int64_t d = 0; d < rank; ++d)
    // ceil((hi - lo) / step) without forming hi - lo + step - 1: a step near
    // INT64_MAX (legal in ONNX, found by fuzz-onnx-proto) would overflow.
    out.push_back(hi[d] > lo[d] ? (hi[d] - lo[d] - 1) / step[d] + 1 : 0);
  return true;
}

bool Importer::transposePerm(const onnx::NodeProto &n, int64_t rank, SmallVectorImpl<int64_t> &perm) {
  if (const auto *p = attr(n, "perm"))
    perm.assign(p->ints().begin(), p->ints().end());
  else
    for (int64_t i = rank - 1; i >= 0; --i)
      perm.push_back(i);
  SmallVector<int64_t> sorted(perm.begin(), perm.end());
  llvm::sort(sorted);
  if (!llvm::equal(sorted, llvm::seq<int64_t>(0, rank)))
    return nodeFail(n, "perm is not a permutation of the input's " + std::to_string(rank) +
                           " dimensions");
  return true;
}

bool Importer::convertTranspose(const onnx::NodeProto &n) {
  Value x;
  if (!input(n, 0, x))
    return false;
  SmallVector<int64_t> perm, shape;
  if (!transposePerm(n, tt(x).getRank(), perm))
    return false;
  for (int64_t q : perm)
    shape.push_back(tt(x).getDimSize(q));
  define(n, TransposeOp::create(b, loc, RankedTensorType::get(shape, tt(x).getElementType()), x,
                                b.getDenseI64ArrayAttr(perm)));
  return true;
}

bool Importer::convertShape(const onnx::NodeProto &n) {
  std::vector<int64_t> sh;
  if (!shapeOf(n, 0, sh))
    return false;
  // Opset 15's start and end: the dimensions [start, end), negative ones
  // counted from the end, clamped to the rank (a raw export's
  // Shape(weight, start=0, end=1) for a missing convolution bias).
  int64_t rank = int64_t(sh.size());
  auto clampDim = [&](int64_t d) { return std::clamp<int64_t>(d < 0 ? d + rank : d, 0, rank); };
  int64_t start = clampDim(intAttr(n, "start", 0)), end = clampDim(intAttr(n, "end", rank));
  sh = std::vector<int64_t>(sh.begin() + start, sh.begin() + std::max(start, end));
  Val v;
  v.elem = onnx::TensorProto::INT64;
  v.shape = {int64_t(sh.size())};
  v.data.assign(sh.begin(), sh.end());
  defineConst(n, 0, v);
  return true;
}

/// Gather on any axis. Constant indices in arithmetic progression (a
/// scalar, BLOOM's and Persimmon's `fused_qkv[..., 0, :]`, a range) are a
/// strided slice, whose gradient pads; any other indices, computed ones
/// included, gather rows: the axis moved to the front, the rest flattened,
/// loom.embedding (whose gradient is the scatter-add on that axis), and
/// the axis moved back. Axis 0 of a [rows, features] table is an embedding
/// lookup as it is.
bool Importer::convertGather(const onnx::NodeProto &n) {
  Value data, idx;
  if (!input(n, 0, data))
    return false;
  auto dt = tt(data);
  int64_t rank = dt.getRank(), axis = intAttr(n, "axis", 0);
  if (rank < 1)
    return nodeFail(n, "gathers from a scalar");
  if (!normAxis(n, axis, rank))
    return false;
  int64_t dim = dt.getDimSize(axis);
  if (!isa<FloatType>(dt.getElementType()))
    return nodeFail(n, "gathers from a computed tensor of integers; only float data (or "
                       "constant integers, which fold) is supported");
  SmallVector<int64_t> idxShape;
  if (const Val *c = constInput(n, 1)) {
    std::vector<int64_t> at = ints(*c);
    for (int64_t &k : at) {
      if (k < -dim || k >= dim)
        return nodeFail(n, "index " + std::to_string(k) + " is out of range for " +
                               std::to_string(dim) + " elements on axis " + std::to_string(axis));
      k = k < 0 ? k + dim : k;
    }
    idxShape.assign(c->shape.begin(), c->shape.end());
    int64_t step = at.size() > 1 ? at[1] - at[0] : 1;
    bool progression = !at.empty() && step > 0;
    for (size_t k = 1; k < at.size() && progression; ++k)
      progression = at[k] - at[k - 1] == step;
    if (progression) {
      SmallVector<int64_t> start(rank, 0), limit(dt.getShape()), steps(rank, 1),
          shape(dt.getShape());
      start[axis] = at[0];
      limit[axis] = at.back() + 1;
      steps[axis] = step;
      shape[axis] = int64_t(at.size());
      Value sl = SliceOp::create(b, loc, RankedTensorType::get(shape, dt.getElementType()), data,
                                 b.getDenseI64ArrayAttr(start), b.getDenseI64ArrayAttr(limit),
                                 b.getDenseI64ArrayAttr(steps));
      SmallVector<int64_t> out(dt.getShape().take_front(axis));
      out.append(idxShape.begin(), idxShape.end());
      out.append(dt.getShape().begin() + axis + 1, dt.getShape().end());
      define(n, ReshapeOp::create(b, loc, RankedTensorType::get(out, dt.getElementType()), sl));
      return true;
    }
    auto type = RankedTensorType::get(idxShape, i64);
    idx = arith::ConstantOp::create(b, loc, DenseElementsAttr::get(type, ArrayRef<int64_t>(at)));
  } else {
    if (!input(n, 1, idx))
      return false;
    if (!tt(idx).getElementType().isInteger(64))
      return nodeFail(n, "expects int64 indices");
    idxShape.assign(tt(idx).getShape().begin(), tt(idx).getShape().end());
    // ONNX counts negative indices from the end: idx + dim * (idx < 0),
    // for indices computed on the device (a model input is taken as it is:
    // token ids are not negative).
    if (!isa<BlockArgument>(idx)) {
      auto it = tt(idx);
      auto st = RankedTensorType::get({}, i64);
      Value zero = arith::ConstantOp::create(b, loc, DenseElementsAttr::get(st, int64_t(0)));
      Value len = arith::ConstantOp::create(b, loc, DenseElementsAttr::get(st, dim));
      idx = AddOp::create(b, loc, it, idx,
                          MulOp::create(b, loc, it, LtOp::create(b, loc, it, idx, zero), len));
    }
  }
  // Rows of a [dim, rest] table: the axis first, the other dimensions in
  // their order after it.
  SmallVector<int64_t> perm{axis}, moved{dim};
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis) {
      perm.push_back(d);
      moved.push_back(dt.getDimSize(d));
    }
  Value table = data;
  if (axis != 0)
    table = TransposeOp::create(b, loc, RankedTensorType::get(moved, dt.getElementType()), data,
                                b.getDenseI64ArrayAttr(perm));
  int64_t rest = dt.getNumElements() / std::max<int64_t>(dim, 1);
  if (rank != 2)
    table = ReshapeOp::create(b, loc, RankedTensorType::get({dim, rest}, dt.getElementType()),
                              table);
  SmallVector<int64_t> rows(idxShape);
  rows.push_back(rest);
  Value g = EmbeddingOp::create(b, loc, RankedTensorType::get(rows, dt.getElementType()), table,
                                idx);
  // [idx..., the other dims], then the idx dims moved to where the axis was.
  SmallVector<int64_t> gathered(idxShape);
  gathered.append(moved.begin() + 1, moved.end());
  if (rank != 2)
    g = ReshapeOp::create(b, loc, RankedTensorType::get(gathered, dt.getElementType()), g);
  if (axis != 0) {
    int64_t q = int64_t(idxShape.size());
    SmallVector<int64_t> back, out;
    for (int64_t d = 0; d < axis; ++d)
      back.push_back(q + d);
    for (int64_t d = 0; d < q; ++d)
      back.push_back(d);
    for (int64_t d = q + axis; d < int64_t(gathered.size()); ++d)
      back.push_back(d);
    for (int64_t d : back)
      out.push_back(gathered[d]);
    g = TransposeOp::create(b, loc, RankedTensorType::get(out, dt.getElementType()), g,
                            b.getDenseI64ArrayAttr(back));
  }
  define(n, g);
  return true;
}

bool Importer::convertGatherND(const onnx::NodeProto &n) {
  Value data;
  if (!input(n, 0, data))
    return false;
  if (intAttr(n, "batch_dims", 0) != 0)
    return nodeFail(n, "batch_dims > 0 on a computed tensor is not supported");
  auto dt = tt(data);
  if (!isa<FloatType>(dt.getElementType()))
    return nodeFail(n, "a computed tensor of integers is not supported");
  const Val *idx = constInput(n, 1);
  if (!idx)
    return gatherNDComputed(n, data);
  int64_t rank = dt.getRank();
  if (idx->shape.empty() || idx->shape.back() < 1 || idx->shape.back() > rank)
    return nodeFail(n, "index tuples of shape " + shapeStr(idx->shape) +
                           " do not fit data of shape " + shapeStr(dt.getShape()));
  int64_t k = idx->shape.back(), rows = 1, rest = 1;
  for (int64_t d = 0; d < k; ++d)
    rows *= dt.getDimSize(d);
  for (int64_t d = k; d < rank; ++d)
    rest *= dt.getDimSize(d);
  std::vector<int64_t> at = ints(*idx), flat;
  for (size_t t = 0; t < at.size(); t += size_t(k)) {
    int64_t off = 0;
    if (std::string why = tupleOffset(dt.getShape().take_front(k), &at[t], off); !why.empty())
      return nodeFail(n, why);
    flat.push_back(off);
  }
  SmallVector<int64_t> tuples(idx->shape.begin(), idx->shape.end() - 1), out(tuples);
  out.append(dt.getShape().begin() + k, dt.getShape().end());
  Value table = ReshapeOp::create(b, loc, RankedTensorType::get({rows, rest}, dt.getElementType()),
                                  data);
  auto idxType = RankedTensorType::get(tuples, i64);
  Value ids = arith::ConstantOp::create(
      b, loc, DenseElementsAttr::get(idxType, ArrayRef<int64_t>(flat)));
  SmallVector<int64_t> gathered(tuples);
  gathered.push_back(rest);
  Value g = EmbeddingOp::create(b, loc, RankedTensorType::get(gathered, dt.getElementType()),
                                table, ids);
  define(n, ReshapeOp::create(b, loc, RankedTensorType::get(out, dt.getElementType()), g));
  return true;
}

bool Importer::convertFlatten(const onnx::NodeProto &n) {
  Value x;
  if (!input(n, 0, x))
    return false;
  auto t = tt(x);
  int64_t rank = t.getRank(), axis = intAttr(n, "axis", 1);
  // axis may equal the rank (everything in the first dimension).
  if (axis < -rank || axis > rank)
    return nodeFail(n, "axis " + std::to_string(axis) + " is out of range for rank " +
                           std::to_string(rank));
  axis = axis < 0 ? axis + rank : axis;
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= t.getDimSize(d);
  int64_t inner = outer ? t.getNumElements() / outer : 0;
  define(n, ReshapeOp::create(b, loc, RankedTensorType::get({outer, inner}, t.getElementType()),
                              x));
  return true;
}

/// GatherND at indices computed on the device: each index tuple's row-major
/// offset into the first k dimensions (negative indices counted from the
/// end) computed there in int64, then rows of the [rows, rest] table
/// gathered (loom.embedding). An index out of range is not checked on the
/// device: the embedding reads what it reads (as a computed Gather does).
bool Importer::gatherNDComputed(const onnx::NodeProto &n, Value data) {
  Value idx;
  if (!input(n, 1, idx))
    return false;
  auto dt = tt(data), it = tt(idx);
  int64_t rank = dt.getRank();
  if (!it.getElementType().isInteger(64) || it.getRank() < 1 || it.getShape().back() < 1 ||
      it.getShape().back() > rank)
    return nodeFail(n, "index tuples " + typeStr(it) + " do not fit data of shape " +
                           shapeStr(dt.getShape()));
  int64_t k = it.getShape().back(), rows = 1, rest = 1;
  for (int64_t d = 0; d < k; ++d)
    rows *= dt.getDimSize(d);
  for (int64_t d = k; d < rank; ++d)
    rest *= dt.getDimSize(d);
  SmallVector<int64_t> tuples(it.getShape().drop_back());
  auto I = [&](ArrayRef<int64_t> s) { return RankedTensorType::get(s, i64); };
  auto scalar = [&](int64_t v) {
    return Value(arith::ConstantOp::create(b, loc, DenseElementsAttr::get(I({}), v)));
  };
  Value off;
  int64_t stride = rows;
  for (int64_t j = 0; j < k; ++j) {
    int64_t len = dt.getDimSize(j);
    stride /= len;
    SmallVector<int64_t> start(it.getRank(), 0), limit(it.getShape()), step(it.getRank(), 1),
        one(tuples);
    start.back() = j;
    limit.back() = j + 1;
    one.push_back(1);
    Value c = SliceOp::create(b, loc, I(one), idx, b.getDenseI64ArrayAttr(start),
                              b.getDenseI64ArrayAttr(limit), b.getDenseI64ArrayAttr(step));
    c = ReshapeOp::create(b, loc, I(tuples), c);
    // c + len * (c < 0), then times the dimension's stride.
    Value neg = LtOp::create(b, loc, I(tuples), c, scalar(0));
    c = AddOp::create(b, loc, I(tuples), c, MulOp::create(b, loc, I(tuples), neg, scalar(len)));
    if (stride != 1)
      c = MulOp::create(b, loc, I(tuples), c, scalar(stride));
    off = off ? Value(AddOp::create(b, loc, I(tuples), off, c)) : c;
  }
  Type elt = dt.getElementType();
  Value table = ReshapeOp::create(b, loc, RankedTensorType::get({rows, rest}, elt), data);
  SmallVector<int64_t> gathered(tuples), out(tuples);
  gathered.push_back(rest);
  out.append(dt.getShape().begin() + k, dt.getShape().end());
  Value g = EmbeddingOp::create(b, loc, RankedTensorType::get(gathered, elt), table, off);
  define(n, ReshapeOp::create(b, loc, RankedTensorType::get(out, elt), g));
  return true;
}

bool Importer::convertReshape(const onnx::NodeProto &n) {
  Value x;
  const Val *shapeC = constInput(n, 1);
  if (!input(n, 0, x))
    return false;
  if (!shapeC)
    return nodeFail(n, "the target shape does not fold to a constant");
  std::vector<int64_t> shape;
  if (!reshapeTarget(n, tt(x).getShape(), *shapeC, shape))
    return false;
  define(n, ReshapeOp::create(b, loc, RankedTensorType::get(shape, tt(x).getElementType()), x));
  return true;
}

bool Importer::splitOperands(const onnx::NodeProto &n, Value &x, int64_t &axis, const Val *&sp) {
  if (!input(n, 0, x))
    return false;
  axis = intAttr(n, "axis", 0);
  return normAxis(n, axis, tt(x).getRank()) && optionalConst(n, 1, sp, "split");
}

bool Importer::convertSplit(const onnx::NodeProto &n) {
  Value x;
  int64_t axis;
  const Val *sp;
  if (!splitOperands(n, x, axis, sp))
    return false;
  std::vector<int64_t> sizes = sp ? ints(*sp) : intsAttr(n, "split");
  int64_t dim = tt(x).getDimSize(axis), parts = n.output_size();
  if (sizes.empty()) {
    // Equal parts; opset 18's num_outputs makes the last one smaller
    // when they do not divide the dimension.
    int64_t chunk = (dim + parts - 1) / parts;
    for (int64_t i = 0; i < parts; ++i)
      sizes.push_back(std::max<int64_t>(0, std::min(chunk, dim - chunk * i)));
  }
  if (int64_t(sizes.size()) != parts || !sizesFill(sizes, dim))
    return nodeFail(n, "split sizes " + shapeStr(sizes) + " do not divide dimension " +
                           std::to_string(axis) + " (" + std::to_string(dim) + ") into " +
                           std::to_string(parts) + " outputs");
  SmallVector<Value> pieces = splitPieces(x, axis, sizes);
  for (int i = 0; i < n.output_size(); ++i)
    if (!n.output(i).empty())
      values[n.output(i)] = Val{pieces[i]};
  return true;
}

bool Importer::sizesFill(ArrayRef<int64_t> sizes, int64_t dim) {
  int64_t sum = 0;
  for (int64_t sz : sizes)
    sum = sz < 0 || sum < 0 || sz > dim ? -1 : sum + sz;
  return sum == dim;
}

SmallVector<Value> Importer::splitPieces(Value x, int64_t axis, ArrayRef<int64_t> sizes) {
  int64_t rank = tt(x).getRank(), offset = 0;
  SmallVector<Value> pieces;
  for (int64_t size : sizes) {
    SmallVector<int64_t> start(rank, 0), limit(tt(x).getShape()), step(rank, 1),
        shape(tt(x).getShape());
    start[axis] = offset;
    limit[axis] = offset + size;
    shape[axis] = size;
    offset += size;
    pieces.push_back(SliceOp::create(b, loc, RankedTensorType::get(shape, tt(x).getElementType()),
                                     x, b.getDenseI64ArrayAttr(start),
                                     b.getDenseI64ArrayAttr(limit), b.getDenseI64ArrayAttr(step)));
  }
  return pieces;
}

bool Importer::convertSplitToSequence(const onnx::NodeProto &n) {
  Value x;
  int64_t axis;
  const Val *sp;
  if (!splitOperands(n, x, axis, sp))
    return false;
  int64_t dim = tt(x).getDimSize(axis);
  std::vector<int64_t> sizes;
  bool squeeze = false;
  // One slice op per piece: a declared dimension of billions must not
  // make billions of them (found by fuzz-onnx-proto).
  constexpr int64_t kMaxPieces = 4096;
  int64_t pieces = !sp ? dim : sp->shape.empty() ? 0 : sp->numel();
  if (sp && sp->shape.empty() && !ints(*sp).empty() && ints(*sp)[0] > 0)
    pieces = dim > 0 ? (dim - 1) / ints(*sp)[0] + 1 : 0; // (no dim + size - 1: it overflows)
  if (pieces > kMaxPieces)
    return nodeFail(n, "splits dimension " + std::to_string(axis) + " (" + std::to_string(dim) +
                           ") into " + std::to_string(pieces) + " pieces; the importer takes " +
                           std::to_string(kMaxPieces));
  if (!sp) {
    sizes.assign(size_t(dim), 1);
    squeeze = intAttr(n, "keepdims", 1) == 0;
  } else if (sp->shape.empty()) {
    int64_t chunk = ints(*sp)[0];
    if (chunk < 1)
      return nodeFail(n, "split must be positive, got " + std::to_string(chunk));
    for (int64_t at = 0; at < dim; at += chunk)
      sizes.push_back(std::min(chunk, dim - at));
  } else {
    sizes = ints(*sp);
  }
  if (!sizesFill(sizes, dim))
    return nodeFail(n, "split sizes " + shapeStr(sizes) + " do not add up to dimension " +
                           std::to_string(axis) + " (" + std::to_string(dim) + ")");
  Val seq;
  seq.isSeq = true;
  for (Value piece : splitPieces(x, axis, sizes)) {
    if (squeeze) {
      SmallVector<int64_t> shape(tt(piece).getShape());
      shape.erase(shape.begin() + axis);
      piece = ReshapeOp::create(b, loc, RankedTensorType::get(shape, tt(x).getElementType()),
                                piece);
    }
    seq.seq.push_back(piece);
  }
  values[n.output(0)] = seq;
  return true;
}

bool Importer::convertSequenceAt(const onnx::NodeProto &n) {
  auto it = values.find(n.input(0));
  if (it == values.end() || !it->second.isSeq)
    return nodeFail(n, "input '" + n.input(0) +
                           "' is not a sequence the importer made (only SplitToSequence's)");
  const Val *pos;
  if (!optionalConst(n, 1, pos, "position") || !pos || pos->numel() != 1)
    return nodeFail(n, "position must be one constant integer");
  int64_t count = int64_t(it->second.seq.size()), p = ints(*pos)[0];
  if (p < -count || p >= count)
    return nodeFail(n, "position " + std::to_string(p) + " is out of range for a sequence of " +
                           std::to_string(count));
  define(n, it->second.seq[size_t(p < 0 ? p + count : p)]);
  return true;
}

bool Importer::convertUnsqueeze(const onnx::NodeProto &n) {
  const std::string &op = n.op_type();
  Value x;
  if (!input(n, 0, x))
    return false;
  const Val *axesC;
  if (!optionalConst(n, 1, axesC, "axes"))
    return false;
  std::vector<int64_t> shape(tt(x).getShape().begin(), tt(x).getShape().end());
  if (!squeezeShape(n, op == "Unsqueeze", axesC ? ints(*axesC) : intsAttr(n, "axes"), shape))
    return false;
  define(n, ReshapeOp::create(b, loc, RankedTensorType::get(shape, tt(x).getElementType()), x));
  return true;
}

bool Importer::convertConcat(const onnx::NodeProto &n) {
  SmallVector<Value> ins;
  for (int i = 0; i < n.input_size(); ++i) {
    Value v;
    if (!input(n, i, v))
      return false;
    ins.push_back(v);
  }
  int64_t rank = tt(ins[0]).getRank(), axis = intAttr(n, "axis", 0);
  if (!normAxis(n, axis, rank))
    return false;
  SmallVector<int64_t> shape(tt(ins[0]).getShape());
  shape[axis] = 0;
  for (Value v : ins) {
    auto vs = tt(v).getShape();
    for (int64_t d = 0; d < rank; ++d)
      if (int64_t(vs.size()) != rank || tt(v).getElementType() != tt(ins[0]).getElementType() ||
          (d != axis && vs[d] != shape[d]))
        return nodeFail(n, "inputs " + shapeStr(tt(ins[0]).getShape()) + " and " +
                               shapeStr(vs) + " do not concatenate along axis " +
                               std::to_string(axis));
    shape[axis] += vs[axis];
  }
  define(n, ConcatOp::create(b, loc, RankedTensorType::get(shape, tt(ins[0]).getElementType()), ins,
                             b.getI64IntegerAttr(axis)));
  return true;
}

bool Importer::convertSlice(const onnx::NodeProto &n) {
  Value x;
  if (!input(n, 0, x))
    return false;
  const Val *st = constInput(n, 1), *en = constInput(n, 2), *ax, *sp;
  if (!st || !en)
    return nodeFail(n, "slice bounds do not fold to constants");
  if (!optionalConst(n, 3, ax, "axes") || !optionalConst(n, 4, sp, "steps"))
    return false;
  SmallVector<int64_t> lo, hi, step, out;
  if (!sliceBounds(n, tt(x).getShape(), *st, *en, ax, sp, lo, hi, step, out))
    return false;
  define(n, SliceOp::create(b, loc, RankedTensorType::get(out, tt(x).getElementType()), x,
                            b.getDenseI64ArrayAttr(lo), b.getDenseI64ArrayAttr(hi),
                            b.getDenseI64ArrayAttr(step)));
  return true;
}

bool Importer::convertExpand(const onnx::NodeProto &n) {
  Value x;
  if (!input(n, 0, x))
    return false;
  const Val *sc = constInput(n, 1);
  if (!sc)
    return nodeFail(n, "the shape must be a constant (it is computed at run time here)");
  std::vector<int64_t> target = ints(*sc);
  SmallVector<int64_t> shape;
  if (!OpTrait::util::getBroadcastedShape(tt(x).getShape(), target, shape))
    return nodeFail(n, "shape " + shapeStr(tt(x).getShape()) + " does not broadcast to " +
                           shapeStr(target));
  if (ArrayRef<int64_t>(shape) == tt(x).getShape()) {
    define(n, x);
    return true;
  }
  define(n, BroadcastOp::create(b, loc, RankedTensorType::get(shape, tt(x).getElementType()),
                                x));
  return true;
}

bool Importer::convertGatherElements(const onnx::NodeProto &n) {
  const Val *data = constInput(n, 0);
  std::vector<int64_t> shape;
  if (!shapeOf(n, 1, shape))
    return false;
  if (!data || data->data.empty() ||
      llvm::any_of(data->data, [&](double v) { return v != data->data[0]; }))
    return nodeFail(n, "GatherElements at computed indices is supported on a constant whose "
                       "elements are all equal only");
  if (data->shape.size() != shape.size())
    return nodeFail(n, "data and indices must have the same rank");
  if (checkedNumel(shape, kMaxFolded) < 0)
    return nodeFail(n, "the result is larger than a constant may be (" +
                           std::to_string(kMaxFolded) + " elements)");
  Val r;
  r.elem = data->elem;
  r.shape = shape;
  r.data.assign(size_t(r.numel()), data->data[0]);
  defineConst(n, 0, std::move(r));
  return true;
}

} // namespace loom::onnximport
