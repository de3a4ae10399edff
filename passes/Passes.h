//===- Passes.h - Loom pass declarations and registration -----------------===//
#ifndef LOOM_PASSES_PASSES_H
#define LOOM_PASSES_PASSES_H

#include "dialects/Loom/LoomOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::loom {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

/// Whether the module's functions are lowered to loomrt (no tensor in a
/// signature, no loom op in a body): loom-lower-to-runtime's output.
bool isLoweredToRuntime(ModuleOp module);

/// The scratch bytes the runtime takes for a loom.attention (or its
/// gradient): loomrt_attention_workspace_bytes of its shapes. The lowering
/// allocates it; the step simulation places it in the arena.
size_t attentionWorkspaceBytes(Operation *attentionOp);

} // namespace mlir::loom

#endif // LOOM_PASSES_PASSES_H
