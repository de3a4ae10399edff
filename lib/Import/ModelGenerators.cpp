//===- ModelGenerators.cpp - gpt, llama and mlp as loom IR ----------------===//
//
// Each generator emits what exporting the PyTorch reference model gives:
// parameters named as in the PyTorch module (nn.Linear weights stored
// [out, in] and applied with transpose_rhs), their PyTorch initialisers, and
// one function
//   func.func @forward(%inputs, %targets) -> tensor<f32>
// computing the mean cross-entropy loss. GPT follows nanoGPT / GPT-2 (learned
// positions, pre-LayerNorm, tanh GELU, biases, LM head tied to the token
// embedding); Llama follows the Llama architecture (RMSNorm, rotary position
// embeddings in the rotate-half form, SwiGLU MLP, no biases, untied head);
// MLP is a classifier (Linear+GELU layers, cross-entropy against labels);
// sage and gcn are graph models on sampled mini-batches (buildGraph).
//
//===----------------------------------------------------------------------===//
#include "loom/Import.h"

#include "dialects/Loom/LoomOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSwitch.h"

#include <charconv>
#include <cmath>

using namespace mlir;
using namespace mlir::loom;

namespace {

/// Parsed `family:key=value,...` with defaults and validation.
struct Spec {
  std::string family;
  llvm::StringMap<int64_t> values;
  /// Real-valued keys (a mixture of experts' capacity factor and loss
  /// coefficient).
  llvm::StringMap<double> reals;
  /// Graph models: the neighbours sampled per hop, hop 1 (the seeds'
  /// neighbours) first; `layers` of them.
  std::vector<int64_t> fanouts;
};

bool isGraphFamily(StringRef family) { return family == "sage" || family == "gcn"; }

std::string joinFanouts(ArrayRef<int64_t> f) {
  std::string s;
  for (int64_t v : f)
    s += (s.empty() ? "" : "-") + std::to_string(v);
  return s;
}

struct Family {
  const char *name;
  std::vector<std::pair<const char *, int64_t>> keys; // with defaults
  std::vector<std::pair<const char *, double>> reals = {};
};

/// The shortest text that reads back as `v`.
std::string realText(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

const std::vector<Family> &families() {
  static const std::vector<Family> f = {
      {"gpt", {{"layers", 2}, {"d_model", 64}, {"heads", 4}, {"vocab", 256},
               {"seq", 32}, {"batch", 4}}},
      {"llama", {{"layers", 2}, {"d_model", 64}, {"heads", 4}, {"vocab", 256},
                 {"seq", 32}, {"batch", 4}, {"ffn", 0}, {"kv_heads", 0}}},
      // Mixtral: Llama blocks whose MLP is `experts` SwiGLU experts, each
      // token sent to `top_k` of them by a linear router (softmax, top k,
      // renormalised when norm_topk=1). capacity: slots an expert has, as
      // a factor of tokens * top_k / experts (0: every token fits, no
      // drops); aux: the load-balancing loss's coefficient (Switch /
      // Hugging Face's router_aux_loss_coef).
      // shared: the width of a shared expert every token also goes through
      // (Qwen2-MoE's, its output scaled by sigmoid of a linear gate; 0:
      // none); z: the router z-loss's coefficient (ST-MoE: the mean over
      // layers and tokens of logsumexp(router logits)^2; 0: none).
      {"moe",
       {{"layers", 2}, {"d_model", 64}, {"heads", 4}, {"vocab", 256}, {"seq", 32}, {"batch", 4},
        {"ffn", 0}, {"kv_heads", 0}, {"experts", 8}, {"top_k", 2}, {"norm_topk", 1},
        {"shared", 0}},
       {{"capacity", 0.0}, {"aux", 0.001}, {"z", 0.0}}},
      {"mlp", {{"layers", 2}, {"in", 32}, {"hidden", 64}, {"classes", 10},
               {"batch", 16}}},
      // Graph models over a node table of `nodes` rows of `in` features;
      // `fanout` (e.g. 15-10, one number a layer) is parsed apart.
      {"sage", {{"layers", 2}, {"in", 32}, {"hidden", 64}, {"classes", 8},
                {"batch", 64}, {"nodes", 1000}, {"fanout", 0}}},
      {"gcn", {{"layers", 2}, {"in", 32}, {"hidden", 64}, {"classes", 8},
               {"batch", 64}, {"nodes", 1000}, {"fanout", 0}}},
  };
  return f;
}

bool parseSpec(StringRef text, Spec &spec, std::string &error) {
  auto [name, rest] = text.split(':');
  const Family *fam = nullptr;
  for (const Family &f : families())
    if (name == f.name)
      fam = &f;
  if (!fam) {
    error = "unknown model family '" + name.str() +
            "': expected gpt, llama, moe, mlp, sage or gcn (e.g. --model gpt:layers=2,d_model=64)";
    return false;
  }
  spec.family = fam->name;
  for (auto &[k, v] : fam->keys)
    spec.values[k] = v;
  for (auto &[k, v] : fam->reals)
    spec.reals[k] = v;
  SmallVector<StringRef> items;
  rest.split(items, ',', -1, /*KeepEmpty=*/false);
  std::string fanout;
  for (StringRef item : items) {
    auto [key, value] = item.split('=');
    key = key.trim();
    if (key == "fanout" && isGraphFamily(spec.family)) {
      fanout = value.trim().str();
      continue;
    }
    if (spec.reals.count(key)) {
      double r;
      if (value.trim().getAsDouble(r) || !std::isfinite(r) || r < 0)
        return error = "model key '" + key.str() + "' needs a non-negative number, got '" +
                       value.str() + "'",
               false;
      spec.reals[key] = r;
      continue;
    }
    if (!spec.values.count(key)) {
      std::string known;
      for (auto &[k, v] : fam->keys)
        known += (known.empty() ? "" : ", ") + std::string(k);
      for (auto &[k, v] : fam->reals)
        known += ", " + std::string(k);
      error = "model '" + spec.family + "' has no key '" + key.str() +
              "' (keys: " + known + ")";
      return false;
    }
    int64_t n;
    if (value.trim().getAsInteger(10, n) || n < 0) {
      error = "model key '" + key.str() +
              "' needs a non-negative integer, got '" + value.str() + "'";
      return false;
    }
    spec.values[key] = n;
  }
  if (isGraphFamily(spec.family)) {
    // Default fan-outs: 10 for the seeds' neighbours, 5 a hop after that
    // (GraphSAGE's paper samples 25-10; small defaults keep examples quick).
    if (fanout.empty())
      for (int64_t i = 0; i < spec.values["layers"]; ++i)
        fanout += i ? "-5" : "10";
    SmallVector<StringRef> parts;
    StringRef(fanout).split(parts, '-', -1, /*KeepEmpty=*/true);
    for (StringRef part : parts) {
      int64_t n;
      if (part.trim().getAsInteger(10, n) || n < 1 || n > 4096)
        return error = "fanout needs one positive number a layer joined by '-' "
                       "(e.g. fanout=15-10), each at most 4096; got '" + fanout + "'",
               false;
      spec.fanouts.push_back(n);
    }
    spec.values["fanout"] = 1; // parsed above; not a count
    if (int64_t(spec.fanouts.size()) != spec.values["layers"])
      return error = "fanout '" + fanout + "' names " + std::to_string(spec.fanouts.size()) +
                     " hops but the model has layers=" +
                     std::to_string(spec.values["layers"]) + ": give one fan-out a layer",
             false;
  }
  for (auto &[k, v] : fam->keys)
    if (spec.values[k] < 1 &&
        !((spec.family == "llama" || spec.family == "moe") &&
          (StringRef(k) == "ffn" || StringRef(k) == "kv_heads")) &&
        !(spec.family == "moe" && (StringRef(k) == "norm_topk" || StringRef(k) == "shared")))
      return error = "model key '" + std::string(k) + "' must be positive",
             false;
  return true;
}

/// Emits the ops of one model into a module, inferring result types.
class GraphBuilder {
public:
  GraphBuilder(MLIRContext &ctx, ModuleOp module)
      : ctx(ctx), b(&ctx), loc(UnknownLoc::get(&ctx)), module(module),
        f32(Float32Type::get(&ctx)) {}

  RankedTensorType t(ArrayRef<int64_t> shape, Type elt = {}) {
    return RankedTensorType::get(shape, elt ? elt : f32);
  }
  static ArrayRef<int64_t> shape(Value v) {
    return cast<RankedTensorType>(v.getType()).getShape();
  }

  /// Declares a parameter and loads it in the function.
  Value param(StringRef name, ArrayRef<int64_t> shape, InitKind kind,
              double a = 0.0, double bb = 0.0) {
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPoint(func);
      auto init = InitAttr::get(&ctx, kind, APFloat(a), APFloat(bb));
      ParamOp::create(b, loc, b.getStringAttr(name), TypeAttr::get(t(shape)),
                      init, ElementsAttr());
    }
    return LoadOp::create(b, loc, t(shape), FlatSymbolRefAttr::get(&ctx, name));
  }
  Value normal(StringRef name, ArrayRef<int64_t> shape, double std) {
    return param(name, shape, InitKind::normal, 0.0, std);
  }
  Value zeros(StringRef name, ArrayRef<int64_t> shape) {
    return param(name, shape, InitKind::zeros);
  }
  Value ones(StringRef name, ArrayRef<int64_t> shape) {
    return param(name, shape, InitKind::ones);
  }

  /// x [..., in] @ w[out, in]^T (+ bias [out]).
  Value linear(Value x, Value w, Value bias = {}) {
    SmallVector<int64_t> s(shape(x));
    s.back() = shape(w)[0];
    Value y = MatmulOp::create(b, loc, t(s), x, w, false, true);
    return bias ? add(y, bias) : y;
  }
  Value add(Value x, Value y) {
    return AddOp::create(b, loc, x.getType(), x, y);
  }
  Value mul(Value x, Value y) {
    return MulOp::create(b, loc, x.getType(), x, y);
  }
  Value layerNorm(Value x, Value w, Value bias, double eps) {
    return LayerNormOp::create(b, loc, x.getType(), x, w, bias,
                                 b.getF64FloatAttr(eps));
  }
  Value rmsNorm(Value x, Value w, double eps) {
    return RmsNormOp::create(b, loc, x.getType(), x, w, b.getF64FloatAttr(eps));
  }
  Value reshape(Value x, ArrayRef<int64_t> s) {
    return ReshapeOp::create(b, loc, t(s), x);
  }
  Value transpose(Value x, ArrayRef<int64_t> perm) {
    SmallVector<int64_t> s;
    for (int64_t p : perm)
      s.push_back(shape(x)[p]);
    return TransposeOp::create(b, loc, t(s), x, b.getDenseI64ArrayAttr(perm));
  }
  /// x[..., lo:hi] on the last dimension.
  Value sliceLast(Value x, int64_t lo, int64_t hi) {
    SmallVector<int64_t> start(shape(x).size(), 0), limit(shape(x)),
        step(shape(x).size(), 1), s(shape(x));
    start.back() = lo;
    limit.back() = hi;
    s.back() = hi - lo;
    return SliceOp::create(b, loc, t(s), x, b.getDenseI64ArrayAttr(start),
                             b.getDenseI64ArrayAttr(limit),
                             b.getDenseI64ArrayAttr(step));
  }
  /// x[lo:hi] on the first dimension.
  Value sliceFirst(Value x, int64_t lo, int64_t hi) {
    SmallVector<int64_t> start(shape(x).size(), 0), limit(shape(x)),
        step(shape(x).size(), 1), s(shape(x));
    start[0] = lo;
    limit[0] = hi;
    s[0] = hi - lo;
    return SliceOp::create(b, loc, t(s), x, b.getDenseI64ArrayAttr(start),
                             b.getDenseI64ArrayAttr(limit),
                             b.getDenseI64ArrayAttr(step));
  }
  Value constant(ArrayRef<int64_t> s, ArrayRef<float> values) {
    auto type = t(s);
    return arith::ConstantOp::create(
        b, loc, type, DenseElementsAttr::get(type, values));
  }

  /// [B, T, H*Dh] -> [B, H, T, Dh] and back.
  Value splitHeads(Value x, int64_t heads) {
    auto s = shape(x);
    Value r = reshape(x, {s[0], s[1], heads, s[2] / heads});
    return transpose(r, {0, 2, 1, 3});
  }
  /// [B, KV, T, Dh] -> [B, KV * rep, T, Dh], each key/value head serving
  /// `rep` query heads in turn (grouped-query attention, as Hugging Face's
  /// repeat_kv: query head j reads key/value head j / rep).
  Value repeatHeads(Value x, int64_t rep) {
    if (rep == 1)
      return x;
    auto s = shape(x);
    Value r = reshape(x, {s[0], s[1], 1, s[2], s[3]});
    r = BroadcastOp::create(b, loc, t({s[0], s[1], rep, s[2], s[3]}), r);
    return reshape(r, {s[0], s[1] * rep, s[2], s[3]});
  }
  Value mergeHeads(Value x) {
    auto s = shape(x);
    Value r = transpose(x, {0, 2, 1, 3});
    return reshape(r, {s[0], s[2], s[1] * s[3]});
  }
  Value attention(Value q, Value k, Value v) {
    double scale = 1.0 / std::sqrt(double(shape(q)[3]));
    return AttentionOp::create(b, loc, q.getType(), q, k, v, b.getUnitAttr(),
                                 b.getF64FloatAttr(scale));
  }
  Value gelu(Value x, bool tanhForm) {
    return GeluOp::create(b, loc, x.getType(), x, tanhForm);
  }
  Value silu(Value x) { return SiluOp::create(b, loc, x.getType(), x); }
  Value sigmoid(Value x) { return SigmoidOp::create(b, loc, x.getType(), x); }
  Value exp(Value x) { return ExpOp::create(b, loc, x.getType(), x); }
  Value log(Value x) { return LogOp::create(b, loc, x.getType(), x); }
  Value neg(Value x) { return NegOp::create(b, loc, x.getType(), x); }
  Value concatLast(Value x, Value y) {
    SmallVector<int64_t> s(shape(x));
    s.back() += shape(y).back();
    return ConcatOp::create(b, loc, t(s), ValueRange{x, y},
                              b.getI64IntegerAttr(int64_t(s.size()) - 1));
  }
  Value div(Value x, Value y) { return DivOp::create(b, loc, x.getType(), x, y); }
  Value softmaxLast(Value x) {
    return SoftmaxOp::create(b, loc, x.getType(), x,
                             b.getI64IntegerAttr(int64_t(shape(x).size()) - 1), UnitAttr());
  }
  /// Sum or mean over `dims`, kept as size 1 with `keepdim`.
  Value reduce(ReduceKind kind, Value x, ArrayRef<int64_t> dims, bool keepdim) {
    SmallVector<int64_t> s;
    for (auto [i, d] : llvm::enumerate(shape(x)))
      if (!llvm::is_contained(dims, int64_t(i)))
        s.push_back(d);
      else if (keepdim)
        s.push_back(1);
    return ReduceOp::create(b, loc, t(s), kind, x, b.getDenseI64ArrayAttr(dims), keepdim);
  }
  Value concatFirst(ValueRange parts) {
    SmallVector<int64_t> s(shape(parts[0]));
    s[0] = 0;
    for (Value p : parts)
      s[0] += shape(p)[0];
    return ConcatOp::create(b, loc, t(s), parts, b.getI64IntegerAttr(0));
  }
  Value embedding(Value table, Value idx) {
    SmallVector<int64_t> s(shape(idx));
    s.push_back(shape(table)[1]);
    return EmbeddingOp::create(b, loc, t(s), table, idx);
  }
  Value crossEntropy(Value logits, Value labels) {
    return CrossEntropyOp::create(b, loc, t({}), logits, labels);
  }

  /// Records `v` each step in the state @metrics.NAME (f32; the training
  /// binary logs every metrics.* state under "metrics"). `count`: with
  /// micro-batches, their values are summed (loom.metric_sum), not averaged.
  void metric(StringRef name, Value v, bool count = false) {
    std::string sym = ("metrics." + name).str();
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(func);
      auto st = StateOp::create(b, loc, b.getStringAttr(sym), TypeAttr::get(v.getType()),
                                StateRoleAttr::get(&ctx, StateRole::other), FlatSymbolRefAttr(),
                                InitAttr::get(&ctx, InitKind::zeros, APFloat(0.0), APFloat(0.0)));
      if (count)
        st->setAttr(LoomDialect::MetricSumAttrHelper::getNameStr(), b.getUnitAttr());
    }
    StoreOp::create(b, loc, v, sym);
  }

  /// Creates @forward(inputs, targets) -> loss and positions the builder in
  /// its body.
  std::pair<Value, Value> beginForward(RankedTensorType in,
                                       RankedTensorType target) {
    b.setInsertionPointToEnd(module.getBody());
    func = func::FuncOp::create(b, loc, LoomDialect::kForward,
                                b.getFunctionType({in, target}, {t({})}));
    Block *entry = func.addEntryBlock();
    b.setInsertionPointToStart(entry);
    return {entry->getArgument(0), entry->getArgument(1)};
  }
  void endForward(Value loss) { func::ReturnOp::create(b, loc, loss); }

  MLIRContext &ctx;
  OpBuilder b;
  Location loc;
  ModuleOp module;
  Type f32;
  func::FuncOp func;
};

std::string layerName(int64_t i, StringRef rest) {
  return "transformer.h." + std::to_string(i) + "." + rest.str();
}

void buildGpt(GraphBuilder &g, const Spec &s) {
  int64_t L = s.values.lookup("layers"), D = s.values.lookup("d_model"),
          H = s.values.lookup("heads"), V = s.values.lookup("vocab"),
          T = s.values.lookup("seq"), B = s.values.lookup("batch");
  auto i64 = IntegerType::get(&g.ctx, 64);
  auto [tok, tgt] = g.beginForward(g.t({B, T}, i64), g.t({B, T}, i64));
  // GPT-2 initialisation: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)).
  double std = 0.02, projStd = 0.02 / std::sqrt(2.0 * double(L));
  Value wte = g.normal("transformer.wte.weight", {V, D}, std);
  Value wpe = g.normal("transformer.wpe.weight", {T, D}, std);
  Value x = g.add(g.embedding(wte, tok), wpe);
  // Parameters are declared in the order PyTorch's module lists them
  // (weight before bias): one statement each, since the order of evaluation
  // of function arguments is unspecified in C++.
  auto ln = [&](Value in, const std::string &prefix) {
    Value w = g.ones(prefix + ".weight", {D});
    Value bias = g.zeros(prefix + ".bias", {D});
    return g.layerNorm(in, w, bias, 1e-5);
  };
  auto lin = [&](Value in, const std::string &prefix, int64_t out,
                 int64_t inDim, double initStd) {
    Value w = g.normal(prefix + ".weight", {out, inDim}, initStd);
    Value bias = g.zeros(prefix + ".bias", {out});
    return g.linear(in, w, bias);
  };
  for (int64_t i = 0; i < L; ++i) {
    Value h = ln(x, layerName(i, "ln_1"));
    Value qkv = lin(h, layerName(i, "attn.c_attn"), 3 * D, D, std);
    Value q = g.splitHeads(g.sliceLast(qkv, 0, D), H);
    Value k = g.splitHeads(g.sliceLast(qkv, D, 2 * D), H);
    Value v = g.splitHeads(g.sliceLast(qkv, 2 * D, 3 * D), H);
    Value a = g.mergeHeads(g.attention(q, k, v));
    x = g.add(x, lin(a, layerName(i, "attn.c_proj"), D, D, projStd));
    Value h2 = ln(x, layerName(i, "ln_2"));
    Value m = g.gelu(lin(h2, layerName(i, "mlp.c_fc"), 4 * D, D, std),
                     /*tanhForm=*/true);
    x = g.add(x, lin(m, layerName(i, "mlp.c_proj"), D, 4 * D, projStd));
  }
  x = ln(x, "transformer.ln_f");
  // The LM head is the token embedding itself (weight tying): one parameter
  // used twice, whose gradients accumulate.
  g.endForward(g.crossEntropy(g.linear(x, wte), tgt));
}

/// cos and sin tables [T, Dh] of rotary embeddings (theta 10000), in the
/// rotate-half layout: frequency j serves dims j and j + Dh/2.
std::pair<std::vector<float>, std::vector<float>> ropeTables(int64_t T,
                                                             int64_t Dh) {
  std::vector<float> cosT(T * Dh), sinT(T * Dh);
  for (int64_t p = 0; p < T; ++p)
    for (int64_t j = 0; j < Dh / 2; ++j) {
      double freq = std::pow(10000.0, -2.0 * double(j) / double(Dh));
      for (int64_t half : {int64_t(0), Dh / 2}) {
        cosT[p * Dh + j + half] = float(std::cos(p * freq));
        sinT[p * Dh + j + half] = float(std::sin(p * freq));
      }
    }
  return {cosT, sinT};
}

/// The sparse MLP of a mixture-of-experts layer (Hugging Face's
/// MixtralSparseMoeBlock, with GShard's capacity where one is given), and
/// the load-balancing loss over every layer's routing (Hugging Face's
/// load_balancing_loss_func: E * sum_e f_e * P_e, f_e the fraction of
/// choices and P_e the mean router probability of expert e over all
/// layers' tokens; Switch Transformer, Fedus et al. 2021, eq. 4).
struct MoeBlocks {
  GraphBuilder &g;
  int64_t L, D, F, E, K, N, C;
  bool normTopK;
  double auxCoef;
  Value countSum, probSum; // over layers: [E] choices, [E] router probabilities
  Value zSum;              // over layers: the sum of logsumexp(logits)^2
  int64_t FS = 0;          // the shared expert's width (0: none)
  double zCoef = 0;

  MoeBlocks(GraphBuilder &g, const Spec &s, int64_t D, int64_t F, int64_t N)
      : g(g), L(s.values.lookup("layers")), D(D), F(F), E(s.values.lookup("experts")), K(s.values.lookup("top_k")), N(N),
        normTopK(s.values.lookup("norm_topk") != 0), auxCoef(s.reals.lookup("aux")),
        FS(s.values.lookup("shared")), zCoef(s.reals.lookup("z")) {
    double factor = s.reals.lookup("capacity");
    // No factor: an expert can take every token (each token chooses an
    // expert once), so nothing is dropped.
    C = factor > 0 ? std::min<int64_t>(N, std::max<int64_t>(
                                               1, int64_t(std::ceil(factor * double(N * K) /
                                                                    double(E)))))
                   : N;
  }

  static std::string name(int64_t i, StringRef rest) {
    return "model.layers." + std::to_string(i) + ".block_sparse_moe." + rest.str();
  }

  /// h [N, D] -> the experts' weighted outputs [N, D].
  Value layer(int64_t i, Value h) {
    auto i64 = IntegerType::get(&g.ctx, 64);
    Value logits = g.linear(h, g.normal(name(i, "gate.weight"), {E, D}, 0.02));
    // The routing in fp32 under --precision=bf16, as Mixtral's softmax
    // (dtype=torch.float) and top-k: close probabilities keep their order.
    Value probs = fp32(g.softmaxLast(logits));
    auto topk = TopKOp::create(g.b, g.loc, g.t({N, K}), g.t({N, K}, i64), probs,
                               g.b.getI64IntegerAttr(K));
    fp32(topk.getValues());
    Value gates = topk.getValues();
    if (normTopK)
      gates = fp32(g.div(gates, fp32(g.reduce(ReduceKind::sum, gates, {1}, true))));
    auto slots = MoeSlotsOp::create(g.b, g.loc, g.t({N, K}, i64), g.t({E}), topk.getIndices(),
                                    g.b.getI64IntegerAttr(E), g.b.getI64IntegerAttr(C));
    Value buf = MoeDispatchOp::create(g.b, g.loc, g.t({E * C, D}), h, slots.getSlots(), Value());
    SmallVector<Value> outs;
    for (int64_t e = 0; e < E; ++e) {
      Value xe = g.sliceFirst(buf, e * C, (e + 1) * C);
      std::string ex = "experts." + std::to_string(e) + ".";
      outs.push_back(swiglu(i, xe, ex + "w1.weight", ex + "w3.weight", ex + "w2.weight", F));
    }
    Value out = MoeCombineOp::create(g.b, g.loc, g.t({N, D}), g.concatFirst(outs),
                                     slots.getSlots(), gates);
    g.metric(name(i, "expert_tokens"), slots.getCounts(), /*count=*/true);
    if (FS > 0)
      out = g.add(out, sharedExpert(i, h));
    if (zCoef > 0) {
      // logsumexp over the experts, in fp32: the router's logits are
      // small (a linear map of a normalised state), so exp cannot overflow
      // before the sum; the max shift of a general logsumexp is left out.
      Value lse = fp32(g.log(fp32(g.reduce(ReduceKind::sum, fp32(g.exp(fp32(logits))), {1},
                                             false))));
      Value z = fp32(g.reduce(ReduceKind::sum, fp32(g.mul(lse, lse)), {0}, false));
      zSum = zSum ? fp32(g.add(zSum, z)) : z;
    }
    if (!(auxCoef > 0))
      return out;
    Value p = fp32(g.reduce(ReduceKind::sum, probs, {0}, false));
    countSum = countSum ? fp32(g.add(countSum, slots.getCounts())) : slots.getCounts();
    probSum = probSum ? fp32(g.add(probSum, p)) : p;
    return out;
  }

  /// A SwiGLU MLP of width `width` on x [rows, D] under layer i's block:
  /// down(silu(x gate^T) * (x up^T)), its weights (normal, std 0.02)
  /// declared gate, up, down (Hugging Face's order).
  Value swiglu(int64_t i, Value x, const std::string &gate, const std::string &up,
               const std::string &down, int64_t width) {
    Value a = g.linear(x, g.normal(name(i, gate), {width, D}, 0.02));
    Value b = g.linear(x, g.normal(name(i, up), {width, D}, 0.02));
    return g.linear(g.mul(g.silu(a), b), g.normal(name(i, down), {D, width}, 0.02));
  }

  /// Qwen2-MoE's shared expert on h [N, D]: a SwiGLU MLP of width FS
  /// every token goes through, scaled by sigmoid(h . gate) ([N, 1]).
  Value sharedExpert(int64_t i, Value h) {
    Value y = swiglu(i, h, "shared_expert.gate_proj.weight", "shared_expert.up_proj.weight",
                     "shared_expert.down_proj.weight", FS);
    Value gate = g.sigmoid(g.linear(h, g.normal(name(i, "shared_expert_gate.weight"), {1, D}, 0.02)));
    return g.mul(y, BroadcastOp::create(g.b, g.loc, g.t({N, D}), gate));
  }

  /// loss + aux * E * sum_e (counts_e / (L N)) (probs_e / (L N)), and with
  /// a z-loss + z * (sum over layers and tokens of lse^2) / (L N).
  Value withAuxLoss(Value loss) {
    if (zCoef > 0 && zSum) {
      Value z = fp32(g.mul(zSum, g.constant({}, {float(1.0 / (double(L) * double(N)))})));
      g.metric("moe.z_loss", z);
      loss = fp32(g.add(loss, fp32(g.mul(z, g.constant({}, {float(zCoef)})))));
    }
    if (!(auxCoef > 0) || !countSum)
      return loss;
    // In fp32 under --precision=bf16: the loss stays fp32.
    Value total = fp32(g.reduce(ReduceKind::sum, fp32(g.mul(countSum, probSum)), {0}, false));
    double ln = double(L) * double(N);
    Value aux = fp32(g.mul(total, g.constant({}, {float(double(E) / (ln * ln))})));
    g.metric("moe.aux_loss", aux);
    return fp32(g.add(loss, fp32(g.mul(aux, g.constant({}, {float(auxCoef)})))));
  }
  Value fp32(Value v) {
    v.getDefiningOp()->setAttr(LoomDialect::Fp32AttrHelper::getNameStr(), UnitAttr::get(&g.ctx));
    return v;
  }
};

void buildLlama(GraphBuilder &g, const Spec &s) {
  int64_t L = s.values.lookup("layers"), D = s.values.lookup("d_model"),
          H = s.values.lookup("heads"), V = s.values.lookup("vocab"),
          T = s.values.lookup("seq"), B = s.values.lookup("batch"),
          F = s.values.lookup("ffn"), KV = s.values.lookup("kv_heads");
  if (!F) // Llama's rule: 2/3 of 4D, rounded up to a multiple of 64.
    F = (8 * D / 3 + 63) / 64 * 64;
  if (!KV) // multi-head attention; fewer: grouped-query (Llama 2 70B, Llama 3)
    KV = H;
  int64_t Dh = D / H;
  auto i64 = IntegerType::get(&g.ctx, 64);
  auto [tok, tgt] = g.beginForward(g.t({B, T}, i64), g.t({B, T}, i64));
  double std = 0.02;
  std::optional<MoeBlocks> moe;
  if (s.family == "moe")
    moe.emplace(g, s, D, F, B * T);
  auto [cosT, sinT] = ropeTables(T, Dh);
  Value cosV = g.constant({T, Dh}, cosT), sinV = g.constant({T, Dh}, sinT);
  // rotary(x) = x cos + rotate_half(x) sin, rotate_half(x) = [-x2, x1].
  auto rope = [&](Value x) {
    Value x1 = g.sliceLast(x, 0, Dh / 2);
    Value x2 = g.sliceLast(x, Dh / 2, Dh);
    Value rot = g.concatLast(g.neg(x2), x1);
    Value xc = g.mul(x, cosV);
    return g.add(xc, g.mul(rot, sinV));
  };
  auto name = [](int64_t i, StringRef rest) {
    return "model.layers." + std::to_string(i) + "." + rest.str();
  };
  Value x = g.embedding(g.normal("model.embed_tokens.weight", {V, D}, std), tok);
  auto proj = [&](Value in, const std::string &pname, int64_t out,
                  int64_t inDim) {
    return g.linear(in, g.normal(pname, {out, inDim}, std));
  };
  for (int64_t i = 0; i < L; ++i) {
    Value h = g.rmsNorm(x, g.ones(name(i, "input_layernorm.weight"), {D}), 1e-6);
    Value q = g.splitHeads(proj(h, name(i, "self_attn.q_proj.weight"), D, D), H);
    Value k = g.splitHeads(proj(h, name(i, "self_attn.k_proj.weight"), KV * Dh, D), KV);
    Value v = g.splitHeads(proj(h, name(i, "self_attn.v_proj.weight"), KV * Dh, D), KV);
    Value qr = rope(q);
    Value kr = g.repeatHeads(rope(k), H / KV);
    Value a = g.mergeHeads(g.attention(qr, kr, g.repeatHeads(v, H / KV)));
    x = g.add(x, proj(a, name(i, "self_attn.o_proj.weight"), D, D));
    Value h2 = g.rmsNorm(x, g.ones(name(i, "post_attention_layernorm.weight"), {D}), 1e-6);
    if (moe) {
      x = g.add(x, g.reshape(moe->layer(i, g.reshape(h2, {B * T, D})), {B, T, D}));
      continue;
    }
    Value gate = g.silu(proj(h2, name(i, "mlp.gate_proj.weight"), F, D));
    Value up = proj(h2, name(i, "mlp.up_proj.weight"), F, D);
    x = g.add(x, proj(g.mul(gate, up), name(i, "mlp.down_proj.weight"), D, F));
  }
  x = g.rmsNorm(x, g.ones("model.norm.weight", {D}), 1e-6);
  Value logits = proj(x, "lm_head.weight", V, D);
  Value loss = g.crossEntropy(logits, tgt);
  if (moe)
    loss = moe->withAuxLoss(loss);
  g.endForward(loss);
}

void buildMlp(GraphBuilder &g, const Spec &s) {
  int64_t L = s.values.lookup("layers"), In = s.values.lookup("in"),
          Hd = s.values.lookup("hidden"), C = s.values.lookup("classes"),
          B = s.values.lookup("batch");
  auto i64 = IntegerType::get(&g.ctx, 64);
  auto [x, labels] = g.beginForward(g.t({B, In}), g.t({B}, i64));
  int64_t width = In;
  // nn.Linear's default init: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias.
  auto linear = [&](Value v, int64_t i, int64_t out) {
    double bound = 1.0 / std::sqrt(double(width));
    std::string p = "layers." + std::to_string(i) + ".";
    Value w = g.param(p + "weight", {out, width}, InitKind::uniform, -bound, bound);
    Value bias = g.param(p + "bias", {out}, InitKind::uniform, -bound, bound);
    width = out;
    return g.linear(v, w, bias);
  };
  for (int64_t i = 0; i < L; ++i)
    x = g.gelu(linear(x, i, Hd), /*tanhForm=*/false);
  g.endForward(g.crossEntropy(linear(x, L, C), labels));
}

/// GraphSAGE (mean aggregation as PyG's SAGEConv: lin_l with a bias on the
/// neighbours' mean plus lin_r without one on the node itself) or GCN (Kipf
/// and Welling's symmetric normalisation with self loops, PyG's GCNConv:
/// glorot weight, zero bias added after the aggregation) on a sampled
/// mini-batch laid out as a tree so every shape is static: depth 0 holds
/// the B seeds, depth d the N_d = N_{d-1} * fanout_d slots of neighbours
/// sampled for depth d-1 (a node's slots consecutive). The training
/// binary's sampler fills the slots and weights each one (weights<d>,
/// [N_d, 1]): SAGE 1/c_v for each of the c_v neighbours sampled for v and 0
/// for padding; GCN (d_v/c_v) / sqrt((d_v+1)(d_u+1)) with each node's own
/// weight (self<d>) 1/(d_v+1), which is exactly the full graph's (ÂH)_v
/// when all of v's d_v neighbours were taken and an unbiased estimate
/// otherwise. A layer's aggregation is then a weighted sum over each
/// node's slots: mul, reshape [N_d, fanout, width], reduce over the slots.
void buildGraph(GraphBuilder &g, const Spec &s) {
  int64_t L = s.values.lookup("layers"), F = s.values.lookup("in"),
          Hd = s.values.lookup("hidden"), C = s.values.lookup("classes"),
          B = s.values.lookup("batch"), Nn = s.values.lookup("nodes");
  bool gcn = s.family == "gcn";
  auto i64 = IntegerType::get(&g.ctx, 64);
  SmallVector<int64_t> count{B};
  for (int64_t f : s.fanouts)
    count.push_back(count.back() * f);
  // @forward(features, nodes0..L, weights1..L, [self0..L-1], labels).
  SmallVector<Type> ins{g.t({Nn, F})};
  for (int64_t d = 0; d <= L; ++d)
    ins.push_back(g.t({count[d]}, i64));
  for (int64_t d = 1; d <= L; ++d)
    ins.push_back(g.t({count[d], 1}));
  if (gcn)
    for (int64_t d = 0; d < L; ++d)
      ins.push_back(g.t({count[d], 1}));
  ins.push_back(g.t({B}, i64));
  g.b.setInsertionPointToEnd(g.module.getBody());
  g.func =
      func::FuncOp::create(g.b, g.loc, LoomDialect::kForward, g.b.getFunctionType(ins, {g.t({})}));
  Block *entry = g.func.addEntryBlock();
  g.b.setInsertionPointToStart(entry);
  auto arg = [&](int64_t i) -> Value { return entry->getArgument(i); };
  Value features = arg(0);
  auto nodes = [&](int64_t d) { return arg(1 + d); };
  auto weights = [&](int64_t d) { return arg(1 + L + d); }; // d >= 1
  auto self = [&](int64_t d) { return arg(2 + 2 * L + d); }; // gcn only
  Value labels = arg(int64_t(ins.size()) - 1);

  SmallVector<Value> h;
  for (int64_t d = 0; d <= L; ++d)
    h.push_back(g.embedding(features, nodes(d)));
  int64_t width = F;
  for (int64_t k = 1; k <= L; ++k) {
    int64_t out = k == L ? C : Hd;
    std::string p = "convs." + std::to_string(k - 1) + ".";
    Value wl, bl, wr;
    if (gcn) {
      double bound = std::sqrt(6.0 / double(width + out)); // glorot
      wl = g.param(p + "lin.weight", {out, width}, InitKind::uniform, -bound, bound);
      bl = g.zeros(p + "bias", {out});
    } else {
      double bound = 1.0 / std::sqrt(double(width)); // torch.nn.Linear's
      wl = g.param(p + "lin_l.weight", {out, width}, InitKind::uniform, -bound, bound);
      bl = g.param(p + "lin_l.bias", {out}, InitKind::uniform, -bound, bound);
      wr = g.param(p + "lin_r.weight", {out, width}, InitKind::uniform, -bound, bound);
    }
    SmallVector<Value> next;
    for (int64_t d = 0; d + k <= L; ++d) {
      Value slots = g.reshape(g.mul(h[d + 1], weights(d + 1)),
                              {count[d], s.fanouts[d], width});
      Value agg = ReduceOp::create(g.b, g.loc, g.t({count[d], width}), ReduceKind::sum, slots,
                                   g.b.getDenseI64ArrayAttr({1}), false);
      Value y = gcn ? g.linear(g.add(g.mul(h[d], self(d)), agg), wl, bl)
                    : g.add(g.linear(agg, wl, bl), g.linear(h[d], wr));
      next.push_back(k < L ? Value(ReluOp::create(g.b, g.loc, y.getType(), y)) : y);
    }
    h = next;
    width = out;
  }
  g.endForward(g.crossEntropy(h[0], labels));
}

/// The names of a graph model's inputs, in @forward's order.
SmallVector<std::string> graphInputNames(const Spec &s) {
  int64_t L = s.values.lookup("layers");
  SmallVector<std::string> names{"features"};
  for (int64_t d = 0; d <= L; ++d)
    names.push_back("nodes" + std::to_string(d));
  for (int64_t d = 1; d <= L; ++d)
    names.push_back("weights" + std::to_string(d));
  if (s.family == "gcn")
    for (int64_t d = 0; d < L; ++d)
      names.push_back("self" + std::to_string(d));
  names.push_back("labels");
  return names;
}

} // namespace

namespace loom {
OwningOpRef<ModuleOp> generateModel(MLIRContext &ctx, StringRef text,
                                    std::string &error) {
  Spec spec;
  if (!parseSpec(text, spec, error))
    return {};
  // The largest tensors each family builds must have a representable size
  // (a d_model of 2^32 made every shape computation overflow).
  auto v = [&](const char *k) { return spec.values.lookup(k); };
  bool graph = isGraphFamily(spec.family);
  std::vector<int64_t> sampled{v("batch")}; // the deepest hop's slots
  for (int64_t f : spec.fanouts)
    sampled.push_back(f);
  std::vector<std::vector<int64_t>> largest =
      graph ? std::vector<std::vector<int64_t>>{{v("nodes"), v("in")},
                                                 sampled,
                                                 {v("in"), v("hidden")},
                                                 {v("hidden"), v("hidden")},
                                                 {v("hidden"), v("classes")}}
      : spec.family == "mlp"
          ? std::vector<std::vector<int64_t>>{{v("batch"), v("in")}, {v("in"), v("hidden")},
                                              {v("hidden"), v("hidden")},
                                              {v("batch"), v("hidden")},
                                              {v("hidden"), v("classes")},
                                              {v("batch"), v("classes")}}
          : std::vector<std::vector<int64_t>>{
                {v("vocab"), v("d_model")}, {v("batch"), v("seq"), v("vocab")},
                {v("batch"), v("heads"), v("seq"), v("seq")}, {v("batch"), v("seq"), v("d_model"), 4},
                {v("d_model"), v("d_model"), 4}, {v("d_model"), std::max<int64_t>(v("ffn"), 1), 3},
                {v("layers"), v("d_model"), v("d_model"), 12},
                // a mixture's experts: each its own FFN, and its dropless buffers
                {std::max<int64_t>(v("experts"), 1), v("d_model"), std::max<int64_t>(v("ffn"), 1), 3},
                {std::max<int64_t>(v("experts"), 1), v("batch"), v("seq"), v("d_model")}};
  for (const auto &dims : largest) {
    int64_t n = 1;
    std::string shape;
    for (int64_t d : dims) {
      shape += (shape.empty() ? "" : " x ") + std::to_string(d);
      if (__builtin_mul_overflow(n, d, &n) || n > (int64_t(1) << 40))
        n = -1;
    }
    if (n < 0)
      return error = "model '" + text.str() + "' is too large: it needs " + shape +
                     " elements, more than 2^40",
             nullptr;
  }
  if (graph) {
    // The deepest hop's slots times the widest layer's width.
    std::vector<int64_t> rows = sampled;
    rows.push_back(std::max({v("in"), v("hidden"), v("classes")}));
    int64_t n = 1;
    for (int64_t d : rows)
      if (__builtin_mul_overflow(n, d, &n) || n > (int64_t(1) << 40))
        return error = "model '" + text.str() + "' samples too many nodes: batch " +
                       std::to_string(v("batch")) + " times the fan-outs " +
                       joinFanouts(spec.fanouts) + " times the layer width is more than 2^40",
               nullptr;
  }
  // (DeepSeek-V3 routes over 256 experts; each expert is ops and
  // parameters of its own, so a thousand is where a typo starts.)
  if (spec.family == "moe" && v("experts") > 1024)
    return error = "experts (" + std::to_string(v("experts")) + ") must be at most 1024",
           nullptr;
  if (spec.family == "moe" && v("top_k") > v("experts"))
    return error = "top_k (" + std::to_string(v("top_k")) + ") must be at most experts (" +
                   std::to_string(v("experts")) + ")",
           nullptr;
  if (spec.family == "gpt" || spec.family == "llama" || spec.family == "moe") {
    int64_t D = spec.values["d_model"], H = spec.values["heads"];
    if (D % H)
      return error = "d_model (" + std::to_string(D) +
                     ") must divide by heads (" + std::to_string(H) + ")",
             nullptr;
    if (spec.family != "gpt" && (D / H) % 2)
      return error = "llama's rotary embeddings need an even head dimension, "
                     "d_model/heads is " + std::to_string(D / H),
             nullptr;
    int64_t KV = spec.family != "gpt" ? spec.values["kv_heads"] : 0;
    if (KV && (KV > H || H % KV))
      return error = "heads (" + std::to_string(H) + ") must be a multiple of kv_heads (" +
                     std::to_string(KV) + ")",
             nullptr;
  }
  ctx.loadDialect<LoomDialect, func::FuncDialect, arith::ArithDialect>();
  OwningOpRef<ModuleOp> module = ModuleOp::create(UnknownLoc::get(&ctx));
  (*module)->setAttr(LoomDialect::ModelAttrHelper::getNameStr(), StringAttr::get(&ctx, text));
  bool lm = spec.family == "gpt" || spec.family == "llama" || spec.family == "moe";
  SmallVector<Attribute> names;
  if (graph) {
    for (const std::string &n : graphInputNames(spec))
      names.push_back(StringAttr::get(&ctx, n));
    (*module)->setAttr(LoomDialect::GraphAttrHelper::getNameStr(),
                       GraphAttr::get(&ctx, spec.fanouts,
                                      spec.family == "gcn" ? GraphNorm::gcn : GraphNorm::mean,
                                      std::nullopt));
  } else {
    names = {StringAttr::get(&ctx, lm ? "tokens" : "x"),
             StringAttr::get(&ctx, lm ? "targets" : "labels")};
  }
  (*module)->setAttr(LoomDialect::InputNamesAttrHelper::getNameStr(),
                     ArrayAttr::get(&ctx, names));
  GraphBuilder g(ctx, *module);
  if (spec.family == "gpt")
    buildGpt(g, spec);
  else if (spec.family == "llama" || spec.family == "moe")
    buildLlama(g, spec);
  else if (graph)
    buildGraph(g, spec);
  else
    buildMlp(g, spec);
  if (failed(verify(*module))) {
    error = "internal error: the generated " + spec.family +
            " model does not verify";
    return {};
  }
  return module;
}

bool splitSpecBatch(std::string &text, int64_t ranks, std::string &error,
                    int64_t microBatches) {
  Spec spec;
  if (!parseSpec(text, spec, error))
    return false;
  int64_t batch = spec.values.lookup("batch");
  if (ranks < 1 || batch % ranks)
    return error = "the global batch " + std::to_string(batch) +
                   " does not divide over " + std::to_string(ranks) + " ranks",
           false;
  if (microBatches < 1 || (batch / ranks) % microBatches)
    return error = "--micro-batches=" + std::to_string(microBatches) + ": each rank's batch " +
                   std::to_string(batch / ranks) + " does not divide into " +
                   std::to_string(microBatches) + " micro-batches",
           false;
  ranks *= microBatches; // the generator builds one micro-batch
  // Rebuild the spec in the family's key order with the per-rank batch.
  std::string out = spec.family + ":";
  for (const Family &f : families())
    if (spec.family == f.name)
      for (auto [i, kv] : llvm::enumerate(f.keys))
        out += (i ? "," : "") + std::string(kv.first) + "=" +
               (kv.first == StringRef("fanout")
                    ? joinFanouts(spec.fanouts)
                    : std::to_string(kv.first == StringRef("batch")
                                         ? batch / ranks
                                         : spec.values.lookup(kv.first)));
  for (const Family &f : families())
    if (spec.family == f.name)
      for (auto &kv : f.reals)
        out += "," + std::string(kv.first) + "=" + realText(spec.reals.lookup(kv.first));
  text = out;
  return true;
}

std::string modelSpecHelp() {
  std::string s;
  for (const Family &f : families()) {
    std::vector<std::string> items;
    for (auto &kv : f.keys)
      items.push_back(std::string(kv.first) + "=" +
                      (kv.first == StringRef("fanout") ? std::string("10-5")
                                                       : std::to_string(kv.second)));
    for (auto &kv : f.reals)
      items.push_back(std::string(kv.first) + "=" + realText(kv.second));
    // Wrapped to fit the help's 100 columns (it indents these lines by 8).
    std::string line = "  " + std::string(f.name) + ":";
    for (auto [i, item] : llvm::enumerate(items)) {
      if (line.size() + item.size() + 1 > 88) {
        s += line + "\n";
        line = "    ";
      }
      line += item + (i + 1 < items.size() ? "," : "");
    }
    s += line + "\n";
  }
  return s;
}
} // namespace loom
