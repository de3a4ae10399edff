//===- InitAll.h - register every Loom dialect and pass -------------------===//
#ifndef LOOM_INITALL_H
#define LOOM_INITALL_H

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace loom {
/// The dialects a Loom module may contain: loom plus the upstream dialects
/// it builds on (func, arith, tensor).
void registerAllDialects(mlir::DialectRegistry &registry);
/// Every Loom pass (and the upstream passes Loom pipelines use).
void registerAllPasses();
/// What a crash prints above its stack trace: a bug in Loom, to be reported
/// to Loom (LLVM's default asks for a report to llvm-project).
void installCrashMessage();
} // namespace loom

#endif // LOOM_INITALL_H
