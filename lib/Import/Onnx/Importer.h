//===- Importer.h - the ONNX importer, shared by its files ------*- C++ -*-===//
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
//
// Private to lib/Import/Onnx: the importer's state and helpers. Each ONNX
// operator is one row of the operator table (OnnxOp: name, since-opset,
// arity, what it becomes, its converter and its folder), defined with its
// converter in the family file (Elementwise.cpp, Shapes.cpp, Layers.cpp;
// constants and generators in Fold.cpp) and gathered by Table.cpp; the
// model itself (initializers, the graph, the loss) is Importer.cpp.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_LIB_IMPORT_ONNX_IMPORTER_H
#define LOOM_LIB_IMPORT_ONNX_IMPORTER_H

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

#include <functional>
#include <map>

#include <charconv>
#include <cmath>
#include <limits>
#include <cstring>
#include <fstream>

namespace loom::onnximport {

using namespace mlir;
using namespace mlir::loom;


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
inline int64_t checkedNumel(ArrayRef<int64_t> shape, int64_t limit) {
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
inline SmallVector<int64_t> broadcastStrides(ArrayRef<int64_t> from, size_t rank) {
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
inline int64_t offsetAt(int64_t i, ArrayRef<int64_t> shape, ArrayRef<int64_t> strides) {
  int64_t off = 0;
  for (size_t k = shape.size(); k-- > 0;) {
    off += (i % shape[k]) * strides[k];
    i /= shape[k];
  }
  return off;
}

/// The `metadata_props` of an ONNX ValueInfoProto (field 4 since ONNX 1.16,
/// newer than Debian's onnx.proto, so read from the message's unknown
/// fields): PyTorch's exporter records there whether a value was a
/// parameter or a buffer (pkg.torch.export.graph_signature.InputSpec.kind)
/// and what a folded initializer was folded from
/// (pkg.onnxscript.optimizer.folded_from).
/// NodeProto has its own (field 9): the PyTorch source line a node came
/// from (pkg.torch.onnx.stack_trace).
inline std::map<std::string, std::string> unknownMetadata(const google::protobuf::Message &m,
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
inline std::map<std::string, std::string> valueMetadata(const onnx::ValueInfoProto &v) {
  return unknownMetadata(v, 4);
}

/// " (PyTorch: FILE:LINE: CODE)" for the innermost frame of the stack trace
/// PyTorch's dynamo exporter records on a node, "" without one.
inline std::string pytorchSource(const onnx::NodeProto &n) {
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
inline std::string tupleOffset(ArrayRef<int64_t> dims, const int64_t *tuple, int64_t &off) {
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
inline std::vector<std::string> foldedFrom(StringRef text) {
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
  // A comparison of computed floats (1.0/0.0 in v): only Where takes it
  // (as a blend of two finite branches); any other reader gets `refuse`.
  // maskWhy: why its operands are no integers (notInteger), with the node.
  bool floatMask = false;
  std::string maskWhy;
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

class Importer;

/// What a family folder gets from fold: the node's inputs as constants
/// (checkNode and allConst have run), and `invalid(msg)`, which reports the
/// node as invalid (sets `bad`) and returns nullopt.
struct Folding {
  std::function<const Val &(int)> in;
  std::function<std::optional<Val>(const std::string &)> invalid;
  bool &bad;
};

/// One ONNX operator of the default domain: the opset it exists since, its
/// arity (ONNX's, optional inputs included: nodes are checked against it
/// before anything reads them), what it becomes (`loomc
/// --list-onnx-operators`, docs/generated/onnx-operators.md), its converter
/// (null: it folds on constants only) and its folder (null: it never folds).
struct OnnxOp {
  StringRef name;
  int since;
  int minIn, maxIn, minOut, maxOut;
  StringRef how;
  bool (Importer::*convert)(const onnx::NodeProto &);
  std::optional<Val> (Importer::*fold)(const onnx::NodeProto &, const Folding &);
};
constexpr int kMany = std::numeric_limits<int>::max();
constexpr StringRef kFolds = "folds on the host (constant inputs only)";
constexpr StringRef kIntLogic =
    "folds on constants; on integer or boolean tensors computed on the device, int64 1/0 "
    "(loom.eq, ne, lt, le; Not 1 - x, And x * y, Or max)";

/// The row of `op`, or null (Table.cpp).
const OnnxOp *findOnnxOp(StringRef op);
/// Every row, by name.
ArrayRef<OnnxOp> onnxOps();

class Importer {
public:
  bool dropoutOff = false;   // loomc --dropout=off
  bool weightValues = true;  // OnnxImportOptions::weightValues
  Importer(MLIRContext &ctx, std::string &error, std::string modelDir)
      : ctx(ctx), b(&ctx), error(error), f32(Float32Type::get(&ctx)),
        i64(IntegerType::get(&ctx, 64)), modelDir(std::move(modelDir)) {}

  OwningOpRef<ModuleOp> run(const onnx::ModelProto &model, StringRef path,
                            StringRef task, ArrayRef<std::string> frozen);

private:
  /// The float initializers PyTorch's exporter says are buffers, or folded
  /// from buffers and constants only, into `frozenSet` (said once); those
  /// folded from a parameter into foldedFromParams.
  void frozenByExporter(const onnx::GraphProto &g, llvm::StringSet<> &frozenSet);
  /// Every initializer (parameters, or constants when frozen), each name
  /// once, into `inits`; every --frozen name must be one.
  bool readInitializers(const onnx::GraphProto &g, ArrayRef<std::string> frozen,
                        const llvm::StringSet<> &frozenSet, llvm::StringSet<> &inits);
  bool fail(const std::string &msg);
  bool nodeFail(const onnx::NodeProto &n, const std::string &msg);
  static std::string typeStr(Type t);
  static std::string shapeStr(ArrayRef<int64_t> s);

  bool valueType(const onnx::ValueInfoProto &v, RankedTensorType &out);

  /// Reads an initializer's external data: only regular files inside the
  /// model's own folder, as the ONNX spec asks. The location is resolved
  /// (symbolic links included) and must stay under the folder's resolved
  /// path: a link to /etc/passwd, or through a linked directory, is refused.
  bool readExternal(onnx::TensorProto &t);

  /// Bytes per element of the tensor types the importer reads; 0 otherwise.
  static size_t elementBytes(int type);
  /// Values in the typed field of a tensor of the importer's types.
  static int64_t typedCount(const onnx::TensorProto &t);
  /// Whether `t` holds exactly `n` elements, raw or typed.
  static bool holds(const onnx::TensorProto &t, int64_t n);
  /// Element `i` of `t` (holds() checked), raw or typed.
  static double elementAt(const onnx::TensorProto &t, int64_t i);

  bool initializer(const onnx::TensorProto &t, bool asConstant = false);

  /// PyTorch's dynamo exporter folds the transpose of a weight into a new
  /// initializer (`val_228` = lm_head.weight^T for the output projection),
  /// which splits a tied embedding (GPT-2, OPT: one parameter used by the
  /// lookup and, transposed, by the head) into two parameters that would be
  /// trained apart. A 2-D float parameter exactly equal to the transpose of
  /// another is that other one, transposed: its declaration goes and its
  /// uses read the transpose. Returns folded name -> kept name.
  llvm::StringMap<std::string> retieTransposes(ModuleOp module);
  /// A folded initializer (foldedFromParams) made of equal copies along
  /// its first dimension (ViT's class token expanded to the batch, OPT's
  /// position rows copied per batch row) is one copy, [1, ...], read
  /// broadcast: trained as PyTorch trains the tensor it was expanded from.
  /// Returns name -> the full type its uses read.
  llvm::StringMap<RankedTensorType> retieTiles(ModuleOp module);
  /// Every parameter's value for the nodes: a load, the transpose of the
  /// one a folded transpose is tied to, or a tile's one copy broadcast
  /// (warning about folded tensors trained as they are).
  void loadParams();
  /// Initializers PyTorch's exporter merged because their values were
  /// equal (Merged.cpp), split again by what each node's FX line read: a
  /// parameter per reader, and the nodes that read one, patched to name
  /// it, into `patched` (node index -> node).
  void splitMerged(const onnx::GraphProto &g, llvm::DenseMap<int, onnx::NodeProto> &patched);
  /// The module's parameters (the exporter's recorded signature) that the
  /// file no longer holds in any form: removed by the exporter's optimizer
  /// as no-ops for their initial values (a fresh model's zero biases) or
  /// folded into other tensors.
  std::vector<std::string> removedParams(const onnx::ModelProto &model,
                                         const llvm::StringSet<> &inits);
  /// The removed biases of an addmm or a linear (their FX lines name
  /// them), to add back, as zeros, after the last node of each: into
  /// biasRestores (node index -> parameter name).
  void planBiasRestores(const onnx::GraphProto &g, ArrayRef<std::string> removed);
  bool restoreBias(const onnx::NodeProto &n, const std::string &name);
  /// A note for the restored biases, a warning naming what stays missing.
  void warnRemoved(ArrayRef<std::string> removed);
  llvm::DenseMap<int, std::string> biasRestores;

  //===--------------------------------------------------------------===//
  // Shape rules shared by folding and conversion, each checking what the
  // file declares (axes in range, sizes that add up) before using it.
  //===--------------------------------------------------------------===//

  /// `axis` in [-rank, rank) made non-negative.
  bool normAxis(const onnx::NodeProto &n, int64_t &axis, int64_t rank);
  /// Distinct axes in range, made non-negative.
  bool normAxes(const onnx::NodeProto &n, std::vector<int64_t> &axes, int64_t rank);
  /// An optional input that must fold to a constant when it is given:
  /// `out` is null when absent; a named input that is undefined or computed
  /// is an error, never "no value".
  bool optionalConst(const onnx::NodeProto &n, int i, const Val *&out, StringRef what);
  /// ONNX Reshape's target (a 1-d constant): 0 copies the input's
  /// dimension, one -1 is inferred; the element count must be preserved.
  bool reshapeTarget(const onnx::NodeProto &n, ArrayRef<int64_t> in, const Val &target,
                     std::vector<int64_t> &shape);
  /// Unsqueeze inserts 1s at `axes` of the output; Squeeze drops `axes`
  /// (which must be 1s), or every 1 when no axes are given.
  bool squeezeShape(const onnx::NodeProto &n, bool unsqueeze, std::vector<int64_t> axes,
                    std::vector<int64_t> &shape);
  /// ONNX Slice's starts/ends/axes/steps on `shape`, clamped as the spec
  /// says, into per-dimension [lo, hi) with steps >= 1 and the result shape.
  bool sliceBounds(const onnx::NodeProto &n, ArrayRef<int64_t> shape, const Val &starts,
                   const Val &ends, const Val *axesV, const Val *stepsV,
                   SmallVector<int64_t> &lo, SmallVector<int64_t> &hi,
                   SmallVector<int64_t> &step, SmallVector<int64_t> &out);
  /// A folded result must stay small enough to hold on the host.
  bool foldable(const onnx::NodeProto &n, ArrayRef<int64_t> shape);

  /// Folds `n` over host constants; nullopt (and error set) when it cannot.
  /// nullopt with `bad` false: not foldable, convert it instead; with
  /// `bad` set: the node is invalid (error set). checkNode has run, so the
  /// required inputs exist and (allConst) are constants.
  std::optional<Val> fold(const onnx::NodeProto &n, bool &bad);
  // fold's contract for each family of operators (Fold.cpp); a row of the
  // operator table names its folder.
  std::optional<Val> foldArithmetic(const onnx::NodeProto &n, const Folding &f);
  std::optional<Val> foldShapes(const onnx::NodeProto &n, const Folding &f);
  std::optional<Val> foldGathers(const onnx::NodeProto &n, const Folding &f);
  std::optional<Val> foldGenerators(const onnx::NodeProto &n, const Folding &f);

public:
  /// The rows of each family of operators (Elementwise.cpp, Shapes.cpp,
  /// Layers.cpp, Fold.cpp), gathered by Table.cpp.
  static ArrayRef<OnnxOp> elementwiseOps();
  static ArrayRef<OnnxOp> shapeOps();
  static ArrayRef<OnnxOp> layerOps();
  static ArrayRef<OnnxOp> constantOps();
  static ArrayRef<OnnxOp> convOps();

private:


  const onnx::AttributeProto *attr(const onnx::NodeProto &n, StringRef name);
  int64_t intAttr(const onnx::NodeProto &n, StringRef name, int64_t dflt);
  bool input(const onnx::NodeProto &n, int i, Value &out);

  /// ONNX's integer element types: all int64 in Loom (values are kept; a
  /// narrowing cast does not wrap).
  static bool isIntElem(int e);

  Value materialize(const Val &c);

  /// The host constant input #i (shape arithmetic, masks), if it is one.
  const Val *constInput(const onnx::NodeProto &n, int i);
  bool allConst(const onnx::NodeProto &n);
  void defineConst(const onnx::NodeProto &n, int out, Val v);
  /// Integer values of a host constant. Constants are held as doubles;
  /// ONNX's "to the end" bounds (INT64_MAX / INT64_MIN) saturate, and NaN
  /// (an integer division by zero folded) becomes INT64_MIN, which every
  /// shape and axis check refuses.
  std::vector<int64_t> ints(const Val &v);
  std::vector<int64_t> intsAttr(const onnx::NodeProto &n, StringRef name);
  /// Static shape of input #i, SSA or constant.
  bool shapeOf(const onnx::NodeProto &n, int i, std::vector<int64_t> &shape);
  RankedTensorType tt(Value v) { return cast<RankedTensorType>(v.getType()); }
  void define(const onnx::NodeProto &n, Value v) { values[n.output(0)] = Val{v}; }

  /// Integer operand #i: a computed i64 tensor, or a constant (integer or
  /// boolean) taken as i64. Integer and boolean tensors computed on the
  /// device are i64, booleans 1 or 0.
  bool intInput(const onnx::NodeProto &n, int i, Value &out);
  /// Why input #i, a float computed on the device, cannot be an integer
  /// operand (naming the trained initializer it comes from, if any).
  std::string notInteger(const onnx::NodeProto &n, int i, Value v);
  /// Equal, Less, Greater and their OrEqual forms on computed floats: a
  /// 1.0/0.0 mask only Where reads (floatMask).
  bool floatComparison(const onnx::NodeProto &n);
  /// Whether some input of n is an integer tensor computed on the device.
  bool computedInt(const onnx::NodeProto &n);
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
  bool checkNode(const onnx::NodeProto &n);

  bool convert(const onnx::NodeProto &n);
  /// Constant: the scalar and list forms fold; `value` is a tensor.
  bool convertConstant(const onnx::NodeProto &n);

  bool convertIdentity(const onnx::NodeProto &n);

  bool convertGemm(const onnx::NodeProto &n);

  bool convertSoftmax(const onnx::NodeProto &n);

  /// Transpose's `perm` (reversed dimensions when absent), checked to be a
  /// permutation of `rank` dimensions; shared by folding and conversion.
  bool transposePerm(const onnx::NodeProto &n, int64_t rank, SmallVectorImpl<int64_t> &perm);

  bool convertTranspose(const onnx::NodeProto &n);

  bool convertReciprocal(const onnx::NodeProto &n);
  bool convertSoftplus(const onnx::NodeProto &n);
  bool convertSqrt(const onnx::NodeProto &n);
  bool blendWhere(const onnx::NodeProto &n, const Val &mask);

  bool convertShape(const onnx::NodeProto &n);

  bool convertGather(const onnx::NodeProto &n);

  // Attention (opset 23), as PyTorch exports scaled_dot_product_attention
  // at that opset: 4-D [B, heads, T, D] query, key and value, the key and
  // value heads repeated when fewer (grouped-query attention), is_causal or
  // a constant mask that is the causal one (boolean: true attends; float:
  // 0 or very negative) or hides nothing; the scale as given or
  // 1/sqrt(D). A past key/value (a cache), a soft cap, 3-D inputs or
  // another mask are refused; the optional outputs are not computed.
  bool convertAttention(const onnx::NodeProto &n);

  // GatherND on a computed tensor with constant indices (Falcon picks
  // query, key and value out of its fused projection this way): each index
  // tuple addresses a row of the data viewed as [d0 x ... x d(k-1), rest],
  // so it is an embedding lookup of those rows (its gradient scatters back)
  // and a reshape. batch_dims > 0 is refused.
  bool convertGatherND(const onnx::NodeProto &n);

  /// A constant scale or bias broadcast over the rows (a non-parametric
  /// layer norm exported with optimize=False: ones expanded to [B, T, d]):
  /// its last-axis vector when every row holds the same values.
  bool rowInvariantVector(const onnx::NodeProto &n, int i, int64_t d, Value &out);

  // LayerNormalization, and RMSNormalization (opset 23, Llama's RMSNorm at
  // that opset: no bias, a [D] scale): over the last axis.
  bool convertLayerNormalization(const onnx::NodeProto &n);

  bool convertReshape(const onnx::NodeProto &n);
  bool convertFlatten(const onnx::NodeProto &n);
  bool gatherNDComputed(const onnx::NodeProto &n, Value data);

  // Conv.cpp: convolutions and pooling as gathered receptive fields.
  /// A window over the spatial dimensions: kernel, strides, dilations,
  /// the padding before each dimension, the output's sizes, and the counts
  /// of output positions and kernel offsets.
  struct Window {
    std::vector<int64_t> kernel, strides, dilations, begin, out;
    int64_t positions = 1, offsets = 1;
  };
  /// Reads strides, dilations, pads and auto_pad for `kernel` on `spatial`.
  bool windowAttrs(const onnx::NodeProto &n, ArrayRef<int64_t> spatial,
                   ArrayRef<int64_t> kernel, Window &w);
  /// x [N, C, spatial...]'s receptive fields as [positions, offsets, N, C]
  /// (padding reads `padValue`); `valid` gets each position's count of
  /// offsets inside the input.
  Value receptiveFields(Value x, const Window &w, float padValue, SmallVectorImpl<int64_t> &valid);
  bool convertConv(const onnx::NodeProto &n);
  bool convertPool(const onnx::NodeProto &n);
  bool convertBatchNorm(const onnx::NodeProto &n);

  /// Split's and SplitToSequence's operands: the tensor, its axis
  /// (checked, made non-negative) and the optional constant split sizes.
  bool splitOperands(const onnx::NodeProto &n, Value &x, int64_t &axis, const Val *&sp);

  bool convertSplit(const onnx::NodeProto &n);

  /// Whether pieces of `sizes` (each in [0, dim]) add up to exactly `dim`.
  static bool sizesFill(ArrayRef<int64_t> sizes, int64_t dim);

  /// x cut along `axis` into consecutive pieces of `sizes` (loom.slice).
  SmallVector<Value> splitPieces(Value x, int64_t axis, ArrayRef<int64_t> sizes);

  // SplitToSequence (the dynamo exporter's torch.split with
  // optimize=False): the pieces as Split makes them, kept as a sequence
  // that SequenceAt reads at constant positions. No split input: pieces of
  // 1, the axis dropped unless keepdims; a scalar split: chunks of that
  // size, the last one smaller.
  bool convertSplitToSequence(const onnx::NodeProto &n);

  bool convertSequenceAt(const onnx::NodeProto &n);

  // PyTorch's scaled_dot_product_attention exports its guard against
  // fully masked rows: p = Softmax(s); Where(IsNaN(p), 0, p). A row of a
  // softmax is NaN only when every score in it is -inf, which a causal
  // mask (or any mask leaving each query a key) never does: the guard is
  // then the softmax itself, and that is what it imports as (with a note).
  // Where a mask hides every key of a row, Loom's softmax gives NaN there
  // (as PyTorch's does before its guard), so training says so at once.
  bool convertIsNaN(const onnx::NodeProto &n);

  bool convertWhere(const onnx::NodeProto &n);

  bool convertUnsqueeze(const onnx::NodeProto &n);

  bool convertConcat(const onnx::NodeProto &n);

  bool convertReduceMean(const onnx::NodeProto &n);

  bool convertSlice(const onnx::NodeProto &n);

  // Dropout: the identity in inference mode (training_mode false or
  // absent) or with ratio 0, as ONNX defines it. In training mode with a
  // ratio above 0, loom.dropout: a fresh mask every step, drawn from the
  // step's key and the node's own key (its place among the model's
  // Dropout nodes); --dropout=off imports it as the identity instead, to
  // compare with a reference trained without dropout.
  bool convertDropout(const onnx::NodeProto &n);

  // Gelu (opset 20): the exact erf form, or the tanh one.
  bool convertGelu(const onnx::NodeProto &n);

  // Expand: numpy broadcasting of the input against a constant shape (the
  // key/value heads repeated for grouped-query attention).
  bool convertExpand(const onnx::NodeProto &n);

  /// Casts of computed tensors: float to float and integer to integer are
  /// the identity (device integers are all int64: values are kept, a
  /// narrowing cast does not wrap); integer to bool is x != 0; integer to
  /// float and float to integer (toward zero) are loom.cast.
  bool convertCast(const onnx::NodeProto &n);

  /// Comparisons and logic on integer or boolean tensors computed on the
  /// device (a pad mask from the input ids): i64 tensors of 1 and 0 through
  /// loom.eq, ne, lt and le (Greater and GreaterOrEqual swap the operands),
  /// Not as 1 - x, And as x * y, Or as max(x, y).
  bool convertLogic(const onnx::NodeProto &n);

  /// GatherElements of a constant whose elements are all equal, at computed
  /// indices: that value in the indices' shape (what the indices pick does
  /// not matter). BERT-style models gather their all-zero token-type
  /// buffer at the position ids; other computed gathers are refused.
  bool convertGatherElements(const onnx::NodeProto &n);

  /// CumSum of a computed tensor (integers: RoBERTa's position ids) along
  /// a constant axis.
  bool convertCumSum(const onnx::NodeProto &n);

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
  llvm::StringMap<std::string> producerInput; // value -> its producer's first input
  bool notedNoEpsilon = false;
  // value -> the trained float initializer it is computed from (through any
  // chain of nodes, by their first such input), for errors that should
  // point at --frozen: a buffer exported as an initializer (nanoGPT's
  // causal mask) is imported as a parameter.
  llvm::StringMap<std::string> fromParam;
  bool notedNanGuard = false;
  // Initializers the exporter folded from parameters: (name, a source).
  std::vector<std::pair<std::string, std::string>> foldedFromParams;
  std::vector<std::string> foldedSources; // every name a folded_from lists
  bool notedDropout = false;
  int64_t dropoutKeys = 0; // loom.dropout keys: the Dropout nodes in order
  bool notedShapesOnly = false;
  int64_t opset = -1; // of the default domain
  std::vector<std::pair<std::string, RankedTensorType>> paramValues;
  llvm::StringSet<> paramNames; // paramValues' names
};

} // namespace loom::onnximport

#endif // LOOM_LIB_IMPORT_ONNX_IMPORTER_H
