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

#include <onnx/onnx_pb.h>

#include <cstring>
#include <fstream>

using namespace mlir;
using namespace mlir::loom;

namespace loom {
namespace {

/// A value during import: an SSA value, or an int64 host constant (shape
/// arithmetic, folded).
struct Val {
  Value v;
  bool isConst = false;
  std::vector<int64_t> ints;
  std::vector<int64_t> shape;
};

class Importer {
public:
  Importer(MLIRContext &ctx, std::string &error)
      : ctx(ctx), b(&ctx), error(error), f32(Float32Type::get(&ctx)),
        i64(IntegerType::get(&ctx, 64)) {}

  OwningOpRef<ModuleOp> run(const onnx::ModelProto &model, StringRef path,
                            StringRef task) {
    const onnx::GraphProto &g = model.graph();
    loc = FileLineColLoc::get(&ctx, path, 0, 0);
    module = ModuleOp::create(loc);
    (*module)->setAttr("loom.model", b.getStringAttr(path));
    b.setInsertionPointToEnd(module->getBody());

    // Initializers: float ones are parameters, int64 ones fold.
    llvm::StringSet<> inits;
    for (const onnx::TensorProto &t : g.initializer()) {
      inits.insert(t.name());
      if (!initializer(t))
        return nullptr;
    }
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
    if (args.size() != 1)
      return fail("the importer expects one data input (token ids or "
                  "features), the model has " + std::to_string(args.size())),
             nullptr;
    if (g.output_size() != 1)
      return fail("the importer expects one output (logits), the model has " +
                  std::to_string(g.output_size())),
             nullptr;
    RankedTensorType in = args[0].second;
    bool lm = task == "lm" || (task.empty() && in.getElementType().isInteger(64) &&
                               in.getRank() == 2);
    RankedTensorType labels = lm ? RankedTensorType::get(in.getShape(), i64)
                                 : RankedTensorType::get(in.getShape().take_front(1), i64);
    auto fn = func::FuncOp::create(b, loc, "forward",
                                   b.getFunctionType({in, labels}, {RankedTensorType::get({}, f32)}));
    Block *entry = fn.addEntryBlock();
    b.setInsertionPointToStart(entry);
    values[args[0].first] = Val{entry->getArgument(0)};
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
    if (lt.getShape().drop_back() != labels.getShape())
      return fail("the output has shape " + shapeStr(lt.getShape()) + ", which a " +
                  (lm ? "language-model" : "classification") +
                  " loss cannot take (expected the input's shape plus a class "
                  "dimension; use --task)"),
             nullptr;
    Value loss = CrossEntropyOp::create(b, loc, RankedTensorType::get({}, f32), logits,
                                        entry->getArgument(1));
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

  bool initializer(const onnx::TensorProto &t) {
    if (t.has_data_location() && t.data_location() == onnx::TensorProto::EXTERNAL)
      return fail("initializer '" + t.name() + "' keeps its data in an external "
                  "file, which this importer does not read yet");
    SmallVector<int64_t> shape(t.dims().begin(), t.dims().end());
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    if (t.data_type() == onnx::TensorProto::INT64) {
      Val v{Value(), true, {}, std::vector<int64_t>(shape.begin(), shape.end())};
      if (!t.raw_data().empty()) {
        v.ints.resize(n);
        std::memcpy(v.ints.data(), t.raw_data().data(), size_t(n) * 8);
      } else {
        v.ints.assign(t.int64_data().begin(), t.int64_data().end());
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
      return nodeFail(n, "input '" + n.input(i) +
                             "' is an integer constant where a tensor is expected");
    out = it->second.v;
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
      const onnx::TensorProto &t = v->t();
      if (t.data_type() == onnx::TensorProto::FLOAT && t.dims_size() == 0) {
        float x = !t.raw_data().empty() ? *reinterpret_cast<const float *>(t.raw_data().data())
                                        : t.float_data(0);
        auto type = RankedTensorType::get({}, f32);
        define(n, arith::ConstantOp::create(b, loc, type, DenseElementsAttr::get(type, x)));
        return true;
      }
      onnx::TensorProto named = t;
      named.set_name(n.output(0));
      if (t.data_type() == onnx::TensorProto::INT64)
        return initializer(named);
      return nodeFail(n, "only scalar float and int64 constants are supported");
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
    return nodeFail(n, "operator not supported by the ONNX importer yet");
  }

  MLIRContext &ctx;
  OpBuilder b;
  std::string &error;
  Type f32, i64;
  Location loc = UnknownLoc::get(&ctx);
  OwningOpRef<ModuleOp> module;
  llvm::StringMap<Val> values;
  std::vector<std::pair<std::string, RankedTensorType>> paramValues;
};

} // namespace

OwningOpRef<ModuleOp> importOnnx(MLIRContext &ctx, StringRef path,
                                 StringRef task, std::string &error) {
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
  Importer imp(ctx, error);
  return imp.run(model, path, task);
}

} // namespace loom
