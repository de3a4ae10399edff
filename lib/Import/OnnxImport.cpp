//===- OnnxImport.cpp - ONNX models into loom IR --------------------------===//
//
// Reads a ModelProto with the ONNX project's own protobuf classes (Debian's
// libonnx-dev), turns float initializers into parameters carrying their
// values, int64 tensors (shape arithmetic) into host constants that fold at
// import so the graph is static, and every other node into loom ops. The
// model's output becomes the input of a loss: mean cross-entropy against
// labels (classifiers) or next-token targets (language models).
//
//===----------------------------------------------------------------------===//
#include "loom/Import.h"

#include "dialects/Loom/LoomOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Path.h"

#include <onnx/onnx_pb.h>

#include <cmath>
#include <limits>
#include <cstring>
#include <fstream>

using namespace mlir;
using namespace mlir::loom;

namespace loom {
namespace {

/// A value during import: an SSA value, or a host constant that folds
/// (shape arithmetic, masks, small constants), materialised as an
/// arith.constant only when an op needs it as a tensor.
struct Val {
  Value v;
  bool isConst = false;
  int elem = 0; // onnx::TensorProto data type of a constant
  std::vector<double> data;
  std::vector<int64_t> shape;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
};

class Importer {
public:
  Importer(MLIRContext &ctx, std::string &error, std::string modelDir)
      : ctx(ctx), b(&ctx), error(error), f32(Float32Type::get(&ctx)),
        i64(IntegerType::get(&ctx, 64)), modelDir(std::move(modelDir)) {}

  OwningOpRef<ModuleOp> run(const onnx::ModelProto &model, StringRef path,
                            StringRef task, ArrayRef<std::string> frozen) {
    const onnx::GraphProto &g = model.graph();
    loc = FileLineColLoc::get(&ctx, path, 0, 0);
    module = ModuleOp::create(loc);
    (*module)->setAttr("loom.model", b.getStringAttr(path));
    b.setInsertionPointToEnd(module->getBody());

    // Initializers: float ones are parameters, int64 ones fold. ONNX does
    // not tell parameters from buffers (both are initializers): frozen ones
    // are constants, as ONNX Runtime training's frozen_params.
    llvm::StringSet<> inits, frozenSet;
    for (const std::string &f : frozen)
      frozenSet.insert(f);
    for (const onnx::TensorProto &t : g.initializer()) {
      inits.insert(t.name());
      if (!initializer(t, /*asConstant=*/frozenSet.contains(t.name())))
        return nullptr;
    }
    for (const std::string &f : frozen)
      if (!inits.contains(f))
        return fail("--frozen names '" + f + "', which is not an initializer of the model"),
               nullptr;
    // Inputs that are not initializers become the function's arguments.
    SmallVector<std::pair<std::string, RankedTensorType>> args;
    for (const onnx::ValueInfoProto &in : g.input()) {
      if (inits.contains(in.name()))
        continue;
      RankedTensorType t;
      if (!valueType(in, t))
        return nullptr;
      args.push_back({in.name(), t});
    }
    if (args.empty())
      return fail("the model has no data input"), nullptr;
    if (g.output_size() != 1)
      return fail("the importer expects one output (logits), the model has " +
                  std::to_string(g.output_size())),
             nullptr;
    // Labels take the output's shape without its class dimension (declared
    // output shape; else inferred from the first input).
    RankedTensorType in = args[0].second;
    bool tokens = in.getElementType().isInteger(64) && in.getRank() == 2;
    if (task == "lm" && !tokens)
      return fail("--task=lm needs token ids (an int64 [B, T] input); the "
                  "model's input '" + args[0].first + "' is " + typeStr(in)),
             nullptr;
    bool lm = task == "lm" || (task.empty() && tokens);
    SmallVector<int64_t> labelShape;
    const auto &outShape = g.output(0).type().tensor_type().shape();
    bool declared = outShape.dim_size() > 0;
    for (int d = 0; d + 1 < outShape.dim_size(); ++d) {
      if (!outShape.dim(d).has_dim_value())
        declared = false;
      else
        labelShape.push_back(outShape.dim(d).dim_value());
    }
    if (!declared)
      labelShape.assign(lm ? in.getShape().begin() : in.getShape().begin(),
                        lm ? in.getShape().end() : in.getShape().begin() + 1);
    RankedTensorType labels = RankedTensorType::get(labelShape, i64);
    SmallVector<Type> argTypes;
    for (auto &a : args)
      argTypes.push_back(a.second);
    argTypes.push_back(labels);
    auto fn = func::FuncOp::create(b, loc, "forward",
                                   b.getFunctionType(argTypes, {RankedTensorType::get({}, f32)}));
    Block *entry = fn.addEntryBlock();
    b.setInsertionPointToStart(entry);
    for (auto [i, a] : llvm::enumerate(args))
      values[a.first] = Val{entry->getArgument(i)};
    Value labelArg = entry->getArgument(args.size());
    for (auto &[name, value] : paramValues)
      values[name] = Val{LoadOp::create(b, loc, value, FlatSymbolRefAttr::get(&ctx, name))};

    for (const onnx::NodeProto &node : g.node())
      if (!convert(node))
        return nullptr;

    auto out = values.find(g.output(0).name());
    if (out == values.end() || !out->second.v)
      return fail("the output '" + g.output(0).name() + "' was not computed"), nullptr;
    Value logits = out->second.v;
    auto lt = cast<RankedTensorType>(logits.getType());
    if (lt.getRank() < 1 || lt.getShape().drop_back() != labels.getShape())
      return fail("the output has shape " + shapeStr(lt.getShape()) + ", which a " +
                  (lm ? "language-model" : "classification") +
                  " loss cannot take (expected the input's shape plus a class "
                  "dimension; use --task)"),
             nullptr;
    Value loss = CrossEntropyOp::create(b, loc, RankedTensorType::get({}, f32), logits,
                                        labelArg);
    func::ReturnOp::create(b, loc, loss);
    if (failed(verify(*module)))
      return fail("the imported module does not verify (see the diagnostics above)"), nullptr;
    return std::move(module);
  }

private:
  bool fail(const std::string &msg) {
    error = msg;
    return false;
  }
  bool nodeFail(const onnx::NodeProto &n, const std::string &msg) {
    return fail("node '" + n.name() + "' (" + n.op_type() + "): " + msg);
  }
  static std::string typeStr(Type t) {
    std::string out;
    llvm::raw_string_ostream os(out);
    os << t;
    return out;
  }
  static std::string shapeStr(ArrayRef<int64_t> s) {
    std::string r = "[";
    for (auto [i, d] : llvm::enumerate(s))
      r += (i ? ", " : "") + std::to_string(d);
    return r + "]";
  }

  bool valueType(const onnx::ValueInfoProto &v, RankedTensorType &out) {
    const auto &tt = v.type().tensor_type();
    SmallVector<int64_t> shape;
    for (const auto &d : tt.shape().dim()) {
      if (!d.has_dim_value())
        return fail("input '" + v.name() + "' has a dynamic dimension '" +
                    d.dim_param() +
                    "': export with static shapes (fixed batch and sequence)");
      shape.push_back(d.dim_value());
    }
    Type elt = tt.elem_type() == onnx::TensorProto::FLOAT   ? Type(f32)
               : tt.elem_type() == onnx::TensorProto::INT64 ? Type(i64)
                                                            : Type();
    if (!elt)
      return fail("input '" + v.name() + "' has element type " +
                  std::to_string(tt.elem_type()) + "; expected float or int64");
    out = RankedTensorType::get(shape, elt);
    return true;
  }

  /// Reads an initializer's external data: only files in the model's own
  /// folder (no absolute paths, no ".."), as the ONNX spec recommends.
  bool readExternal(onnx::TensorProto &t) {
    std::string location;
    int64_t offset = 0, length = -1;
    for (const auto &kv : t.external_data()) {
      if (kv.key() == "location")
        location = kv.value();
      else if (kv.key() == "offset")
        offset = std::atoll(kv.value().c_str());
      else if (kv.key() == "length")
        length = std::atoll(kv.value().c_str());
    }
    if (location.empty())
      return fail("initializer '" + t.name() + "' is external but names no file");
    if (location[0] == '/' || StringRef(location).contains(".."))
      return fail("initializer '" + t.name() + "' points outside the model's folder ('" +
                  location + "'); external data is read only from that folder");
    std::string file = modelDir.empty() ? location : modelDir + "/" + location;
    std::ifstream in(file, std::ios::binary);
    if (!in)
      return fail("cannot open external data '" + file + "' of initializer '" + t.name() +
                  "': " + std::strerror(errno));
    in.seekg(0, std::ios::end);
    int64_t size = int64_t(in.tellg());
    if (length < 0)
      length = size - offset;
    if (offset < 0 || offset + length > size)
      return fail("external data of '" + t.name() + "' lies outside '" + file + "'");
    std::string bytes(size_t(length), '\0');
    in.seekg(offset);
    in.read(bytes.data(), length);
    t.set_raw_data(bytes);
    return true;
  }

  bool initializer(const onnx::TensorProto &t, bool asConstant = false) {
    if (t.has_data_location() && t.data_location() == onnx::TensorProto::EXTERNAL) {
      onnx::TensorProto loaded = t;
      if (!readExternal(loaded))
        return false;
      loaded.clear_data_location();
      loaded.clear_external_data();
      return initializer(loaded, asConstant);
    }
    SmallVector<int64_t> shape(t.dims().begin(), t.dims().end());
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    if (t.data_type() == onnx::TensorProto::INT64 ||
        t.data_type() == onnx::TensorProto::BOOL ||
        (t.data_type() == onnx::TensorProto::FLOAT && asConstant)) {
      Val v;
      v.isConst = true;
      v.elem = t.data_type();
      v.shape.assign(shape.begin(), shape.end());
      v.data.resize(n);
      const std::string &raw = t.raw_data();
      for (int64_t i = 0; i < n; ++i) {
        if (t.data_type() == onnx::TensorProto::INT64)
          v.data[i] = double(raw.empty() ? t.int64_data(i) : reinterpret_cast<const int64_t *>(raw.data())[i]);
        else if (t.data_type() == onnx::TensorProto::BOOL)
          v.data[i] = raw.empty() ? t.int32_data(i) : double(uint8_t(raw[i]));
        else
          v.data[i] = raw.empty() ? t.float_data(i) : reinterpret_cast<const float *>(raw.data())[i];
      }
      values[t.name()] = v;
      return true;
    }
    if (t.data_type() != onnx::TensorProto::FLOAT)
      return fail("initializer '" + t.name() + "' has element type " +
                  std::to_string(t.data_type()) + "; expected float or int64");
    std::vector<float> data(n);
    if (!t.raw_data().empty()) {
      if (t.raw_data().size() != size_t(n) * 4)
        return fail("initializer '" + t.name() + "' holds " +
                    std::to_string(t.raw_data().size()) + " bytes for " +
                    std::to_string(n) + " floats");
      std::memcpy(data.data(), t.raw_data().data(), size_t(n) * 4);
    } else if (t.float_data_size() == n) {
      std::copy(t.float_data().begin(), t.float_data().end(), data.begin());
    } else {
      return fail("initializer '" + t.name() + "' has no data");
    }
    auto type = RankedTensorType::get(shape, f32);
    std::string name = t.name();
    // PyTorch's eval-mode export names folded or merged weights onnx::...;
    // they may tie parameters that PyTorch trains apart.
    if (StringRef(name).starts_with("onnx::"))
      llvm::errs() << "loomc: warning: initializer '" << name
                   << "' looks folded or merged by an eval-mode export; export "
                      "with training=torch.onnx.TrainingMode.TRAINING, "
                      "do_constant_folding=False to keep every parameter "
                      "named and separate (docs/onnx.md)\n";
    ParamOp::create(b, loc, b.getStringAttr(name), TypeAttr::get(type), InitAttr(),
                    DenseElementsAttr::get(type, ArrayRef<float>(data)));
    paramValues.push_back({name, type});
    return true;
  }

  //===--------------------------------------------------------------===//
  // Nodes
  //===--------------------------------------------------------------===//

  /// Folds `n` over host constants; nullopt (and error set) when it cannot.
  std::optional<Val> fold(const onnx::NodeProto &n) {
    const std::string &op = n.op_type();
    auto in = [&](int i) -> const Val & { return *constInput(n, i); };
    Val r;
    auto elementwise = [&](auto f) -> std::optional<Val> {
      const Val &a = in(0), &c = in(1);
      if (a.numel() != 1 && c.numel() != 1 && a.shape != c.shape)
        return std::nullopt;
      r = a.numel() >= c.numel() ? a : c;
      for (int64_t i = 0; i < r.numel(); ++i)
        r.data[i] = f(a.data[a.numel() == 1 ? 0 : i], c.data[c.numel() == 1 ? 0 : i]);
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
    if (op == "Cast") {
      r = in(0);
      int to = int(intAttr(n, "to", 1));
      if (to != onnx::TensorProto::INT64 && to != onnx::TensorProto::FLOAT &&
          to != onnx::TensorProto::BOOL)
        return std::nullopt;
      r.elem = to;
      return r;
    }
    if (op == "Unsqueeze" || op == "Squeeze") {
      r = in(0);
      std::vector<int64_t> axes = n.input_size() > 1 ? ints(in(1)) : intsAttr(n, "axes");
      if (op == "Unsqueeze") {
        int64_t rank = int64_t(r.shape.size() + axes.size());
        for (int64_t &a : axes)
          if (a < 0)
            a += rank;
        llvm::sort(axes);
        for (int64_t a : axes)
          r.shape.insert(r.shape.begin() + a, 1);
      } else {
        std::vector<int64_t> s;
        for (size_t d = 0; d < r.shape.size(); ++d)
          if (axes.empty() ? r.shape[d] != 1
                           : !llvm::is_contained(axes, int64_t(d)) &&
                                 !llvm::is_contained(axes, int64_t(d) - int64_t(r.shape.size())))
            s.push_back(r.shape[d]);
        r.shape = s;
      }
      return r;
    }
    if (op == "Concat") {
      r = in(0);
      if (r.shape.size() != 1)
        return std::nullopt;
      for (int i = 1; i < n.input_size(); ++i) {
        r.data.insert(r.data.end(), in(i).data.begin(), in(i).data.end());
        r.shape[0] += in(i).shape[0];
      }
      return r;
    }
    if (op == "Gather") {
      const Val &data = in(0), &idx = in(1);
      if (intAttr(n, "axis", 0) != 0 || data.shape.empty())
        return std::nullopt;
      int64_t inner = data.numel() / data.shape[0];
      r.elem = data.elem;
      r.shape = idx.shape;
      r.shape.insert(r.shape.end(), data.shape.begin() + 1, data.shape.end());
      for (double i : idx.data) {
        int64_t row = int64_t(i) < 0 ? int64_t(i) + data.shape[0] : int64_t(i);
        r.data.insert(r.data.end(), data.data.begin() + row * inner,
                      data.data.begin() + (row + 1) * inner);
      }
      return r;
    }
    if (op == "Trilu") {
      // A causal mask built in forward (torch.tril of ones): keep the band
      // j - i >= k (upper) or j - i <= k (lower) of the last two dims.
      r = in(0);
      int64_t k = n.input_size() > 1 && !n.input(1).empty() ? int64_t(in(1).data[0]) : 0;
      bool upper = intAttr(n, "upper", 1) != 0;
      if (r.shape.size() < 2)
        return nodeFail(n, "Trilu needs a matrix"), std::nullopt;
      int64_t rows = r.shape[r.shape.size() - 2], cols = r.shape.back();
      for (int64_t i = 0; i < r.numel(); ++i) {
        int64_t row = (i / cols) % rows, col = i % cols;
        if (upper ? col - row < k : col - row > k)
          r.data[i] = 0;
      }
      return r;
    }
    if (op == "Range") {
      double start = in(0).data[0], limit = in(1).data[0], delta = in(2).data[0];
      r.elem = in(0).elem;
      for (double x = start; delta > 0 ? x < limit : x > limit; x += delta)
        r.data.push_back(x);
      r.shape = {int64_t(r.data.size())};
      return r;
    }
    if (op == "Reshape") {
      r = in(0);
      std::vector<int64_t> shape = ints(in(1));
      int64_t known = 1, infer = -1;
      for (size_t d = 0; d < shape.size(); ++d) {
        if (shape[d] == 0)
          shape[d] = r.shape[d];
        if (shape[d] == -1)
          infer = int64_t(d);
        else
          known *= shape[d];
      }
      if (infer >= 0)
        shape[infer] = r.numel() / known;
      r.shape = shape;
      return r;
    }
    if (op == "Slice") {
      // N-d slice with constant starts/ends/axes/steps.
      const Val &data = in(0);
      std::vector<int64_t> starts = ints(in(1)), ends = ints(in(2)), axes, steps;
      if (n.input_size() > 3 && !n.input(3).empty())
        axes = ints(in(3));
      if (n.input_size() > 4 && !n.input(4).empty())
        steps = ints(in(4));
      int64_t rank = int64_t(data.shape.size());
      std::vector<int64_t> lo(rank, 0), hi(data.shape), st(rank, 1);
      for (size_t k = 0; k < starts.size(); ++k) {
        int64_t a = axes.empty() ? int64_t(k) : axes[k];
        if (a < 0)
          a += rank;
        int64_t dim = data.shape[a];
        auto clampIdx = [&](int64_t x) {
          if (x < -dim)
            return int64_t(0);
          if (x < 0)
            x += dim;
          return std::max<int64_t>(0, std::min(x, dim));
        };
        lo[a] = clampIdx(starts[k]);
        hi[a] = clampIdx(ends[k]);
        st[a] = steps.empty() ? 1 : steps[k];
        if (st[a] != 1)
          return std::nullopt;
      }
      r.elem = data.elem;
      for (int64_t d = 0; d < rank; ++d)
        r.shape.push_back(std::max<int64_t>(0, hi[d] - lo[d]));
      std::vector<int64_t> idx(rank, 0), strides(rank, 1);
      for (int64_t d = rank - 2; d >= 0; --d)
        strides[d] = strides[d + 1] * data.shape[d + 1];
      int64_t total = r.numel();
      for (int64_t i = 0; i < total; ++i) {
        int64_t rem = i, off = 0;
        for (int64_t d = rank - 1; d >= 0; --d) {
          int64_t c = rem % r.shape[d];
          rem /= r.shape[d];
          off += (lo[d] + c) * strides[d];
        }
        r.data.push_back(data.data[off]);
      }
      return r;
    }
    if (op == "ConstantOfShape") {
      std::vector<int64_t> shape = ints(in(0));
      const auto *v = attr(n, "value");
      r.elem = v ? v->t().data_type() : onnx::TensorProto::FLOAT;
      double x = 0;
      if (v) {
        const auto &t = v->t();
        const std::string &raw = t.raw_data();
        x = r.elem == onnx::TensorProto::INT64
                ? double(raw.empty() ? t.int64_data(0) : *reinterpret_cast<const int64_t *>(raw.data()))
                : double(raw.empty() ? t.float_data(0) : *reinterpret_cast<const float *>(raw.data()));
      }
      r.shape = shape;
      r.data.assign(r.numel(), x);
      return r;
    }
    return std::nullopt;
  }


  const onnx::AttributeProto *attr(const onnx::NodeProto &n, StringRef name) {
    for (const auto &a : n.attribute())
      if (a.name() == name)
        return &a;
    return nullptr;
  }
  int64_t intAttr(const onnx::NodeProto &n, StringRef name, int64_t dflt) {
    const auto *a = attr(n, name);
    return a ? a->i() : dflt;
  }
  bool input(const onnx::NodeProto &n, int i, Value &out) {
    if (i >= n.input_size() || n.input(i).empty())
      return nodeFail(n, "missing input #" + std::to_string(i));
    auto it = values.find(n.input(i));
    if (it == values.end())
      return nodeFail(n, "input '" + n.input(i) + "' is not defined");
    if (!it->second.v)
      it->second.v = materialize(it->second);
    out = it->second.v;
    return true;
  }

  Value materialize(const Val &c) {
    Type elt = c.elem == onnx::TensorProto::INT64  ? Type(i64)
               : c.elem == onnx::TensorProto::BOOL ? Type(b.getI1Type())
                                                   : Type(f32);
    auto type = RankedTensorType::get(c.shape, elt);
    DenseElementsAttr attr;
    if (c.elem == onnx::TensorProto::INT64) {
      std::vector<int64_t> d(c.data.begin(), c.data.end());
      attr = DenseElementsAttr::get(type, ArrayRef<int64_t>(d));
    } else if (c.elem == onnx::TensorProto::BOOL) {
      SmallVector<bool> d;
      for (double x : c.data)
        d.push_back(x != 0);
      attr = DenseElementsAttr::get(type, ArrayRef<bool>(d));
    } else {
      std::vector<float> d(c.data.begin(), c.data.end());
      attr = DenseElementsAttr::get(type, ArrayRef<float>(d));
    }
    return arith::ConstantOp::create(b, loc, type, attr);
  }

  /// The host constant input #i (shape arithmetic, masks), if it is one.
  const Val *constInput(const onnx::NodeProto &n, int i) {
    if (i >= n.input_size() || n.input(i).empty())
      return nullptr;
    auto it = values.find(n.input(i));
    return it != values.end() && it->second.isConst ? &it->second : nullptr;
  }
  bool allConst(const onnx::NodeProto &n) {
    for (int i = 0; i < n.input_size(); ++i)
      if (!n.input(i).empty() && !constInput(n, i))
        return false;
    return true;
  }
  void defineConst(const onnx::NodeProto &n, int out, Val v) {
    v.isConst = true;
    v.v = Value();
    values[n.output(out)] = std::move(v);
  }
  /// Integer values of a host constant. Constants are held as doubles;
  /// ONNX's "to the end" bounds (INT64_MAX / INT64_MIN) saturate.
  std::vector<int64_t> ints(const Val &v) {
    std::vector<int64_t> r;
    for (double x : v.data)
      r.push_back(x >= 9.2e18    ? std::numeric_limits<int64_t>::max()
                  : x <= -9.2e18 ? std::numeric_limits<int64_t>::min()
                                 : int64_t(x));
    return r;
  }
  std::vector<int64_t> intsAttr(const onnx::NodeProto &n, StringRef name) {
    const auto *a = attr(n, name);
    return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end())
             : std::vector<int64_t>();
  }
  /// Static shape of input #i, SSA or constant.
  bool shapeOf(const onnx::NodeProto &n, int i, std::vector<int64_t> &shape) {
    if (const Val *c = constInput(n, i)) {
      shape = c->shape;
      return true;
    }
    Value v;
    if (!input(n, i, v))
      return false;
    auto s = tt(v).getShape();
    shape.assign(s.begin(), s.end());
    return true;
  }
  RankedTensorType tt(Value v) { return cast<RankedTensorType>(v.getType()); }
  void define(const onnx::NodeProto &n, Value v) { values[n.output(0)] = Val{v}; }

  template <typename F> bool binary(const onnx::NodeProto &n, F create) {
    Value l, r;
    if (!input(n, 0, l) || !input(n, 1, r))
      return false;
    SmallVector<int64_t> shape;
    if (!OpTrait::util::getBroadcastedShape(tt(l).getShape(), tt(r).getShape(), shape))
      return nodeFail(n, "shapes " + shapeStr(tt(l).getShape()) + " and " +
                             shapeStr(tt(r).getShape()) + " do not broadcast");
    define(n, create(RankedTensorType::get(shape, tt(l).getElementType()), l, r));
    return true;
  }
  template <typename Op> bool unary(const onnx::NodeProto &n) {
    Value x;
    if (!input(n, 0, x))
      return false;
    define(n, Op::create(b, loc, x.getType(), x));
    return true;
  }

  bool convert(const onnx::NodeProto &n) {
    const std::string &op = n.op_type();
    if (n.domain() != "" && n.domain() != "ai.onnx")
      return nodeFail(n, "operator domain '" + n.domain() + "' is not supported");
    if (op == "Constant") {
      const auto *v = attr(n, "value");
      if (!v || !v->has_t())
        return nodeFail(n, "only tensor constants are supported");
      onnx::TensorProto named = v->t();
      named.set_name(n.output(0));
      if (named.data_type() != onnx::TensorProto::FLOAT &&
          named.data_type() != onnx::TensorProto::INT64 &&
          named.data_type() != onnx::TensorProto::BOOL)
        return nodeFail(n, "constants of element type " +
                               std::to_string(named.data_type()) + " are not supported");
      return initializer(named, /*asConstant=*/true);
    }
    if (n.input_size() && allConst(n) && n.output_size() == 1) {
      // Shape arithmetic and masks fold on the host.
      if (auto folded = fold(n)) {
        defineConst(n, 0, *folded);
        return true;
      }
    }
    if (op == "Add")
      return binary(n, [&](Type t, Value l, Value r) { return AddOp::create(b, loc, t, l, r); });
    if (op == "Sub")
      return binary(n, [&](Type t, Value l, Value r) { return SubOp::create(b, loc, t, l, r); });
    if (op == "Mul")
      return binary(n, [&](Type t, Value l, Value r) { return MulOp::create(b, loc, t, l, r); });
    if (op == "Div")
      return binary(n, [&](Type t, Value l, Value r) { return DivOp::create(b, loc, t, l, r); });
    if (op == "Pow")
      return binary(n, [&](Type t, Value l, Value r) { return PowOp::create(b, loc, t, l, r); });
    if (op == "Relu")
      return unary<ReluOp>(n);
    if (op == "Tanh")
      return unary<TanhOp>(n);
    if (op == "Sigmoid")
      return unary<SigmoidOp>(n);
    if (op == "Erf")
      return unary<ErfOp>(n);
    if (op == "Exp")
      return unary<ExpOp>(n);
    if (op == "Log")
      return unary<LogOp>(n);
    if (op == "Sqrt")
      return unary<SqrtOp>(n);
    if (op == "Neg")
      return unary<NegOp>(n);
    if (op == "Identity") {
      Value x;
      if (!input(n, 0, x))
        return false;
      define(n, x);
      return true;
    }
    if (op == "Gemm" || op == "MatMul") {
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
      SmallVector<int64_t> shape(at.getShape().drop_back(2));
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
    if (op == "Softmax" || op == "LogSoftmax") {
      Value x;
      if (!input(n, 0, x))
        return false;
      define(n, SoftmaxOp::create(b, loc, x.getType(), x, b.getI64IntegerAttr(intAttr(n, "axis", -1)),
                                  op == "LogSoftmax" ? b.getUnitAttr() : UnitAttr()));
      return true;
    }
    if (op == "Transpose") {
      Value x;
      if (!input(n, 0, x))
        return false;
      const auto *p = attr(n, "perm");
      SmallVector<int64_t> perm;
      if (p)
        perm.assign(p->ints().begin(), p->ints().end());
      else
        for (int64_t i = tt(x).getRank() - 1; i >= 0; --i)
          perm.push_back(i);
      SmallVector<int64_t> shape;
      for (int64_t q : perm)
        shape.push_back(tt(x).getDimSize(q));
      define(n, TransposeOp::create(b, loc, RankedTensorType::get(shape, tt(x).getElementType()), x,
                                    b.getDenseI64ArrayAttr(perm)));
      return true;
    }
    if (op == "Reciprocal" && !allConst(n)) {
      Value x;
      if (!input(n, 0, x))
        return false;
      auto type = RankedTensorType::get({}, tt(x).getElementType());
      Value one = arith::ConstantOp::create(b, loc, type, DenseElementsAttr::get(type, 1.0f));
      define(n, DivOp::create(b, loc, x.getType(), one, x));
      return true;
    }
    if (op == "Shape") {
      std::vector<int64_t> sh;
      if (!shapeOf(n, 0, sh))
        return false;
      Val v;
      v.elem = onnx::TensorProto::INT64;
      v.shape = {int64_t(sh.size())};
      v.data.assign(sh.begin(), sh.end());
      defineConst(n, 0, v);
      return true;
    }
    if (op == "Gather") {
      Value table;
      if (!input(n, 0, table))
        return false;
      if (intAttr(n, "axis", 0) != 0)
        return nodeFail(n, "only axis 0 (an embedding lookup) is supported");
      Value idx;
      if (!input(n, 1, idx))
        return false;
      if (!tt(idx).getElementType().isInteger(64) || tt(table).getRank() != 2)
        return nodeFail(n, "expects a [rows, features] table and int64 indices");
      SmallVector<int64_t> shape(tt(idx).getShape());
      shape.push_back(tt(table).getDimSize(1));
      define(n, EmbeddingOp::create(b, loc, RankedTensorType::get(shape, f32), table, idx));
      return true;
    }
    if (op == "LayerNormalization") {
      Value x, w, bias;
      if (!input(n, 0, x) || !input(n, 1, w))
        return false;
      if (n.input_size() > 2 && !n.input(2).empty() && !input(n, 2, bias))
        return false;
      int64_t axis = intAttr(n, "axis", -1);
      if (axis != -1 && axis != tt(x).getRank() - 1)
        return nodeFail(n, "only normalisation over the last axis is supported");
      const auto *eps = attr(n, "epsilon");
      define(n, LayerNormOp::create(b, loc, x.getType(), x, w, bias,
                                    b.getF64FloatAttr(eps ? eps->f() : 1e-5)));
      return true;
    }
    if (op == "Reshape") {
      Value x;
      const Val *shapeC = constInput(n, 1);
      if (!input(n, 0, x))
        return false;
      if (!shapeC)
        return nodeFail(n, "the target shape does not fold to a constant");
      std::vector<int64_t> shape = ints(*shapeC);
      auto in = tt(x).getShape();
      int64_t known = 1, infer = -1;
      for (size_t d = 0; d < shape.size(); ++d) {
        if (shape[d] == 0)
          shape[d] = in[d];
        if (shape[d] == -1)
          infer = int64_t(d);
        else
          known *= shape[d];
      }
      if (infer >= 0)
        shape[infer] = tt(x).getNumElements() / known;
      define(n, ReshapeOp::create(b, loc, RankedTensorType::get(shape, tt(x).getElementType()), x));
      return true;
    }
    if (op == "Split") {
      Value x;
      if (!input(n, 0, x))
        return false;
      int64_t rank = tt(x).getRank(), axis = intAttr(n, "axis", 0);
      if (axis < 0)
        axis += rank;
      std::vector<int64_t> sizes;
      if (const Val *sp = constInput(n, 1))
        sizes = ints(*sp);
      else
        sizes = intsAttr(n, "split");
      if (sizes.empty())
        sizes.assign(n.output_size(), tt(x).getDimSize(axis) / n.output_size());
      int64_t offset = 0;
      for (int i = 0; i < n.output_size(); ++i) {
        SmallVector<int64_t> start(rank, 0), limit(tt(x).getShape()), step(rank, 1),
            shape(tt(x).getShape());
        start[axis] = offset;
        limit[axis] = offset + sizes[i];
        shape[axis] = sizes[i];
        offset += sizes[i];
        values[n.output(i)] = Val{SliceOp::create(b, loc, RankedTensorType::get(shape, tt(x).getElementType()), x,
                                                  b.getDenseI64ArrayAttr(start), b.getDenseI64ArrayAttr(limit),
                                                  b.getDenseI64ArrayAttr(step))};
      }
      return true;
    }
    if (op == "Where") {
      Value c, x, y;
      if (!input(n, 0, c) || !input(n, 1, x) || !input(n, 2, y))
        return false;
      SmallVector<int64_t> xy, shape;
      if (!OpTrait::util::getBroadcastedShape(tt(x).getShape(), tt(y).getShape(), xy) ||
          !OpTrait::util::getBroadcastedShape(xy, tt(c).getShape(), shape))
        return nodeFail(n, "shapes do not broadcast");
      define(n, SelectOp::create(b, loc, RankedTensorType::get(shape, tt(x).getElementType()), c, x, y));
      return true;
    }
    if (op == "Unsqueeze" || op == "Squeeze") {
      Value x;
      if (!input(n, 0, x))
        return false;
      std::vector<int64_t> axes;
      if (const Val *c = constInput(n, 1))
        axes = ints(*c);
      else
        axes = intsAttr(n, "axes");
      std::vector<int64_t> shape(tt(x).getShape().begin(), tt(x).getShape().end());
      if (op == "Unsqueeze") {
        int64_t rank = int64_t(shape.size() + axes.size());
        for (int64_t &a : axes)
          if (a < 0)
            a += rank;
        llvm::sort(axes);
        for (int64_t a : axes)
          shape.insert(shape.begin() + a, 1);
      } else {
        int64_t rank = int64_t(shape.size());
        std::vector<int64_t> kept;
        for (int64_t d = 0; d < rank; ++d)
          if (axes.empty() ? shape[d] != 1
                           : !llvm::is_contained(axes, d) && !llvm::is_contained(axes, d - rank))
            kept.push_back(shape[d]);
        shape = kept;
      }
      define(n, ReshapeOp::create(b, loc, RankedTensorType::get(shape, tt(x).getElementType()), x));
      return true;
    }
    if (op == "Concat") {
      SmallVector<Value> ins;
      for (int i = 0; i < n.input_size(); ++i) {
        Value v;
        if (!input(n, i, v))
          return false;
        ins.push_back(v);
      }
      int64_t rank = tt(ins[0]).getRank(), axis = intAttr(n, "axis", 0);
      if (axis < 0)
        axis += rank;
      SmallVector<int64_t> shape(tt(ins[0]).getShape());
      shape[axis] = 0;
      for (Value v : ins)
        shape[axis] += tt(v).getDimSize(axis);
      define(n, ConcatOp::create(b, loc, RankedTensorType::get(shape, tt(ins[0]).getElementType()), ins,
                                 b.getI64IntegerAttr(axis)));
      return true;
    }
    if (op == "ReduceMean" || op == "ReduceSum") {
      Value x;
      if (!input(n, 0, x))
        return false;
      std::vector<int64_t> axes = intsAttr(n, "axes");
      if (const Val *c = constInput(n, 1))
        axes = ints(*c);
      int64_t rank = tt(x).getRank();
      if (axes.empty())
        for (int64_t d = 0; d < rank; ++d)
          axes.push_back(d);
      bool keep = intAttr(n, "keepdims", 1);
      SmallVector<int64_t> shape;
      for (int64_t &a : axes)
        if (a < 0)
          a += rank;
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
    if (op == "Slice") {
      Value x;
      if (!input(n, 0, x))
        return false;
      const Val *st = constInput(n, 1), *en = constInput(n, 2);
      const Val *ax = n.input_size() > 3 ? constInput(n, 3) : nullptr;
      const Val *sp = n.input_size() > 4 ? constInput(n, 4) : nullptr;
      if (!st || !en || (n.input_size() > 3 && !n.input(3).empty() && !ax) ||
          (n.input_size() > 4 && !n.input(4).empty() && !sp))
        return nodeFail(n, "slice bounds do not fold to constants");
      auto shape = tt(x).getShape();
      int64_t rank = int64_t(shape.size());
      SmallVector<int64_t> lo(rank, 0), hi(shape), step(rank, 1), out(shape);
      std::vector<int64_t> starts = ints(*st), ends = ints(*en);
      std::vector<int64_t> axes = ax ? ints(*ax) : std::vector<int64_t>();
      std::vector<int64_t> steps = sp ? ints(*sp) : std::vector<int64_t>();
      for (size_t k = 0; k < starts.size(); ++k) {
        int64_t a = axes.empty() ? int64_t(k) : axes[k];
        if (a < 0)
          a += rank;
        int64_t dim = shape[a];
        auto clampIdx = [&](int64_t v) {
          if (v < -dim)
            return int64_t(0);
          if (v < 0)
            v += dim;
          return std::max<int64_t>(0, std::min(v, dim));
        };
        lo[a] = clampIdx(starts[k]);
        hi[a] = std::max(lo[a], clampIdx(ends[k]));
        step[a] = steps.empty() ? 1 : steps[k];
        if (step[a] < 1)
          return nodeFail(n, "negative or zero slice steps are not supported");
        out[a] = (hi[a] - lo[a] + step[a] - 1) / step[a];
      }
      define(n, SliceOp::create(b, loc, RankedTensorType::get(out, tt(x).getElementType()), x,
                                b.getDenseI64ArrayAttr(lo), b.getDenseI64ArrayAttr(hi),
                                b.getDenseI64ArrayAttr(step)));
      return true;
    }
    if (op == "Sin")
      return unary<SinOp>(n);
    if (op == "Cos")
      return unary<CosOp>(n);
    if (op == "Cast") {
      Value x;
      if (!input(n, 0, x))
        return false;
      if (intAttr(n, "to", 0) == onnx::TensorProto::FLOAT && tt(x).getElementType().isF32()) {
        define(n, x);
        return true;
      }
      return nodeFail(n, "only casts that fold, or float to float, are supported");
    }
    return nodeFail(n, "operator not supported by the ONNX importer yet");
  }

  MLIRContext &ctx;
  OpBuilder b;
  std::string &error;
  Type f32, i64;
  std::string modelDir;
  Location loc = UnknownLoc::get(&ctx);
  OwningOpRef<ModuleOp> module;
  llvm::StringMap<Val> values;
  std::vector<std::pair<std::string, RankedTensorType>> paramValues;
};

} // namespace

OwningOpRef<ModuleOp> importOnnx(MLIRContext &ctx, StringRef path,
                                 StringRef task, ArrayRef<std::string> frozen,
                                 std::string &error) {
  ctx.loadDialect<LoomDialect, func::FuncDialect, arith::ArithDialect>();
  std::ifstream in(path.str(), std::ios::binary);
  if (!in)
    return error = "cannot open '" + path.str() + "': " + std::strerror(errno), nullptr;
  onnx::ModelProto model;
  if (!model.ParseFromIstream(&in))
    return error = "'" + path.str() + "' is not a valid ONNX model (protobuf parse failed)",
           nullptr;
  if (!task.empty() && task != "lm" && task != "classify")
    return error = "unknown --task '" + task.str() + "': expected lm or classify", nullptr;
  Importer imp(ctx, error, llvm::sys::path::parent_path(path).str());
  return imp.run(model, path, task, frozen);
}

} // namespace loom
