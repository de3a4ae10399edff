//===- Interpreter.cpp - the reference executor of loom IR ----------------===//
//
// Each SSA value gets a buffer on the runtime device; each op becomes one or
// a few runtime calls (the same calls code generation will emit). Values are
// immutable, so reshapes alias their input and loads alias the parameter.
//
//===----------------------------------------------------------------------===//
#include "loom/Execution.h"

#include "dialects/Loom/LoomOps.h"
#include "loomrt/loomrt.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <cstring>

using namespace mlir;
using namespace mlir::loom;

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
    values.clear();
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
  HostTensor download(const Buf &b, const std::string &name) {
    HostTensor h;
    auto st = *storageOf(b.type.getElementType());
    h.name = name;
    h.dtype = st.name;
    h.shape.assign(b.type.getShape().begin(), b.type.getShape().end());
    h.bytes.resize(size_t(b.numel()) * st.bytes);
    if (!h.bytes.empty()) {
      loomrt_memcpy_async(s, h.bytes.data(), b.p(), h.bytes.size());
      loomrt_stream_synchronize(s);
    }
    return h;
  }

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
    Type elt = type.getElementType();
    if (isa<FloatType>(elt)) {
      std::vector<float> host;
      for (APFloat v : elems.getValues<APFloat>())
        host.push_back(v.convertToFloat());
      return fromFloats(type, host, out);
    }
    if (elt.isInteger(64)) {
      std::vector<int64_t> host;
      for (APInt v : elems.getValues<APInt>())
        host.push_back(v.getSExtValue());
      return upload(type, host.data(), out);
    }
    if (elt.isInteger(1)) {
      std::vector<uint8_t> host;
      for (bool v : elems.getValues<bool>())
        host.push_back(v);
      return upload(type, host.data(), out);
    }
    return fail("constants of " + str(elt) + " are not supported");
  }

  //===--------------------------------------------------------------===//
  // Running a function
  //===--------------------------------------------------------------===//

  bool run(StringRef function, const std::vector<HostTensor> &args,
           std::vector<HostTensor> &results, std::string &err) override {
    auto f = module.lookupSymbol<func::FuncOp>(function);
    if (!f)
      return err = "no function @" + function.str(), false;
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
    std::vector<Buf> outs;
    if (!runFunc(f, in, outs))
      return err = error, false;
    auto names = f->getAttrOfType<ArrayAttr>("loom.grad_params");
    for (auto [i, b] : llvm::enumerate(outs)) {
      std::string name = "out" + std::to_string(i);
      if (names && i > 0 && i - 1 < names.size())
        name = "grad." + cast<FlatSymbolRefAttr>(names[i - 1]).getValue().str();
      results.push_back(download(b, name));
    }
    return true;
  }

  /// Runs `f` on device buffers; each call has its own value table.
  bool runFunc(func::FuncOp f, const std::vector<Buf> &args,
               std::vector<Buf> &results) {
    llvm::DenseMap<Value, Buf> saved;
    std::swap(saved, values);
    auto restore = llvm::make_scope_exit([&] { std::swap(saved, values); });
    for (auto [a, b] : llvm::zip(f.getArguments(), args))
      values[a] = b;
    for (Operation &op : f.getBody().front()) {
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        for (Value v : ret.getOperands())
          results.push_back(values[v]);
        return true;
      }
      if (auto call = dyn_cast<func::CallOp>(op)) {
        auto callee = module.lookupSymbol<func::FuncOp>(call.getCallee());
        if (!callee)
          return fail("call of unknown @" + call.getCallee().str());
        std::vector<Buf> cargs, cres;
        for (Value v : call.getOperands())
          cargs.push_back(values[v]);
        if (!runFunc(callee, cargs, cres))
          return false;
        for (auto [r, b] : llvm::zip(call.getResults(), cres))
          values[r] = b;
        continue;
      }
      if (!exec(&op)) {
        std::string loc;
        llvm::raw_string_ostream os(loc);
        op.getLoc().print(os);
        return fail(op.getName().getStringRef().str() + " at " + loc + ": " +
                    error);
      }
    }
    return fail("@" + f.getName().str() + " has no return");
  }

  Buf &in(Value v) { return values[v]; }
  bool out(Value v, Buf &b) { return alloc(cast<RankedTensorType>(v.getType()), b) && (values[v] = b, true); }
  loomrt_dtype dtOf(Value v) {
    return storageOf(cast<RankedTensorType>(v.getType()).getElementType())->dt;
  }
  static int64_t lastDim(Value v) {
    return cast<RankedTensorType>(v.getType()).getShape().back();
  }
  static int64_t numel(Value v) {
    return cast<RankedTensorType>(v.getType()).getNumElements();
  }

  bool unary(Value x, Value y, loomrt_unary_op op) {
    Buf o;
    return out(y, o) && call(loomrt_unary(s, op, dtOf(x), in(x).p(), o.p(), numel(x)), "unary");
  }
  bool unaryGrad(Value dy, Value x, Value dx, loomrt_unary_op op) {
    Buf o;
    return out(dx, o) && call(loomrt_unary_grad(s, op, dtOf(x), in(dy).p(), in(x).p(), o.p(), numel(x)), "unary_grad");
  }
  bool binary(Value a, Value b, Value y, loomrt_binary_op op) {
    int rank = cast<RankedTensorType>(y.getType()).getRank();
    auto as = alignedShape(a, rank), bs = alignedShape(b, rank), os = alignedShape(y, rank);
    Buf o;
    return out(y, o) && call(loomrt_binary(s, op, dtOf(y), in(a).p(), as.data(), in(b).p(), bs.data(), o.p(), os.data(), rank), "binary");
  }
  size_t esize(Value v) {
    return storageOf(cast<RankedTensorType>(v.getType()).getElementType())->bytes;
  }
  bool strided(const void *src, ArrayRef<int64_t> ss, void *dst,
               ArrayRef<int64_t> ds, ArrayRef<int64_t> shape, size_t es) {
    if (shape.size() > LOOMRT_MAX_RANK)
      return fail("rank above 8");
    return call(loomrt_copy_strided(s, es, src, ss.data(), dst, ds.data(), shape.data(), int(shape.size())), "copy_strided");
  }

  bool exec(Operation *op) {
    // As in code generation: row counts below divide by a dimension.
    if (zeroSizedTensor(op))
      return fail("zero-sized tensors are not supported");
    return llvm::TypeSwitch<Operation *, bool>(op)
        .Case([&](arith::ConstantOp c) {
          Buf b;
          return constant(c.getValue(), cast<RankedTensorType>(c.getType()), b) &&
                 (values[c.getResult()] = b, true);
        })
        .Case([&](LoadOp o) {
          auto it = globals.find(o.getName());
          if (it == globals.end())
            return fail("@" + o.getName().str() + " has no value (initialise parameters first)");
          values[o.getResult()] = it->second;
          return true;
        })
        .Case([&](StoreOp o) {
          globals[o.getName()] = in(o.getValue());
          return true;
        })
        .Case([&](NegOp o) { return unary(o.getInput(), o.getResult(), LOOMRT_NEG); })
        .Case([&](ExpOp o) { return unary(o.getInput(), o.getResult(), LOOMRT_EXP); })
        .Case([&](LogOp o) { return unary(o.getInput(), o.getResult(), LOOMRT_LOG); })
        .Case([&](SqrtOp o) { return unary(o.getInput(), o.getResult(), LOOMRT_SQRT); })
        .Case([&](RsqrtOp o) { return unary(o.getInput(), o.getResult(), LOOMRT_RSQRT); })
        .Case([&](TanhOp o) { return unary(o.getInput(), o.getResult(), LOOMRT_TANH); })
        .Case([&](ErfOp o) { return unary(o.getInput(), o.getResult(), LOOMRT_ERF); })
        .Case([&](SinOp o) { return unary(o.getInput(), o.getResult(), LOOMRT_SIN); })
        .Case([&](CosOp o) { return unary(o.getInput(), o.getResult(), LOOMRT_COS); })
        .Case([&](SigmoidOp o) { return unary(o.getInput(), o.getResult(), LOOMRT_SIGMOID); })
        .Case([&](ReluOp o) { return unary(o.getInput(), o.getResult(), LOOMRT_RELU); })
        .Case([&](SiluOp o) { return unary(o.getInput(), o.getResult(), LOOMRT_SILU); })
        .Case([&](GeluOp o) {
          return unary(o.getInput(), o.getResult(), o.getApproximate() ? LOOMRT_GELU_TANH : LOOMRT_GELU);
        })
        .Case([&](ReluGradOp o) { return unaryGrad(o.getGrad(), o.getInput(), o.getResult(), LOOMRT_RELU); })
        .Case([&](SiluGradOp o) { return unaryGrad(o.getGrad(), o.getInput(), o.getResult(), LOOMRT_SILU); })
        .Case([&](GeluGradOp o) {
          return unaryGrad(o.getGrad(), o.getInput(), o.getResult(), o.getApproximate() ? LOOMRT_GELU_TANH : LOOMRT_GELU);
        })
        .Case([&](AddOp o) { return binary(o.getLhs(), o.getRhs(), o.getResult(), LOOMRT_ADD); })
        .Case([&](SubOp o) { return binary(o.getLhs(), o.getRhs(), o.getResult(), LOOMRT_SUB); })
        .Case([&](MulOp o) { return binary(o.getLhs(), o.getRhs(), o.getResult(), LOOMRT_MUL); })
        .Case([&](DivOp o) { return binary(o.getLhs(), o.getRhs(), o.getResult(), LOOMRT_DIV); })
        .Case([&](PowOp o) { return binary(o.getLhs(), o.getRhs(), o.getResult(), LOOMRT_POW); })
        .Case([&](MaxOp o) { return binary(o.getLhs(), o.getRhs(), o.getResult(), LOOMRT_MAX); })
        .Case([&](MinOp o) { return binary(o.getLhs(), o.getRhs(), o.getResult(), LOOMRT_MIN); })
        .Case([&](SelectOp o) {
          int rank = o.getResult().getType().getRank();
          auto cs = alignedShape(o.getCond(), rank), as = alignedShape(o.getLhs(), rank),
               bs = alignedShape(o.getRhs(), rank), os = alignedShape(o.getResult(), rank);
          Buf r;
          return out(o.getResult(), r) &&
                 call(loomrt_select(s, dtOf(o.getResult()), static_cast<const uint8_t *>(in(o.getCond()).p()), cs.data(), in(o.getLhs()).p(), as.data(), in(o.getRhs()).p(), bs.data(), r.p(), os.data(), rank), "select");
        })
        .Case([&](CastOp o) {
          Buf r;
          return out(o.getResult(), r) &&
                 call(loomrt_cast(s, dtOf(o.getInput()), in(o.getInput()).p(), dtOf(o.getResult()), r.p(), numel(o.getInput())), "cast");
        })
        .Case([&](MatmulOp o) { return matmul(o); })
        .Case([&](LayerNormOp o) {
          Buf r;
          int64_t d = lastDim(o.getInput());
          return out(o.getResult(), r) &&
                 call(loomrt_layer_norm(s, dtOf(o.getInput()), in(o.getInput()).p(), in(o.getWeight()).p(), o.getBias() ? in(o.getBias()).p() : nullptr, r.p(), numel(o.getInput()) / d, d, float(o.getEps().convertToDouble())), "layer_norm");
        })
        .Case([&](LayerNormGradOp o) {
          Buf dx, dw, db;
          int64_t d = lastDim(o.getInput());
          return out(o.getGradInput(), dx) && out(o.getGradWeight(), dw) && out(o.getGradBias(), db) &&
                 call(loomrt_layer_norm_grad(s, dtOf(o.getInput()), in(o.getGrad()).p(), in(o.getInput()).p(), in(o.getWeight()).p(), dx.p(), dw.p(), db.p(), numel(o.getInput()) / d, d, float(o.getEps().convertToDouble())), "layer_norm_grad");
        })
        .Case([&](RmsNormOp o) {
          Buf r;
          int64_t d = lastDim(o.getInput());
          return out(o.getResult(), r) &&
                 call(loomrt_rms_norm(s, dtOf(o.getInput()), in(o.getInput()).p(), in(o.getWeight()).p(), r.p(), numel(o.getInput()) / d, d, float(o.getEps().convertToDouble())), "rms_norm");
        })
        .Case([&](RmsNormGradOp o) {
          Buf dx, dw;
          int64_t d = lastDim(o.getInput());
          return out(o.getGradInput(), dx) && out(o.getGradWeight(), dw) &&
                 call(loomrt_rms_norm_grad(s, dtOf(o.getInput()), in(o.getGrad()).p(), in(o.getInput()).p(), in(o.getWeight()).p(), dx.p(), dw.p(), numel(o.getInput()) / d, d, float(o.getEps().convertToDouble())), "rms_norm_grad");
        })
        .Case([&](SoftmaxOp o) {
          int64_t rank = o.getInput().getType().getRank();
          int64_t dim = int64_t(o.getDim());
          if (dim != rank - 1 && dim != -1)
            return fail("softmax over a dimension other than the last");
          Buf r;
          int64_t d = lastDim(o.getInput());
          return out(o.getResult(), r) &&
                 call(loomrt_softmax(s, dtOf(o.getInput()), in(o.getInput()).p(), r.p(), numel(o.getInput()) / d, d, 1.0f, o.getLog(), 0), "softmax");
        })
        .Case([&](SoftmaxGradOp o) {
          int64_t rank = o.getOutput().getType().getRank();
          int64_t dim = int64_t(o.getDim());
          if (dim != rank - 1 && dim != -1)
            return fail("softmax over a dimension other than the last");
          Buf r;
          int64_t d = lastDim(o.getOutput());
          return out(o.getResult(), r) &&
                 call(loomrt_softmax_grad(s, dtOf(o.getOutput()), in(o.getGrad()).p(), in(o.getOutput()).p(), r.p(), numel(o.getOutput()) / d, d, 1.0f, o.getLog()), "softmax_grad");
        })
        .Case([&](EmbeddingOp o) {
          Buf r;
          auto t = o.getTable().getType();
          return out(o.getResult(), r) &&
                 call(loomrt_embedding(s, dtOf(o.getTable()), in(o.getTable()).p(), static_cast<const int64_t *>(in(o.getIndices()).p()), r.p(), numel(o.getIndices()), t.getDimSize(1), t.getDimSize(0)), "embedding");
        })
        .Case([&](EmbeddingGradOp o) {
          auto t = o.getResult().getType();
          Buf r;
          if (!out(o.getResult(), r))
            return false;
          if (!t.getElementType().isF32())
            return fail("embedding_grad into a non-f32 table");
          return call(loomrt_embedding_grad(s, dtOf(o.getGrad()), in(o.getGrad()).p(), static_cast<const int64_t *>(in(o.getIndices()).p()), static_cast<float *>(r.p()), numel(o.getIndices()), t.getDimSize(1), t.getDimSize(0)), "embedding_grad");
        })
        .Case([&](AttentionOp o) {
          auto q = o.getQuery().getType(), k = o.getKey().getType();
          int64_t bh = q.getDimSize(0) * q.getDimSize(1);
          Buf r, ws;
          auto dt = dtOf(o.getQuery());
          return out(o.getResult(), r) && scratch(loomrt_attention_workspace_bytes(dt, bh, q.getDimSize(2), k.getDimSize(2), 0), ws) &&
                 call(loomrt_attention(s, dt, bh, q.getDimSize(2), k.getDimSize(2), q.getDimSize(3), float(o.getScale().convertToDouble()), o.getCausal(), in(o.getQuery()).p(), in(o.getKey()).p(), in(o.getValue()).p(), r.p(), ws.p()), "attention");
        })
        .Case([&](AttentionGradOp o) {
          auto q = o.getQuery().getType(), k = o.getKey().getType();
          int64_t bh = q.getDimSize(0) * q.getDimSize(1);
          Buf dq, dk, dv, ws;
          auto dt = dtOf(o.getQuery());
          return out(o.getGradQuery(), dq) && out(o.getGradKey(), dk) && out(o.getGradValue(), dv) &&
                 scratch(loomrt_attention_workspace_bytes(dt, bh, q.getDimSize(2), k.getDimSize(2), 1), ws) &&
                 call(loomrt_attention_grad(s, dt, bh, q.getDimSize(2), k.getDimSize(2), q.getDimSize(3), float(o.getScale().convertToDouble()), o.getCausal(), in(o.getQuery()).p(), in(o.getKey()).p(), in(o.getValue()).p(), in(o.getGrad()).p(), dq.p(), dk.p(), dv.p(), ws.p()), "attention_grad");
        })
        .Case([&](CrossEntropyOp o) {
          Buf r;
          int64_t c = lastDim(o.getLogits());
          return out(o.getLoss(), r) &&
                 call(loomrt_cross_entropy(s, dtOf(o.getLogits()), in(o.getLogits()).p(), static_cast<const int64_t *>(in(o.getLabels()).p()), static_cast<float *>(r.p()), numel(o.getLabels()), c), "cross_entropy");
        })
        .Case([&](CrossEntropyGradOp o) {
          Buf r;
          int64_t c = lastDim(o.getLogits());
          if (!o.getGrad().getType().getElementType().isF32())
            return fail("the loss gradient must be f32");
          return out(o.getResult(), r) &&
                 call(loomrt_cross_entropy_grad(s, dtOf(o.getLogits()), in(o.getLogits()).p(), static_cast<const int64_t *>(in(o.getLabels()).p()), static_cast<const float *>(in(o.getGrad()).p()), r.p(), numel(o.getLabels()), c), "cross_entropy_grad");
        })
        .Case([&](ReshapeOp o) {
          values[o.getResult()] = Buf{in(o.getInput()).mem, o.getResult().getType()};
          return true;
        })
        .Case([&](TransposeOp o) {
          auto inShape = o.getInput().getType().getShape();
          auto st = rowMajorStrides(inShape);
          std::vector<int64_t> ss;
          for (int64_t p : o.getPerm())
            ss.push_back(st[p]);
          auto outShape = o.getResult().getType().getShape();
          Buf r;
          return out(o.getResult(), r) && strided(in(o.getInput()).p(), ss, r.p(), rowMajorStrides(outShape), outShape, esize(o.getInput()));
        })
        .Case([&](SliceOp o) {
          auto st = rowMajorStrides(o.getInput().getType().getShape());
          int64_t offset = 0;
          std::vector<int64_t> ss;
          for (size_t d = 0; d < st.size(); ++d) {
            offset += o.getStart()[d] * st[d];
            ss.push_back(st[d] * o.getStep()[d]);
          }
          auto outShape = o.getResult().getType().getShape();
          Buf r;
          size_t es = esize(o.getInput());
          return out(o.getResult(), r) &&
                 strided(static_cast<char *>(in(o.getInput()).p()) + offset * es, ss, r.p(), rowMajorStrides(outShape), outShape, es);
        })
        .Case([&](ConcatOp o) {
          auto outType = cast<RankedTensorType>(o.getResult().getType());
          int64_t dim = int64_t(o.getDim());
          if (dim < 0)
            dim += outType.getRank();
          auto ds = rowMajorStrides(outType.getShape());
          Buf r;
          if (!out(o.getResult(), r))
            return false;
          size_t es = esize(o.getResult());
          int64_t offset = 0;
          for (Value v : o.getInputs()) {
            auto sh = cast<RankedTensorType>(v.getType()).getShape();
            if (!strided(in(v).p(), rowMajorStrides(sh), static_cast<char *>(r.p()) + offset * ds[dim] * es, ds, sh, es))
              return false;
            offset += sh[dim];
          }
          return true;
        })
        .Case([&](BroadcastOp o) {
          auto outShape = o.getResult().getType().getShape();
          Buf r;
          return out(o.getResult(), r) &&
                 strided(in(o.getInput()).p(), broadcastInputStrides(o), r.p(),
                         rowMajorStrides(outShape), outShape, esize(o.getInput()));
        })
        .Case([&](ReduceOp o) { return reduce(o); })
        .Case([&](arith::AddIOp o) {
          // Integer scalars (step counters) are added on the host.
          auto t = dyn_cast<RankedTensorType>(o.getType());
          if (!t || !t.getElementType().isInteger(64))
            return fail("arith.addi is supported on i64 tensors only");
          std::vector<int64_t> a(t.getNumElements()), c(t.getNumElements());
          if (!readHost(o.getLhs(), a.data()) || !readHost(o.getRhs(), c.data()))
            return false;
          for (size_t i = 0; i < a.size(); ++i)
            a[i] += c[i];
          Buf r;
          return upload(t, a.data(), r) && (values[o.getResult()] = r, true);
        })
        .Case([&](AdamOp o) {
          if (!o.getParam().getType().getElementType().isF32() ||
              !o.getGrad().getType().getElementType().isF32())
            return fail("loom-run updates fp32 parameters with fp32 gradients");
          int64_t t;
          if (!readHost(o.getStep(), &t))
            return false;
          Buf p, m, v;
          size_t bytes = size_t(numel(o.getParam())) * 4;
          if (!out(o.getNewParam(), p) || !out(o.getNewExpAvg(), m) ||
              !out(o.getNewExpAvgSq(), v) ||
              !call(loomrt_memcpy_async(s, p.p(), in(o.getParam()).p(), bytes), "copy") ||
              !call(loomrt_memcpy_async(s, m.p(), in(o.getExpAvg()).p(), bytes), "copy") ||
              !call(loomrt_memcpy_async(s, v.p(), in(o.getExpAvgSq()).p(), bytes), "copy"))
            return false;
          loomrt_adam_config cfg{float(o.getLr().convertToDouble()),
                                 float(o.getBeta1().convertToDouble()),
                                 float(o.getBeta2().convertToDouble()),
                                 float(o.getEps().convertToDouble()),
                                 float(o.getWeightDecay().convertToDouble()),
                                 o.getDecoupled() ? 1 : 0, t};
          return call(loomrt_adam_f32(s, &cfg, static_cast<float *>(p.p()),
                                      static_cast<const float *>(in(o.getGrad()).p()),
                                      static_cast<float *>(m.p()), static_cast<float *>(v.p()),
                                      size_t(numel(o.getParam()))),
                      "adam");
        })
        .Case([&](SgdOp o) {
          if (!o.getParam().getType().getElementType().isF32())
            return fail("loom-run updates fp32 parameters only");
          Buf p, m;
          size_t bytes = size_t(numel(o.getParam())) * 4;
          return out(o.getNewParam(), p) && out(o.getNewMomentumBuf(), m) &&
                 call(loomrt_memcpy_async(s, p.p(), in(o.getParam()).p(), bytes), "copy") &&
                 call(loomrt_memcpy_async(s, m.p(), in(o.getMomentumBuf()).p(), bytes), "copy") &&
                 call(loomrt_sgd_f32(s, float(o.getLr().convertToDouble()),
                                     float(o.getMomentum().convertToDouble()), o.getNesterov(),
                                     static_cast<float *>(p.p()),
                                     static_cast<const float *>(in(o.getGrad()).p()),
                                     static_cast<float *>(m.p()), size_t(numel(o.getParam()))),
                      "sgd");
        })
        .Default([&](Operation *other) {
          return fail("loom-run does not execute this op");
        });
  }

  /// Copies a (small) value to the host.
  bool readHost(Value v, void *dst) {
    size_t bytes = size_t(numel(v)) * esize(v);
    return call(loomrt_memcpy_async(s, dst, in(v).p(), bytes), "read") &&
           call(loomrt_stream_synchronize(s), "read");
  }

  bool scratch(size_t bytes, Buf &b) {
    auto t = RankedTensorType::get({int64_t((bytes + 3) / 4)}, Float32Type::get(module.getContext()));
    return alloc(t, b);
  }

  bool matmul(MatmulOp o) {
    auto a = o.getLhs().getType(), b = o.getRhs().getType(), c = o.getResult().getType();
    int64_t ra = a.getRank(), rc = c.getRank();
    loomrt_gemm g{};
    g.trans_a = o.getTransposeLhs();
    g.trans_b = o.getTransposeRhs();
    g.m = c.getDimSize(rc - 2);
    g.n = c.getDimSize(rc - 1);
    g.k = a.getDimSize(g.trans_a ? ra - 2 : ra - 1);
    g.batch = c.getNumElements() / (g.m * g.n);
    auto batchOf = [](RankedTensorType t) {
      int64_t n = 1;
      for (int64_t i = 0; i + 2 < t.getRank(); ++i)
        n *= t.getDimSize(i);
      return n;
    };
    // Each operand's batch is the result's or broadcast whole (stride 0).
    int64_t ba = batchOf(a), bb = batchOf(b);
    if ((ba != g.batch && ba != 1) || (bb != g.batch && bb != 1))
      return fail("matmul with partially broadcast batch dimensions");
    g.stride_a = ba == 1 ? 0 : g.m * g.k;
    g.stride_b = bb == 1 ? 0 : g.k * g.n;
    g.stride_c = g.m * g.n;
    g.alpha = 1.0f;
    g.beta = 0.0f;
    g.in = dtOf(o.getLhs());
    g.out = dtOf(o.getResult());
    Buf r;
    return out(o.getResult(), r) && call(loomrt_matmul(s, &g, in(o.getLhs()).p(), in(o.getRhs()).p(), r.p()), "matmul");
  }

  /// One single-dimension reduction per reduced dimension (reduceSteps).
  bool reduce(ReduceOp o) {
    auto type = o.getInput().getType();
    loomrt_reduce_op op = o.getKind() == ReduceKind::sum    ? LOOMRT_REDUCE_SUM
                          : o.getKind() == ReduceKind::mean ? LOOMRT_REDUCE_MEAN
                          : o.getKind() == ReduceKind::max  ? LOOMRT_REDUCE_MAX
                                                            : LOOMRT_REDUCE_MIN;
    Buf cur = in(o.getInput());
    for (const ReduceStep &st : reduceSteps(o)) {
      Buf next;
      if (!alloc(RankedTensorType::get(st.shape, type.getElementType()), next) ||
          !call(loomrt_reduce(s, op, dtOf(o.getInput()), cur.p(), next.p(), st.outer, st.len,
                              st.inner),
                "reduce"))
        return false;
      cur = next;
    }
    values[o.getResult()] = Buf{cur.mem, o.getResult().getType()};
    return true;
  }

  ModuleOp module;
  loomrt_device dev;
  loomrt_stream s;
  std::string error;
  llvm::DenseMap<Value, Buf> values;
  llvm::StringMap<Buf> globals;
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
