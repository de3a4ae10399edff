//===- Import.h - models into loom IR -------------------------------------===//
//
// Built-in model generators (`--model gpt:...`, `llama:...`, `mlp:...`) that
// build the forward graph and loss an exported model would give, without a
// file, so benchmarks can use models of billions of parameters.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_IMPORT_H
#define LOOM_IMPORT_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringRef.h"

#include <string>

namespace loom {

/// Builds the module for `spec` ("gpt:layers=2,d_model=64,..."). On a bad
/// spec returns null and sets `error` to a one-line message naming the key
/// and what was expected.
mlir::OwningOpRef<mlir::ModuleOp> generateModel(mlir::MLIRContext &ctx,
                                                llvm::StringRef spec,
                                                std::string &error);

/// How an ONNX model is imported (loomc's flags).
struct OnnxImportOptions {
  /// "lm" or "classify" overrides the inference from the input ("": infer).
  std::string task;
  /// Initializers that become constants instead of trained parameters
  /// (PyTorch buffers: rotary tables, masks).
  std::vector<std::string> frozen;
  /// Dropout in training mode imports as the identity (--dropout=off)
  /// instead of loom.dropout.
  bool dropoutOff = false;
  /// false (loomc --init=random): float parameters kept in external data
  /// are declared from their shapes and drawn from their initialisers; the
  /// data files are not read, so a graph exported without them (a model
  /// too large to copy) can be compiled and benchmarked.
  bool weightValues = true;
};

/// Imports an ONNX model (static shapes) and appends the loss: next-token
/// cross-entropy for language models (int64 [B, T] input), cross-entropy
/// against labels for classifiers. On failure returns null with a message
/// naming the node.
mlir::OwningOpRef<mlir::ModuleOp> importOnnx(mlir::MLIRContext &ctx, llvm::StringRef path,
                                             const OnnxImportOptions &options,
                                             std::string &error);
/// The operators the importer takes, as a Markdown table (loomc
/// --list-onnx-operators; docs/generated/onnx-operators.md).
std::string onnxOperatorTable();
/// The same for a serialized ModelProto already in memory; `path` names it
/// in locations, and its folder is where external data is looked for.
mlir::OwningOpRef<mlir::ModuleOp> importOnnxBytes(mlir::MLIRContext &ctx, llvm::StringRef bytes,
                                                  llvm::StringRef path,
                                                  const OnnxImportOptions &options,
                                                  std::string &error);

/// Data parallelism over `ranks`, each rank's rows in `microBatches`:
/// rewrites a generator spec so its batch (given or default) is one
/// micro-batch, batch / ranks / microBatches. False with a message when the
/// spec is bad or the batch does not divide.
bool splitSpecBatch(std::string &spec, int64_t ranks, std::string &error,
                    int64_t microBatches = 1);

/// One line per family with its keys and defaults, for --help.
std::string modelSpecHelp();

} // namespace loom

#endif // LOOM_IMPORT_H
