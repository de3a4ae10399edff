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

/// One line per family with its keys and defaults, for --help.
std::string modelSpecHelp();

} // namespace loom

#endif // LOOM_IMPORT_H
