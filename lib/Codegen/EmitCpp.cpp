//===- EmitCpp.cpp - loomrt IR to C++ over the runtime --------------------===//
//
// The translation of a lowered training step (the `loomrt` dialect, made by
// loom-lower-to-runtime) to C++: every `loomrt` op is one runtime call (or a
// declaration: a buffer from the arena, a global's address, a view), with
// the sizes its attributes hold. Every decision was taken by the lowering,
// so this file only spells calls; each group of calls is preceded by the
// `loom` op it implements (the lowering's `loomrt.comment`), so a reader can
// follow the schedule in the source.
//
// Why not EmitC (docs/codegen.md, "Why a translation of our own"): every
// call's status must propagate out of the step (LOOM_CHECK), the calls take
// static shape tables and structs (loomrt_gemm, loomrt_adam_config) that
// emitc would spell as opaque verbatim text anyway, and the tests and users
// read this text: its format predates the dialect and stays.
//
//===----------------------------------------------------------------------===//
#include "loom/Codegen.h"
#include "loom/RuntimeCalls.h"
#include "loomrt/loomrt.h"

#include "dialects/Loom/LoomOps.h"
#include "dialects/LoomRT/LoomRTDialect.h"
#include "loom/Passes/LoomToLoomRT.h"
#include "loom/Passes/LoomRT.h"
#include "llvm/ADT/StringExtras.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"

#include <cmath>

using namespace mlir;
using namespace mlir::loom;
namespace rt = mlir::loomrt;

namespace loom {
namespace {

std::string join(ArrayRef<int64_t> v) {
  std::string s;
  for (auto [i, x] : llvm::enumerate(v))
    s += (i ? ", " : "") + std::to_string(x);
  return s;
}
std::string dtypeName(rt::DType d) {
  return "LOOMRT_" + llvm::StringRef(rt::stringifyDType(d)).upper();
}
std::string unaryName(rt::UnaryKind k) {
  return "LOOMRT_" + llvm::StringRef(rt::stringifyUnaryKind(k)).upper();
}
std::string binaryName(rt::BinaryKind k) {
  return "LOOMRT_" + llvm::StringRef(rt::stringifyBinaryKind(k)).upper();
}
std::string reduceName(rt::ReduceKind k) {
  return "LOOMRT_REDUCE_" + llvm::StringRef(rt::stringifyReduceKind(k)).upper();
}
std::string f(double x) {
  // Masks fill with -inf (an ONNX export's causal mask): C++ has no
  // literal for it, so non-finite values become <cmath>'s macros.
  if (std::isnan(x))
    return "NAN";
  if (std::isinf(x))
    return x > 0 ? "INFINITY" : "-INFINITY";
  std::string s;
  llvm::raw_string_ostream os(s);
  os << llvm::format("%.9g", x);
  if (s.find_first_of(".eni") == std::string::npos)
    s += ".0";
  return s + "f";
}
std::string f(const APFloat &x) { return f(x.convertToDouble()); }
/// Constants up to this many elements are written as readable literals;
/// larger ones as bytes (writeConst).
constexpr int64_t kLiteralElements = 4096;

/// The generated program's one C++ helper: a lambda queued as a host task
/// (loomrt_step_host_task takes a function and its argument).
constexpr const char *kHostTaskHelper =
    "template <typename F> loomrt_status loom_host_task(loomrt_step_ctx c, F f) {\n"
    "  F *p = new F(f);\n"
    "  return loomrt_step_host_task(\n"
    "      c, [](void *a) { return (*static_cast<F *>(a))(); }, p,\n"
    "      [](void *a) { delete static_cast<F *>(a); });\n"
    "}\n\n";


class Emitter;

/// The text of a runtime call (visitRuntimeCall's builder): each argument
/// as C++, the tables and configs it points to declared in a block around
/// the call.
struct TextCall {
  explicit TextCall(Emitter &e) : e(e) {}
  Emitter &e;
  /// Shape tables by name (declared in argument order: the order the
  /// compiler evaluates the builder's calls in is unspecified).
  llvm::StringMap<std::string> shapes;
  std::vector<std::string> lines;
  std::string post;

  std::string name(Value v) const;
  std::string stream(Value v) const { return name(v); }
  std::string comm(Value v) const { return name(v); }
  std::string buf(Value v) const { return v ? name(v) : std::string("nullptr"); }
  template <typename T>
  std::string ptr(Value v, const char *type) const {
    return std::string("(") + type + ")" + buf(v);
  }
  template <typename T>
  std::string ptrAt(Value v, int64_t bytes, const char *type) const {
    return std::string("(") + type + ")((char *)" + buf(v) + " + " + std::to_string(bytes) + ")";
  }
  std::string i(int64_t x) const { return std::to_string(x); }
  std::string flag(bool x) const { return x ? "1" : "0"; }
  std::string f(double x) const { return ::loom::f(x); }
  std::string lr(double x) const { return "loomrt_step_lr(c, " + f(x) + ")"; }
  /// An Adam config's last fields: the freeze step, and with 1-bit Adam's
  /// variance refresh the run-time values (loomrt_step_variance_*).
  std::string freeze(int64_t step) const;
  std::string hostInt(Value v) const { return "(uint64_t)" + name(v); }
  std::string rankTimes(Value comm, int64_t n) const {
    return "(uint64_t)loomrt_comm_rank(" + name(comm) + ") * " + i(n);
  }
  std::string peer(Value comm, int64_t k) const {
    return "loomrt_comm_peer(" + name(comm) + ", " + std::to_string(k) + ")";
  }
  std::string dtype(rt::DType d) const { return dtypeName(d); }
  std::string unary(rt::UnaryKind k) const { return unaryName(k); }
  std::string binary(rt::BinaryKind k) const { return binaryName(k); }
  std::string reduce(rt::ReduceKind k) const { return reduceName(k); }
  std::string codec(rt::BlockCodec k) const {
    return "LOOMRT_CODEC_" + llvm::StringRef(rt::stringifyBlockCodec(k)).upper();
  }
  std::string shape(const char *n, ArrayRef<int64_t> v) {
    shapes[n] = std::string(n) + "[] = {" + join(v) + "}";
    return n;
  }
  std::string gemm(const loomrt_gemm &g) {
    lines.push_back("static const loomrt_gemm g_ = {" + i(g.trans_a) + ", " + i(g.trans_b) + ", " +
                    i(g.batch) + ", " + i(g.m) + ", " + i(g.n) + ", " + i(g.k) + ", " +
                    i(g.stride_a) + ", " + i(g.stride_b) + ", " + i(g.stride_c) + ", " +
                    f(g.alpha) + ", " + f(g.beta) + ", " + dtypeName(rt::DType(g.in)) + ", " +
                    dtypeName(rt::DType(g.out)) + "};");
    return "&g_";
  }
  template <typename Op> std::string adam(Op o) {
    lines.push_back("int64_t t_ = " + name(o.getStep()) + ";");
    lines.push_back("loomrt_adam_config cfg_ = {" + lr(o.getLr().convertToDouble()) + ", " +
                    f(o.getBeta1().convertToDouble()) + ", " + f(o.getBeta2().convertToDouble()) +
                    ", " + f(o.getEps().convertToDouble()) + ", " +
                    f(o.getWeightDecay().convertToDouble()) + ", " + flag(o.getDecoupled()) +
                    ", t_, " + freeze(o.getFreezeStep()) + "};");
    // An update the host runs itself is timed for the driver (the JSON
    // log's cpu_update_*, --trace's cpu lane); batched updates run on the
    // GPU's compute stream.
    if constexpr (std::is_same_v<Op, rt::AdamOp>)
      if (o.getTimed()) {
        lines.push_back("loomrt_step_host_begin(c, \"adam\");");
        post = "loomrt_step_host_end(c);";
      }
    return "&cfg_";
  }
  /// loomrt_adam_multi's tensors: an array in the call's block.
  std::string adamTensors(rt::AdamMultiOp o) {
    std::string items;
    ArrayRef<int64_t> sizes = o.getSizes();
    for (size_t k = 0; k < sizes.size(); ++k)
      items += std::string(k ? ",\n      " : "") + "{(float *)" + buf(o.getParams()[k]) + ", " +
               buf(o.getGrads()[k]) + ", (float *)" + buf(o.getExpAvgs()[k]) + ", (float *)" +
               buf(o.getExpAvgSqs()[k]) + ", " +
               (o.getRefresh().empty() ? std::string("nullptr")
                                       : "(uint16_t *)" + buf(o.getRefresh()[k])) +
               ", " + i(sizes[k]) + "}";
    lines.push_back("const loomrt_adam_tensor at_[] = {" + items + "};");
    return "at_";
  }
  /// A fused region's program: its tables, static in the call's block.
  std::string fused(rt::FusedElementwiseOp o) {
    std::string insts;
    ArrayRef<int32_t> p = o.getProgram();
    for (size_t k = 0; k + 3 < p.size(); k += 4)
      insts += std::string(k ? ", " : "") + "{" + i(p[k]) + ", " + i(p[k + 1]) + ", " +
               i(p[k + 2]) + ", " + i(p[k + 3]) + "}";
    auto types = [&](const char *n, ArrayRef<int32_t> t) {
      if (t.empty())
        return std::string("nullptr");
      std::string list;
      for (int32_t x : t)
        list += std::string(list.empty() ? "" : ", ") + dtypeName(rt::DType(x));
      lines.push_back(std::string("static const loomrt_dtype ") + n + "[] = {" + list + "};");
      return std::string(n);
    };
    std::string in = types("fit_", o.getInTypes()), out = types("fot_", o.getOutTypes());
    lines.push_back("static const loomrt_fused_inst fp_insts_[] = {" + insts + "};");
    // The name is an identifier (the verifier checked it).
    lines.push_back("static const loomrt_fused_program fp_ = {\"" + o.getName().str() + "\", " +
                    i(o.getInputs().size()) + ", " + i(o.getOutputs().size()) + ", " +
                    i(p.size() / 4) + ", " + in + ", " + out + ", fp_insts_};");
    return "&fp_";
  }
  std::string inputs(const char *n, ValueRange vs) { return list(n, vs, "const void *"); }
  std::string outputs(const char *n, ValueRange vs) { return list(n, vs, "void *"); }
  std::string list(const char *n, ValueRange vs, const char *type) {
    if (vs.empty())
      return "nullptr";
    std::string items;
    for (Value v : vs)
      items += std::string(items.empty() ? "" : ", ") + buf(v);
    lines.push_back(std::string(type) + n + "[] = {" + items + "};");
    return n;
  }
  template <typename F, typename... A>
  bool call(const char *fn, F, const A &...args);
};

/// The helper macros at the top of every generated source.
const char kMacros[] =
    "#define LOOM_CHECK(x)                                        \\\n"
    "  do {                                                     \\\n"
    "    loomrt_status st_ = (x);                               \\\n"
    "    if (st_ != LOOMRT_OK)                                  \\\n"
    "      return st_;                                          \\\n"
    "  } while (0)\n"
    "#define LOOM_ALLOC(v, bytes)                                 \\\n"
    "  void *v = loomrt_step_alloc(c, (bytes));                 \\\n"
    "  if (!v)                                                  \\\n"
    "    return LOOMRT_ERR_OUT_OF_MEMORY\n"
    "#define LOOM_ALLOC_AT(v, offset, bytes)                      \\\n"
    "  void *v = loomrt_step_alloc_at(c, (offset), (bytes));    \\\n"
    "  if (!v)                                                  \\\n"
    "    return LOOMRT_ERR_OUT_OF_MEMORY\n"
    "#define LOOM_ALLOC_HOST(v, bytes)                            \\\n"
    "  void *v = loomrt_step_alloc_host(c, (bytes));            \\\n"
    "  if (!v)                                                  \\\n"
    "    return LOOMRT_ERR_OUT_OF_MEMORY\n\n";

/// Offloaded optimizers: the parameters the CPU's Adam updates a step (the
/// driver measures their rate against the plan's).
int64_t cpuUpdateParams(func::FuncOp step) {
  int64_t n = 0;
  step.walk([&](rt::AdamOp a) {
    if (auto st = a.getStream().getDefiningOp<rt::StreamOp>())
      if (st.getRole() == rt::StreamRole::host)
        n += int64_t(a.getN());
  });
  return n;
}

class Emitter {
  friend struct TextCall;

public:
  Emitter(ModuleOp module, const CodegenOptions &opts)
      : module(module), opts(opts) {
    // 1-bit Adam with a variance refresh: every Adam config asks the step
    // how many steps its variance stands for and, after the freeze, the
    // step its bias correction stops at (both run-time values).
    if (auto step = module.lookupSymbol<func::FuncOp>(LoomDialect::kTrainStep))
      if (auto program = step->getAttrOfType<DictionaryAttr>(rt::kProgramAttr))
        if (auto k = program.getAs<IntegerAttr>("variance_refresh"))
          varianceRefresh = k.getInt();
  }

  /// The last field of a global's entry: an imported splat's value.
  static std::string splatOf(Operation *op) {
    auto p = dyn_cast<ParamOp>(op);
    return p && isSplatValue(p)
               ? f(cast<DenseElementsAttr>(p.getValueAttr()).getSplatValue<APFloat>())
               : std::string("0");
  }

  /// `op`'s (a loom.param or loom.state) entry of the globals table, up to
  /// its placement fields; `anyWeights` set when it reads the weights file.
  /// `layoutOnly`: a member of a loom.layout_of shard, described by name
  /// and shape with nothing to draw (zeros, not a parameter).
  LogicalResult describeGlobal(Operation *op, std::string &out, bool &anyWeights,
                               bool layoutOnly = false) {
    RankedTensorType type;
    InitAttr init;
    StringRef name;
    bool isParam = false;
    int fromWeights = 0;
    if (auto p = dyn_cast<ParamOp>(op)) {
      type = cast<RankedTensorType>(p.getType());
      init = p.getInitAttr();
      if (p.getValue()) {
        // Imported values live in the weights file beside the binary,
        // or in the entry itself when they are one number repeated; the
        // initialiser is what --init=random draws instead.
        if (isSplatValue(p)) {
          fromWeights = 2;
        } else {
          if (opts.weightsFile.empty())
            return p.emitError() << "parameters with imported values need a "
                                    "weights file: give -o FILE (or use "
                                    "--init=random)";
          fromWeights = 1;
        }
        init = defaultInitFor(p);
      }
      name = p.getSymName();
      isParam = true;
    } else {
      auto s = cast<StateOp>(op);
      type = cast<RankedTensorType>(s.getType());
      init = s.getInitAttr();
      name = s.getSymName();
    }
    if (layoutOnly) {
      init = InitAttr();
      isParam = false;
      fromWeights = 0;
    }
    std::optional<rt::DType> dt = rt::dtypeOf(type.getElementType());
    std::optional<MemSpace> space = getMemSpace(type);
    if (!dt || type.getRank() > 8 ||
        (type.getEncoding() && space != MemSpace::device && space != MemSpace::pinned))
      return op->emitError() << "code generation supports f32, bf16 and i64 "
                                "parameters and state on the device or in pinned "
                                "host memory";
    llvm::raw_string_ostream o(out);
    o << "{" << cppStringLiteral(name) << ", " << dtypeName(*dt) << ", " << type.getRank() << ", {"
      << join(type.getShape()) << "}, " << (init ? int(init.getKind()) : 0) << ", "
      << llvm::format("%.17g", init ? init.getA().convertToDouble() : 0.0) << ", "
      << llvm::format("%.17g", init ? init.getB().convertToDouble() : 0.0) << ", "
      << (isParam ? 1 : 0) << ", " << fromWeights;
    anyWeights |= fromWeights == 1;
    return success();
    }

  /// Tensor and pipeline parallelism's fields of a global (after
  /// member_align): the part this rank holds of a parameter the ranks split
  /// (loom.tp_slice), or of the state that is its copy (an fp32 master
  /// drawn as it is), and the stream's skip before it (loom.init_skip).
  /// Empty for a whole one that skips nothing.
  std::string tpFields(Operation *op) {
    auto slice = op->getAttrOfType<DenseI64ArrayAttr>(LoomDialect::TpSliceAttrHelper::getNameStr());
    if (auto st = dyn_cast<StateOp>(op); !slice && st && st.getParamAttr())
      if (auto p = module.lookupSymbol<ParamOp>(st.getParamAttr()))
        slice = p->getAttrOfType<DenseI64ArrayAttr>(LoomDialect::TpSliceAttrHelper::getNameStr());
    // A pipeline stage's parameter: the stream elements before it that
    // other stages' parameters take (loom.init_skip).
    auto skip = op->getAttrOfType<IntegerAttr>(LoomDialect::InitSkipAttrHelper::getNameStr());
    bool tp = slice && slice.size() == 2;
    if (!tp && !skip)
      return "";
    // (member_align first: 0, a whole parameter's or a shard member's.)
    return ", 0, " + std::to_string(tp ? slice[0] : 0) + ", " + std::to_string(tp ? slice[1] : 0) +
           ", " + std::to_string(skip ? skip.getInt() : 0);
  }

  /// The globals table (parameters and state in declaration order, the
  /// initialisation order) and the member tables of ZeRO-3 shards: a shard
  /// (loom.shard_of) lists its member parameters, which are not globals
  /// themselves; the driver initialises each member as it would a
  /// parameter and keeps this rank's block of their concatenation.
  LogicalResult globalTables(std::string &table, std::string &memberTables, bool &anyWeights) {
    llvm::raw_string_ostream tos(table), mos(memberTables);
  for (Operation &op : module.getBody()->getOperations()) {
    if (!isa<ParamOp, StateOp>(op) || op.hasAttr(LoomDialect::ShardedIntoAttrHelper::getNameStr()))
      continue;
    std::string entry;
    if (failed(describeGlobal(&op, entry, anyWeights)))
      return failure();
    StringRef name = cast<SymbolOpInterface>(op).getName();
    globals[name] = int(globals.size());
    auto members = op.getAttrOfType<ArrayAttr>(LoomDialect::ShardOfAttrHelper::getNameStr());
    // A ZeRO 1-2 moment shard's layout (loom.layout_of): members to name
    // and place, none drawn.
    bool layoutOnly = false;
    if (auto layout = op.getAttrOfType<ArrayAttr>(LoomDialect::LayoutOfAttrHelper::getNameStr());
        layout && !members) {
      members = layout;
      layoutOnly = true;
    }
    // Placement and the mirrored parameter (a working copy the driver
    // initialises from the master weights: loom-offload-optimizer).
    int mirror = 0; // 1 + the global's index
    if (auto m = op.getAttrOfType<FlatSymbolRefAttr>(LoomDialect::MirrorOfAttrHelper::getNameStr())) {
      if (!globals.count(m.getValue()))
        return op.emitError() << "code generation: loom.mirror_of must name a "
                                 "parameter declared before it";
      mirror = globals.lookup(m.getValue()) + 1;
    }
    std::string tail = ", " + std::string(isHostMemory(op.getAttrOfType<TypeAttr>("type").getValue())
                                              ? "LOOMRT_MEM_PINNED"
                                              : "LOOMRT_MEM_DEVICE") +
                       ", " + std::to_string(mirror) + ", " + splatOf(&op) + "},\n";
    if (!members) {
      if (std::string tp = tpFields(&op); !tp.empty())
        tail.insert(tail.size() - 3, tp);
      tos << "    " << entry << ", 0, nullptr, 0" << tail;
      continue;
    }
    std::string mt = "kMembers" + std::to_string(globals.size() - 1);
    mos << "const loomrt_global_desc " << mt << "[] = {\n";
    for (Attribute a : members) {
      auto m = module.lookupSymbol<ParamOp>(cast<FlatSymbolRefAttr>(a));
      std::string me;
      if (!m || failed(describeGlobal(m, me, anyWeights, layoutOnly)))
        return op.emitError() << "code generation: a member of this shard is not a loom.param";
      // A member that is a global itself (ZeRO 1-2 master shards,
      // loom-data-parallel master-shards) is the shard's source: the
      // driver copies its block from it instead of drawing again.
      int source = 0;
      if (!layoutOnly && !m->hasAttr(LoomDialect::ShardedIntoAttrHelper::getNameStr())) {
        auto it = globals.find(m.getSymName());
        if (it == globals.end())
          return op.emitError() << "code generation: a shard's member '" << m.getSymName()
                                << "' that is a global must be declared before the shard";
        source = it->second + 1;
      }
      mos << "    " << me << ", 0, nullptr, 0, LOOMRT_MEM_DEVICE, " << source << ", "
          << (layoutOnly ? std::string("0") : splatOf(m)) << (layoutOnly ? "" : tpFields(m))
          << "},\n";
    }
    mos << "};\n";
    auto padded = op.getAttrOfType<IntegerAttr>(LoomDialect::PaddedAttrHelper::getNameStr());
    if (!padded)
      return op.emitError() << "code generation: a loom.shard_of parameter needs loom.padded";
    // The members' alignment in the bucket (loom-data-parallel
    // member-align): the gaps between them in the gathered bucket.
    int64_t align = 1;
    if (auto a = op.getAttrOfType<IntegerAttr>(LoomDialect::MemberAlignAttrHelper::getNameStr()))
      align = a.getInt();
    tail.insert(tail.size() - 3, ", " + std::to_string(align));
    tos << "    " << entry << ", " << members.size() << ", " << mt << ", "
        << padded.getInt() << tail;
  }
    return success();
  }

  /// The pipeline's stages (loom.pipeline: this program is one), or 1.
  int64_t pipelineStages() {
    auto pipe = module->getAttrOfType<DenseI64ArrayAttr>(LoomDialect::PipelineAttrHelper::getNameStr());
    return pipe && pipe.size() >= 3 ? pipe[1] : 1;
  }

  /// Expert parallelism's ranks (loom.expert_parallel: this program is
  /// one rank's), or 1.
  int64_t expertRanks() {
    auto ep = module->getAttrOfType<DenseI64ArrayAttr>(
        LoomDialect::ExpertParallelAttrHelper::getNameStr());
    return ep && ep.size() == 3 ? ep[1] : 1;
  }

  int64_t tensorParallel() {
    auto tp = module->getAttrOfType<IntegerAttr>(LoomDialect::TensorParallelAttrHelper::getNameStr());
    return tp ? tp.getInt() : 1;
  }

  LogicalResult run(llvm::raw_ostream &out) {
    auto step = module.lookupSymbol<func::FuncOp>(LoomDialect::kTrainStep);
    auto program = step ? step->getAttrOfType<DictionaryAttr>(rt::kProgramAttr) : DictionaryAttr();
    if (!program)
      return (step ? step.emitError() : module.emitError())
             << "code generation needs @train_step to take its inputs as f32 or i64 "
                "tensors whose first dimension is the batch (a language model's "
                "(tokens, targets), a classifier's (inputs..., labels)) and to return "
                "the loss";
    auto prog = [&](StringRef k) { return program.getAs<IntegerAttr>(k).getInt(); };
    // 1-bit Adam: the step after the freeze, a second entry.
    int64_t freezeStep = program.getAs<IntegerAttr>("freeze_step")
                             ? program.getAs<IntegerAttr>("freeze_step").getInt()
                             : 0;
    if (freezeStep && !module.lookupSymbol(LoomDialect::kTrainStepFrozen))
      return module.emitError() << "code generation: the program has a freeze step but no "
                                   "@train_step_frozen";
    // With ZeRO 1 and 2, the function the driver runs once before the
    // first frozen step (loom-data-parallel's @enter_frozen).
    bool enter = freezeStep && module.lookupSymbol(LoomDialect::kEnterFrozen);
    // Streaming DiLoCo: its start and its outer steps, a table for the
    // driver.
    bool dilocoStart = module.lookupSymbol(LoomDialect::kDilocoStart) != nullptr;
    // The entries that take only the globals (@enter_frozen, DiLoCo's):
    // each a wrapper named entry_<function>, defined in `globalsEntries`.
    std::string globalsEntries;
    auto globalsEntry = [&](StringRef name) {
      std::string wrapper = cppIdentifier("entry_", name);
      globalsEntries += "loomrt_status " + wrapper + "(loomrt_step_ctx c, void **G) {\n  return " +
                        cppIdentifier("fn_", name) + "(c, G);\n}\n\n";
      return wrapper;
    };
    std::string enterEntry = enter ? globalsEntry(LoomDialect::kEnterFrozen) : "nullptr";
    std::string startEntry = dilocoStart ? globalsEntry(LoomDialect::kDilocoStart) : "nullptr";
    std::string outerTable;
    size_t numOuter = 0;
    if (auto outer = program.getAs<ArrayAttr>("outer"))
      for (Attribute a : outer) {
        auto d = cast<DictionaryAttr>(a);
        StringRef name = d.getAs<StringAttr>("name").getValue();
        std::string wrapper = globalsEntry(name);
        outerTable += "    {" + cppStringLiteral(name) + ", " + wrapper + ", " +
                      std::to_string(d.getAs<IntegerAttr>("every").getInt()) + ", " +
                      std::to_string(d.getAs<IntegerAttr>("offset").getInt()) + ", " +
                      (d.getAs<BoolAttr>("async") && d.getAs<BoolAttr>("async").getValue()
                           ? "1"
                           : "0") +
                      "},\n";
        ++numOuter;
      }
    // A graph model's sampler: its fan-outs (norm is read by prog()).
    SmallVector<int64_t> fanouts;
    if (auto fa = program.getAs<DenseI64ArrayAttr>("fanouts"))
      fanouts.assign(fa.asArrayRef().begin(), fa.asArrayRef().end());
    // The step's inputs, for the driver's data loaders.
    std::string inputTable, entryArgs;
    auto inputs = program.getAs<ArrayAttr>("inputs");
    for (auto [i, a] : llvm::enumerate(inputs)) {
      auto in = cast<DictionaryAttr>(a);
      ArrayRef<int64_t> shape = in.getAs<DenseI64ArrayAttr>("shape").asArrayRef();
      auto field = [&](StringRef key) {
        auto v = in.getAs<IntegerAttr>(key);
        return std::to_string(v ? v.getInt() : 0);
      };
      inputTable += "    {" + cppStringLiteral(in.getAs<StringAttr>("name").getValue()) + ", " +
                    dtypeName(rt::DType(in.getAs<IntegerAttr>("dtype").getInt())) + ", " +
                    std::to_string(shape.size()) + ", {" + join(shape) + "}, " +
                    field("limit") + ", loomrt_input_role(" + field("role") + "), " +
                    field("depth") + ", loomrt_mem_space(" + field("space") + ")},\n";
      entryArgs += ", in[" + std::to_string(i) + "]";
    }

    // Parameters and state, in declaration order (the initialisation order).
    // A ZeRO-3 shard (loom.shard_of) lists its member parameters, which are
    // not globals themselves: the driver initialises each member as it
    // would a parameter and keeps this rank's block of their concatenation.
    std::string table, memberTables;
    bool anyWeights = false;
    if (failed(globalTables(table, memberTables, anyWeights)))
      return failure();

    // The lowered functions, in module order (the lowering keeps callees
    // first: it only removes what @train_step does not reach).
    hostTasks = module.walk([](rt::HostTaskOp) { return WalkResult::interrupt(); })
                    .wasInterrupted();
    for (func::FuncOp fn : module.getOps<func::FuncOp>())
      if (failed(emitFunction(fn)))
        return failure();

    // --replan: each plan in a namespace of its own, `program()` giving its
    // loomrt_program; the header once, main beside them (emitReplanMain).
    const std::string &ns = opts.programNamespace;
    if (opts.header)
      out << "// Training binary generated by loomc for " << cppComment(opts.model)
          << " (target " << cppComment(opts.target) << ").\n"
          << "// Regenerate it with loomc rather than editing it: each runtime "
             "call below\n// is preceded by the loom op it implements.\n"
          << "#include \"loomrt/train.h\"\n\n#include <cmath>\n#include <cstring>\n\n"
          << kMacros;
    out << "namespace " << (ns.empty() ? "" : ns + " ") << "{\n\n"
        << (hostTasks ? kHostTaskHelper : "")
        << constants << decls << bodies
        << "loomrt_status entry(loomrt_step_ctx c, void **G, const void *const *in, "
           "void **loss) {\n"
        << "  return " << cppIdentifier("fn_", LoomDialect::kTrainStep) << "(c, G" << entryArgs
        << ", loss);\n}\n\n"
        << (freezeStep ? "loomrt_status entry_frozen(loomrt_step_ctx c, void **G, "
                         "const void *const *in, void **loss) {\n  return " +
                             cppIdentifier("fn_", LoomDialect::kTrainStepFrozen) + "(c, G" +
                             entryArgs + ", loss);\n}\n\n"
                       : std::string())
        << globalsEntries
        << (numOuter ? "const loomrt_outer_desc kOuter[] = {\n" + outerTable + "};\n\n"
                     : std::string())
        << memberTables << "const loomrt_global_desc kGlobals[] = {\n"
        << table << "};\n\n"
        << "const loomrt_input_desc kInputs[] = {\n"
        << inputTable << "};\n\n"
        << (fanouts.empty() ? std::string()
                            : "const int64_t kFanouts[] = {" + join(fanouts) + "};\n\n")
        << (ns.empty() ? "} // namespace\n\nint main(int argc, char **argv) {\n"
                       : "const loomrt_program *program() {\n")
        << "  static const loomrt_program program = {\n"
        << "      LOOMRT_TRAIN_ABI, " << cppStringLiteral(opts.model) << ",\n      "
        << (opts.target == "cuda"  ? "LOOMRT_BACKEND_CUDA"
            : opts.target == "hip" ? "LOOMRT_BACKEND_HIP"
                                   : "LOOMRT_BACKEND_CPU")
        << ",\n      sizeof(kGlobals) / sizeof(kGlobals[0]), kGlobals,\n      " << prog("batch")
        << ", " << prog("seq") << ", " << prog("vocab") << ",\n      "
        << (anyWeights ? cppStringLiteral(opts.weightsFile) : std::string("nullptr")) << ", entry, "
        << prog("world") << ", " << prog("zero_stage") << ",\n      "
        << (prog("task") == 2   ? "LOOMRT_TASK_GRAPH"
            : prog("task") == 1 ? "LOOMRT_TASK_ARRAYS"
                                : "LOOMRT_TASK_TOKENS")
        << ", sizeof(kInputs) / sizeof(kInputs[0]), kInputs,\n      "
        << (freezeStep ? "entry_frozen, " + std::to_string(freezeStep) : std::string("nullptr, 0"))
        << ", " << enterEntry << ", " << startEntry
        << (numOuter ? ", sizeof(kOuter) / sizeof(kOuter[0]), kOuter" : ", 0, nullptr")
        << (fanouts.empty() ? std::string(", 0, nullptr, LOOMRT_GRAPH_MEAN")
                            : ", " + std::to_string(fanouts.size()) + ", kFanouts, " +
                                  (prog("norm") ? "LOOMRT_GRAPH_GCN" : "LOOMRT_GRAPH_MEAN"))
        << ", " << (program.getAs<IntegerAttr>("elastic") ? prog("elastic") : 0) << ",\n      "
        << opts.deviceMemoryBytes << "LL, " << opts.predictedDeviceBytes << "LL, "
        << cpuUpdateParams(step) << "LL, " << llvm::formatv("{0:e}", opts.plannedCpuAdamRate).str()
        << ", nullptr, " << tensorParallel() << ", " << pipelineStages() << ", nullptr, "
        << expertRanks() << ", " << varianceRefresh << "};\n"
        << (ns.empty() ? "  return loomrt_train_main(argc, argv, &program);\n}\n"
                       : "  return &program;\n}\n\n} // namespace " + ns + "\n\n");
    return success();
  }

private:
  LogicalResult emitFunction(func::FuncOp fn) {
    names.clear();
    if (fn.isExternal() || !fn.getBody().hasOneBlock())
      return fn.emitError("code generation: a lowered function has one block");
    // A function loom-capture-graphs marked: its calls go in fn_NAME_body,
    // and fn_NAME hands that to loomrt_step_graph (graphWrapper).
    bool graph = fn->hasAttr(rt::kGraphAttr);
    std::string fnName = cppIdentifier("fn_", fn.getName());
    std::string params = "(loomrt_step_ctx c, void **G";
    for (auto [i, a] : llvm::enumerate(fn.getArguments())) {
      if (!isa<rt::BufferType>(a.getType()))
        return fn.emitError("code generation: function arguments must be !loomrt.buffer "
                            "(run loom-lower-to-runtime)");
      std::string n = "a" + std::to_string(i);
      params += ", const void *" + n;
      names[a] = n;
    }
    for (unsigned i = 0; i < fn.getNumResults(); ++i)
      params += ", void **r" + std::to_string(i);
    params += ")";
    std::string sig = "loomrt_status " + fnName + (graph ? "_body" : "") + params;
    decls += sig + ";\n";
    if (graph) {
      decls += "loomrt_status " + fnName + params + ";\n";
      bodies += graphWrapper(fn, fnName, params);
    }
    std::string body;
    os = std::make_unique<llvm::raw_string_ostream>(body);
    *os << sig << " {\n  loomrt_stream s = loomrt_step_stream(c);\n  (void)s;\n"
        << "  loomrt_comm comm = loomrt_step_comm(c);\n  (void)comm;\n"
        << "  loomrt_stream cs = loomrt_step_comm_stream(c);\n  (void)cs;\n"
        << "  loomrt_stream hs = loomrt_step_host_stream(c);\n  (void)hs;\n"
        << "  loomrt_stream xs = loomrt_step_copy_stream(c, 0);\n  (void)xs;\n"
        << "  loomrt_stream ys = loomrt_step_copy_stream(c, 1);\n  (void)ys;\n";
    // loom-plan-arena's region, before the first buffer placed in it (a
    // captured function's wrapper asks, outside the capture: growing the
    // region waits for the stream).
    if (auto arena = fn->getAttrOfType<IntegerAttr>(rt::kArenaAttr); arena && !graph)
      *os << "  LOOM_CHECK(loomrt_step_arena(c, " << arena.getInt() << "u));\n";
    for (Operation &op : fn.getBody().front())
      if (failed(emit(&op)))
        return failure();
    *os << "}\n\n";
    os.reset();
    bodies += body;
    return success();
  }

  /// fn_NAME of a function loom-capture-graphs marked: its arguments and
  /// result slots packed for loomrt_step_graph, which runs, captures or
  /// replays fn_NAME_body; the globals and the inputs are what a replay
  /// must find as they were captured.
  std::string graphWrapper(func::FuncOp fn, const std::string &fnName,
                           const std::string &params) {
    unsigned na = fn.getNumArguments(), nr = fn.getNumResults();
    std::string ins, outs, call = "c, x->G";
    for (unsigned i = 0; i < na; ++i) {
      ins += (i ? ", a" : "a") + std::to_string(i);
      call += ", x->a[" + std::to_string(i) + "]";
    }
    for (unsigned i = 0; i < nr; ++i) {
      outs += (i ? ", r" : "r") + std::to_string(i);
      call += ", x->r[" + std::to_string(i) + "]";
    }
    std::string w = "loomrt_status " + fnName + params + " {\n";
    if (auto arena = fn->getAttrOfType<IntegerAttr>(rt::kArenaAttr))
      w += "  LOOM_CHECK(loomrt_step_arena(c, " + std::to_string(arena.getInt()) + "u));\n";
    // (Arrays of one at least: C++ has no empty ones.)
    w += "  struct Args {\n    void **G;\n    const void *a[" + std::to_string(std::max(na, 1u)) +
         "];\n    void **r[" + std::to_string(std::max(nr, 1u)) + "];\n  } args = {G, {" + ins +
         "}, {" + outs + "}};\n";
    w += "  return loomrt_step_graph(c, " + cppStringLiteral(fn.getName()) + ", G, " +
         std::to_string(globals.size()) + ", args.a, " + std::to_string(na) + ", args.r, " +
         std::to_string(nr) + ",\n      [](loomrt_step_ctx c, void *p) -> loomrt_status {\n" +
         "        auto *x = static_cast<Args *>(p);\n        (void)x;\n        return " + fnName +
         "_body(" + call + ");\n      },\n      &args);\n}\n\n";
    return w;
  }

  std::string fresh(const char *p = "v") { return p + std::to_string(counter++); }
  /// The C++ name of a value; unknown values (not lowered) are refused by
  /// emit() before they are asked for.
  std::string name(Value v) const { return names.lookup(v); }
  std::string define(Value v, const char *p = "v") { return names[v] = fresh(p); }
  void call(const std::string &c) {
    *os << (inBlock ? "    " : "  ") << "LOOM_CHECK(" << c << ");\n";
  }
  /// `{ ...static tables...` and `}` around a call that needs them.
  void open(const std::string &tables) {
    *os << "  {\n    " << tables << "\n";
    inBlock = true;
  }
  void close() {
    *os << "  }\n";
    inBlock = false;
  }

  /// The world's communicator, or a group of some levels: split from the
  /// world's the first time (the driver keeps it in the step context).
  LogicalResult emitComm(rt::CommOp o) {
    if (!o.getLevels()) {
      names[o.getResult()] = "comm";
      return success();
    }
    // A group of some levels: split from the world's communicator the
    // first time (the driver keeps it in the step context).
    std::string v = define(o.getResult(), "g");
    // (Named: a range-for over *o.getLevels() would outlive the
    // optional holding the ArrayRef.)
    ArrayRef<int64_t> levels = *o.getLevels(), sizes = *o.getSizes();
    uint64_t mask = 0;
    for (int64_t l : levels)
      mask |= uint64_t(1) << l;
    *os << "  static const int64_t " << v << "_sizes[] = {" << join(sizes) << "};\n"
        << "  loomrt_comm " << v << " = loomrt_step_group(c, " << mask << "u, "
        << sizes.size() << ", " << v << "_sizes);\n"
        << "  if (!" << v << ")\n    return LOOMRT_ERR_BACKEND;\n";
    return success();
  }

  LogicalResult emit(Operation *op) {
    for (Value v : op->getOperands())
      if (!names.count(v))
        return op->emitError() << "code generation: an operand of '" << op->getName()
                               << "' is not a lowered value (run loom-lower-to-runtime)";
    // Kernels, copies, updates, collectives: the shared table.
    TextCall text(*this);
    if (visitRuntimeCall(op, text))
      return success();
    return llvm::TypeSwitch<Operation *, LogicalResult>(op)
        .Case([&](rt::CommentOp o) {
          *os << "  // " << cppComment(o.getText()) << "\n";
          return success();
        })
        .Case([&](rt::StreamOp o) {
          static const char *role[] = {"s", "cs", "hs", "xs", "ys"};
          names[o.getResult()] = role[int(o.getRole())];
          return success();
        })
        .Case([&](rt::CommOp o) { return emitComm(o); })
        .Case([&](rt::AllocOp o) {
          if (std::optional<uint64_t> at = o.getOffset()) {
            *os << "  LOOM_ALLOC_AT(" << define(o.getResult()) << ", " << *at << "u, "
                << o.getBytes() << ");\n";
            return success();
          }
          *os << (o.getHost() ? "  LOOM_ALLOC_HOST(" : "  LOOM_ALLOC(") << define(o.getResult())
              << ", " << o.getBytes() << ");\n";
          return success();
        })
        .Case([&](rt::FreeOp o) {
          // Attention's workspace goes back at once: the backward recomputes.
          bool scratch = llvm::any_of(o.getBuffer().getUsers(), [&](Operation *u) {
            Value ws = llvm::TypeSwitch<Operation *, Value>(u)
                           .Case<rt::AttentionOp, rt::AttentionGradOp, rt::AttentionSaveOp,
                                 rt::AttentionGradSavedOp>([](auto a) { return a.getWorkspace(); })
                           .Default([](Operation *) { return Value(); });
            return ws && ws == o.getBuffer();
          });
          *os << "  loomrt_step_free(c, " << name(o.getBuffer()) << ");"
              << (scratch ? " // scratch: attention's workspace" : "") << "\n";
          return success();
        })
        .Case([&](rt::GlobalOp o) -> LogicalResult {
          auto it = globals.find(o.getName());
          if (it == globals.end())
            return o.emitError() << "code generation: @" << o.getName()
                                 << " is not a global of the program";
          *os << "  void *" << define(o.getResult()) << " = G[" << it->second << "];\n";
          return success();
        })
        .Case([&](rt::ViewOp o) {
          std::string src = name(o.getSource());
          *os << "  void *" << define(o.getResult()) << " = (char *)" << src << " + "
              << o.getOffset() << ";\n";
          return success();
        })
        .Case([&](rt::RankViewOp o) {
          std::string src = name(o.getSource()), comm = name(o.getComm());
          *os << "  void *" << define(o.getResult()) << " = (char *)" << src
              << " + (size_t)loomrt_comm_rank(" << comm << ") * " << o.getBlockBytes() << ";\n";
          return success();
        })
        .Case([&](rt::BackwardDoneOp) {
          *os << "  loomrt_step_backward_done(c);\n";
          return success();
        })
        .Case([&](rt::RecordOp o) {
          // In a host task the event was taken before it (program order).
          std::string e = inTask ? name(o.getEvent()) : define(o.getEvent());
          if (!inTask)
            *os << "  loomrt_event " << e << " = loomrt_step_event(c);\n";
          call("loomrt_event_record(" + e + ", " + name(o.getStream()) + ")");
          return success();
        })
        .Case([&](rt::HostTaskOp o) { return hostTask(o); })
        .Case([&](rt::JoinOp) {
          call("loomrt_step_host_join(c)");
          return success();
        })
        .Case([&](rt::WaitOp o) {
          call("loomrt_stream_wait_event(" + name(o.getStream()) + ", " + name(o.getEvent()) + ")");
          return success();
        })
        .Case([&](rt::SyncOp o) {
          call("loomrt_event_synchronize(" + name(o.getEvent()) + ")");
          return success();
        })
        .Case([&](rt::WriteConstOp o) { return writeConst(o); })
        .Case([&](rt::AddI64Op o) {
          // The step counter: the host's copy serves every update of the step.
          std::string h = define(o.getSum(), "h"), st = name(o.getStream());
          *os << "  int64_t " << h << " = 0;\n";
          open("int64_t x_, y_;");
          call("loomrt_memcpy_async(" + st + ", &x_, " + name(o.getLhs()) + ", 8)");
          call("loomrt_memcpy_async(" + st + ", &y_, " + name(o.getRhs()) + ", 8)");
          call("loomrt_stream_synchronize(" + st + ")");
          *os << "    x_ += y_;\n    " << h << " = x_;\n";
          call("loomrt_memcpy_async(" + st + ", " + name(o.getOut()) + ", &x_, 8)");
          call("loomrt_stream_synchronize(" + st + ")");
          close();
          return success();
        })
        .Case([&](rt::RandomKeyOp o) {
          *os << "  int64_t " << define(o.getKey(), "h") << " = (int64_t)loomrt_step_random_key(c, "
              << o.getOp() << ");\n";
          return success();
        })
        .Case([&](rt::ReadI64Op o) {
          std::string h = define(o.getValue(), "h"), st = name(o.getStream());
          *os << "  int64_t " << h << " = 0;\n";
          call("loomrt_memcpy_async(" + st + ", &" + h + ", " + name(o.getBuffer()) + ", 8)");
          call("loomrt_stream_synchronize(" + st + ")");
          return success();
        })
        .Case([&](func::CallOp o) {
          std::string args = "c, G";
          for (Value a : o.getOperands())
            args += ", " + name(a);
          for (Value r : o.getResults()) {
            std::string n = define(r);
            *os << "  void *" << n << " = nullptr;\n";
            args += ", &" + n;
          }
          call(cppIdentifier("fn_", o.getCallee()) + "(" + args + ")");
          return success();
        })
        .Case([&](func::ReturnOp o) {
          for (auto [i, v] : llvm::enumerate(o.getOperands()))
            *os << "  *r" << i << " = (void *)" << name(v) << ";\n";
          *os << "  return LOOMRT_OK;\n";
          return success();
        })
        .Default([&](Operation *other) {
          return other->emitError() << "code generation: '" << other->getName()
                                    << "' is not a loomrt op (run loom-lower-to-runtime)",
                 failure();
        });
  }

  /// A host task: a lambda queued on the step's host thread. Its events
  /// are taken here, in program order, and captured with everything else
  /// by value (handles and pointers).
  LogicalResult hostTask(rt::HostTaskOp o) {
    Block &body = o.getBody().front();
    for (Operation &in : body)
      if (auto r = dyn_cast<rt::RecordOp>(in))
        *os << "  loomrt_event " << define(r.getEvent()) << " = loomrt_step_event(c);\n";
    *os << "  LOOM_CHECK(loom_host_task(c, [=]() -> loomrt_status {\n";
    inTask = true;
    for (Operation &in : body) {
      if (isa<rt::YieldOp>(in))
        continue;
      if (failed(emit(&in)))
        return failure();
    }
    inTask = false;
    *os << "    return LOOMRT_OK;\n  }));\n";
    for (auto [r, v] : llvm::zip(o.getResults(), cast<rt::YieldOp>(body.back()).getEvents()))
      names[r] = name(v);
    return success();
  }

  LogicalResult writeConst(rt::WriteConstOp o) {
    auto elems = cast<DenseElementsAttr>(o.getValue());
    Type elt = elems.getElementType();
    std::string k = fresh("k");
    llvm::raw_string_ostream cs(constants);
    size_t bytes = size_t(elems.getNumElements()) * storageBytes(elt);
    if (elems.getNumElements() > kLiteralElements && !elems.isSplat()) {
      // A large table (rotary angles of a long sequence) as its bytes in one
      // string literal: g++ reads 8 MB of octal escapes in half a second and
      // 2M float literals in five (docs/codegen.md, "Compile time").
      cs << "alignas(16) const char " << k << "[] = \"";
      for (uint8_t c : o.getBytes())
        cs << '\\' << char('0' + (c >> 6)) << char('0' + ((c >> 3) & 7)) << char('0' + (c & 7));
      cs << "\";\n\n";
      copyConst(o, k, bytes);
      return success();
    }
    if (elt.isF32()) {
      cs << "const float " << k << "[] = {";
      for (auto [i, v] : llvm::enumerate(elems.getValues<APFloat>()))
        cs << (i ? ", " : "") << f(v);
    } else if (elt.isBF16()) {
      cs << "const uint16_t " << k << "[] = {"; // bf16 bit patterns
      for (auto [i, v] : llvm::enumerate(elems.getValues<APFloat>()))
        cs << (i ? ", " : "") << v.bitcastToAPInt().getZExtValue();
    } else if (elt.isInteger(64)) {
      cs << "const int64_t " << k << "[] = {";
      for (auto [i, v] : llvm::enumerate(elems.getValues<APInt>()))
        cs << (i ? ", " : "") << v.getSExtValue();
    } else {
      cs << "const uint8_t " << k << "[] = {";
      for (auto [i, v] : llvm::enumerate(elems.getValues<bool>()))
        cs << (i ? ", " : "") << (v ? 1 : 0);
    }
    cs << "};\n\n";
    copyConst(o, k, bytes);
    return success();
  }
  /// The constant `k` into the call's buffer from its device copy
  /// (loomrt_step_const, made on first use): a copy a graph may capture.
  void copyConst(rt::WriteConstOp o, const std::string &k, size_t bytes) {
    std::string d = fresh("kd");
    *os << "  const void *" << d << " = loomrt_step_const(c, " << k << ", " << bytes << ");\n"
        << "  if (!" << d << ")\n    return LOOMRT_ERR_OUT_OF_MEMORY;\n";
    call("loomrt_memcpy_async(" + name(o.getStream()) + ", " + name(o.getDst()) + ", " + d + ", " +
         std::to_string(bytes) + ")");
  }

  ModuleOp module;
  int64_t varianceRefresh = 0; // 1-bit Adam's, from the program (0: none)
  const CodegenOptions &opts;
  llvm::StringMap<int> globals;
  llvm::DenseMap<Value, std::string> names;
  std::string constants, decls, bodies;
  std::unique_ptr<llvm::raw_string_ostream> os;
  unsigned counter = 0;
  bool inBlock = false;
  bool inTask = false;    // emitting a host task's body
  bool hostTasks = false; // the module has host tasks (the helper is emitted)
};

std::string TextCall::freeze(int64_t step) const {
  if (e.varianceRefresh <= 0)
    return i(step);
  return (step > 0 ? "loomrt_step_variance_step(c, " + i(step) + ")" : i(step)) +
         ", loomrt_step_variance_steps(c)";
}

std::string TextCall::name(Value v) const { return e.name(v); }

template <typename F, typename... A>
bool TextCall::call(const char *fn, F, const A &...args) {
  std::string text = std::string(fn) + "(", decl;
  bool first = true;
  for (const std::string &a : {args...}) {
    text += (first ? "" : ", ") + a;
    first = false;
    if (auto it = shapes.find(a); it != shapes.end())
      decl += (decl.empty() ? "static const int64_t " : ", ") + it->second;
  }
  text += ")";
  if (!decl.empty())
    lines.insert(lines.begin(), decl + ";");
  if (lines.empty()) {
    e.call(text);
    return true;
  }
  *e.os << "  {\n";
  for (const std::string &l : lines)
    *e.os << "    " << l << "\n";
  e.inBlock = true;
  e.call(text);
  e.inBlock = false;
  if (!post.empty())
    *e.os << "    " << post << "\n";
  *e.os << "  }\n";
  return true;
}

} // namespace

int64_t emitFusedKernels(ModuleOp module, llvm::raw_ostream &os) {
  int64_t count = 0;
  module.walk([&](rt::FusedElementwiseOp o) {
    std::vector<loomrt_fused_inst> storage;
    loomrt_fused_program p = o.toProgram(storage);
    std::string text(loomrt_fused_source(&p, nullptr, 0), '\0');
    if (text.empty())
      return; // the verifier refuses such a program
    loomrt_fused_source(&p, text.data(), text.size() + 1);
    os << (count++ ? "\n" : "") << text;
  });
  return count;
}

LogicalResult emitTrainingCpp(ModuleOp module, llvm::raw_ostream &os,
                              const CodegenOptions &options) {
  // Loom IR is lowered first, on a copy (loomc lowers in its pipeline and
  // hands the lowered module over).
  OwningOpRef<ModuleOp> lowered;
  if (!module.lookupSymbol(LoomDialect::kTrainStep) || !isLoweredToRuntime(module)) {
    lowered = module.clone();
    PassManager pm(module.getContext());
    LoweringOptions lo;
    lo.fuse = lo.planArena = lo.graphs = false;
    buildLoweringPipeline(pm, lo);
    if (failed(pm.run(*lowered)))
      return failure();
    module = *lowered;
  }
  Emitter e(module, options);
  return e.run(os);
}


void emitPipelineMain(llvm::raw_ostream &os, llvm::ArrayRef<std::string> namespaces) {
  os << "// --pipeline-parallel or --expert-parallel: each stage's (or expert rank's)\n"
        "// program above; the driver runs the rank's (its stage, the outermost level\n"
        "// of the world, or its place on the innermost, the experts' level).\n"
     << "int main(int argc, char **argv) {\n"
     << "  static const loomrt_program *const kStages[] = {\n";
  for (const std::string &ns : namespaces)
    os << "      " << ns << "::program(),\n";
  os << "  };\n"
     << "  loomrt_program first = *kStages[0];\n"
     << "  first.stage_programs = kStages;\n"
     << "  return loomrt_train_main(argc, argv, &first);\n}\n";
}

void emitReplanMain(llvm::raw_ostream &os, const ReplanTable &t) {
  auto list = [](ArrayRef<double> v) {
    std::string s;
    for (double x : v)
      s += (s.empty() ? "" : ", ") + llvm::formatv("{0:e}", x).str();
    return s;
  };
  std::string cands, plans;
  for (auto [ns, plan] : llvm::zip(t.namespaces, t.plans)) {
    cands += "      " + ns + "::program(),\n";
    plans += "      " + cppStringLiteral(plan) + ",\n";
  }
  os << "// --replan: the plans above, each predicted at host-rate factors (the\n"
        "// description's CPU Adam rate and DRAM bandwidth times f); the driver\n"
        "// continues under the fastest at the rate it measures.\n"
     << "int main(int argc, char **argv) {\n"
     << "  static const loomrt_program *const kCandidates[] = {\n" << cands << "  };\n"
     << "  static const char *const kPlans[] = {\n" << plans << "  };\n"
     << "  static const double kFactors[] = {" << list(t.factors) << "};\n"
     << "  static const double kPredicted[] = {" << list(t.predicted) << "};\n"
     << "  static const loomrt_replan kReplan = {" << t.mode << ", " << t.namespaces.size()
     << ", kCandidates, kPlans, " << t.factors.size() << ", kFactors, kPredicted, "
     << llvm::formatv("{0:e}", t.nominalCpuAdamRate).str() << "};\n"
     << "  loomrt_program first = *kCandidates[0];\n"
     << "  first.replan = &kReplan;\n"
     << "  return loomrt_train_main(argc, argv, &first);\n}\n";
}

bool isSplatValue(ParamOp p) {
  auto v = dyn_cast_or_null<DenseElementsAttr>(p.getValueAttr());
  return v && v.isSplat() && v.getElementType().isF32();
}

bool hasImportedWeights(ModuleOp module) {
  for (ParamOp p : module.getOps<ParamOp>())
    if (p.getValue() && !isSplatValue(p))
      return true;
  return false;
}

LogicalResult writeInitialWeights(ModuleOp module, const std::string &path) {
  std::vector<std::vector<float>> data;
  std::vector<std::string> names;
  std::vector<loomrt_tensor_ref> refs;
  for (ParamOp p : module.getOps<ParamOp>()) {
    auto values = dyn_cast_or_null<DenseElementsAttr>(p.getValueAttr());
    if (!values || isSplatValue(p))
      continue; // splats travel in the program's table (isSplatValue)
    auto type = cast<RankedTensorType>(p.getType());
    if (!type.getElementType().isF32() || type.getRank() > LOOMRT_MAX_RANK)
      return p.emitError() << "code generation writes imported f32 values only";
    data.emplace_back();
    for (const APFloat &v : values.getValues<APFloat>())
      data.back().push_back(v.convertToFloat());
    names.push_back(p.getSymName().str());
    loomrt_tensor_ref t{nullptr, LOOMRT_F32, int(type.getRank()), {}, nullptr};
    llvm::copy(type.getShape(), t.shape);
    refs.push_back(t);
  }
  // Pointers into the vectors only once they stop growing.
  for (size_t i = 0; i < refs.size(); ++i) {
    refs[i].name = names[i].c_str();
    refs[i].data = data[i].data();
  }
  const char *k[] = {"format"}, *v[] = {"loom initial weights"};
  if (loomrt_status st = loomrt_checkpoint_save(path.c_str(), refs.data(), refs.size(), k, v, 1))
    return module.emitError() << "cannot write the weights file '" << path
                              << "': " << loomrt_status_string(st);
  return success();
}

/// The prefix loomc is installed in (PREFIX/bin/loomc) when the runtime
/// was installed there too (PREFIX/LIBDIR/libloomrt.so and the headers);
/// empty for a loomc that runs from its build tree.
static std::string installedPrefix() {
  static const std::string prefix = [] {
    std::string exe = llvm::sys::fs::getMainExecutable(nullptr, (void *)&installedPrefix);
    llvm::StringRef bin = llvm::sys::path::parent_path(exe);
    llvm::StringRef root = llvm::sys::path::parent_path(bin);
    llvm::SmallString<256> lib(root), header(root);
    llvm::sys::path::append(lib, LOOM_INSTALL_LIBDIR, "libloomrt.so");
    llvm::sys::path::append(header, LOOM_INSTALL_INCLUDEDIR, "loomrt", "loomrt.h");
    return !root.empty() && llvm::sys::fs::exists(lib) && llvm::sys::fs::exists(header)
               ? root.str()
               : std::string();
  }();
  return prefix;
}

std::string defaultRuntimeDir(llvm::StringRef target) {
  if (target != "hip" && !installedPrefix().empty())
    return installedPrefix() + "/" LOOM_INSTALL_LIBDIR;
  return target == "hip" ? LOOM_HIP_RUNTIME_LIB_DIR : LOOM_RUNTIME_LIB_DIR;
}

/// The runtime's headers: the installed ones beside an installed loomc.
static std::string runtimeIncludeDir() {
  return installedPrefix().empty() ? std::string(LOOM_RUNTIME_INCLUDE_DIR)
                                   : installedPrefix() + "/" LOOM_INSTALL_INCLUDEDIR;
}

bool compileTrainingBinary(const std::string &cppPath, const std::string &output,
                           const std::string &runtimeDir, std::string &error) {
  const char *cxxEnv = std::getenv("CXX");
  std::string cxx = cxxEnv && *cxxEnv ? cxxEnv : LOOM_GENERATED_CXX;
  auto path = llvm::sys::findProgramByName(cxx);
  if (!path) {
    error = "no C++ compiler '" + cxx + "' on PATH (set CXX)";
    return false;
  }
  // The compiler's output goes to a temporary log (not beside -o, which may
  // be where the problem is) and is shown on failure.
  llvm::SmallString<128> log;
  if (std::error_code ec = llvm::sys::fs::createTemporaryFile("loomc", "log", log)) {
    error = "cannot create a temporary file: " + ec.message();
    return false;
  }
  // -O0: the step is a straight sequence of runtime calls, nothing an
  // optimizer improves (each call launches a kernel or a copy), and g++'s
  // time at -O0 grows linearly with it: 9 s for a 100-layer Llama's 77k
  // lines on the 2-core machine, against 34 s at -O1 (docs/codegen.md).
  std::vector<std::string> args = {
      *path, "-O0", "-std=c++17", "-I", runtimeIncludeDir(), cppPath,
      "-o", output, "-L", runtimeDir, "-lloomrt",
      "-Wl,-rpath," + runtimeDir};
  for (llvm::StringRef flag : llvm::split(llvm::StringRef(LOOM_GENERATED_CXX_FLAGS), ' '))
    if (!flag.empty())
      args.push_back(flag.str());
  std::vector<llvm::StringRef> argv(args.begin(), args.end());
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, llvm::StringRef(log),
                                                llvm::StringRef(log)};
  std::string execError;
  int rc = llvm::sys::ExecuteAndWait(*path, argv, std::nullopt, redirects, 0, 0, &execError);
  auto buf = llvm::MemoryBuffer::getFile(log);
  std::string msg = buf && !(*buf)->getBuffer().trim().empty() ? (*buf)->getBuffer().str()
                                                                : "(it printed nothing)";
  llvm::sys::fs::remove(log);
  if (rc != 0) {
    // The compiler's first lines say what is wrong; the rest is context.
    size_t cut = 0;
    for (int lines = 0; lines < 12 && cut != std::string::npos; ++lines)
      cut = msg.find('\n', cut + 1);
    if (cut != std::string::npos)
      msg = msg.substr(0, cut) + "\n...";
    error = "the C++ compiler '" + cxx + "' " +
            (rc < 0 ? "could not run (" + execError + ")"
                    : "failed (exit code " + std::to_string(rc) + ")") +
            " on " + cppPath + ":\n" + msg;
    return false;
  }
  return true;
}

} // namespace loom
