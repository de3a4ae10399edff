//===- fuzz_onnx.cpp - the ONNX importer on arbitrary bytes ---------------===//
//
// Two targets from this file: fuzz-onnx-bytes mutates the serialized bytes
// (libFuzzer's own mutations), fuzz-onnx-proto (LOOM_FUZZ_STRUCTURED)
// parses each input as a ModelProto and mutates its structure: operator
// types, arities, attribute values, shapes, element types, data sizes,
// names and node order, the things a crafted model changes. Every model
// the importer accepts goes on through the compiler (FuzzCommon.h).
//
//===----------------------------------------------------------------------===//
#include "FuzzCommon.h"
#include "loom/Import.h"

#include <onnx/onnx_pb.h>

#include <cstdlib>
#include <random>
#include <string>
#include <unistd.h>

namespace {
/// External data is looked for beside the "model": an empty folder of ours.
std::string modelPath() {
  static std::string path = [] {
    char dir[] = "/tmp/loom-fuzz-onnx-XXXXXX";
    const char *made = mkdtemp(dir);
    return std::string(made ? made : "/tmp") + "/model.onnx";
  }();
  return path;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  loom::fuzz::Context c;
  std::string error;
  auto module = loom::importOnnxBytes(c.ctx, llvm::StringRef((const char *)data, size),
                                      modelPath(), {}, error);
  if (module)
    loom::fuzz::compileRest(*module);
  return 0;
}

#ifdef LOOM_FUZZ_STRUCTURED
extern "C" size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t maxSize);

namespace {
using Rng = std::mt19937;

const char *const kOps[] = {
    "Add", "Sub", "Mul", "Div", "Pow", "MatMul", "Gemm", "Relu", "Tanh", "Sigmoid", "Erf",
    "Exp", "Log", "Sqrt", "Neg", "Reciprocal", "Identity", "Softmax", "LogSoftmax",
    "Transpose", "Shape", "Gather", "LayerNormalization", "Reshape", "Split", "Where",
    "Unsqueeze", "Squeeze", "Concat", "ReduceMean", "ReduceSum", "Slice", "Cast", "Trilu",
    "Range", "ConstantOfShape", "Constant", "Equal", "Less", "Not", "Expand", "Pad"};

int64_t interesting(Rng &r) {
  static const int64_t v[] = {0, 1, 2, 3, -1, -2, 7, 64, 1 << 20, int64_t(1) << 32,
                              INT64_MAX, INT64_MIN, -(int64_t(1) << 40)};
  return r() % 3 ? int64_t(r() % 9) - 2 : v[r() % (sizeof v / sizeof v[0])];
}

/// A name that exists in the graph (or a fresh one), so mutations rewire
/// the graph instead of only breaking references.
std::string someName(const onnx::GraphProto &g, Rng &r) {
  int pick = int(r() % 4);
  if (pick == 0 && g.node_size()) {
    const auto &n = g.node(int(r() % g.node_size()));
    if (n.output_size())
      return n.output(int(r() % n.output_size()));
  }
  if (pick == 1 && g.initializer_size())
    return g.initializer(int(r() % g.initializer_size())).name();
  if (pick == 2 && g.input_size())
    return g.input(int(r() % g.input_size())).name();
  return r() % 2 ? "" : "fresh" + std::to_string(r() % 4);
}

void mutateString(std::string &s, Rng &r) {
  std::string buf = s;
  buf.resize(s.size() + 16);
  size_t n = LLVMFuzzerMutate(reinterpret_cast<uint8_t *>(buf.data()), s.size(), buf.size());
  s = buf.substr(0, n);
  (void)r;
}

void mutateTensor(onnx::TensorProto &t, Rng &r) {
  switch (r() % 6) {
  case 0:
    if (t.dims_size() && r() % 2)
      t.set_dims(int(r() % t.dims_size()), interesting(r));
    else
      t.add_dims(interesting(r));
    break;
  case 1:
    if (t.dims_size())
      t.mutable_dims()->RemoveLast();
    break;
  case 2: {
    static const int types[] = {1, 7, 9, 10, 11, 16, 6, 0, 99};
    t.set_data_type(types[r() % 9]);
    break;
  }
  case 3:
    if (!t.raw_data().empty())
      t.mutable_raw_data()->resize(size_t(r() % (t.raw_data().size() + 9)));
    else if (t.float_data_size())
      t.mutable_float_data()->RemoveLast();
    else if (t.int64_data_size())
      t.mutable_int64_data()->RemoveLast();
    else
      t.add_int64_data(interesting(r));
    break;
  case 4:
    t.set_data_location(onnx::TensorProto::EXTERNAL);
    t.clear_external_data();
    for (const char *k : {"location", "offset", "length"})
      if (r() % 2) {
        auto *kv = t.add_external_data();
        kv->set_key(k);
        kv->set_value(k[0] == 'l' && k[1] == 'o'
                          ? (r() % 2 ? "../etc/passwd" : "w.bin")
                          : std::to_string(interesting(r)));
      }
    break;
  default:
    mutateString(*t.mutable_name(), r);
  }
}

void mutateNode(onnx::GraphProto &g, onnx::NodeProto &n, Rng &r) {
  switch (r() % 7) {
  case 0:
    n.set_op_type(kOps[r() % (sizeof kOps / sizeof kOps[0])]);
    break;
  case 1:
    if (n.input_size() && r() % 2)
      n.mutable_input()->RemoveLast();
    else
      n.add_input(someName(g, r));
    break;
  case 2:
    if (n.input_size())
      n.set_input(int(r() % n.input_size()), someName(g, r));
    break;
  case 3:
    if (n.output_size() && r() % 2)
      n.mutable_output()->RemoveLast();
    else
      n.add_output(r() % 2 ? someName(g, r) : "out" + std::to_string(r() % 8));
    break;
  case 4: {
    static const char *const names[] = {"axis", "axes", "perm", "to", "upper", "keepdims",
                                        "transA", "transB", "split", "epsilon", "alpha"};
    onnx::AttributeProto *a = n.attribute_size() && r() % 2
                                  ? n.mutable_attribute(int(r() % n.attribute_size()))
                                  : n.add_attribute();
    if (a->name().empty())
      a->set_name(names[r() % (sizeof names / sizeof names[0])]);
    if (r() % 2) {
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(interesting(r));
    } else {
      a->set_type(onnx::AttributeProto::INTS);
      a->clear_ints();
      for (unsigned k = r() % 5; k; --k)
        a->add_ints(interesting(r));
    }
    break;
  }
  case 5:
    for (auto &a : *n.mutable_attribute())
      if (a.has_t())
        mutateTensor(*a.mutable_t(), r);
    break;
  default:
    n.set_domain(r() % 4 ? "" : "com.microsoft");
  }
}

void mutateModel(onnx::ModelProto &m, Rng &r) {
  onnx::GraphProto &g = *m.mutable_graph();
  switch (r() % 8) {
  case 0:
  case 1:
  case 2:
    if (g.node_size())
      mutateNode(g, *g.mutable_node(int(r() % g.node_size())), r);
    break;
  case 3:
    if (g.initializer_size())
      mutateTensor(*g.mutable_initializer(int(r() % g.initializer_size())), r);
    break;
  case 4:
    if (g.node_size() > 1) {
      int i = int(r() % g.node_size()), j = int(r() % g.node_size());
      g.mutable_node()->SwapElements(i, j);
    }
    break;
  case 5:
    if (g.node_size() && r() % 2)
      g.mutable_node()->DeleteSubrange(int(r() % g.node_size()), 1);
    else if (g.node_size())
      *g.add_node() = g.node(int(r() % g.node_size()));
    break;
  case 6:
    if (g.input_size()) {
      auto *shape = g.mutable_input(int(r() % g.input_size()))
                        ->mutable_type()
                        ->mutable_tensor_type()
                        ->mutable_shape();
      if (shape->dim_size() && r() % 2)
        shape->mutable_dim(int(r() % shape->dim_size()))->set_dim_value(interesting(r));
      else
        shape->add_dim()->set_dim_value(interesting(r));
    }
    break;
  default:
    if (m.opset_import_size())
      m.mutable_opset_import(0)->set_version(r() % 3 ? 13 + int64_t(r() % 12) : interesting(r));
  }
}
} // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t maxSize,
                                          unsigned int seed) {
  Rng r(seed);
  onnx::ModelProto m;
  // A few byte-level mutations keep the fuzzer off a structural plateau
  // (and are all inputs that do not parse get).
  if (r() % 8 == 0 || !m.ParseFromArray(data, int(size)))
    return LLVMFuzzerMutate(data, size, maxSize);
  for (unsigned k = 1 + r() % 3; k; --k)
    mutateModel(m, r);
  std::string out;
  if (!m.SerializeToString(&out) || out.size() > maxSize)
    return LLVMFuzzerMutate(data, size, maxSize);
  std::memcpy(data, out.data(), out.size());
  return out.size();
}
#endif
