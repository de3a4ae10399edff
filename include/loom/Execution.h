//===- Execution.h - run loom IR on the runtime ---------------------------===//
//
// A reference executor: walks a function of loom IR and runs each op with
// the runtime's kernels (CPU backend by default), holding parameters and
// state between calls. It is how the compiler's passes are checked
// numerically (autodiff against PyTorch) before code generation exists, and
// the model the generated code must agree with.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_EXECUTION_H
#define LOOM_EXECUTION_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace loom {

/// A host tensor: dtype name as in safetensors ("F32", "BF16", "I64",
/// "BOOL"), shape, raw little-endian bytes.
struct HostTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

class Executor {
public:
  /// Opens the CPU backend (or `backend` = "cuda").
  static std::unique_ptr<Executor> create(mlir::ModuleOp module,
                                          llvm::StringRef backend,
                                          std::string &error);
  virtual ~Executor();

  /// Initialises every loom.param and loom.state from its initialiser (or
  /// imported value), drawing random ones from `seed`.
  virtual bool initParams(uint64_t seed, std::string &error) = 0;
  /// Replaces parameter values with those in `tensors` (by name).
  virtual bool setParams(const std::vector<HostTensor> &tensors,
                         std::string &error) = 0;
  virtual std::vector<HostTensor> getParams() = 0;

  /// Runs @function on `args` (in order) and returns its results.
  virtual bool run(llvm::StringRef function,
                   const std::vector<HostTensor> &args,
                   std::vector<HostTensor> &results, std::string &error) = 0;
};

} // namespace loom

#endif // LOOM_EXECUTION_H
