//===- EmitCpp.cpp - training steps as C++ over the runtime ---------------===//
//
// Straight-line C++: every SSA value is a device pointer, every op one or a
// few loomrt calls with the sizes the static shapes give, temporaries come
// from the driver's per-step arena. The op-to-call mapping is the reference
// executor's (lib/Execution), so generated binaries and loom-run agree bit
// for bit. Each call is preceded by the op it implements, so a reader can
// follow the schedule in the source.
//
//===----------------------------------------------------------------------===//
#include "loom/Codegen.h"
#include "loomrt/loomrt.h"

#include "dialects/Loom/LoomOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <cmath>
#include <functional>
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"

using namespace mlir;
using namespace mlir::loom;

namespace loom {
namespace {

std::string join(ArrayRef<int64_t> v) {
  std::string s;
  for (auto [i, x] : llvm::enumerate(v))
    s += (i ? ", " : "") + std::to_string(x);
  return s;
}

const char *dtypeOf(Type t) {
  if (t.isF32())
    return "LOOMRT_F32";
  if (t.isBF16())
    return "LOOMRT_BF16";
  if (t.isInteger(64))
    return "LOOMRT_I64";
  return nullptr;
}
RankedTensorType tt(Value v) { return cast<RankedTensorType>(v.getType()); }
int64_t numel(Value v) { return tt(v).getNumElements(); }
/// Pinned or pageable host memory (unplaced tensors are on the device).
bool isHostType(Type t) { return getExecSide(t) == ExecSide::Cpu; }
size_t bytesOf(Value v) {
  return size_t(numel(v)) * storageBytes(tt(v).getElementType());
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

/// The vocabulary: rows of the embedding tables looked up with a function
/// argument (the tokens; positions are constants). 0 when there is none.
int64_t vocabOf(ModuleOp module) {
  int64_t v = 0;
  module.walk([&](EmbeddingOp e) {
    if (isa<BlockArgument>(e.getIndices()))
      v = std::max(v, tt(e.getTable()).getDimSize(0));
  });
  return v;
}

class Emitter {
public:
  Emitter(ModuleOp module, const CodegenOptions &opts)
      : module(module), opts(opts) {}

  LogicalResult run(llvm::raw_ostream &out) {
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    if (!step)
      return module.emitError()
             << "code generation needs @train_step: compile with "
                "--compile-to=optimizer first (or run loom-attach-optimizer)";
    auto ty = step.getFunctionType();
    auto isTok = [](Type t) {
      auto r = dyn_cast<RankedTensorType>(t);
      return r && r.getRank() == 2 && r.getElementType().isInteger(64);
    };
    if (ty.getNumInputs() != 2 || !isTok(ty.getInput(0)) ||
        ty.getInput(0) != ty.getInput(1) || ty.getNumResults() != 1)
      return step.emitError()
             << "code generation drives language models from token files: "
                "@train_step must take (tokens, targets), both [B, T] i64, "
                "and return the loss";
    auto shape = cast<RankedTensorType>(ty.getInput(0)).getShape();

    // Parameters and state, in declaration order (the initialisation order).
    // A ZeRO-3 shard (loom.shard_of) lists its member parameters, which are
    // not globals themselves: the driver initialises each member as it
    // would a parameter and keeps this rank's block of their concatenation.
    std::string table, memberTables;
    llvm::raw_string_ostream tos(table), mos(memberTables);
    bool anyWeights = false;
    // The last field of a global's entry: an imported splat's value.
    auto splatOf = [](Operation *op) {
      auto p = dyn_cast<ParamOp>(op);
      return p && isSplatValue(p)
                 ? f(cast<DenseElementsAttr>(p.getValueAttr()).getSplatValue<APFloat>().convertToDouble())
                 : std::string("0");
    };
    auto describe = [&](Operation *op, std::string &out) -> LogicalResult {
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
      const char *dt = dtypeOf(type.getElementType());
      std::optional<MemSpace> space = getMemSpace(type);
      if (!dt || type.getRank() > 8 ||
          (type.getEncoding() && space != MemSpace::device && space != MemSpace::pinned))
        return op->emitError() << "code generation supports f32, bf16 and i64 "
                                  "parameters and state on the device or in pinned "
                                  "host memory";
      llvm::raw_string_ostream o(out);
      o << "{" << cppStringLiteral(name) << ", " << dt << ", " << type.getRank() << ", {"
        << join(type.getShape()) << "}, " << (init ? int(init.getKind()) : 0) << ", "
        << llvm::format("%.17g", init ? init.getA().convertToDouble() : 0.0) << ", "
        << llvm::format("%.17g", init ? init.getB().convertToDouble() : 0.0) << ", "
        << (isParam ? 1 : 0) << ", " << fromWeights;
      anyWeights |= fromWeights == 1;
      return success();
    };
    for (Operation &op : module.getBody()->getOperations()) {
      if (!isa<ParamOp, StateOp>(op) || op.hasAttr("loom.sharded_into"))
        continue;
      std::string entry;
      if (failed(describe(&op, entry)))
        return failure();
      StringRef name = cast<SymbolOpInterface>(op).getName();
      globals[name] = int(globals.size());
      auto members = op.getAttrOfType<ArrayAttr>("loom.shard_of");
      // Placement and the mirrored parameter (a working copy the driver
      // initialises from the master weights: loom-offload-optimizer).
      int mirror = 0; // 1 + the global's index
      if (auto m = op.getAttrOfType<FlatSymbolRefAttr>("loom.mirror_of")) {
        if (!globals.count(m.getValue()))
          return op.emitError() << "code generation: loom.mirror_of must name a "
                                   "parameter declared before it";
        mirror = globals.lookup(m.getValue()) + 1;
      }
      std::string tail = ", " + std::string(isHostType(op.getAttrOfType<TypeAttr>("type").getValue())
                                                ? "LOOMRT_MEM_PINNED"
                                                : "LOOMRT_MEM_DEVICE") +
                         ", " + std::to_string(mirror) + ", " + splatOf(&op) + "},\n";
      if (!members) {
        tos << "    " << entry << ", 0, nullptr, 0" << tail;
        continue;
      }
      std::string mt = "kMembers" + std::to_string(globals.size() - 1);
      mos << "const loomrt_global_desc " << mt << "[] = {\n";
      for (Attribute a : members) {
        auto m = module.lookupSymbol<ParamOp>(cast<FlatSymbolRefAttr>(a));
        std::string me;
        if (!m || failed(describe(m, me)))
          return op.emitError() << "code generation: a member of this shard is not a loom.param";
        mos << "    " << me << ", 0, nullptr, 0, LOOMRT_MEM_DEVICE, 0, " << splatOf(m) << "},\n";
      }
      mos << "};\n";
      auto padded = op.getAttrOfType<IntegerAttr>("loom.padded");
      if (!padded)
        return op.emitError() << "code generation: a loom.shard_of parameter needs loom.padded";
      tos << "    " << entry << ", " << members.size() << ", " << mt << ", "
          << padded.getInt() << tail;
    }
    int64_t world = 1, zeroStage = -1;
    if (auto dp = step->getAttrOfType<DictionaryAttr>("loom.data_parallel")) {
      world = cast<IntegerAttr>(dp.get("world")).getInt();
      zeroStage = cast<IntegerAttr>(dp.get("zero_stage")).getInt();
    }

    // The functions @train_step reaches, callees first.
    SmallVector<func::FuncOp> order;
    llvm::DenseSet<Operation *> seen;
    std::function<void(func::FuncOp)> visit = [&](func::FuncOp fn) {
      if (!seen.insert(fn).second)
        return;
      fn.walk([&](func::CallOp call) {
        if (auto callee = module.lookupSymbol<func::FuncOp>(call.getCallee()))
          visit(callee);
      });
      order.push_back(fn);
    };
    visit(step);
    for (func::FuncOp fn : order)
      if (failed(emitFunction(fn)))
        return failure();

    out << "// Training binary generated by loomc for " << cppComment(opts.model)
        << " (target " << cppComment(opts.target) << ").\n"
        << "// Regenerate it with loomc rather than editing it: each runtime "
           "call below\n// is preceded by the loom op it implements.\n"
        << "#include \"loomrt/train.h\"\n\n#include <cmath>\n#include <cstring>\n\n"
        << "#define LOOM_CHECK(x)                                        \\\n"
        << "  do {                                                     \\\n"
        << "    loomrt_status st_ = (x);                               \\\n"
        << "    if (st_ != LOOMRT_OK)                                  \\\n"
        << "      return st_;                                          \\\n"
        << "  } while (0)\n"
        << "#define LOOM_ALLOC(v, bytes)                                 \\\n"
        << "  void *v = loomrt_step_alloc(c, (bytes));                 \\\n"
        << "  if (!v)                                                  \\\n"
        << "    return LOOMRT_ERR_OUT_OF_MEMORY\n"
        << "#define LOOM_ALLOC_HOST(v, bytes)                            \\\n"
        << "  void *v = loomrt_step_alloc_host(c, (bytes));            \\\n"
        << "  if (!v)                                                  \\\n"
        << "    return LOOMRT_ERR_OUT_OF_MEMORY\n\n"
        << "namespace {\n\n"
        << constants << decls << bodies
        << "loomrt_status entry(loomrt_step_ctx c, void **G, const int64_t "
           "*tokens,\n                    const int64_t *targets, void "
           "**loss) {\n"
        << "  return " << cppIdentifier("fn_", "train_step")
        << "(c, G, tokens, targets, loss);\n}\n\n"
        << memberTables << "const loomrt_global_desc kGlobals[] = {\n"
        << table << "};\n\n} // namespace\n\n"
        << "int main(int argc, char **argv) {\n"
        << "  static const loomrt_program program = {\n"
        << "      LOOMRT_TRAIN_ABI, " << cppStringLiteral(opts.model) << ",\n      "
        << (opts.target == "cuda" ? "LOOMRT_BACKEND_CUDA" : "LOOMRT_BACKEND_CPU")
        << ",\n      sizeof(kGlobals) / sizeof(kGlobals[0]), kGlobals,\n      "
        << shape[0] << ", " << shape[1] << ", " << vocabOf(module) << ",\n      "
        << (anyWeights ? cppStringLiteral(opts.weightsFile) : std::string("nullptr"))
        << ", entry, " << world << ", " << zeroStage << "};\n"
        << "  return loomrt_train_main(argc, argv, &program);\n}\n";
    return success();
  }

private:
  //===--------------------------------------------------------------===//
  // Functions
  //===--------------------------------------------------------------===//

  LogicalResult emitFunction(func::FuncOp fn) {
    names.clear();
    elided.clear();
    std::string sig = "loomrt_status " + cppIdentifier("fn_", fn.getName()) +
                      "(loomrt_step_ctx c, void **G";
    for (auto [i, a] : llvm::enumerate(fn.getArguments())) {
      std::string n = "a" + std::to_string(i);
      sig += ", const void *" + n;
      names[a] = n;
    }
    for (unsigned i = 0; i < fn.getNumResults(); ++i)
      sig += ", void **r" + std::to_string(i);
    sig += ")";
    decls += sig + ";\n";
    body.clear();
    os = std::make_unique<llvm::raw_string_ostream>(body);
    *os << sig << " {\n  loomrt_stream s = loomrt_step_stream(c);\n  (void)s;\n"
        << "  loomrt_comm comm = loomrt_step_comm(c);\n  (void)comm;\n"
        << "  loomrt_stream cs = loomrt_step_comm_stream(c);\n  (void)cs;\n"
        << "  loomrt_stream hs = loomrt_step_host_stream(c);\n  (void)hs;\n"
        << "  loomrt_stream xs = loomrt_step_copy_stream(c, 0);\n  (void)xs;\n"
        << "  loomrt_stream ys = loomrt_step_copy_stream(c, 1);\n  (void)ys;\n";
    if (failed(checkLoadsBeforeStores(fn)))
      return failure();
    root.clear();
    hostScalar.clear();
    owned.clear();
    live.clear();
    lastUser.clear();
    deferred.clear();
    for (Operation &op : fn.getBody().front())
      for (Value v : op.getOperands())
        lastUser[v] = &op;
    // An asynchronous collective reads its input on the comm stream until
    // its token is waited: the input goes back to the arena (where the
    // compute stream may reuse it) only after that wait.
    for (Operation &op : fn.getBody().front()) {
      auto async = dyn_cast<AsyncOpInterface>(op);
      if (!async || !isa<AllReduceOp, ReduceScatterOp, AllGatherOp, CopyOp>(op))
        continue;
      for (Operation *w : async.getAsyncToken().getUsers())
        for (Value v : op.getOperands())
          if (lastUser.lookup(v) && lastUser[v]->isBeforeInBlock(w)) {
            lastUser[v] = w;
            deferred[w].push_back(v);
          }
    }
    // The binary times the step's phases from the end of the backward.
    Operation *backwardEnd = nullptr;
    if (fn.getName() == "train_step")
      for (Operation &op : fn.getBody().front())
        if (isBackwardWork(&op))
          backwardEnd = &op;
    for (Operation &op : fn.getBody().front()) {
      if (failed(emit(&op)))
        return failure();
      if (&op == backwardEnd)
        *os << "  loomrt_step_backward_done(c);\n";
      if (auto ret = dyn_cast<func::ReturnOp>(&op))
        recordTransfers(fn.getName(), ret);
      else
        freeDead(&op);
    }
    *os << "}\n\n";
    bodies += body;
    if (decls.back() != '\n')
      decls += "\n";
    return success();
  }

  /// Stores copy into the global's buffer and loads alias it, so a loaded
  /// value must not be used after a store to the same symbol.
  LogicalResult checkLoadsBeforeStores(func::FuncOp fn) {
    for (auto store : fn.getBody().getOps<StoreOp>())
      for (auto load : fn.getBody().getOps<LoadOp>())
        if (load.getName() == store.getName() && load->isBeforeInBlock(store))
          for (Operation *user : load->getUsers())
            if (store->isBeforeInBlock(user))
              return user->emitError()
                     << "code generation: reads @" << load.getName()
                     << " after a store replaced it";
    return success();
  }

  std::string fresh() { return "v" + std::to_string(counter++); }
  /// By value: callers pass it on to helpers that allocate, which insert
  /// into `names` and would leave a reference dangling.
  std::string name(Value v) const { return names.lookup(v); }
  /// Buffers in pinned host memory come from the step's host arena.
  std::string alloc(Value v) {
    std::string n = fresh();
    *os << (isHostType(v.getType()) ? "  LOOM_ALLOC_HOST(" : "  LOOM_ALLOC(") << n << ", "
        << bytesOf(v) << ");\n";
    names[v] = n;
    own(n);
    return n;
  }
  /// Ops on host memory run on the host stream (the CPU).
  static std::string streamFor(Operation *op) {
    for (Value v : op->getOperands())
      if (isHostType(v.getType()))
        return "hs";
    return "s";
  }

  //===--------------------------------------------------------------===//
  // Memory reuse: every step-arena buffer this function allocates (or gets
  // from a callee) goes back to the arena after the last use of the last
  // value that names it, so later allocations of a similar size reuse it.
  // Aliases (reshape, a reduction's result) share their buffer's root;
  // loads, arguments and in-place updates name memory the function does not
  // own and are never freed. Returned buffers pass to the caller.
  //===--------------------------------------------------------------===//

  void own(const std::string &var) {
    root[var] = var;
    owned.insert(var);
  }
  void alias(const std::string &var, const std::string &of) { root[var] = rootOf(of); }
  std::string rootOf(const std::string &var) const {
    auto it = root.find(var);
    return it == root.end() ? var : it->second;
  }
  void freeDead(Operation *op) {
    for (Value r : op->getResults())
      if (names.count(r) && !r.use_empty())
        ++live[rootOf(names[r])];
    auto release = [&](const std::string &r) {
      if (live.lookup(r) == 0 && owned.erase(r))
        *os << "  loomrt_step_free(c, " << r << ");\n";
    };
    llvm::SmallPtrSet<void *, 8> seen;
    SmallVector<Value> operands(op->getOperands());
    if (auto it = deferred.find(op); it != deferred.end())
      operands.append(it->second);
    for (Value v : operands) {
      if (lastUser.lookup(v) != op || !seen.insert(v.getAsOpaquePointer()).second ||
          !names.count(v))
        continue;
      std::string r = rootOf(names[v]);
      if (--live[r] <= 0)
        release(r);
    }
    for (Value r : op->getResults())
      if (names.count(r) && r.use_empty())
        release(rootOf(names[r]));
  }
  void recordTransfers(StringRef fn, func::ReturnOp ret) {
    llvm::StringMap<int> count;
    for (Value v : ret.getOperands())
      ++count[rootOf(name(v))];
    std::vector<bool> &t = transfers[fn];
    for (Value v : ret.getOperands()) {
      std::string r = rootOf(name(v));
      t.push_back(owned.count(r) && count[r] == 1);
    }
  }
  /// The comm (or copy) stream waits for the compute stream, runs
  /// `callText`, and records the op's token.
  LogicalResult collective(Value token, const std::string &callText,
                           const std::string &stream = "cs") {
    std::string ready = fresh(), t = fresh();
    *os << "  loomrt_event " << ready << " = loomrt_step_event(c);\n";
    call("loomrt_event_record(" + ready + ", s)");
    call("loomrt_stream_wait_event(" + stream + ", " + ready + ")");
    call(callText);
    *os << "  loomrt_event " << t << " = loomrt_step_event(c);\n";
    call("loomrt_event_record(" + t + ", " + stream + ")");
    names[token] = t;
    return success();
  }
  static std::string reduceOf(ReduceKind k) {
    switch (k) {
    case ReduceKind::mean: return "LOOMRT_REDUCE_MEAN";
    case ReduceKind::max: return "LOOMRT_REDUCE_MAX";
    case ReduceKind::min: return "LOOMRT_REDUCE_MIN";
    default: return "LOOMRT_REDUCE_SUM";
    }
  }
  /// The binary has one communicator, the world's: a group must span every
  /// level of its topology (sub-groups need loomrt_comm_split, not wired).
  LogicalResult checkWholeWorld(Operation *op, GroupAttr g) {
    auto topo = module.lookupSymbol<TopologyOp>(g.getTopology());
    if (!topo || g.getLevels().size() != topo.getLevels().size())
      return op->emitError() << "code generation supports collectives over the "
                                "whole topology only";
    return success();
  }
  int global(StringRef sym) { return globals.lookup(sym); }
  std::string dt(Value v) { return dtypeOf(tt(v).getElementType()); }
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
  std::string ptr(Value v, const char *type) {
    return std::string("(") + type + ")" + name(v);
  }

  void comment(Operation *op) {
    std::string s;
    llvm::raw_string_ostream cs(s);
    OpPrintingFlags flags;
    flags.elideLargeElementsAttrs(8);
    op->print(cs, flags);
    if (s.size() > 160)
      s = s.substr(0, 157) + "...";
    *os << "  // " << cppComment(s) << "\n";
  }

  LogicalResult emit(Operation *op) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      for (auto [i, v] : llvm::enumerate(ret.getOperands()))
        *os << "  *r" << i << " = (void *)" << name(v) << ";\n";
      *os << "  return LOOMRT_OK;\n";
      return success();
    }
    if (elided.contains(op))
      return success();
    if (streamFor(op) == "hs" &&
        !isa<AdamOp, SgdOp, CopyOp, LoadOp, StoreOp, WaitOp, func::CallOp>(op))
      return op->emitError() << "code generation runs only loom.adam and copies on "
                                "host memory";
    // A zero-sized tensor has no rows to normalise or multiply: the sizes
    // below divide by its dimensions (found by fuzz-onnx-proto).
    if (RankedTensorType t = zeroSizedTensor(op))
      return op->emitError() << "code generation: zero-sized tensors are not supported (" << t
                             << ")";
    comment(op);
    return llvm::TypeSwitch<Operation *, LogicalResult>(op)
        .Case([&](func::CallOp o) {
          std::vector<std::string> rs;
          std::string args = "c, G";
          for (Value a : o.getOperands())
            args += ", " + name(a);
          const std::vector<bool> &moved = transfers[o.getCallee()];
          for (auto [i, r] : llvm::enumerate(o.getResults())) {
            std::string n = fresh();
            *os << "  void *" << n << " = nullptr;\n";
            names[r] = n;
            if (i < moved.size() && moved[i])
              own(n); // the callee's buffer, now ours to free
            args += ", &" + n;
          }
          call(cppIdentifier("fn_", o.getCallee()) + "(" + args + ")");
          return success();
        })
        .Case([&](arith::ConstantOp o) { return constant(o); })
        .Case([&](arith::AddIOp o) {
          auto t = dyn_cast<RankedTensorType>(o.getType());
          if (!t || t.getRank() != 0 || !t.getElementType().isInteger(64))
            return o.emitError("code generation supports arith.addi on i64 scalars only"), failure();
          std::string n = alloc(o.getResult());
          // The step counter: its host copy serves every Adam update of the
          // step, so they need no read-back (one sync per step, not one per
          // parameter).
          std::string h = "h" + std::to_string(counter++);
          *os << "  int64_t " << h << " = 0;\n";
          hostScalar[o.getResult()] = h;
          open("int64_t x_, y_;");
          call("loomrt_memcpy_async(s, &x_, " + name(o.getLhs()) + ", 8)");
          call("loomrt_memcpy_async(s, &y_, " + name(o.getRhs()) + ", 8)");
          call("loomrt_stream_synchronize(s)");
          *os << "    x_ += y_;\n    " << h << " = x_;\n";
          call("loomrt_memcpy_async(s, " + n + ", &x_, 8)");
          call("loomrt_stream_synchronize(s)");
          close();
          return success();
        })
        .Case([&](LoadOp o) {
          std::string n = fresh();
          *os << "  void *" << n << " = G[" << global(o.getName()) << "];\n";
          names[o.getResult()] = n;
          return success();
        })
        .Case([&](StoreOp o) {
          call("loomrt_memcpy_async(s, G[" + std::to_string(global(o.getName())) +
               "], " + name(o.getValue()) + ", " + std::to_string(bytesOf(o.getValue())) + ")");
          return success();
        })
        .Case([&](NegOp o) { return unary(o, "LOOMRT_NEG"); })
        .Case([&](ExpOp o) { return unary(o, "LOOMRT_EXP"); })
        .Case([&](LogOp o) { return unary(o, "LOOMRT_LOG"); })
        .Case([&](SqrtOp o) { return unary(o, "LOOMRT_SQRT"); })
        .Case([&](RsqrtOp o) { return unary(o, "LOOMRT_RSQRT"); })
        .Case([&](TanhOp o) { return unary(o, "LOOMRT_TANH"); })
        .Case([&](ErfOp o) { return unary(o, "LOOMRT_ERF"); })
        .Case([&](SinOp o) { return unary(o, "LOOMRT_SIN"); })
        .Case([&](CosOp o) { return unary(o, "LOOMRT_COS"); })
        .Case([&](SigmoidOp o) { return unary(o, "LOOMRT_SIGMOID"); })
        .Case([&](ReluOp o) { return unary(o, "LOOMRT_RELU"); })
        .Case([&](SiluOp o) { return unary(o, "LOOMRT_SILU"); })
        .Case([&](GeluOp o) { return unary(o, o.getApproximate() ? "LOOMRT_GELU_TANH" : "LOOMRT_GELU"); })
        .Case([&](ReluGradOp o) { return unaryGrad(o.getGrad(), o.getInput(), o.getResult(), "LOOMRT_RELU"); })
        .Case([&](SiluGradOp o) { return unaryGrad(o.getGrad(), o.getInput(), o.getResult(), "LOOMRT_SILU"); })
        .Case([&](GeluGradOp o) {
          return unaryGrad(o.getGrad(), o.getInput(), o.getResult(), o.getApproximate() ? "LOOMRT_GELU_TANH" : "LOOMRT_GELU");
        })
        .Case([&](AddOp o) { return binary(o.getLhs(), o.getRhs(), o.getResult(), "LOOMRT_ADD"); })
        .Case([&](SubOp o) { return binary(o.getLhs(), o.getRhs(), o.getResult(), "LOOMRT_SUB"); })
        .Case([&](MulOp o) { return binary(o.getLhs(), o.getRhs(), o.getResult(), "LOOMRT_MUL"); })
        .Case([&](DivOp o) { return binary(o.getLhs(), o.getRhs(), o.getResult(), "LOOMRT_DIV"); })
        .Case([&](PowOp o) { return binary(o.getLhs(), o.getRhs(), o.getResult(), "LOOMRT_POW"); })
        .Case([&](MaxOp o) { return binary(o.getLhs(), o.getRhs(), o.getResult(), "LOOMRT_MAX"); })
        .Case([&](MinOp o) { return binary(o.getLhs(), o.getRhs(), o.getResult(), "LOOMRT_MIN"); })
        .Case([&](SelectOp o) {
          int rank = tt(o.getResult()).getRank();
          std::string n = alloc(o.getResult());
          open("static const int64_t c_[] = {" + join(alignedShape(o.getCond(), rank)) + "}, a_[] = {" +
               join(alignedShape(o.getLhs(), rank)) + "}, b_[] = {" + join(alignedShape(o.getRhs(), rank)) +
               "}, o_[] = {" + join(alignedShape(o.getResult(), rank)) + "};");
          call("loomrt_select(s, " + dt(o.getResult()) + ", " + ptr(o.getCond(), "const uint8_t *") +
               ", c_, " + name(o.getLhs()) + ", a_, " + name(o.getRhs()) + ", b_, " + n + ", o_, " +
               std::to_string(rank) + ")");
          close();
          return success();
        })
        .Case([&](CastOp o) {
          std::string n = alloc(o.getResult());
          call("loomrt_cast(s, " + dt(o.getInput()) + ", " + name(o.getInput()) + ", " +
               dt(o.getResult()) + ", " + n + ", " + std::to_string(numel(o.getInput())) + ")");
          return success();
        })
        .Case([&](MatmulOp o) { return matmul(o); })
        .Case([&](LayerNormOp o) {
          int64_t d = tt(o.getInput()).getShape().back();
          std::string n = alloc(o.getResult());
          call("loomrt_layer_norm(s, " + dt(o.getInput()) + ", " + name(o.getInput()) + ", " +
               name(o.getWeight()) + ", " + (o.getBias() ? name(o.getBias()) : std::string("nullptr")) +
               ", " + n + ", " + std::to_string(numel(o.getInput()) / d) + ", " + std::to_string(d) +
               ", " + f(o.getEps().convertToDouble()) + ")");
          return success();
        })
        .Case([&](LayerNormGradOp o) {
          int64_t d = tt(o.getInput()).getShape().back();
          std::string dx = alloc(o.getGradInput()), dw = alloc(o.getGradWeight()), db = alloc(o.getGradBias());
          call("loomrt_layer_norm_grad(s, " + dt(o.getInput()) + ", " + name(o.getGrad()) + ", " +
               name(o.getInput()) + ", " + name(o.getWeight()) + ", " + dx + ", " + dw + ", " + db + ", " +
               std::to_string(numel(o.getInput()) / d) + ", " + std::to_string(d) + ", " +
               f(o.getEps().convertToDouble()) + ")");
          return success();
        })
        .Case([&](RmsNormOp o) {
          int64_t d = tt(o.getInput()).getShape().back();
          std::string n = alloc(o.getResult());
          call("loomrt_rms_norm(s, " + dt(o.getInput()) + ", " + name(o.getInput()) + ", " +
               name(o.getWeight()) + ", " + n + ", " + std::to_string(numel(o.getInput()) / d) + ", " +
               std::to_string(d) + ", " + f(o.getEps().convertToDouble()) + ")");
          return success();
        })
        .Case([&](RmsNormGradOp o) {
          int64_t d = tt(o.getInput()).getShape().back();
          std::string dx = alloc(o.getGradInput()), dw = alloc(o.getGradWeight());
          call("loomrt_rms_norm_grad(s, " + dt(o.getInput()) + ", " + name(o.getGrad()) + ", " +
               name(o.getInput()) + ", " + name(o.getWeight()) + ", " + dx + ", " + dw + ", " +
               std::to_string(numel(o.getInput()) / d) + ", " + std::to_string(d) + ", " +
               f(o.getEps().convertToDouble()) + ")");
          return success();
        })
        .Case([&](SoftmaxOp o) {
          int64_t rank = tt(o.getInput()).getRank(), dim = int64_t(o.getDim());
          if (dim != rank - 1 && dim != -1)
            return o.emitError("code generation supports softmax over the last dimension"), failure();
          int64_t d = tt(o.getInput()).getShape().back();
          std::string n = alloc(o.getResult());
          call("loomrt_softmax(s, " + dt(o.getInput()) + ", " + name(o.getInput()) + ", " + n + ", " +
               std::to_string(numel(o.getInput()) / d) + ", " + std::to_string(d) + ", 1.0f, " +
               (o.getLog() ? "1" : "0") + ", 0)");
          return success();
        })
        .Case([&](SoftmaxGradOp o) {
          int64_t rank = tt(o.getOutput()).getRank(), dim = int64_t(o.getDim());
          if (dim != rank - 1 && dim != -1)
            return o.emitError("code generation supports softmax over the last dimension"), failure();
          int64_t d = tt(o.getOutput()).getShape().back();
          std::string n = alloc(o.getResult());
          call("loomrt_softmax_grad(s, " + dt(o.getOutput()) + ", " + name(o.getGrad()) + ", " +
               name(o.getOutput()) + ", " + n + ", " + std::to_string(numel(o.getOutput()) / d) + ", " +
               std::to_string(d) + ", 1.0f, " + (o.getLog() ? "1" : "0") + ")");
          return success();
        })
        .Case([&](EmbeddingOp o) {
          auto t = tt(o.getTable());
          std::string n = alloc(o.getResult());
          call("loomrt_embedding(s, " + dt(o.getTable()) + ", " + name(o.getTable()) + ", " +
               ptr(o.getIndices(), "const int64_t *") + ", " + n + ", " + std::to_string(numel(o.getIndices())) +
               ", " + std::to_string(t.getDimSize(1)) + ", " + std::to_string(t.getDimSize(0)) + ")");
          return success();
        })
        .Case([&](EmbeddingGradOp o) {
          auto t = tt(o.getResult());
          if (!t.getElementType().isF32())
            return o.emitError("code generation supports f32 embedding gradients"), failure();
          std::string n = alloc(o.getResult());
          call("loomrt_embedding_grad(s, " + dt(o.getGrad()) + ", " + name(o.getGrad()) + ", " +
               ptr(o.getIndices(), "const int64_t *") + ", (float *)" + n + ", " +
               std::to_string(numel(o.getIndices())) + ", " + std::to_string(t.getDimSize(1)) + ", " +
               std::to_string(t.getDimSize(0)) + ")");
          return success();
        })
        .Case([&](AttentionOp o) {
          auto q = tt(o.getQuery()), k = tt(o.getKey());
          int64_t bh = q.getDimSize(0) * q.getDimSize(1);
          std::string n = alloc(o.getResult()), ws = fresh();
          std::string dtq = dt(o.getQuery());
          std::string dims = std::to_string(bh) + ", " + std::to_string(q.getDimSize(2)) + ", " +
                             std::to_string(k.getDimSize(2));
          *os << "  LOOM_ALLOC(" << ws << ", loomrt_attention_workspace_bytes(" << dtq << ", " << dims << ", 0));\n";
          call("loomrt_attention(s, " + dtq + ", " + dims + ", " + std::to_string(q.getDimSize(3)) + ", " +
               f(o.getScale().convertToDouble()) + ", " + (o.getCausal() ? "1" : "0") + ", " +
               name(o.getQuery()) + ", " + name(o.getKey()) + ", " + name(o.getValue()) + ", " + n + ", " + ws + ")");
          *os << "  loomrt_step_free(c, " << ws << "); // scratch: the backward recomputes\n";
          return success();
        })
        .Case([&](AttentionGradOp o) {
          auto q = tt(o.getQuery()), k = tt(o.getKey());
          int64_t bh = q.getDimSize(0) * q.getDimSize(1);
          std::string dq = alloc(o.getGradQuery()), dk = alloc(o.getGradKey()), dv = alloc(o.getGradValue());
          std::string ws = fresh(), dtq = dt(o.getQuery());
          std::string dims = std::to_string(bh) + ", " + std::to_string(q.getDimSize(2)) + ", " +
                             std::to_string(k.getDimSize(2));
          *os << "  LOOM_ALLOC(" << ws << ", loomrt_attention_workspace_bytes(" << dtq << ", " << dims << ", 1));\n";
          call("loomrt_attention_grad(s, " + dtq + ", " + dims + ", " + std::to_string(q.getDimSize(3)) + ", " +
               f(o.getScale().convertToDouble()) + ", " + (o.getCausal() ? "1" : "0") + ", " +
               name(o.getQuery()) + ", " + name(o.getKey()) + ", " + name(o.getValue()) + ", " +
               name(o.getGrad()) + ", " + dq + ", " + dk + ", " + dv + ", " + ws + ")");
          *os << "  loomrt_step_free(c, " << ws << ");\n";
          return success();
        })
        .Case([&](CrossEntropyOp o) {
          int64_t c = tt(o.getLogits()).getShape().back();
          std::string n = alloc(o.getLoss());
          call("loomrt_cross_entropy(s, " + dt(o.getLogits()) + ", " + name(o.getLogits()) + ", " +
               ptr(o.getLabels(), "const int64_t *") + ", (float *)" + n + ", " +
               std::to_string(numel(o.getLabels())) + ", " + std::to_string(c) + ")");
          return success();
        })
        .Case([&](CrossEntropyGradOp o) {
          int64_t c = tt(o.getLogits()).getShape().back();
          std::string n = alloc(o.getResult());
          call("loomrt_cross_entropy_grad(s, " + dt(o.getLogits()) + ", " + name(o.getLogits()) + ", " +
               ptr(o.getLabels(), "const int64_t *") + ", " + ptr(o.getGrad(), "const float *") + ", " + n +
               ", " + std::to_string(numel(o.getLabels())) + ", " + std::to_string(c) + ")");
          return success();
        })
        .Case([&](ReshapeOp o) {
          // Same bytes, another shape: an alias.
          std::string n = fresh();
          *os << "  void *" << n << " = " << name(o.getInput()) << ";\n";
          names[o.getResult()] = n;
          alias(n, name(o.getInput()));
          return success();
        })
        .Case([&](TransposeOp o) {
          auto st = rowMajorStrides(tt(o.getInput()).getShape());
          std::vector<int64_t> ss;
          for (int64_t p : o.getPerm())
            ss.push_back(st[p]);
          auto outShape = tt(o.getResult()).getShape();
          return strided(o.getResult(), name(o.getInput()), ss, rowMajorStrides(outShape), outShape);
        })
        .Case([&](SliceOp o) {
          auto st = rowMajorStrides(tt(o.getInput()).getShape());
          int64_t offset = 0;
          std::vector<int64_t> ss;
          for (size_t d = 0; d < st.size(); ++d) {
            offset += o.getStart()[d] * st[d];
            ss.push_back(st[d] * o.getStep()[d]);
          }
          auto outShape = tt(o.getResult()).getShape();
          std::string src = "(const char *)" + name(o.getInput()) + " + " +
                            std::to_string(offset * int64_t(storageBytes(tt(o.getInput()).getElementType())));
          return strided(o.getResult(), src, ss, rowMajorStrides(outShape), outShape);
        })
        .Case([&](ConcatOp o) {
          auto outType = tt(o.getResult());
          int64_t dim = int64_t(o.getDim());
          if (dim < 0)
            dim += outType.getRank();
          auto ds = rowMajorStrides(outType.getShape());
          std::string n = alloc(o.getResult());
          size_t es = storageBytes(outType.getElementType());
          int64_t offset = 0;
          for (Value v : o.getInputs()) {
            auto sh = tt(v).getShape();
            copyStrided(es, name(v), rowMajorStrides(sh),
                        "(char *)" + n + " + " + std::to_string(offset * ds[dim] * int64_t(es)), ds, sh);
            offset += sh[dim];
          }
          return success();
        })
        .Case([&](BroadcastOp o) {
          auto outShape = tt(o.getResult()).getShape();
          return strided(o.getResult(), name(o.getInput()), broadcastInputStrides(o),
                         rowMajorStrides(outShape), outShape);
        })
        .Case([&](ReduceOp o) { return reduce(o); })
        .Case([&](AdamOp o) { return adam(o); })
        .Case([&](SgdOp o) { return sgd(o); })
        // Collectives run on the comm stream through the communicator the
        // driver made (one rank: copies), after the compute stream reaches
        // them; their token is an event, which a loom.wait makes the
        // compute stream wait for (not the host).
        .Case([&](WaitOp o) {
          // A copy into host memory is waited by the host (the CPU reads it
          // next); everything else by the compute stream.
          for (Value t : o.getTokens()) {
            auto copy = t.getDefiningOp<CopyOp>();
            if (copy && isHostType(copy.getResult().getType()))
              call("loomrt_event_synchronize(" + name(t) + ")");
            else
              call("loomrt_stream_wait_event(s, " + name(t) + ")");
          }
          return success();
        })
        .Case([&](CopyOp o) {
          if (!isa<RankedTensorType>(o.getInput().getType()))
            return o.emitError("code generation copies tensors only (not packed payloads)"),
                   failure();
          // The two directions on their own streams, so they overlap (PCIe
          // is full duplex).
          std::string st = o.getStream().getKind() == StreamKind::d2h ? "ys" : "xs";
          // A copy whose only use stores it to a global lands in the
          // global's buffer directly (the offload schedules' state coming
          // back to host memory): no second copy.
          std::string n = allocOrGlobal(o.getResult());
          return collective(o.getToken(),
                            "loomrt_memcpy_async(" + st + ", " + n + ", " + name(o.getInput()) +
                                ", " + std::to_string(bytesOf(o.getResult())) + ")",
                            st);
        })
        .Case([&](AllReduceOp o) {
          if (failed(checkWholeWorld(o, o.getGroup())))
            return failure();
          std::string n = alloc(o.getResult());
          return collective(o.getToken(),
                            "loomrt_all_reduce(comm, cs, " + dt(o.getInput()) + ", " +
                                name(o.getInput()) + ", " + n + ", " +
                                std::to_string(numel(o.getInput())) + ", " +
                                reduceOf(o.getReduce()) + ")");
        })
        .Case([&](ReduceScatterOp o) {
          if (failed(checkWholeWorld(o, o.getGroup())))
            return failure();
          std::string n = alloc(o.getResult());
          return collective(o.getToken(),
                            "loomrt_reduce_scatter(comm, cs, " + dt(o.getInput()) + ", " +
                                name(o.getInput()) + ", " + n + ", " +
                                std::to_string(numel(o.getResult())) + ", " +
                                reduceOf(o.getReduce()) + ")");
        })
        .Case([&](AllGatherOp o) {
          if (failed(checkWholeWorld(o, o.getGroup())))
            return failure();
          std::string n = alloc(o.getResult());
          return collective(o.getToken(),
                            "loomrt_all_gather(comm, cs, " + dt(o.getInput()) + ", " +
                                name(o.getInput()) + ", " + n + ", " +
                                std::to_string(numel(o.getInput())) + ")");
        })
        .Case([&](ShardOp o) {
          // A view: this rank's block of the input.
          if (failed(checkWholeWorld(o, o.getGroup())))
            return failure();
          std::string n = fresh();
          *os << "  void *" << n << " = (char *)" << name(o.getInput())
              << " + (size_t)loomrt_comm_rank(comm) * " << bytesOf(o.getResult()) << ";\n";
          names[o.getResult()] = n;
          alias(n, name(o.getInput()));
          return success();
        })
        .Default([&](Operation *other) {
          return other->emitError() << "'" << other->getName()
                                    << "' is not supported by code generation yet",
                 failure();
        });
  }

  LogicalResult unary(Operation *op, const char *kind) {
    Value x = op->getOperand(0), y = op->getResult(0);
    std::string n = alloc(y);
    call("loomrt_unary(s, " + std::string(kind) + ", " + dt(x) + ", " + name(x) + ", " + n + ", " +
         std::to_string(numel(x)) + ")");
    return success();
  }
  LogicalResult unaryGrad(Value dy, Value x, Value dx, const char *kind) {
    std::string n = alloc(dx);
    call("loomrt_unary_grad(s, " + std::string(kind) + ", " + dt(x) + ", " + name(dy) + ", " + name(x) +
         ", " + n + ", " + std::to_string(numel(x)) + ")");
    return success();
  }
  LogicalResult binary(Value a, Value b, Value y, const char *kind) {
    int rank = tt(y).getRank();
    std::string n = alloc(y);
    open("static const int64_t a_[] = {" + join(alignedShape(a, rank)) + "}, b_[] = {" +
         join(alignedShape(b, rank)) + "}, o_[] = {" + join(alignedShape(y, rank)) + "};");
    call("loomrt_binary(s, " + std::string(kind) + ", " + dt(y) + ", " + name(a) + ", a_, " + name(b) +
         ", b_, " + n + ", o_, " + std::to_string(rank) + ")");
    close();
    return success();
  }
  void copyStrided(size_t es, const std::string &src, ArrayRef<int64_t> ss,
                   const std::string &dst, ArrayRef<int64_t> ds, ArrayRef<int64_t> shape) {
    open("static const int64_t ss_[] = {" + join(ss) + "}, ds_[] = {" + join(ds) + "}, sh_[] = {" +
         join(shape) + "};");
    call("loomrt_copy_strided(s, " + std::to_string(es) + ", " + src + ", ss_, " + dst + ", ds_, sh_, " +
         std::to_string(shape.size()) + ")");
    close();
  }
  LogicalResult strided(Value result, const std::string &src, ArrayRef<int64_t> ss,
                        ArrayRef<int64_t> ds, ArrayRef<int64_t> shape) {
    std::string n = alloc(result);
    copyStrided(storageBytes(tt(result).getElementType()), src, ss, n, ds, shape);
    return success();
  }

  LogicalResult matmul(MatmulOp o) {
    auto a = tt(o.getLhs()), c = tt(o.getResult());
    int64_t ra = a.getRank(), rc = c.getRank();
    bool ta = o.getTransposeLhs(), tb = o.getTransposeRhs();
    int64_t m = c.getDimSize(rc - 2), n = c.getDimSize(rc - 1);
    int64_t k = a.getDimSize(ta ? ra - 2 : ra - 1);
    int64_t batch = c.getNumElements() / (m * n);
    auto batchOf = [](RankedTensorType t) {
      int64_t b = 1;
      for (int64_t i = 0; i + 2 < t.getRank(); ++i)
        b *= t.getDimSize(i);
      return b;
    };
    int64_t ba = batchOf(a), bb = batchOf(tt(o.getRhs()));
    if ((ba != batch && ba != 1) || (bb != batch && bb != 1))
      return o.emitError("code generation: matmul with partially broadcast batch dimensions"), failure();
    std::string out = alloc(o.getResult());
    open("static const loomrt_gemm g_ = {" + std::to_string(ta) + ", " + std::to_string(tb) + ", " +
         std::to_string(batch) + ", " + std::to_string(m) + ", " + std::to_string(n) + ", " +
         std::to_string(k) + ", " + std::to_string(ba == 1 ? 0 : m * k) + ", " +
         std::to_string(bb == 1 ? 0 : k * n) + ", " + std::to_string(m * n) + ", 1.0f, 0.0f, " +
         dt(o.getLhs()) + ", " + dt(o.getResult()) + "};");
    call("loomrt_matmul(s, &g_, " + name(o.getLhs()) + ", " + name(o.getRhs()) + ", " + out + ")");
    close();
    return success();
  }

  LogicalResult reduce(ReduceOp o) {
    const char *op = o.getKind() == ReduceKind::sum    ? "LOOMRT_REDUCE_SUM"
                     : o.getKind() == ReduceKind::mean ? "LOOMRT_REDUCE_MEAN"
                     : o.getKind() == ReduceKind::max  ? "LOOMRT_REDUCE_MAX"
                                                       : "LOOMRT_REDUCE_MIN";
    std::string cur = name(o.getInput());
    size_t es = storageBytes(tt(o.getInput()).getElementType());
    for (const ReduceStep &st : reduceSteps(o)) {
      std::string next = fresh();
      *os << "  LOOM_ALLOC(" << next << ", " << size_t(st.outer * st.inner) * es << ");\n";
      own(next); // the last one becomes the result's buffer
      call("loomrt_reduce(s, " + std::string(op) + ", " + dt(o.getInput()) + ", " + cur + ", " + next +
           ", " + std::to_string(st.outer) + ", " + std::to_string(st.len) + ", " +
           std::to_string(st.inner) + ")");
      cur = next;
    }
    std::string n = fresh();
    *os << "  void *" << n << " = " << cur << ";\n";
    names[o.getResult()] = n;
    alias(n, cur);
    return success();
  }

  /// The load of @sym whose only user is `op`, if `v` is one.
  static std::optional<StringRef> soleLoad(Value v, Operation *op) {
    auto load = v.getDefiningOp<LoadOp>();
    if (load && v.hasOneUse() && *v.getUsers().begin() == op)
      return load.getName();
    return std::nullopt;
  }
  /// The store of `v` to @sym, if it is `v`'s only store (other users read
  /// the updated value, which stays in @sym's buffer: the offload
  /// schedules copy it to the device working copy).
  static StoreOp soleStore(Value v, StringRef sym) {
    StoreOp found;
    for (Operation *u : v.getUsers())
      if (auto st = dyn_cast<StoreOp>(u)) {
        if (found || st.getName() != sym)
          return {};
        found = st;
      }
    return found;
  }
  /// A buffer this function made (a copy's result, say) that only `op`
  /// reads: the update may overwrite it.
  bool scratch(Value v, Operation *op) {
    return v.hasOneUse() && *v.getUsers().begin() == op && !v.getDefiningOp<LoadOp>() &&
           v.getDefiningOp() && owned.count(rootOf(name(v)));
  }

  /// The buffers an optimizer update writes: in place when the op reads
  /// each state symbol and writes it straight back (what
  /// loom-attach-optimizer emits), else fresh copies of the inputs.
  std::vector<std::string> updateBuffers(Operation *o, ArrayRef<Value> ins,
                                         ArrayRef<Value> outs) {
    std::vector<std::string> buf(ins.size());
    bool inPlace = true, inScratch = true;
    std::vector<StoreOp> stores(ins.size());
    for (size_t i = 0; i < ins.size(); ++i) {
      auto sym = soleLoad(ins[i], o);
      stores[i] = sym ? soleStore(outs[i], *sym) : StoreOp();
      inPlace = inPlace && sym && stores[i];
      inScratch = inScratch && scratch(ins[i], o);
    }
    size_t bytes = bytesOf(ins[0]);
    for (size_t i = 0; i < ins.size(); ++i) {
      if (inPlace) {
        buf[i] = name(ins[i]);
        elided.insert(stores[i]);
      } else if (inScratch) {
        // Streamed state: updated where its copy landed.
        buf[i] = fresh();
        *os << "  void *" << buf[i] << " = " << name(ins[i]) << ";\n";
        alias(buf[i], name(ins[i]));
      } else {
        buf[i] = alloc(outs[i]);
        call("loomrt_memcpy_async(" + streamFor(o) + ", " + buf[i] + ", " + name(ins[i]) + ", " +
             std::to_string(bytes) + ")");
      }
      names[outs[i]] = buf[i];
    }
    return buf;
  }

  /// torch.optim.SGD with momentum (dampening 0), in place on @p and its
  /// momentum buffer.
  LogicalResult sgd(SgdOp o) {
    if (!tt(o.getParam()).getElementType().isF32() || !tt(o.getGrad()).getElementType().isF32())
      return o.emitError("code generation updates f32 parameters with f32 gradients"), failure();
    std::vector<std::string> buf = updateBuffers(o, {o.getParam(), o.getMomentumBuf()},
                                                 {o.getNewParam(), o.getNewMomentumBuf()});
    call("loomrt_sgd_f32(" + streamFor(o) + ", loomrt_step_lr(c, " + f(o.getLr().convertToDouble()) +
         "), " + f(o.getMomentum().convertToDouble()) + ", " + (o.getNesterov() ? "1" : "0") +
         ", (float *)" + buf[0] + ", " + ptr(o.getGrad(), "const float *") + ", (float *)" +
         buf[1] + ", " + std::to_string(numel(o.getParam())) + ")");
    return success();
  }

  /// Where a value stored whole into a global can be written directly: the
  /// global's buffer (and the store is elided); else a fresh buffer.
  std::string allocOrGlobal(Value r) {
    if (r.hasOneUse())
      if (auto store = dyn_cast<StoreOp>(*r.getUsers().begin()))
        if (store.getValue() == r) {
          std::string n = fresh();
          *os << "  void *" << n << " = G[" << global(store.getName()) << "];\n";
          names[r] = n;
          elided.insert(store);
          return n;
        }
    return alloc(r);
  }

  LogicalResult adam(AdamOp o) {
    Type gt = tt(o.getGrad()).getElementType();
    if (!tt(o.getParam()).getElementType().isF32() || !(gt.isF32() || gt.isBF16()))
      return o.emitError("code generation updates f32 parameters with f32 or bf16 gradients"),
             failure();
    bool bf16 = gt.isBF16();
    CastOp refresh = fusedRefreshCast(o);
    std::string out = "nullptr";
    if (refresh) {
      out = allocOrGlobal(refresh.getResult());
      elided.insert(refresh);
    }
    std::vector<std::string> buf =
        updateBuffers(o, {o.getParam(), o.getExpAvg(), o.getExpAvgSq()},
                      {o.getNewParam(), o.getNewExpAvg(), o.getNewExpAvgSq()});
    if (auto it = hostScalar.find(o.getStep()); it != hostScalar.end()) {
      open("int64_t t_ = " + it->second + ";");
    } else {
      open("int64_t t_;");
      call("loomrt_memcpy_async(s, &t_, " + name(o.getStep()) + ", 8)");
      call("loomrt_stream_synchronize(s)");
    }
    *os << "    loomrt_adam_config cfg_ = {loomrt_step_lr(c, " << f(o.getLr().convertToDouble()) << "), "
        << f(o.getBeta1().convertToDouble()) << ", " << f(o.getBeta2().convertToDouble()) << ", "
        << f(o.getEps().convertToDouble()) << ", " << f(o.getWeightDecay().convertToDouble()) << ", "
        << (o.getDecoupled() ? 1 : 0) << ", t_};\n";
    // An update the host runs itself is timed for the driver (the JSON
    // log's cpu_update_*, --trace's cpu lane).
    std::string st = streamFor(o);
    bool onHost = st == "hs";
    if (onHost)
      *os << "    loomrt_step_host_begin(c, \"adam\");\n";
    if (bf16)
      call("loomrt_adam_bf16grad(" + st + ", &cfg_, (float *)" + buf[0] + ", " +
           ptr(o.getGrad(), "const uint16_t *") + ", (float *)" + buf[1] + ", (float *)" + buf[2] +
           ", (uint16_t *)" + out + ", " + std::to_string(numel(o.getParam())) + ")");
    else
      call("loomrt_adam_f32(" + st + ", &cfg_, (float *)" + buf[0] + ", " +
           ptr(o.getGrad(), "const float *") + ", (float *)" + buf[1] + ", (float *)" + buf[2] +
           ", " + std::to_string(numel(o.getParam())) + ")");
    if (onHost)
      *os << "    loomrt_step_host_end(c);\n";
    close();
    return success();
  }

  LogicalResult constant(arith::ConstantOp o) {
    auto type = cast<RankedTensorType>(o.getType());
    auto elems = dyn_cast<DenseElementsAttr>(o.getValue());
    if (!elems)
      return o.emitError("code generation supports dense constants only"), failure();
    Type elt = type.getElementType();
    std::string n = alloc(o.getResult());
    if (elems.isSplat() && (elt.isF32() || elt.isBF16())) {
      call("loomrt_fill(s, " + std::string(dtypeOf(elt)) + ", " + n + ", " +
           f(elems.getSplatValue<APFloat>().convertToDouble()) + ", " + std::to_string(type.getNumElements()) + ")");
      return success();
    }
    std::string k = "k" + std::to_string(counter++);
    llvm::raw_string_ostream cs(constants);
    if (elt.isF32()) {
      cs << "const float " << k << "[] = {";
      for (auto [i, v] : llvm::enumerate(elems.getValues<APFloat>()))
        cs << (i ? ", " : "") << f(v.convertToDouble());
    } else if (elt.isBF16()) {
      cs << "const uint16_t " << k << "[] = {"; // bf16 bit patterns
      for (auto [i, v] : llvm::enumerate(elems.getValues<APFloat>()))
        cs << (i ? ", " : "") << v.bitcastToAPInt().getZExtValue();
    } else if (elt.isInteger(64)) {
      cs << "const int64_t " << k << "[] = {";
      for (auto [i, v] : llvm::enumerate(elems.getValues<APInt>()))
        cs << (i ? ", " : "") << v.getSExtValue();
    } else if (elt.isInteger(1)) {
      cs << "const uint8_t " << k << "[] = {";
      for (auto [i, v] : llvm::enumerate(elems.getValues<bool>()))
        cs << (i ? ", " : "") << (v ? 1 : 0);
    } else {
      return o.emitError() << "code generation: constants of element type " << elt
                           << " are not supported (f32, bf16, i64, i1)",
             failure();
    }
    cs << "};\n\n";
    call("loomrt_memcpy_async(s, " + n + ", " + k + ", " + std::to_string(bytesOf(o.getResult())) + ")");
    return success();
  }

  ModuleOp module;
  const CodegenOptions &opts;
  llvm::StringMap<int> globals;
  llvm::DenseMap<Value, std::string> names;
  llvm::DenseSet<Operation *> elided;
  llvm::DenseMap<Value, std::string> hostScalar;
  llvm::StringMap<std::string> root;
  llvm::StringSet<> owned;
  llvm::StringMap<int> live;
  llvm::DenseMap<Value, Operation *> lastUser;
  llvm::DenseMap<Operation *, SmallVector<Value>> deferred;
  llvm::StringMap<std::vector<bool>> transfers;
  std::string constants, decls, bodies, body;
  std::unique_ptr<llvm::raw_string_ostream> os;
  unsigned counter = 0;
  bool inBlock = false;
};

} // namespace

LogicalResult emitTrainingCpp(ModuleOp module, llvm::raw_ostream &os,
                              const CodegenOptions &options) {
  Emitter e(module, options);
  return e.run(os);
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

bool compileTrainingBinary(const std::string &cppPath,
                           const std::string &output, std::string &error) {
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
  std::vector<std::string> args = {
      *path, "-O2", "-std=c++17", "-I", LOOM_RUNTIME_INCLUDE_DIR, cppPath,
      "-o", output, "-L", LOOM_RUNTIME_LIB_DIR, "-lloomrt",
      "-Wl,-rpath," LOOM_RUNTIME_LIB_DIR};
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
