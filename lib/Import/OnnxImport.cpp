//===- OnnxImport.cpp - ONNX models into loom IR --------------------------===//
//
// Reads a ModelProto with the ONNX project's own protobuf classes (Debian's
// libonnx-dev), turns float initializers into parameters carrying their
// values, int64 tensors (shape arithmetic) into host constants that fold at
// import so the graph is static, and every other node into loom ops. The
// model's output becomes the input of a loss: mean cross-entropy against
// labels (classifiers) or next-token targets (language models).
//
// A model file is untrusted input (people download ONNX models): every
// count, index, shape and size it declares is checked before it is used,
// the work it can cause is bounded (kMaxElements, kMaxFolded), and anything
// unexpected is a one-line error, never a crash.
//
//===----------------------------------------------------------------------===//
#include "loom/Import.h"

#include "dialects/Loom/LoomOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/Sequence.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <onnx/onnx_pb.h>
#include <google/protobuf/unknown_field_set.h>

#include <map>

#include <charconv>
#include <cmath>
#include <limits>
#include <cstring>
#include <fstream>

using namespace mlir;
using namespace mlir::loom;

namespace loom {
namespace {

/// The largest tensor the importer describes, and the largest constant it
/// folds on the host (held as doubles: 512 MiB). A file that declares more
/// is refused before anything is allocated.
constexpr int64_t kMaxElements = int64_t(1) << 40;
constexpr int64_t kMaxFolded = int64_t(1) << 26;
/// The default-domain opsets whose semantics the importer implements:
/// opset 13 moved Squeeze/Unsqueeze/Split axes and ReduceSum's axes to
/// inputs and redefined Softmax over one axis; later opsets up to 23 changed
/// nothing the importer reads, or changed it in ways it handles both of
/// (Split's num_outputs and the Reduce* axes input in 18).
constexpr int64_t kMinOpset = 13, kMaxOpset = 23;

/// The element count of `shape`, or -1 when a dimension is negative or the
/// count exceeds `limit`.
int64_t checkedNumel(ArrayRef<int64_t> shape, int64_t limit) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return -1;
    if (d != 0 && n > limit / d)
      return -1;
    n *= d;
  }
  return n;
}

/// Strides, in elements, at which a row-major tensor of shape `from` is read
/// at the indices of a tensor of rank `rank` (numpy broadcasting: aligned at
/// the last dimension, 0 where `from` has size 1 or no such dimension).
SmallVector<int64_t> broadcastStrides(ArrayRef<int64_t> from, size_t rank) {
  SmallVector<int64_t> st(rank, 0);
  int64_t acc = 1;
  for (size_t k = 0; k < from.size(); ++k) {
    size_t d = from.size() - 1 - k;
    st[rank - 1 - k] = from[d] == 1 ? 0 : acc;
    acc *= from[d];
  }
  return st;
}

/// The offset `strides` give the element at flat index `i` of a row-major
/// tensor of `shape`.
int64_t offsetAt(int64_t i, ArrayRef<int64_t> shape, ArrayRef<int64_t> strides) {
  int64_t off = 0;
  for (size_t k = shape.size(); k-- > 0;) {
    off += (i % shape[k]) * strides[k];
    i /= shape[k];
  }
  return off;
}

/// Inputs and outputs each operator takes (ONNX's arity, optional inputs
/// included); nodes are checked against it before anything reads them. It
/// is also the supported-operator table (`loomc --list-onnx-operators`,
/// docs/generated/onnx-operators.md): `how` says what becomes of the node.
struct Arity {
  StringRef op;
  int minIn, maxIn, minOut, maxOut;
  StringRef how;
};
constexpr int kMany = std::numeric_limits<int>::max();
constexpr StringRef kFolds = "folds on the host (constant inputs only)";
constexpr StringRef kIntLogic =
    "folds on constants; on integer or boolean tensors computed on the device, int64 1/0 "
    "(loom.eq, ne, lt, le; Not 1 - x, And x * y, Or max)";
constexpr Arity kArity[] = {
    {"Add", 2, 2, 1, 1, "loom.add (broadcasting); folds on constants"},
    {"And", 2, 2, 1, 1, kIntLogic},
    {"Attention", 3, 6, 1, 4, "loom.attention (opset 23; 4-D, causal or unmasked, key/value heads repeated)"},
    {"Cast", 1, 1, 1, 1, "float to float, integer to integer: the identity (device integers are int64); integer to bool: x != 0; integer to float, float to integer: loom.cast; folds on constants"},
    {"CastLike", 2, 2, 1, 1, "as Cast, to the second input's type"},
    {"Concat", 1, kMany, 1, 1, "loom.concat; folds on constants"},
    {"Constant", 0, 0, 1, 1, "tensor constants (float, int64, bool), value_int(s), value_float(s)"},
    {"ConstantOfShape", 1, 1, 1, 1, kFolds},
    {"Cos", 1, 1, 1, 1, "loom.cos; folds on constants"},
    {"CumSum", 2, 2, 1, 1, "loom.cumsum (constant axis; floats and device integers); folds on constants"},
    {"Div", 2, 2, 1, 1, "loom.div; folds on constants"},
    {"Dropout", 1, 3, 1, 2,
     "loom.dropout in training mode (a counter-based mask per step; --dropout=off: the "
     "identity); the identity in inference mode or at ratio 0; the mask output is not "
     "computed"},
    {"Equal", 2, 2, 1, 1, kIntLogic},
    {"Erf", 1, 1, 1, 1, "loom.erf"},
    {"Exp", 1, 1, 1, 1, "loom.exp"},
    {"Expand", 2, 2, 1, 1, "loom.broadcast_to (the shape must be constant)"},
    {"Gather", 2, 2, 1, 1, "loom.embedding (axis 0 of a table); folds on constants"},
    {"GatherElements", 2, 2, 1, 1, "folds on constants; at computed indices, of a constant whose elements are all equal: that value"},
    {"GatherND", 2, 2, 1, 1, "loom.embedding of the rows the constant indices address; folds on constants"},
    {"Gelu", 1, 1, 1, 1, "loom.gelu (approximate none or tanh)"},
    {"Gemm", 2, 3, 1, 1, "loom.matmul (+ bias); alpha and beta 1"},
    {"Greater", 2, 2, 1, 1, kIntLogic},
    {"GreaterOrEqual", 2, 2, 1, 1, kIntLogic},
    {"Identity", 1, 1, 1, 1, "the identity"},
    {"IsNaN", 1, 1, 1, 1,
     "only as scaled_dot_product_attention's guard Where(IsNaN(p), 0, p) after a Softmax: p"},
    {"LayerNormalization", 2, 3, 1, 3,
     "loom.layer_norm (last axis; a constant scale or bias repeated over rows is taken once)"},
    {"Less", 2, 2, 1, 1, kIntLogic},
    {"LessOrEqual", 2, 2, 1, 1, kIntLogic},
    {"Log", 1, 1, 1, 1, "loom.log"},
    {"LogSoftmax", 1, 1, 1, 1, "loom.softmax log (last axis)"},
    {"MatMul", 2, 2, 1, 1, "loom.matmul (batched, broadcast)"},
    {"Max", 1, 2, 1, 1, "loom.max (two inputs; of one, the input); folds on constants"},
    {"Min", 1, 2, 1, 1, "loom.min (two inputs; of one, the input); folds on constants"},
    {"Mul", 2, 2, 1, 1, "loom.mul; folds on constants"},
    {"Neg", 1, 1, 1, 1, "loom.neg; folds on constants"},
    {"Not", 1, 1, 1, 1, kIntLogic},
    {"Or", 2, 2, 1, 1, kIntLogic},
    {"Pow", 2, 2, 1, 1, "loom.pow; folds on constants"},
    {"RMSNormalization", 2, 2, 1, 1, "loom.rms_norm (opset 23; last axis)"},
    {"Range", 3, 3, 1, 1, kFolds},
    {"Reciprocal", 1, 1, 1, 1, "1 / x (loom.div); folds on constants"},
    {"ReduceMean", 1, 2, 1, 1, "loom.reduce mean"},
    {"ReduceSum", 1, 2, 1, 1, "loom.reduce sum"},
    {"Relu", 1, 1, 1, 1, "loom.relu"},
    {"Reshape", 2, 2, 1, 1, "loom.reshape (constant shape); folds on constants"},
    {"SequenceAt", 2, 2, 1, 1, "a piece of SplitToSequence (constant position)"},
    {"Shape", 1, 1, 1, 1, "folds (shapes are static)"},
    {"Sigmoid", 1, 1, 1, 1, "loom.sigmoid"},
    {"Sin", 1, 1, 1, 1, "loom.sin; folds on constants"},
    {"Slice", 3, 5, 1, 1, "loom.slice (any step > 0); folds on constants"},
    {"Softmax", 1, 1, 1, 1, "loom.softmax (last axis)"},
    {"Split", 1, 2, 1, kMany, "loom.slice per output"},
    {"SplitToSequence", 1, 2, 1, 1, "loom.slice per piece, read by SequenceAt"},
    {"Sqrt", 1, 1, 1, 1, "loom.sqrt; folds on constants"},
    {"Squeeze", 1, 2, 1, 1, "loom.reshape; folds on constants"},
    {"Sub", 2, 2, 1, 1, "loom.sub; folds on constants"},
    {"Tanh", 1, 1, 1, 1, "loom.tanh"},
    {"Transpose", 1, 1, 1, 1, "loom.transpose"},
    {"Trilu", 1, 2, 1, 1, kFolds},
    {"Unsqueeze", 1, 2, 1, 1, "loom.reshape; folds on constants"},
    {"Where", 3, 3, 1, 1, "loom.select; folds on constants"},
};

/// The `metadata_props` of an ONNX ValueInfoProto (field 4 since ONNX 1.16,
/// newer than Debian's onnx.proto, so read from the message's unknown
/// fields): PyTorch's exporter records there whether a value was a
/// parameter or a buffer (pkg.torch.export.graph_signature.InputSpec.kind)
/// and what a folded initializer was folded from
/// (pkg.onnxscript.optimizer.folded_from).
/// NodeProto has its own (field 9): the PyTorch source line a node came
/// from (pkg.torch.onnx.stack_trace).
std::map<std::string, std::string> unknownMetadata(const google::protobuf::Message &m,
                                                   int field) {
  std::map<std::string, std::string> out;
  const google::protobuf::UnknownFieldSet &u = m.GetReflection()->GetUnknownFields(m);
  for (int i = 0; i < u.field_count(); ++i) {
    const google::protobuf::UnknownField &f = u.field(i);
    if (f.number() != field || f.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
      continue;
    onnx::StringStringEntryProto e;
    if (e.ParseFromString(f.length_delimited()))
      out[e.key()] = e.value();
  }
  return out;
}
std::map<std::string, std::string> valueMetadata(const onnx::ValueInfoProto &v) {
  return unknownMetadata(v, 4);
}

/// " (PyTorch: FILE:LINE: CODE)" for the innermost frame of the stack trace
/// PyTorch's dynamo exporter records on a node, "" without one.
std::string pytorchSource(const onnx::NodeProto &n) {
  std::map<std::string, std::string> meta = unknownMetadata(n, 9);
  auto it = meta.find("pkg.torch.onnx.stack_trace");
  if (it == meta.end())
    return "";
  StringRef trace = it->second;
  size_t at = trace.rfind("File \"");
  if (at == StringRef::npos)
    return "";
  StringRef frame = trace.drop_front(at + 6);
  StringRef file = frame.take_until([](char c) { return c == '"'; });
  size_t lineAt = frame.find(", line ");
  if (lineAt == StringRef::npos)
    return "";
  StringRef line = frame.drop_front(lineAt + 7).take_while([](char c) { return isdigit(c); });
  StringRef code = frame.drop_until([](char c) { return c == '\n'; }).trim();
  std::string out = " (PyTorch: " + llvm::sys::path::filename(file).str() + ":" + line.str();
  if (!code.empty())
    out += ": " + code.take_front(160).str();
  return out + ")";
}

/// GatherND: the row-major offset of the index tuple `tuple` (one index
/// per dimension of `dims`, negative ones counted from the end) into
/// `off`; a message naming the first index out of range, else "".
std::string tupleOffset(ArrayRef<int64_t> dims, const int64_t *tuple, int64_t &off) {
  off = 0;
  for (size_t d = 0; d < dims.size(); ++d) {
    int64_t len = dims[d], j = tuple[d];
    if (j < -len || j >= len)
      return "index " + std::to_string(j) + " is out of range for " + std::to_string(len) +
             " elements";
    off = off * len + (j < 0 ? j + len : j);
  }
  return "";
}

/// The names in a folded_from value: a Python list of quoted strings.
std::vector<std::string> foldedFrom(StringRef text) {
  std::vector<std::string> names;
  while (true) {
    size_t a = text.find('\'');
    if (a == StringRef::npos)
      break;
    size_t e = text.find('\'', a + 1);
    if (e == StringRef::npos)
      break;
    names.push_back(text.substr(a + 1, e - a - 1).str());
    text = text.drop_front(e + 1);
  }
  return names;
}

/// A value during import: an SSA value, or a host constant that folds
/// (shape arithmetic, masks, small constants), materialised as an
/// arith.constant only when an op needs it as a tensor.
struct Val {
  Value v;
  bool isConst = false;
  int elem = 0; // onnx::TensorProto data type of a constant
  std::vector<double> data;
  std::vector<int64_t> shape;
  // IsNaN(nanOf): only SDPA's guard Where(IsNaN(p), 0, p) takes it.
  std::string nanOf;
  // An output the importer does not compute (Dropout's mask): an error
  // saying this if a node uses it.
  std::string refuse;
  // A sequence (SplitToSequence's output): its tensors, read by SequenceAt.
  bool isSeq = false;
  std::vector<Value> seq;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
};

class Importer {
public:
  bool dropoutOff = false;   // loomc --dropout=off
  bool weightValues = true;  // OnnxImportOptions::weightValues
  Importer(MLIRContext &ctx, std::string &error, std::string modelDir)
      : ctx(ctx), b(&ctx), error(error), f32(Float32Type::get(&ctx)),
        i64(IntegerType::get(&ctx, 64)), modelDir(std::move(modelDir)) {}

  OwningOpRef<ModuleOp> run(const onnx::ModelProto &model, StringRef path,
                            StringRef task, ArrayRef<std::string> frozen) {
    const onnx::GraphProto &g = model.graph();
    loc = fileLoc = FileLineColLoc::get(&ctx, path, 0, 0);
    opset = -1;
    for (const onnx::OperatorSetIdProto &o : model.opset_import())
      if (o.domain().empty() || o.domain() == "ai.onnx")
        opset = o.version();
    if (opset < kMinOpset || opset > kMaxOpset)
      return fail("the model " +
                  (opset < 0 ? std::string("declares no opset of the default ONNX domain")
                             : "uses opset " + std::to_string(opset)) +
                  "; the importer implements opsets " + std::to_string(kMinOpset) + " to " +
                  std::to_string(kMaxOpset) +
                  " (export again with torch.onnx.export(..., opset_version=17))"),
             nullptr;
    module = ModuleOp::create(loc);
    (*module)->setAttr(LoomDialect::ModelAttrHelper::getNameStr(), b.getStringAttr(path));
    b.setInsertionPointToEnd(module->getBody());

    // Initializers: float ones are parameters, int64 ones fold. ONNX does
    // not tell parameters from buffers (both are initializers): frozen ones
    // are constants, as ONNX Runtime training's frozen_params.
    llvm::StringSet<> inits, frozenSet;
    for (const std::string &f : frozen)
      frozenSet.insert(f);
    // What PyTorch's exporter recorded about each value (none for other
    // exporters): parameters and buffers, and what folded initializers
    // were folded from.
    llvm::StringMap<std::map<std::string, std::string>> meta;
    for (const auto *list : {&g.value_info(), &g.input(), &g.output()})
      for (const onnx::ValueInfoProto &v : *list)
        if (auto m = valueMetadata(v); !m.empty())
          meta[v.name()] = std::move(m);
    auto kindOf = [&](StringRef name) -> std::string {
      auto it = meta.find(name);
      if (it == meta.end())
        return "";
      auto k = it->second.find("pkg.torch.export.graph_signature.InputSpec.kind");
      return k == it->second.end() ? "" : k->second;
    };
    // A buffer, or a tensor folded from buffers and constants only, is not
    // trained (as --frozen); one folded from a parameter is trained as its
    // own tensor, which is not what PyTorch trains: said once per model.
    auto constantKind = [](StringRef kind) { return kind == "BUFFER" || kind == "CONSTANT_TENSOR"; };
    size_t autoFrozen = 0;
    for (const onnx::TensorProto &t : g.initializer()) {
      if (t.data_type() != onnx::TensorProto::FLOAT || frozenSet.contains(t.name()))
        continue;
      std::vector<std::string> sources;
      if (auto it = meta.find(t.name()); it != meta.end())
        if (auto ff = it->second.find("pkg.onnxscript.optimizer.folded_from");
            ff != it->second.end())
          sources = foldedFrom(ff->second);
      if (constantKind(kindOf(t.name()))) {
        frozenSet.insert(t.name());
        ++autoFrozen;
        continue;
      }
      if (sources.empty())
        continue;
      // The module tensors it was computed from: module-path names
      // (m.layers.0.weight) the exporter does not call buffers or
      // constants; lifted constants and FX temporaries (arange, val_3) are
      // not module tensors.
      std::vector<std::string> tensors;
      for (const std::string &src : sources) {
        if (constantKind(kindOf(src)) || !StringRef(src).contains('.') ||
            StringRef(src).contains("lifted_tensor"))
          continue;
        tensors.push_back(src);
      }
      if (tensors.empty()) { // from constants only (masks)
        frozenSet.insert(t.name());
        ++autoFrozen;
      } else if (sources.size() > 1) {
        // Computed from a module tensor (a rotary table from inv_freq,
        // Gemma's 1 + weight): a re-laid-out copy of one tensor (one
        // source: a transpose) trains as that tensor, anything else does
        // not, and the file does not say whether the tensor was a buffer.
        foldedFromParams.push_back({t.name(), tensors.front()});
      }
    }
    if (autoFrozen)
      llvm::errs() << "loomc: note: " << autoFrozen
                   << " initializer(s) are buffers or folded from buffers by the exporter "
                      "(its pkg.torch metadata): constants, not trained\n";

    for (const onnx::TensorProto &t : g.initializer()) {
      if (t.name().empty() || !inits.insert(t.name()).second)
        return fail("initializer '" + t.name() + "' is " +
                    (t.name().empty() ? "unnamed" : "defined twice")),
               nullptr;
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
      if (in.name().empty() || values.count(in.name()))
        return fail("graph input '" + in.name() + "' is " +
                    (in.name().empty() ? "unnamed" : "defined twice")),
               nullptr;
      values[in.name()] = Val{};
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
    if (declared && checkedNumel(labelShape, kMaxElements) < 0)
      return fail("the output '" + g.output(0).name() + "' declares a negative or too large "
                  "shape"),
             nullptr;
    if (!declared && !lm && in.getRank() < 1)
      return fail("the input '" + args[0].first + "' is a scalar; a classifier's input needs a "
                  "batch dimension (or declare the output's shape)"),
             nullptr;
    if (!declared)
      labelShape.assign(in.getShape().begin(),
                        lm ? in.getShape().end() : in.getShape().begin() + 1);
    RankedTensorType labels = RankedTensorType::get(labelShape, i64);
    SmallVector<Type> argTypes;
    for (auto &a : args)
      argTypes.push_back(a.second);
    argTypes.push_back(labels);
    // The arguments' names, for the training binary's data files: the
    // model's inputs as the file names them, then the loss's labels.
    SmallVector<Attribute> names;
    for (auto &a : args)
      names.push_back(b.getStringAttr(a.first));
    names.push_back(b.getStringAttr(lm ? "targets" : "labels"));
    (*module)->setAttr(LoomDialect::InputNamesAttrHelper::getNameStr(), b.getArrayAttr(names));
    auto fn = func::FuncOp::create(b, loc, LoomDialect::kForward,
                                   b.getFunctionType(argTypes, {RankedTensorType::get({}, f32)}));
    Block *entry = fn.addEntryBlock();
    b.setInsertionPointToStart(entry);
    for (auto [i, a] : llvm::enumerate(args))
      values[a.first] = Val{entry->getArgument(i)};
    Value labelArg = entry->getArgument(args.size());
    llvm::StringMap<std::string> tiedTo = retieTransposes(*module);
    // Computed by the exporter from a module tensor, and not a transposed
    // copy re-tied above: trained as a tensor of its own. Said, not
    // silently trained.
    llvm::erase_if(foldedFromParams, [&](auto &f) { return tiedTo.count(f.first) > 0; });
    if (!foldedFromParams.empty())
      llvm::errs() << "loomc: warning: " << foldedFromParams.size()
                   << " initializer(s) were computed by the exporter's optimizer from module "
                      "tensors and will be trained as they are ("
                   << foldedFromParams.front().first << " from " << foldedFromParams.front().second
                   << (foldedFromParams.size() > 1 ? ", ..." : "")
                   << "): pass the ones computed from buffers to --frozen (rotary tables), and "
                      "export with torch.onnx.export(..., optimize=False) to train parameters "
                      "as PyTorch does\n";
    for (auto &[name, value] : paramValues)
      if (!tiedTo.count(name))
        values[name] = Val{LoadOp::create(b, loc, value, FlatSymbolRefAttr::get(&ctx, name))};
    for (auto &[name, value] : paramValues)
      if (auto it = tiedTo.find(name); it != tiedTo.end())
        values[name] = Val{TransposeOp::create(b, loc, value, values[it->second].v,
                                               b.getDenseI64ArrayAttr({1, 0}))};

    for (const onnx::NodeProto &node : g.node())
      if (!convert(node))
        return nullptr;
    loc = fileLoc; // the loss is the importer's, not a node's

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
    return fail("node '" + n.name() + "' (" + n.op_type() + "): " + msg + pytorchSource(n));
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
    if (checkedNumel(shape, kMaxElements) < 0)
      return fail("input '" + v.name() + "' has shape " + shapeStr(shape) +
                  ", which is negative or too large");
    Type elt = tt.elem_type() == onnx::TensorProto::FLOAT   ? Type(f32)
               : tt.elem_type() == onnx::TensorProto::INT64 ? Type(i64)
                                                            : Type();
    if (!elt)
      return fail("input '" + v.name() + "' has element type " +
                  std::to_string(tt.elem_type()) + "; expected float or int64");
    out = RankedTensorType::get(shape, elt);
    return true;
  }

  /// Reads an initializer's external data: only regular files inside the
  /// model's own folder, as the ONNX spec asks. The location is resolved
  /// (symbolic links included) and must stay under the folder's resolved
  /// path: a link to /etc/passwd, or through a linked directory, is refused.
  bool readExternal(onnx::TensorProto &t) {
    std::string location;
    uint64_t offset = 0, length = 0;
    bool hasLength = false;
    for (const auto &kv : t.external_data()) {
      uint64_t *field = kv.key() == "offset" ? &offset : kv.key() == "length" ? &length : nullptr;
      if (kv.key() == "location") {
        location = kv.value();
      } else if (field) {
        // Decimal digits only: "abc", "-1" or "1e3" are not byte counts.
        if (kv.value().empty() || kv.value().size() > 19 ||
            kv.value().find_first_not_of("0123456789") != std::string::npos ||
            StringRef(kv.value()).getAsInteger(10, *field))
          return fail("initializer '" + t.name() + "' has external data " + kv.key() + " '" +
                      kv.value() + "'; expected a non-negative decimal byte count");
        hasLength |= field == &length;
      }
    }
    if (location.empty())
      return fail("initializer '" + t.name() + "' is external but names no file");
    if (location[0] == '/' || StringRef(location).contains("..") ||
        location.find('\0') != std::string::npos)
      return fail("initializer '" + t.name() + "' points outside the model's folder ('" +
                  location + "'); external data is read only from that folder");
    std::string file = (modelDir.empty() ? "." : modelDir) + "/" + location;
    SmallString<256> dirReal, fileReal;
    if (std::error_code ec = llvm::sys::fs::real_path(modelDir.empty() ? "." : modelDir, dirReal))
      return fail("cannot resolve the model's folder '" + modelDir + "': " + ec.message());
    if (std::error_code ec = llvm::sys::fs::real_path(file, fileReal))
      return fail("cannot open external data '" + file + "' of initializer '" + t.name() +
                  "': " + ec.message());
    if (!StringRef(fileReal).starts_with(dirReal.str().str() + "/"))
      return fail("initializer '" + t.name() + "' points outside the model's folder ('" +
                  location + "' resolves to '" + fileReal.str().str() +
                  "'); external data is read only from that folder");
    if (!llvm::sys::fs::is_regular_file(fileReal))
      return fail("external data '" + file + "' of initializer '" + t.name() +
                  "' is not a regular file");
    std::ifstream in(fileReal.str().str(), std::ios::binary);
    if (!in)
      return fail("cannot open external data '" + file + "' of initializer '" + t.name() +
                  "': " + std::strerror(errno));
    in.seekg(0, std::ios::end);
    uint64_t size = uint64_t(std::max<std::streamoff>(0, in.tellg()));
    if (offset > size || (hasLength && length > size - offset))
      return fail("external data of '" + t.name() + "' lies outside '" + file + "' (offset " +
                  std::to_string(offset) + ", length " + std::to_string(length) + ", file " +
                  std::to_string(size) + " bytes)");
    if (!hasLength)
      length = size - offset;
    // The bytes must also be what the tensor's shape asks for (checked
    // before reading, so a huge length costs nothing).
    int64_t n = checkedNumel(SmallVector<int64_t>(t.dims().begin(), t.dims().end()), kMaxElements);
    size_t es = elementBytes(t.data_type());
    if (n < 0 || es == 0 || length != uint64_t(n) * es)
      return fail("external data of '" + t.name() + "' holds " + std::to_string(length) +
                  " bytes; its shape and element type ask for " +
                  (n < 0 || es == 0 ? std::string("an invalid size")
                                    : std::to_string(uint64_t(n) * es)));
    std::string bytes(size_t(length), '\0');
    in.seekg(std::streamoff(offset));
    in.read(bytes.data(), std::streamsize(length));
    if (!in || uint64_t(in.gcount()) != length)
      return fail("cannot read " + std::to_string(length) + " bytes of external data '" + file +
                  "' for initializer '" + t.name() + "'");
    t.set_raw_data(std::move(bytes));
    return true;
  }

  /// Bytes per element of the tensor types the importer reads; 0 otherwise.
  static size_t elementBytes(int type) {
    switch (type) {
    case onnx::TensorProto::FLOAT: return 4;
    case onnx::TensorProto::INT64: return 8;
    case onnx::TensorProto::BOOL: return 1;
    default: return 0;
    }
  }
  /// Values in the typed field of a tensor of the importer's types.
  static int64_t typedCount(const onnx::TensorProto &t) {
    return t.data_type() == onnx::TensorProto::INT64  ? t.int64_data_size()
           : t.data_type() == onnx::TensorProto::BOOL ? t.int32_data_size()
                                                      : t.float_data_size();
  }
  /// Whether `t` holds exactly `n` elements, raw or typed.
  static bool holds(const onnx::TensorProto &t, int64_t n) {
    return t.raw_data().empty() ? typedCount(t) == n
                                : t.raw_data().size() == size_t(n) * elementBytes(t.data_type());
  }
  /// Element `i` of `t` (holds() checked), raw or typed.
  static double elementAt(const onnx::TensorProto &t, int64_t i) {
    const std::string &raw = t.raw_data();
    if (t.data_type() == onnx::TensorProto::BOOL)
      return raw.empty() ? double(t.int32_data(int(i)) != 0) : double(raw[size_t(i)] != 0);
    if (t.data_type() == onnx::TensorProto::INT64) {
      int64_t x;
      if (raw.empty())
        x = t.int64_data(int(i));
      else
        std::memcpy(&x, raw.data() + i * 8, 8);
      return double(x);
    }
    float x;
    if (raw.empty())
      x = t.float_data(int(i));
    else
      std::memcpy(&x, raw.data() + i * 4, 4);
    return x;
  }

  bool initializer(const onnx::TensorProto &t, bool asConstant = false) {
    int elem = t.data_type();
    if (elementBytes(elem) == 0)
      return fail("initializer '" + t.name() + "' has element type " + std::to_string(elem) +
                  "; expected float, int64 or bool");
    bool external = t.has_data_location() && t.data_location() == onnx::TensorProto::EXTERNAL;
    if (external && !weightValues && elem == onnx::TensorProto::FLOAT && !asConstant &&
        t.dims_size() > 0) {
      // --init=random: the parameter's shape is enough; its data is not
      // read (the file need not exist).
      SmallVector<int64_t> shape(t.dims().begin(), t.dims().end());
      if (checkedNumel(shape, kMaxElements) < 0)
        return fail("initializer '" + t.name() + "' has shape " + shapeStr(shape) +
                    ", which is negative or larger than the importer takes");
      auto type = RankedTensorType::get(shape, f32);
      auto p = ParamOp::create(b, loc, b.getStringAttr(t.name()), TypeAttr::get(type),
                               InitAttr(), ElementsAttr());
      p.setInitAttr(defaultInitFor(p));
      paramValues.push_back({t.name(), type});
      if (!notedShapesOnly)
        llvm::errs() << "loomc: note: --init=random: parameters in external data are declared "
                        "from their shapes; the data files are not read\n";
      notedShapesOnly = true;
      return true;
    }
    if (external) {
      onnx::TensorProto loaded = t;
      if (!readExternal(loaded))
        return false;
      loaded.clear_data_location();
      loaded.clear_external_data();
      return initializer(loaded, asConstant);
    }
    SmallVector<int64_t> shape(t.dims().begin(), t.dims().end());
    // A scalar (rank-0) initializer is a constant: PyTorch's dynamo exporter
    // lifts literals into them (val_7 = 0.5, a Pow's exponent 3.0), and no
    // module parameter has rank 0 (nn.Parameter(torch.zeros(1)) is [1]).
    // Trained, an exponent's gradient x^p·log x is NaN for negative x.
    bool folds = elem != onnx::TensorProto::FLOAT || asConstant || shape.empty();
    int64_t n = checkedNumel(shape, folds ? kMaxFolded : kMaxElements);
    if (n < 0)
      return fail("initializer '" + t.name() + "' has shape " + shapeStr(shape) +
                  ", which is negative or larger than the importer takes" +
                  (folds ? " for a constant (" + std::to_string(kMaxFolded) + " elements)"
                         : std::string()));
    // The data must be exactly what the shape asks for, in one of the two
    // encodings, before anything is allocated for it.
    const std::string &raw = t.raw_data();
    if (!holds(t, n))
      return fail("initializer '" + t.name() + "' holds " +
                  (raw.empty() ? std::to_string(typedCount(t)) + " values"
                               : std::to_string(raw.size()) + " bytes") +
                  " for " + std::to_string(n) + " elements of shape " + shapeStr(shape));
    if (folds) {
      Val v;
      v.isConst = true;
      v.elem = elem;
      v.shape.assign(shape.begin(), shape.end());
      v.data.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i)
        v.data[i] = elementAt(t, i);
      values[t.name()] = v;
      return true;
    }
    std::vector<float> data(static_cast<size_t>(n));
    if (!raw.empty())
      std::memcpy(data.data(), raw.data(), size_t(n) * 4);
    else
      std::copy(t.float_data().begin(), t.float_data().end(), data.begin());
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

  /// PyTorch's dynamo exporter folds the transpose of a weight into a new
  /// initializer (`val_228` = lm_head.weight^T for the output projection),
  /// which splits a tied embedding (GPT-2, OPT: one parameter used by the
  /// lookup and, transposed, by the head) into two parameters that would be
  /// trained apart. A 2-D float parameter exactly equal to the transpose of
  /// another is that other one, transposed: its declaration goes and its
  /// uses read the transpose. Returns folded name -> kept name.
  llvm::StringMap<std::string> retieTransposes(ModuleOp module) {
    llvm::StringMap<std::string> tiedTo;
    SmallVector<ParamOp> twoD;
    for (ParamOp p : module.getOps<ParamOp>()) {
      auto v = dyn_cast_or_null<DenseElementsAttr>(p.getValueAttr());
      if (p.getType().getRank() == 2 && v && !v.isSplat())
        twoD.push_back(p);
    }
    // The folded copy comes after the weight it was folded from.
    llvm::SetVector<ParamOp> folds;
    for (ParamOp folded : llvm::reverse(twoD)) {
      ArrayRef<int64_t> fs = folded.getType().getShape();
      auto fv = cast<DenseElementsAttr>(folded.getValueAttr()).getValues<float>();
      for (ParamOp kept : twoD) {
        ArrayRef<int64_t> ks = kept.getType().getShape();
        if (kept == folded || folds.contains(kept) || tiedTo.count(kept.getSymName()) ||
            ks[0] != fs[1] || ks[1] != fs[0])
          continue;
        auto kv = cast<DenseElementsAttr>(kept.getValueAttr()).getValues<float>();
        bool same = true;
        for (int64_t i = 0; i < fs[0] && same; ++i)
          for (int64_t j = 0; j < fs[1] && same; ++j)
            same = fv[i * fs[1] + j] == kv[j * ks[1] + i];
        if (!same)
          continue;
        llvm::errs() << "loomc: note: initializer '" << folded.getSymName()
                     << "' is the transpose of '" << kept.getSymName()
                     << "' (a weight the exporter folded); training them as one parameter\n";
        tiedTo[folded.getSymName()] = kept.getSymName().str();
        folds.insert(folded);
        break;
      }
    }
    // Erased only now: the loops above still read every declaration.
    for (ParamOp p : folds)
      p.erase();
    return tiedTo;
  }

  //===--------------------------------------------------------------===//
  // Nodes
  //===--------------------------------------------------------------===//

  //===--------------------------------------------------------------===//
  // Shape rules shared by folding and conversion, each checking what the
  // file declares (axes in range, sizes that add up) before using it.
  //===--------------------------------------------------------------===//

  /// `axis` in [-rank, rank) made non-negative.
  bool normAxis(const onnx::NodeProto &n, int64_t &axis, int64_t rank) {
    if (axis < -rank || axis >= rank)
      return nodeFail(n, "axis " + std::to_string(axis) + " is out of range for rank " +
                             std::to_string(rank));
    if (axis < 0)
      axis += rank;
    return true;
  }
  /// Distinct axes in range, made non-negative.
  bool normAxes(const onnx::NodeProto &n, std::vector<int64_t> &axes, int64_t rank) {
    for (int64_t &a : axes)
      if (!normAxis(n, a, rank))
        return false;
    std::vector<int64_t> sorted = axes;
    llvm::sort(sorted);
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
      return nodeFail(n, "repeats an axis");
    return true;
  }
  /// An optional input that must fold to a constant when it is given:
  /// `out` is null when absent; a named input that is undefined or computed
  /// is an error, never "no value".
  bool optionalConst(const onnx::NodeProto &n, int i, const Val *&out, StringRef what) {
    out = nullptr;
    if (i >= n.input_size() || n.input(i).empty())
      return true;
    if (!values.count(n.input(i)))
      return nodeFail(n, what.str() + " input '" + n.input(i) + "' is not defined");
    if (!(out = constInput(n, i)))
      return nodeFail(n, what.str() + " input '" + n.input(i) + "' does not fold to a constant");
    return true;
  }
  /// ONNX Reshape's target (a 1-d constant): 0 copies the input's
  /// dimension, one -1 is inferred; the element count must be preserved.
  bool reshapeTarget(const onnx::NodeProto &n, ArrayRef<int64_t> in, const Val &target,
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
  /// Unsqueeze inserts 1s at `axes` of the output; Squeeze drops `axes`
  /// (which must be 1s), or every 1 when no axes are given.
  bool squeezeShape(const onnx::NodeProto &n, bool unsqueeze, std::vector<int64_t> axes,
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
  /// ONNX Slice's starts/ends/axes/steps on `shape`, clamped as the spec
  /// says, into per-dimension [lo, hi) with steps >= 1 and the result shape.
  bool sliceBounds(const onnx::NodeProto &n, ArrayRef<int64_t> shape, const Val &starts,
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
      out.push_back((hi[d] - lo[d] + step[d] - 1) / step[d]);
    return true;
  }
  /// A folded result must stay small enough to hold on the host.
  bool foldable(const onnx::NodeProto &n, ArrayRef<int64_t> shape) {
    if (checkedNumel(shape, kMaxFolded) < 0)
      return nodeFail(n, "folds to a constant of shape " + shapeStr(shape) +
                             ", which is negative or larger than the importer folds (" +
                             std::to_string(kMaxFolded) + " elements)");
    return true;
  }

  /// Folds `n` over host constants; nullopt (and error set) when it cannot.
  /// nullopt with `bad` false: not foldable, convert it instead; with
  /// `bad` set: the node is invalid (error set). checkNode has run, so the
  /// required inputs exist and (allConst) are constants.
  std::optional<Val> fold(const onnx::NodeProto &n, bool &bad) {
    const std::string &op = n.op_type();
    auto in = [&](int i) -> const Val & { return *constInput(n, i); };
    auto invalid = [&](const std::string &msg) -> std::optional<Val> {
      bad = true;
      nodeFail(n, msg);
      return std::nullopt;
    };
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
        return bad = true, std::nullopt;
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
    if (op == "Unsqueeze" || op == "Squeeze") {
      r = in(0);
      const Val *axesC;
      if (!optionalConst(n, 1, axesC, "axes"))
        return bad = true, std::nullopt;
      if (!squeezeShape(n, op == "Unsqueeze", axesC ? ints(*axesC) : intsAttr(n, "axes"), r.shape))
        return bad = true, std::nullopt;
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
        return bad = true, std::nullopt;
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
        return bad = true, std::nullopt;
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
        return bad = true, std::nullopt;
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
        return bad = true, std::nullopt;
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
    if (op == "Trilu") {
      // A causal mask built in forward (torch.tril of ones): keep the band
      // j - i >= k (upper) or j - i <= k (lower) of the last two dims.
      r = in(0);
      const Val *kC;
      if (!optionalConst(n, 1, kC, "k"))
        return bad = true, std::nullopt;
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
    if (op == "Reshape") {
      r = in(0);
      std::vector<int64_t> shape;
      if (!reshapeTarget(n, r.shape, in(1), shape))
        return bad = true, std::nullopt;
      r.shape = shape;
      return r;
    }
    if (op == "Slice") {
      const Val &data = in(0);
      const Val *axesC, *stepsC;
      if (!optionalConst(n, 3, axesC, "axes") || !optionalConst(n, 4, stepsC, "steps"))
        return bad = true, std::nullopt;
      SmallVector<int64_t> lo, hi, st, out;
      if (!sliceBounds(n, data.shape, in(1), in(2), axesC, stepsC, lo, hi, st, out))
        return bad = true, std::nullopt;
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
    if (op == "ConstantOfShape") {
      if (in(0).shape.size() != 1)
        return invalid("the shape must be 1-d");
      std::vector<int64_t> shape = ints(in(0));
      if (!foldable(n, shape))
        return bad = true, std::nullopt;
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
    if (!it->second.refuse.empty())
      return nodeFail(n, it->second.refuse);
    if (it->second.isSeq)
      return nodeFail(n, "input '" + n.input(i) +
                             "' is a sequence (SplitToSequence); the importer reads sequences "
                             "only with SequenceAt at constant positions");
    if (!it->second.nanOf.empty())
      return nodeFail(n, "IsNaN is supported only as scaled_dot_product_attention exports it: "
                         "Where(IsNaN(p), 0, p) on a Softmax output p");
    if (!it->second.v)
      it->second.v = materialize(it->second);
    out = it->second.v;
    return true;
  }

  /// ONNX's integer element types: all int64 in Loom (values are kept; a
  /// narrowing cast does not wrap).
  static bool isIntElem(int e) {
    using TP = onnx::TensorProto;
    return e == TP::INT8 || e == TP::UINT8 || e == TP::INT16 || e == TP::UINT16 ||
           e == TP::INT32 || e == TP::UINT32 || e == TP::INT64 || e == TP::UINT64;
  }

  Value materialize(const Val &c) {
    Type elt = isIntElem(c.elem)                   ? Type(i64)
               : c.elem == onnx::TensorProto::BOOL ? Type(b.getI1Type())
                                                   : Type(f32);
    auto type = RankedTensorType::get(c.shape, elt);
    DenseElementsAttr attr;
    // Folding computes in doubles: a folded integer division by zero or an
    // overflowing product is out of the element type's range, and converting
    // it is undefined; integers saturate (ints()), floats go to +-inf.
    if (isIntElem(c.elem)) {
      std::vector<int64_t> d = ints(c);
      attr = DenseElementsAttr::get(type, ArrayRef<int64_t>(d));
    } else if (c.elem == onnx::TensorProto::BOOL) {
      SmallVector<bool> d;
      for (double x : c.data)
        d.push_back(x != 0);
      attr = DenseElementsAttr::get(type, ArrayRef<bool>(d));
    } else {
      std::vector<float> d;
      constexpr double big = std::numeric_limits<float>::max();
      for (double x : c.data)
        d.push_back(x > big    ? std::numeric_limits<float>::infinity()
                    : x < -big ? -std::numeric_limits<float>::infinity()
                               : float(x));
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
  /// ONNX's "to the end" bounds (INT64_MAX / INT64_MIN) saturate, and NaN
  /// (an integer division by zero folded) becomes INT64_MIN, which every
  /// shape and axis check refuses.
  std::vector<int64_t> ints(const Val &v) {
    std::vector<int64_t> r;
    for (double x : v.data)
      r.push_back(x >= 9.2e18                  ? std::numeric_limits<int64_t>::max()
                  : x <= -9.2e18 || x != x     ? std::numeric_limits<int64_t>::min()
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

  /// Integer operand #i: a computed i64 tensor, or a constant (integer or
  /// boolean) taken as i64. Integer and boolean tensors computed on the
  /// device are i64, booleans 1 or 0.
  bool intInput(const onnx::NodeProto &n, int i, Value &out) {
    if (const Val *c = constInput(n, i)) {
      Val v = *c;
      v.elem = onnx::TensorProto::INT64;
      out = materialize(v);
      return true;
    }
    if (!input(n, i, out))
      return false;
    if (!tt(out).getElementType().isInteger(64))
      return nodeFail(n, "input '" + n.input(i) + "' is " + typeStr(out.getType()) +
                             "; " + n.op_type() +
                             " on computed tensors takes integers or booleans (int64 on the "
                             "device)");
    return true;
  }
  /// Whether some input of n is an integer tensor computed on the device.
  bool computedInt(const onnx::NodeProto &n) {
    for (int i = 0; i < n.input_size(); ++i)
      if (!n.input(i).empty() && !constInput(n, i))
        if (auto it = values.find(n.input(i));
            it != values.end() && it->second.v &&
            isa<RankedTensorType>(it->second.v.getType()) &&
            tt(it->second.v).getElementType().isInteger(64))
          return true;
    return false;
  }
  template <typename Op> bool broadcastOp(const onnx::NodeProto &n, Value l, Value r) {
    SmallVector<int64_t> shape;
    if (!OpTrait::util::getBroadcastedShape(tt(l).getShape(), tt(r).getShape(), shape))
      return nodeFail(n, "shapes " + shapeStr(tt(l).getShape()) + " and " +
                             shapeStr(tt(r).getShape()) + " do not broadcast");
    define(n, Op::create(b, loc, RankedTensorType::get(shape, tt(l).getElementType()), l, r));
    return true;
  }

  template <typename F> bool binary(const onnx::NodeProto &n, F create) {
    Value l, r;
    // Integer arithmetic on the device (position ids): both sides i64.
    bool ints = computedInt(n);
    if (ints && (n.op_type() == "Div" || n.op_type() == "Pow"))
      return nodeFail(n, n.op_type() + " of integer tensors computed on the device is not "
                                       "supported (their arithmetic: Add, Sub, Mul, Max, Min, "
                                       "comparisons, Not, And, Or, CumSum, Cast)");
    if (ints ? !intInput(n, 0, l) || !intInput(n, 1, r) : !input(n, 0, l) || !input(n, 1, r))
      return false;
    SmallVector<int64_t> shape;
    if (!OpTrait::util::getBroadcastedShape(tt(l).getShape(), tt(r).getShape(), shape))
      return nodeFail(n, "shapes " + shapeStr(tt(l).getShape()) + " and " +
                             shapeStr(tt(r).getShape()) + " do not broadcast");
    define(n, create(RankedTensorType::get(shape, tt(l).getElementType()), l, r));
    return true;
  }
  /// Max and Min take one or two inputs here (ONNX: one or more); of one,
  /// the input itself.
  template <typename Op> bool convertMaxMin(const onnx::NodeProto &n) {
    if (n.input_size() == 2)
      return binaryOp<Op>(n);
    Value x;
    if (!input(n, 0, x))
      return false;
    define(n, x);
    return true;
  }
  template <typename Op> bool binaryOp(const onnx::NodeProto &n) {
    return binary(n, [&](Type t, Value l, Value r) { return Op::create(b, loc, t, l, r); });
  }
  template <typename Op> bool unary(const onnx::NodeProto &n) {
    Value x;
    if (!input(n, 0, x))
      return false;
    define(n, Op::create(b, loc, x.getType(), x));
    return true;
  }

  /// What every node must satisfy before any of its fields is read: a
  /// known operator, its arity, required inputs named, and outputs that are
  /// new names (ONNX graphs are SSA; a second definition is not an update).
  bool checkNode(const onnx::NodeProto &n) {
    const std::string &op = n.op_type();
    if (n.domain() != "" && n.domain() != "ai.onnx")
      return nodeFail(n, "operator domain '" + n.domain() + "' is not supported");
    const Arity *a = llvm::find_if(kArity, [&](const Arity &x) { return x.op == op; });
    if (a == std::end(kArity))
      return nodeFail(n, "operator not supported by the ONNX importer yet");
    auto range = [](int lo, int hi) {
      return lo == hi ? std::to_string(lo)
                      : std::to_string(lo) + (hi == kMany ? " or more" : " to " + std::to_string(hi));
    };
    if (n.input_size() < a->minIn || n.input_size() > a->maxIn)
      return nodeFail(n, "has " + std::to_string(n.input_size()) + " inputs; " + op + " takes " +
                             range(a->minIn, a->maxIn));
    // Optional inputs (past the required ones) may be left empty, except in
    // a variadic list (Concat), where every entry is an operand.
    for (int i = 0; i < n.input_size(); ++i)
      if (n.input(i).empty() && (i < a->minIn || a->maxIn == kMany))
        return nodeFail(n, "required input #" + std::to_string(i) + " is empty");
    if (n.output_size() < a->minOut || n.output_size() > a->maxOut)
      return nodeFail(n, "has " + std::to_string(n.output_size()) + " outputs; " + op +
                             " gives " + range(a->minOut, a->maxOut));
    if (n.output(0).empty())
      return nodeFail(n, "its first output is unnamed");
    llvm::StringSet<> mine;
    for (const std::string &o : n.output())
      if (!o.empty() && (values.count(o) || !mine.insert(o).second))
        return nodeFail(n, "output '" + o + "' is already defined (by a graph input, an "
                           "initializer or an earlier output): ONNX graphs define each name once");
    return true;
  }

  bool convert(const onnx::NodeProto &n) {
    const std::string &op = n.op_type();
    if (!checkNode(n))
      return false;
    // The ops of a node carry its name, so a later error (a verifier, the
    // lowering) names the ONNX node it came from.
    loc = NameLoc::get(b.getStringAttr("onnx node '" + n.name() + "' (" + op + ")"), fileLoc);
    for (const std::string &o : n.output())
      producer[o] = op;
    if (op == "Constant") {
      // The scalar and list forms (value_int, value_ints, value_float,
      // value_floats) fold; `value` is a tensor.
      for (StringRef form : {"value_int", "value_ints", "value_float", "value_floats"})
        if (const auto *a = attr(n, form)) {
          Val c;
          c.isConst = true;
          bool isInt = form.starts_with("value_int");
          c.elem = isInt ? onnx::TensorProto::INT64 : onnx::TensorProto::FLOAT;
          if (form == "value_int")
            c.data = {double(a->i())};
          else if (form == "value_float")
            c.data = {double(a->f())};
          else if (isInt)
            c.data.assign(a->ints().begin(), a->ints().end());
          else
            c.data.assign(a->floats().begin(), a->floats().end());
          if (form.ends_with("s"))
            c.shape = {int64_t(c.data.size())};
          defineConst(n, 0, c);
          return true;
        }
      const auto *v = attr(n, "value");
      if (!v || !v->has_t())
        return nodeFail(n, "only tensor constants are supported (value, value_int(s), "
                           "value_float(s))");
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
      bool bad = false;
      if (auto folded = fold(n, bad)) {
        defineConst(n, 0, *folded);
        return true;
      }
      if (bad)
        return false;
    }
    auto handler = converters().find(op);
    if (handler == converters().end()) {
      // A fold-only operator with a computed input says which.
      for (int i = 0; i < n.input_size(); ++i)
        if (!n.input(i).empty() && !constInput(n, i))
          return nodeFail(n, "operator not supported by the ONNX importer on computed "
                             "values (it folds on constants only; input '" +
                             n.input(i) + "' is computed)");
      return nodeFail(n, "operator not supported by the ONNX importer yet");
    }
    return (this->*handler->second)(n);
  }

  /// One converter per operator (or family), found by name: adding an
  /// operator is a row here, its row in kArity and its function below.
  using Converter = bool (Importer::*)(const onnx::NodeProto &);
  static const llvm::StringMap<Converter> &converters() {
    static const llvm::StringMap<Converter> table = {
        {"Add", &Importer::binaryOp<AddOp>},
        {"And", &Importer::convertLogic},
        {"Cast", &Importer::convertCast},
        {"CumSum", &Importer::convertCumSum},
        {"Equal", &Importer::convertLogic},
        {"Greater", &Importer::convertLogic},
        {"GreaterOrEqual", &Importer::convertLogic},
        {"Less", &Importer::convertLogic},
        {"LessOrEqual", &Importer::convertLogic},
        {"Not", &Importer::convertLogic},
        {"Or", &Importer::convertLogic},
        {"CastLike", &Importer::convertCast},
        {"Concat", &Importer::convertConcat},
        {"Cos", &Importer::unary<CosOp>},
        {"Div", &Importer::binaryOp<DivOp>},
        {"Dropout", &Importer::convertDropout},
        {"Erf", &Importer::unary<ErfOp>},
        {"Exp", &Importer::unary<ExpOp>},
        {"Expand", &Importer::convertExpand},
        {"Gather", &Importer::convertGather},
        {"GatherElements", &Importer::convertGatherElements},
        {"Gelu", &Importer::convertGelu},
        {"Gemm", &Importer::convertGemm},
        {"Identity", &Importer::convertIdentity},
        {"IsNaN", &Importer::convertIsNaN},
        {"LayerNormalization", &Importer::convertLayerNormalization},
        {"Log", &Importer::unary<LogOp>},
        {"LogSoftmax", &Importer::convertSoftmax},
        {"MatMul", &Importer::convertGemm},
        {"Max", &Importer::convertMaxMin<MaxOp>},
        {"Min", &Importer::convertMaxMin<MinOp>},
        {"Mul", &Importer::binaryOp<MulOp>},
        {"Neg", &Importer::unary<NegOp>},
        {"Pow", &Importer::binaryOp<PowOp>},
        {"Reciprocal", &Importer::convertReciprocal},
        {"ReduceMean", &Importer::convertReduceMean},
        {"ReduceSum", &Importer::convertReduceMean},
        {"Relu", &Importer::unary<ReluOp>},
        {"Reshape", &Importer::convertReshape},
        {"Shape", &Importer::convertShape},
        {"Sigmoid", &Importer::unary<SigmoidOp>},
        {"Sin", &Importer::unary<SinOp>},
        {"Slice", &Importer::convertSlice},
        {"Softmax", &Importer::convertSoftmax},
        {"Split", &Importer::convertSplit},
        {"GatherND", &Importer::convertGatherND},
        {"Attention", &Importer::convertAttention},
        {"RMSNormalization", &Importer::convertLayerNormalization},
        {"SplitToSequence", &Importer::convertSplitToSequence},
        {"SequenceAt", &Importer::convertSequenceAt},
        {"Sqrt", &Importer::unary<SqrtOp>},
        {"Squeeze", &Importer::convertUnsqueeze},
        {"Sub", &Importer::binaryOp<SubOp>},
        {"Tanh", &Importer::unary<TanhOp>},
        {"Transpose", &Importer::convertTranspose},
        {"Unsqueeze", &Importer::convertUnsqueeze},
        {"Where", &Importer::convertWhere},
    };
    return table;
  }

  bool convertIdentity(const onnx::NodeProto &n) {
    Value x;
    if (!input(n, 0, x))
      return false;
    define(n, x);
    return true;
  }

  bool convertGemm(const onnx::NodeProto &n) {
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

  bool convertSoftmax(const onnx::NodeProto &n) {
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

  /// Transpose's `perm` (reversed dimensions when absent), checked to be a
  /// permutation of `rank` dimensions; shared by folding and conversion.
  bool transposePerm(const onnx::NodeProto &n, int64_t rank, SmallVectorImpl<int64_t> &perm) {
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

  bool convertTranspose(const onnx::NodeProto &n) {
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

  bool convertReciprocal(const onnx::NodeProto &n) {
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

  bool convertShape(const onnx::NodeProto &n) {
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

  bool convertGather(const onnx::NodeProto &n) {
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

  // Attention (opset 23), as PyTorch exports scaled_dot_product_attention
  // at that opset: 4-D [B, heads, T, D] query, key and value, the key and
  // value heads repeated when fewer (grouped-query attention), is_causal or
  // a constant mask that is the causal one (boolean: true attends; float:
  // 0 or very negative) or hides nothing; the scale as given or
  // 1/sqrt(D). A past key/value (a cache), a soft cap, 3-D inputs or
  // another mask are refused; the optional outputs are not computed.
  bool convertAttention(const onnx::NodeProto &n) {
    if (opset < 23)
      return nodeFail(n, "Attention is an operator of opset 23; the model declares opset " +
                             std::to_string(opset));
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

  // GatherND on a computed tensor with constant indices (Falcon picks
  // query, key and value out of its fused projection this way): each index
  // tuple addresses a row of the data viewed as [d0 x ... x d(k-1), rest],
  // so it is an embedding lookup of those rows (its gradient scatters back)
  // and a reshape. batch_dims > 0 is refused.
  bool convertGatherND(const onnx::NodeProto &n) {
    Value data;
    if (!input(n, 0, data))
      return false;
    const Val *idx = constInput(n, 1);
    if (!idx)
      return nodeFail(n, "indices must be constant (computed indices are not supported)");
    if (intAttr(n, "batch_dims", 0) != 0)
      return nodeFail(n, "batch_dims > 0 on a computed tensor is not supported");
    auto dt = tt(data);
    if (!isa<FloatType>(dt.getElementType()))
      return nodeFail(n, "a computed tensor of integers is not supported");
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

  /// A constant scale or bias broadcast over the rows (a non-parametric
  /// layer norm exported with optimize=False: ones expanded to [B, T, d]):
  /// its last-axis vector when every row holds the same values.
  bool rowInvariantVector(const onnx::NodeProto &n, int i, int64_t d, Value &out) {
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

  // LayerNormalization, and RMSNormalization (opset 23, Llama's RMSNorm at
  // that opset: no bias, a [D] scale): over the last axis.
  bool convertLayerNormalization(const onnx::NodeProto &n) {
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

  bool convertReshape(const onnx::NodeProto &n) {
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

  /// Split's and SplitToSequence's operands: the tensor, its axis
  /// (checked, made non-negative) and the optional constant split sizes.
  bool splitOperands(const onnx::NodeProto &n, Value &x, int64_t &axis, const Val *&sp) {
    if (!input(n, 0, x))
      return false;
    axis = intAttr(n, "axis", 0);
    return normAxis(n, axis, tt(x).getRank()) && optionalConst(n, 1, sp, "split");
  }

  bool convertSplit(const onnx::NodeProto &n) {
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

  /// Whether pieces of `sizes` (each in [0, dim]) add up to exactly `dim`.
  static bool sizesFill(ArrayRef<int64_t> sizes, int64_t dim) {
    int64_t sum = 0;
    for (int64_t sz : sizes)
      sum = sz < 0 || sum < 0 || sz > dim ? -1 : sum + sz;
    return sum == dim;
  }

  /// x cut along `axis` into consecutive pieces of `sizes` (loom.slice).
  SmallVector<Value> splitPieces(Value x, int64_t axis, ArrayRef<int64_t> sizes) {
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

  // SplitToSequence (the dynamo exporter's torch.split with
  // optimize=False): the pieces as Split makes them, kept as a sequence
  // that SequenceAt reads at constant positions. No split input: pieces of
  // 1, the axis dropped unless keepdims; a scalar split: chunks of that
  // size, the last one smaller.
  bool convertSplitToSequence(const onnx::NodeProto &n) {
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
      pieces = (dim + ints(*sp)[0] - 1) / ints(*sp)[0];
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

  bool convertSequenceAt(const onnx::NodeProto &n) {
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

  // PyTorch's scaled_dot_product_attention exports its guard against
  // fully masked rows: p = Softmax(s); Where(IsNaN(p), 0, p). A row of a
  // softmax is NaN only when every score in it is -inf, which a causal
  // mask (or any mask leaving each query a key) never does: the guard is
  // then the softmax itself, and that is what it imports as (with a note).
  // Where a mask hides every key of a row, Loom's softmax gives NaN there
  // (as PyTorch's does before its guard), so training says so at once.
  bool convertIsNaN(const onnx::NodeProto &n) {
    Val guard;
    guard.nanOf = n.input(0);
    values[n.output(0)] = guard;
    return true;
  }

  bool convertWhere(const onnx::NodeProto &n) {
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

  bool convertUnsqueeze(const onnx::NodeProto &n) {
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

  bool convertConcat(const onnx::NodeProto &n) {
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

  bool convertReduceMean(const onnx::NodeProto &n) {
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

  bool convertSlice(const onnx::NodeProto &n) {
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

  // Dropout: the identity in inference mode (training_mode false or
  // absent) or with ratio 0, as ONNX defines it. In training mode with a
  // ratio above 0, loom.dropout: a fresh mask every step, drawn from the
  // step's key and the node's own key (its place among the model's
  // Dropout nodes); --dropout=off imports it as the identity instead, to
  // compare with a reference trained without dropout.
  bool convertDropout(const onnx::NodeProto &n) {
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

  // Gelu (opset 20): the exact erf form, or the tanh one.
  bool convertGelu(const onnx::NodeProto &n) {
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

  // Expand: numpy broadcasting of the input against a constant shape (the
  // key/value heads repeated for grouped-query attention).
  bool convertExpand(const onnx::NodeProto &n) {
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

  /// Casts of computed tensors: float to float and integer to integer are
  /// the identity (device integers are all int64: values are kept, a
  /// narrowing cast does not wrap); integer to bool is x != 0; integer to
  /// float and float to integer (toward zero) are loom.cast.
  bool convertCast(const onnx::NodeProto &n) {
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

  /// Comparisons and logic on integer or boolean tensors computed on the
  /// device (a pad mask from the input ids): i64 tensors of 1 and 0 through
  /// loom.eq, ne, lt and le (Greater and GreaterOrEqual swap the operands),
  /// Not as 1 - x, And as x * y, Or as max(x, y).
  bool convertLogic(const onnx::NodeProto &n) {
    const std::string &op = n.op_type();
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

  /// GatherElements of a constant whose elements are all equal, at computed
  /// indices: that value in the indices' shape (what the indices pick does
  /// not matter). BERT-style models gather their all-zero token-type
  /// buffer at the position ids; other computed gathers are refused.
  bool convertGatherElements(const onnx::NodeProto &n) {
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

  /// CumSum of a computed tensor (integers: RoBERTa's position ids) along
  /// a constant axis.
  bool convertCumSum(const onnx::NodeProto &n) {
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

  MLIRContext &ctx;
  OpBuilder b;
  std::string &error;
  Type f32, i64;
  std::string modelDir;
  Location loc = UnknownLoc::get(&ctx);
  Location fileLoc = UnknownLoc::get(&ctx);
  OwningOpRef<ModuleOp> module;
  llvm::StringMap<Val> values;
  llvm::StringMap<std::string> producer; // value -> the op type that made it
  bool notedNanGuard = false;
  // Initializers the exporter folded from parameters: (name, a source).
  std::vector<std::pair<std::string, std::string>> foldedFromParams;
  bool notedDropout = false;
  int64_t dropoutKeys = 0; // loom.dropout keys: the Dropout nodes in order
  bool notedShapesOnly = false;
  int64_t opset = -1; // of the default domain
  std::vector<std::pair<std::string, RankedTensorType>> paramValues;
};

} // namespace

/// Both entry points once the ModelProto is parsed (`parsed` false: it
/// was not a ModelProto).
static OwningOpRef<ModuleOp> importParsed(MLIRContext &ctx, const onnx::ModelProto &model,
                                          bool parsed, StringRef path,
                                          const OnnxImportOptions &o, std::string &error) {
  StringRef task = o.task;
  ctx.loadDialect<LoomDialect, func::FuncDialect, arith::ArithDialect>();
  if (!parsed)
    return error = "'" + path.str() + "' is not a valid ONNX model (protobuf parse failed)",
           nullptr;
  if (!task.empty() && task != "lm" && task != "classify")
    return error = "unknown --task '" + task.str() + "': expected lm or classify", nullptr;
  Importer imp(ctx, error, llvm::sys::path::parent_path(path).str());
  imp.dropoutOff = o.dropoutOff;
  imp.weightValues = o.weightValues;
  return imp.run(model, path, task, o.frozen);
}

std::string onnxOperatorTable() {
  std::string out = "# ONNX operators the importer takes\n\n"
                    "Generated by `loomc --list-onnx-operators` (lib/Import/OnnxImport.cpp, "
                    "`kArity`); `ninja loom-docs` rewrites this file. Opsets 13 to 23 of the "
                    "default domain. Any other operator is an error naming the node.\n\n"
                    "| operator | inputs | outputs | imported as |\n|---|---|---|---|\n";
  auto range = [](int lo, int hi) {
    return hi == kMany ? std::to_string(lo) + "+"
           : lo == hi  ? std::to_string(lo)
                       : std::to_string(lo) + "-" + std::to_string(hi);
  };
  for (const Arity &a : kArity)
    out += "| " + a.op.str() + " | " + range(a.minIn, a.maxIn) + " | " +
           range(a.minOut, a.maxOut) + " | " + a.how.str() + " |\n";
  return out;
}

OwningOpRef<ModuleOp> importOnnx(MLIRContext &ctx, StringRef path,
                                 const OnnxImportOptions &options, std::string &error) {
  // A regular file only: a FIFO would hang the read, a device never end.
  llvm::sys::fs::file_status st;
  if (!llvm::sys::fs::status(path, st) && st.type() != llvm::sys::fs::file_type::regular_file)
    return error = "model '" + path.str() + "' is not a regular file (a FIFO, a device or a "
                   "folder); a regular .onnx file was expected",
           nullptr;
  std::ifstream in(path.str(), std::ios::binary);
  if (!in)
    return error = "cannot open '" + path.str() + "': " + std::strerror(errno), nullptr;
  // Parsed from the stream: a model near protobuf's 2 GB limit is not
  // held twice (file bytes and parsed message).
  onnx::ModelProto model;
  bool parsed = model.ParseFromIstream(&in);
  return importParsed(ctx, model, parsed, path, options, error);
}

OwningOpRef<ModuleOp> importOnnxBytes(MLIRContext &ctx, StringRef bytes, StringRef path,
                                      const OnnxImportOptions &options, std::string &error) {
  onnx::ModelProto model;
  bool parsed = bytes.size() <= size_t(std::numeric_limits<int>::max()) &&
                model.ParseFromArray(bytes.data(), int(bytes.size()));
  return importParsed(ctx, model, parsed, path, options, error);
}

} // namespace loom
