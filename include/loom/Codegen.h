//===- Codegen.h - loom IR to a training binary ---------------------------===//
//
// The `cpp` and `binary` phases: a training step in the loom dialect becomes
// C++ source that calls the runtime (one call per op, the same calls the
// reference executor makes) and a `loomrt_program` description handed to
// the runtime's driver (flags, data, checkpoints); the host C++ compiler then
// links it with libloomrt.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_CODEGEN_H
#define LOOM_CODEGEN_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace mlir::loom {
class ParamOp;
} // namespace mlir::loom

namespace loom {

struct CodegenOptions {
  std::string target = "cpu"; // cpu | cuda | hip
  std::string model;          // shown by the binary's --help
  /// Name of the safetensors file holding imported parameter values, as the
  /// binary looks for it (relative: beside the executable). Required when
  /// the module has parameters with values.
  std::string weightsFile;
  /// The folder of the libloomrt.so the binary links (defaultRuntimeDir).
  std::string runtimeDir;
  /// loomc --device-memory (bytes; 0: none): the binary holds the rest of a
  /// larger card back (loomrt_program.device_memory_bytes).
  int64_t deviceMemoryBytes = 0;
  /// The cost model's predicted peak device bytes of the step (0: not
  /// predicted), which the binary checks against what the cap leaves.
  int64_t predictedDeviceBytes = 0;
  /// The CPU Adam rate the plan assumed (parameters a second; 0: not
  /// planned), which the binary compares with the rate it measures.
  double plannedCpuAdamRate = 0;
  /// loomc --replan: the program emitted as `NAME::program()` in namespace
  /// NAME, with no main (emitReplanMain writes it); the header (includes,
  /// macros) only when `header`.
  std::string programNamespace;
  bool header = true;
};

/// loomc --replan's table: the mode (1 once, 2 continuous), each plan's
/// namespace and description, the host-rate factors and the predicted step
/// of each plan at each factor (seconds, [plan * factors + factor]), and the
/// description's CPU Adam rate (factor 1).
struct ReplanTable {
  int mode = 1;
  std::vector<std::string> namespaces, plans;
  std::vector<double> factors, predicted;
  double nominalCpuAdamRate = 0;
};

/// The main of a --replan binary: its plans (emitted with programNamespace
/// set) and their predictions, handed to loomrt_train_main.
void emitReplanMain(llvm::raw_ostream &os, const ReplanTable &t);

/// The main of a --pipeline-parallel binary: the stages' programs (each
/// emitted with programNamespace set, in stage order) handed to
/// loomrt_train_main, which runs the rank's.
void emitPipelineMain(llvm::raw_ostream &os, llvm::ArrayRef<std::string> namespaces);

/// This build's runtime for `target`: build/runtime for cpu and cuda,
/// build/runtime-hip (scripts/build-hip.sh) for hip.
std::string defaultRuntimeDir(llvm::StringRef target);

/// Generated C++ text from arbitrary bytes (names from a model file, paths):
/// every name and path reaches the generated source through one of these.
/// A string literal, quotes included, that holds exactly `bytes`.
std::string cppStringLiteral(llvm::StringRef bytes);
/// A valid C++ identifier `prefix` + an injective encoding of `name`.
std::string cppIdentifier(llvm::StringRef prefix, llvm::StringRef name);
/// `text` made safe inside a `//` comment (no newline, no line splice).
std::string cppComment(llvm::StringRef text);

/// Whether the parameter's imported value is one number repeated: the
/// binary fills it in, and the weights file does not hold it.
bool isSplatValue(mlir::loom::ParamOp p);

/// Whether some parameter carries imported values that are not splats
/// (then the binary needs writeInitialWeights' file).
bool hasImportedWeights(mlir::ModuleOp module);

/// Writes the imported parameter values to `path` as safetensors (the
/// runtime's checkpoint format), under the parameters' names.
mlir::LogicalResult writeInitialWeights(mlir::ModuleOp module,
                                        const std::string &path);

/// Emits the C++ source of the training binary of @train_step. Unsupported
/// IR is reported as diagnostics on the offending op.
mlir::LogicalResult emitTrainingCpp(mlir::ModuleOp module,
                                    llvm::raw_ostream &os,
                                    const CodegenOptions &options);

/// Writes the generated kernel of every `loomrt.fused_elementwise` region in
/// `module` (loomrt_fused_source's single-source CUDA/HIP text, the one the
/// runtime compiles with NVRTC) to `os`; returns how many. The text
/// compiles with nvcc or clang -x hip given the runtime's folder
/// (`-I runtime`), for its header common/kernel_math.h.
int64_t emitFusedKernels(mlir::ModuleOp module, llvm::raw_ostream &os);

/// Compiles `cppPath` into the executable `output` with the host C++
/// compiler ($CXX, else c++), linking the runtime in `runtimeDir`. On
/// failure returns false with the compiler's own message in `error`.
bool compileTrainingBinary(const std::string &cppPath, const std::string &output,
                           const std::string &runtimeDir, std::string &error);

} // namespace loom

#endif // LOOM_CODEGEN_H
