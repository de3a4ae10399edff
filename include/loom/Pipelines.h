//===- Pipelines.h - the compiler's phases, as an API ---------------------===//
//
// loomc is phase-ordered: each phase is a pipeline over the loom IR, and
// `--compile-to=<phase>` stops after it and prints the IR. The phases, in
// order, and what exists today (2026-11-26):
//
//   import     model file or --model generator -> forward graph + loss  [built]
//   autodiff   backward graph and gradients (loom-autodiff)             [built]
//   optimizer  optimizer state and @train_step (loom-attach-optimizer)   [built]
//   distribute data parallelism, ZeRO partitioning, topology            [built]
//   schedule   subgroups, offload, stream schedule                      [built]
//   lowered    loomrt runtime calls (loom-lower-to-runtime)             [built]
//   cpp        C++ source (lib/Codegen)                                 [built]
//   binary     executable linked with the runtime                       [built]
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_PIPELINES_H
#define LOOM_PIPELINES_H

#include "llvm/ADT/StringRef.h"

#include <optional>

namespace loom {

enum class Phase {
  Import,
  Autodiff,
  Optimizer,
  Distribute,
  Schedule,
  Lowered,
  Cpp,
  Binary
};

std::optional<Phase> parsePhase(llvm::StringRef name);
llvm::StringRef phaseName(Phase p);
/// The last phase this build of the compiler implements.
Phase lastImplementedPhase();

/// loomc's whole command line; returns the process exit code.
int loomcMain(int argc, char **argv);

} // namespace loom

#endif // LOOM_PIPELINES_H
