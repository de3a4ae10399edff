//===- Importer.cpp - ONNX models into loom IR ---------------------------===//
//
// The model: its opset, initializers (external data included), the graph
// walked node by node (each checked against its row of the operator table,
// folded or converted) and the loss; and the public entry points
// (loom/Import.h).
//
//===----------------------------------------------------------------------===//
#include "lib/Import/Onnx/Importer.h"

namespace loom::onnximport {

void Importer::frozenByExporter(const onnx::GraphProto &g, llvm::StringSet<> &frozenSet) {
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
    foldedSources.insert(foldedSources.end(), sources.begin(), sources.end());
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

}

bool Importer::readInitializers(const onnx::GraphProto &g, ArrayRef<std::string> frozen,
                                const llvm::StringSet<> &frozenSet, llvm::StringSet<> &inits) {
  for (const onnx::TensorProto &t : g.initializer()) {
    if (t.name().empty() || !inits.insert(t.name()).second)
      return fail("initializer '" + t.name() + "' is " +
                  (t.name().empty() ? "unnamed" : "defined twice")),
             false;
    if (!initializer(t, /*asConstant=*/frozenSet.contains(t.name())))
      return false;
  }
  for (const std::string &f : frozen)
    if (!inits.contains(f))
      return fail("--frozen names '" + f + "', which is not an initializer of the model"),
             false;
  return true;
}

OwningOpRef<ModuleOp> Importer::run(const onnx::ModelProto &model, StringRef path,
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
  frozenByExporter(g, frozenSet);
  if (!readInitializers(g, frozen, frozenSet, inits))
    return nullptr;
  llvm::DenseMap<int, onnx::NodeProto> patched;
  splitMerged(g, patched);
  std::vector<std::string> removed = removedParams(model, inits);
  planBiasRestores(g, removed);
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
  loadParams();
  for (int k = 0; k < g.node_size(); ++k) {
    auto it = patched.find(k);
    const onnx::NodeProto &node = it == patched.end() ? g.node(k) : it->second;
    if (!convert(node))
      return nullptr;
    if (auto r = biasRestores.find(k); r != biasRestores.end() && !restoreBias(node, r->second))
      return nullptr;
  }
  loc = fileLoc; // the loss is the importer's, not a node's
  warnRemoved(removed);

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

void Importer::loadParams() {
  llvm::StringMap<std::string> tiedTo = retieTransposes(*module);
  llvm::StringMap<RankedTensorType> tiles = retieTiles(*module);
  // Computed by the exporter from a module tensor, and not a transposed
  // copy or a tile re-tied above: trained as a tensor of its own. Said,
  // not silently trained.
  llvm::erase_if(foldedFromParams,
                 [&](auto &f) { return tiedTo.count(f.first) > 0 || tiles.count(f.first) > 0; });
  if (!foldedFromParams.empty())
    llvm::errs() << "loomc: warning: " << foldedFromParams.size()
                 << " initializer(s) were computed by the exporter's optimizer from module "
                    "tensors and will be trained as they are ("
                 << foldedFromParams.front().first << " from " << foldedFromParams.front().second
                 << (foldedFromParams.size() > 1 ? ", ..." : "")
                 << "): pass the ones computed from buffers to --frozen (rotary tables), and "
                    "export with torch.onnx.export(..., optimize=False) to train parameters "
                    "as PyTorch does\n";
  for (auto &[name, value] : paramValues) {
    if (tiedTo.count(name))
      continue;
    bool tile = tiles.count(name);
    SmallVector<int64_t> one(value.getShape());
    if (tile)
      one[0] = 1; // the copy declared, broadcast to what the uses read
    Value v = LoadOp::create(b, loc, RankedTensorType::get(one, value.getElementType()),
                             FlatSymbolRefAttr::get(&ctx, name));
    values[name] = Val{tile ? Value(BroadcastOp::create(b, loc, value, v)) : v};
  }
  for (auto &[name, value] : paramValues)
    if (auto it = tiedTo.find(name); it != tiedTo.end())
      values[name] = Val{TransposeOp::create(b, loc, value, values[it->second].v,
                                             b.getDenseI64ArrayAttr({1, 0}))};
}

bool Importer::fail(const std::string &msg) {
  error = msg;
  return false;
}

bool Importer::nodeFail(const onnx::NodeProto &n, const std::string &msg) {
  return fail("node '" + n.name() + "' (" + n.op_type() + "): " + msg + pytorchSource(n));
}

std::string Importer::typeStr(Type t) {
  std::string out;
  llvm::raw_string_ostream os(out);
  os << t;
  return out;
}

std::string Importer::shapeStr(ArrayRef<int64_t> s) {
  std::string r = "[";
  for (auto [i, d] : llvm::enumerate(s))
    r += (i ? ", " : "") + std::to_string(d);
  return r + "]";
}

bool Importer::valueType(const onnx::ValueInfoProto &v, RankedTensorType &out) {
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

bool Importer::readExternal(onnx::TensorProto &t) {
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

size_t Importer::elementBytes(int type) {
  switch (type) {
  case onnx::TensorProto::FLOAT: return 4;
  case onnx::TensorProto::INT64: return 8;
  case onnx::TensorProto::BOOL: return 1;
  default: return 0;
  }
}

int64_t Importer::typedCount(const onnx::TensorProto &t) {
  return t.data_type() == onnx::TensorProto::INT64  ? t.int64_data_size()
         : t.data_type() == onnx::TensorProto::BOOL ? t.int32_data_size()
                                                    : t.float_data_size();
}

bool Importer::holds(const onnx::TensorProto &t, int64_t n) {
  return t.raw_data().empty() ? typedCount(t) == n
                              : t.raw_data().size() == size_t(n) * elementBytes(t.data_type());
}

double Importer::elementAt(const onnx::TensorProto &t, int64_t i) {
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

bool Importer::initializer(const onnx::TensorProto &t, bool asConstant) {
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
    paramNames.insert(t.name());
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
  paramNames.insert(name);
  return true;
}

llvm::StringMap<std::string> Importer::retieTransposes(ModuleOp module) {
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

llvm::StringMap<RankedTensorType> Importer::retieTiles(ModuleOp module) {
  llvm::StringMap<RankedTensorType> tiles;
  llvm::StringSet<> folded;
  for (auto &f : foldedFromParams)
    folded.insert(f.first);
  SmallVector<ParamOp> gone;
  for (ParamOp p : module.getOps<ParamOp>()) {
    auto v = dyn_cast_or_null<DenseElementsAttr>(p.getValueAttr());
    auto t = p.getType();
    if (!v || !folded.contains(p.getSymName()) || t.getRank() < 2 || t.getDimSize(0) < 2)
      continue;
    int64_t row = t.getNumElements() / t.getDimSize(0);
    auto vals = v.getValues<float>();
    bool same = true;
    for (int64_t i = row; i < t.getNumElements() && same; ++i)
      same = vals[i] == vals[i % row];
    if (!same)
      continue;
    SmallVector<int64_t> one(t.getShape());
    one[0] = 1;
    auto oneT = RankedTensorType::get(one, t.getElementType());
    std::vector<float> first(static_cast<size_t>(row));
    for (int64_t i = 0; i < row; ++i)
      first[size_t(i)] = vals[i];
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(p);
    ParamOp::create(b, p.getLoc(), p.getSymNameAttr(), TypeAttr::get(oneT), InitAttr(),
                    DenseElementsAttr::get(oneT, ArrayRef<float>(first)));
    llvm::errs() << "loomc: note: initializer '" << p.getSymName() << "' holds "
                 << t.getDimSize(0) << " equal copies of one tensor (the exporter folded an "
                 << "expand of a module tensor); training one copy, broadcast\n";
    tiles[p.getSymName()] = t;
    gone.push_back(p);
  }
  for (ParamOp p : gone)
    p.erase();
  return tiles;
}

bool Importer::normAxis(const onnx::NodeProto &n, int64_t &axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return nodeFail(n, "axis " + std::to_string(axis) + " is out of range for rank " +
                           std::to_string(rank));
  if (axis < 0)
    axis += rank;
  return true;
}

bool Importer::normAxes(const onnx::NodeProto &n, std::vector<int64_t> &axes, int64_t rank) {
  for (int64_t &a : axes)
    if (!normAxis(n, a, rank))
      return false;
  std::vector<int64_t> sorted = axes;
  llvm::sort(sorted);
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    return nodeFail(n, "repeats an axis");
  return true;
}

bool Importer::optionalConst(const onnx::NodeProto &n, int i, const Val *&out, StringRef what) {
  out = nullptr;
  if (i >= n.input_size() || n.input(i).empty())
    return true;
  if (!values.count(n.input(i)))
    return nodeFail(n, what.str() + " input '" + n.input(i) + "' is not defined");
  if (!(out = constInput(n, i)))
    return nodeFail(n, what.str() + " input '" + n.input(i) + "' does not fold to a constant");
  return true;
}

const onnx::AttributeProto *Importer::attr(const onnx::NodeProto &n, StringRef name) {
  for (const auto &a : n.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}

int64_t Importer::intAttr(const onnx::NodeProto &n, StringRef name, int64_t dflt) {
  const auto *a = attr(n, name);
  return a ? a->i() : dflt;
}

bool Importer::input(const onnx::NodeProto &n, int i, Value &out) {
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

bool Importer::isIntElem(int e) {
  using TP = onnx::TensorProto;
  return e == TP::INT8 || e == TP::UINT8 || e == TP::INT16 || e == TP::UINT16 ||
         e == TP::INT32 || e == TP::UINT32 || e == TP::INT64 || e == TP::UINT64;
}

Value Importer::materialize(const Val &c) {
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

const Val *Importer::constInput(const onnx::NodeProto &n, int i) {
  if (i >= n.input_size() || n.input(i).empty())
    return nullptr;
  auto it = values.find(n.input(i));
  return it != values.end() && it->second.isConst ? &it->second : nullptr;
}

bool Importer::allConst(const onnx::NodeProto &n) {
  for (int i = 0; i < n.input_size(); ++i)
    if (!n.input(i).empty() && !constInput(n, i))
      return false;
  return true;
}

void Importer::defineConst(const onnx::NodeProto &n, int out, Val v) {
  v.isConst = true;
  v.v = Value();
  values[n.output(out)] = std::move(v);
}

std::vector<int64_t> Importer::ints(const Val &v) {
  std::vector<int64_t> r;
  for (double x : v.data)
    r.push_back(x >= 9.2e18                  ? std::numeric_limits<int64_t>::max()
                : x <= -9.2e18 || x != x     ? std::numeric_limits<int64_t>::min()
                                             : int64_t(x));
  return r;
}

std::vector<int64_t> Importer::intsAttr(const onnx::NodeProto &n, StringRef name) {
  const auto *a = attr(n, name);
  return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end())
           : std::vector<int64_t>();
}

bool Importer::shapeOf(const onnx::NodeProto &n, int i, std::vector<int64_t> &shape) {
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

bool Importer::intInput(const onnx::NodeProto &n, int i, Value &out) {
  if (const Val *c = constInput(n, i)) {
    Val v = *c;
    v.elem = onnx::TensorProto::INT64;
    out = materialize(v);
    return true;
  }
  if (!input(n, i, out))
    return false;
  if (!tt(out).getElementType().isInteger(64))
    return nodeFail(n, notInteger(n, i, out));
  return true;
}

std::string Importer::notInteger(const onnx::NodeProto &n, int i, Value v) {
  // A float computed from a trained initializer: often a buffer (a causal
  // mask) that the export wrote as an initializer; frozen, it is a
  // constant and the comparison folds.
  std::string param =
      paramNames.contains(n.input(i)) ? n.input(i) : fromParam.lookup(n.input(i));
  return "input '" + n.input(i) + "' is " + typeStr(v.getType()) + "; " + n.op_type() +
         " on computed tensors takes integers or booleans (int64 on the device)" +
         (param.empty() ? std::string()
                        : "; it is computed from the initializer '" + param +
                              "', imported as a trained parameter: if it is a constant "
                              "buffer (a mask), give --frozen=" + param);
}

bool Importer::computedInt(const onnx::NodeProto &n) {
  for (int i = 0; i < n.input_size(); ++i)
    if (!n.input(i).empty() && !constInput(n, i))
      if (auto it = values.find(n.input(i));
          it != values.end() && it->second.v &&
          isa<RankedTensorType>(it->second.v.getType()) &&
          tt(it->second.v).getElementType().isInteger(64))
        return true;
  return false;
}

bool Importer::checkNode(const onnx::NodeProto &n) {
  const std::string &op = n.op_type();
  if (n.domain() != "" && n.domain() != "ai.onnx")
    return nodeFail(n, "operator domain '" + n.domain() + "' is not supported");
  const OnnxOp *a = findOnnxOp(op);
  if (!a)
    return nodeFail(n, "operator not supported by the ONNX importer yet");
  if (opset >= 0 && opset < a->since)
    return nodeFail(n, op + " is an operator of opset " + std::to_string(a->since) +
                           "; the model declares opset " + std::to_string(opset));
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

bool Importer::convertConstant(const onnx::NodeProto &n) {
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

bool Importer::convert(const onnx::NodeProto &n) {
  const std::string &op = n.op_type();
  if (!checkNode(n))
    return false;
  // The ops of a node carry its name, so a later error (a verifier, the
  // lowering) names the ONNX node it came from.
  loc = NameLoc::get(b.getStringAttr("onnx node '" + n.name() + "' (" + op + ")"), fileLoc);
  std::string source;
  for (const std::string &in : n.input()) {
    if (in.empty())
      continue;
    if (paramNames.contains(in))
      source = in;
    else
      source = fromParam.lookup(in);
    if (!source.empty())
      break;
  }
  for (const std::string &o : n.output()) {
    producer[o] = op;
    if (n.input_size())
      producerInput[o] = n.input(0);
    if (!source.empty())
      fromParam[o] = source;
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
  const OnnxOp *row = findOnnxOp(op); // checkNode found it
  if (!row->convert) {
    // A fold-only operator with a computed input says which.
    for (int i = 0; i < n.input_size(); ++i)
      if (!n.input(i).empty() && !constInput(n, i))
        return nodeFail(n, "operator not supported by the ONNX importer on computed "
                           "values (it folds on constants only; input '" +
                           n.input(i) + "' is computed)");
    return nodeFail(n, "operator not supported by the ONNX importer yet");
  }
  return (this->*row->convert)(n);
}

} // namespace loom::onnximport

using namespace mlir;
using namespace mlir::loom;

namespace loom {

using onnximport::Importer;

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
                    "Generated by `loomc --list-onnx-operators` from the importer's operator "
                    "table (lib/Import/Onnx/: one row per operator, in its family's file); "
                    "`ninja loom-docs` rewrites this file. Opsets 13 to 23 of the default "
                    "domain; an operator newer than the model's opset is refused. Any other "
                    "operator is an error naming the node.\n\n"
                    "| operator | since opset | inputs | outputs | imported as |\n"
                    "|---|---|---|---|---|\n";
  auto range = [](int lo, int hi) {
    return hi == onnximport::kMany ? std::to_string(lo) + "+"
           : lo == hi  ? std::to_string(lo)
                       : std::to_string(lo) + "-" + std::to_string(hi);
  };
  for (const onnximport::OnnxOp &a : onnximport::onnxOps())
    out += "| " + a.name.str() + " | " + std::to_string(a.since) + " | " +
           range(a.minIn, a.maxIn) + " | " +
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
