//===- Merged.cpp - initializers the exporter merged, split again --------===//
//
// PyTorch's dynamo exporter (torch.onnx.export(..., dynamo=True), optimize
// on by default) keeps one initializer of each set with equal contents. A
// freshly initialised model has many: every norm's weight is ones, every
// bias zeros. The file then says the model has one `ln_1.weight` read by
// all its layer norms, and trained so, every layer's norm gets the sum of
// their gradients and one Adam state: the forward is PyTorch's, the second
// step is not (issue 45: GPT-2, GPT-BigCode, GPT-Neo, DistilBERT and
// Starcoder2 from their configs drifted by 1e-4..4e-3 in 5 steps).
//
// Each node the exporter wrote still names, in its FX source line
// (pkg.torch.onnx.fx_node), the parameter PyTorch read there: "%layer_norm
// = ...layer_norm(%x, [96], %p_m_h_1_ln_1_weight, %p_m_h_1_ln_1_bias,...)".
// A use of initializer `m.h.0.ln_1.weight` by a node whose line reads
// `%p_m_h_1_ln_1_weight` (and not the initializer's own placeholder) is
// that other parameter's use: it gets a parameter of its own, with the
// same values, named by the node's module scope (pkg.torch.onnx.
// name_scopes: "m.h.1.ln_1" + "weight"). A use is attributed only when
// exactly one placeholder of the line ends as the initializer's own name
// does ("_weight", "_bias"); other uses stay with the initializer.
//
//===----------------------------------------------------------------------===//
#include "lib/Import/Onnx/Importer.h"

namespace loom::onnximport {

namespace {

/// `a.B.c` as torch.export names its placeholder: `p_a_b_c` (lower case).
std::string placeholderOf(StringRef name) {
  std::string p = "p_" + name.lower();
  std::replace(p.begin(), p.end(), '.', '_');
  return p;
}

/// The placeholders (`%p_...`) an FX node's printed line reads.
SmallVector<std::string> placeholdersIn(StringRef fx) {
  SmallVector<std::string> out;
  // The line is "%out : [...] = call_function[target=...](args = (...), ...)":
  // only the arguments, not the output's own name.
  size_t args = fx.find("args = (");
  if (args == StringRef::npos)
    return out;
  fx = fx.drop_front(args);
  while (true) {
    size_t at = fx.find("%p_");
    if (at == StringRef::npos)
      break;
    fx = fx.drop_front(at + 1);
    StringRef id = fx.take_while([](char c) { return isalnum(c) || c == '_'; });
    out.push_back(id.str());
    fx = fx.drop_front(id.size());
  }
  return out;
}

/// The dotted parameter name of placeholder `ph` read by node `n`: its
/// innermost module scope whose placeholder prefix it is, plus the rest
/// ("m.h.1.LayerNorm" + "." + "weight"), the rest in the case of the
/// initializer `init`'s last part where the two agree ("A_log"); "" when
/// no scope fits.
std::string dottedName(const std::map<std::string, std::string> &meta, StringRef ph,
                       StringRef init) {
  auto it = meta.find("pkg.torch.onnx.name_scopes");
  if (it == meta.end())
    return "";
  std::vector<std::string> scopes = foldedFrom(it->second);
  for (const std::string &s : llvm::reverse(scopes)) {
    if (s.empty())
      continue;
    std::string prefix = placeholderOf(s) + "_";
    if (!ph.starts_with(prefix) || ph.size() <= prefix.size())
      continue;
    StringRef rest = ph.drop_front(prefix.size()), last = init.substr(init.rfind('.') + 1);
    return s + "." + (rest.equals_insensitive(last) ? last : rest).str();
  }
  return "";
}

} // namespace

void Importer::splitMerged(const onnx::GraphProto &g, llvm::DenseMap<int, onnx::NodeProto> &patched) {
  // Per trained initializer: the uses (node, input) and who reads there.
  struct Use {
    int node, input;
    std::string owner, name; // placeholder, dotted name ("" if unknown)
  };
  llvm::StringMap<std::vector<Use>> uses;
  for (int k = 0; k < g.node_size(); ++k) {
    const onnx::NodeProto &n = g.node(k);
    std::map<std::string, std::string> meta;
    SmallVector<std::string> phs;
    for (int i = 0; i < n.input_size(); ++i) {
      StringRef in = n.input(i);
      size_t dot = in.rfind('.');
      if (!paramNames.contains(in) || dot == StringRef::npos)
        continue;
      if (meta.empty()) {
        meta = unknownMetadata(n, 9);
        auto fx = meta.find("pkg.torch.onnx.fx_node");
        if (fx == meta.end())
          break; // not PyTorch's dynamo exporter: nothing to go by
        phs = placeholdersIn(fx->second);
      }
      std::string own = placeholderOf(in), suffix = "_" + in.drop_front(dot + 1).lower();
      Use u{k, i, "", ""};
      if (llvm::is_contained(phs, own)) {
        u.owner = own;
      } else {
        SmallVector<StringRef> cands;
        for (const std::string &p : phs)
          if (StringRef(p).ends_with(suffix) && !llvm::is_contained(cands, p))
            cands.push_back(p);
        if (cands.size() == 1) {
          u.owner = cands[0].str();
          u.name = dottedName(meta, cands[0], in);
        }
      }
      uses[in].push_back(u);
    }
  }
  size_t merged = 0, made = 0;
  for (auto &[init, list] : uses) {
    std::string own = placeholderOf(init);
    // A new parameter for each reader other than the initializer's own
    // (and other than an unknown one, which stays with it).
    llvm::StringMap<std::string> newName;
    for (const Use &u : list)
      if (!u.owner.empty() && u.owner != own && !u.name.empty() &&
          !paramNames.contains(u.name) && !module->lookupSymbol(u.name) &&
          !newName.count(u.owner))
        newName[u.owner] = u.name;
    if (newName.empty())
      continue;
    ++merged;
    auto kept = module->lookupSymbol<ParamOp>(init);
    for (auto &[owner, name] : newName) {
      // The same values (or, with --init=random, the same initialiser).
      ParamOp::create(b, loc, b.getStringAttr(name), kept.getTypeAttr(), kept.getInitAttr(),
                      kept.getValueAttr());
      paramValues.push_back({name, cast<RankedTensorType>(kept.getType())});
      paramNames.insert(name);
      ++made;
    }
    for (const Use &u : list) {
      auto it = newName.find(u.owner);
      if (it == newName.end())
        continue;
      auto p = patched.try_emplace(u.node, g.node(u.node)).first;
      p->second.set_input(u.input, it->second);
    }
  }
  if (merged)
    llvm::errs() << "loomc: note: " << merged
                 << " initializer(s) were merged by the exporter's optimizer (equal values, "
                    "as a fresh model's norm weights and biases are); split again into the "
                 << made << " further parameter(s) PyTorch trains apart, from the nodes' "
                    "pkg.torch.onnx.fx_node lines\n";
}

std::vector<std::string> Importer::removedParams(const onnx::ModelProto &model,
                                                const llvm::StringSet<> &inits) {
  // The exporter records the module's signature: a line per input, as
  // "p_m_h_0_ln_1_bias: PARAMETER target='m.h.0.ln_1.bias'".
  // (GraphProto's metadata_props, field 16: newer than Debian's onnx.proto.)
  std::map<std::string, std::string> meta = unknownMetadata(model.graph(), 16);
  for (const onnx::StringStringEntryProto &e : model.metadata_props())
    meta[e.key()] = e.value();
  std::string sig = meta["pkg.torch.export.ExportedProgram.graph_signature"];
  if (sig.empty())
    return {};
  // What the file still has of each parameter: an initializer, a parameter
  // loomc made (a split), or a tensor folded from it.
  llvm::StringSet<> held;
  for (const auto &k : inits)
    held.insert(k.getKey());
  for (const auto &k : paramNames)
    held.insert(k.getKey());
  for (const std::string &s : foldedSources)
    held.insert(s);
  // A tied parameter is held under the other name: a node whose FX line
  // reads placeholder P (p_m_wte_weight) but whose ONNX inputs give an
  // initializer of another placeholder (m.lm_head.weight), ending alike,
  // holds P's tensor. (A removed bias is not: its node's weight is read
  // under its own placeholder.)
  // A placeholder no FX line reads (the second name of a tied parameter,
  // which the graph reads under the first) is not a removal either.
  llvm::StringSet<> heldPh, readPh;
  for (const onnx::NodeProto &n : model.graph().node()) {
    auto meta = unknownMetadata(n, 9);
    auto fx = meta.find("pkg.torch.onnx.fx_node");
    if (fx == meta.end())
      continue;
    SmallVector<std::string> phs = placeholdersIn(fx->second);
    for (const std::string &p : phs)
      readPh.insert(p);
    for (const std::string &in : n.input()) {
      size_t dot = in.rfind('.');
      if (!inits.contains(in) || dot == std::string::npos || llvm::is_contained(phs, placeholderOf(in)))
        continue;
      std::string suffix = "_" + StringRef(in).drop_front(dot + 1).lower();
      for (const std::string &p : phs)
        if (StringRef(p).ends_with(suffix))
          heldPh.insert(p);
    }
  }
  SmallVector<std::string> gone;
  StringRef rest = sig;
  while (!rest.empty()) {
    auto [line, next] = rest.split('\n');
    rest = next;
    size_t at = line.find(": PARAMETER target='");
    if (at == StringRef::npos)
      continue;
    StringRef target = line.drop_front(at + 20).take_until([](char c) { return c == '\''; });
    std::string ph = placeholderOf(target);
    if (!held.contains(target) && !heldPh.contains(ph) && readPh.contains(ph))
      gone.push_back(target.str());
  }
  return std::vector<std::string>(gone.begin(), gone.end());
}

void Importer::planBiasRestores(const onnx::GraphProto &g, ArrayRef<std::string> removed) {
  // The last node carrying an addmm's or a linear's FX line makes its
  // result: the bias goes after it.
  llvm::StringMap<std::string> byPh;
  for (const std::string &r : removed)
    byPh[placeholderOf(r)] = r;
  llvm::StringMap<int> last;
  llvm::StringMap<std::string> biasOf;
  for (int k = 0; k < g.node_size(); ++k) {
    auto meta = unknownMetadata(g.node(k), 9);
    auto fx = meta.find("pkg.torch.onnx.fx_node");
    if (fx == meta.end())
      continue;
    StringRef line = fx->second;
    bool addmm = line.contains("aten.addmm.default]("), linear = line.contains("aten.linear.default](");
    if (!addmm && !linear)
      continue;
    SmallVector<std::string> phs = placeholdersIn(line);
    // addmm(bias, x, w) reads the bias first; linear(x, w, bias) last.
    if (phs.empty())
      continue;
    const std::string &bias = addmm ? phs.front() : phs.back();
    if (!byPh.count(bias) || (linear && phs.size() < 2))
      continue;
    last[line] = k;
    biasOf[line] = byPh[bias];
  }
  for (auto &[line, k] : last)
    biasRestores[k] = biasOf[line];
}

bool Importer::restoreBias(const onnx::NodeProto &n, const std::string &name) {
  auto it = values.find(n.output(0));
  if (it == values.end() || !it->second.v)
    return true; // nothing computed on the device: left as it is
  Value y = it->second.v;
  auto yt = tt(y);
  if (yt.getRank() < 1 || !isa<FloatType>(yt.getElementType()))
    return true;
  auto bt = RankedTensorType::get({yt.getShape().back()}, yt.getElementType());
  // A bias two nodes read (or a name the file already uses) is declared once.
  if (auto existing = module->lookupSymbol<ParamOp>(name)) {
    if (existing.getType() != bt)
      return fail("node '" + n.name() + "': the removed bias '" + name +
                  "' is read with two shapes");
  } else if (module->lookupSymbol(name)) {
    return fail("node '" + n.name() + "': the removed bias '" + name +
                "' has the name of another symbol");
  } else {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(*module->getOps<func::FuncOp>().begin());
    std::vector<float> zeros(static_cast<size_t>(bt.getNumElements()), 0.0f);
    ParamOp::create(b, loc, b.getStringAttr(name), TypeAttr::get(bt), InitAttr(),
                    DenseElementsAttr::get(bt, ArrayRef<float>(zeros)));
    paramValues.push_back({name, bt});
    paramNames.insert(name);
  }
  Value bias = LoadOp::create(b, loc, bt, FlatSymbolRefAttr::get(&ctx, name));
  values[n.output(0)] = Val{AddOp::create(b, loc, yt, y, bias)};
  return true;
}

void Importer::warnRemoved(ArrayRef<std::string> removed) {
  SmallVector<std::string> gone;
  for (const std::string &r : removed)
    if (!paramNames.contains(r))
      gone.push_back(r);
  if (size_t restored = removed.size() - gone.size())
    llvm::errs() << "loomc: note: " << restored
                 << " zero bias(es) the exporter's optimizer removed (x + 0 is x) added back "
                    "as trained parameters after their addmm or linear, from its FX lines\n";
  if (gone.empty())
    return;
  llvm::errs() << "loomc: warning: " << gone.size()
               << " parameter(s) of the module are not in the file (" << gone.front()
               << (gone.size() > 1 ? ", ..." : "")
               << "): the exporter's optimizer removed them (a zero bias added is a no-op) "
                  "or folded them into other tensors (a batch norm into its convolution); "
                  "they are not trained here and are in PyTorch. Export with "
                  "torch.onnx.export(..., optimize=False) to keep them\n";
}

} // namespace loom::onnximport
