//===- Table.cpp - the ONNX operator table --------------------------------===//
//
// The rows of every family (Importer.h, OnnxOp), gathered once and sorted
// by name: checkNode and convert look nodes up here, fold dispatches by it,
// and `loomc --list-onnx-operators` prints it.
//
//===----------------------------------------------------------------------===//
#include "lib/Import/Onnx/Importer.h"

#include <algorithm>

namespace loom::onnximport {

ArrayRef<OnnxOp> onnxOps() {
  static const std::vector<OnnxOp> table = [] {
    std::vector<OnnxOp> t;
    for (ArrayRef<OnnxOp> family : {Importer::elementwiseOps(), Importer::shapeOps(),
                                    Importer::layerOps(), Importer::constantOps(),
                                    Importer::convOps()})
      t.insert(t.end(), family.begin(), family.end());
    std::sort(t.begin(), t.end(),
              [](const OnnxOp &a, const OnnxOp &b) { return a.name < b.name; });
    return t;
  }();
  return table;
}

const OnnxOp *findOnnxOp(StringRef op) {
  ArrayRef<OnnxOp> t = onnxOps();
  auto it = std::lower_bound(t.begin(), t.end(), op,
                             [](const OnnxOp &a, StringRef b) { return a.name < b; });
  return it != t.end() && it->name == op ? &*it : nullptr;
}

} // namespace loom::onnximport
