//===- Interpreter.cpp - the reference executor of loom IR ----------------===//
//
// Runs a function the way the generated binary does: lowered to loomrt by
// the same pass (loom-lower-to-runtime, entry = the function), each runtime
// call made through the same table code generation spells
// (loom/RuntimeCalls.h), buffers from the runtime's allocator and freed
// where the lowering frees them. Every stream is the executor's one stream,
// so events are reached in order; collectives need the generated binary.
//
//===----------------------------------------------------------------------===//
#include "loom/Execution.h"
#include "loom/RuntimeCalls.h"

#include "dialects/Loom/LoomOps.h"
#include "dialects/LoomRT/LoomRTDialect.h"
#include "loomrt/loomrt.h"
#include "loom/Passes/LoomToLoomRT.h"
#include "loom/Passes/LoomRT.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <cstring>
#include <list>

using namespace mlir;
using namespace mlir::loom;
namespace rt = mlir::loomrt;

namespace loom {

Executor::~Executor() = default;

namespace {

struct Buf {
  std::shared_ptr<void> mem;
  RankedTensorType type;
  void *p() const { return mem.get(); }
  int64_t numel() const { return type.getNumElements(); }
};

/// Storage of an element type: bytes, runtime dtype, safetensors name.
struct Storage {
  size_t bytes;
  loomrt_dtype dt;
  const char *name;
};
std::optional<Storage> storageOf(Type t) {
  if (t.isF32())
    return Storage{4, LOOMRT_F32, "F32"};
  if (t.isBF16())
    return Storage{2, LOOMRT_BF16, "BF16"};
  if (t.isInteger(64))
    return Storage{8, LOOMRT_I64, "I64"};
  if (t.isInteger(1))
    return Storage{1, LOOMRT_I64, "BOOL"};
  return std::nullopt;
}

class Interp : public Executor {
public:
  Interp(ModuleOp module, loomrt_device dev, loomrt_stream s)
      : module(module), dev(dev), s(s) {}
  ~Interp() override {
    globals.clear();
    loomrt_stream_destroy(s);
    loomrt_device_close(dev);
  }

  //===--------------------------------------------------------------===//
  // Buffers
  //===--------------------------------------------------------------===//

  bool alloc(RankedTensorType type, Buf &out) {
    auto st = storageOf(type.getElementType());
    if (!st)
      return fail("unsupported element type " + str(type.getElementType()));
    size_t bytes = size_t(type.getNumElements()) * st->bytes;
    void *p = nullptr;
    if (loomrt_alloc(dev, LOOMRT_MEM_DEVICE, bytes ? bytes : 1, &p))
      return fail(std::string("allocation failed: ") + loomrt_last_error());
    loomrt_device d = dev;
    out = Buf{std::shared_ptr<void>(p, [d](void *q) {
                loomrt_free(d, LOOMRT_MEM_DEVICE, q);
              }),
              type};
    return true;
  }
  bool upload(RankedTensorType type, const void *host, Buf &out) {
    if (!alloc(type, out))
      return false;
    size_t bytes = size_t(out.numel()) * storageOf(type.getElementType())->bytes;
    return call(loomrt_memcpy_async(s, out.p(), host, bytes), "upload") &&
           call(loomrt_stream_synchronize(s), "upload");
  }
  HostTensor download(RankedTensorType type, const void *p, const std::string &name) {
    HostTensor h;
    auto st = *storageOf(type.getElementType());
    h.name = name;
    h.dtype = st.name;
    h.shape.assign(type.getShape().begin(), type.getShape().end());
    h.bytes.resize(size_t(type.getNumElements()) * st.bytes);
    if (!h.bytes.empty()) {
      loomrt_memcpy_async(s, h.bytes.data(), p, h.bytes.size());
      loomrt_stream_synchronize(s);
    }
    return h;
  }
  HostTensor download(const Buf &b, const std::string &name) { return download(b.type, b.p(), name); }

  bool fail(const std::string &msg) {
    error = msg;
    return false;
  }
  bool call(loomrt_status st, const std::string &what) {
    if (st == LOOMRT_OK)
      return true;
    return fail(what + ": " + loomrt_last_error());
  }
  static std::string str(Type t) {
    std::string out;
    llvm::raw_string_ostream os(out);
    os << t;
    return out;
  }

  //===--------------------------------------------------------------===//
  // Parameters
  //===--------------------------------------------------------------===//

  bool initParams(uint64_t seed, std::string &err) override {
    dropoutSeed = seed;
    // The runtime's seeded stream: generated binaries draw the same values.
    std::unique_ptr<loomrt_rng_t, void (*)(loomrt_rng)> rng(
        loomrt_rng_create(seed), loomrt_rng_destroy);
    for (Operation &op : module.getBody()->getOperations()) {
      std::string name;
      RankedTensorType type;
      InitAttr init;
      ElementsAttr value;
      if (auto p = dyn_cast<ParamOp>(op)) {
        name = p.getSymName().str();
        type = cast<RankedTensorType>(p.getType());
        init = p.getInitAttr();
        value = p.getValueAttr();
      } else if (auto st = dyn_cast<StateOp>(op)) {
        name = st.getSymName().str();
        type = cast<RankedTensorType>(st.getType());
        init = st.getInitAttr();
      } else {
        continue;
      }
      Buf b;
      if (value) {
        if (!constant(value, type, b))
          return err = error, false;
      } else if (!isa<FloatType>(type.getElementType())) {
        // Integer state (step counters) starts at zero.
        std::vector<uint8_t> zero(size_t(type.getNumElements()) *
                                      storageOf(type.getElementType())->bytes,
                                  0);
        if (!upload(type, zero.data(), b))
          return err = error, false;
      } else {
        std::vector<float> host(type.getNumElements(), 0.0f);
        if (init && loomrt_rng_fill(rng.get(), int(init.getKind()),
                                    init.getA().convertToDouble(),
                                    init.getB().convertToDouble(), host.data(),
                                    host.size()))
          return err = name + ": " + loomrt_last_error(), false;
        if (!fromFloats(type, host, b))
          return err = error, false;
      }
      globals[name] = b;
    }
    if (!refreshMirrors())
      return err = error, false;
    return true;
  }

  /// Working copies (`loom.mirror_of`): their master's values, an fp32
  /// master rounded to bf16 by the runtime's cast (as the binary's driver
  /// fills them); after every change of the masters.
  bool refreshMirrors() {
    for (auto st : module.getOps<StateOp>()) {
      auto of = st->getAttrOfType<FlatSymbolRefAttr>(LoomDialect::MirrorOfAttrHelper::getNameStr());
      if (!of)
        continue;
      auto mirror = globals.find(st.getSymName()), master = globals.find(of.getValue());
      if (mirror == globals.end() || master == globals.end() ||
          mirror->second.numel() != master->second.numel())
        return fail("the working copy " + st.getSymName().str() + " does not match its master");
      Type from = master->second.type.getElementType(), to = mirror->second.type.getElementType();
      size_t n = size_t(master->second.numel());
      bool ok = from == to ? call(loomrt_memcpy_async(s, mirror->second.p(), master->second.p(),
                                                      n * storageOf(from)->bytes),
                                  "working copy")
                : from.isF32() && to.isBF16()
                    ? call(loomrt_cast(s, LOOMRT_F32, master->second.p(), LOOMRT_BF16,
                                       mirror->second.p(), n),
                           "working copy")
                    : fail("the working copy " + st.getSymName().str() +
                           " is neither its master's type nor its bf16 rounding");
      if (!ok || !call(loomrt_stream_synchronize(s), "working copy"))
        return false;
    }
    return true;
  }

  bool setParams(const std::vector<HostTensor> &tensors,
                 std::string &err) override {
    for (const HostTensor &t : tensors) {
      auto it = globals.find(t.name);
      if (it == globals.end())
        return err = "'" + t.name + "' is not a parameter or state of the module",
               false;
      auto type = it->second.type;
      auto st = *storageOf(type.getElementType());
      if (t.dtype != st.name || t.shape != std::vector<int64_t>(type.getShape().begin(), type.getShape().end()))
        return err = "'" + t.name + "' has the wrong dtype or shape", false;
      Buf b;
      if (!upload(type, t.bytes.data(), b))
        return err = error, false;
      it->second = b;
    }
    if (!refreshMirrors())
      return err = error, false;
    return true;
  }

  std::vector<HostTensor> getParams() override {
    std::vector<HostTensor> out;
    for (Operation &op : module.getBody()->getOperations())
      if (auto p = dyn_cast<ParamOp>(op))
        out.push_back(download(globals[p.getSymName()], p.getSymName().str()));
    return out;
  }

  bool fromFloats(RankedTensorType type, const std::vector<float> &host,
                  Buf &out) {
    if (type.getElementType().isF32())
      return upload(type, host.data(), out);
    if (type.getElementType().isBF16()) {
      std::vector<uint16_t> h(host.size());
      for (size_t i = 0; i < h.size(); ++i) {
        uint32_t u;
        std::memcpy(&u, &host[i], 4);
        u += 0x7fffu + ((u >> 16) & 1u);
        h[i] = uint16_t(u >> 16);
      }
      return upload(type, h.data(), out);
    }
    return fail("cannot initialise a tensor of " + str(type));
  }

  bool constant(Attribute attr, RankedTensorType type, Buf &out) {
    auto elems = dyn_cast<DenseElementsAttr>(attr);
    if (!elems)
      return fail("only dense constants are supported");
    if (!storageOf(type.getElementType()))
      return fail("constants of " + str(type.getElementType()) + " are not supported");
    return upload(type, rt::denseBytes(elems).data(), out);
  }

  //===--------------------------------------------------------------===//
  // Running a function: its loomrt lowering, call by call
  //===--------------------------------------------------------------===//

  /// @function and what it calls lowered to loomrt (loom-lower-to-runtime,
  /// entry = @function), once per function.
  FailureOr<ModuleOp> lowered(StringRef function) {
    auto it = lowerings.find(function);
    if (it != lowerings.end())
      return *it->second;
    OwningOpRef<ModuleOp> copy = module.clone();
    PassManager pm(module.getContext());
    LoweringOptions lo;
    lo.entry = function.str();
    lo.fuse = lo.planArena = lo.graphs = false;
    buildLoweringPipeline(pm, lo);
    std::string diags;
    {
      ScopedDiagnosticHandler capture(module.getContext(), [&](Diagnostic &d) {
        std::string loc;
        llvm::raw_string_ostream ls(loc);
        d.getLocation().print(ls);
        diags += (diags.empty() ? "" : "; ") + loc + ": " + d.str();
        return success();
      });
      if (failed(pm.run(*copy)))
        return fail(diags.empty() ? "cannot lower @" + function.str() : diags), failure();
    }
    ModuleOp m = *copy;
    lowerings[function] = std::move(copy);
    return m;
  }

  bool run(StringRef function, const std::vector<HostTensor> &args,
           std::vector<HostTensor> &results, std::string &err) override {
    auto f = module.lookupSymbol<func::FuncOp>(function);
    if (!f)
      return err = "no function @" + function.str(), false;
    auto ty = f.getFunctionType();
    if (!llvm::all_of(llvm::concat<const Type>(ty.getInputs(), ty.getResults()),
                      [](Type t) { return isa<RankedTensorType>(t); }))
      return err = "@" + function.str() +
                   " must take and return tensors (loom-run lowers loom IR itself; "
                   "give it the module before --compile-to=lowered)",
             false;
    if (args.size() != f.getNumArguments())
      return err = "@" + function.str() + " takes " +
                   std::to_string(f.getNumArguments()) + " arguments, got " +
                   std::to_string(args.size()),
             false;
    std::vector<Buf> in;
    for (auto [i, a] : llvm::enumerate(f.getArguments())) {
      auto type = cast<RankedTensorType>(a.getType());
      auto st = storageOf(type.getElementType());
      if (!st || args[i].dtype != st->name ||
          args[i].shape != std::vector<int64_t>(type.getShape().begin(), type.getShape().end()))
        return err = "argument " + std::to_string(i) + " ('" + args[i].name +
                     "') does not match " + str(type),
               false;
      Buf b;
      if (!upload(type, args[i].bytes.data(), b))
        return err = error, false;
      in.push_back(b);
    }
    FailureOr<ModuleOp> m = lowered(function);
    // Dropout keys: run k (from 0) is training step k of --seed, as in the
    // generated binary.
    step = runs++;
    if (failed(m))
      return err = error, false;
    auto lf = m->lookupSymbol<func::FuncOp>(function);
    std::vector<void *> argPtrs, outs;
    for (const Buf &b : in)
      argPtrs.push_back(b.p());
    // Every buffer the step allocates goes back at the end, freed or not
    // (results are downloaded first).
    llvm::scope_exit release([&] {
      for (auto &[p, space] : live)
        loomrt_free(dev, space, p);
      live.clear();
    });
    bool ok = runFunc(*m, lf, argPtrs, outs) && call(loomrt_stream_synchronize(s), "synchronize");
    if (!ok)
      return err = error, false;
    auto names = f->getAttrOfType<ArrayAttr>(LoomDialect::GradParamsAttrHelper::getNameStr());
    for (auto [i, p] : llvm::enumerate(outs)) {
      std::string name = "out" + std::to_string(i);
      if (names && i > 0 && i - 1 < names.size())
        name = "grad." + cast<FlatSymbolRefAttr>(names[i - 1]).getValue().str();
      results.push_back(download(cast<RankedTensorType>(f.getResultTypes()[i]), p, name));
    }
    return true;
  }

  /// Runs a lowered function; each call has its own value table.
  bool runFunc(ModuleOp m, func::FuncOp f, ArrayRef<void *> args, std::vector<void *> &results) {
    llvm::DenseMap<Value, void *> saved;
    std::swap(saved, ptrs);
    llvm::scope_exit restore([&] { std::swap(saved, ptrs); });
    for (auto [a, p] : llvm::zip(f.getArguments(), args))
      ptrs[a] = p;
    for (Operation &op : f.getBody().front()) {
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        for (Value v : ret.getOperands())
          results.push_back(ptrs.lookup(v));
        return true;
      }
      if (auto c = dyn_cast<func::CallOp>(op)) {
        auto callee = m.lookupSymbol<func::FuncOp>(c.getCallee());
        if (!callee)
          return fail("call of unknown @" + c.getCallee().str());
        std::vector<void *> cargs, cres;
        for (Value v : c.getOperands())
          cargs.push_back(ptrs.lookup(v));
        if (!runFunc(m, callee, cargs, cres))
          return false;
        for (auto [r, p] : llvm::zip(c.getResults(), cres))
          ptrs[r] = p;
        continue;
      }
      if (!exec(&op)) {
        // The lowering names each runtime call's loom op in its location.
        std::string loc, what = op.getName().getStringRef().str();
        llvm::raw_string_ostream os(loc);
        Location l = op.getLoc();
        if (auto named = dyn_cast<NameLoc>(l)) {
          what = named.getName().str();
          l = named.getChildLoc();
        }
        l.print(os);
        return fail(what + " at " + loc + ": " + error);
      }
    }
    return fail("@" + f.getName().str() + " has no return");
  }

  /// The arguments of a runtime call as C values (visitRuntimeCall's
  /// builder): one stream for every role (the executor runs in order), the
  /// tables and configs kept alive until the call returns.
  struct Call {
    Interp &in;
    std::list<std::vector<int64_t>> shapes;
    loomrt_gemm g{};
    loomrt_adam_config cfg{};
    std::vector<loomrt_fused_inst> insts;
    loomrt_fused_program prog{};
    std::vector<const void *> ins;
    std::vector<void *> outs;
    std::vector<loomrt_adam_tensor> tensors;

    loomrt_stream stream(Value) const { return in.s; }
    loomrt_comm comm(Value) const { return nullptr; }
    void *buf(Value v) const { return v ? in.ptrs.lookup(v) : nullptr; }
    template <typename T>
    T *ptr(Value v, const char *) const {
      return static_cast<T *>(buf(v));
    }
    template <typename T>
    T *ptrAt(Value v, int64_t bytes, const char *) const {
      return reinterpret_cast<T *>(static_cast<char *>(buf(v)) + bytes);
    }
    int64_t i(int64_t x) const { return x; }
    int flag(bool x) const { return x ? 1 : 0; }
    float f(double x) const { return float(x); }
    float lr(double x) const { return float(x); }
    uint64_t hostInt(Value v) const { return uint64_t(in.ints.lookup(v)); }
    uint64_t rankTimes(Value, int64_t) const { return 0; } // one rank
    int peer(Value, int64_t k) const { return k == 0 ? 0 : -1; }
    loomrt_dtype dtype(rt::DType d) const { return loomrt_dtype(d); }
    loomrt_unary_op unary(rt::UnaryKind k) const { return loomrt_unary_op(k); }
    loomrt_binary_op binary(rt::BinaryKind k) const { return loomrt_binary_op(k); }
    loomrt_reduce_op reduce(rt::ReduceKind k) const { return loomrt_reduce_op(k); }
    loomrt_block_codec codec(rt::BlockCodec k) const { return loomrt_block_codec(k); }
    const int64_t *shape(const char *, ArrayRef<int64_t> v) {
      shapes.emplace_back(v.begin(), v.end());
      return shapes.back().data();
    }
    const loomrt_gemm *gemm(const loomrt_gemm &x) {
      g = x;
      return &g;
    }
    const loomrt_fused_program *fused(rt::FusedElementwiseOp o) {
      prog = o.toProgram(insts);
      return &prog;
    }
    const void *const *inputs(const char *, ValueRange vs) {
      for (Value v : vs)
        ins.push_back(buf(v));
      return ins.data();
    }
    void *const *outputs(const char *, ValueRange vs) {
      for (Value v : vs)
        outs.push_back(buf(v));
      return outs.data();
    }
    const loomrt_adam_tensor *adamTensors(rt::AdamMultiOp o) {
      ArrayRef<int64_t> sizes = o.getSizes();
      for (size_t k = 0; k < sizes.size(); ++k)
        tensors.push_back({static_cast<float *>(buf(o.getParams()[k])), buf(o.getGrads()[k]),
                           static_cast<float *>(buf(o.getExpAvgs()[k])),
                           static_cast<float *>(buf(o.getExpAvgSqs()[k])),
                           o.getRefresh().empty()
                               ? nullptr
                               : static_cast<uint16_t *>(buf(o.getRefresh()[k])),
                           size_t(sizes[k])});
      return tensors.data();
    }
    template <typename Op> const loomrt_adam_config *adam(Op o) {
      cfg = {float(o.getLr().convertToDouble()), float(o.getBeta1().convertToDouble()),
             float(o.getBeta2().convertToDouble()), float(o.getEps().convertToDouble()),
             float(o.getWeightDecay().convertToDouble()), o.getDecoupled() ? 1 : 0,
             in.ints.lookup(o.getStep()), int64_t(o.getFreezeStep())};
      return &cfg;
    }
    /// Makes the call; a failure is kept in `ok` (the op was handled).
    template <typename F, typename... A>
    bool call(const char *name, F fn, A... args) {
      ok = in.call(fn(args...), StringRef(name).drop_front(strlen("loomrt_")).str());
      return true;
    }
    bool ok = true;
  };

  bool exec(Operation *op) {
    if (isa<rt::AllReduceOp, rt::ReduceScatterOp, rt::AllGatherOp, rt::AllToAllOp,
              rt::AllGatherBytesOp, rt::SendRecvOp, rt::P2POp, rt::RankViewOp>(op))
      return fail("loom-run executes one rank: collectives run in the generated binary "
                  "(loomc --topology=..., one process per rank)");
    Call c{*this, {}, {}, {}, {}, {}, {}, {}, {}};
    if (visitRuntimeCall(op, c))
      return c.ok;
    return llvm::TypeSwitch<Operation *, bool>(op)
        .Case<rt::CommentOp, rt::StreamOp, rt::CommOp, rt::BackwardDoneOp, rt::WaitOp>(
            [](Operation *) { return true; })
        // One stream: an event is reached when the stream is.
        .Case([&](rt::RecordOp o) { return ptrs[o.getEvent()] = nullptr, true; })
        .Case([&](rt::SyncOp) { return call(loomrt_stream_synchronize(s), "synchronize"); })
        // A host task runs where it is issued (a valid order of its thread
        // and the issuing one); its events are its body's.
        .Case([&](rt::HostTaskOp o) {
          Block &body = o.getBody().front();
          for (Operation &inner : body)
            if (!isa<rt::YieldOp>(inner) && !exec(&inner))
              return false;
          for (auto [r, v] : llvm::zip(o.getResults(), cast<rt::YieldOp>(body.back()).getEvents()))
            ptrs[r] = ptrs.lookup(v);
          return true;
        })
        .Case([&](rt::JoinOp) { return true; })
        // A planned offset (loom-plan-arena) is the binary's placement; the
        // executor gives every buffer memory of its own, which no plan can
        // make alias (the binary's losses are checked against it).
        .Case([&](rt::AllocOp o) {
          loomrt_mem_space space = o.getHost() ? LOOMRT_MEM_PINNED : LOOMRT_MEM_DEVICE;
          void *p = nullptr;
          if (loomrt_alloc(dev, space, o.getBytes() ? o.getBytes() : 1, &p))
            return fail(std::string("allocation failed: ") + loomrt_last_error());
          live[p] = space;
          ptrs[o.getResult()] = p;
          return true;
        })
        .Case([&](rt::FreeOp o) {
          void *p = ptrs.lookup(o.getBuffer());
          auto it = live.find(p);
          if (it == live.end())
            return fail("frees a buffer it did not allocate");
          loomrt_free(dev, it->second, p);
          live.erase(it);
          return true;
        })
        .Case([&](rt::GlobalOp o) {
          auto it = globals.find(o.getName());
          if (it == globals.end())
            return fail("@" + o.getName().str() + " has no value (initialise parameters first)");
          ptrs[o.getResult()] = it->second.p();
          return true;
        })
        .Case([&](rt::ViewOp o) {
          ptrs[o.getResult()] = static_cast<char *>(ptrs.lookup(o.getSource())) + o.getOffset();
          return true;
        })
        .Case([&](rt::WriteConstOp o) {
          std::vector<uint8_t> bytes = o.getBytes();
          return call(loomrt_memcpy_async(s, ptrs.lookup(o.getDst()), bytes.data(), bytes.size()),
                      "write_const") &&
                 call(loomrt_stream_synchronize(s), "write_const");
        })
        .Case([&](rt::AddI64Op o) {
          // Integer scalars (step counters) are added on the host.
          int64_t a, b;
          if (!readHost(ptrs.lookup(o.getLhs()), &a) || !readHost(ptrs.lookup(o.getRhs()), &b))
            return false;
          int64_t sum = a + b;
          ints[o.getSum()] = sum;
          return call(loomrt_memcpy_async(s, ptrs.lookup(o.getOut()), &sum, 8), "add_i64") &&
                 call(loomrt_stream_synchronize(s), "add_i64");
        })
        .Case([&](rt::RandomKeyOp o) {
          return ints[o.getKey()] = int64_t(loomrt_random_key(dropoutSeed, step, o.getOp())), true;
        })
        .Case([&](rt::ReadI64Op o) {
          int64_t v;
          return readHost(ptrs.lookup(o.getBuffer()), &v) && (ints[o.getValue()] = v, true);
        })
        .Default([&](Operation *other) { return fail("loom-run does not execute this op"); });
  }

  /// Copies an i64 scalar to the host.
  bool readHost(void *src, int64_t *dst) {
    return call(loomrt_memcpy_async(s, dst, src, 8), "read") &&
           call(loomrt_stream_synchronize(s), "read");
  }

  ModuleOp module;
  loomrt_device dev;
  loomrt_stream s;
  std::string error;
  llvm::StringMap<Buf> globals;
  llvm::StringMap<OwningOpRef<ModuleOp>> lowerings;
  llvm::DenseMap<Value, void *> ptrs;
  llvm::DenseMap<Value, int64_t> ints;
  uint64_t dropoutSeed = 0; // --seed of initParams
  int64_t runs = 0, step = 0;
  llvm::DenseMap<void *, loomrt_mem_space> live;
};

} // namespace

std::unique_ptr<Executor> Executor::create(ModuleOp module,
                                           llvm::StringRef backend,
                                           std::string &error) {
  loomrt_backend b = backend == "cuda" ? LOOMRT_BACKEND_CUDA : LOOMRT_BACKEND_CPU;
  if (backend != "cpu" && backend != "cuda") {
    error = "unknown backend '" + backend.str() + "' (expected cpu or cuda)";
    return nullptr;
  }
  loomrt_device dev;
  if (loomrt_device_open(b, 0, &dev)) {
    error = loomrt_last_error();
    return nullptr;
  }
  loomrt_stream s;
  if (loomrt_stream_create(dev, &s)) {
    error = loomrt_last_error();
    loomrt_device_close(dev);
    return nullptr;
  }
  return std::make_unique<Interp>(module, dev, s);
}

} // namespace loom
