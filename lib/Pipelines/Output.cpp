//===- Output.cpp - what loomc writes -------------------------------------===//
//
// The IR of a phase, or the training program's C++ (several plans' with
// --replan), compiled into a binary, with the imported weights and the
// fused kernels' sources beside it.
//
//===----------------------------------------------------------------------===//
#include "Planning.h"

#include "loom/Support/Files.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace loom {

/// The generated kernels of the module's fused regions, beside the C++
/// source `cpp` as CPP.kernels.cu (none: no file). The binary does not
/// need the file (the runtime generates the same text and compiles it with
/// NVRTC); it is there to be read, and compiled offline.
static LogicalResult writeFusedKernels(ModuleOp module, const std::string &cpp,
                                       std::string &err) {
  std::string text;
  llvm::raw_string_ostream os(text);
  if (!emitFusedKernels(module, os))
    return success();
  std::unique_ptr<llvm::raw_fd_ostream> f = ::loom::openOutputNoFollow(cpp + ".kernels.cu", err);
  if (!f)
    return failure();
  *f << "// The fused elementwise regions of " << llvm::sys::path::filename(cpp)
          << " (loom-fuse), one kernel each: the text the runtime compiles\n"
             "// with NVRTC. Offline: nvcc -c -I<loom>/runtime, or clang -x hip.\n\n"
          << text;
  return success();
}

/// The C++ of the binary: one program, or with --replan each plan in its
/// namespace and the main that hands them to the driver.
static LogicalResult emitCpp(ModuleOp module, llvm::raw_ostream &os, const CodegenOptions &cg,
                             const ReplanPlans *replan) {
  if (!replan)
    return emitTrainingCpp(module, os, cg);
  for (size_t k = 0; k < replan->table.namespaces.size(); ++k) {
    CodegenOptions ck = cg;
    ck.programNamespace = replan->table.namespaces[k];
    ck.header = k == 0;
    // Each plan was made for the description's CPU rates times its factor.
    ck.plannedCpuAdamRate = cg.plannedCpuAdamRate * replan->madeFor[k];
    if (cg.predictedDeviceBytes > 0)
      ck.predictedDeviceBytes = int64_t(replan->peakDeviceBytes[k]);
    if (failed(emitTrainingCpp(k == 0 ? module : *replan->modules[k - 1], os, ck)))
      return failure();
  }
  emitReplanMain(os, replan->table);
  return success();
}

/// The C++ of a pipeline's binary: each stage's program in namespace
/// stageK, then the main that hands them to the driver.
static LogicalResult emitStagesCpp(ArrayRef<ModuleOp> stages, ArrayRef<int64_t> peaks,
                                   llvm::raw_ostream &os, const CodegenOptions &cg) {
  std::vector<std::string> namespaces;
  for (auto [k, m] : llvm::enumerate(stages)) {
    CodegenOptions ck = cg;
    ck.programNamespace = "stage" + std::to_string(k);
    ck.header = k == 0;
    ck.predictedDeviceBytes = k < peaks.size() ? peaks[k] : 0;
    if (failed(emitTrainingCpp(m, os, ck)))
      return failure();
    namespaces.push_back(ck.programNamespace);
  }
  emitPipelineMain(os, namespaces);
  return success();
}

int writeStagesOutput(ArrayRef<ModuleOp> stages, ArrayRef<int64_t> peaks, Phase phase,
                      const std::string &output, const std::string &emitDir, CodegenOptions &cg) {
  if (phase >= Phase::Cpp)
    return writeOutput(stages.front(), phase, output, emitDir, cg, nullptr, stages, peaks);
  std::string err;
  std::unique_ptr<llvm::raw_fd_ostream> out = ::loom::openOutputNoFollow(output, err);
  if (!out)
    return loomcError(err);
  for (auto [k, m] : llvm::enumerate(stages)) {
    if (k)
      *out << "\n// -----\n\n";
    m->print(*out);
  }
  return 0;
}

int writeOutput(ModuleOp module, Phase phase, const std::string &output,
                const std::string &emitDir, CodegenOptions &cg, const ReplanPlans *replan,
                ArrayRef<ModuleOp> stages, ArrayRef<int64_t> peaks) {
  // A pipeline's stages: one program each, one binary.
  auto emit = [&](llvm::raw_ostream &os) {
    return stages.empty() ? emitCpp(module, os, cg, replan) : emitStagesCpp(stages, peaks, os, cg);
  };
  std::string err;
  // Imported values go to a safetensors file beside the output: the binary
  // finds it by its name next to the executable; sources written with -o
  // name it by absolute path.
  if (phase >= Phase::Cpp && output != "-") {
    llvm::SmallString<256> dir(output);
    llvm::sys::path::remove_filename(dir);
    if (!dir.empty() && !llvm::sys::fs::is_directory(dir))
      return loomcError("cannot write '" + output + "': folder '" + dir.str().str() +
                   "' does not exist");
  }
  if (phase >= Phase::Cpp && hasImportedWeights(module) && output != "-") {
    llvm::SmallString<256> weights(output + ".weights.safetensors");
    if (phase == Phase::Cpp)
      llvm::sys::fs::make_absolute(weights);
    if (failed(writeInitialWeights(module, weights.str().str())))
      return 1;
    cg.weightsFile = phase == Phase::Cpp ? weights.str().str()
                                          : llvm::sys::path::filename(weights).str();
  }
  if (phase == Phase::Binary) {
    llvm::SmallString<128> cpp;
    if (!emitDir.empty()) {
      if (std::error_code ec = llvm::sys::fs::create_directories(emitDir))
        return loomcError("cannot create '" + emitDir + "': " + ec.message());
      cpp = emitDir;
      llvm::sys::path::append(cpp, "train.cpp");
    } else if (std::error_code ec =
                   llvm::sys::fs::createTemporaryFile("loomc", "cpp", cpp)) {
      return loomcError("cannot create a temporary file: " + ec.message());
    }
    // --emit-dir's train.cpp is never written through a planted link.
    std::unique_ptr<llvm::raw_fd_ostream> src = ::loom::openOutputNoFollow(cpp.str().str(), err);
    if (!src)
      return loomcError(err);
    if (failed(emit(*src)))
      return 1;
    src->close();
    if (!emitDir.empty() && failed(writeFusedKernels(module, cpp.str().str(), err)))
      return loomcError(err);
    bool ok = compileTrainingBinary(cpp.str().str(), output, cg.runtimeDir, err);
    // The temporary source goes, built or not (--emit-dir keeps it).
    if (emitDir.empty())
      llvm::sys::fs::remove(cpp);
    if (!ok)
      return loomcError(err + (emitDir.empty() ? "\n(that temporary source is removed; "
                                            "--emit-dir=DIR keeps the generated source)"
                                          : ""));
    return 0;
  }
  std::unique_ptr<llvm::raw_fd_ostream> out = ::loom::openOutputNoFollow(output, err);
  if (!out)
    return loomcError(err);
  if (phase == Phase::Cpp) {
    if (failed(emit(*out)))
      return 1;
    if (output != "-" && failed(writeFusedKernels(module, output, err)))
      return loomcError(err);
  } else {
    module->print(*out);
  }
  return 0;
}

} // namespace loom
